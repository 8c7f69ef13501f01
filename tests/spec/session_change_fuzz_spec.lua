-- session_change_fuzz_spec: a sidecar's session changes with everything in
-- flight (M.on_session: keyspace, pub/sub, LOCK.*, the script cache, the
-- policy's on_lost), three sidecars, a seeded mix of work on sidecar a:
-- string locks (SET NX PX), LOCK.* holders and WAIT-ing waiters, a Redisson
-- RLock waiter subscribed to its channel, SUBSCRIBE/PSUBSCRIBE clients,
-- EVALSHA of a loaded script, a WATCH/MULTI client, keys with TTLs; then
-- a session change (expire, lose with the old session expiring now or
-- later, a disconnect longer than the leases but shorter than the
-- session) at a random moment, maybe a second change while the first is
-- handled, and faults on the handling's own requests.
--
-- Invariants: every on_session task finishes within a bound; no reply is an
-- internal error; a LOCK.* hold of the old session is told on_lost once
-- (and only once per key, whatever told it); a LOCK key another sidecar
-- took is never renewed by a's holder; the subscribers hear a message
-- published after the change, once; the Redisson waiter hears the unlock
-- (real or made up); EVALSHA of the loaded script still runs; at the end,
-- after releases and every lease, no lock request, no key of a, no
-- interest node left, and a's L.holds empty.  (ZooKeeper drops a
-- session's watches when it ends, and so does the model: zkmodel.lua's
-- World:drop_watches.)  FUZZ_SEEDS=1-700 runs a range.

local S = require "world"
local null = S.null

