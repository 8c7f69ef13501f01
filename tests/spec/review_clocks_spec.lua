-- review_clocks_spec: a review of the leader-clock changes (Z.carry,
-- LS.settle_carried, LS.settle_grants for carried lines, LS.renewed_end,
-- L.renew's shortened test, K.record / OBJECT IDLETIME by the node's
-- mtime): leader ms written under one ZooKeeper leader and read or carried
-- by a sidecar under another (W:new_leader(delta)).
local S = require "world"
local null = S.null

local SKEW = 300000
local integer, field, holder, learn = S.integer, S.map_field, S.lock_holder, S.learn_clock

describe("a grant table written as the leader changes, its reply lost", function()
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("LOCK.INFO answers both holders' lease left, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "20000"))
            W:new_leader(skew)
            b:fail_next{ op = "set", when = "after" }
            integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "20000"))
            learn(c, "c")
            for i, sc in ipairs({ a, b, c }) do
                for _, o in ipairs({ "o1", "o2" }) do
                    local left = field(holder(sc, "r", o), "lease_left_ms")
                    assert.is_true(left > 19000 and left <= 20000, ("sidecar %d, %s: lease_left_ms %d"):format(i, o, left))
                end
            end
        end)
        -- o1's line, carried on b's old clock, is read by the new one's:
        -- a reentrant ACQUIRE through c takes the lease in force as over
        -- (new leader ahead: a's timer then ends o1 at 1 s, x is granted
        -- inside o1's 20 s lease: two holders) or 5 min long (behind: x
        -- waits 5 min).
        it(("a reentrant ACQUIRE through a third sidecar keeps the lease in force, new leader %+d s")
           :format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            local t1 = a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "20000")
            integer(t1)
            W:new_leader(skew)
            b:fail_next{ op = "set", when = "after" }
            integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "20000"))
            learn(c, "c")
            assert.equal(t1, c:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "1000"))
            assert.equal(1, b:call("LOCK.RELEASE", "r", "o2"))
            W:advance(10000)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(11000)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

-- The lease end (leader ms) in o's request node of lock r.
local function node_lease(W)
    local lock
    for _, name in ipairs(W:children("/zkresp/l")) do lock = "/zkresp/l/" .. name end
    for _, name in ipairs(W:children(lock)) do
        local n = W:node(lock .. "/" .. name)
        local _, _, lease_end = string.unpack(">s4 I4 i8", n.data)
        if lease_end > 0 then return lease_end end
    end
end

describe("a fresh lease end equal to the node's old one, under another leader", function()
    -- Contrived (an exact ms coincidence), but deterministic: LS.encode_req
    -- tells a carried lease end from a fresh one by its value alone
    -- (r.rl == lease).  b's renewal wrote L0 on the old leader's clock; the
    -- new one is 300 s behind; c renews for the px that makes its fresh
    -- lease end, on the new clock, the number L0 (tried at a few ms around,
    -- c's estimate of the clock being off by a round trip).  encode_req
    -- takes it for L0 carried over and converts it (-300 s): the client is
    -- answered 1 for a PX of ~309 s, and a's timer ends o's hold at 11 s
    -- (x granted inside the renewed lease: two holders).
    for adj = -4, 4 do
        it(("is written as it is, not converted (px %+d ms)"):format(adj), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r", "o", "PX", "10000"))
            W:advance(1000)
            assert.equal(1, b:call("LOCK.RENEW", "r", "o", "PX", "10000"))
            W:new_leader(-SKEW)
            learn(c, "c")
            local px = node_lease(W) - W:leader_now() + adj
            assert.is_true(px > SKEW, "px " .. px)
            assert.equal(1, c:call("LOCK.RENEW", "r", "o", "PX", tostring(px)))
            W:advance(20000)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("a grant table carried by a sidecar that knows neither leader that wrote it", function()
    -- c learned only the first leader; o1's line is written under a second
    -- (a learned it), and c's grant of o2 commits under a third: c carries
    -- o1's line onto the third's clock by an estimate of the second's
    -- (Z.local_time by the table's mtime: late by the time since, never
    -- early), in LS.settle_grants' rewrite.
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("every sidecar reads o1's lease late by at most the second since, never early, skew %+d s")
           :format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            W:new_leader(skew)
            learn(a, "a")
            integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "20000"))
            W:advance(1000)
            W:new_leader(-2 * skew)
            integer(c:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "20000"))
            learn(b, "b")
            for i, sc in ipairs({ a, b, c }) do
                local left = field(holder(sc, "r", "o1"), "lease_left_ms")
                assert.is_true(left > 18900 and left <= 20100, ("sidecar %d: o1 lease_left_ms %d"):format(i, left))
                left = field(holder(sc, "r", "o2"), "lease_left_ms")
                assert.is_true(left > 19900 and left <= 20000, ("sidecar %d: o2 lease_left_ms %d"):format(i, left))
            end
        end)
    end
end)

-- The kinds of W's operations after the first `from`: "kind=n ..." sorted.
local function kinds(W, from)
    local n, out = {}, {}
    for i = from + 1, #W.ops do n[W.ops[i].kind] = (n[W.ops[i].kind] or 0) + 1 end
    for k, v in pairs(n) do out[#out + 1] = k .. "=" .. v end
    table.sort(out)
    return table.concat(out, " ")
end

describe("the LOCK.* writes under one leader ask ZooKeeper no more than before the clock changes", function()
    -- LS.write_table now asks LS.settle_grants (and the touch's
    -- LS.settle_carried) after every table write, the count writes
    -- LS.settle_carried: none writes unless the commit's epoch differs
    -- from the writer's (the same operations as at 494adf3).
    it("a release whose waiter grants itself", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "PX", "20000"))
        local w = b:start("LOCK.ACQUIRE", "r", "o2", "PX", "20000", "WAIT", "10000")
        W:advance(50)
        local from = #W.ops
        assert.equal(1, a:call("LOCK.RELEASE", "r", "o1"))
        W:advance(50)
        assert.is_true(w.done)
        integer(w.result)
        assert.equal("children=1 delete=1 get=1 set=1", kinds(W, from))
    end)
    it("a release whose multi grants the waiters queued before it", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "PX", "20000"))
        local w = a:start("LOCK.ACQUIRE", "r", "o2", "PX", "20000", "WAIT", "10000")
        local v = b:start("LOCK.ACQUIRE", "r", "o3", "PX", "20000", "WAIT", "10000")
        W:advance(100)
        local from = #W.ops
        assert.equal(1, a:call("LOCK.RELEASE", "r", "o1"))
        assert.equal(1, S.count_ops(W, "multi", from) + S.count_ops(W, "delete", from))
        assert.equal(0, S.count_ops(W, "set", from) + S.count_ops(W, "sync", from))
        W:run_until(function() return w.done or v.done end)
    end)
    it("a conversion granted at once, its node holding a renewal", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "20000"))
        assert.equal(1, b:call("LOCK.RENEW", "r", "o1", "PX", "20000"))
        local from = #W.ops
        integer(b:call("LOCK.CONVERT", "r", "o1", "MODE", "EX"))
        assert.equal("children=1 get=1 multi=1", kinds(W, from))
    end)
    it("a count-down carrying a renewal", function()
        local W, a, b = S.warm_world(2)
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "PX", "20000"))
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "PX", "20000"))
        assert.equal(1, b:call("LOCK.RENEW", "r", "o1", "PX", "20000"))
        local from = #W.ops
        assert.equal(1, b:call("LOCK.RELEASE", "r", "o1"))
        assert.equal("children=1 get=1 set=1", kinds(W, from))
    end)
end)
