-- Native lock conversions at their edges: the middle conversions (PR <-> CW,
-- where neither mode is stronger, so a mode that fits the new one may clash
-- with the old), a conversion given up after its ask's reply was lost, and
-- one granted by its own write whose reply was lost.

local S = require "world"

-- The holds of `key` as the tree records them (table lines whose request
-- node exists): {owner, mode, convert} in queue order.
local function holders(W, sc, key)
    local LS = sc.require("lockstore")
    local lock = sc.LK.lock_path(key)
    local lines = LS.decode_table(W:node(lock).data)
    local out = {}
    for _, name in ipairs(W:children(lock)) do
        local seq = tonumber(name:match("%-(%d+)$"))
        local d = LS.decode_req(W:node(lock .. "/" .. name).data)
        if lines[seq] then
            out[#out + 1] = { owner = d.owner, mode = lines[seq].mode, convert = lines[seq].convert }
        end
    end
    return out
end

-- No two recorded holds of `key` clash.
local function assert_compatible(W, sc, key)
    local Q = sc.require("lockq")
    local h = holders(W, sc, key)
    for i = 1, #h do
        for j = i + 1, #h do
            assert(Q.compatible(h[i].mode, h[j].mode), string.format("%s holds %s%s while %s holds %s",
                h[i].owner, h[i].mode, h[i].convert and (" (converting to " .. h[i].convert .. ")") or "",
                h[j].owner, h[j].mode))
        end
    end
end

-- x's sidecar a is slow to read once, so another sidecar decides first;
-- `free` lets the waits t1 and t2 go: both end granted, and no two
-- recorded holds clash at any moment on the way.
local function granted_in_turn(W, a, free, t1, t2)
    a:fail_next({ op = "get", pass = true, latency = 30 })
    a:fail_next({ op = "children", pass = true, latency = 30 })
    free()
    W:run_until(function()
        assert_compatible(W, a, "m")
        return t1.done and t2.done
    end, 5000)
    assert.equal("integer", math.type(t1.result))
    assert.equal("integer", math.type(t2.result))
    assert_compatible(W, a, "m")
end

describe("a grant decided beside a pending middle conversion (PR -> CW)", function()
    it("waits for the conversion to be recorded before it grants a new CW request", function()
        local W, a, b, c = S.world(3)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "m", "x", "MODE", "PR")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "m", "y", "MODE", "PR")))
        local cx = a:start("LOCK.CONVERT", "m", "x", "MODE", "CW", "WAIT", "60000") -- waits for y's PR
        W:advance(50)
        assert.is_falsy(cx.done)
        local z = c:start("LOCK.ACQUIRE", "m", "z", "MODE", "CW", "WAIT", "60000")
        W:advance(50)
        assert.is_falsy(z.done)
        granted_in_turn(W, a, function()
            assert.equal("integer", math.type(b:call("LOCK.CONVERT", "m", "y", "MODE", "NL")))
        end, z, cx)
    end)

    it("grants the later of two middle conversions only once the earlier one is recorded", function()
        local W, a, b, c = S.world(3)
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "m", "y", "MODE", "PR")))
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "m", "x", "MODE", "PR")))
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "m", "w", "MODE", "CR")))
        local cx = a:start("LOCK.CONVERT", "m", "x", "MODE", "CW", "WAIT", "60000")
        W:advance(50)
        local cw = c:start("LOCK.CONVERT", "m", "w", "MODE", "CW", "WAIT", "60000") -- behind x's
        W:advance(50)
        assert.is_falsy(cx.done)
        assert.is_falsy(cw.done)
        granted_in_turn(W, a, function() assert.equal(1, b:call("LOCK.RELEASE", "m", "y")) end, cw, cx)
    end)

    it("does not grant CR -> CW at once while an earlier PR -> CW conversion still holds PR", function()
        local W, a, b, c = S.world(3)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "m", "x", "MODE", "PR")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "m", "z", "MODE", "PR")))
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "m", "y", "MODE", "CR")))
        local cx = a:start("LOCK.CONVERT", "m", "x", "MODE", "CW", "WAIT", "60000") -- waits for z's PR
        W:advance(50)
        assert.is_falsy(cx.done)
        a:disconnect({ hold_events = true }) -- x's sidecar cannot record its grant yet
        assert.equal(1, b:call("LOCK.RELEASE", "m", "z"))
        assert.equal(S.null, c:call("LOCK.CONVERT", "m", "y", "MODE", "CW", "WAIT", "0"))
        assert_compatible(W, c, "m")
    end)
end)

