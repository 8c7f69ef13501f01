-- Faults: writes of unknown outcome are resolved before answering; nodes of
-- our dead sessions are never re-adopted; TRYAGAIN when ZooKeeper stays
-- away past the command's deadline or the sidecar is closing.

local S = require "world"
local null, OK, UNAVAILABLE, Z = S.null, S.OK, S.UNAVAILABLE, S.codes

local count = S.count_ops

describe("unknown outcomes", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("a create that applied is recognised by its nonce and session: OK once", function()
        a:fail_next({ op = "create", when = "after" })
        local before = #W.ops
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        assert.equal(1, count(W, "create", before))
        assert.equal(1, count(W, "sync", before))
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        -- and it is owned: it expires on a's clock
        W:advance(30010)
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("a create that did not apply is retried from the first read", function()
        a:fail_next({ op = "create", when = "before" })
        local before = #W.ops
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        assert.equal(2, count(W, "create", before))
        assert.equal("t", b:call("GET", "lock"))
    end)

    it("a lost create that another sidecar beat is answered null, not OK", function()
        a:fail_next({ op = "create", when = "before", hook = function()
            W:raw_create(a:path("lock"), "theirs")
        end })
        assert.equal(null, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        assert.equal("theirs", b:call("GET", "lock"))
    end)

    it("a set that applied is not applied twice (INCR)", function()
        a:call("SET", "n", "5")
        a:fail_next({ op = "set", when = "after" })
        assert.equal(6, a:call("INCR", "n"))
        assert.equal("6", b:call("GET", "n"))
    end)

    it("a set that did not apply is applied once (INCR)", function()
        a:call("SET", "n", "5")
        a:fail_next({ op = "multi", when = "before" }) -- (a set and its persistent mark's check)
        assert.equal(6, a:call("INCR", "n"))
        assert.equal("6", b:call("GET", "n"))
    end)

    it("a set that applied and was overwritten since is not applied again (INCR)", function()
        a:call("SET", "n", "5")
        local codec = a.require("codec")
        a:fail_next({ op = "multi", when = "after", hook = function()
            -- another sidecar's INCR, planned on a read of ours (6 -> 7),
            -- lands before a looks
            W:raw_set(a:path("n"), codec.encode({ type = codec.STRING, ttl = 0,
                                                  nonce = string.rep("b", 16), payload = "7" }))
        end })
        assert.same(UNAVAILABLE, a:call("INCR", "n"))
        assert.equal("7", b:call("GET", "n"))
    end)

    it("a replacing multi that applied is recognised", function()
        a:call("SET", "k", "v", "PX", "30000")
        local before = #W.ops
        b:fail_next({ op = "multi", when = "after" })
        assert.same(OK, b:call("SET", "k", "w", "PX", "30000"))
        assert.equal(b.sid, W:node(a:path("k")).stat.ephemeralOwner)
        assert.equal(1, count(W, "multi", before))
    end)

    it("a delete that applied answers 1 once", function()
        a:call("SET", "k", "v")
        a:fail_next({ op = "multi", when = "after" }) -- (a persistent node's delete and its mark's check)
        assert.equal(1, a:call("DEL", "k"))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a delete that did not apply is retried", function()
        a:call("SET", "k", "v")
        a:fail_next({ op = "multi", when = "before" })
        local before = #W.ops
        assert.equal(1, a:call("DEL", "k"))
        assert.equal(2, count(W, "multi", before))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a multi delete that did not apply is retried whole", function()
        a:call("SET", "x", "1")
        a:call("SET", "y", "1")
        a:fail_next({ op = "multi", when = "before" })
        assert.equal(2, a:call("DEL", "x", "y"))
        assert.same({}, W:children("/zkresp/k"))
    end)

    it("a compare-and-delete retried after connection loss never deletes the new owner's lock", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        -- Our delete applies, the reply is lost, and b takes the lock before
        -- we look again.
        a:fail_next({ op = "multi", when = "after", hook = function()
            W:post(function() end)
        end })
        local t = a:start("DELIFEQ", "lock", "ta")
        W:run_until(function() return count(W, "sync") > 0 end)
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "30000"))
        W:run_until(function() return t.done end)
        assert.equal(1, t.result)
        assert.equal("tb", b:call("GET", "lock"))
    end)

    it("a compare-and-delete that did not apply leaves the lock of its new owner alone", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        a:fail_next({ op = "multi", when = "before", hook = function()
            -- our lock is taken from us (an overwrite by another client)
            W:raw_delete(a:path("lock"))
            W:raw_create(a:path("lock"), "tb")
        end })
        -- Indistinguishable from the case above (our delete applied, then
        -- the key was re-created): the node we deleted is gone, so 1.
        assert.equal(1, a:call("DELIFEQ", "lock", "ta"))
        assert.equal("tb", b:call("GET", "lock"))
    end)

    -- Another sidecar's write or delete of our node bumps our guard (our
    -- own delete does not): when a lost delete finds the guard moved, the
    -- removal may be theirs, not ours.  a has not heard of the bump yet
    -- (its guard's watch event is late), so it decides from its cache.
    for _, case in ipairs({
        { "a value overwritten before the command came", function() assert.same(OK, b:call("SET", "lock", "tb", "PX", "30000")) end, "tb" },
        { "a key another client deleted first", function() assert.equal(1, b:call("DEL", "lock")) end, null },
    }) do
        it("a lost compare-and-delete does not claim " .. case[1], function()
            b:call("SET", "warmup", "x")
            assert.same(OK, a:call("SET", "lock", "ta", "NX", "PX", "30000"))
            local on_watch = a.M.on_watch
            a.M.on_watch = function(ev, path)
                if path ~= a.K.guard.path then return on_watch(ev, path) end
            end
            case[2]()
            a:fail_next({ op = "multi", when = "before" })
            assert.equal(0, a:call("DELIFEQ", "lock", "ta"))
            assert.equal(case[3], b:call("GET", "lock"))
        end)
    end

    it("a compare-and-delete whose session ended under it does not claim the lock's end", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        a:fail_next({ op = "multi", when = "before", hook = function()
            -- the delete never arrives; our session ends, its node with
            -- it, and another client takes the lock before we look again
            a:expire()
            W:raw_create(a:path("lock"), "tb")
        end })
        -- the node is gone, but maybe by the session's end before we asked:
        -- run again under the new session, which reads the new owner's value
        assert.equal(0, a:call("DELIFEQ", "lock", "ta"))
        assert.equal("tb", b:call("GET", "lock"))
    end)

    it("a compare-and-delete through another sidecar does not claim a lock that went with its holder's session", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        b:fail_next({ op = "multi", when = "before", hook = function()
            -- the holder's session ends (its guard too) and another client
            -- takes the lock before b looks again
            a:expire()
            W:raw_create(a:path("lock"), "tc")
        end })
        assert.equal(0, b:call("DELIFEQ", "lock", "ta"))
        assert.equal("tc", b:call("GET", "lock"))
    end)

    it("a compare-and-delete through another sidecar does not claim a lock its holder's expiry ended", function()
        a:call("SET", "lock", "ta", "NX", "PX", "3000")
        W:advance(2500)
        b:fail_next({ op = "multi", when = "before", hook = function()
            -- the delete never arrives; the holder's sidecar ends the lock
            -- at its TTL and another client takes it before b looks again
            W:raw_delete(a:path("lock"))
            W:raw_create(a:path("lock"), "tc")
        end })
        assert.equal(0, b:call("DELIFEQ", "lock", "ta"))
        assert.equal("tc", b:call("GET", "lock"))
    end)

    it("a script's multi that applied is not run again when its ephemeral key went with the session, and answers TRYAGAIN", function()
        a:fail_next({ op = "multi", when = "after", hook = function()
            -- applied, its reply lost, and the session ends before we look
            W:post(function() a:expire() end)
        end })
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'v', 'PX', 30000) " ..
                                 "return redis.call('incr', KEYS[2])", "2", "a-lock", "b-count")
        -- not 1: the reply would say a-lock is held, and it went
        assert.same(S.UNAVAILABLE, r)
        assert.equal("1", b:call("GET", "b-count"))   -- once, not twice
        assert.equal(null, b:call("GET", "a-lock"))    -- went with the session
    end)

    it("a write whose session expired under it is re-run under the new session", function()
        a:fail_next({ op = "create", when = "after", rc = Z.SESSIONEXPIRED, hook = function()
            W:post(function() a:expire() end)
        end })
        local t = a:start("SET", "lock", "t", "NX", "PX", "30000")
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        local n = W:node(a:path("lock"))
        assert.equal(a.sid, n.stat.ephemeralOwner)
    end)
