-- Keys a script names without declaring them in KEYS (Redis allows it
-- outside a cluster): the queues of the undeclared keys it writes are
-- added to its own at its commit (queue.extend); after a wait for another
-- command of this sidecar on one, it runs again.  (A lost write's
-- resolution relies on it: lost_write_removed_spec.lua.)  Helpers'
-- reviews of earlier versions, which ran every such script twice, then
-- gave up the script's place on its declared keys while it waited, gave
-- the first, second and fourth cases.
local S = require "world"
local null = S.null

describe("a script with undeclared keys", function()
    it("writing a key chosen at random commits once", function()
        local _, a = S.world(1)
        local stats = a.require("txn").stats
        local committed, retries = stats.committed, stats.retries
        local body = "local k = 'r' .. math.random(1, 1000000) redis.call('SET', k, 'v') return k"
        for _ = 1, 5 do
            local r = a:call("EVAL", body, "0")
            assert.equal("string", type(r), type(r) == "table" and r.err or nil)
            assert.equal("v", a:call("GET", r))
        end
        assert.equal(committed + 5, stats.committed)
        assert.equal(retries, stats.retries)
    end)

    it("that only reads them runs once, within its time cap", function()
        local _, a, b = S.world(2)
        assert.same(S.OK, b:call("SET", "k", "1"))
        assert.equal("1", a:call("GET", "k")) -- (seen: not presumed absent)
        local fake, ticks = a.host.now, 0
        -- a clock that moves 1 ms each time it is looked at (the caps look
        -- every few hundred instructions of the script)
        a.host.now = function()
            ticks = ticks + 1
            return fake() + ticks
        end
        local loop = " local x = 0 for i = 1, 200000 do x = x + i end return x"
        a.config.script_time_limit = 1000000
        local t0 = ticks
        assert.equal(20000100000, a:call("EVAL", "redis.call('GET', KEYS[1])" .. loop, "1", "k"))
        a.config.script_time_limit = math.floor((ticks - t0) * 1.6)
        local r = a:call("EVAL", "redis.call('GET', ARGV[1])" .. loop, "0", "k")
        a.host.now = fake
        assert.equal(20000100000, r, type(r) == "table" and r.err or nil)
    end)

    -- counts the extensions that had to wait
    local function count_waits(a)
        local queue, n = a.require("queue"), { waits = 0 }
        local extend = queue.extend
        queue.extend = function(ticket, paths)
            local added, waited = extend(ticket, paths)
            if waited then n.waits = n.waits + 1 end
            return added, waited
        end
        return queue, n
    end

    -- ctr set, then INCR'd by a script naming it in ARGV, while another
    -- command holds it for 50 ms (with_holder): the script's result, how
    -- many times it ran again, how many times it waited
    local function incr_script(with_holder)
        local W, a = S.world(1)
        local queue, n = count_waits(a)
        local stats = a.require("txn").stats
        assert.same(S.OK, a:call("SET", "ctr", "1"))
        local retries = stats.retries
        local holder = with_holder and W:spawn(a, function()
            local held <close> = queue.hold({ a:path("ctr") })
            a.host.sleep(50)
        end)
        W:advance(1)
        local incr = "local v = redis.call('GET', ARGV[1]) redis.call('SET', ARGV[1], v + 1) return v + 1"
        local ev = a:start("EVAL", incr, "0", "ctr")
        W:advance(20)
        assert.equal(not with_holder, ev.done == true)
        W:run_until(function() return (not holder or holder.done) and ev.done end)
        assert.equal("2", a:call("GET", "ctr"))
        assert.equal(0, queue.busy())
        return ev.result, stats.retries - retries, n.waits
    end

    it("writing a key another command holds commits after it, run again", function()
        local r0, again0, waits0 = incr_script(false)
        local r1, again1, waits1 = incr_script(true)
        assert.equal(2, r0)
        assert.equal(2, r1)
        assert.equal(0, waits0)
        assert.equal(1, waits1)
        assert.equal(again0 + 1, again1) -- (its reads made before the wait)
    end)

    it("waiting for an undeclared key keeps its place on its declared keys", function()
        local W, a, b = S.world(2)
        local queue, n = count_waits(a)
        assert.same(S.OK, b:call("SET", "A", "before"))
        assert.equal("before", a:call("GET", "A")) -- (seen by a: the script reads it from ZooKeeper)
        local holder = W:spawn(a, function() -- another client's command on B, 50 ms long
            local held <close> = queue.hold({ a:path("B") })
            a.host.sleep(50)
        end)
        W:advance(1)
        local body = "redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'script') redis.call('SET', ARGV[1], 'v')"
        local ev = a:start("EVAL", body, "1", "A", "B")
        W:advance(0.5) -- (the EVAL's read of A is on its way)
        local set = a:start("SET", "A", "after") -- pipelined behind the EVAL: waits for it on A
        W:run_until(function() return holder.done and ev.done and set.done end)
        assert.equal(null, ev.result)
        assert.same(S.OK, set.result)
        assert.equal("after", a:call("GET", "A")) -- (as Redis: the SET lands last)
        assert.equal("v", a:call("GET", "B"))
        assert.equal(1, n.waits)
        assert.equal(0, queue.busy())
    end)

    it("two scripts each writing the other's declared key both commit", function()
        local W, a = S.world(1)
        local queue = a.require("queue")
        assert.same(S.OK, a:call("SET", "A", "0"))
        assert.same(S.OK, a:call("SET", "B", "0"))
        -- each reads its declared key, then increments the undeclared one
        local body = "redis.call('GET', KEYS[1]) return redis.call('INCR', ARGV[1])"
        local s1 = a:start("EVAL", body, "1", "A", "B")
        local s2 = a:start("EVAL", body, "1", "B", "A")
        W:run_until(function() return s1.done and s2.done end, 5000)
        assert.equal(1, s1.result)
        assert.equal(1, s2.result)
        assert.equal("1", a:call("GET", "A"))
        assert.equal("1", a:call("GET", "B"))
        assert.equal(0, queue.busy())
    end)

    it("many scripts crossing declared and undeclared keys all finish, no increment lost", function()
        local W, a = S.world(1)
        local queue = a.require("queue")
        local rng = 12345
        local function rand(n)
            rng = (rng * 1103515245 + 12345) % 2147483648
            return rng % n + 1
        end
        local keys = { "k1", "k2", "k3", "k4" }
        local body = "local n = 0 for i = 1, #KEYS do n = n + redis.call('INCR', KEYS[i]) end " ..
                     "for i = 1, #ARGV do n = n + redis.call('INCR', ARGV[i]) end return n"
        local tasks, want = {}, { k1 = 0, k2 = 0, k3 = 0, k4 = 0 }
        for i = 1, 40 do
            local declared, undeclared = {}, {}
            for _, k in ipairs(keys) do
                local r = rand(3)
                if r == 1 then declared[#declared + 1] = k elseif r == 2 then undeclared[#undeclared + 1] = k end
            end
            for _, k in ipairs(declared) do want[k] = want[k] + 1 end
            for _, k in ipairs(undeclared) do want[k] = want[k] + 1 end
            local args = { "EVAL", body, tostring(#declared) }
            for _, k in ipairs(declared) do args[#args + 1] = k end
            for _, k in ipairs(undeclared) do args[#args + 1] = k end
            tasks[i] = a:start(table.unpack(args))
            if i % 3 == 0 then W:advance(0.3) end
        end
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end, 60000)
        for _, t in ipairs(tasks) do
            assert.equal("number", type(t.result), type(t.result) == "table" and t.result.err)
        end
        for _, k in ipairs(keys) do
            local got = a:call("GET", k)
            assert.equal(want[k], got == null and 0 or tonumber(got), k)
        end
        assert.equal(0, queue.busy())
    end)
end)
