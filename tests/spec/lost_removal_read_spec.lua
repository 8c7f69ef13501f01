-- A's expiry delete of its lock applies but its answer is lost; A
-- reconnects to a server that has not applied it yet.  Meanwhile another
-- client took the lock through B (a new node, version 0 again).  A script
-- of one of A's clients (node-redlock's acquire) reads A's own old node
-- from the lagging server: "ours", past its deadline, so absent; its
-- replace {delete(version 0), create} is checked only against A's guard,
-- which neither A's own removal nor B's create moved: it deletes B's lock.

local S = require "world"
local OK = S.OK

local ACQUIRE = "for i, key in ipairs(KEYS) do if redis.call('exists', key) == 1 then return 0 end end " ..
                "for i, key in ipairs(KEYS) do redis.call('set', key, ARGV[1], 'PX', ARGV[2]) end return #KEYS"

describe("a read from a lagging server after our lost removal", function()
    it("never lets a script take the lock another sidecar's client holds now", function()
        local W, a, b = S.world(2)
        b:call("SET", "warmup", "x")
        assert.same(OK, a:call("SET", "lock", "ta", "NX", "PX", "1000"))
        S.lag(W, a, a:path("lock"), true)
        -- the deadline's guarded delete applies; its answer is lost
        a:fail_next({ op = "multi", when = "after", hook = function() a.connected = false end })
        W:advance(1005)
        assert.is_nil(W:node(a:path("lock")))
        W:advance(2500) -- a's expiry could not look (its sync timed out)
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "30000"))
        local t = a:start("EVAL", ACQUIRE, "1", "lock", "tc", "30000")
        W:advance(10)
        a:reconnect()
        W:run_until(function() return t.done end)
        assert.equal(0, t.result)
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        assert.equal("tb", b:call("GET", "lock"))
    end)
end)
