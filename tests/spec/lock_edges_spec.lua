-- Native locks at their edges: a grant that races the end of whom it is
-- for (its client, its sidecar's session) answers no hold nobody has; the
-- policy hears of a release or a lease end however it went; LOCK.INFO
-- answers alike through every sidecar.

local S = require "world"
local null = S.null
local LOST = S.E("TRYAGAIN the key is held by a ZooKeeper session that is ending, try again")

local function holders(sc, key)
    local out = {}
    for _, e in ipairs(sc:call("LOCK.INFO", key).map[2]) do
        local m = e.map
        for i = 1, #m, 2 do if m[i] == "owner" then out[#out + 1] = m[i + 1] end end
    end
    return out
end

describe("a waiter whose client goes while its grant is taken", function()
    it("leaves no hold when a release through another sidecar granted it (the client went during the read)", function()
        local W, a, b, c = S.world(3)
        a:call("LOCK.ACQUIRE", "g1", "h", "PX", "600000")
        local w = b:start("LOCK.ACQUIRE", "g1", "w", "PX", "600000", "WAIT", "60000")
        W:advance(50)
        assert.is_falsy(w.done)
        b:fail_next({ op = "get", path = b.LK.lock_path("g1"), pass = true, hook = function() b:abandon(w) end })
        assert.equal(1, a:call("LOCK.RELEASE", "g1", "h"))
        W:advance(50)
        assert.is_true(w.done)
        W:advance(1000)
        assert.same({}, holders(c, "g1"))
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "g1", "x", "WAIT", "0")))
    end)

    it("leaves no hold when it granted itself (the client went during the write)", function()
        local W, a, b, c = S.world(3)
        a:call("LOCK.ACQUIRE", "g2", "h", "PX", "600000")
        local w = b:start("LOCK.ACQUIRE", "g2", "w", "PX", "600000", "WAIT", "60000")
        W:advance(50)
        b:fail_next({ op = "set", path = b.LK.lock_path("g2"), pass = true, hook = function() b:abandon(w) end })
        W:expire_session(a.sid)
        W:advance(50)
        assert.is_true(w.done)
        W:advance(1000)
        assert.same({}, holders(c, "g2"))
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "g2", "x", "WAIT", "0")))
    end)
end)

describe("a grant answered as its sidecar's session is given up", function()
    it("a self-grant answers -TRYAGAIN, and the next owner holds alone", function()
        local W, a, b, c = S.world(3)
        local lock = a.LK.lock_path("sg")
        b:call("LOCK.ACQUIRE", "sg", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "sg", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        -- h's session ends: w grants itself; that write applies, and a's
        -- session is given up (and ends) before the answer is taken
        a:fail_next({ op = "set", path = lock, pass = true, hook = function() a:lose({ expire_old = true }) end })
        W:expire_session(b.sid)
        W:run_until(function() return w.done end)
        assert.same(LOST, w.result)
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "sg", "x", "WAIT", "0")))
        assert.same({ "x" }, holders(c, "sg"))
    end)

    it("an immediate up-conversion answers -TRYAGAIN, not its token", function()
        local W, a, _, c = S.world(3)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cv", "o", "MODE", "CR", "PX", "60000")))
        a:fail_next({ op = "multi", pass = true, hook = function() a:lose({ expire_old = true }) end })
        assert.same(LOST, a:call("LOCK.CONVERT", "cv", "o", "MODE", "EX"))
        W:advance(10)
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "cv", "x", "WAIT", "0")))
    end)
end)

