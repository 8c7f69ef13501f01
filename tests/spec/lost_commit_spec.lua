-- A script's commit that creates or replaces a node, applied, its reply
-- lost, the node written again by someone else before the resolve looks:
-- the script must not run again (its effects would apply twice).
local S = require "world"
local UNAVAILABLE = S.UNAVAILABLE

describe("lost commit of a create/replace overwritten before the resolve", function()
    local W, a, b, codec
    -- Redisson's RSemaphore release (without its publish)
    local release = "return redis.call('incrby', KEYS[1], ARGV[1])"
    before_each(function()
        W, a, b = S.world(2)
        codec = a.require("codec")
        a:call("EVAL", release, "1", "warm", "1")
        W:advance(100) -- (the script cache's background publish is done)
    end)
    local function overwrite(payload)
        return function()
            -- another sidecar's INCRBY, planned on a read of a's node
            W:raw_set(a:path("sem"), codec.encode({ type = codec.STRING, ttl = 0,
                nonce = string.rep("b", 16), payload = payload }))
        end
    end

    it("create: not applied twice", function()
        a:fail_next({ op = "create", path = a:path("sem"), when = "after", hook = overwrite("2") })
        local r = a:call("EVAL", release, "1", "sem", "1")
        assert.equal("2", b:call("GET", "sem")) -- a's +1 and the other's +1
        assert.same(UNAVAILABLE, r)
    end)

    it("replace (the key's node is another sidecar's, with a TTL): not applied twice", function()
        b:call("SET", "sem", "5", "PX", "60000")
        a:fail_next({ op = "multi", when = "after", hook = overwrite("7") })
        local r = a:call("EVAL", release, "1", "sem", "1")
        assert.equal("7", b:call("GET", "sem")) -- 5, a's +1, the other's +1
        assert.same(UNAVAILABLE, r)
    end)
end)
