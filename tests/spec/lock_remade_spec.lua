-- A lock node is a container the server removes once empty; made again,
-- its sequence numbers begin again at 0.  A read of a lock (LS.snapshot:
-- a listing, the table, the listing again when the table moved on) may
-- straddle that: the table of the old node, the names of the new one,
-- whose numbers the old table's lines then grant.  And LOCK.CONVERT's own
-- request, known by its path, not its number (a give-up in the background,
-- a waiting conversion woken after its hold went elsewhere).

local S = require "world"

-- Slows a's next read of the lock's table and its second listing of the
-- lock by 300 ms each (each applied when answered): between the listing
-- and the table, between the table and the listing again, fn1 and fn2 run.
local function straddle(W, a, lock, start, fn1, fn2)
    a:fail_next({ op = "get", path = lock, latency = 300, pass = true })
    a:fail_next({ op = "children", path = lock, skip = 1, latency = 300, pass = true })
    local t = start()
    W:advance(5)   -- the first listing is answered, the table's read out
    fn1()
    W:advance(300) -- the table answered, the second listing out
    fn2()
    W:run_until(function() return t.done end, 5000)
    return t
end

-- Through sc: the holds of `...` released, then the empty lock node of key
-- removed (as ZooKeeper removes an empty container).
local function empty_and_remove(W, sc, key, ...)
    for _, owner in ipairs({ ... }) do assert.equal(1, sc:call("LOCK.RELEASE", key, owner)) end
    W:raw_delete(sc.LK.lock_path(key))
end

describe("a read of a lock whose node is removed and made again meanwhile", function()
    it("LOCK.INFO lists no waiter of the new node as a holder", function()
        local W, a, b = S.warm_world(2)
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "ri", "x", "MODE", "PR", "PX", "600000")))
        local lock = a.LK.lock_path("ri")
        local w
        local t = straddle(W, a, lock, function() return a:start("LOCK.INFO", "ri") end, function()
            -- the table moves on: y granted beside x
            assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "ri", "y", "MODE", "PR", "PX", "600000")))
        end, function()
            -- both go, the empty node is removed; z holds EX in a new one, w waits
            empty_and_remove(W, b, "ri", "x", "y")
            assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "ri", "z", "MODE", "EX", "PX", "600000")))
            w = b:start("LOCK.ACQUIRE", "ri", "w", "MODE", "EX", "PX", "600000", "WAIT", "600000")
            W:advance(10)
            assert.is_falsy(w.done)
        end)
        local holders = t.result.map[2]
        assert.equal(1, #holders)
        assert.equal("z", holders[1].map[2])
        assert.equal("EX", holders[1].map[4])
    end)

    it("LOCK.CONVERT takes no waiter of the new node for a hold, nor writes the old table over the new", function()
        local W, a, b = S.warm_world(2)
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "rc", "x", "MODE", "EX", "PX", "600000")))
        local y = b:start("LOCK.ACQUIRE", "rc", "y", "MODE", "EX", "PX", "600000", "WAIT", "600000")
        W:advance(10)
        assert.is_falsy(y.done)
        local lock = a.LK.lock_path("rc")
        local w
        local t = straddle(W, a, lock, function() return a:start("LOCK.CONVERT", "rc", "w", "MODE", "PR") end, function()
            -- the table moves on: x released, y granted EX under number 1
            assert.equal(1, b:call("LOCK.RELEASE", "rc", "x"))
            W:run_until(function() return y.done end, 1000)
            assert.equal("integer", math.type(y.result))
        end, function()
            -- y goes, the empty node is removed; in a new one z holds EX,
            -- then PR (the table at the old one's version), w waits for EX
            -- under number 1
            empty_and_remove(W, b, "rc", "y")
            assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "rc", "z", "MODE", "EX", "PX", "600000")))
            assert.equal("integer", math.type(b:call("LOCK.CONVERT", "rc", "z", "MODE", "PR")))
            w = b:start("LOCK.ACQUIRE", "rc", "w", "MODE", "EX", "PX", "600000", "WAIT", "600000")
            W:advance(10)
            assert.is_falsy(w.done)
            local seqs = {}
            for _, name in ipairs(W:children(lock)) do seqs[#seqs + 1] = name:match("%-(%d+)$") end
            table.sort(seqs)
            assert.same({ "0000000000", "0000000001" }, seqs)
            assert.equal(2, W:node(lock).stat.version) -- (the old table's, as read)
        end)
        assert.same({ err = "ERR owner holds no lock on this key (LOCK.ACQUIRE first)" }, t.result)
        assert.is_falsy(w.done)
        local holders = b:call("LOCK.INFO", "rc").map[2]
        assert.equal(1, #holders)
        assert.equal("z", holders[1].map[2])
    end)
end)

