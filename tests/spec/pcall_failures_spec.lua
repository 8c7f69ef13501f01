-- A read inside a script that ZooKeeper does not answer (TIMEOUT, reads
-- exhausted) must end the whole script: redis.pcall must not turn it into an
-- error reply the script goes on from, committing writes that rest on a read
-- it never made (and that the commit never validates).
local S = require "world"
local null, Z = S.null, S.codes

describe("redis.pcall and ZooKeeper failures", function()
    it("a failed read ends the script; nothing is committed", function()
        local W, a, b = S.world(2)
        b:call("SET", "lock", "held")
        assert.equal("held", a:call("GET", "lock")) -- (seen: the script reads it)
        -- take `dst` only when `lock` is not held; errors (WRONGTYPE) are tolerated
        local body = "local v = redis.pcall('get', KEYS[1]) " ..
                     "if v == 'held' then return 0 end " ..
                     "redis.call('set', KEYS[2], 'mine') return 1"
        a:fail_next({ op = "get", path = a:path("lock"), rc = Z.TIMEOUT })
        local r = a:call("EVAL", body, "2", "lock", "dst")
        assert.equal(null, b:call("GET", "dst"))
        assert.same(S.UNAVAILABLE, r)
    end)
end)
