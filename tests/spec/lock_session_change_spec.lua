-- Native locks when a sidecar's ZooKeeper connection or session changes
-- under holders, waiters and pending conversions (RELIABILITY.md items 3,
-- 4, 8, 11, 15, 16, 28-30 applied to LOCK.*): a disconnect shorter than
-- the session, a session given up (lose) or expired (expire), the old
-- session's nodes still visible (kept by the server, or a lagging server).

local S = require "world"
local null = S.null

local function integer(x, what) assert.equal("integer", math.type(x), what) end

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do
        if m[i] == name then return m[i + 1] end
    end
end

-- LOCK.INFO's holders and waiters, as lists of owner names.
local function who(sc, key)
    local m = sc:call("LOCK.INFO", key).map
    local h, w = {}, {}
    for _, e in ipairs(m[2]) do h[#h + 1] = field(e, "owner") end
    for _, e in ipairs(m[4]) do w[#w + 1] = field(e, "owner") end
    return h, w
end

local tryagain = S.tryagain

describe("a disconnect shorter than the session", function()
    local W, a, b, c
    before_each(function()
        W, a, b, c = S.warm_world(3)
    end)

    it("keeps the hold: a RENEW asked while cut off waits for the reconnect and answers 1", function()
        local t = a:call("LOCK.ACQUIRE", "d1", "o", "PX", "60000")
        integer(t)
        a:disconnect()
        local r = a:start("LOCK.RENEW", "d1", "o", "PX", "60000")
        W:advance(5000) -- past the request timeout (2 s), within the session (10 s)
        assert.is_falsy(r.done, "a renewal inside the lease failed instead of waiting")
        a:reconnect()
        W:run_until(function() return r.done end)
        assert.equal(1, r.result)
        assert.equal(null, b:call("LOCK.ACQUIRE", "d1", "x", "WAIT", "0"))
        assert.equal(t, a:call("LOCK.ACQUIRE", "d1", "o", "PX", "60000"), "reentrant, same token")
        assert.equal(1, a:call("LOCK.RELEASE", "d1", "o"))
        assert.equal(1, a:call("LOCK.RELEASE", "d1", "o"))
        integer(b:call("LOCK.ACQUIRE", "d1", "x", "WAIT", "0"))
    end)

    -- (the server holds the events of watches that fire during a
    -- disconnect until the client reconnects: hold_events)
    it("wakes a waiter whose release came during its disconnect after the reconnect", function()
        local t1 = a:call("LOCK.ACQUIRE", "d2", "h", "PX", "60000")
        local w = b:start("LOCK.ACQUIRE", "d2", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        b:disconnect({ hold_events = true })
        assert.equal(1, a:call("LOCK.RELEASE", "d2", "h"))
        W:advance(3000)
        b:reconnect()
        local at = W.now
        W:run_until(function() return w.done end, 2000)
        assert.is_true(w.done, "the waiter slept through the release")
        integer(w.result)
        assert.is_true(w.result > t1)
        assert.is_true(W.now - at <= 300, "woken " .. (W.now - at) .. " ms after the reconnect")
        assert.equal(null, c:call("LOCK.ACQUIRE", "d2", "x", "WAIT", "0"))
    end)

    -- Before: a waiter behind a request of its own sidecar
    -- sets no watch and looks again after LW.OWN_GRACE_MS; when that falls
    -- in a disconnect its read is parked until the command's deadline
    -- (zk-request-timeout, 2 s) and the client gets -TRYAGAIN ZooKeeper
    -- unavailable after a 3 s blip, with 57 s of its WAIT left and the
    -- session never in doubt (a waiter watching another sidecar's request
    -- rides the same blip out).  Its request is then taken out: its place
    -- in the queue is lost.
    it("keeps a waiter behind its own sidecar's hold waiting through the disconnect", function()
        local t1 = a:call("LOCK.ACQUIRE", "d5", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "d5", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        a:disconnect({ hold_events = true })
        W:advance(3000)
        a:reconnect()
        W:advance(1000)
        assert.is_falsy(w.done, "answered " .. tostring(w.result and w.result.err))
        assert.equal(1, a:call("LOCK.RELEASE", "d5", "h"))
        W:run_until(function() return w.done end, 1000)
        integer(w.result)
        assert.is_true(w.result > t1)
    end)

    -- Before (the same cause): the hold ahead is released
    -- through another sidecar during the disconnect; -TRYAGAIN instead of
    -- the grant once back.
    it("wakes a waiter behind a request of its own sidecar released elsewhere during its disconnect", function()
        a:call("LOCK.ACQUIRE", "d3", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "d3", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        a:disconnect({ hold_events = true })
        assert.equal(1, c:call("LOCK.RELEASE", "d3", "h"))
        W:advance(3000)
        a:reconnect()
        W:run_until(function() return w.done end, 2000)
        assert.is_true(w.done)
        integer(w.result)
    end)

    -- Before (the same cause): the event of the release
    -- comes while the connection is away (with a real server, just before
    -- it goes); the read it starts is parked until the command's deadline.
    it("looks again once back at a watch event that came while it was cut off", function()
        local t1 = a:call("LOCK.ACQUIRE", "d6", "h", "PX", "60000")
        local w = b:start("LOCK.ACQUIRE", "d6", "w", "PX", "60000", "WAIT", "60000")
        W:advance(500) -- past the own-grace: b watches a's request
        b:disconnect()
        assert.equal(1, a:call("LOCK.RELEASE", "d6", "h"))
        W:advance(3000)
        assert.is_falsy(w.done, "answered " .. tostring(w.result and w.result.err) .. " while cut off")
        b:reconnect()
        W:run_until(function() return w.done end, 1000)
        integer(w.result)
        assert.is_true(w.result > t1)
    end)

    it("answers a waiter held for the connection at once when the sidecar shuts down", function()
        a:call("LOCK.ACQUIRE", "d8", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "d8", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        a:disconnect()
        W:advance(1000) -- its grace over: it waits for the connection
        assert.is_falsy(w.done)
        W:spawn(a, a.M.on_shutdown)
        W:advance(10)
        assert.is_true(w.done)
        assert.same(S.E("TRYAGAIN zkresp is shutting down"), w.result)
    end)

    it("answers null, not -TRYAGAIN, a waiter whose WAIT ends while cut off, and leaves no request", function()
        a:call("LOCK.ACQUIRE", "d7", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "d7", "w", "PX", "60000", "WAIT", "1500")
        W:advance(50)
        a:disconnect()
        W:advance(2000)
        assert.is_true(w.done)
        assert.equal(null, w.result)
        a:reconnect()
        W:advance(500)
        assert.same({}, select(2, who(c, "d7")), "the request stayed in the queue")
    end)

    it("ends a conversion whose WAIT ran out during the disconnect with the old mode, nothing left asked", function()
        a:call("LOCK.ACQUIRE", "d4", "o", "MODE", "PR", "PX", "60000")
        c:call("LOCK.ACQUIRE", "d4", "r", "MODE", "PR", "PX", "60000")
        local cv = a:start("LOCK.CONVERT", "d4", "o", "MODE", "EX", "WAIT", "1000")
        W:advance(50)
        a:disconnect()
        W:advance(4000)
        a:reconnect()
        W:run_until(function() return cv.done end, 5000)
        assert.is_true(cv.done)
        -- null (old mode kept) or -TRYAGAIN (outcome unknown), never a token
        assert.is_true(cv.result == null or tryagain(cv.result), tostring(cv.result))
        W:advance(1000)
        local _, waiting = who(c, "d4")
        assert.same({}, waiting, "the conversion is still asked")
        -- another reader still gets in beside o's PR
        integer(b:call("LOCK.ACQUIRE", "d4", "y", "MODE", "PR", "WAIT", "0"))
    end)
end)

describe("a session given up or expired under holds", function()
    local W, a, b, c
    before_each(function()
        W, a, b, c = S.warm_world(3)
    end)

    it("never answers 1 to RENEW or RELEASE of the old hold while a lagging server still shows it", function()
        integer(a:call("LOCK.ACQUIRE", "s1", "o", "PX", "60000"))
        S.lag(W, a, a.LK.lock_path("s1"))
        a:expire()
        assert.equal(0, a:call("LOCK.RENEW", "s1", "o", "PX", "60000"))
        assert.equal(0, a:call("LOCK.RELEASE", "s1", "o"))
        assert.equal(0, a:call("LOCK.RENEW", "s1", "o", "PX", "60000"))
    end)

    it("never answers a reentrant ACQUIRE with the old hold's token while the old session is kept", function()
        local t = a:call("LOCK.ACQUIRE", "s2", "o", "PX", "60000")
        local old = a:lose()
        for _, wait in ipairs({ "0", "100" }) do
            local r = a:call("LOCK.ACQUIRE", "s2", "o", "PX", "60000", "WAIT", wait)
            assert.not_equal(t, r, "the old hold's token answered again (WAIT " .. wait .. ")")
            assert.is_true(r == null or tryagain(r), tostring(r))
        end
        W:expire_session(old)
        W:advance(50)
        local t2 = a:call("LOCK.ACQUIRE", "s2", "o", "PX", "60000")
        integer(t2)
        assert.is_true(t2 > t, "a fresh grant, a greater token")
        assert.equal(1, a:call("LOCK.RELEASE", "s2", "o"))
        assert.equal(0, a:call("LOCK.RELEASE", "s2", "o"), "counted once: no stale record of the old hold")
    end)

    it("answers a conversion pending at the loss -TRYAGAIN and leaves no conversion asked", function()
        a:call("LOCK.ACQUIRE", "s3", "o", "MODE", "PR", "PX", "60000")
        c:call("LOCK.ACQUIRE", "s3", "r", "MODE", "PR", "PX", "60000")
        local cv = a:start("LOCK.CONVERT", "s3", "o", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        local old = a:lose() -- the server keeps the old session a while
        W:run_until(function() return cv.done end, 3000)
        assert.is_true(cv.done)
        assert.truthy(tryagain(cv.result), tostring(cv.result))
        W:advance(500)
        local _, waiting = who(c, "s3")
        assert.same({}, waiting, "the lost hold's conversion still waits in the table")
        W:expire_session(old)
        W:advance(50)
        assert.same({ "r" }, (who(c, "s3")))
        assert.equal(1, c:call("LOCK.RELEASE", "s3", "r"))
        integer(b:call("LOCK.ACQUIRE", "s3", "x", "WAIT", "0"))
    end)

    it("answers an old session's waiter -TRYAGAIN and leaves no ghost request in the queue", function()
        local t1 = b:call("LOCK.ACQUIRE", "s4", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "s4", "w", "PX", "60000", "WAIT", "60000")
        local w2 = c:start("LOCK.ACQUIRE", "s4", "w2", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        a:lose() -- the old session (and its request node) kept by the server
        W:run_until(function() return w.done end, 3000)
        assert.truthy(tryagain(w.result), tostring(w.result))
        W:advance(500)
        local holders, waiting = who(c, "s4")
        assert.same({ "h" }, holders)
        assert.same({ "w2" }, waiting, "a ghost waiter of the old session")
        assert.equal(1, b:call("LOCK.RELEASE", "s4", "h"))
        W:run_until(function() return w2.done end, 1000)
        integer(w2.result)
        assert.is_true(w2.result > t1)
    end)

    it("re-queues nothing of the old session: a later acquire by the same owner waits fresh, FIFO kept", function()
        b:call("LOCK.ACQUIRE", "s5", "h", "PX", "60000")
        local w = a:start("LOCK.ACQUIRE", "s5", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        local x = c:start("LOCK.ACQUIRE", "s5", "x", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        a:expire()
        W:run_until(function() return w.done end, 3000)
        assert.truthy(tryagain(w.result), tostring(w.result))
        local w3 = a:start("LOCK.ACQUIRE", "s5", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        assert.same({ "x", "w" }, select(2, who(c, "s5")))
        assert.equal(1, b:call("LOCK.RELEASE", "s5", "h"))
        W:run_until(function() return x.done end, 1000)
        integer(x.result)
        assert.is_falsy(w3.done)
        assert.equal(1, c:call("LOCK.RELEASE", "s5", "x"))
        W:run_until(function() return w3.done end, 1000)
        integer(w3.result)
        assert.is_true(w3.result > x.result)
    end)
end)

describe("the holder's sidecar expires with a waiter on another", function()
    it("grants the waiter about one round trip after the old nodes go, a greater token", function()
        local W, a, b = S.warm_world(2)
        local t1 = a:call("LOCK.ACQUIRE", "e1", "h", "PX", "60000")
        local w = b:start("LOCK.ACQUIRE", "e1", "w", "PX", "60000", "WAIT", "60000")
        W:advance(500) -- past the own-grace: b watches a's request
        local at = W.now
        a:expire()
        W:run_until(function() return w.done end, 2000)
        integer(w.result)
        assert.is_true(w.result > t1)
        assert.is_true(W.now - at <= 60, "granted " .. (W.now - at) .. " ms after the expiry")
        -- the old holder's sidecar: no stale record
        assert.equal(0, a:call("LOCK.RENEW", "e1", "h", "PX", "60000"))
        assert.equal(0, a:call("LOCK.RELEASE", "e1", "h"))
        assert.equal(null, a:call("LOCK.ACQUIRE", "e1", "h", "WAIT", "0"))
        assert.same({ "w" }, (who(a, "e1")))
    end)

    it("keeps a reader granted beside an expired writer's waiter out until both go (no two holders)", function()
        local W, a, b, c = S.warm_world(3)
        a:call("LOCK.ACQUIRE", "e2", "r1", "MODE", "PR", "PX", "60000")
        c:call("LOCK.ACQUIRE", "e2", "r2", "MODE", "PR", "PX", "60000")
        local w = b:start("LOCK.ACQUIRE", "e2", "w", "MODE", "EX", "PX", "60000", "WAIT", "60000")
        W:advance(500)
        a:expire()
        W:advance(500)
        assert.is_falsy(w.done, "EX granted beside r2's PR")
        assert.equal(1, c:call("LOCK.RELEASE", "e2", "r2"))
        W:run_until(function() return w.done end, 1000)
        integer(w.result)
    end)
end)
