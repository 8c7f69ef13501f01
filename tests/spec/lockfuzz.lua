-- lockfuzz: the harness the LOCK.* fuzz specs share (lock_fuzz,
-- lock_left_fuzz, hook_pairs_fuzz, clock_fuzz): the lock modes and the
-- README's LOCK.* errors; a run (H.class, H.new) with its step log, its
-- defects and their report; commands as tasks; time passing over
-- disconnects; sessions ended; the client model of holds (beliefs) and
-- of tokens; the end-of-run checks that nothing is left behind; and the
-- seeds of a spec (PREFIX_SEEDS=17,42 replays those, PREFIX_N=200 sweeps
-- 1..N, PREFIX_QUIET=1 leaves the step log out of a failure).
--
-- What a spec schedules, and what it believes of each reply, stays its
-- own: its run class's step, finish and reply handlers, and its settle
-- (checks after each piece of time) and check (after the end).

local S = require "world"
local census = require "census"

local H = {}

---------------------------------------------------------------------------
-- Lock modes and the README's errors.

H.MODES = { "NL", "CR", "CW", "PR", "PW", "EX" }
H.COMPAT = {
    NL = { NL = true, CR = true, CW = true, PR = true, PW = true, EX = true },
    CR = { NL = true, CR = true, CW = true, PR = true, PW = true },
    CW = { NL = true, CR = true, CW = true },
    PR = { NL = true, CR = true, PR = true },
    PW = { NL = true, CR = true },
    EX = { NL = true },
}

function H.conflict(m1, m2) return not H.COMPAT[m1][m2] end

-- Whether mode m1 is weaker than m2 (held beside everything m2 is, and more).
function H.weaker(m1, m2)
    if m1 == m2 then return false end
    for m in pairs(H.COMPAT[m2]) do if not H.COMPAT[m1][m] then return false end end
    return true
end

function H.is_token(r) return math.type(r) == "integer" end

-- The README's error texts (prefixes) for LOCK.*.
H.ALLOWED_ERR = {
    "^TRYAGAIN ", "^UNBLOCKED client unblocked via CLIENT UNBLOCK",
    "^ERR owner '.*' already waits for this lock", "^ERR owner holds this lock in mode %u+; use LOCK.CONVERT",
    "^ERR owner holds no lock on this key %(LOCK.ACQUIRE first%)",
    "^ERR owner's conversion of this lock is already waiting",
    "^ERR owner's hold of this lock ended while its conversion waited",
}

function H.allowed_err(e)
    for _, p in ipairs(H.ALLOWED_ERR) do if e:find(p) then return true end end
    return false
end

---------------------------------------------------------------------------
-- Seeds.