end)

describe("writes under a session given up", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("a renewal that lands under a session given up meanwhile never answers 1", function()
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        a:fail_next({ skip = 1, pass = true, latency = 50 }) -- the read passes; the write is slow
        local t = a:start("PEXPIRE", "lock", "60000")
        W:advance(10) -- the renewal's write is on its way under the old session
        local old = a:lose() -- the lease runs out; the server keeps the old session
        W:run_until(function() return t.done end)
        assert.are_not.equal(1, t.result)
        -- the node stays the old session's, never moved to the new one
        assert.equal(old, W:node(a:path("lock")).stat.ephemeralOwner)
        assert.is_nil(next(a.K.owned))
    end)

    it("Redisson's fenced lock whose commit lands under it answers TRYAGAIN, not its token", function()
        -- the lock hash (PEXPIREd: ephemeral) and the token counter (INCR:
        -- persistent) in one script; the lock node dies with the session
        local fenced = "if ((redis.call('exists', KEYS[1]) == 0) or " ..
                       "(redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " ..
                       "local token = redis.call('incr', KEYS[2]); " ..
                       "redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
                       "redis.call('pexpire', KEYS[1], ARGV[1]); " ..
                       "return {-1, token}; end; " ..
                       "return {redis.call('pttl', KEYS[1]), -1};"
        local b = W:sidecar()
        a:fail_next({ op = "multi", pass = true, latency = 50 }) -- the commit is slow
        local t = a:start("EVAL", fenced, "2", "flock", "{flock}:token", "30000", "X:1")
        W:advance(10) -- the commit is on its way under the old session
        local old = a:lose()
        W:run_until(function() return t.done end)
        assert.same(S.UNAVAILABLE, t.result)
        W:expire_session(old)
        W:advance(10)
        -- the next holder's token follows the one the counter gave X
        assert.same({ -1, 2 }, b:call("EVAL", fenced, "2", "flock", "{flock}:token", "30000", "Y:1"))
    end)

    it("a script that took a lock and published, whose commit lands under it, publishes once", function()
        local b = W:sidecar()
        b:call_as(7, "SUBSCRIBE", "ch")
        local script = "redis.call('set', KEYS[1], 'v', 'PX', 30000); return redis.call('publish', 'ch', ARGV[1])"
        assert.equal(1, a:call("EVAL", script, "1", "warm", "warm"))
        W:advance(100)
        local old
        a:fail_next({ op = "multi", pass = true, hook = function() old = a:lose({ expire_old = true }) end })
        assert.same(S.UNAVAILABLE, a:call("EVAL", script, "1", "lock", "once"))
        W:expire_session(old)
        W:advance(2000)
        local got = 0
        for _, f in ipairs(b.pushed[7]) do if f.push[3] == "once" then got = got + 1 end end
        assert.equal(1, got)
    end)
end)

