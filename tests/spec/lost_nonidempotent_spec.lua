-- Non-idempotent commands (INCR, LPOP, a semaphore's two-key script, EXEC)
-- whose write's reply was lost: applied ("after") or not ("before"), with
-- or without another sidecar's write of the key while the sidecar looks,
-- and around the key's TTL.  What must hold: an answer is what exactly one
-- application did, and agrees with the store; a write that may have
-- applied is never applied again (-TRYAGAIN: outcome unknown); a popped
-- element is answered or left in the list, never dropped.
local S = require "world"
local OK, null, UNAVAILABLE = S.OK, S.null, S.UNAVAILABLE

local INCR = "return redis.call('incr', KEYS[1])"
local LPOP = "return redis.call('lpop', KEYS[1])"
-- Redisson's RSemaphore-style transfer: one permit from KEYS[1] to KEYS[2]
local MOVE = "redis.call('decrby', KEYS[1], 1) return redis.call('incrby', KEYS[2], 1)"

-- MULTI/EXEC as the gateway sends them (mode "begin", "queued")
local function send(W, sc, id, mode, ...)
    local args = { ... }
    local t = W:spawn(sc, function() return sc.M.dispatch(args, false, 0, mode) end)
    t.client = id
    return t
end

describe("a lost write of a non-idempotent command", function()
    local W, a, b
    before_each(function()
        W, a, b = S.warm_world(2)
        for _, body in ipairs({ INCR, LPOP, MOVE }) do a:call("EVAL", body, "2", "w1", "w2") end
        W:advance(100) -- (the script cache's background publish is done)
    end)

    -- a's write (op) applies or not (when), its reply lost and its look
    -- slow; meanwhile between() runs (b's writes).  t: a's command, started.
    local function arm(op, when)
        a:fail_next({ op = op, when = when, latency = 5 })
        a:fail_next({ op = "sync", pass = true, latency = 50 })
    end
    local function finish(t, between)
        W:advance(20) -- the write's reply lost; the look on its way
        between()
        W:run_until(function() return t.done end)
        assert.equal(0, #a.faults) -- (both faults were met)
        a.faults = {}
        return t.result
    end
    local function lost(op, when, between, ...)
        arm(op, when)
        return finish(a:start(...), between)
    end

    -- A key a made by a grouped create (no stat: its czxid is not known
    -- to a) and then writes from the owned-key cache: a script's or
    -- EXEC's in-place set.  b's write of it replaces a's node.
    describe("planned on the owned-key cache, the node's czxid unknown", function()
        -- Before: a's INCR applied (5 -> 6), b's INCR made
        -- 7, and a, finding b's node, took it for "another's write came
        -- first, so ours failed" and ran the script again: the client of a
        -- gets 8, the counter is 8, one INCR counted twice.
        it("EVAL INCR applied, then b's INCR: not applied twice", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "60000"))
            assert.is_nil(a.K.owned[a:path("c")].czxid)
            local r = lost("multi", "after", function()
                assert.equal(7, b:call("INCR", "c"))
            end, "EVAL", INCR, "1", "c")
            assert.same(UNAVAILABLE, r)
            assert.equal("7", b:call("GET", "c"))
        end)

        -- Before: the same through MULTI/EXEC (EXEC answered
        -- {8}, the counter 8).
        it("EXEC of INCR applied, then b's INCR: not applied twice", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "60000"))
            local t = send(W, a, 1, "begin", "MULTI")
            W:run_until(function() return t.done end)
            t = send(W, a, 1, "queued", "INCR", "c")
            W:run_until(function() return t.done end)
            arm("multi", "after")
            local r = finish(send(W, a, 1, "queued", "EXEC"), function()
                assert.equal(7, b:call("INCR", "c"))
            end)
            assert.same(UNAVAILABLE, r)
            assert.equal("7", b:call("GET", "c"))
        end)

        -- Before: a lock-queue-like list with a TTL made by
        -- one script; a's LPOP took "x", b's RPUSH followed, and a ran the
        -- LPOP again: it answered "y" and "x" was gone from the list, never
        -- answered to anyone.
        it("EVAL LPOP applied, then b's RPUSH: the element is not lost", function()
            a:call("EVAL", "redis.call('rpush', KEYS[1], 'x', 'y', 'z') " ..
                           "return redis.call('pexpire', KEYS[1], 60000)", "1", "l")
            assert.is_nil(a.K.owned[a:path("l")].czxid)
            local r = lost("multi", "after", function()
                assert.equal(3, b:call("RPUSH", "l", "w"))
            end, "EVAL", LPOP, "1", "l")
            assert.same(UNAVAILABLE, r)
            assert.same({ "y", "z", "w" }, b:call("LRANGE", "l", "0", "-1"))
        end)

        -- Not applied, b's write in between: the two cannot be told apart
        -- without the czxid; the answer must agree with the store.
        it("EVAL INCR not applied, then b's INCR: answer and store agree", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "60000"))
            local r = lost("multi", "before", function()
                assert.equal(6, b:call("INCR", "c"))
            end, "EVAL", INCR, "1", "c")
            local v = b:call("GET", "c")
            assert.is_true((r == 7 and v == "7") or (type(r) == "table" and r.err == UNAVAILABLE.err and v == "6"),
                           tostring(r) .. " " .. tostring(v))
        end)

        -- The node as read, untouched (a's nonce, its version): ran again
        -- once, as before the fix (redisson_rlock_spec's renewal too).
        it("EVAL INCR not applied, nobody else wrote: runs again, once", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "60000"))
            assert.equal(6, lost("multi", "before", function() end, "EVAL", INCR, "1", "c"))
            assert.equal("6", b:call("GET", "c"))
        end)
    end)

    describe("read from ZooKeeper (czxid known)", function()
        it("LPOP applied, then b's RPUSH: TRYAGAIN, not a second pop", function()
            assert.equal(3, b:call("RPUSH", "l", "x", "y", "z"))
            assert.equal("x", a:call("LINDEX", "l", "0"))
            local r = lost("multi", "after", function()
                assert.equal(3, b:call("RPUSH", "l", "w"))
            end, "LPOP", "l")
            -- (the README's rule: ours may have applied and been written
            -- over; "x" is popped, the answer says the outcome is unknown)
            assert.same(UNAVAILABLE, r)
            assert.same({ "y", "z", "w" }, b:call("LRANGE", "l", "0", "-1"))
        end)

        it("LPOP of the last element applied, then b's RPUSH: answers the element", function()
            assert.equal(1, b:call("RPUSH", "l", "x"))
            assert.equal("x", a:call("LINDEX", "l", "0"))
            local r = lost("multi", "after", function()
                assert.equal(1, b:call("RPUSH", "l", "w"))
            end, "LPOP", "l")
            assert.equal("x", r)
            assert.same({ "w" }, b:call("LRANGE", "l", "0", "-1"))
        end)

        it("INCR not applied, then b's INCR (one version on): runs again, once", function()
            assert.same(OK, b:call("SET", "c", "5"))
            assert.equal("5", a:call("GET", "c"))
            assert.equal(7, lost("multi", "before", function()
                assert.equal(6, b:call("INCR", "c"))
            end, "INCR", "c"))
            assert.equal("7", b:call("GET", "c"))
        end)
    end)

    describe("a two-key script (a permit moved)", function()
        it("applied, then b wrote the first key: answered once, applied once", function()
            assert.same(OK, b:call("SET", "s1", "3"))
            assert.same(OK, b:call("SET", "s2", "0"))
            assert.same({ "3", "0" }, a:call("MGET", "s1", "s2")) -- (seen: no presumed absence)
            local r = lost("multi", "after", function()
                assert.equal(3, b:call("INCR", "s1")) -- (2 after a's, 3)
            end, "EVAL", MOVE, "2", "s1", "s2")
            assert.equal(1, r)
            assert.equal("3", b:call("GET", "s1"))
            assert.equal("1", b:call("GET", "s2"))
        end)

        it("applied, then b wrote both keys: TRYAGAIN, applied once", function()
            assert.same(OK, b:call("SET", "s1", "3"))
            assert.same(OK, b:call("SET", "s2", "0"))
            assert.same({ "3", "0" }, a:call("MGET", "s1", "s2")) -- (seen: no presumed absence)
            local r = lost("multi", "after", function()
                assert.equal(3, b:call("INCR", "s1"))
                assert.equal(2, b:call("INCR", "s2"))
            end, "EVAL", MOVE, "2", "s1", "s2")
            assert.same(UNAVAILABLE, r)
            assert.equal("3", b:call("GET", "s1"))
            assert.equal("2", b:call("GET", "s2"))
        end)

        it("not applied: all or nothing, then run again once", function()
            assert.same(OK, b:call("SET", "s1", "3"))
            assert.same(OK, b:call("SET", "s2", "0"))
            assert.same({ "3", "0" }, a:call("MGET", "s1", "s2")) -- (seen: no presumed absence)
            assert.equal(1, lost("multi", "before", function() end, "EVAL", MOVE, "2", "s1", "s2"))
            assert.equal("2", b:call("GET", "s1"))
            assert.equal("1", b:call("GET", "s2"))
        end)
    end)

    describe("in the last milliseconds of the key's TTL", function()
        it("INCR applied: answered, then the key expires (not left, not made again)", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "100"))
            W:advance(90)
            assert.equal(6, lost("multi", "after", function() end, "INCR", "c"))
            W:advance(200)
            assert.equal(null, b:call("GET", "c"))
            assert.is_nil(W:node(a:path("c")))
        end)

        it("INCR not applied: runs again on the expired key (1, no TTL)", function()
            assert.same(OK, a:call("SET", "c", "5", "PX", "100"))
            W:advance(90)
            assert.equal(1, lost("multi", "before", function() end, "INCR", "c"))
            assert.equal("1", b:call("GET", "c"))
            assert.equal(-1, b:call("PTTL", "c"))
        end)
    end)
end)
