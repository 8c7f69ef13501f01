-- lock_left_fuzz_spec: native-lock requests whose command ended without a
-- grant (WAIT over, client gone, CLIENT UNBLOCK, -TRYAGAIN after a lost
-- reply) that were granted meanwhile, and what their owner does next.
--
-- A seeded schedule over three sidecars, two keys and six owners (each
-- command of an owner through any sidecar, one at a time): acquires with
-- short WAITs, disconnects of a sidecar (events held or not) timed over
-- grants and WAIT ends, clients that go, CLIENT UNBLOCK, lost replies of
-- create/multi/set/delete, sessions expired or given up, then the owner's
-- next command (ACQUIRE same or other mode, RELEASE, RENEW, CONVERT).
--
-- Invariants, from the replies (and ZooKeeper at the end):
--   * never two owners that believe they hold conflicting modes (a belief
--     lasts from a token reply to the RELEASE that takes its last count,
--     its lease from the send, any session's end (conservative: a hold
--     taken up through another sidecar goes with the request's session),
--     or an error that says the hold may be gone);
--   * tokens per key grow in grant order across conflicting holds;
--   * hold counts: a RELEASE answers 1 only for a count answered by a token
--     or one whose outcome is unknown (-TRYAGAIN, a WAIT that ended while
--     its sidecar was cut off, a client gone, CLIENT UNBLOCK: the README's
--     "granted meanwhile ... takes back one count"); a RELEASE of a count
--     surely held answers 1;
--   * at the end (all released, every lease and session past): no request
--     under the lock nodes, a try-once ACQUIRE of a new owner granted on
--     every key, LK.count() 0 and the per-key tables back to their size;
--   * (hooks runs) each hold a client was answered is told on_acquire once
--     and exactly one end, across the sidecars.
--
-- Replay: LEFT_FUZZ_SEEDS=17,42; sweep: LEFT_FUZZ_N=200; LEFT_FUZZ_HOOKS=1
-- checks the hooks in the sweep too; LEFT_FUZZ_QUIET=1 without the step
-- log.  The harness: lockfuzz.lua.

local S = require "world"
local H = require "lockfuzz"
local census = require "census"
local null = S.null
local is_token = H.is_token

local KEYS = { "k1", "k2" }

---------------------------------------------------------------------------
-- Shared helpers: a policy recording the lock notifications, worlds.

local function world3()
    local W, a, b, c = S.recording_world(3)
    S.warm(W, a, b, c)
    return W, a, b, c
end

