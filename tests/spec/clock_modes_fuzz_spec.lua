-- clock_modes_fuzz_spec: native locks in shared modes and conversions when
-- the ZooKeeper leader changes to a server whose clock is off (W:new_leader).
-- clock_fuzz_spec covers EX holds whose lease is in their own node; here the
-- leader ms that a later write CARRIES unchanged: a grant's lease end and a
-- conversion's asked time in the lock's table (rewritten by every grant,
-- conversion or release of any holder), and a renewal's lease end in a
-- holder's node (rewritten by a conversion's touch or a hold count).  Such a
-- value must keep being read by the clock of the leader that wrote it; read
-- by the epoch of the new write's mzxid it is off by the clocks' skew.
local S = require "world"
local null, OK = S.null, S.OK

local SKEW = 300000

local function integer(x, what) assert.equal("integer", math.type(x), what or S.show(x)) end

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do if m[i] == name then return m[i + 1] end end
end

local function holder(sc, key, owner)
    for _, h in ipairs(sc:call("LOCK.INFO", key).map[2]) do
        if field(h, "owner") == owner then return h end
    end
end

-- sc learns the current leader's clock (a write of its own with a stat).
local function learn(sc, tag)
    assert.same(OK, sc:call("SET", "learn:" .. tag, "1"))
    assert.same(OK, sc:call("SET", "learn:" .. tag, "2"))
end

-- o1 holds r in PR (PX px) granted through a under a leader off by skew;
-- the leader changes back (-skew) and o2's PR grant through b rewrites the
-- table under it, carrying o1's line.
local function carried_world(skew, px)
    local W, a, b, c = S.warm_world(3)
    W:new_leader(skew)
    learn(a, "a")
    local t1 = a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", tostring(px))
    integer(t1)
    W:new_leader(-skew)
    learn(b, "b")
    integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "10000"))
    return W, a, b, c, t1
end

