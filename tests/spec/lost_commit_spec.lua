-- A script's commit that creates or replaces a node, applied, its reply
-- lost, the node written again by someone else before the resolve looks:
-- the script must not run again (its effects would apply twice).
local S = require "world"
local UNAVAILABLE = S.UNAVAILABLE

describe("lost commit of a create/replace overwritten before the resolve", function()
    local W, a, b, codec
    -- Redisson's RSemaphore release (without its publish)
    local release = "return redis.call('incrby', KEYS[1], ARGV[1])"
    -- a rate limiter's INCR with a TTL: the key is the writer's ephemeral node
    local counter = "local v = redis.call('incrby', KEYS[1], 1) redis.call('pexpire', KEYS[1], 60000) return v"
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

    it("create of an ephemeral key replaced by another sidecar before the resolve: not applied twice", function()
        a:fail_next({ op = "create", path = a:path("rl"), when = "after", hook = function()
            -- b's SET: a's node replaced by b's (version 0 again), a's guard
            -- and the node's mark bumped
            W:raw_delete(a:path("rl"))
            W:raw_create(a:path("rl"), codec.encode({ type = codec.STRING, ttl = 60000,
                nonce = string.rep("b", 16), payload = "5" }), b.sid)
            W:raw_set(a.K.guard_path(a.sid), "")
            W:raw_set(a.K.mark_path(a.sid, a:path("rl")), "")
        end })
        local r = a:call("EVAL", counter, "1", "rl")
        assert.same(UNAVAILABLE, r)
        assert.equal("5", b:call("GET", "rl"))
    end)

    it("create of an ephemeral key that lost to another's create: runs again on what is there", function()
        a:fail_next({ op = "create", path = a:path("rl2"), rc = S.codes.CONNECTIONLOSS, hook = function()
            W:raw_create(a:path("rl2"), codec.encode({ type = codec.STRING, ttl = 60000,
                nonce = string.rep("b", 16), payload = "5" }), b.sid)
        end })
        assert.equal(6, a:call("EVAL", counter, "1", "rl2"))
    end)
end)

