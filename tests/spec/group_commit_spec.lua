-- Group commit (sidecar/zk_group.c): the bridge may send the grouped writes of
-- many commands as one multi.  The Lua side decides which writes may be
-- grouped (a key's writes, which the key queues order) and must cope with
-- what a grouped answer lacks: a create sent in a multi answers no stat.

local S = require "world"

describe("group commit", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    -- {kind, grouped} of sidecar sc's operations from W.ops[from] on.
    local function sent(sc, from)
        local list = {}
        for i = from, #W.ops do
            local op = W.ops[i]
            if op.sc == sc.id and not S.script_cache_op(op) then list[#list + 1] = { op.kind, op.grouped == true } end
        end
        return list
    end

    it("groups a lock's acquire and release", function()
        local from = #W.ops + 1
        assert.same({ ok = "OK" }, a:call("SET", "lock", "tok", "NX", "PX", "30000"))
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        assert.same({ { "create", true }, { "multi", true } }, sent(a, from))
        -- an in-place set and a delete, each after a read
        b:call("SET", "k", "v1")
        from = #W.ops + 1
        assert.same({ ok = "OK" }, b:call("SET", "k", "v2"))
        assert.equal(1, a:call("DEL", "k"))
        -- (a persistent node's: each with its mark's check, a multi, after
        -- a read of the mark, not known yet: b makes it)
        assert.same({ { "get", false }, { "exists", false }, { "create", false }, { "exists", false },
                      { "get", false }, { "multi", true } }, sent(b, from))
        assert.same({ { "get", false }, { "exists", false }, { "get", false }, { "multi", true } }, sent(a, from))
    end)

    it("keeps ungrouped what needs its place or its stat", function()
        -- A script whose only write is one create: grouped when alone on
        -- the key, not when commands queued behind it want its stat, which
        -- serves them as a read (shared reads).
        local acquire = "if redis.call('exists', KEYS[1]) == 0 then " ..
                        "redis.call('hincrby', KEYS[1], ARGV[1], 1) " ..
                        "redis.call('pexpire', KEYS[1], 30000) return nil end " ..
                        "return redis.call('pttl', KEYS[1])"
        local from = #W.ops + 1
        assert.equal(a.null, a:call("EVAL", acquire, "1", "solo", "id:1"))
        local ops = sent(a, from)
        assert.same({ "create", true }, ops[#ops])
        -- (a has seen the key exist, so its scripts read it: see "presumed
        -- absence" in eval_spec)
        b:call("SET", "rlock", "x")
        assert.equal("x", a:call("GET", "rlock"))
        b:call("DEL", "rlock")
        from = #W.ops + 1
        local herd = {}
        for i = 1, 3 do herd[i] = a:start("EVAL", acquire, "1", "rlock", "id:" .. i) end
        W:run_until(function() return herd[3].done end)
        assert.equal(a.null, herd[1].result)
        assert.is_number(herd[2].result)
        assert.is_number(herd[3].result)
        ops = sent(a, from)
        assert.same({ { "get", false }, { "create", false } }, ops) -- the others read nothing
        -- A script that publishes to another sidecar: its message must keep
        -- its place among this sidecar's other publishes.
        b:call_as(7, "SUBSCRIBE", "ch")
        local unlock = "redis.call('del', KEYS[1]) redis.call('publish', 'ch', 'bye') return 1"
        from = #W.ops + 1
        assert.equal(1, a:call("EVAL", unlock, "1", "rlock"))
        ops = sent(a, from)
        assert.same({ "multi", false }, ops[#ops])
        W:run_until(function() return b.pushed[7] and #b.pushed[7] == 1 end)
        assert.same({ push = { "message", "ch", "bye" } }, b.pushed[7][1])
    end)

    -- The model's default is the bridge's answer to a create sent in a
    -- group (no stat); a create alone in its turn is sent as itself and
    -- answers one (grouped_create_stat): both must work.
    for _, with_stat in ipairs({ false, true }) do
    describe(with_stat and "when a grouped create answers a stat (alone in its turn)"
             or "when a grouped create answers no stat", function()
        before_each(function() a.grouped_create_stat = with_stat end)

        it("still holds the lock from its cache: two requests per pair", function()
            for round = 1, 3 do
                local from = #W.ops + 1
                assert.same({ ok = "OK" }, a:call("SET", "lock", "tok" .. round, "NX", "PX", "30000"))
                assert.equal(a.null, b:call("SET", "lock", "other", "NX", "PX", "30000"))
                local ttl = a:call("PTTL", "lock")
                assert.is_true(ttl > 29000 and ttl <= 30000, tostring(ttl))
                assert.equal("tok" .. round, a:call("GET", "lock"))
                assert.equal(0, a:call("DELIFEQ", "lock", "nope"))
                assert.equal(1, a:call("DELIFEQ", "lock", "tok" .. round))
                assert.equal(0, b:call("EXISTS", "lock"))
                local mine = sent(a, from)
                assert.same({ "create", true }, mine[1])
                assert.same({ "multi", true }, mine[#mine]) -- delete from the cache + guard check
            end
        end)

        it("still expires the key on time and answers INCR from the node", function()
            assert.same({ ok = "OK" }, a:call("SET", "k", "v", "NX", "PX", "100"))
            W:advance(150)
            assert.equal(0, b:call("EXISTS", "k"))
            assert.is_nil(W:node(a:path("k")))
            assert.same({ ok = "OK" }, a:call("SET", "n", "41", "NX"))
            assert.equal(42, a:call("INCR", "n"))
            assert.equal("42", b:call("GET", "n"))
        end)
    end)
    end
end)
