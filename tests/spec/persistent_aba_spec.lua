-- A persistent key belongs to no session, so no guard or session mark
-- counts its removals: a versioned write planned on a read of one, slow on
-- its way, must not land on the node someone made at that path after
-- deleting the one it read (a new node starts at version 0 again).
local S = require "world"
local OK = S.OK

describe("a versioned write to a persistent key deleted and made again meanwhile", function()
    local W, a, b
    -- redis-py Lock's release (LUA_RELEASE_SCRIPT's core)
    local release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
    before_each(function()
        W, a, b = S.world(2)
        a:call("EVAL", release, "1", "warm", "x")
        b:call("SET", "warm2", "x")
        W:advance(100)
    end)

    -- a's next write (its command's commit) is slow: it applies 50 ms
    -- after it is sent, and whatever the caller does meanwhile comes first
    local function slow_commit()
        for _, op in ipairs({ "delete", "set", "multi" }) do
            a:fail_next({ op = op, latency = 50, pass = true })
        end
    end

    local function run(sc, ...)
        local t = sc:start(...)
        W:advance(10) -- its reads are answered, its commit is on its way
        return t
    end

    it("a compare-and-delete does not delete the lock taken since (redis-py Lock without a timeout)", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX"))
        slow_commit()
        local t = run(a, "EVAL", release, "1", "lock", "t1")
        -- b forces the lock free, and a client of b takes it
        assert.equal(1, b:call("DEL", "lock"))
        assert.same(OK, b:call("SET", "lock", "t2", "NX"))
        W:run_until(function() return t.done end)
        a.faults = {}
        assert.equal(0, t.result)
        assert.equal("t2", b:call("GET", "lock"))
    end)

    it("a compare-and-delete at a later version", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX"))
        assert.same(OK, a:call("SET", "lock", "t1", "XX")) -- (version 1)
        slow_commit()
        local t = run(a, "EVAL", release, "1", "lock", "t1")
        assert.equal(1, b:call("DEL", "lock"))
        assert.same(OK, b:call("SET", "lock", "t2", "NX"))
        assert.same(OK, b:call("SET", "lock", "t2", "XX"))
        W:run_until(function() return t.done end)
        a.faults = {}
        assert.equal(0, t.result)
        assert.equal("t2", b:call("GET", "lock"))
    end)

    it("an INCR does not overwrite the counter made again since", function()
        assert.same(OK, a:call("SET", "ctr", "5"))
        slow_commit()
        local t = run(a, "INCR", "ctr")
        assert.equal(1, b:call("DEL", "ctr"))
        assert.same(OK, b:call("SET", "ctr", "100"))
        W:run_until(function() return t.done end)
        a.faults = {}
        assert.equal(101, t.result)
        assert.equal("101", b:call("GET", "ctr"))
    end)

    it("a script's read of a key another client deleted and made again fails its check", function()
        -- copies src to dst: the copy must be of a src that was there at once
        local copy = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[2], v) return v"
        a:call("EVAL", copy, "2", "src0", "dst0")
        W:advance(100) -- (the script cache's background publish is done)
        assert.same(OK, a:call("SET", "src", "1"))
        slow_commit()
        local t = run(a, "EVAL", copy, "2", "src", "dst")
        assert.equal(1, b:call("DEL", "src"))
        assert.same(OK, b:call("SET", "src", "2"))
        W:run_until(function() return t.done end)
        a.faults = {}
        assert.equal("2", t.result)
        assert.equal("2", b:call("GET", "dst"))
    end)

    it("an expiry's delete of a persistent key with a TTL does not delete the key written since", function()
        local file = S.policy_file([[ return { lifetime = function() return "persistent" end } ]])
        local c = W:sidecar({ config = { policy = file } })
        assert.same(OK, c:call("SET", "dk", "v", "PX", "1000"))
        assert.same(OK, c:call("SET", "dk", "v2", "PX", "1000", "XX")) -- (version 1)
        assert.equal(0, W:node(c:path("dk")).stat.ephemeralOwner)
        for _, op in ipairs({ "delete", "multi" }) do c:fail_next({ op = op, latency = 50, pass = true }) end
        W:advance(1010) -- c's expiry has looked; its delete at version 1 is on its way
        -- b takes the key, expired for it: a new node (version 0), then 1
        assert.same(OK, b:call("SET", "dk", "t", "NX", "PX", "60000"))
        assert.same(OK, b:call("SET", "dk", "t2", "XX", "PX", "60000"))
        W:advance(100)
        c.faults = {}
        assert.equal("t2", b:call("GET", "dk"))
        os.remove(file)
    end)
end)

describe("an expiry of a persistent key", function()
    -- Its node is no session's: its persistent mark, not the guard of the
    -- sidecar that wrote it, tells of its removal.  The guard moves when
    -- another sidecar removes a node of that sidecar's session, which must
    -- not fail the expiry's delete.
    it("is not failed by another sidecar's removal of an ephemeral key of its writer", function()
        local W, b = S.world(1)
        local file = S.policy_file([[
            return { lifetime = function(key) return key == "pk" and "persistent" or "ephemeral" end } ]])
        local c = W:sidecar({ config = { policy = file } })
        S.warm(W, b, c)
        assert.same(OK, c:call("SET", "ek", "v", "PX", "60000"))
        assert.same(OK, c:call("SET", "pk", "v", "PX", "1000"))
        assert.equal(0, W:node(c:path("pk")).stat.ephemeralOwner)
        assert.is_not.equal(0, W:node(c:path("ek")).stat.ephemeralOwner)
        c:fail_next({ op = "sync", latency = 50, pass = true }) -- (the expiry's look)
        W.ops = {}
        W:advance(1010) -- c's expiry looks at pk
        assert.equal(1, b:call("DEL", "ek")) -- (bumps c's guard)
        W:advance(300)
        c.faults = {}
        assert.is_nil(W:node(c:path("pk")))
        local deletes = 0
        for _, op in ipairs(W.ops) do
            if op.sc == c.id and op.kind == "multi" and op.path:find("delete " .. c:path("pk"), 1, true) == 1 then
                deletes = deletes + 1
            end
        end
        assert.equal(1, deletes)
        os.remove(file)
    end)
end)
