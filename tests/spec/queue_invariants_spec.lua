-- Per-key queues under random mixes of scripts with declared and
-- undeclared keys (queue.extend), INCR, MSET, raw holders with duplicate
-- paths and, in half of the runs, commands closed at random times: after
-- every step of the world each ticket is in exactly the queues of its
-- paths, once, its need is the number of those where it is not first, and
-- every command finishes (a helper's review of queue.extend wrote it).
local S = require "world"

local function run_mix(seed, with_aborts, n)
    local W, a = S.world(1)
    local queue = a.require("queue")
    local queues
    for i = 1, 10 do
        local name, v = debug.getupvalue(queue.busy, i)
        if name == "queues" then queues = v break end
        if not name then break end
    end
    assert(queues, "queues upvalue")
    local function check()
        local tickets = {}
        for path, q in pairs(queues) do
            assert(#q > 0, "empty queue kept")
            local seenq = {}
            for i, t in ipairs(q) do
                assert(not seenq[t], "ticket twice in one queue")
                seenq[t] = true
                assert(not t.released, "released ticket in a queue")
                local has = false
                for _, p in ipairs(t.paths) do if p == path then has = true end end
                assert(has, "ticket in a queue not in its paths")
                tickets[t] = true
            end
        end
        for t in pairs(tickets) do
            local need = 0
            for _, p in ipairs(t.paths) do
                local q = queues[p]
                assert(q, "ticket's path has no queue")
                local found = false
                for _, u in ipairs(q) do if u == t then found = true end end
                assert(found, "ticket missing from its path's queue")
                if q[1] ~= t then need = need + 1 end
            end
            assert(need == t.need, "need " .. t.need .. " but waits in " .. need)
        end
    end
    local rng = seed
    local function rand(n)
        rng = (rng * 1103515245 + 12345) % 2147483648
        return rng % n + 1
    end
    local keys = { "k1", "k2", "k3", "k4", "k5" }
    for _, k in ipairs(keys) do assert.same(S.OK, a:call("SET", k, "0")) end
    local body = "local n = 0 for i = 1, #KEYS do n = n + redis.call('INCR', KEYS[i]) end " ..
                 "for i = 1, #ARGV do n = n + redis.call('INCR', ARGV[i]) end return n"
    local tasks = {}
    for i = 1, n do
        local kind = rand(10)
        local sub1, sub2 = {}, {}
        for _, k in ipairs(keys) do
            local r = rand(4)
            if r == 1 then sub1[#sub1 + 1] = k elseif r == 2 then sub2[#sub2 + 1] = k end
        end
        local t
        if kind <= 6 then
            local args = { "EVAL", body, tostring(#sub1) }
            for _, k in ipairs(sub1) do args[#args + 1] = k end
            for _, k in ipairs(sub2) do args[#args + 1] = k end
            t = a:start(table.unpack(args))
        elseif kind == 7 then
            t = a:start("INCR", keys[rand(#keys)])
        elseif kind == 8 and #sub1 > 0 then
            local args = { "MSET" }
            for _, k in ipairs(sub1) do args[#args + 1] = k; args[#args + 1] = "0" end
            t = a:start(table.unpack(args))
        else
            local paths = {}
            for _, k in ipairs(sub1) do paths[#paths + 1] = a:path(k) end
            for _, k in ipairs(sub1) do paths[#paths + 1] = a:path(k) end -- duplicates
            local ms = rand(20)
            t = W:spawn(a, function()
                local held <close> = queue.hold(paths)
                a.host.sleep(ms)
            end)
        end
        tasks[#tasks + 1] = t
        if with_aborts and rand(4) == 1 then
            local victim = t
            W:at(W.now + rand(30) - 1 + rand(10) / 10, function()
                if not victim.done then W:abort(victim); victim.aborted = true end
            end)
        end
        if rand(3) == 1 then
            local target = W.now + rand(10) / 10
            while W.now < target and W:step() do check() end
        end
    end
    local limit = W.now + 120000
    while true do
        local all = true
        for _, t in ipairs(tasks) do if not t.done then all = false break end end
        if all then break end
        assert(W:step(), "deadlock: nothing left to run")
        check()
        assert(W.now < limit, "time limit passed")
    end
    for _, t in ipairs(tasks) do
        if not t.aborted and type(t.result) == "table" then assert.is_nil(t.result.err) end
    end
    W:advance(100)
    check()
    assert.equal(0, queue.busy())
end

describe("per-key queues under random mixes", function()
    for seed = 1, 3 do
        it("keep their invariants (seed " .. seed .. ")", function() run_mix(seed * 7919, false, 150) end)
        it("keep their invariants with commands closed (seed " .. seed .. ")", function()
            run_mix(seed * 104729, true, 150)
        end)
    end
end)
