-- Per-key queues: commands of one sidecar on one key run one at a time in
-- arrival order; different keys run concurrently; a command closed while
-- it waits or holds gives its place up.  Across sidecars, optimistic
-- retries keep read-modify-write commands exact.

local S = require "world"
local null, OK = S.null, S.OK

describe("per-key queues", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("runs a pipeline on one key in arrival order", function()
        local tasks = {}
        for i = 1, 20 do tasks[i] = a:start("INCR", "n") end
        tasks[21] = a:start("SET", "n", "x")
        tasks[22] = a:start("GET", "n")
        W:run_until(function() return tasks[22].done end)
        for i = 1, 20 do assert.equal(i, tasks[i].result) end
        assert.same(OK, tasks[21].result)
        assert.equal("x", tasks[22].result)
    end)

    it("never lets two commands of one sidecar on a key overlap", function()
        -- Each INCR reads then writes; overlapping ones would conflict and
        -- retry (more than one set per INCR).
        local tasks = {}
        for i = 1, 10 do tasks[i] = a:start("INCR", "n") end
        W:run_until(function() return tasks[10].done end)
        local sets, creates = 0, 0
        for _, op in ipairs(W.ops) do
            -- (a persistent key's write is a multi: with its mark's check or bump)
            local kind, path = op.kind, op.path
            if kind == "multi" then kind, path = op.path:match("^(%a+) ([^,]+)") end
            if kind == "set" and path == a:path("n") then sets = sets + 1 end
            if kind == "create" and path == a:path("n") then creates = creates + 1 end
        end
        assert.equal(1, creates)
        assert.equal(9, sets)
    end)

    it("runs commands on different keys concurrently", function()
        a:fail_next({ op = "get", path = a:path("slow"), latency = 500 })
        local t0 = W.now
        local slow = a:start("GET", "slow")
        local fast = a:start("SET", "fast", "v")
        W:run_until(function() return fast.done end)
        assert.is_nil(slow.done)
        assert.is_true(W.now - t0 < 10)
        W:run_until(function() return slow.done end)
    end)

    it("orders multi-key commands by arrival on every key, without deadlock", function()
        local t1 = a:start("INCR", "x")
        local t2 = a:start("DEL", "y", "x")
        local t3 = a:start("DEL", "x", "y")
        local t4 = a:start("INCR", "y")
        local t5 = a:start("EXISTS", "x", "y")
        W:run_until(function() return t5.done end)
        assert.equal(1, t1.result)
        assert.equal(1, t2.result) -- x existed, y did not
        assert.equal(0, t3.result)
        assert.equal(1, t4.result)
        assert.equal(1, t5.result)
    end)

    it("gives the key up when a waiting command is closed", function()
        a:fail_next({ op = "get", path = a:path("k"), latency = 100 })
        local holder = a:start("GET", "k")
        local waiter = a:start("SET", "k", "lost")
        local next_one = a:start("SET", "k", "v")
        W:advance(10)
        W:abort(waiter)
        W:run_until(function() return next_one.done end)
        assert.same(OK, next_one.result)
        assert.equal("v", a:call("GET", "k"))
        assert.equal(0, a.require("queue").busy())
    end)

    it("gives the key up when the holding command is closed", function()
        a:fail_next({ op = "get", path = a:path("k"), latency = 100 })
        local holder = a:start("SET", "k", "v1")
        local waiter = a:start("SET", "k", "v2")
        W:advance(10)
        W:abort(holder)
        W:run_until(function() return waiter.done end)
        assert.same(OK, waiter.result)
        assert.equal(0, a.require("queue").busy())
    end)

    -- (a helper's review: the wait's guard released only while the
    -- ticket still needed a release, not once woken, before it ran)
    it("gives the key up when a command is closed between its wake and its run", function()
        local queue, k = a.require("queue"), a:path("k")
        local waiter
        local holder = W:spawn(a, function()
            local t = queue.hold({ k })
            a.host.sleep(10)
            t:release() -- (the waiter's wake is posted)
            W:abort(waiter)
        end)
        W:advance(1)
        waiter = W:spawn(a, function() local h <close> = queue.hold({ k }) end)
        W:advance(1)
        local late = W:spawn(a, function() local h <close> = queue.hold({ k }) end)
        W:run_until(function() return holder.done and late.done end, 1000)
        assert.equal(0, queue.busy())
    end)

    -- A script adding a key a herd waits on (queue.extend) looks at each
    -- waiter once: it joins the tail, where a look of more steps than
    -- waiters would have given up and taken every queue again.
    it("adds a key with 8000 commands waiting on it to a held ticket", function()
        local queue = a.require("queue")
        for _ = 1, 8000 do
            W:spawn(a, function()
                local h <close> = queue.hold({ a:path("B") })
                a.host.sleep(10)
            end)
        end
        W:advance(1)
        local added
        W:spawn(a, function()
            local t <close> = queue.hold({ a:path("A") })
            added = queue.extend(t, { a:path("B") })
        end)
        W:advance(1)
        assert.is_true(added == nil) -- (waiting at B's tail)
        W:run_until(function() return added ~= nil end, 100000)
        assert.is_true(added)
    end)

    it("keeps INCR exact across sidecars racing on one key", function()
        local c = W:sidecar()
        local tasks = {}
        for i = 1, 15 do
            tasks[#tasks + 1] = a:start("INCR", "n")
            tasks[#tasks + 1] = b:start("INCR", "n")
            tasks[#tasks + 1] = c:start("INCR", "n")
        end
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end)
        local seen = {}
        for _, t in ipairs(tasks) do
            assert.is_number(t.result)
            assert.is_nil(seen[t.result])
            seen[t.result] = true
        end
        assert.equal("45", a:call("GET", "n"))
    end)

    it("lets exactly one of many contenders win SET NX", function()
        local c = W:sidecar()
        local tasks = {}
        for _, sc in ipairs({ a, b, c, a, b, c }) do
            tasks[#tasks + 1] = sc:start("SET", "lock", "t" .. sc.id, "NX", "PX", "30000")
        end
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end)
        local wins = 0
        for _, t in ipairs(tasks) do
            if type(t.result) == "table" and t.result.ok == "OK" then
                wins = wins + 1
            else
                assert.equal(null, t.result)
            end
        end
        assert.equal(1, wins)
    end)
end)

-- A connection's order (queue.lua's Q.turn): a connection's pipelined
-- commands run side by side, in order per key, but one without keys runs
-- alone, after every earlier command of its connection and before every
-- later one, as Redis runs a pipeline.
describe("a connection's order", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    -- Starts each command (a list of words) as client id's, in order.
    local function pipeline(id, cmds)
        local tasks = {}
        for i, words in ipairs(cmds) do
            tasks[i] = a:start(table.unpack(words))
            tasks[i].client = id
        end
        return tasks
    end

    local function run(tasks)
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end, 10000)
        for _, t in ipairs(tasks) do assert.is_true(t.done) end
    end

    it("runs a command without keys after the writes pipelined before it", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "SET", "k1", "v" }, { "SET", "k2", "v" }, { "DBSIZE" },
                                    { "KEYS", "*" } })
        run(tasks)
        assert.equal(2, tasks[3].result)
        local keys = tasks[4].result
        table.sort(keys)
        assert.same({ "k1", "k2" }, keys)
        assert.equal(0, a.require("queue").connections())
    end)

    it("leaves other connections' commands side by side", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local set = pipeline(7, { { "SET", "k1", "v" } })
        local size = pipeline(8, { { "DBSIZE" } })
        W:run_until(function() return size[1].done end, 10000)
        assert.equal(0, size[1].result) -- (the write was still on its way)
        assert.is_nil(set[1].done)
        run(set)
    end)

    it("runs the commands pipelined after it once it is done", function()
        a:call("SET", "a", "0")
        a:fail_next({ op = "delete", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "FLUSHDB" }, { "SET", "a", "1" }, { "GET", "a" } })
        run(tasks)
        assert.same(OK, tasks[1].result)
        assert.equal("1", tasks[3].result)
        assert.equal("1", a:call("GET", "a"))
    end)

    it("runs a script with no KEYS alone, one with KEYS side by side", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "SET", "k", "v" },
                                    { "EVAL", "return redis.call('get', 'k')", "0" } })
        run(tasks)
        assert.equal("v", tasks[2].result)
        -- with a key of its own, it does not wait for the other key's write
        a:fail_next({ op = "create", pass = true, latency = 50 })
        tasks = pipeline(7, { { "SET", "j", "v" },
                              { "EVAL", "return redis.call('get', KEYS[1])", "1", "other" } })
        W:run_until(function() return tasks[2].done end, 10000)
        assert.is_nil(tasks[1].done)
        run(tasks)
    end)

    it("keeps commands with keys side by side", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "SET", "x", "1" }, { "SET", "y", "2" } })
        W:run_until(function() return tasks[2].done end, 10000)
        assert.is_nil(tasks[1].done)
        run(tasks)
    end)

    it("does not run a command whose client left while it waited", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "SET", "k", "v" }, { "FLUSHDB" }, { "SET", "after", "1" } })
        W:advance(5)
        a:abandon(tasks[2])
        a:abandon(tasks[3])
        run(tasks)
        assert.equal("v", a:call("GET", "k"))
        assert.equal(null, a:call("GET", "after"))
        assert.equal(0, a.require("queue").connections())
    end)

    it("answers SCRIPT KILL at once, behind a command that waits for its key", function()
        local queue = a.require("queue")
        local holder = W:spawn(a, function()
            local h <close> = queue.hold({ a:path("k") })
            a.host.sleep(100)
        end)
        W:advance(1)
        local tasks = pipeline(7, { { "GET", "k" }, { "SCRIPT", "KILL" } })
        W:run_until(function() return tasks[2].done end, 50)
        assert.is_true(tasks[2].done)
        assert.is_nil(tasks[1].done)
        assert.is_truthy(tostring(tasks[2].result.err):find("^NOTBUSY"))
        run({ holder, tasks[1] })
    end)

    it("gives the turn back when a waiting command is closed", function()
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local tasks = pipeline(7, { { "SET", "k", "v" }, { "DBSIZE" }, { "GET", "k" } })
        W:advance(5)
        W:abort(tasks[2])
        run({ tasks[1], tasks[3] })
        assert.equal("v", tasks[3].result)
        assert.equal(0, a.require("queue").connections())
    end)
end)