describe("a grant's lease end carried by another holder's grant under a new leader", function()
    for _, skew in ipairs({ SKEW, -SKEW }) do
        -- Before (lockstore.lua: LS.encode_table wrote the carried line's
        -- leader ms as they were, LS.lease_local reads them by the table's
        -- new mzxid): every sidecar answered o1's lease_left_ms 319 s for a
        -- 20 s hold (first leader ahead) or 0 for a live hold (behind).
        it(("LOCK.INFO answers the lease left, through every sidecar, first leader %+d s"):format(skew // 1000),
           function()
            local W, a, b, c = carried_world(skew, 20000)
            for i, sc in ipairs({ a, b, c }) do
                local left = field(holder(sc, "r", "o1"), "lease_left_ms")
                assert.is_true(left > 19000 and left <= 20000, "sidecar " .. i .. ": lease_left_ms " .. left)
            end
        end)
        -- Before: c read the lease in force 5 min late (first leader ahead)
        -- and wrote it on as the reentrant acquire's lease: o1 held r 5
        -- min past its lease (x waited 5 min).
        it(("a reentrant ACQUIRE through a third sidecar ends at the lease in force, first leader %+d s")
           :format(skew // 1000), function()
            local W, a, b, c, t1 = carried_world(skew, 10000)
            assert.equal(t1, c:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "1000"))
            assert.equal(1, b:call("LOCK.RELEASE", "r", "o2"))
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
        -- Before: c read the lease in force 5 min early (first leader
        -- behind), took its PX 2 s for no shortening and left the hold to
        -- a's timer: o1 held r to 20 s although RENEW set 2 s.
        it(("a RENEW through a third sidecar that shortens the lease ends the hold, first leader %+d s")
           :format(skew // 1000), function()
            local W, a, b, c = carried_world(skew, 20000)
            assert.equal(1, b:call("LOCK.RELEASE", "r", "o2"))
            assert.equal(1, c:call("LOCK.RENEW", "r", "o1", "PX", "2000"))
            W:advance(1500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("a renewal's lease end carried by a conversion under a new leader", function()
    -- o1 holds r PR through a; b renews it (its lease end now in o1's node,
    -- on the first leader's clock); the leader changes (-skew); c converts
    -- o1 to EX, which rewrites o1's node (the touch that wakes watchers)
    -- under the new leader, its lease end carried.
    local function converted_world(skew)
        local W, a, b, c = S.warm_world(3)
        W:new_leader(skew)
        learn(a, "a"); learn(b, "b")
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "10000"))
        assert.equal(1, b:call("LOCK.RENEW", "r", "o1", "PX", "10000"))
        W:new_leader(-skew)
        learn(c, "c"); learn(a, "a2")
        integer(c:call("LOCK.CONVERT", "r", "o1", "MODE", "EX"))
        return W, a, b, c
    end
    for _, skew in ipairs({ SKEW, -SKEW }) do
        -- Before (lockstore.lua: LS.write_table's touch wrote the node's
        -- lease end as read): first leader ahead, a's timer read it 5 min
        -- late and o1 held r (EX) 5 min past its lease.
        it(("the holder's timer ends the hold at its lease, first leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = converted_world(skew)
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
        -- Before: first leader behind, the holder's own RENEW 1 s after
        -- the conversion answered 0 for its live hold (a's LS.hold_end read
        -- the carried lease 5 min early): the client is told it lost r.
        it(("the holder's RENEW through its own sidecar answers 1, first leader %+d s"):format(skew // 1000),
           function()
            local W, a, b, c = converted_world(skew)
            W:advance(1000)
            assert.equal(1, a:call("LOCK.RENEW", "r", "o1", "PX", "10000"))
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("LOCK.INFO's waited_ms of a queued conversion across a leader change", function()
    -- Before (LOCK.INFO, lockinfo.lua today: took a conversion's asked
    -- time, leader ms in the table, from the current leader's clock): 5 s of waiting
    -- answered 305 s (new leader ahead) or 0 (behind).
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("answers the time waited, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "600000"))
            integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "600000"))
            local w = b:start("LOCK.CONVERT", "r", "o2", "MODE", "EX", "WAIT", "600000")
            W:advance(5000)
            W:new_leader(skew)
            learn(c, "c")
            local v = field(c:call("LOCK.INFO", "r").map[4][1], "waited_ms")
            assert.is_true(v >= 4900 and v <= 5200, "waited_ms " .. v)
            -- and after a table write under the new leader carries it
            integer(c:call("LOCK.CONVERT", "r", "o1", "MODE", "CR")) -- (a down-conversion: EX still waits)
            W:advance(1000)
            v = field(c:call("LOCK.INFO", "r").map[4][1], "waited_ms")
            assert.is_true(v >= 5900 and v <= 6200, "waited_ms after a carry " .. v)
            assert.is_falsy(w.done)
            assert.equal(1, a:call("LOCK.RELEASE", "r", "o1"))
            W:advance(100)
            assert.is_true(w.done)
            integer(w.result)
        end)
    end
end)

describe("a hold count written as the leader changes, unseen by its writer", function()
    -- Before (lockstore.lua: LS.settle_carried): c, which has not learned
    -- the new leader, counts o's hold down; its write carries the node's
    -- lease end (b's renewal, on the old leader's clock) as it is, and
    -- commits under the new leader, by whose clock every sidecar then
    -- reads it: that leader 5 min ahead, a's timer ended the hold at 2 s
    -- and x was granted inside the renewal's lease (two holders); 5 min
    -- behind, it ran 5 min long.
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("keeps the renewal's lease, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            local t = a:call("LOCK.ACQUIRE", "r", "o", "PX", "10000")
            integer(t)
            assert.equal(t, a:call("LOCK.ACQUIRE", "r", "o", "PX", "2000")) -- (a's timer at 2 s)
            W:advance(1000)
            assert.equal(1, b:call("LOCK.RENEW", "r", "o", "PX", "10000"))
            W:new_leader(skew)
            assert.equal(1, c:call("LOCK.RELEASE", "r", "o"))
            W:advance(1500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(7000) -- 9.5 s: inside the renewal's lease
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(2000) -- late by at most a round trip
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)
