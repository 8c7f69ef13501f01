-- Shared reads (keyspace.lua): a read sent after a command arrived serves
-- it, so a herd on one key costs one read per turn of its queue, not one per
-- command; a read sent before the command arrived, or before this sidecar
-- wrote the key, never does.

local S = require "world"

describe("shared reads", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    -- ZooKeeper reads of key by sidecar sc, from W.ops[from] on.
    local function gets(sc, key, from)
        local n = 0
        for i = from or 1, #W.ops do
            local op = W.ops[i]
            if op.sc == sc.id and op.kind == "get" and op.path == sc:path(key) then n = n + 1 end
        end
        return n
    end

    it("serves a herd of GETs on one key with two reads", function()
        assert.same({ ok = "OK" }, b:call("SET", "lock", "tok", "PX", "30000"))
        local tasks = {}
        for i = 1, 10 do tasks[i] = a:start("GET", "lock") end
        W:run_until(function() return tasks[10].done end)
        for i = 1, 10 do assert.equal("tok", tasks[i].result) end
        -- The first GET's read left before the others arrived; the second's
        -- was sent after all of them had.
        assert.equal(2, gets(a, "lock"))
    end)

    it("never serves a command with a read sent before it arrived", function()
        b:call("SET", "k", "v1")
        local first = a:start("GET", "k")
        W:run_until(function() return #W.ops > 0 and W.ops[#W.ops].kind == "get" end)
        local second = a:start("GET", "k")
        W:run_until(function() return second.done end)
        assert.equal("v1", first.result)
        assert.equal("v1", second.result)
        assert.equal(2, gets(a, "k"))
    end)

    it("lets a pipelined command see the writes of the earlier ones", function()
        b:call("SET", "k", "old")
        local t = {
            a:start("GET", "k"),
            a:start("GET", "k"),        -- its read is sent after the rest arrived
            a:start("SET", "k", "new"), -- ... and this write must hide it
            a:start("GET", "k"),
            a:start("DEL", "k"),
            a:start("GET", "k"),
        }
        W:run_until(function() return t[6].done end)
        assert.equal("old", t[1].result)
        assert.equal("old", t[2].result)
        assert.equal("new", t[4].result)
        assert.equal(1, t[5].result)
        assert.equal(S.null, t[6].result)
    end)

    it("reads afresh when a write based on a shared read conflicts", function()
        b:call("SET", "n", "5")
        local first = a:start("GET", "n")
        local incr = {}
        for i = 1, 3 do incr[i] = a:start("INCR", "n") end
        -- The first INCR's set meets a version another sidecar has moved on.
        a:fail_next({ op = "set", path = a:path("n"), rc = S.codes.BADVERSION,
                      hook = function() W:raw_set(a:path("n"), W:node(a:path("n")).data) end })
        W:run_until(function() return incr[3].done end)
        assert.equal("5", first.result)
        assert.same({ 6, 7, 8 }, { incr[1].result, incr[2].result, incr[3].result })
        assert.equal("8", b:call("GET", "n"))
    end)

    it("does not share a read across sidecars", function()
        b:call("SET", "k", "v")
        local from = #W.ops + 1
        local ta, tb = a:start("GET", "k"), b:start("GET", "k")
        W:run_until(function() return ta.done and tb.done end)
        assert.equal(1, gets(a, "k", from))
        assert.equal(1, gets(b, "k", from))
    end)

    it("counts shared reads for /metrics", function()
        b:call("SET", "k", "v")
        local tasks = {}
        for i = 1, 5 do tasks[i] = a:start("GET", "k") end
        W:run_until(function() return tasks[5].done end)
        assert.equal(3, a.M.stats().shared_reads_total)
    end)

    it("serves the commands queued behind a write with the state it left", function()
        -- Redisson's waiters all retry on one unlock: one acquire script
        -- reads the free lock and takes it; the others, which arrived
        -- before its create was sent, see its lock without reading.
        local acquire = "if redis.call('exists', KEYS[1]) == 0 then " ..
                        "redis.call('hincrby', KEYS[1], ARGV[1], 1) " ..
                        "redis.call('pexpire', KEYS[1], 30000) return nil end " ..
                        "return redis.call('pttl', KEYS[1])"
        local from = #W.ops + 1
        local tasks = {}
        for i = 1, 6 do tasks[i] = a:start("EVAL", acquire, "1", "L", "w" .. i .. ":1") end
        W:run_until(function() return tasks[6].done end)
        assert.equal(S.null, tasks[1].result)
        for i = 2, 6 do
            assert.is_true(math.type(tasks[i].result) == "integer" and tasks[i].result > 0,
                           "waiter " .. i .. ": " .. tostring(tasks[i].result))
        end
        assert.equal(1, gets(a, "L", from))
        local creates = 0
        for i = from, #W.ops do
            local op = W.ops[i]
            if op.sc == a.id and op.path == a:path("L") and op.kind ~= "get" then creates = creates + 1 end
        end
        assert.equal(1, creates) -- one plain create, no multi
        assert.equal("1", b:call("HGET", "L", "w1:1"))
        -- A pipelined read behind a SET sees the SET, and one that arrives
        -- after the write was sent reads again.
        from = #W.ops + 1
        local set = a:start("SET", "k", "new")
        local get = a:start("GET", "k")
        W:run_until(function() return get.done end)
        assert.same({ ok = "OK" }, set.result)
        assert.equal("new", get.result)
        assert.equal(1, gets(a, "k", from)) -- the SET's own read of k, not the GET's
        from = #W.ops + 1
        assert.equal("new", a:call("GET", "k"))
        assert.equal(1, gets(a, "k", from))
    end)
end)
