-- Keys a script names without declaring them in KEYS (Redis allows it
-- outside a cluster): its commit waits for this sidecar's other commands
-- on the undeclared keys it writes, taking their queues then (txn.lua's
-- hold_written), and runs again when one was busy.  (A lost write's
-- resolution relies on it: lost_write_removed_spec.lua.)  A helper's
-- review of a first version, which ran every such script twice, gave the
-- first two cases.
local S = require "world"

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

    it("writing a key another command holds commits after it, run again", function()
        local W, a = S.world(1)
        local queue, busy = a.require("queue"), 0
        local try_hold = queue.try_hold
        queue.try_hold = function(paths)
            local ticket = try_hold(paths)
            busy = busy + (ticket and 0 or 1)
            return ticket
        end
        assert.same(S.OK, a:call("SET", "ctr", "1"))
        local holder = W:spawn(a, function() -- (a command on ctr, 50 ms long)
            local held <close> = queue.hold({ a:path("ctr") })
            a.host.sleep(50)
        end)
        W:advance(1)
        local incr = "local v = redis.call('GET', ARGV[1]) redis.call('SET', ARGV[1], v + 1) return v + 1"
        local ev = a:start("EVAL", incr, "0", "ctr")
        W:advance(20)
        assert.is_falsy(ev.done)
        assert.equal(1, busy)
        W:run_until(function() return holder.done and ev.done end)
        assert.equal(2, ev.result)
        assert.equal("2", a:call("GET", "ctr"))
        assert.equal(1, busy)
    end)
end)
