-- ZooKeeper leader changes to a server whose clock is off the old one's
-- (NTP off on one server), seen by native locks and string keys.  A
-- sidecar maps leader-clock times (a node's mtime, a lease end written in
-- a lock request's data or table) onto its monotonic clock by an offset it
-- learned from its own writes (zkio.lua: Z.state.offset, Z.local_time);
-- after a leader change two sidecars (or one, before and after it learns
-- the new leader's offset) can map one lease end minutes apart.
--
-- The README's rules: a hold or key ends "late, never early", late by at
-- most an outage (less than a session timeout); "no sidecar treats a hold
-- as ended by its own clock without [the holder's or the shortener's]
-- delete"; LOCK.INFO's lease_left_ms and waited_ms are "on the ZooKeeper
-- leader's clock, so every sidecar answers alike"; a leader change "does
-- not shorten a PTTL" (keys).

local S = require "world"
local null, OK = S.null, S.OK

local SKEW = 300000 -- five minutes: the new leader's clock off the old one's

local function integer(x, what) assert.equal("integer", math.type(x), what or tostring(x)) end

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do if m[i] == name then return m[i + 1] end end
end

local function holder_field(sc, key, name)
    local hs = sc:call("LOCK.INFO", key).map[2]
    return hs[1] and field(hs[1], name)
end

-- Sidecar sc learns the leader's clock now: a write of its own whose
-- reply carries the node's stat (a SET over its own key; a create's reply
-- carries none), as any write of its keys or locks teaches it.
local function learn(sc, tag)
    local key = "learn:" .. (tag or "x")
    assert.same(OK, sc:call("SET", key, "1"))
    assert.same(OK, sc:call("SET", key, "2"))
end

describe("a native lock's renewal across a leader change", function()
    -- Before (a/c, and b): the holder's sidecar (a) and the renewing one
    -- (b) map the renewal's lease end (leader ms, written in the request's
    -- node) by different leaders' clocks: one learned the new leader's
    -- (a write of its own since the change), the other still has the old
    -- one's (learned less than 30 s ago: LS.leader_now does not look
    -- again at a leader change).  RENEW through b answers 1 (the lease is
    -- 20 s from now) but
    --   * early (the renewer's estimate 5 min behind the holder's): a's
    --     timer ends the hold at its first lease, 10 s after the grant,
    --     and c is granted while the renewing client still holds for 9.5
    --     s more: two holders (the token, RENEW's 1);
    --   * late (the renewer's estimate 5 min ahead): a keeps the hold 5
    --     min past the renewal's lease, every waiter waits that long.
    local CASES = {
        { skew = SKEW, learns = "holder" },   -- early
        { skew = -SKEW, learns = "renewer" }, -- early
        { skew = SKEW, learns = "renewer" },  -- late
        { skew = -SKEW, learns = "holder" },  -- late
    }
    for _, case in ipairs(CASES) do
        it(("a renewal through another sidecar ends at its lease (new leader %+d s, the %s learned it)")
           :format(case.skew // 1000, case.learns), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r1", "o", "PX", "10000"))
            W:new_leader(case.skew)
            learn(case.learns == "holder" and a or b)
            W:advance(1000)
            assert.equal(1, b:call("LOCK.RENEW", "r1", "o", "PX", "20000"))
            W:advance(9500) -- 10.5 s after the grant, 9.5 s into the renewal's 20 s
            assert.equal(null, c:call("LOCK.ACQUIRE", "r1", "x", "WAIT", "0"))
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r1", "x", "WAIT", "0"))
            W:advance(1500) -- past the renewal's lease (and a round trip)
            integer(c:call("LOCK.ACQUIRE", "r1", "x", "WAIT", "0"))
        end)
    end

    -- Before (b): a renews its own hold (the lease end written on the old
    -- leader's clock), then learns the new leader's clock, 5 min behind:
    -- its timer reads the node, maps that lease end by the new offset, 5
    -- min later than the lease it gave, and keeps the hold for 5 min past
    -- its lease: every waiter waits 5 min (a WAIT shorter than that runs
    -- out), far past "late by an outage, less than a session timeout".
    it("a renewal through the holder's own sidecar ends at its lease after the holder learns a leader clock behind", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r3", "o", "PX", "10000"))
        W:advance(1000)
        assert.equal(1, a:call("LOCK.RENEW", "r3", "o", "PX", "10000"))
        W:new_leader(-SKEW)
        learn(a)
        W:advance(10500) -- past the renewal's lease
        integer(b:call("LOCK.ACQUIRE", "r3", "x", "WAIT", "0"))
    end)

    -- The leader changes (ahead) between the grant and a renewal through
    -- the holder's sidecar, which has not written since: the renewal's
    -- lease is kept whole.
    it("a renewal through the holder's sidecar right after a change to a leader ahead keeps its lease", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r4", "o", "PX", "10000"))
        W:advance(1000)
        W:new_leader(SKEW)
        assert.equal(1, a:call("LOCK.RENEW", "r4", "o", "PX", "20000"))
        learn(a)
        W:advance(19000)
        assert.equal(null, b:call("LOCK.ACQUIRE", "r4", "x", "WAIT", "0"))
        W:advance(2000)
        integer(b:call("LOCK.ACQUIRE", "r4", "x", "WAIT", "0"))
    end)
end)

describe("a waiter across a leader change", function()
    -- A waiter of another sidecar is granted by the holder's timer's
    -- delete (a lease end), whatever the clocks.
    it("is granted at the holder's lease end, both directions of skew", function()
        for _, skew in ipairs({ SKEW, -SKEW }) do
            local W, a, b = S.warm_world(2)
            integer(a:call("LOCK.ACQUIRE", "w1", "o", "PX", "10000"))
            local w = b:start("LOCK.ACQUIRE", "w1", "x", "PX", "10000", "WAIT", "60000")
            W:advance(1000)
            W:new_leader(skew)
            learn(a, "a")
            W:advance(8500)
            assert.is_falsy(w.done, "skew " .. skew)
            W:advance(1000)
            assert.is_true(w.done, "skew " .. skew)
            integer(w.result, "skew " .. skew)
        end
    end)
end)

describe("LOCK.INFO across a leader change", function()
    -- Before (f): a hold granted for 10 s under the old leader; after a
    -- change to a leader 5 min behind, a sidecar that knows the new clock
    -- answers lease_left_ms of about 309 s, more than the PX granted; one
    -- still on the old clock answers about 9 s ("every sidecar answers
    -- alike" no longer holds).  Ahead, it answers 0 for a live hold.
    it("answers a lease_left_ms within the PX granted, through every sidecar, both directions", function()
        for _, skew in ipairs({ -SKEW, SKEW }) do
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "i1", "o", "PX", "10000"))
            W:advance(1000)
            W:new_leader(skew)
            learn(b, "b")
            for i, sc in ipairs({ a, b, c }) do
                local left = holder_field(sc, "i1", "lease_left_ms")
                assert.is_true(left >= 8800 and left <= 9100,
                               "skew " .. skew .. ", sidecar " .. i .. ": lease_left_ms " .. left)
            end
        end
    end)

    -- Before (f): a request waiting 5 s under the old leader; after a
    -- change to a leader 5 min behind waited_ms answers 0 (5 min ahead:
    -- about 305 s) through a sidecar that knows the new clock.
    it("answers a waiter's waited_ms as waited, both directions", function()
        for _, skew in ipairs({ -SKEW, SKEW }) do
            local W, a, b = S.warm_world(2)
            integer(a:call("LOCK.ACQUIRE", "i2", "o", "PX", "600000"))
            local w = b:start("LOCK.ACQUIRE", "i2", "x", "WAIT", "600000")
            W:advance(5000)
            W:new_leader(skew)
            learn(b, "b")
            local v = field(b:call("LOCK.INFO", "i2").map[4][1], "waited_ms")
            assert.is_true(v >= 4900 and v <= 5200, "skew " .. skew .. ": waited_ms " .. v)
            assert.is_falsy(w.done)
        end
    end)
end)

describe("a string key with PX across a leader change", function()
    -- (e) another sidecar never takes a live session's key over, whatever
    -- its clock says; and its PTTL is not shortened by a leader change.
    it("SET NX through another sidecar stays nil while the owner lives, both directions", function()
        for _, skew in ipairs({ SKEW, -SKEW }) do
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "k", "t", "NX", "PX", "10000"))
            W:new_leader(skew)
            learn(b, "b")
            W:advance(5000)
            local left = b:call("PTTL", "k")
            assert.is_true(left > 4800 and left <= 5100, "skew " .. skew .. ": PTTL " .. left)
            assert.equal(null, b:call("SET", "k", "u", "NX", "PX", "10000"))
            W:advance(5500)
            assert.same(OK, b:call("SET", "k", "u", "NX", "PX", "10000"), "skew " .. skew)
        end
    end)
end)
