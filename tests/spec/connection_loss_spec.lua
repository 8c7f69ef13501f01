-- connection_loss_spec: a command whose write is in flight exactly when
-- its sidecar's connection to ZooKeeper drops, the session living on.
-- The ZooKeeper C client ends every request in flight with CONNECTIONLOSS
-- as the connection drops (zookeeper.c's handle_error: the session event
-- first, the bridge's "disconnected", then cleanup_bufs), though the server
-- may have applied it (a lost reply); what is asked while disconnected is
-- parked by the bridge (zk.c's zk_send_or_park) and sent at the reconnect,
-- or answered at its deadline.  The model does so (zkmodel.lua's
-- drop_connection, Sidecar:reconnect).
--
-- Each case: the write in flight, the connection drops (applied, or not:
-- `unapplied`), comes back 300 ms later; the reply must agree with what
-- the keyspace holds then, nothing applied twice, nothing left behind.

local S = require "world"
local null, OK = S.null, S.OK
local tryagain = S.tryagain

local WRITES = { "create", "set", "delete", "multi" }

-- Starts a command on sc for client id and runs until its first write is
-- sent and unanswered (made slow: 200 ms); returns the task.
local function in_flight(W, sc, id, ...)
    local mine = {}
    for _, kind in ipairs(WRITES) do
        local f = { op = kind, pass = true, latency = 200 }
        mine[f] = true
        sc:fail_next(f)
    end
    local args = { ... }
    local t
    if type(args[1]) == "function" then t = W:spawn(sc, args[1]) else t = sc:start(...) end
    t.client = id
    W:run_until(function()
        for _, r in ipairs(sc.inflight) do if r.fault and mine[r.fault] then return true end end
        assert(not t.done, "the command ended before a write was sent: " .. S.show(t.result))
        return false
    end, 1000)
    local left = {}
    for _, f in ipairs(sc.faults) do if not mine[f] then left[#left + 1] = f end end
    sc.faults = left
    return t
end

-- The connection drops with the command's write in flight, comes back
-- 300 ms later; returns the command's reply.
local function dropped(W, sc, unapplied, ...)
    local t = in_flight(W, sc, 1, ...)
    sc:disconnect({ unapplied = unapplied })
    W:advance(300)
    sc:reconnect()
    W:run_until(function() return t.done end, 60000)
    return t.result
end

local HOWS = { false, true }
local function tag(unapplied) return unapplied and " (not applied)" or " (applied, its reply lost)" end

describe("the model: a connection drop", function()
    it("emits disconnected, then answers what was in flight CONNECTIONLOSS; later requests wait for the reconnect", function()
        local W, a = S.world(1)
        local seen, got = {}, nil
        local on_session = a.M.on_session
        a.M.on_session = function(e, id)
            seen[#seen + 1] = { e, got }
            return on_session(e, id)
        end
        local t = W:spawn(a, function() got = a.zk.create("/x", "1", 0) end)
        a:fail_next({ op = "create", pass = true, latency = 200 })
        W:settle()
        a:disconnect()
        W:run_until(function() return t.done end)
        assert.equal(a.zk.CONNECTIONLOSS, got)
        assert.same({ "disconnected" }, seen[1])
        assert.is_not_nil(W:node("/x")) -- applied, its reply lost
        local later
        local t2 = W:spawn(a, function() later = a.zk.create("/y", "1", 0) end)
        W:advance(500)
        assert.is_nil(later)
        a:reconnect()
        W:run_until(function() return t2.done end)
        assert.equal(a.zk.OK, later)
        assert.same({ "connected", a.zk.CONNECTIONLOSS }, seen[2])
    end)
end)

describe("a string-key write in flight as the connection drops", function()
    for _, unapplied in ipairs(HOWS) do
        it("SET: OK and the value, or TRYAGAIN" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local r = dropped(W, a, unapplied, "SET", "k", "v")
            assert.is_true(S.show(r) == "OK" or tryagain(r), S.show(r))
            if S.show(r) == "OK" then assert.equal("v", b:call("GET", "k")) end
        end)

        it("SET with a TTL: OK only if the key stays to its TTL; gone after" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local r = dropped(W, a, unapplied, "SET", "k", "v", "PX", "5000")
            assert.is_true(S.show(r) == "OK" or tryagain(r), S.show(r))
            if S.show(r) == "OK" then assert.equal("v", b:call("GET", "k")) end
            W:advance(6000)
            assert.equal(null, b:call("GET", "k"))
        end)

        it("INCR: the value it answers, never applied twice" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "n", "10"))
            local r = dropped(W, a, unapplied, "INCR", "n")
            assert.is_true(r == 11 or tryagain(r), S.show(r))
            local v = b:call("GET", "n")
            if r == 11 then assert.equal("11", v) else assert.is_true(v == "10" or v == "11", v) end
        end)

        it("INCR of a key with a TTL: never applied twice, the TTL kept" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "n", "10", "PX", "60000"))
            local r = dropped(W, a, unapplied, "INCR", "n")
            assert.is_true(r == 11 or tryagain(r), S.show(r))
            local v = b:call("GET", "n")
            if r == 11 then assert.equal("11", v) else assert.is_true(v == "10" or v == "11", v) end
            local ttl = b:call("PTTL", "n")
            assert.is_true(ttl > 0 and ttl <= 60000, S.show(ttl))
        end)

        it("RPUSH: the length it answers, the element once" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.equal(1, a:call("RPUSH", "l", "x"))
            local r = dropped(W, a, unapplied, "RPUSH", "l", "y")
            assert.is_true(r == 2 or tryagain(r), S.show(r))
            local got = b:call("LRANGE", "l", "0", "-1")
            if r == 2 then assert.same({ "x", "y" }, got)
            else assert.is_true(#got == 1 or (#got == 2 and got[2] == "y"), S.show(got)) end
        end)

        it("HSET with a TTL: the count it answers, the field once, the TTL kept" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.equal(1, a:call("HSET", "h", "f1", "1"))
            assert.equal(1, a:call("PEXPIRE", "h", "60000"))
            local r = dropped(W, a, unapplied, "HSET", "h", "f2", "2")
            assert.is_true(r == 1 or tryagain(r), S.show(r))
            if r == 1 then assert.equal("2", b:call("HGET", "h", "f2")) end
            local ttl = b:call("PTTL", "h")
            assert.is_true(ttl > 0 and ttl <= 60000, S.show(ttl))
        end)

        it("DEL: 1 or TRYAGAIN, and 1 only when the key is gone" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "d", "v"))
            local r = dropped(W, a, unapplied, "DEL", "d")
            assert.is_true(r == 1 or tryagain(r), S.show(r))
            if r == 1 then assert.equal(null, b:call("GET", "d")) end
        end)

        it("EXPIRE: 1 only when the key has the TTL" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "e", "v"))
            local r = dropped(W, a, unapplied, "PEXPIRE", "e", "3000")
            assert.is_true(r == 1 or tryagain(r), S.show(r))
            if r == 1 then
                local ttl = b:call("PTTL", "e")
                assert.is_true(ttl > 0 and ttl <= 3000, S.show(ttl))
                W:advance(4000)
                assert.equal(null, b:call("GET", "e"))
            end
        end)

        it("MULTI/EXEC: all or nothing, applied once" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "m", "1"))
            local function send(mode, ...)
                local args = { ... }
                return function() return a.M.dispatch(args, false, 0, mode) end
            end
            local function run(mode, ...)
                local t = W:spawn(a, send(mode, ...))
                t.client = 3
                W:run_until(function() return t.done end)
                return t.result
            end
            assert.same(OK, run("begin", "MULTI"))
            run("queued", "INCR", "m")
            run("queued", "SET", "m2", "x")
            local t = in_flight(W, a, 3, send("queued", "EXEC"))
            a:disconnect({ unapplied = unapplied })
            W:advance(300)
            a:reconnect()
            W:run_until(function() return t.done end, 60000)
            local r = t.result
            local m, m2 = b:call("GET", "m"), b:call("GET", "m2")
            if tryagain(r) then
                assert.is_true((m == "1" and m2 == null) or (m == "2" and m2 == "x"), S.show({ m, m2 }))
            else
                assert.same({ 2, OK }, r)
                assert.equal("2", m)
                assert.equal("x", m2)
            end
        end)
    end
