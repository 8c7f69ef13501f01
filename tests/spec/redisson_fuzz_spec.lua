-- redisson_fuzz_spec: Redisson's objects (RLock, RFairLock, RReadWriteLock,
-- RSemaphore, RCountDownLatch: their scripts as Redisson sends them, the
-- same texts as redisson_objects_spec.lua / redisson_rlock_spec.lua) under
-- a seeded schedule over three sidecars and six clients (client i on
-- sidecar (i-1)%3+1; an unlock may go through any), with faults: a
-- script's commit reply lost (multi, applied or not), the connection cut
-- while it is in flight, sessions given up or expired, disconnects within
-- the session, clock jumps across leases.
--
-- Invariants, from the clients' replies:
--   * exclusion: no two clients believe at once that they hold L, fl or
--     the write lock of rw (a belief runs from the success reply until the
--     last unlock is sent, the lease asked (from the send) passes, or the
--     holder's sidecar's session ends: README, "goes with the session");
--     no reader beside another client's writer;
--   * reentrancy: a sure holder's re-acquire answers nil, its unlock 0
--     while its count is above 1, then 1; a renewal of a sure hold 1;
--   * RSemaphore: available permits in [T - held - unknown, T - held]
--     (held: acknowledged acquires not released; unknown: TRYAGAIN'd
--     acquires and releases);
--   * RCountDownLatch: its count in [N - done - unknown, N - done], never
--     below 0, one zero message at most;
--   * at the end (all released, every lease past): no key left.
--
-- Replay: REDISSON_FUZZ_SEEDS=3,17 busted ...; REDISSON_FUZZ_N=200 for 1..N.
local S = require "world"
local null = S.null
local show, tryagain = S.show, S.tryagain

---------------------------------------------------------------------------
-- Scripts (their texts: redisson_scripts.lua)

local RS = require "redisson_scripts" -- (their texts)
local LOCK, UNLOCK, RENEW, READ_LOCK, READ_UNLOCK, WRITE_LOCK, WRITE_UNLOCK, FAIR_LOCK, FAIR_UNLOCK,
      SEM_SET, SEM_ACQUIRE, SEM_RELEASE, LATCH_SET, LATCH_DOWN =
    RS.LOCK, RS.UNLOCK, RS.RENEW, RS.READ_LOCK, RS.READ_UNLOCK, RS.WRITE_LOCK, RS.WRITE_UNLOCK,
    RS.FAIR_LOCK, RS.FAIR_UNLOCK, RS.SEM_SET, RS.SEM_ACQUIRE, RS.SEM_RELEASE, RS.LATCH_SET,
    RS.LATCH_DOWN

local ALL = { LOCK, UNLOCK, RENEW, READ_LOCK, READ_UNLOCK, WRITE_LOCK, WRITE_UNLOCK, FAIR_LOCK, FAIR_UNLOCK,
              SEM_SET, SEM_ACQUIRE, SEM_RELEASE, LATCH_SET, LATCH_DOWN }

---------------------------------------------------------------------------
-- Keys and the objects' calls

local CH = "redisson_lock__channel:{L}"
local RW, RWCH = "rw", "redisson_rwlock:{rw}"
local FL, FQ, FT, FCH = "fl", "redisson_lock_queue:{fl}", "redisson_lock_timeout:{fl}", "redisson_lock__channel:{fl}"
local SEM, SCH, TOTAL = "sem", "redisson_sc:{sem}", 4
local LT, LCH, LATCH_N = "latch", "redisson_countdownlatch__channel__{latch}", 5

local req_n = 0
local function nextreq() req_n = req_n + 1 return "r" .. req_n end
local function tprefix(id) return "{rw}:" .. id .. ":rwlock_timeout" end
local function now_ms(W) return 1700000000000 + W.now end