-- The notifications of owner's holds of key, over the sidecars given:
-- {acquire = n, ends = n, list = "..."} by token.
local function told(key, owner, ...)
    local by = {}
    for i, sc in ipairs({ ... }) do
        for _, e in ipairs(sc.env.__events or {}) do
            if e.key == key and e.owner == owner then
                local t = by[e.token] or { acquire = 0, ends = 0, list = {} }
                by[e.token] = t
                if e.ev == "acquire" then t.acquire = t.acquire + 1 else t.ends = t.ends + 1 end
                t.list[#t.list + 1] = i .. ":" .. e.ev
            end
        end
    end
    return by
end

-- o's LOCK.ACQUIRE (WAIT 3000, PX px) through b is granted by h's release
-- through c while b is cut off (events held back when hold), and its WAIT
-- ends there: null.  b stays cut off.
local function left_granted(px, hold)
    local W, a, b, c = world3()
    assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "k", "h", "PX", "600000")))
    local w = b:start("LOCK.ACQUIRE", "k", "o", "PX", px or "600000", "WAIT", "3000")
    W:advance(50)
    c:call("LOCK.INFO", "k") -- (c's listing has o's request: h's release grants it)
    b:disconnect(hold and { hold_events = true } or nil)
    assert.equal(1, c:call("LOCK.RELEASE", "k", "h"))
    W:run_until(function() return w.done end)
    assert.equal(null, w.result)
    return W, a, b, c
end

local function children(W, sc, key) return W:children(sc.LK.lock_path(key)) or {} end

---------------------------------------------------------------------------
-- The fuzz.

local F = H.class()

local function new_run(seed, hooks)
    local W, a, b, c = world3()
    local self = H.new(F, seed, W, { a, b, c }, { r = S.prng(seed), owners = {}, hooks = hooks, answered = {} },
                       census.LOCK_TABLES)
    for i = 1, 6 do
        self.owners[i] = { n = i, name = "o" .. i, st = {} }
    end
    return self
end

-- The state of owner o on key: {count (answered, not yet released),
-- maybe (counts of unknown outcome), unk (a count change unknown: no
-- count checks until a RELEASE answers 0), hold = belief or nil}.
function F:state(o, key)
    local s = o.st[key]
    if not s then s = { count = 0, maybe = 0 } o.st[key] = s end
    return s
end

function F:believe(o, key, mode, token, to)
    local b = H.Run.believe(self, o.name, key, mode, token, to)
    self:state(o, key).hold = b
    return b
end

function F:unbelieve(o, key)
    local s = self:state(o, key)
    if s.hold then
        H.Run.unbelieve(self, s.hold, self.W.now)
        s.hold = nil
    end
end

-- After each reply and each piece of time: a belief whose lease is over
-- lapses (the hold may be gone, or renewed elsewhere).
function F:settle()
    for _, o in ipairs(self.owners) do
        for _, s in pairs(o.st) do
            if s.hold and s.hold.to <= self.W.now then s.hold, s.unk = nil, true end
        end
    end
end

-- A new (not reentrant) grant: above every conflicting grant before it.
function F:token(o, key, mode, token)
    self:granted(o.name, key, mode, token, function(g) return g.owner == o.name end)
end

-- Runs args through sidecar si as owner o's command; on_reply(r) once
-- answered (not when its client went).
function F:issue(o, si, args, on_reply, wait)
    local p = { o = o, si = si, wait = wait, who = o.name, client = self:new_client() }
    o.p = p
    return H.Run.issue(self, p, args, function(r)
        on_reply(r, p)
        if type(r) == "table" and r.err and r.err:find("session that is ending") then
            self:unbelieve(o, args[2])
            self:state(o, args[2]).unk = true
        end
    end, function() self:settle() end)
end

function F:acquire(o, key, si)
    local r = self.r
    local s = self:state(o, key)
    local mode = s.hold and r.chance(0.6) and s.hold.mode or r.pick({ "EX", "EX", "PR", "PR", "CW" })
    local px = r.pick({ 500, 2000, 8000, 30000 })
    local wait = r.pick({ 0, 100, 300, 800, 2000 })
    local t0 = self.W.now
    self:issue(o, si, { "LOCK.ACQUIRE", key, o.name, "MODE", mode, "PX", tostring(px), "WAIT", tostring(wait) },
        function(rep, p)
            local h = s.hold
            if is_token(rep) then
                if h and h.mode == mode then
                    if rep ~= h.token and not s.unk then self:defect("reentrant %s of %s: token %d, held %d", o.name, key, rep, h.token) end
                    -- (shorter through the holder's sidecar, never through another:
                    -- which one holds it is not known here)
                    h.to = math.min(h.to, t0 + px)
                else
                    if h then self:unbelieve(o, key) end
                    if not (s.count > 0 or s.maybe > 0 or s.unk) then self:token(o, key, mode, rep) end
                    self:believe(o, key, mode, rep, t0 + px)
                    self.answered[#self.answered + 1] = { key = key, owner = o.name, token = rep }
                    -- (a count of a hold whose belief lapsed may still be there: unk)
                    if s.count > 0 then s.unk = true end
                    s.count = 0
                end
                s.count = s.count + 1
            elseif S.tryagain(rep) or (rep == null and p.cut) or p.task.unblocked or
                   (type(rep) == "table" and rep.err and rep.err:find("^UNBLOCKED")) then
                s.maybe = s.maybe + 1 -- (granted meanwhile, left in the background)
                if S.tryagain(rep) and h then h.to = math.min(h.to, t0 + px) end
            end
        end, wait > 0 and wait or nil)
end

function F:release(o, key, si)
    local s = self:state(o, key)
    local sure = s.count > 0 and not s.unk and s.hold and s.hold.to - self.W.now > 1500
    if s.count <= 1 or s.unk then self:unbelieve(o, key) end
    self:issue(o, si, { "LOCK.RELEASE", key, o.name }, function(rep)
        if rep == 1 then
            if s.count > 0 then s.count = s.count - 1
            elseif s.maybe > 0 then s.maybe = s.maybe - 1
            elseif not s.unk then self:defect("RELEASE %s by %s answered 1: no count answered or unknown", key, o.name) end
            if s.count == 0 then self:unbelieve(o, key) end
        elseif rep == 0 then
            if sure and s.hold and s.hold.to - self.W.now > 1000 then
                self:defect("RELEASE %s by %s answered 0 (count %d, lease %d ms ahead)", key, o.name, s.count,
                    s.hold.to - self.W.now)
            end
            self:unbelieve(o, key)
            s.count, s.maybe, s.unk = 0, 0, nil
        elseif S.tryagain(rep) then
            s.unk = true
            self:unbelieve(o, key)
        end
    end)
end

function F:renew(o, key, si)
    local s = self:state(o, key)
    local px = self.r.pick({ 300, 2000, 8000 })
    local t0 = self.W.now
    if s.hold then s.hold.to = math.min(s.hold.to, t0 + px) end
    local h = s.hold
    self:issue(o, si, { "LOCK.RENEW", key, o.name, "PX", tostring(px) }, function(rep)
        if rep == 1 and h and s.hold == h then h.to = t0 + px
        elseif rep == 0 then self:unbelieve(o, key) end
    end)
end

function F:convert(o, key, si)
    local s = self:state(o, key)
    local mode = self.r.pick({ "EX", "PR", "CW", "CR" })
    local wait = self.r.pick({ 0, 200, 1000 })
    local h = s.hold
    if h and H.weaker(mode, h.mode) then -- (may land before its reply)
        local to, token = h.to, h.token
        self:unbelieve(o, key)
        h = self:believe(o, key, mode, token, to)
    end
    self:issue(o, si, { "LOCK.CONVERT", key, o.name, "MODE", mode, "WAIT", tostring(wait) }, function(rep)
        if is_token(rep) and h and s.hold == h and h.mode ~= mode then
            local to = h.to
            self:unbelieve(o, key)
            if rep ~= h.token then self:token(o, key, mode, rep) end
            self:believe(o, key, mode, rep, to)
        elseif type(rep) == "table" and rep.err and not rep.err:find("already waiting") then
            self:unbelieve(o, key)
        end
    end, wait > 0 and wait or nil)
end

-- Commands under way through sidecar i: cut off meanwhile.
function F:cut(i)
    for _, o in ipairs(self.owners) do
        if o.p and o.p.si == i and not o.p.task.done then o.p.cut = true end
    end
end

function F:session_ends(i)
    for _, o in ipairs(self.owners) do
        for key, st in pairs(o.st) do self:unbelieve(o, key) st.unk = true end -- (conservative)
    end
    self:cut(i)
    self:end_session(i, self.r.pick({ "expire", "lose", "lose-expire" }))
end

local OPS = { "create", "multi", "set", "delete", "get" }

function F:step()
    local r = self.r
    self:clear_faults()
    local roll = r.int(1, 100)
    if roll <= 10 then
        local i = self:cut_off_one(r, { 100, 400, 1500, 4000 })
        if i then self:cut(i) end
    elseif roll <= 12 then
        self:session_ends(r.int(1, 3))
    elseif roll <= 20 then
        self:advance(r.pick({ 200, 600, 2000, 9000 }))
        return
    else
        local o = self.owners[r.int(1, #self.owners)]
        local p = o.p
        if p and not p.task.done then
            local x = r.int(1, 4)
            if x == 1 then
                self:client_goes(p)
                local st = self:state(o, p.key)
                if p.kind == "LOCK.ACQUIRE" then st.maybe = st.maybe + 1
                else st.unk = true self:unbelieve(o, p.key) end -- (its outcome unknown)
                o.p = nil
            elseif x == 2 and p.task.blocked then
                self:unblock(p, r.pick({ "timeout", "error" }))
            end
        else
            -- mostly the key of its last command (its next command after one that ended)
            local key = (p and r.chance(0.8)) and p.key or r.pick(KEYS)
            local si = r.int(1, 3)
            if r.chance(0.2) then
                local f = { op = r.pick(OPS), when = r.pick({ "after", "before" }) }
                self:note("sidecar %d: the next %s fails %s", si, f.op, f.when)
                self.scs[si]:fail_next(f)
            end
            local what = r.int(1, 100)
            if what <= 50 then self:acquire(o, key, si)
            elseif what <= 78 then self:release(o, key, si)
            elseif what <= 88 then self:renew(o, key, si)
            else self:convert(o, key, si) end
        end
    end
    self:advance(r.pick({ 0, 5, 30, 100, 250, 600 }))
end

function F:finish()
    self:note("-- the end")
    self:clear_faults()
    self:reconnect_all()
    self:advance(5000)
    for _, o in ipairs(self.owners) do
        if o.p and not o.p.task.done then self:defect("%s's %s never answered", o.name, o.p.task.args or "command") end
        for _, key in ipairs(KEYS) do
            self:drain(8, function()
                self:release(o, key, self.r.int(1, 3))
                return o.p
            end)
        end
    end
    self:advance(70000)
    for ki, key in ipairs(KEYS) do
        self:check_no_requests(key)
        local t = self.scs[ki]:call("LOCK.ACQUIRE", key, "newcomer", "PX", "1000")
        if not is_token(t) then self:defect("a try-once ACQUIRE of %s answered %s", key, S.show(t)) end
        self.scs[ki]:call("LOCK.RELEASE", key, "newcomer")
    end
    self:advance(100)
    self:check_no_holds()
    self:check_tables()
    if self.hooks then
        for _, a in ipairs(self.answered) do
            local t = told(a.key, a.owner, table.unpack(self.scs))[a.token]
            if not t or t.acquire ~= 1 or t.ends ~= 1 then
                self:defect("hold %s %s token %d told %s", a.key, a.owner, a.token,
                    t and table.concat(t.list, ",") or "nothing")
            end
        end
    end
end

-- 1..40 (1..200 pass the invariants above but the hooks')
local SEEDS = H.seeds("LEFT_FUZZ", H.seed_list(40))

describe("left lock requests under a randomized schedule, three sidecars", function()
    for _, seed in ipairs(SEEDS) do
        it("keeps its invariants (seed " .. seed .. ")", H.case("LEFT_FUZZ", function()
            return new_run(seed, os.getenv("LEFT_FUZZ_HOOKS") ~= nil):play(80):report()
        end))
    end
end)


---------------------------------------------------------------------------
-- Shrunk cases.  left_granted: o's WAIT ended (null) while b was cut off,
-- its request granted meanwhile by h's release through c.

-- The policy's hooks.  Before: o asked again through b after b was back
-- and before b's background leave (200 ms), and released there: b, whose
-- session owns the request, told the policy nothing of a hold a client was
-- answered and released (no on_acquire: a reentrant acquire tells none;
-- no on_release: the release counted down, the leave's delete told
-- nobody).  Now the reentrant acquire through b adopts the request (told
-- on_acquire), and the leave's delete ends that record (on_release).
-- Left alone (README): taken up through another sidecar and ended there,
-- or with b's session, before b's leave ran, the hold is told nothing (b
-- alone knew its command had left, and the node is gone when it looks).
describe("a left request taken up by its owner: the policy hears of the hold", function()
    it("is told on_acquire and one end when the owner acquires and releases through the request's sidecar", function()
        local W, a, b, c = left_granted()
        b:reconnect()
        local t = b:call("LOCK.ACQUIRE", "k", "o", "PX", "600000")
        assert.equal("integer", math.type(t))
        assert.equal(1, b:call("LOCK.RELEASE", "k", "o"))
        W:advance(1000)
        assert.equal(0, #children(W, a, "k"))
        local e = told("k", "o", a, b, c)[t]
        assert.is_truthy(e, "nothing told of o's hold " .. t)
        assert.same({ 1, 1 }, { e.acquire, e.ends }, table.concat(e.list, ","))
    end)

    -- passes: the leave counts the request down and b adopts it (told there)
    it("tells one on_acquire and one on_release when the owner's release comes after b's leave", function()
        local W, a, b, c = left_granted()
        local t = a:call("LOCK.ACQUIRE", "k", "o", "PX", "600000")
        assert.equal(t, a:call("LOCK.ACQUIRE", "k", "o", "PX", "600000"))
        b:reconnect()
        W:advance(1000)
        assert.equal(1, a:call("LOCK.RELEASE", "k", "o"))
        assert.equal(null, c:call("LOCK.ACQUIRE", "k", "x", "PX", "600000"))
        assert.equal(1, a:call("LOCK.RELEASE", "k", "o"))
        assert.equal(0, a:call("LOCK.RELEASE", "k", "o"))
        W:advance(700000)
        assert.equal(0, b.LK.count())
        local e = told("k", "o", a, b, c)[t]
        assert.same({ 1, 1 }, { e.acquire, e.ends }, table.concat(e.list, ","))
    end)
end)

describe("a left request's owner asks again before the leave ran", function()
    -- README: another mode is the LOCK.CONVERT error; once b is back the
    -- request is gone and the owner acquires in that mode
    it("in another mode: the LOCK.CONVERT error, then a grant once b's leave ran", function()
        local W, a, b = left_granted(nil, true)
        local r = a:call("LOCK.ACQUIRE", "k", "o", "MODE", "PR", "PX", "600000")
        assert.matches("use LOCK.CONVERT", r.err)
        b:reconnect()
        W:advance(1000)
        assert.equal(0, #children(W, a, "k"))
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "k", "o", "MODE", "PR", "PX", "600000")))
        assert.equal(1, a:call("LOCK.RELEASE", "k", "o"))
        assert.equal(0, a:call("LOCK.RELEASE", "k", "o"))
    end)

    -- a reentrant acquire through another sidecar never shortens the
    -- lease (README): the grant's 600 s stand, and b's leave keeps them
    it("with a shorter PX through another sidecar: the hold lasts to the grant's lease, then ends", function()
        local W, a, b, c = left_granted("600000")
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "k", "o", "PX", "2000")))
        b:reconnect()
        W:advance(3000)
        assert.equal(null, c:call("LOCK.ACQUIRE", "k", "x", "PX", "600000"))
        assert.equal(1, b.LK.count())
        W:advance(600000)
        assert.equal(0, b.LK.count())
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "k", "x", "PX", "600000")))
    end)

    -- counted up twice through a: b's leave takes one count, two releases end it
    it("twice: two releases end the hold, the lease timer goes", function()
        local W, a, b, c = left_granted("1000")
        local t = a:call("LOCK.ACQUIRE", "k", "o", "PX", "600000")
        assert.equal(t, a:call("LOCK.ACQUIRE", "k", "o", "PX", "600000"))
        b:reconnect()
        W:advance(1000)
        assert.equal(1, b.LK.count())
        assert.equal(1, a:call("LOCK.RELEASE", "k", "o"))
        assert.equal(null, c:call("LOCK.ACQUIRE", "k", "x", "PX", "600000"))
        assert.equal(1, a:call("LOCK.RELEASE", "k", "o"))
        assert.equal(0, #children(W, a, "k"))
        W:advance(600000) -- (b learns of a release elsewhere at the lease's end)
        assert.equal(0, b.LK.count())
    end)
end)