end)

describe("a script's commit with a publish in flight as the connection drops", function()
    local script = "redis.call('set', KEYS[1], ARGV[1]); return redis.call('publish', 'ch', ARGV[1])"
    for _, unapplied in ipairs(HOWS) do
        it("publishes once, its reply agrees with the key" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            b:call_as(7, "SUBSCRIBE", "ch")
            assert.equal(1, a:call("EVAL", script, "1", "warm", "w"))
            W:advance(100)
            local r = dropped(W, a, unapplied, "EVAL", script, "1", "sk", "once")
            W:advance(2000)
            local n = S.messages(b, 7, "ch") - 1
            assert.is_true(n <= 1, "published " .. n .. " times")
            if r == 1 then
                assert.equal(1, n)
                assert.equal("once", b:call("GET", "sk"))
            else
                assert.is_true(tryagain(r), S.show(r))
            end
        end)
    end
end)

describe("a lock command in flight as the connection drops", function()
    for _, unapplied in ipairs(HOWS) do
        it("LOCK.ACQUIRE: a token only for a hold; else the lock free" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local r = dropped(W, a, unapplied, "LOCK.ACQUIRE", "L", "o", "PX", "60000")
            assert.is_true(math.type(r) == "integer" or tryagain(r), S.show(r))
            W:advance(1000)
            if math.type(r) == "integer" then
                assert.equal(null, b:call("LOCK.ACQUIRE", "L", "x", "WAIT", "0"))
                assert.equal(1, a:call("LOCK.RELEASE", "L", "o"))
            end
            assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "L", "x", "WAIT", "0")))
        end)

        it("LOCK.RELEASE: 1 or TRYAGAIN, the lock free after" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "R", "o", "PX", "60000")))
            local r = dropped(W, a, unapplied, "LOCK.RELEASE", "R", "o")
            assert.is_true(r == 1 or tryagain(r), S.show(r))
            if tryagain(r) then a:call("LOCK.RELEASE", "R", "o") end
            W:advance(100)
            assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "R", "x", "WAIT", "0")))
        end)

        it("LOCK.RENEW: the hold kept, renewed or not" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "N", "o", "PX", "3000")))
            local r = dropped(W, a, unapplied, "LOCK.RENEW", "N", "o", "PX", "60000")
            assert.is_true(r == 1 or tryagain(r), S.show(r))
            assert.equal(null, b:call("LOCK.ACQUIRE", "N", "x", "WAIT", "0"))
            if r == 1 then
                W:advance(5000)
                assert.equal(null, b:call("LOCK.ACQUIRE", "N", "x", "WAIT", "0"), "renewed, yet gone at the old lease")
            end
        end)

        it("LOCK.CONVERT: the hold in the mode it answers" .. tag(unapplied), function()
            local W, a, _, c = S.warm_world(3)
            assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cv", "o", "MODE", "CR", "PX", "60000")))
            local r = dropped(W, a, unapplied, "LOCK.CONVERT", "cv", "o", "MODE", "EX")
            assert.is_false(type(r) == "table" and type(r.err) == "string" and not tryagain(r), S.show(r))
            W:advance(100)
            -- held still (CR or EX): an EX elsewhere waits
            assert.equal(null, c:call("LOCK.ACQUIRE", "cv", "x", "WAIT", "0"))
            if not tryagain(r) then
                -- EX: a CR elsewhere waits too
                assert.equal(null, c:call("LOCK.ACQUIRE", "cv", "y", "MODE", "CR", "WAIT", "0"))
            end
            assert.equal(1, a:call("LOCK.RELEASE", "cv", "o"))
            W:advance(100)
            assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "cv", "x", "WAIT", "0")))
        end)
    end