describe("the policy's hooks", function()
    local function with_example(name) return { config = { policy = S.example(name) } } end

    local function recorder()
        return S.policy_file([[
            local log = {}
            _G.__events = log
            local function rec(ev) return function(key) log[#log + 1] = ev .. " " .. key end end
            return { on_acquire = rec("acquire"), on_release = rec("release"),
                     on_expire = rec("expire"), on_lost = rec("lost") }
        ]])
    end

    it("on_release hears of a release through a sidecar other than the holder's, there", function()
        local file = recorder()
        local W, a, b = S.world({ { config = { policy = file } }, { config = { policy = file } } })
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "hr", "o", "PX", "600000")))
        assert.equal(1, b:call("LOCK.RELEASE", "hr", "o"))
        W:advance(2000)
        assert.same({ "acquire hr" }, a.env.__events)
        assert.same({ "release hr" }, b.env.__events)
        os.remove(file)
    end)

    it("on_expire hears of a lease end whose delete's reply was lost", function()
        local file = recorder()
        local W, a = S.world({ { config = { policy = file } } })
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "he", "o", "PX", "1000")))
        a:fail_next({ op = "delete", when = "after" }) -- it lands, its reply is lost
        W:advance(3000)
        assert.same({}, W:children(a.LK.lock_path("he")))
        assert.same({ "acquire he", "expire he" }, a.env.__events)
        os.remove(file)
    end)

    it("lock_delay: a lock released through another sidecar, or whose lease ended (its delete's reply lost), is free at once", function()
        local W, a, b, c = S.world({ with_example("lock_delay"), with_example("lock_delay"),
                                     with_example("lock_delay") })
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "ldr", "o", "PX", "600000")))
        W:advance(10)
        assert.equal(1, b:call("LOCK.RELEASE", "ldr", "o"))
        W:advance(500)
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "ldr", "x", "WAIT", "0")))
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "lde", "o", "PX", "1000")))
        W:advance(10)
        a:fail_next({ op = "delete", when = "after" })
        W:advance(3000)
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "lde", "x", "WAIT", "0")))
    end)
end)

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do if m[i] == name then return m[i + 1] end end
end

describe("LOCK.INFO's waited_ms, on the leader's clock", function()
    it("answers a waiter's waited_ms the same through every sidecar", function()
        local W, a, b, c = S.world(3) -- wall clocks some seconds apart, as machines' are
        a:call("LOCK.ACQUIRE", "iw", "h", "PX", "600000")
        local w = b:start("LOCK.ACQUIRE", "iw", "w", "WAIT", "600000")
        W:advance(5000)
        local seen = {}
        for _, sc in ipairs({ a, b, c }) do
            local waiters = sc:call("LOCK.INFO", "iw").map[4]
            seen[#seen + 1] = field(waiters[1], "waited_ms")
        end
        for i, v in ipairs(seen) do
            assert.is_true(v >= 4900 and v <= 5100, "through sidecar " .. i .. ": waited_ms " .. v ..
                           " (all: " .. table.concat(seen, ", ") .. ")")
        end
        assert.is_falsy(w.done)
    end)

    it("does not move a waiter's waited_ms when a wall clock jumps", function()
        local W, a, b = S.world(2)
        a:call("LOCK.ACQUIRE", "ij", "h", "PX", "600000")
        b:start("LOCK.ACQUIRE", "ij", "w", "WAIT", "600000")
        W:advance(5000)
        b.wall_base = b.wall_base - 3600 * 1000 -- NTP steps b's clock back an hour
        local v = field(b:call("LOCK.INFO", "ij").map[4][1], "waited_ms")
        assert.is_true(v >= 4900 and v <= 5100, "waited_ms " .. v)
    end)
    it("a conversion's too", function()
        local W, a, b, c = S.world(3)
        a:call("LOCK.ACQUIRE", "ic", "h", "MODE", "PR", "PX", "600000")
        b:call("LOCK.ACQUIRE", "ic", "o", "MODE", "PR", "PX", "600000")
        local w = b:start("LOCK.CONVERT", "ic", "o", "MODE", "EX", "WAIT", "600000")
        W:advance(3000)
        for _, sc in ipairs({ a, b, c }) do
            local v = field(sc:call("LOCK.INFO", "ic").map[4][1], "waited_ms")
            assert.is_true(v >= 2900 and v <= 3100, "waited_ms " .. v)
        end
        assert.is_falsy(w.done)
    end)
end)

describe("a lock whose queue never empties, past ZooKeeper's counter wrap", function()
    it("grants in arrival order across the wrap (sequence 2147483647, then -2147483648)", function()
        local W, a, b = S.world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "hot", "h", "PX", "600000")))
        W.nodes[a.LK.lock_path("hot")].stat.cversion = 2147483644
        local ws = {}
        for i = 1, 6 do
            local sc = (i % 2 == 0) and a or b
            ws[i] = { sc = sc, owner = "w" .. i,
                      t = sc:start("LOCK.ACQUIRE", "hot", "w" .. i, "PX", "600000", "WAIT", "60000") }
            W:advance(5)
        end
        local names = W:children(a.LK.lock_path("hot"))
        local negative = 0
        for _, n in ipairs(names) do if n:find("%-%-%d+$") then negative = negative + 1 end end
        assert.equal(2, negative) -- w5 and w6 came after the wrap
        local owner, sc, last = "h", a, 0
        for i = 1, 6 do
            assert.equal(1, sc:call("LOCK.RELEASE", "hot", owner))
            W:run_until(function() return ws[i].t.done end)
            local token = ws[i].t.result
            assert.equal("integer", math.type(token))
            assert.is_true(token > last)
            for j = i + 1, 6 do assert.is_falsy(ws[j].t.done) end
            owner, sc, last = ws[i].owner, ws[i].sc, token
        end
        assert.equal(1, sc:call("LOCK.RELEASE", "hot", owner))
        assert.same({}, holders(a, "hot"))
    end)