describe("a hold's sidecar cut off while it was released elsewhere and its lock node made again", function()
    it("answers RELEASE, RENEW and a try-once ACQUIRE by the new node, leaving its requests alone", function()
        local W, a, b = S.warm_world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "rh", "x", "MODE", "EX", "PX", "600000")))
        local y = b:start("LOCK.ACQUIRE", "rh", "y", "MODE", "EX", "PX", "600000", "WAIT", "600000")
        W:advance(10)
        local lock = a.LK.lock_path("rh")
        a:disconnect({ hold_events = true })
        assert.equal(1, b:call("LOCK.RELEASE", "rh", "x"))
        W:run_until(function() return y.done end, 1000)
        assert.equal(1, b:call("LOCK.RELEASE", "rh", "y"))
        W:raw_delete(lock)
        local z = b:call("LOCK.ACQUIRE", "rh", "z", "MODE", "EX", "PX", "600000")
        assert.equal("integer", math.type(z))
        local w = b:start("LOCK.ACQUIRE", "rh", "w", "MODE", "EX", "PX", "600000", "WAIT", "600000")
        W:advance(10)
        local before = {}
        for _, name in ipairs(W:children(lock)) do before[name] = W:node(lock .. "/" .. name).stat.version end
        a:reconnect()
        assert.equal(0, a:call("LOCK.RELEASE", "rh", "x"))
        assert.equal(0, a:call("LOCK.RENEW", "rh", "x", "PX", "600000"))
        assert.equal(S.null, a:call("LOCK.ACQUIRE", "rh", "x", "MODE", "EX", "PX", "600000", "WAIT", "0"))
        W:advance(1000)
        local after = {}
        for _, name in ipairs(W:children(lock)) do after[name] = W:node(lock .. "/" .. name).stat.version end
        assert.same(before, after)
        assert.is_falsy(w.done)
        local holders = a:call("LOCK.INFO", "rh").map[2]
        assert.equal(1, #holders)
        assert.equal("z", holders[1].map[2])
        assert.equal(z, holders[1].map[6])
        assert.equal(1, b:call("LOCK.RELEASE", "rh", "z"))
        W:run_until(function() return w.done end, 1000)
        assert.is_true(w.result > z)
    end)
end)

-- A conversion given up in the background after -TRYAGAIN, while the lock
-- node was removed (a container the server removes once empty) and made
-- again: its sequence numbers start again, and the request that now has
-- our request's number is another owner's.
describe("a conversion given up after its lock node was made again", function()
    it("leaves the other owner's request of the same number alone", function()
        local W, a, b = S.warm_world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cr", "x", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cr", "y", "MODE", "PR", "PX", "600000")))
        local lock = a.LK.lock_path("cr")
        local first = W:children(lock)
        a:fail_next({ op = "multi", when = "after", hook = function() a:disconnect() end })
        local cv = a:start("LOCK.CONVERT", "cr", "x", "MODE", "EX", "WAIT", "60000")
        W:run_until(function() return cv.done end)
        assert.matches("^TRYAGAIN", cv.result.err)
        -- while a is cut off: both holds end, the empty lock node goes, and
        -- two new owners come, z asking for EX
        empty_and_remove(W, b, "cr", "x", "y")
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cr", "z", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cr", "w", "MODE", "PR", "PX", "600000")))
        local function seqs(names)
            local out = {}
            for i, name in ipairs(names) do out[i] = name:match("%-(%d+)$") end
            return out
        end
        assert.same(seqs(first), seqs(W:children(lock))) -- (z has x's number)
        local zc = b:start("LOCK.CONVERT", "cr", "z", "MODE", "EX", "WAIT", "60000")
        W:advance(100)
        assert.is_falsy(zc.done)
        a:reconnect()
        W:advance(3000) -- the give-up runs
        assert.is_falsy(zc.done)
        local waiters = b:call("LOCK.INFO", "cr").map[4]
        assert.equal(1, #waiters)
        assert.equal(1, b:call("LOCK.RELEASE", "cr", "w"))
        W:run_until(function() return zc.done end)
        assert.equal("integer", math.type(zc.result))
    end)
end)

describe("a waiting conversion woken after its lock node was made again", function()
    it("is not answered by the line of another owner that has its number", function()
        local W, a, b = S.warm_world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cs", "x", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cs", "y", "MODE", "PR", "PX", "600000")))
        local lock = a.LK.lock_path("cs")
        local cv = a:start("LOCK.CONVERT", "cs", "x", "MODE", "EX", "WAIT", "600000")
        W:advance(100)
        assert.is_falsy(cv.done)
        -- while a hears nothing: both holds released through b, the empty
        -- lock node removed, and z holds EX under x's number in a new one
        a:disconnect({ hold_events = true })
        empty_and_remove(W, b, "cs", "x", "y")
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cs", "z", "MODE", "EX", "PX", "600000")))
        assert.matches("%-0000000000$", W:children(lock)[1])
        a:reconnect()
        W:run_until(function() return cv.done end, 5000)
        assert.same({ err = "ERR owner's hold of this lock ended while its conversion waited" }, cv.result)
    end)
end)