end)

describe("registrations in flight as the connection drops", function()
    for _, unapplied in ipairs(HOWS) do
        it("SUBSCRIBE's registration: later messages from another sidecar arrive once" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local t = in_flight(W, b, 7, "SUBSCRIBE", "news")
            b:disconnect({ unapplied = unapplied })
            W:advance(300)
            b:reconnect()
            W:run_until(function() return t.done end, 60000)
            W:advance(1000)
            assert.equal(1, a:call("PUBLISH", "news", "m"))
            W:advance(1000)
            assert.equal(1, S.messages(b, 7, "news"))
        end)

        it("SCRIPT LOAD: the sha runs on another sidecar once answered" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local r = dropped(W, a, unapplied, "SCRIPT", "LOAD", "return 42")
            if not tryagain(r) then
                assert.equal("string", type(r), S.show(r))
                assert.equal(42, b:call("EVALSHA", r, "0"))
            end
        end)

        it("SCRIPT FLUSH: OK, and the script gone everywhere" .. tag(unapplied), function()
            local W, a, b = S.warm_world(2)
            local sha = a:call("SCRIPT", "LOAD", "return 7")
            assert.equal(7, b:call("EVALSHA", sha, "0"))
            local r = dropped(W, a, unapplied, "SCRIPT", "FLUSH")
            if not tryagain(r) then
                assert.same(OK, r)
                W:advance(1000)
                local e = b:call("EVALSHA", sha, "0")
                assert.is_true(type(e) == "table" and e.err and e.err:find("^NOSCRIPT") ~= nil, S.show(e))
            end
        end)
    end
end)
