-- A compare-and-delete of a lock without a TTL whose multi did not apply
-- (its reply lost) while another client forced the lock free: resolve_delete
-- found the node gone and claimed the delete, so both DELs answered 1.  Now
-- the removal's bump writes a nonce into the persistent mark, and a lost
-- removal is claimed only while the mark holds it.
local S = require "world"
local OK = S.OK

describe("a lost release of a lock without a TTL", function()
    it("is not claimed when another client's DEL removed the lock", function()
        local W, a, b = S.world(2)
        local release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
        a:call("EVAL", release, "1", "warm", "x")
        b:call("SET", "warm2", "x")
        W:advance(100)
        assert.same(OK, a:call("SET", "lock", "t1", "NX"))
        a:call("EVAL", release, "1", "lock2", "x") -- (marks learned)
        a:fail_next({ op = "multi", when = "before", latency = 50 })
        local t = a:start("EVAL", release, "1", "lock", "t1")
        W:advance(10)
        local forced = b:call("DEL", "lock")
        W:run_until(function() return t.done end)
        assert.equal(1, forced)
        assert.is_not.equal(1, t.result) -- (0, or TRYAGAIN: not both deleted it)
    end)
end)
