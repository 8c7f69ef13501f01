-- Redisson's RLock as it talks to Redis (its lock, unlock and watchdog
-- scripts, waiters subscribed to the lock's channel on both sidecars),
-- across two sidecars, under faults: lost commits of unlocks (one message
-- on every sidecar, an exact answer), reentrant unlocks, renewals through
-- either sidecar, sweeps around the lease's end, sessions given up.
local S = require "world"
local null, E = S.null, S.E

local RS = require "redisson_scripts" -- (their texts)
local LOCK, UNLOCK, RENEW =
    RS.LOCK, RS.UNLOCK, RS.RENEW
local CH = "redisson_lock__channel:{L}"

local function lock(sc, id, lease) return sc:call("EVAL", LOCK, "1", "L", tostring(lease or 30000), id) end
local function unlock(sc, id) return sc:call("EVAL", UNLOCK, "2", "L", CH, "0", "30000", id) end
local function renew(sc, id, lease) return sc:call("EVAL", RENEW, "1", "L", tostring(lease or 30000), id) end
local show, tryagain = S.show, S.tryagain
local function warmed(bodies, ...) return S.scripts_warmed(2, bodies, ...) end
local function msgs(sc, client) return S.messages(sc, client, CH) end

describe("Redisson RLock", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
        b:call_as(7, "SUBSCRIBE", CH)
        a:call_as(8, "SUBSCRIBE", CH)
        -- the scripts known to the shared cache (its background multi done)
        for _, body in ipairs({ LOCK, UNLOCK, RENEW }) do a:call("EVAL", body, "2", "warm", "wch", "0", "1", "x") end
        W:advance(100)
    end)

    it("basic: exclusion, unlock publishes once on every sidecar", function()
        assert.equal(null, lock(a, "u1:1"))
        local p = lock(b, "u2:1")
        assert.is_true(math.type(p) == "integer" and p > 0, tostring(p))
        assert.equal(null, unlock(b, "u2:1"))
        assert.equal(1, unlock(a, "u1:1"))
        W:advance(1000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
        assert.equal(null, lock(b, "u2:1"))
    end)

    it("reentrancy counts are exact", function()
        assert.equal(null, lock(a, "u1:1"))
        assert.equal(null, lock(a, "u1:1"))
        assert.equal(0, unlock(a, "u1:1"))
        assert.equal("1", b:call("HGET", "L", "u1:1"))
        assert.is_true(math.type(lock(b, "u2:1")) == "integer")
        assert.equal(1, unlock(b, "u1:1"))
        W:advance(1000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
    end)

    for _, side in ipairs({ "a", "b" }) do
        for _, when in ipairs({ "after", "before" }) do
            it("unlock via " .. side .. " whose commit is lost (" .. when .. ") answers 1, publishes once", function()
                assert.equal(null, lock(a, "u1:1"))
                W:advance(10)
                local sc = side == "a" and a or b
                sc:fail_next({ op = "multi", when = when })
                assert.equal(1, unlock(sc, "u1:1"))
                W:advance(2000)
                assert.is_nil(W:node(a:path("L")))
                assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
                assert.equal(null, lock(b, "u2:1"))
            end)
            it("reentrant unlock via " .. side .. " with its commit lost (" .. when .. ") leaves count 1", function()
                assert.equal(null, lock(a, "u1:1"))
                assert.equal(null, lock(a, "u1:1"))
                W:advance(10)
                local sc = side == "a" and a or b
                sc:fail_next({ op = "multi", when = when })
                sc:fail_next({ op = "set", when = when })
                assert.equal(0, unlock(sc, "u1:1"))
                assert.equal("1", b:call("HGET", "L", "u1:1"))
                assert.equal("1", a:call("HGET", "L", "u1:1"))
                assert.equal(1, unlock(sc, "u1:1"))
                W:advance(1000)
                assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
            end)
            it("watchdog renewal via " .. side .. " (" .. when .. " lost) answers 1 only when the TTL moved", function()
                assert.equal(null, lock(a, "u1:1", 30000))
                W:advance(10000)
                local sc = side == "a" and a or b
                sc:fail_next({ op = "multi", when = when })
                sc:fail_next({ op = "set", when = when })
                assert.equal(1, renew(sc, "u1:1", 30000))
                local t = b:call("PTTL", "L")
                assert.is_true(t > 25000, tostring(t))
                assert.is_true(a:call("PTTL", "L") > 25000)
                W:advance(25000)
                assert.is_not_nil(W:node(a:path("L")))
                assert.is_true(math.type(lock(b, "u2:1")) == "integer")
                assert.equal(0, renew(sc, "u9:1", 30000))
            end)
        end
    end

    it("lock through a, unlock through b, renew through b", function()
        assert.equal(null, lock(a, "u1:1"))
        W:advance(20000)
        assert.equal(1, renew(b, "u1:1"))
        W:advance(20000)
        assert.is_true(math.type(lock(b, "u2:1")) == "integer")
        assert.equal(1, unlock(b, "u1:1"))
        W:advance(1000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
        assert.equal(null, lock(b, "u2:1"))
    end)

    it("lease runs out while a waiter on b is subscribed", function()
        assert.equal(null, lock(a, "u1:1", 1000))
        local p = lock(b, "u2:1")
        assert.is_true(math.type(p) == "integer" and p <= 1000)
        W:advance(p + 200)
        assert.equal(null, lock(b, "u2:1"))
        assert.is_true(math.type(lock(a, "u1:1")) == "integer")
        assert.equal(0, renew(a, "u1:1"))
        assert.equal(null, unlock(a, "u1:1"))
        assert.equal(1, unlock(b, "u2:1"))
        W:advance(1000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
    end)

    it("a's session given up while it holds the lock: free once the old session ends", function()
        assert.equal(null, lock(a, "u1:1", 5000))
        W:advance(100)
        local old = a:lose()
        for _ = 1, 40 do
            W:advance(100)
            local r = lock(b, "u2:1")
            assert.is_true(math.type(r) == "integer" or tryagain(r))
        end
        W:expire_session(old) -- the server ends it within the session timeout
        W:advance(100)
        assert.equal(null, lock(b, "u2:1"))
        assert.is_true(math.type(lock(a, "u1:1")) == "integer")
    end)

    it("a's session given up while it holds the lock; it renews meanwhile", function()
        assert.equal(null, lock(a, "u1:1", 5000))
        W:advance(100)
        a:lose()
        W:advance(100)
        local r = renew(a, "u1:1", 30000)
        assert.is_true(r == 1 or r == 0 or tryagain(r))
        if r == 1 then
            for _ = 1, 20 do
                W:advance(1000)
                local x = lock(b, "u2:1")
                assert.is_true(x ~= null, "acquired while renewed")
            end
        end
    end)

    it("publish while the subscriber's sidecar is disconnected", function()
        assert.equal(null, lock(a, "u1:1"))
        b:disconnect()
        assert.equal(1, unlock(a, "u1:1"))
        W:advance(3000)
        b:reconnect()
        W:advance(3000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
    end)

    it("unlock's commit lost (after) while subscriber disconnected", function()
        assert.equal(null, lock(a, "u1:1"))
        W:advance(10)
        b:disconnect()
        a:fail_next({ op = "multi", when = "after" })
        assert.equal(1, unlock(a, "u1:1"))
        W:advance(3000)
        b:reconnect()
        W:advance(3000)
        assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
    end)

    for _, lost in ipairs({ false, true }) do
        it("renewals alternating through a and b never let the lock go" .. (lost and " (a's session lost)" or ""), function()
            assert.equal(null, lock(a, "u1:1", 3000))
            local old
            for i = 1, 20 do
                W:advance(1000)
                if lost and i == 3 then old = a:lose() end
                if lost and i == 8 then W:expire_session(old) end
                local sc = (i % 2 == 0) and a or b
                local r = renew(sc, "u1:1", 3000)
                if r ~= 1 then r = renew(b, "u1:1", 3000) end
                assert.equal(1, r)
                local x = lock(b, "u2:1")
                assert.is_true(x ~= null, "acquired while renewed, round " .. i)
            end
            W:advance(5000)
            assert.equal(null, lock(b, "u2:1"))
        end)
    end

    it("renewal through b, then b's session expires; a keeps renewing", function()
        assert.equal(null, lock(a, "u1:1", 3000))
        W:advance(1000)
        assert.equal(1, renew(b, "u1:1", 3000))
        for i = 1, 10 do
            W:advance(1000)
            if i == 2 then b:expire() end
            assert.equal(1, renew(a, "u1:1", 3000))
            local x = lock(b, "u2:1")
            assert.is_true(x ~= null, "acquired while renewed, round " .. i)
        end
    end)

    for _, lag in ipairs({ false, true }) do
        it("unlock's commit applied, reply lost, a cut off; b takes the lock before a looks" ..
           (lag and " (a's server lagging)" or ""), function()
            assert.equal(null, lock(a, "u1:1"))
            W:advance(10)
            if lag then S.lag(W, a, a:path("L"), true) end
            a:fail_next({ op = "multi", when = "after", hook = function() a.connected = false end })
            local t = a:start("EVAL", UNLOCK, "2", "L", CH, "0", "30000", "u1:1")
            W:advance(200)
            assert.is_nil(W:node(a:path("L")))
            assert.equal(null, lock(b, "u2:1"))
            W:advance(lag and 200 or 1000)
            a:reconnect()
            W:run_until(function() return t.done end)
            local r = t.result
            assert.is_true(r == 1 or tryagain(r), "unlock answered " .. show(r))
            W:advance(2000)
            assert.equal("1", b:call("HGET", "L", "u2:1"))
            assert.equal(1, msgs(b, 7)); assert.equal(1, msgs(a, 8))
            assert.is_true(math.type(lock(a, "u1:1")) == "integer")
        end)

        it("reentrant unlock's commit applied, reply lost, a cut off" .. (lag and " (lagging)" or ""), function()
            assert.equal(null, lock(a, "u1:1"))
            assert.equal(null, lock(a, "u1:1"))
            W:advance(10)
            if lag then S.lag(W, a, a:path("L"), true) end
            for _, op in ipairs({ "multi", "set" }) do
                a:fail_next({ op = op, when = "after", hook = function() a.connected = false end })
            end
            local t = a:start("EVAL", UNLOCK, "2", "L", CH, "0", "30000", "u1:1")
            W:advance(500)
            a:reconnect()
            W:run_until(function() return t.done end)
            local r = t.result
            assert.is_true(r == 0 or tryagain(r), "unlock answered " .. show(r))
            assert.equal("1", b:call("HGET", "L", "u1:1"))
        end)
    end

    it("unlock's commit applied with the reply lost as a's session is given up", function()
        assert.equal(null, lock(a, "u1:1"))
        W:advance(10)
        a:fail_next({ op = "multi", when = "after", hook = function() a:lose({ gap = true }) end })
        local t = a:start("EVAL", UNLOCK, "2", "L", CH, "0", "30000", "u1:1")
        W:advance(300)
        a:next_session()
        W:run_until(function() return t.done end)
        local r = t.result
        assert.is_true(r == 1 or tryagain(r), "unlock answered " .. show(r))
        W:advance(3000)
        assert.equal(1, msgs(b, 7))
        assert.equal(null, lock(b, "u2:1"))
    end)

    it("unlock while the waiter's sidecar is lost and back under a new session", function()
        assert.equal(null, lock(a, "u1:1"))
        b:disconnect()
        assert.equal(1, unlock(a, "u1:1"))
        W:advance(500)
        b:lose()
        W:advance(3000)
        assert.is_true(msgs(b, 7) >= 1)
    end)

    it("two contenders race repeatedly: never both acquired", function()
        for round = 1, 10 do
            local ta = a:start("EVAL", LOCK, "1", "L", "30000", "u1:1")
            local tb = b:start("EVAL", LOCK, "1", "L", "30000", "u2:1")
            W:run_until(function() return ta.done and tb.done end)
            local wins = (ta.result == null and 1 or 0) + (tb.result == null and 1 or 0)
            assert.equal(1, wins)
            local w = ta.result == null and a or b
            local id = ta.result == null and "u1:1" or "u2:1"
            assert.equal(1, unlock(round % 2 == 0 and a or b, id))
        end
        W:advance(1000)
        assert.equal(10, msgs(b, 7)); assert.equal(10, msgs(a, 8))
    end)
end)

describe("Redisson RLock sweeps: renewal at the deadline", function()
    for _, via in ipairs({ "a", "b" }) do
        for _, fault in ipairs({ "none", "after", "before" }) do
            it("sweep " .. via .. " " .. fault, function()
                local bad = {}
                for off = -30, 30, 3 do
                    local W, a, b = warmed({ LOCK, RENEW }, "1", "warm", "0", "x")
                    W:advance(100)
                    assert.equal(null, lock(a, "u1:1", 1000))
                    W:advance(1000 + off - 1)
                    local sc = via == "a" and a or b
                    if fault ~= "none" then sc:fail_next({ op = "multi", when = fault }) end
                    local t = sc:start("EVAL", RENEW, "1", "L", "5000", "u1:1")
                    W:run_until(function() return t.done end)
                    local function got() return lock(b, "u2:1", 1000) == null end
                    S.renewal_told(W, bad, off, t.result, { yes = 1, no = 0, keep_ms = 3200, step = 400,
                                                           taken = got, got = got })
                end
                assert.same({}, bad)
            end)
        end
    end
end)

describe("Redisson RLock sweeps: unlock at the deadline", function()
    for _, via in ipairs({ "a", "b" }) do
        for _, when in ipairs({ "after", "before", "none" }) do
            it("unlock at the deadline via " .. via .. " " .. when, function()
                local bad = {}
                for off = -25, 25, 5 do
                    local W, a, b = S.world(2)
                    b:call_as(7, "SUBSCRIBE", CH)
                    a:call_as(8, "SUBSCRIBE", CH)
                    for _, body in ipairs({ LOCK, UNLOCK }) do
                        a:call("EVAL", body, "2", "warm", "w", "0", "0", "x")
                        b:call("EVAL", body, "2", "warm", "w", "0", "0", "x")
                    end
                    W:advance(100)
                    assert.equal(null, lock(a, "u1:1", 1000))
                    W:advance(1000 + off)
                    local sc = via == "a" and a or b
                    if when ~= "none" then
                        sc:fail_next({ op = "multi", when = when, hook = function() sc.connected = false end })
                    end
                    local t = sc:start("EVAL", UNLOCK, "2", "L", CH, "0", "30000", "u1:1")
                    W:advance(100)
                    if when ~= "none" then sc:reconnect() end
                    W:run_until(function() return t.done end)
                    W:advance(2000)
                    local r = t.result
                    local m7, m8 = msgs(b, 7), msgs(a, 8)
                    local ok = (r == 1 and m7 == 1 and m8 == 1) or (r == null and m7 == 0 and m8 == 0)
                        or (tryagain(r) and m7 == m8 and m7 <= 1)
                    if not ok then bad[#bad + 1] = off .. ":" .. show(r) .. "/" .. m7 .. "/" .. m8 end
                    if lock(b, "u2:1", 1000) ~= null then bad[#bad + 1] = off .. ":not free" end
                end
                assert.same({}, bad)
            end)
        end
    end
end)

describe("Redisson RLock sweeps: renewal near the deadline, cut off", function()
    for _, via in ipairs({ "a", "b" }) do
        for _, when in ipairs({ "after", "before" }) do
            for _, cut in ipairs({ 50, 300, 1500, 4000 }) do
                it("renew near deadline via " .. via .. " " .. when .. " cut " .. cut, function()
                    local bad = {}
                    for off = -300, 0, 60 do
                        local W, a, b = warmed({ LOCK, RENEW }, "1", "warm", "0", "x")
                        W:advance(100)
                        assert.equal(null, lock(a, "u1:1", 1000))
                        W:advance(1000 + off)
                        local sc = via == "a" and a or b
                        sc:fail_next({ op = "multi", when = when, hook = function() sc.connected = false end })
                        local t = sc:start("EVAL", RENEW, "1", "L", "5000", "u1:1")
                        local t1 = W.now
                        local acquired_at
                        for _ = 1, cut, 10 do
                            W:advance(10)
                            if lock(b, "u2:1", 1000) == null and not acquired_at then acquired_at = W.now - t1 end
                        end
                        sc:reconnect()
                        W:run_until(function() return t.done end)
                        local r = t.result
                        if r == 1 then
                            if acquired_at then bad[#bad + 1] = off .. ": renewed=1 but b acquired at +" .. acquired_at end
                            for _ = 1, 8 do
                                W:advance(400)
                                if W.now - t1 > 4500 then break end
                                if lock(b, "u2:1", 1000) == null then
                                    bad[#bad + 1] = off .. ": renewed=1 but acquired at +" .. (W.now - t1)
                                    break
                                end
                            end
                        elseif not (r == 0 or tryagain(r)) then
                            bad[#bad + 1] = off .. ":" .. show(r)
                        end
                    end
                    assert.same({}, bad)
                end)
            end
        end
    end
end)