-- Each lock-like object: acquire / unlock / renew argument lists.
local OBJ = {
    L = {
        acquire = function(W, id, lease) return { "EVAL", LOCK, "1", "L", tostring(lease), id } end,
        unlock = function(W, id) return { "EVAL", UNLOCK, "2", "L", CH, "0", "30000", id } end,
        renew = function(W, id, lease) return { "EVAL", RENEW, "1", "L", tostring(lease), id } end,
        excl = true,
    },
    fl = {
        acquire = function(W, id, lease)
            return { "EVAL", FAIR_LOCK, "3", FL, FQ, FT, tostring(lease), id, "3000", tostring(now_ms(W)) }
        end,
        unlock = function(W, id)
            return { "EVAL", FAIR_UNLOCK, "4", FL, FQ, FT, FCH, "0", "30000", id, tostring(now_ms(W)), "publish" }
        end,
        renew = function(W, id, lease) return { "EVAL", RENEW, "1", FL, tostring(lease), id } end,
        excl = true,
    },
    w = {
        acquire = function(W, id, lease) return { "EVAL", WRITE_LOCK, "1", RW, tostring(lease), id .. ":write" } end,
        unlock = function(W, id)
            return { "EVAL", WRITE_UNLOCK, "3", RW, RWCH, "redisson_unlock_latch:{rw}:" .. nextreq(),
                     "1", "30000", id .. ":write", "publish", "3000" }
        end,
        renew = function(W, id, lease) return { "EVAL", RENEW, "1", RW, tostring(lease), id .. ":write" } end,
        excl = true,
    },
    r = {
        acquire = function(W, id, lease)
            return { "EVAL", READ_LOCK, "2", RW, tprefix(id), tostring(lease), id, id .. ":write" }
        end,
        unlock = function(W, id)
            return { "EVAL", READ_UNLOCK, "5", RW, RWCH, tprefix(id), "{rw}", "redisson_unlock_latch:{rw}:" .. nextreq(),
                     "0", id, "publish", "3000" }
        end,
    },
}
local LOCKS = { "L", "fl", "w", "r" }
-- which beliefs conflict: (object of a, object of b) for two clients
local function conflict(o1, o2)
    if o1 == o2 then return OBJ[o1].excl end
    return (o1 == "w" and o2 == "r") or (o1 == "r" and o2 == "w")
end