describe("a conversion given up after its ask's reply was lost", function()
    -- x (PR, through a) asks PR -> EX; the ask lands, its reply is lost, and
    -- a is cut off: -TRYAGAIN.  a's server lags behind the ask (a follower
    -- behind the leader), so the give-up, sent when a is back, must sync
    -- before it reads, or it finds no ask and leaves it in the table.
    local function given_up()
        local W, a, b, c = S.world(3)
        a:call("LOCK.ACQUIRE", "cg", "x", "MODE", "PR", "PX", "600000")
        b:call("LOCK.ACQUIRE", "cg", "y", "MODE", "PR", "PX", "600000")
        S.lag(W, a, a.LK.lock_path("cg"), true)
        a:fail_next({ op = "multi", when = "after", hook = function() a:disconnect() end })
        local cv = a:start("LOCK.CONVERT", "cg", "x", "MODE", "EX", "WAIT", "60000")
        W:run_until(function() return cv.done end)
        assert.matches("^TRYAGAIN", cv.result.err)
        W:advance(900)
        a:reconnect()
        W:advance(2000)
        return W, a, b, c
    end

    it("removes the ask from the table", function()
        local _, _, _, c = given_up()
        local info = c:call("LOCK.INFO", "cg").map
        assert.equal("waiters", info[3])
        assert.equal(0, #info[4])
    end)

    it("lets a reader in beside x's PR hold", function()
        local _, _, b, c = given_up()
        assert.equal(1, b:call("LOCK.RELEASE", "cg", "y"))
        assert.equal("integer", math.type(c:call("LOCK.ACQUIRE", "cg", "z", "MODE", "PR", "WAIT", "3000")))
    end)
end)

-- A conversion whose own grant's write applied with its reply lost: the
-- give-up that follows finds the conversion granted.  The hold's record
-- (its mode and token: the hooks' info, the release's view) learns it.
describe("a conversion granted by a write whose reply was lost", function()
    local function record(sc, key)
        for _, h in pairs(sc.require("locks").holds) do
            if h.key == key then return h end
        end
    end

    -- x (through a) and y (through b) hold "cv" in PR, x asks for EX; y's
    -- release wakes x, whose grant applies with its reply lost as `cut`
    -- befalls a (its disconnect, or its session given up); x's LOCK.CONVERT
    -- has answered.
    local function lost_grant(n, cut)
        local W, a, b, c = S.world(n)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cv", "x", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cv", "y", "MODE", "PR", "PX", "600000")))
        local cv = a:start("LOCK.CONVERT", "cv", "x", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        assert.is_falsy(cv.done)
        a:fail_next({ op = "multi", when = "after", hook = function() cut(a) end })
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "y"))
        W:run_until(function() return cv.done end)
        return W, a, b, c, cv
    end

    it("leaves the hold recorded in the mode and token it was granted", function()
        local W, a, b, _, cv = lost_grant(2, function(sc) sc:disconnect() end)
        W:advance(900)
        a:reconnect()
        W:advance(2000)
        local info = b:call("LOCK.INFO", "cv").map
        local holders = info[2]
        assert.equal(1, #holders)
        local h = record(a, "cv")
        assert.is_truthy(h)
        assert.equal("EX", h.mode)
        local token = a:call("LOCK.CONVERT", "cv", "x", "MODE", "EX")
        assert.equal("integer", math.type(token))
        assert.equal(token, h.token)
        if math.type(cv.result) == "integer" then assert.equal(token, cv.result) end
    end)

    it("is not answered granted once the session it was granted in is given up", function()
        -- (the server keeps the session a while: x's node lives on)
        local _, _, _, _, cv = lost_grant(2, function(sc) sc:lose() end)
        assert.same({ err = "TRYAGAIN the key is held by a ZooKeeper session that is ending, try again" }, cv.result)
    end)

    it("its hold's release still lets the next waiter in, with no clash", function()
        local W, a, b, c = lost_grant(3, function(sc) sc:disconnect() end)
        W:advance(900)
        a:reconnect()
        W:advance(2000)
        local z = c:start("LOCK.ACQUIRE", "cv", "z", "MODE", "PR", "WAIT", "60000")
        W:advance(100)
        assert.is_falsy(z.done) -- behind x's EX
        assert.equal(1, a:call("LOCK.RELEASE", "cv", "x"))
        W:run_until(function() return z.done end, 5000)
        assert.equal("integer", math.type(z.result))
        assert.equal(0, a:call("LOCK.RELEASE", "cv", "x"))
    end)

    it("a hold released meanwhile is not recorded again by the background give-up", function()
        local W, a, b = lost_grant(2, function(sc) sc:disconnect() end)
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "x")) -- through b, while a is cut off
        W:advance(900)
        a:reconnect()
        W:advance(2000)
        for _, h in pairs(a.LK.holds) do assert.equal("PR", h.mode) end
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cv", "w", "MODE", "EX", "WAIT", "0")))
    end)
end)