describe("between two sessions", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("a script started between two sessions runs under the next one, and applies once", function()
        a:lose({ gap = true })
        local acquire = "if redis.call('exists', KEYS[1]) == 0 or " ..
                        "redis.call('hexists', KEYS[1], ARGV[2]) == 1 then " ..
                        "redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
                        "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
                        "return redis.call('pttl', KEYS[1]);"
        local t = a:start("EVAL", acquire, "1", "rlock", "30000", "holder")
        W:advance(500)
        assert.is_nil(t.done)
        a:next_session()
        W:run_until(function() return t.done end)
        assert.equal(null, t.result)
        assert.equal("1", a:call("HGET", "rlock", "holder"))
        assert.equal(a.sid, W:node(a:path("rlock")).stat.ephemeralOwner)
    end)

    it("a SET NX started between two sessions takes the lock once", function()
        a:lose({ gap = true })
        local t = a:start("SET", "lock", "t", "NX", "PX", "30000")
        W:advance(500)
        a:next_session()
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)
end)

describe("dead sessions", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("a node of our previous session is foreign: never re-adopted, never written", function()
        a:call("SET", "lock", "t", "NX", "PX", "30000")
        local old = a:lose() -- lease lost locally; the server still has the old session
        assert.is_true(W.sessions[old].alive)
        assert.equal(old, W:node(a:path("lock")).stat.ephemeralOwner)
        local mzxid = W:node(a:path("lock")).stat.mzxid
        -- Held (by nobody alive): SET NX finds it held, and a write waits
        -- for the session to end, then gives up: a renewal or a release
        -- of the lost lock never answers 1.
        assert.equal(null, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        local lost = { err = "TRYAGAIN the key is held by a ZooKeeper session that is ending, try again" }
        assert.same(lost, a:call("PEXPIRE", "lock", "30000"))
        assert.same(lost, a:call("EXPIRE", "lock", "30"))
        assert.same(lost, a:call("PERSIST", "lock"))
        assert.same(lost, a:call("DELIFEQ", "lock", "t"))
        -- Redisson's renewal: its read and its write agree.
        a:call("HSET", "rlock", "holder", "1")
        assert.same(OK, a:call("SET", "plain", "t", "NX", "PX", "30000"))
        local renew = "if redis.call('exists', KEYS[1]) == 1 then " ..
                      "redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;"
        local old2 = a:lose()
        assert.same(lost, a:call("EVAL", renew, "1", "plain", "30000"))
        assert.equal(old2, W:node(a:path("plain")).stat.ephemeralOwner)
        assert.equal(mzxid, W:node(a:path("lock")).stat.mzxid)
        assert.equal(old, W:node(a:path("lock")).stat.ephemeralOwner)
        -- Still a live lock for everyone until the server expires the session.
        assert.equal("t", a:call("GET", "lock"))
        assert.equal(null, b:call("SET", "lock", "x", "NX", "PX", "30000"))
        W:expire_session(old)
        W:expire_session(old2)
        assert.equal(0, a:call("EVAL", renew, "1", "plain", "30000"))
        assert.equal(0, a:call("DELIFEQ", "lock", "t"))
        assert.same(OK, a:call("SET", "lock", "t2", "NX", "PX", "30000"))
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("SET NX stays null on a dead-session node even after its TTL, on every sidecar", function()
        a:call("SET", "lock", "t", "NX", "PX", "1000")
        local old = a:lose()
        W:advance(2000)
        assert.is_not_nil(W:node(a:path("lock"))) -- a no longer owns it: no delete
        assert.equal(null, a:call("SET", "lock", "t", "NX", "PX", "1000"))
        assert.equal(null, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
        W:expire_session(old)
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
    end)

    it("forgets every owned key when the session is lost", function()
        a:call("SET", "k1", "v", "PX", "1000")
        a:call("SET", "k2", "v", "PX", "2000")
        assert.is_not_nil(next(a.K.owned))
        local old = a:lose()
        assert.is_nil(next(a.K.owned))
        W:advance(3000)
        assert.is_not_nil(W:node(a:path("k1")))
        assert.equal("v", b:call("GET", "k1")) -- held until the session ends
        W:expire_session(old)
        assert.equal(null, b:call("GET", "k1"))
    end)

    it("after a session expiry the old ephemeral keys are gone and can be taken again", function()
        a:call("SET", "lock", "t", "NX", "PX", "30000")
        a:expire()
        assert.equal(null, a:call("GET", "lock"))
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
    end)
end)

describe("ZooKeeper unavailable", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("answers TRYAGAIN at the command's deadline when still disconnected", function()
        a:call("SET", "k", "v")
        a:disconnect()
        local t0 = W.now
        assert.same(UNAVAILABLE, a:call("GET", "k"))
        assert.equal(2000, W.now - t0)
        assert.same(UNAVAILABLE, a:call("SET", "k", "w"))
        a:reconnect()
        assert.equal("v", a:call("GET", "k"))
    end)

    it("waits for a reconnection within the deadline", function()
        a:disconnect()
        local t = a:start("SET", "k", "v", "NX", "PX", "10000")
        W:advance(500)
        assert.is_nil(t.done)
        a:reconnect()
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
    end)

    it("answers TRYAGAIN when a lost write cannot be resolved, and removes the orphan later", function()
        a:fail_next({ op = "create", when = "after", hook = function()
            W:post(function() a.connected = false end)
        end })
        local t = a:start("SET", "lock", "t", "NX", "PX", "30000")
        W:run_until(function() return t.done end)
        assert.same(UNAVAILABLE, t.result)
        assert.is_not_nil(W:node(a:path("lock"))) -- it did apply
        a:reconnect()
        W:advance(1000)
        assert.is_nil(W:node(a:path("lock")))      -- and was removed: nobody holds it
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
    end)

    -- A session timeout of a minute: a 20 s outage keeps the session, and
    -- with it the orphan's ephemeral node, which no other sidecar may end
    -- by its TTL; a lock without a TTL is a persistent node nobody would
    -- end at all.
    for _, ttl in ipairs({ { "PX", "30000" }, {} }) do
        it("removes the orphan of a lost SET NX " .. (ttl[1] and "with" or "without") ..
           " a TTL after an outage longer than its first looks", function()
            local W2 = S.world(0)
            local c = W2:sidecar({ config = { session_timeout = 60000 } })
            local d = W2:sidecar()
            c:fail_next({ op = "create", when = "after", hook = function()
                W2:post(function() c.connected = false end)
            end })
            local t = c:start("SET", "lock", "t", "NX", table.unpack(ttl))
            W2:run_until(function() return t.done end)
            assert.same(UNAVAILABLE, t.result)
            W2:advance(20000)
            assert.is_not_nil(W2:node(c:path("lock")))
            c:reconnect()
            W2:advance(3000)
            assert.is_nil(W2:node(c:path("lock")))   -- removed once ZooKeeper answers again
            assert.same(OK, d:call("SET", "lock", "u", "NX", table.unpack(ttl)))
        end)
    end

    it("a renewal of a held lock waits for the reconnect while the lease runs", function()
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        a:disconnect()
        local t = a:start("PEXPIRE", "lock", "30000")
        local o = a:start("SET", "other", "v")
        W:advance(3000) -- past the request timeout, inside the lease
        assert.same(UNAVAILABLE, o.result)
        assert.is_nil(t.done)
        a:reconnect()
        W:run_until(function() return t.done end)
        assert.equal(1, t.result)
    end)

    it("a renewal waiting when the lease is lost never answers 1", function()
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        a:call("SET", "plain", "t", "NX", "PX", "30000")
        a:disconnect()
        local renew = "if redis.call('exists', KEYS[1]) == 1 then " ..
                      "redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;"
        local t = a:start("PEXPIRE", "lock", "30000")
        local s = a:start("EVAL", renew, "1", "plain", "30000")
        W:advance(1000)
        a:lose()
        W:run_until(function() return t.done and s.done end)
        assert.same({ err = "TRYAGAIN the key is held by a ZooKeeper session that is ending, try again" },
                    t.result)
        assert.same(t.result, s.result)
    end)

    it("a renewal whose outcome cannot be learned answers TRYAGAIN; the key still expires", function()
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "3000"))
        a:fail_next({ op = "multi", when = "after", hook = function()
            W:post(function() a.connected = false end)
        end })
        local t = a:start("PEXPIRE", "lock", "6000")
        W:run_until(function() return t.done end)
        assert.same(UNAVAILABLE, t.result)
        a:reconnect()
        local renewed = W.now
        W:advance(3000) -- the renewal applied: the key outlives its first deadline
        assert.is_not_nil(W:node(a:path("lock")))
        W:advance(renewed + 6000 + 2250 - W.now) -- and expires (settled within 2.25 s)
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("answers TRYAGAIN while shutting down", function()
        a:close()
        assert.same({ err = "TRYAGAIN zkresp is shutting down" }, a:call("SET", "k", "v"))
    end)

    it("answers TRYAGAIN after too many conflicting writes", function()
        a:call("SET", "n", "1")
        local T = a.require("txn")
        for _ = 1, T.MAX_ATTEMPTS do a:fail_next({ op = "multi", rc = Z.BADVERSION }) end
        assert.same({ err = "TRYAGAIN too many conflicting writes, try again" }, a:call("INCR", "n"))
        assert.equal("1", a:call("GET", "n"))
    end)

    it("creates <root>/k when it is missing", function()
        W:raw_delete("/zkresp/k")
        assert.same(OK, a:call("SET", "k", "v"))
        assert.equal("v", a:call("GET", "k"))
    end)
end)