-- xorshift32 (lock_fuzz_spec's): the sidecars' sandbox shares math.random.
local function prng(seed)
    local x = (seed * 2654435761 + 12345) & 0xffffffff
    if x == 0 then x = 1 end
    return function(n)
        x = (x ~ (x << 13)) & 0xffffffff
        x = x ~ (x >> 17)
        x = (x ~ (x << 5)) & 0xffffffff
        return x % n + 1
    end
end

---------------------------------------------------------------------------
-- The per-key tables of the scripts (long_life_spec's), by upvalue.


local TABLES = {
    { "owned", "owned", function(sc) return sc.K.owned end }, { "owned", "heap" },
    { "expiry", "expiry_waiters" }, { "queue", "queues" }, { "queue", "conns" },
    { "pubsub_inbox", "seen" }, { "pubsub_inbox", "delivered" }, { "pubsub_inbox", "credits" },
    { "pubsub_nodes", "gc_queue" },
}
-- (not guard.dead: one entry per earlier session of the sidecar, which
-- the schedule changes a few times; not per key)

local function sizes(sc) return require("census").sizes(sc, TABLES) end

---------------------------------------------------------------------------
-- One run

local F = {}
F.__index = F

local function new_run(seed)
    local W, a, b, c = S.scripts_warmed(3, ALL, "5", "w1", "w2", "w3", "w4", "w5", "1", "1", "1", "1", "1")
    W:advance(100)
    local self = setmetatable({ seed = seed, rnd = prng(seed), W = W, scs = { a, b, c }, log = {}, bad = {},
                                clients = {}, epoch = { 0, 0, 0 }, down = {},
                                sem = { unk = 0 }, latch = { done = 0, unk = 0 }, ones = 0, unk_unlocks = 0 },
                              F)
    for i = 1, 6 do
        self.clients[i] = { n = i, id = "c" .. i .. ":1", si = (i - 1) % 3 + 1, held = {}, unsure = {}, permits = 0 }
    end
    c:call_as(77, "SUBSCRIBE", CH, LCH)
    assert.equal(1, a:call("EVAL", SEM_SET, "2", SEM, SCH, tostring(TOTAL)))
    assert.equal(1, b:call("EVAL", LATCH_SET, "2", LT, LCH, "1", tostring(LATCH_N), "publish"))
    W:advance(100)
    self.base = {}
    for i, sc in ipairs(self.scs) do self.base[i] = sizes(sc) end
    return self
end

function F:note(fmt, ...) self.log[#self.log + 1] = string.format("%7d ", self.W.now) .. string.format(fmt, ...) end
function F:defect(fmt, ...)
    local s = string.format("t=%d ", self.W.now) .. string.format(fmt, ...)
    self.log[#self.log + 1] = "        !! " .. s
    self.bad[#self.bad + 1] = s
end
function F:pick(list) return list[self.rnd(#list)] end

-- Beliefs end at their lease or with their sidecar's session.
function F:expire_beliefs()
    for _, cl in ipairs(self.clients) do
        for o, h in pairs(cl.held) do
            if h.to <= self.W.now or h.epoch ~= self.epoch[cl.si] then cl.held[o] = nil end
        end
    end
end

-- Whether cl surely holds object o (no unknown outcome since, lease 1.5 s ahead).
function F:sure(cl, o)
    local h = cl.held[o]
    return h and not cl.unsure[o] and h.epoch == self.epoch[cl.si] and h.to - self.W.now > 1500 and h
end

-- Runs a command through sidecar si, with a fault maybe: answers its reply.
function F:call(si, args, what)
    local W, sc, rnd = self.W, self.scs[si], self.rnd
    sc.faults = {}
    local roll, fault = rnd(100), "none"
    if self.nofault then roll = 100 end
    if self.down[si] then fault = "down"
    elseif roll <= 12 then fault = "after"; sc:fail_next({ op = "multi", when = "after" })
    elseif roll <= 20 then fault = "before"; sc:fail_next({ op = "multi", when = "before" })
    elseif roll <= 28 then
        local ms = self:pick({ 50, 300, 1500, 4000 })
        fault = "after+cut " .. ms
        sc:fail_next({ op = "multi", when = "after", hook = function()
            sc.connected = false
            W:at(W.now + ms, function() if not sc.connected and sc.sid ~= 0 then W:post(function() sc:reconnect() end) end end)
        end })
    elseif roll <= 30 then
        fault = "after+lose"
        sc:fail_next({ op = "multi", when = "after", hook = function()
            local old = sc:lose({ gap = true })
            self.epoch[si] = self.epoch[si] + 1
            W:at(W.now + 300, function() W:post(function() sc:next_session() end) end)
            W:at(W.now + sc.config.session_timeout, function() W:expire_session(old) end)
        end })
    end
    self:note("%s @%d [%s]", what, si, fault)
    local t = sc:start(table.unpack(args))
    W:run_until(function() return t.done end)
    sc.faults = {}
    self:expire_beliefs()
    self:note("   -> %s", show(t.result))
    local m = S.messages(self.scs[3], 77, CH)
    if m ~= (self.seen_m or 0) then self:note("   (L messages on c: %d -> %d) %s", self.seen_m or 0, m, show((self.scs[3].pushed[77] or {})[#self.scs[3].pushed[77]].push)); self.seen_m = m end
    if type(t.result) == "table" and t.result.err and not tryagain(t.result) then
        self:defect("%s via %d answered %s", what, si, t.result.err)
    end
    return t.result
end

function F:acquire(cl, o)
    local W = self.W
    local lease = self:pick({ 1000, 3000, 10000, 30000 })
    local t0 = W.now
    local sure = self:sure(cl, o)
    local r = self:call(cl.si, OBJ[o].acquire(W, cl.id, lease), "c" .. cl.n .. " acquire " .. o)
    local h = cl.held[o]
    if r == null then
        if h and h.epoch == self.epoch[cl.si] then
            h.count = h.count + 1
            -- (the write lock adds to its TTL; a reader's holds each keep
            -- their own lease, unlocked last in first out: the shortest counts)
            if o == "r" then h.to = math.min(h.to, t0 + lease) elseif o ~= "w" then h.to = t0 + lease end
        else
            for _, other in ipairs(self.clients) do
                if other ~= cl then
                    for o2, h2 in pairs(other.held) do
                        if conflict(o, o2) and h2.to > W.now then
                            self:defect("c%d got %s while c%d believes it holds %s (since %d, until %d)",
                                cl.n, o, other.n, o2, h2.since, h2.to)
                        end
                    end
                end
            end
            cl.held[o] = { count = 1, to = t0 + lease, since = W.now, epoch = self.epoch[cl.si] }
        end
    elseif math.type(r) == "integer" then
        if sure and cl.held[o] == sure and sure.epoch == self.epoch[cl.si] then
            self:defect("c%d's reentrant acquire of %s (held, count %d) refused: %d", cl.n, o, sure.count, r)
        end
    elseif tryagain(r) then
        cl.unsure[o] = true
        if h then h.to = math.min(h.to, t0 + lease) end
    end
end

-- Two clients of two sidecars, neither holding o, race for it.
function F:race(o)
    local W, rnd = self.W, self.rnd
    local i = rnd(6)
    local j = (i + rnd(2) - 1 + 1) % 6 + 1 -- another sidecar's client
    if (j - 1) % 3 == (i - 1) % 3 then j = j % 6 + 1 end
    local c1, c2 = self.clients[i], self.clients[j]
    for _, cl in ipairs({ c1, c2 }) do if cl.held[o] or cl.unsure[o] or cl.held.r or cl.held.w then return end end
    local lease = self:pick({ 1000, 3000, 10000 })
    local t0 = W.now
    local tasks = {}
    for k, cl in ipairs({ c1, c2 }) do
        local sc = self.scs[cl.si]
        sc.faults = {}
        if rnd(4) == 1 and not self.down[cl.si] then
            local when = self:pick({ "after", "before" })
            sc:fail_next({ op = "multi", when = when })
            self:note("c%d race %s [%s]", cl.n, o, when)
        else
            self:note("c%d race %s", cl.n, o)
        end
        tasks[k] = sc:start(table.unpack(OBJ[o].acquire(W, cl.id, lease)))
    end
    W:run_until(function() return tasks[1].done and tasks[2].done end)
    for _, sc in ipairs(self.scs) do sc.faults = {} end
    self:expire_beliefs()
    self:note("   -> %s, %s", show(tasks[1].result), show(tasks[2].result))
    local won = 0
    for k, cl in ipairs({ c1, c2 }) do
        local r = tasks[k].result
        if r == null then
            won = won + 1
            for _, other in ipairs(self.clients) do
                for o2, h2 in pairs(other.held) do
                    if other ~= cl and conflict(o, o2) and h2.to > W.now then
                        self:defect("c%d won %s while c%d believes it holds %s", cl.n, o, other.n, o2)
                    end
                end
            end
            cl.held[o] = { count = 1, to = t0 + lease, since = W.now, epoch = self.epoch[cl.si] }
        elseif tryagain(r) then cl.unsure[o] = true
        elseif type(r) == "table" and r.err then self:defect("race: c%d answered %s", cl.n, r.err) end
    end
end

function F:unlock(cl, o)
    local W = self.W
    local si = self.rnd(10) <= 7 and cl.si or self.rnd(3)
    local h = cl.held[o]
    local sure = self:sure(cl, o)
    local count = h and h.count
    if h and (h.count <= 1 or cl.unsure[o]) then cl.held[o] = nil end -- stops believing as it sends the last
    local r = self:call(si, OBJ[o].unlock(W, cl.id), "c" .. cl.n .. " unlock " .. o)
    if sure and self:sure(cl, o) ~= nil and W.now - 0 < sure.to - 1000 then
        local want = count > 1 and 0 or 1
        if o == "r" then want = nil end -- (0 or 1: whether other readers remain)
        if r == null then
            self:defect("c%d's unlock of %s, held (count %d), answered nil", cl.n, o, count)
        elseif want and r ~= want and not tryagain(r) then
            self:defect("c%d's unlock of %s (count %d) answered %s, not %d", cl.n, o, count, show(r), want)
        end
    end
    if o == "L" then
        if r == 1 then self.ones = self.ones + 1 elseif tryagain(r) then self.unk_unlocks = self.unk_unlocks + 1 end
    end
    if r == 0 then
        if cl.held[o] then cl.held[o].count = cl.held[o].count - 1 end
    elseif r == 1 or r == null then
        cl.held[o] = nil
        if r == null or o ~= "r" or not h or h.count <= 1 then cl.unsure[o] = nil end
    elseif tryagain(r) then
        cl.unsure[o] = true
    end
    if cl.held[o] and cl.held[o].count <= 0 then cl.held[o] = nil end
end

function F:renew(cl, o)
    local W = self.W
    if not OBJ[o].renew then return end
    local lease = self:pick({ 1000, 3000, 10000, 30000 })
    local t0 = W.now
    local sure = self:sure(cl, o)
    local h = cl.held[o]
    if h then h.to = math.min(h.to, t0 + lease) end
    local r = self:call(cl.si, OBJ[o].renew(W, cl.id, lease), "c" .. cl.n .. " renew " .. o)
    if r == 1 then
        if cl.held[o] == h and h then h.to = t0 + lease end
    elseif r == 0 then
        if sure and cl.held[o] == sure and sure.epoch == self.epoch[cl.si] then
            self:defect("c%d's renewal of %s, held (lease %d ms ahead at send), answered 0", cl.n, o, sure.to - t0)
        end
        cl.held[o] = nil
    end
end

function F:sem_acquire(cl)
    local n = self.rnd(2)
    local r = self:call(cl.si, { "EVAL", SEM_ACQUIRE, "2", SEM, SCH, tostring(n) }, "c" .. cl.n .. " sem acquire " .. n)
    if r == 1 then cl.permits = cl.permits + n
    elseif tryagain(r) then self.sem.unk = self.sem.unk + n
    elseif r ~= 0 then self:defect("sem acquire answered %s", show(r)) end
end

function F:sem_release(cl)
    if cl.permits == 0 then return end
    local n = math.min(cl.permits, self.rnd(2))
    cl.permits = cl.permits - n
    local si = self.rnd(10) <= 7 and cl.si or self.rnd(3)
    local r = self:call(si, { "EVAL", SEM_RELEASE, "2", SEM, SCH, tostring(n) }, "c" .. cl.n .. " sem release " .. n)
    if tryagain(r) then self.sem.unk = self.sem.unk + n
    elseif r ~= null then self:defect("sem release answered %s", show(r)) end
end

function F:countdown(cl)
    if self.latch.done + self.latch.unk >= LATCH_N then return end
    local r = self:call(cl.si, { "EVAL", LATCH_DOWN, "2", LT, LCH, "0", "publish" }, "c" .. cl.n .. " countDown")
    if r == null then self.latch.done = self.latch.done + 1
    elseif tryagain(r) then self.latch.unk = self.latch.unk + 1
    else self:defect("countDown answered %s", show(r)) end
end

-- A sidecar that is connected (to read through), or nil.
function F:reader()
    for _, i in ipairs({ 3, 1, 2 }) do if self.scs[i].connected and not self.down[i] then return self.scs[i] end end
end

function F:check_counts()
    local sc = self:reader()
    if not sc then return end
    local held = 0
    for _, cl in ipairs(self.clients) do held = held + cl.permits end
    local v = sc:call("GET", SEM)
    if not tryagain(v) then
        local avail = tonumber(v)
        if not avail or avail > TOTAL - held or avail < TOTAL - held - self.sem.unk then
            self:defect("semaphore: %s available, %d held, %d unknown (total %d)", show(v), held, self.sem.unk, TOTAL)
        end
    end
    local l = sc:call("GET", LT)
    if not tryagain(l) then
        local n = l == null and 0 or tonumber(l)
        local d, u = self.latch.done, self.latch.unk
        if not n or n < 0 or n > LATCH_N - d or n < LATCH_N - d - u then
            self:defect("latch: count %s, %d counted down, %d unknown (of %d)", show(l), d, u, LATCH_N)
        end
    end
end

function F:session_ends(i, how)
    local W, sc = self.W, self.scs[i]
    if sc.sid == 0 then return end
    self.epoch[i] = self.epoch[i] + 1
    self.down[i] = nil
    self:note("sidecar %d: session %s", i, how)
    if how == "expire" then sc:expire()
    else
        local old = sc:lose()
        W:at(W.now + sc.config.session_timeout, function() W:expire_session(old) end)
    end
    self:expire_beliefs()
end

function F:advance(ms)
    local W = self.W
    local target = W.now + ms
    while true do
        local nt = target
        for _, t in pairs(self.down) do if t < nt then nt = t end end
        W:advance(math.max(0, nt - W.now))
        for i, t in pairs(self.down) do
            if t <= W.now then
                self.down[i] = nil
                self:note("sidecar %d reconnects", i)
                if not self.scs[i].connected and self.scs[i].sid ~= 0 then self.scs[i]:reconnect() end
            end
        end
        self:expire_beliefs()
        if W.now >= target then break end
    end
end

function F:step()
    local rnd = self.rnd
    local roll = rnd(100)
    if roll <= 4 then
        local i = rnd(3)
        if self.scs[i].connected and not self.down[i] then
            local ms = self:pick({ 100, 500, 1500, 3000 })
            self:note("sidecar %d disconnects for %d ms", i, ms)
            self.scs[i]:disconnect()
            self.down[i] = self.W.now + ms
        end
    elseif roll <= 6 then
        self:session_ends(rnd(3), self:pick({ "expire", "lose" }))
    elseif roll <= 14 then
        self:advance(self:pick({ 300, 1000, 3000, 12000 }))
    else
        local cl = self.clients[rnd(#self.clients)]
        local what = rnd(100)
        if what <= 8 then self:race(self:pick({ "L", "fl", "w" }))
        elseif what <= 60 then
            local o = self:pick(LOCKS)
            -- a client keeps to one mode of rw (no writer's own read lock here)
            if (o == "r" and cl.held.w) or (o == "w" and cl.held.r) then o = "L" end
            local k = rnd(10)
            if k <= 5 then self:acquire(cl, o) elseif k <= 8 then self:unlock(cl, o) else self:renew(cl, o) end
        elseif what <= 75 then self:sem_acquire(cl)
        elseif what <= 90 then self:sem_release(cl)
        else self:countdown(cl) end
    end
    self:advance(self:pick({ 0, 5, 50, 200 }))
    self:check_counts()
end

function F:finish()
    local W = self.W
    self:note("-- the end: reconnect, release all, pass every lease")
    for i in pairs(self.down) do self.down[i] = W.now end
    self:advance(0)
    for i, sc in ipairs(self.scs) do if sc.sid == 0 then sc:next_session() end end
    self:advance(1000)
    for _, cl in ipairs(self.clients) do
        for _, o in ipairs(LOCKS) do
            for _ = 1, 4 do
                if not cl.held[o] and not cl.unsure[o] then break end
                self:unlock(cl, o)
            end
        end
        while cl.permits > 0 do self:sem_release(cl) end
    end
    self:advance(1000)
    self:check_counts()
    self:advance(60000)
    -- a fair lock's waiters that never came back stay queued until a later
    -- acquire drops them past their timeouts (Redisson's own rule): one more
    local last = self.clients[1]
    self.nofault = true
    self:acquire(last, "fl")
    self:unlock(last, "fl")
    self:advance(20000)
    self:check_counts()
    -- RLock: every unlock answered 1 published once (the subscriber on c)
    local m = S.messages(self.scs[3], 77, CH)
    -- (README, "Pub/sub across sidecars": after a new session a free lock's
    -- subscribers are sent the unlock message they may have missed)
    if m < self.ones or m > self.ones + self.unk_unlocks + self.epoch[3] then
        self:defect("RLock: %d unlock messages for %d unlocks answered 1 (%d unknown, %d new sessions)", m,
            self.ones, self.unk_unlocks, self.epoch[3])
    end
    if os.getenv("REDISSON_FUZZ_PUSHES") then for _, f in ipairs(self.scs[3].pushed[77] or {}) do self:note("push %s", show(f.push)) end end
    local z = 0
    for _, f in ipairs(self.scs[3].pushed[77] or {}) do
        if f.push[1] == "message" and f.push[2] == LCH and f.push[3] == "0" then z = z + 1 end
    end
    if z > 1 then self:defect("latch: %d zero messages", z) end
    local left = {}
    for _, name in ipairs(W:children(self.scs[1].config.root .. "/k") or {}) do
        if not name:find("^w%d") and name ~= SEM and name ~= LT then left[#left + 1] = name end
    end
    table.sort(left)
    if #left > 0 then self:defect("keys left after the end: %s", table.concat(left, " ")) end
    for i, sc in ipairs(self.scs) do
        for name, n in pairs(sizes(sc)) do
            if n > (self.base[i][name] or 0) + 2 then -- (the semaphore's and latch's keys)
                self:defect("sidecar %d's %s: %d -> %d entries after the end", i, name, self.base[i][name] or 0, n)
            end
        end
    end
end

local function run(seed, steps)
    local R = new_run(seed)
    local ok, err = pcall(function()
        for _ = 1, steps or 150 do R:step() end
        R:finish()
    end)
    if not ok then R.bad[#R.bad + 1] = "Lua error: " .. tostring(err) end
    return R
end

local function report(R)
    if #R.bad == 0 then return nil end
    return string.format("seed %d: %d defect(s):\n  %s\n-- step log:\n%s", R.seed, #R.bad,
        table.concat(R.bad, "\n  "), table.concat(R.log, "\n"))
end

local function env_seeds()
    local s = os.getenv("REDISSON_FUZZ_SEEDS")
    if s then
        local out = {}
        for n in s:gmatch("%d+") do out[#out + 1] = tonumber(n) end
        return out
    end
    local n = tonumber(os.getenv("REDISSON_FUZZ_N") or "")
    if n then
        local out = {}
        for i = 1, n do out[i] = i end
        return out
    end
end

-- 1..20, and the seeds that met the fair lock's torn read (see the shrunk
-- case at the end) before the fix: 5, 47, 148, 161, 183 (136 in a sweep
-- of 1..200 run in another order: the unlock latches' request ids are
-- shared by the runs of one process).
local SEEDS = env_seeds() or {}
if #SEEDS == 0 then
    for i = 1, 20 do SEEDS[i] = i end
    for _, s in ipairs({ 47, 136, 148, 161, 183 }) do SEEDS[#SEEDS + 1] = s end
end

describe("Redisson objects under a randomized schedule of faults, three sidecars", function()
    for _, seed in ipairs(SEEDS) do
        it("keep their invariants (seed " .. seed .. ")", function()
            local R = run(seed)
            local msg = report(R)
            if msg then
                if os.getenv("REDISSON_FUZZ_QUIET") then msg = msg:sub(1, msg:find("\n%-%- step log") or #msg) end
                error(msg, 0)
            end
        end)
    end
end)

---------------------------------------------------------------------------
-- Shrunk from seeds 5, 47, 136, 148, 161, 183 (the race step on "fl").
--
-- Before the fix (txn.lua T.script: a script that raised was confirmed
-- only for the keys it presumed absent).  Two Redisson clients
-- on two sidecars call RFairLock.tryLock at once: the queue's head (u2)
-- takes the free lock through a (lpop of the queue, zrem of its timeout:
-- both keys deleted), while u3's acquire through b reads the queue before
-- a's commit and the timeouts after it.  A script reads its keys one at a
-- time; b's run met a state that never was (a head without a timeout),
-- `tonumber(nil) <= now` raised, and u3's client got
-- "-ERR user_script:1: attempt to compare nil with number": Redisson's
-- tryLock throws instead of queueing.  On Redis the script runs on one
-- snapshot and cannot fail so; the sidecar must run it again (its reads
-- changed) as it does when a commit's check fails.
describe("Redisson RFairLock: two acquires racing through two sidecars", function()
    it("the queue's head takes the lock through a while another acquires through b: never an error", function()
        local bad = {}
        for d = 0, 12 do
            local W, a, b = S.scripts_warmed(2, ALL, "5", "w1", "w2", "w3", "w4", "w5", "1", "1", "1", "1", "1")
            W:advance(100)
            assert.equal(null, a:call(table.unpack(OBJ.fl.acquire(W, "u1:1", 30000))))
            assert.is_true(math.type(b:call(table.unpack(OBJ.fl.acquire(W, "u2:1", 30000)))) == "integer")
            assert.equal(1, a:call(table.unpack(OBJ.fl.unlock(W, "u1:1"))))
            W:advance(10)
            local ta = a:start(table.unpack(OBJ.fl.acquire(W, "u2:1", 30000)))
            W:advance(d)
            local tb = b:start(table.unpack(OBJ.fl.acquire(W, "u3:1", 30000)))
            W:run_until(function() return ta.done and tb.done end)
            if ta.result ~= null then bad[#bad + 1] = d .. ": head got " .. show(ta.result) end
            local r = tb.result
            if not (math.type(r) == "integer" or r == null or tryagain(r)) then
                bad[#bad + 1] = d .. ": other got " .. show(r)
            end
        end
        assert.same({}, bad)
    end)
end)