-- 1..n, then the seeds in extra.
function H.seed_list(n, extra)
    local out = {}
    for i = 1, n do out[i] = i end
    for _, s in ipairs(extra or {}) do out[#out + 1] = s end
    return out
end

-- The seeds PREFIX_SEEDS lists, or 1..PREFIX_N, or else the defaults.
function H.seeds(prefix, defaults)
    local out = {}
    local s = os.getenv(prefix .. "_SEEDS")
    if s then
        for n in s:gmatch("%d+") do out[#out + 1] = tonumber(n) end
    else
        local n = tonumber(os.getenv(prefix .. "_N") or "")
        if n then out = H.seed_list(n) end
    end
    if #out > 0 then return out end
    return defaults
end

-- An `it` body: fails with the message failure() answers, if any (cut
-- before its step log when PREFIX_QUIET is set).
function H.case(prefix, failure)
    return function()
        local msg = failure()
        if msg then
            if os.getenv(prefix .. "_QUIET") then msg = msg:sub(1, msg:find("\n%-%- step log") or #msg) end
            error(msg, 0)
        end
    end
end

---------------------------------------------------------------------------
-- A run.

local Run = {}
Run.__index = Run
H.Run = Run

-- A spec's run class: its own methods over Run's.
function H.class()
    local C = setmetatable({}, { __index = Run })
    C.__index = C
    return C
end

-- A run of class C with seed over world W's sidecars scs: fields (the
-- spec's own), and the shared ones; tables: census.sizes' list of the
-- per-key tables that must come back to their size, measured now.
function H.new(C, seed, W, scs, fields, tables)
    local F = setmetatable(fields or {}, C)
    F.seed, F.W, F.scs = seed, W, scs
    F.log, F.bad, F.disc, F.beliefs, F.grants = {}, {}, {}, {}, {}
    F.next_id = F.next_id or 100
    F.tables = tables
    if tables then
        F.base = {}
        for i, sc in ipairs(scs) do F.base[i] = census.sizes(sc, tables) end
    end
    return F
end

function Run:note(fmt, ...)
    self.log[#self.log + 1] = string.format("%6d ", self.W.now) .. string.format(fmt, ...)
end

function Run:defect(fmt, ...)
    local s = string.format("t=%d ", self.W.now) .. string.format(fmt, ...)
    self.log[#self.log + 1] = "       !! " .. s
    self.bad[#self.bad + 1] = s
end

-- Its steps, then its end (self:finish, then self:check if it has one); a
-- Lua error is a defect.
function Run:play(steps)
    local ok, err = pcall(function()
        for _ = 1, steps do self:step() end
        self:finish()
        if self.check then self:check() end
    end)
    if not ok then self.bad[#self.bad + 1] = "Lua error: " .. tostring(err) end
    return self
end

-- The failure message (its defects and the step log), or nil.
function Run:report()
    if #self.bad == 0 then return nil end
    return string.format("seed %d: %d defect(s):\n  %s\n-- step log:\n%s", self.seed, #self.bad,
        table.concat(self.bad, "\n  "), table.concat(self.log, "\n"))
end

---------------------------------------------------------------------------
-- Commands.

-- A new client connection's id.
function Run:new_client()
    self.next_id = self.next_id + 1
    return self.next_id
end

-- Sends args through sidecar p.si as a task of client p.client, named
-- p.who in the log (p.label for args there); p gets kind (args[1] unless
-- given), key (args[2] unless given), t0, cut (its sidecar cut off),
-- task, and r (the reply).  Once dispatched, after(r, p), if given,
-- answered or not; once answered (its client not gone), a -ERR that
-- self.err_ok (by default H.allowed_err) refuses is a defect, then
-- on_reply(r, p).
function Run:issue(p, args, on_reply, after)
    local sc = self.scs[p.si]
    local M = sc.M
    p.kind, p.key = p.kind or args[1], p.key or args[2]
    p.t0, p.cut = self.W.now, not sc.connected
    local me = self
    p.task = self.W:spawn(sc, function()
        local r = M.dispatch(args)
        if after then after(r, p) end
        if p.task.gone then
            me:note("%s %s %s: (client gone) %s", p.who, p.kind, p.key, S.show(r))
        else
            me:note("%s %s %s -> %s", p.who, p.kind, p.key, S.show(r))
            if type(r) == "table" and r.err and not (me.err_ok or H.allowed_err)(r.err) then
                me:defect("%s %s answered %s", p.who, p.label or table.concat(args, " "), r.err)
            end
            on_reply(r, p)
        end
        p.r = r
        return r
    end)
    p.task.client = p.client
    self:note("%s@%d %s", p.who, p.si, p.label or table.concat(args, " "))
    return p
end

-- p's client goes: its command runs on, its reply to nobody.
function Run:client_goes(p)
    self:note("%s's client goes (its %s %s)", p.who, p.kind, p.key)
    self.scs[p.si]:abandon(p.task)
end

-- CLIENT UNBLOCK of p's command (blocked), how: "timeout" or "error";
-- p.task.unblocked then.
function Run:unblock(p, how)
    self:note("CLIENT UNBLOCK %s %s", p.who, how)
    p.task.unblocked = true
    self.scs[p.si]:unblock(p.task, how)
end

-- Sends with send() (which answers its p) until one is answered 0, n
-- times at most; after(p), if given, once each is answered.
function Run:drain(n, send, after)
    for _ = 1, n do
        local p = send()
        self.W:run_until(function() return p.task.done end)
        if after then after(p) end
        if p.task.result == 0 then break end
    end
end

---------------------------------------------------------------------------
-- Faults and time.

function Run:clear_faults()
    for _, sc in ipairs(self.scs) do sc.faults = {} end
end

-- Sidecar i cut off for dur ms (its watch events held for the reconnect
-- when hold); self:advance reconnects it.
function Run:disconnect(i, dur, hold)
    self:note("sidecar %d disconnects for %d ms%s", i, dur, hold and " (events held)" or "")
    self.scs[i]:disconnect(hold and { hold_events = true } or nil)
    self.disc[i] = self.W.now + dur
end

-- A sidecar drawn by r (an S.prng) cut off for ms drawn from durs, its
-- events held or not (drawn), unless it is already: its index, or nil.
function Run:cut_off_one(r, durs)
    local i = r.int(1, #self.scs)
    if not self.scs[i].connected or self.disc[i] then return nil end
    self:disconnect(i, r.pick(durs), r.chance(0.5))
    return i
end

-- Sidecar i's session ends, how: "expire" (ZooKeeper expires it), "lose"
-- (the sidecar gives it up; the old one lives on, the spec's to end) or
-- "lose-expire" (given up, and expired).  Answers what sc:lose does.
function Run:end_session(i, how)
    local sc = self.scs[i]
    self.disc[i] = nil
    self:note("sidecar %d: session %s", i, how)
    if how == "expire" then return sc:expire() end
    return sc:lose({ expire_old = how == "lose-expire" })
end

-- Time passes in pieces, each sidecar reconnecting when its disconnect
-- ends; self:settle (the spec's checks), if any, after each piece.
function Run:advance(ms)
    local W = self.W
    local target = W.now + ms
    repeat
        local next_t = target
        for _, t in pairs(self.disc) do if t < next_t then next_t = t end end
        W:advance(math.max(0, next_t - W.now))
        for i, t in pairs(self.disc) do
            if t <= W.now then
                self.disc[i] = nil
                self:note("sidecar %d reconnects", i)
                self.scs[i]:reconnect()
            end
        end
        if self.settle then self:settle() end
    until W.now >= target
end

-- The end begins: every disconnect ends now.
function Run:reconnect_all()
    for i in pairs(self.disc) do self.disc[i] = self.W.now end
    self:advance(0)
end

---------------------------------------------------------------------------
-- The client model: beliefs and tokens.

-- owner believes it holds key in mode with token, from now to `to` (its
-- lease; Run:unbelieve ends it sooner).  A belief of another owner in a
-- conflicting mode that runs now is a defect: two holders.
function Run:believe(owner, key, mode, token, to)
    local b = { owner = owner, key = key, mode = mode, token = token, from = self.W.now, to = to }
    for _, x in ipairs(self.beliefs) do
        if x.key == key and x.owner ~= owner and H.conflict(x.mode, mode) and x.from <= b.from and x.to > b.from then
            self:defect("two holders of %s: %s %s (token %s, since %d, to %d) and %s %s (token %s)", key,
                x.owner, x.mode, tostring(x.token), x.from, x.to, owner, mode, tostring(token))
        end
    end
    self.beliefs[#self.beliefs + 1] = b
    return b
end

-- Belief b ends at `at`, if that is sooner.
function Run:unbelieve(b, at)
    if at < b.to then b.to = at end
end

-- A new grant of key in mode to owner: its token is above that of every
-- conflicting grant before it (but those exempt(g) answers true for).
function Run:granted(owner, key, mode, token, exempt)
    for _, g in ipairs(self.grants) do
        if g.key == key and H.conflict(g.mode, mode) and token <= g.token and not (exempt and exempt(g)) then
            self:defect("token %d for %s %s of %s is not above %d (%s %s, granted at %d)",
                token, owner, mode, key, g.token, g.owner, g.mode, g.at)
        end
    end
    self.grants[#self.grants + 1] = { key = key, mode = mode, token = token, owner = owner, at = self.W.now }
end

---------------------------------------------------------------------------
-- The end: nothing left behind.

-- No request node under key's lock node.
function Run:check_no_requests(key)
    local kids = self.W:children(self.scs[1].LK.lock_path(key)) or {}
    if #kids > 0 then self:defect("requests left under %s: %s", key, table.concat(kids, " ")) end
end

-- No hold recorded by any sidecar.
function Run:check_no_holds()
    for i, sc in ipairs(self.scs) do
        if sc.LK.count() ~= 0 then self:defect("sidecar %d still records %d holds", i, sc.LK.count()) end
    end
end

-- The per-key tables (H.new's) back to their size.
function Run:check_tables()
    for i, sc in ipairs(self.scs) do
        for name, n in pairs(census.sizes(sc, self.tables)) do
            if n > (self.base[i][name] or 0) then
                self:defect("sidecar %d's %s: %d -> %d entries after the end", i, name, self.base[i][name] or 0, n)
            end
        end
    end
end

return H