---------------------------------------------------------------------------
-- A seeded PRNG of our own (xorshift32): never math.random (the sidecars'
-- sandbox shares it).
local function prng(seed)
    local x = (seed * 2654435761 + 1) & 0xffffffff
    if x == 0 then x = 1 end
    local r = {}
    function r.int(n) -- 1..n
        x = x ~ ((x << 13) & 0xffffffff)
        x = x ~ (x >> 17)
        x = x ~ ((x << 5) & 0xffffffff)
        return x % n + 1
    end
    function r.chance(p) return r.int(1000) <= p * 1000 end
    function r.pick(list) return list[r.int(#list)] end
    return r
end

-- The recorder policy (lock_policy_faults_spec's): "<ev> <key> <owner>
-- ... <reason>" in _G.__events of its sidecar.
local RECORDER = [[
    local log = {}
    _G.__events = log
    local function rec(ev)
        return function(key, info)
            log[#log + 1] = string.format("%s %s %s %s", ev, key, tostring(info.owner), info.reason or "-")
        end
    end
    return { on_acquire = rec("acquire"), on_release = rec("release"),
             on_expire = rec("expire"), on_lost = rec("lost") }
]]

local LOCK = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " ..
             "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
             "return redis.call('pttl', KEYS[1]);"
local UNLOCK = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; " ..
               "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " ..
               "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; " ..
               "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;"
local CH = "redisson_lock__channel:{R}"
local USER = "return redis.call('incr', KEYS[1])"
local READER = "redis.call('get', KEYS[1]) return 'old'" -- reads a key from ZooKeeper

local function world()
    local file = S.policy_file(RECORDER)
    local W, a, b, c = S.world({ { config = { policy = file } }, { config = { policy = file } },
                                 { config = { policy = file } } })
    os.remove(file)
    S.warm(W, a, b, c)
    for _, sc in ipairs({ a, b, c }) do
        for _, body in ipairs({ LOCK, UNLOCK }) do sc:call("EVAL", body, "2", "warm", "wch", "0", "1", "x") end
    end
    local sha = a:call("SCRIPT", "LOAD", USER)
    W:advance(100)
    return W, a, b, c, sha
end

-- Sidecar sc's pub/sub registrations (the multis creating its interest
-- nodes) fail with a connection loss the next n times: ZooKeeper slow or
-- flapping while a new session registers its channels again.
local function stall_registrations(sc, n)
    local multi = sc.zk.multi
    sc.zk.multi = function(ops, ...)
        if n > 0 and type(ops[1]) == "table" and tostring(ops[1][2]):find("/ps/[cps]/") then
            n = n - 1
            return S.codes.CONNECTIONLOSS, {}
        end
        return multi(ops, ...)
    end
end

local function events(sc) return sc.env.__events or {} end

-- An internal error: a Lua error that surfaced as a reply.
local function internal(r)
    if type(r) ~= "table" or type(r.err) ~= "string" then return false end
    return r.err:find("%.lua:%d") or r.err:find("attempt to") or r.err:find("internal") ~= nil
end

---------------------------------------------------------------------------
-- Session changes that do not wait for their handling (Sidecar:expire /
-- :lose of zkmodel.lua, the on_session tasks returned), so that a second
-- change, a command or a fault can come while the first is handled.

local function fail_pending(sc)
    local pending = sc.pending
    sc.pending = {}
    for _, p in ipairs(pending) do
        p.timeout.cancel()
        sc.world:post(function() sc.world:resume(p.co, S.codes.SESSIONEXPIRED) end)
    end
end

local function expire_async(sc)
    local W = sc.world
    local old = sc.sid
    sc.held = nil
    W:expire_session(old)
    fail_pending(sc)
    sc.sid = W:new_session()
    sc.connected = true
    return { W:spawn(sc, sc.M.on_session, "new", sc.sid) }, old
end

local function lose_async(sc, expire_old)
    local W = sc.world
    local old = sc.sid
    sc.held = nil
    W:drop_watches(old) -- (its handle closed)
    local t1 = W:spawn(sc, sc.M.on_session, "lost", old)
    if expire_old then W:expire_session(old) end
    fail_pending(sc)
    sc.sid = W:new_session()
    sc.connected = true
    local t2 = W:spawn(sc, sc.M.on_session, "new", sc.sid)
    return { t1, t2 }, old
end

---------------------------------------------------------------------------
-- One seeded run.  Returns the list of what went wrong (empty: passed)
-- and the step log.

local function run(seed)
    local r = prng(seed)
    local log, bad = {}, {}
    local function note(s) log[#log + 1] = string.format("[%d] %s", #log + 1, s) end
    local W, a, b, c, sha = world()
    local function step(ms) W:advance(ms) end

    -- the mix on a
    local nstr, nlock, nwait, nttl = r.int(4) - 1, r.int(4) - 1, r.int(3) - 1, r.int(3) - 1
    local redisson, subs, evalsha, watch = r.chance(0.6), r.chance(0.7), r.chance(0.6), r.chance(0.5)
    note(string.format("mix: str=%d lock=%d wait=%d ttl=%d redisson=%s subs=%s evalsha=%s watch=%s",
                       nstr, nlock, nwait, nttl, tostring(redisson), tostring(subs), tostring(evalsha), tostring(watch)))
    local tasks = {}
    local function start(sc, id, ...)
        local t = sc:start(...)
        t.client = id
        t.what = table.concat({ ... }, " ")
        tasks[#tasks + 1] = t
        return t
    end
    for i = 1, nstr do
        local rr = a:call_as(40 + i, "SET", "s" .. i, "v", "NX", "PX", tostring(r.pick({ 3000, 60000 })))
        note("SET s" .. i .. " NX: " .. S.show(rr))
    end
    for i = 1, nttl do a:call("SET", "t" .. i, "v", "PX", tostring(r.pick({ 500, 5000, 30000 }))) end
    local held = {}
    for i = 1, nlock do
        local px = r.pick({ 3000, 60000 })
        local rr = a:call("LOCK.ACQUIRE", "L" .. i, "o" .. i, "PX", tostring(px))
        note("LOCK.ACQUIRE L" .. i .. " PX " .. px .. ": " .. S.show(rr))
        if math.type(rr) == "integer" then held[#held + 1] = i end
    end
    local waiters = {}
    for i = 1, nwait do
        b:call("LOCK.ACQUIRE", "M" .. i, "h" .. i, "PX", "60000")
        waiters[i] = start(a, 60 + i, "LOCK.ACQUIRE", "M" .. i, "w" .. i, "PX", "60000", "WAIT", "60000")
    end
    local rw
    if redisson then
        assert.equal(null, b:call("EVAL", LOCK, "1", "R", "30000", "b:1"))
        a:call_as(7, "SUBSCRIBE", CH)
        rw = a:call_as(7, "EVAL", LOCK, "1", "R", "30000", "a:1")
        note("redisson waiter: " .. S.show(rw))
    end
    if subs then
        a:call_as(20, "SUBSCRIBE", "news")
        a:call_as(21, "PSUBSCRIBE", "ne*")
    end
    if watch then a:call_as(30, "WATCH", "wk") end
    if evalsha then start(a, 50, "EVALSHA", sha, "1", "cnt") end
    step(r.int(8) - 1)

    -- faults on the handling's own requests
    local nf = r.int(3) - 1
    for _ = 1, nf do
        local f = { op = r.pick({ "create", "multi", "get", "exists", "children", "delete", "set" }),
                    when = r.pick({ "before", "after" }),
                    rc = r.pick({ S.codes.CONNECTIONLOSS, S.codes.OPERATIONTIMEOUT, S.codes.TIMEOUT }),
                    skip = r.int(4) - 1 }
        -- (the bridge's TIMEOUT: a request never sent, so never applied)
        if f.rc == S.codes.TIMEOUT then f.when = "before" end
        a:fail_next(f)
        note(string.format("fault %s %s rc=%d skip=%d", f.op, f.when, f.rc, f.skip))
    end

    if r.chance(0.25) then
        local n = r.int(40)
        stall_registrations(a, n)
        note("registrations stalled " .. n .. " times")
    end

    -- the change
    local kind = r.pick({ "expire", "lose_now", "lose_later", "disconnect" })
    note("change: " .. kind)
    local handlers, olds = {}, {}
    local function change(k)
        local ts, old
        if k == "expire" then ts, old = expire_async(a)
        elseif k == "lose_now" then ts, old = lose_async(a, true)
        else ts, old = lose_async(a, false) end
        for _, t in ipairs(ts) do handlers[#handlers + 1] = t end
        olds[#olds + 1] = old
    end
    if kind == "disconnect" then
        a:disconnect()
        step(4000) -- past the 3 s leases, within the 10 s session
        a:reconnect()
    else
        change(kind)
    end
    -- a SCRIPT FLUSH through b while a's change is handled: a's EVALSHA
    -- of a script that reads a key answers NOSCRIPT from then on
    local flushed
    if kind ~= "disconnect" and r.chance(0.3) then
        local sha2 = a:call("SCRIPT", "LOAD", READER)
        step(r.int(4) - 1)
        flushed = b:call("SCRIPT", "FLUSH")
        note("b SCRIPT FLUSH: " .. S.show(flushed))
        if flushed == nil or flushed.ok ~= "OK" then flushed = nil end
        if flushed then
            local rr = a:call("EVALSHA", sha2, "1", "somekey")
            note("a EVALSHA of a flushed script: " .. S.show(rr))
            if not (type(rr) == "table" and rr.err and rr.err:find("^NOSCRIPT") or S.tryagain(rr)) then
                bad[#bad + 1] = "EVALSHA of a script flushed through b answered " .. S.show(rr)
            end
        end
    end
    if redisson and r.chance(0.7) then
        step(r.int(5) - 1)
        note("b unlocks R: " .. S.show(b:call("EVAL", UNLOCK, "2", "R", CH, "0", "30000", "b:1")))
    end
    if kind ~= "disconnect" and r.chance(0.3) then
        step(r.int(6) - 1)
        local k2 = r.pick({ "expire", "lose_now", "lose_later" })
        note("second change: " .. k2)
        change(k2)
    end

    -- every module settles
    W:run_until(function()
        for _, t in ipairs(handlers) do if not t.done then return false end end
        return true
    end, 30000)
    for i, t in ipairs(handlers) do
        if not t.done then bad[#bad + 1] = "on_session task " .. i .. " never finished" end
    end
    step(200)
    a.faults = {}

    -- the Redisson waiter: once R is free, it hears an unlock (real or made up)
    if redisson and rw ~= null then
        b:call("EVAL", UNLOCK, "2", "R", CH, "0", "30000", "b:1") -- (0 or nil when done already)
        step(500)
        if S.messages(a, 7, CH) < 1 then bad[#bad + 1] = "the Redisson waiter never heard the unlock" end
    end

    -- the in-flight commands: answered, never an internal error
    W:run_until(function()
        for _, t in ipairs(tasks) do if not t.done then return false end end
        return true
    end, 70000)
    for _, t in ipairs(tasks) do
        if not t.done then bad[#bad + 1] = "never answered: " .. t.what
        elseif internal(t.result) then bad[#bad + 1] = t.what .. ": " .. S.show(t.result) end
        note(t.what .. " -> " .. (t.done and S.show(t.result) or "(waiting)"))
    end

    -- subscribers hear a message published after the change, once
    if subs then
        local n20, n21 = #(a.pushed[20] or {}), #(a.pushed[21] or {})
        local rr = c:call("PUBLISH", "news", "after")
        note("PUBLISH news: " .. S.show(rr))
        step(300)
        if #(a.pushed[20] or {}) ~= n20 + 1 then
            bad[#bad + 1] = "SUBSCRIBE client got " .. (#(a.pushed[20] or {}) - n20) .. " messages, not 1"
        end
        if #(a.pushed[21] or {}) ~= n21 + 1 then
            bad[#bad + 1] = "PSUBSCRIBE client got " .. (#(a.pushed[21] or {}) - n21) .. " messages, not 1"
        end
    end

    -- EVALSHA of the loaded script still runs
    local ev = a:call("EVALSHA", sha, "1", "cnt2")
    if flushed then
        if not (type(ev) == "table" and ev.err and ev.err:find("^NOSCRIPT")) then
            bad[#bad + 1] = "EVALSHA after the FLUSH: " .. S.show(ev)
        end
    elseif math.type(ev) ~= "integer" then
        bad[#bad + 1] = "EVALSHA after the change: " .. S.show(ev)
    end

    -- WATCH/MULTI of a client across the change: an answer, not an internal error
    if watch then
        a:call_as(30, "MULTI")
        a:call_as(30, "SET", "wk", "1")
        local ex = a:call_as(30, "EXEC")
        note("EXEC: " .. S.show(ex))
        if internal(ex) then bad[#bad + 1] = "EXEC: " .. S.show(ex) end
    end

    -- no two holders: a LOCK key b takes is one a's holder no longer renews
    if kind == "lose_later" then
        step(1000)
        for _, old in ipairs(olds) do W:expire_session(old) end
    end
    step(100)
    for _, i in ipairs(held) do
        local k, o = "L" .. i, "o" .. i
        local got = b:call("LOCK.ACQUIRE", k, "x", "PX", "60000", "WAIT", "0")
        local renew = a:call("LOCK.RENEW", k, o, "PX", "60000")
        note(k .. ": b " .. S.show(got) .. ", a's renew " .. S.show(renew))
        if math.type(got) == "integer" and renew ~= 0 then
            bad[#bad + 1] = k .. ": b holds it and a's " .. o .. " renewed it (" .. S.show(renew) .. ")"
        end
        if math.type(got) == "integer" then b:call("LOCK.RELEASE", k, "x") end
    end

    -- release everything, let every lease pass
    for i = 1, nwait do b:call("LOCK.RELEASE", "M" .. i, "h" .. i) end
    step(200)
    for i = 1, nwait do a:call("LOCK.RELEASE", "M" .. i, "w" .. i) end
    for i = 1, nlock do a:call("LOCK.RELEASE", "L" .. i, "o" .. i) end
    for i = 1, nstr do a:call("DEL", "s" .. i) end
    for _, id in ipairs({ 7, 20, 21, 30 }) do a:run(function() a.M.on_client_gone(id) end) end
    for _, old in ipairs(olds) do if W.sessions[old].alive then W:expire_session(old) end end
    step(120000)

    -- one end per LOCK hold of a, told by a
    local ends = {}
    for _, e in ipairs(events(a)) do
        local ev_, key, owner = e:match("^(%a+) (%S+) (%S+)")
        if ev_ ~= "acquire" and key:match("^L%d") then
            ends[key .. " " .. owner] = (ends[key .. " " .. owner] or 0) + 1
        end
    end
    for _, i in ipairs(held) do
        local n = ends["L" .. i .. " o" .. i] or 0
        if n ~= 1 then bad[#bad + 1] = "L" .. i .. " o" .. i .. ": told " .. n .. " ends" end
    end
    local lost = {}
    for _, e in ipairs(events(a)) do
        local key = e:match("^lost (%S+)")
        if key then lost[key] = (lost[key] or 0) + 1 end
    end
    for key, n in pairs(lost) do
        if n > 1 then bad[#bad + 1] = "on_lost told " .. n .. " times for " .. key end
    end

    -- nothing left: lock nodes, a's keys, interest nodes
    for _, k in ipairs(W:children("/zkresp/l") or {}) do
        local kids = W:children("/zkresp/l/" .. k) or {}
        if #kids > 0 then bad[#bad + 1] = "lock requests left under " .. k .. ": " .. table.concat(kids, ",") end
    end
    for _, k in ipairs(W:children("/zkresp/k") or {}) do
        local key = k
        if not (key:match("^warm") or key == "cnt" or key == "cnt2" or key == "wk") then
            bad[#bad + 1] = "key left: " .. key
        end
    end
    for _, kind_ in ipairs({ "c", "p", "s" }) do
        for _, ch in ipairs(W:children("/zkresp/ps/" .. kind_) or {}) do
            local kids = W:children("/zkresp/ps/" .. kind_ .. "/" .. ch) or {}
            if #kids > 0 then bad[#bad + 1] = "interest left " .. kind_ .. "/" .. ch .. ": " .. #kids end
        end
    end
    -- in-memory: a's holds, owned keys, waiters
    local LK = a.LK
    if next(LK.holds) then
        local ks = {}
        for p in pairs(LK.holds) do ks[#ks + 1] = p end
        bad[#bad + 1] = "a's L.holds left: " .. table.concat(ks, ",")
    end
    if #bad > 0 then
        for _, l in ipairs(a.logs) do if not l:find("^info") then note("a's log: " .. l) end end
    end
    return bad, log
end

local function check(seed)
    local ok, bad, log = pcall(run, seed)
    if not ok then
        error(string.format("seed %d raised: %s", seed, tostring(bad)), 0)
    end
    if #bad > 0 then
        error(string.format("seed %d:\n  %s\nsteps:\n  %s", seed, table.concat(bad, "\n  "),
                            table.concat(log, "\n  ")), 0)
    end
end


---------------------------------------------------------------------------
-- The seeds' findings, shrunk

-- The session changes as the server sees them: a cut off past its
-- session (the server expired it, its watches gone), then its new session
-- handled in a task of its own (returned).
-- LOCK.INFO's holders of key, by owner.
local function holders(sc, key)
    local out = {}
    for _, e in ipairs(sc:call("LOCK.INFO", key).map[2]) do
        local m = e.map
        for i = 1, #m, 2 do if m[i] == "owner" then out[#out + 1] = m[i + 1] end end
    end
    return out
end

local function expired_then_new(W, sc)
    W:expire_session(sc.sid)
    sc.held = nil
    fail_pending(sc)
    sc.sid = W:new_session()
    sc.connected = true
    return W:spawn(sc, sc.M.on_session, "new", sc.sid)
end

describe("the pub/sub inbox under a new session", function()
    -- FAILED before (seeds 40, 143, 235, 442).  A new session's PS.on_session
    -- sets up the inbox (PB.start: presence, inbox, a listing that sets the
    -- inbox's child watch).  When one of its requests fails (a reply lost
    -- as the connection flaps right after the new session) it was only
    -- logged: the interest is registered all the same (the worker makes the
    -- inbox itself), PUBLISH through other sidecars routes to a and counts
    -- its subscribers, but nothing lists a's inbox and no watch is set:
    -- every message waits there, undelivered, until a's next reconnection
    -- (hours away on a healthy network).  pubsub.lua's PS.on_session:
    -- PB.start is now tried again (PB.start_later).
    for _, rc in ipairs({ "CONNECTIONLOSS", "OPERATIONTIMEOUT" }) do
        it("delivers to a subscriber when setting up the inbox lost a reply (" .. rc .. ")", function()
            local W, a, _, c = S.warm_world(3)
            a:call_as(20, "SUBSCRIBE", "news")
            W:advance(100)
            local presence = a:run(function() return a.require("pubsub_nodes").presence() end)
            a:fail_next({ op = "create", path = presence, rc = S.codes[rc], when = "after" })
            local t = expired_then_new(W, a)
            W:run_until(function() return t.done end, 5000)
            W:advance(500)
            assert.equal(1, c:call("PUBLISH", "news", "after"))
            W:advance(500)
            assert.equal(1, S.messages(a, 20, "news"), "the subscriber never got the message")
        end)
    end
end)

describe("the made-up unlock after a new session", function()
    -- FAILED before (seed 599 of an earlier draw).  Redisson's waiter on a
    -- (subscribed to the lock's channel, told the TTL) misses the unlock
    -- published while a had no session; the new session's handling makes
    -- it up once its interest is back (make_up: a read of the lock's key).
    -- When the connection drops right after the registration, that read
    -- is parked until the handling's deadline (2 s of waiting, most of it
    -- spent already) and answers TIMEOUT: make_up_channel gave up without
    -- a word, and the waiter slept out the lease it was told (30 s) while
    -- the lock was free.  Now the read is tried again a moment later.
    it("is sent when its read of the lock's key timed out in a disconnect just after the registration", function()
        local W, a, b = world()
        assert.equal(null, b:call("EVAL", LOCK, "1", "R", "30000", "b:1"))
        a:call_as(7, "SUBSCRIBE", CH)
        assert.is_number(a:call_as(7, "EVAL", LOCK, "1", "R", "30000", "a:1"))
        -- a cut off past its session: the unlock goes without it
        W:expire_session(a.sid)
        assert.equal(1, b:call("EVAL", UNLOCK, "2", "R", CH, "0", "30000", "b:1"))
        assert.equal(0, S.messages(a, 7, CH))
        -- its interest registered again, the connection drops
        local multi = a.zk.multi
        a.zk.multi = function(ops, ...)
            local r = table.pack(multi(ops, ...))
            if tostring(ops[1][2]):find("/ps/c/", 1, true) then
                a.zk.multi = multi
                a.connected = false
                W:spawn(a, a.M.on_session, "disconnected", a.sid)
            end
            return table.unpack(r, 1, r.n)
        end
        local t = expired_then_new(W, a)
        W:advance(2900)
        a:reconnect()
        W:advance(1000)
        assert.is_true(t.done)
        assert.equal(1, S.messages(a, 7, CH), "the waiter sleeps out the lease of a free lock")
    end)
end)

describe("the script cache under a new session", function()
    -- FAILED before (seeds 24, 27, 442...).  The watch on <root>/s goes with
    -- the old session; a SCRIPT FLUSH through b meanwhile (answered OK)
    -- fires nothing on a.  The cache stopped trusting that watch only in
    -- SC.on_session, which M.on_session runs last, after the keyspace's
    -- init and pub/sub's PI.await_all (every channel registered again: a
    -- few round trips, or seconds while ZooKeeper is slow): meanwhile a's
    -- EVALSHA of the flushed script, which reads a key from ZooKeeper, ran
    -- it and answered, where the README says NOSCRIPT ("as soon as it
    -- reads a key from ZooKeeper").  zkresp.lua's M.on_session now marks
    -- the cache unverified first (script_cache.lua's C.session_changed).
    local READS = "redis.call('get', KEYS[1]) return 'old'"
    for _, stalled in ipairs({ false, true }) do
        it("answers NOSCRIPT for a script flushed elsewhere while the new session is handled" ..
           (stalled and " (pub/sub registrations failing)" or ""), function()
            local W, a, b = S.warm_world(2)
            local sha = a:call("SCRIPT", "LOAD", READS)
            assert.equal("old", a:call("EVALSHA", sha, "1", "k"))
            a:call_as(7, "SUBSCRIBE", "news")
            W:advance(100)
            if stalled then stall_registrations(a, 40) end
            W:expire_session(a.sid)
            assert.same(S.OK, b:call("SCRIPT", "FLUSH"))
            a.held = nil
            a.sid = W:new_session()
            local t = W:spawn(a, a.M.on_session, "new", a.sid)
            local e = a:start("EVALSHA", sha, "1", "k")
            W:run_until(function() return e.done end)
            assert.same(S.E("NOSCRIPT No matching script. Please use EVAL."), e.result)
            W:advance(300)
            assert.same(S.E("NOSCRIPT No matching script. Please use EVAL."), a:call("EVALSHA", sha, "1", "k"))
            W:run_until(function() return t.done end, 20000)
        end)
    end
end)

describe("LOCK.* while the new session's pub/sub registration is stalled (M.on_session waits in PI.await_all)", function()
    -- FAILED before (the first two).  M.on_session ran LK.on_session after
    -- PS.on_session, whose PI.await_all waits until every channel is
    -- registered again (seconds while ZooKeeper is slow or flapping): until
    -- then the old session's waiters, whose watches went with it, were not
    -- answered (a LOCK.ACQUIRE ... WAIT left hanging though its request
    -- was gone and the lock granted to the next waiter), and the old
    -- hold's on_lost came after the on_acquire of a new hold of the same
    -- key and owner made meanwhile (a policy keeping "who holds what" by
    -- key ends up believing the live hold lost).  zkresp.lua: LK.on_session
    -- now runs before pub/sub's (it sends nothing and waits for nothing).
    it("answers an old-session waiter -TRYAGAIN and grants the next waiter on the release", function()
        local W, a, b, c = S.warm_world(3)
        b:call("LOCK.ACQUIRE", "M", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "M", "w", "PX", "60000", "WAIT", "60000")
        W:advance(600)
        a:call_as(7, "SUBSCRIBE", "news")
        stall_registrations(a, 40)
        local t = expired_then_new(W, a)
        W:advance(300)
        assert.is_falsy(t.done)
        local x = c:start("LOCK.ACQUIRE", "M", "x", "PX", "60000", "WAIT", "60000")
        W:advance(100)
        assert.equal(1, b:call("LOCK.RELEASE", "M", "h"))
        W:advance(100)
        assert.truthy(S.tryagain(w.result), S.show(w.result))
        assert.is_number(x.result)
        W:run_until(function() return t.done end, 20000)
        assert.same({ "x" }, holders(a, "M"))
    end)

    it("gives a reentrant ACQUIRE a fresh grant and tells the old hold's on_lost once, after the wait", function()
        local W, a, b = world()
        local t1 = a:call("LOCK.ACQUIRE", "L", "o", "PX", "60000")
        a:call_as(7, "SUBSCRIBE", "news")
        W:advance(100)
        stall_registrations(a, 40)
        local t = expired_then_new(W, a)
        W:advance(300)
        local t2 = a:call("LOCK.ACQUIRE", "L", "o", "PX", "60000")
        assert.is_true(math.type(t2) == "integer" and t2 > t1, S.show(t2))
        assert.equal(null, b:call("LOCK.ACQUIRE", "L", "x", "WAIT", "0"))
        W:run_until(function() return t.done end, 20000)
        assert.equal(1, a:call("LOCK.RENEW", "L", "o", "PX", "60000"))
        assert.equal(1, a:call("LOCK.RELEASE", "L", "o"))
        W:advance(10) -- (the hooks run in tasks of their own)
        local told = {}
        for _, e in ipairs(events(a)) do if e:find(" L o ") then told[#told + 1] = e end end
        assert.same({ "acquire L o -", "lost L o session", "acquire L o -", "release L o -" }, told)
        assert.is_number(b:call("LOCK.ACQUIRE", "L", "x", "WAIT", "0"))
    end)

    it("settles a second session change that comes while the first waits: every message once, one on_lost", function()
        local W, a, b, c = world()
        local t1 = a:call("LOCK.ACQUIRE", "L", "o", "PX", "60000")
        assert.is_number(t1)
        a:call_as(20, "SUBSCRIBE", "news")
        a:call_as(21, "PSUBSCRIBE", "ne*")
        stall_registrations(a, 20)
        local first = expired_then_new(W, a)
        W:advance(150)
        local second = expired_then_new(W, a)
        W:run_until(function() return first.done and second.done end, 30000)
        assert.is_true(first.done and second.done)
        W:advance(300)
        assert.equal(2, c:call("PUBLISH", "news", "m"))
        W:advance(300)
        assert.equal(1, S.messages(a, 20, "news"))
        local pm = 0
        for _, f in ipairs(a.pushed[21] or {}) do if f.push[1] == "pmessage" then pm = pm + 1 end end
        assert.equal(1, pm)
        local lost = 0
        for _, e in ipairs(events(a)) do if e == "lost L o session" then lost = lost + 1 end end
        assert.equal(1, lost)
        assert.is_number(b:call("LOCK.ACQUIRE", "L", "x", "WAIT", "0"))
        assert.equal(1, b:call("LOCK.RELEASE", "L", "x"))
        assert.same({}, W:children(a.LK.lock_path("L")) or {})
    end)
end)

local SEEDS = os.getenv("FUZZ_SEEDS")

describe("a session change with everything in flight (seeded)", function()
    if SEEDS then
        local from, to = SEEDS:match("^(%d+)-(%d+)$")
        local failed = {}
        it("seeds " .. SEEDS, function()
            for seed = tonumber(from), tonumber(to) do
                local ok, e = pcall(check, seed)
                if not ok then failed[#failed + 1] = tostring(e) end
            end
            if #failed > 0 then error(#failed .. " seeds failed:\n" .. table.concat(failed, "\n\n"), 0) end
        end)
    else
        -- 24, 27, 43 (the script cache), 40 (the inbox), 143, 235, 442
        -- failed before (see the shrunk cases above); the rest are a sweep
        local list = { 143, 235, 442 }
        for seed = 1, 50 do list[#list + 1] = seed end
        for _, seed in ipairs(list) do
            it("seed " .. seed, function() check(seed) end)
        end
    end
end)
