-- CLIENT UNBLOCK of a waiting LOCK.ACQUIRE / LOCK.CONVERT (the model's
-- Sidecar:unblock, as lua_host_unblock): the wait ends as its WAIT running
-- out would (null, out of the queue, a conversion's old mode kept) or with
-- Redis's -UNBLOCKED, at once, and only a blocked command is unblocked.

local S = require "world"
local null = S.null
local UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"

local function entries(sc, key, which)
    local out = {}
    for _, e in ipairs(sc:call("LOCK.INFO", key).map[which]) do
        local m, f = e.map, {}
        for i = 1, #m, 2 do f[m[i]] = m[i + 1] end
        out[#out + 1] = f
    end
    return out
end
local function holders(sc, key) return entries(sc, key, 2) end
local function waiters(sc, key) return entries(sc, key, 4) end

describe("CLIENT UNBLOCK of a native lock's waiter", function()
    local W, a, b, c
    before_each(function() W, a, b, c = S.world(3) end)
    local function run() W:advance(50) end

    it("ends a waiting acquire as its WAIT would (null) or with -UNBLOCKED, out of the queue", function()
        local t = a:call("LOCK.ACQUIRE", "u1", "h")
        local w1 = b:start("LOCK.ACQUIRE", "u1", "w1", "WAIT", "600000")
        local w2 = c:start("LOCK.ACQUIRE", "u1", "w2", "WAIT", "600000")
        local w3 = b:start("LOCK.ACQUIRE", "u1", "w3", "WAIT", "600000")
        run()
        assert.equal(3, #waiters(a, "u1"))
        assert.equal(1, b:unblock(w1, "timeout"))
        assert.equal(1, c:unblock(w2, "error"))
        run()
        assert.is_true(w1.done)
        assert.equal(null, w1.result)
        assert.is_true(w2.done)
        assert.equal(UNBLOCKED, w2.result.err)
        -- unblocked once: not again
        assert.equal(0, b:unblock(w1, "timeout"))
        assert.equal(0, c:unblock(w2, "error"))
        local ws = waiters(a, "u1")
        assert.equal(1, #ws)
        assert.equal("w3", ws[1].owner)
        assert.equal(1, a:call("LOCK.RELEASE", "u1", "h"))
        run()
        assert.is_true(w3.done)
        assert.is_true(w3.result > t)
    end)

    it("answers 0 for a command that never waited", function()
        local t = a:start("LOCK.ACQUIRE", "u2", "h", "WAIT", "600000")
        run()
        assert.is_true(t.done)
        assert.equal(0, a:unblock(t, "error"))
        assert.equal("integer", math.type(t.result))
        local try = b:start("LOCK.ACQUIRE", "u2", "x", "WAIT", "0")
        assert.equal(0, b:unblock(try, "timeout")) -- (not yet waiting)
        run()
        assert.equal(null, try.result)
    end)

    it("keeps a conversion's old mode when it is unblocked", function()
        local t = a:call("LOCK.ACQUIRE", "u3", "x", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "u3", "y", "MODE", "PR")
        local up = a:start("LOCK.CONVERT", "u3", "x", "MODE", "EX", "WAIT", "600000")
        run()
        assert.equal("conversion", waiters(a, "u3")[1].kind)
        assert.equal(1, a:unblock(up, "error"))
        run()
        assert.is_true(up.done)
        assert.equal(UNBLOCKED, up.result.err)
        assert.equal(0, #waiters(c, "u3"))
        local hs = holders(c, "u3")
        assert.equal(2, #hs)
        assert.equal("PR", hs[1].mode)
        assert.equal(t, hs[1].token)
        assert.equal("PR", hs[2].mode)
    end)

    -- A release through another sidecar grants the waiter while the
    -- unblock comes (during the waiter's read of its grant): CLIENT UNBLOCK
    -- answered 1, so the client hears null and the grant is let go.
    it("lets go of a grant that lands as the unblock comes", function()
        a:call("LOCK.ACQUIRE", "u4", "h", "PX", "600000")
        local w = b:start("LOCK.ACQUIRE", "u4", "w", "PX", "600000", "WAIT", "600000")
        local n = c:start("LOCK.ACQUIRE", "u4", "n", "WAIT", "600000")
        run()
        local answered
        b:fail_next({ op = "get", path = b.LK.lock_path("u4"), pass = true,
                      hook = function() answered = b:unblock(w, "timeout") end })
        assert.equal(1, a:call("LOCK.RELEASE", "u4", "h"))
        W:advance(1000)
        assert.equal(1, answered)
        assert.is_true(w.done)
        assert.equal(null, w.result)
        assert.is_true(n.done)
        assert.equal("integer", math.type(n.result))
        local hs = holders(a, "u4")
        assert.equal(1, #hs)
        assert.equal("n", hs[1].owner)
    end)

    it("ends the wait of a waiter that looks again now and then (behind a compatible one)", function()
        a:call("LOCK.ACQUIRE", "u5", "h")
        local w = b:start("LOCK.ACQUIRE", "u5", "w", "MODE", "PR", "WAIT", "600000")
        local r = c:start("LOCK.ACQUIRE", "u5", "r", "MODE", "PR", "WAIT", "600000")
        run()
        assert.equal(1, c:unblock(r, "timeout"))
        assert.equal(1, b:unblock(w, "timeout"))
        run()
        assert.equal(null, r.result)
        assert.equal(null, w.result)
        assert.equal(0, #waiters(a, "u5"))
    end)

    -- x's up-conversion waits for y's PR.  y is released through another
    -- sidecar (a plain delete: a release grants no pending conversion), the
    -- conversion wakes and reads the table; CLIENT UNBLOCK comes during that
    -- read and answers 1: the conversion, which may now grant itself, does
    -- not (a write after the unblock answered): null, PR kept.
    it("does not let an unblocked conversion grant itself afterwards", function()
        local t = a:call("LOCK.ACQUIRE", "r1", "x", "MODE", "PR", "PX", "600000")
        b:call("LOCK.ACQUIRE", "r1", "y", "MODE", "PR", "PX", "600000")
        local up = a:start("LOCK.CONVERT", "r1", "x", "MODE", "EX", "WAIT", "600000")
        run()
        assert.equal("conversion", waiters(c, "r1")[1].kind)
        local answered
        a:fail_next({ op = "get", path = a.LK.lock_path("r1"), pass = true,
                      hook = function() answered = a:unblock(up, "timeout") end })
        assert.equal(1, c:call("LOCK.RELEASE", "r1", "y"))
        W:advance(1000)
        assert.equal(1, answered)           -- CLIENT UNBLOCK said: it was blocked
        assert.is_true(up.done)
        assert.equal(null, up.result)
        local hs = holders(c, "r1")
        assert.equal(1, #hs)
        assert.equal("PR", hs[1].mode)
        assert.equal(t, hs[1].token)
    end)

    -- w waits behind h, a request of its own sidecar: its first wait sets
    -- no watch and looks again after LW.OWN_GRACE_MS; the second wait reads
    -- h's node with a watch (zk.get) before it suspends.  CLIENT UNBLOCK
    -- comes while that read is out and answers 1 (the first wait's
    -- host.block() stands): the wait ends as the read is answered, not
    -- after its whole WAIT (600 s here).
    it("ends a wait unblocked while the wait reads its watch", function()
        a:call("LOCK.ACQUIRE", "r2", "h", "PX", "600000")
        local lock = a.LK.lock_path("r2")
        local names = W:children(lock)
        assert.equal(1, #names)
        local w = a:start("LOCK.ACQUIRE", "r2", "w", "PX", "600000", "WAIT", "600000")
        run()
        assert.is_false(w.done == true)
        local answered
        a:fail_next({ op = "get", path = lock .. "/" .. names[1], pass = true,
                      hook = function() answered = a:unblock(w, "timeout") end })
        W:advance(2000) -- past the grace: the second wait, its read, the unblock
        assert.equal(1, answered)
        assert.is_true(w.done == true)
        assert.equal(null, w.result)
        assert.equal(0, #waiters(b, "r2"))
    end)
    -- The conversion, woken by y's release, writes its own grant; CLIENT
    -- UNBLOCK comes while that write is out: its wait is over, so the
    -- unblock answers 0 and the conversion its token.
    it("answers 0 for a conversion writing its own grant, which stands", function()
        a:call("LOCK.ACQUIRE", "u9", "x", "MODE", "PR", "PX", "600000")
        b:call("LOCK.ACQUIRE", "u9", "y", "MODE", "PR", "PX", "600000")
        local up = a:start("LOCK.CONVERT", "u9", "x", "MODE", "EX", "WAIT", "600000")
        run()
        assert.equal("conversion", waiters(c, "u9")[1].kind)
        local answered
        a:fail_next({ op = "multi", pass = true,
                      hook = function() answered = a:unblock(up, "error") end })
        assert.equal(1, c:call("LOCK.RELEASE", "u9", "y"))
        W:advance(1000)
        assert.is_true(up.done)
        assert.equal(0, answered)
        assert.equal("integer", math.type(up.result))
        assert.equal("EX", holders(c, "u9")[1].mode)
    end)

    it("answers 0 for an acquire writing its own grant, which stands", function()
        b:call("LOCK.ACQUIRE", "u8", "h", "PX", "600000")
        local w = a:start("LOCK.ACQUIRE", "u8", "w", "PX", "600000", "WAIT", "600000")
        run()
        assert.equal(1, #waiters(c, "u8"))
        local answered
        a:fail_next({ op = "set", path = a.LK.lock_path("u8"), pass = true,
                      hook = function() answered = a:unblock(w, "timeout") end })
        assert.equal(1, c:call("LOCK.RELEASE", "u8", "h"))
        W:advance(1000)
        assert.is_true(w.done)
        assert.equal(0, answered)
        assert.equal("integer", math.type(w.result))
        assert.equal("w", holders(c, "u8")[1].owner)
    end)
    -- The watch event of h's release and CLIENT UNBLOCK in one instant:
    -- the wait ends once (C: whichever comes second finds it ready).
    it("ends a wait once when the unblock comes with its watch event", function()
        a:call("LOCK.ACQUIRE", "u7", "h", "PX", "600000")
        local w = b:start("LOCK.ACQUIRE", "u7", "w", "PX", "600000", "WAIT", "600000")
        W:advance(2000)
        assert.is_falsy(w.done)
        local answered
        a:fail_next({ op = "delete", pass = true, hook = function() answered = b:unblock(w, "timeout") end })
        assert.equal(1, a:call("LOCK.RELEASE", "u7", "h"))
        W:advance(2000)
        assert.equal(1, answered)
        assert.is_true(w.done)
        assert.equal(null, w.result)
        assert.equal(0, #waiters(c, "u7"))
        assert.equal(0, #holders(c, "u7"))
    end)
end)