end)

-- ZooKeeper's node version is a Java int too: one write short of 2^32 a
-- node is at -1, which a conditional write takes for "any version".  The
-- bridge never leaves a node there (zk.c's wrap_sets: -2 goes on to 0, as
-- the model's bridge does), and the scripts count versions the same way
-- (Z.next_version).
describe("a grant table rewritten past ZooKeeper's version wrap", function()
    local function hold_of(sc, owner)
        for _, h in pairs(sc.LK.holds) do if h.owner == owner then return h end end
    end

    it("counts versions as ZooKeeper and the bridge do: past 2^31 - 1 to -2^31, from -2 to 0", function()
        local Z, U = S.module("zkio"), S.module("util")
        assert.equal(6, Z.next_version(5))
        assert.equal(-2147483648, Z.next_version(2147483647))
        assert.equal(-2, Z.next_version(-3))
        assert.equal(0, Z.next_version(-2))
        assert.is_true(U.seq_before(2147483647, Z.next_version(2147483647)))
        assert.is_true(U.seq_before(-2, Z.next_version(-2)))
    end)

    it("knows the version its own grant wrote, so a release on a table changed since writes nothing over it", function()
        local W, a, b = S.world(2)
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "v", "h", "PX", "600000")))
        local lock = a.LK.lock_path("v")
        W.nodes[lock].stat.version = -2 -- (4294967294 writes on)
        local tx = a:start("LOCK.ACQUIRE", "v", "x", "PX", "600000", "WAIT", "60000")
        W:advance(5)
        local ty = a:start("LOCK.ACQUIRE", "v", "y", "PX", "600000", "WAIT", "60000")
        W:advance(5)
        -- h's release finds the table moved on: x grants itself, at -2
        assert.equal(1, b:call("LOCK.RELEASE", "v", "h"))
        W:run_until(function() return tx.done end)
        assert.equal("integer", math.type(tx.result))
        assert.equal(0, W.nodes[lock].stat.version) -- never -1
        assert.equal(0, hold_of(a, "x").view.version)
        -- another write lands; x's release may not grant y over it
        W.nodes[lock].stat.version = 1
        local handed = a.LK.stats.handed
        assert.equal(1, a:call("LOCK.RELEASE", "v", "x"))
        assert.equal(handed, a.LK.stats.handed)
        W:run_until(function() return ty.done end)
        assert.is_true(ty.result > tx.result)
        assert.same({ "y" }, holders(a, "v"))
    end)

    it("orders conversions asked across the wrap by when they were asked", function()
        local W, a, b = S.world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "c", "A", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "c", "B", "MODE", "PR", "PX", "600000")))
        W.nodes[a.LK.lock_path("c")].stat.version = 2147483647
        local ta = a:start("LOCK.CONVERT", "c", "A", "MODE", "EX", "WAIT", "10000")
        W:advance(50)
        assert.is_falsy(ta.done)
        -- B's ask closes a deadlock: B asked last, B's conversion ends
        local tb = b:start("LOCK.CONVERT", "c", "B", "MODE", "EX", "WAIT", "10000")
        W:run_until(function() return tb.done end)
        assert.equal(null, tb.result)
        assert.is_falsy(ta.done)
        assert.equal(1, b:call("LOCK.RELEASE", "c", "B"))
        W:run_until(function() return ta.done end)
        assert.equal("integer", math.type(ta.result))
        assert.same({ "A" }, holders(a, "c"))
    end)
end)
