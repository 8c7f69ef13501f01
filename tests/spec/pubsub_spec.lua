-- PUBLISH and SPUBLISH before pub/sub (issue 4): nobody can subscribe yet,
-- so they answer 0, as redis-server does for a channel nobody listens to,
-- and never touch ZooKeeper.

local zkmodel = require "zkmodel"
local null = zkmodel.null

local function E(text) return { err = text } end

describe("PUBLISH", function()
    local W, a
    before_each(function()
        W = zkmodel.world()
        a = W:sidecar()
    end)

    it("answers 0 without a ZooKeeper operation", function()
        W.ops = {}
        assert.equal(0, a:call("PUBLISH", "redisson_lock__channel:{l}", "0"))
        assert.equal(0, a:call("publish", "ch", ""))
        assert.equal(0, a:call("SPUBLISH", "ch", "m"))
        assert.same({}, W.ops)
    end)

    it("checks its arity", function()
        assert.same(E("ERR wrong number of arguments for 'publish' command"), a:call("PUBLISH", "ch"))
        assert.same(E("ERR wrong number of arguments for 'publish' command"), a:call("PUBLISH", "ch", "m", "x"))
        assert.same(E("ERR wrong number of arguments for 'spublish' command"), a:call("SPUBLISH", "ch"))
    end)

    it("works from a script, as Redisson's unlock calls it", function()
        a:call("HSET", "l", "u:1", "1")
        local unlock = "redis.call('del', KEYS[1]) " ..
                       "local n = redis.call('publish', KEYS[2], ARGV[1]) return {n, type(n)}"
        assert.same({ 0, "number" }, a:call("EVAL", unlock, "2", "l", "redisson_lock__channel:{l}", "0"))
        assert.equal(null, a:call("HGET", "l", "u:1"))
        assert.equal(0, a:call("EVAL", "return redis.call('spublish', KEYS[1], 'm')", "1", "ch"))
    end)

    it("is refused in a read-only script, as Redis refuses may-replicate commands", function()
        local body = "return redis.call('publish', 'ch', 'm')"
        assert.same(E("ERR Write commands are not allowed from read-only scripts. script: " ..
                      a:call("SCRIPT", "LOAD", body) .. ", on @user_script:1."),
                    a:call("EVAL_RO", body, "0"))
        assert.same({ "table", "ERR Write commands are not allowed from read-only scripts." },
                    a:call("EVAL_RO", "local r = redis.pcall('publish', 'ch', 'm') return {type(r), r.err}", "0"))
    end)
end)
