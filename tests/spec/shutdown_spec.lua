-- SIGTERM (RELIABILITY.md item 12): new acquisitions refused, in-flight
-- work finishes, the session is closed, locks are released at once.
--
-- In the model the grace period begins with W:spawn(sc, sc.M.on_shutdown)
-- (lua_host_shutdown) and ends with sc:close() (zk_close: the session is
-- expired at once, later operations answer CLOSING).  The gateway's
-- refusal of new Lua commands during the grace (dispatch.c: every command
-- Lua answers gets -TRYAGAIN zkresp is shutting down, a LOCK.RELEASE
-- included: README "Signals") is C and not modelled here; what is tested
-- is the Lua side: commands already running when SIGTERM comes.

local S = require "world"
local null = S.null
local CLOSING = S.E("TRYAGAIN zkresp is shutting down")

local function integer(x, what) assert.equal("integer", math.type(x), what or S.show(x)) end

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do if m[i] == name then return m[i + 1] end end
end

-- LOCK.INFO's holders and waiters, as lists of owner names.
local function who(sc, key)
    local m = sc:call("LOCK.INFO", key).map
    local h, w = {}, {}
    for _, e in ipairs(m[2]) do h[#h + 1] = field(e, "owner") end
    for _, e in ipairs(m[4]) do w[#w + 1] = field(e, "owner") end
    return h, w
end

local function sigterm(W, sc)
    W:spawn(sc, sc.M.on_shutdown)
end

describe("SIGTERM's grace period: native lock waiters", function()
    local W, a, b, c
    before_each(function()
        W, a, b, c = S.warm_world(3)
    end)

    it("answers a queued waiter -TRYAGAIN at once and takes its request out before the close", function()
        integer(b:call("LOCK.ACQUIRE", "q1", "h", "PX", "60000"))
        local w = a:start("LOCK.ACQUIRE", "q1", "w", "PX", "60000", "WAIT", "60000")
        W:advance(1000) -- past the own-grace: a watches b's request
        assert.is_falsy(w.done)
        sigterm(W, a)
        W:advance(50)
        assert.is_true(w.done)
        assert.same(CLOSING, w.result)
        -- its request left the queue while the session still lives: a
        -- waiter queued behind it on c is not stuck behind a dead request
        local _, waiting = who(c, "q1")
        assert.same({}, waiting)
        assert.equal(1, b:call("LOCK.RELEASE", "q1", "h"))
        integer(c:call("LOCK.ACQUIRE", "q1", "x", "WAIT", "0"))
    end)

    it("answers a waiter whose grant was written before the wake with its token", function()
        integer(b:call("LOCK.ACQUIRE", "q2", "h", "PX", "60000"))
        local w = a:start("LOCK.ACQUIRE", "q2", "w", "PX", "60000", "WAIT", "60000")
        W:advance(1000)
        -- the release hands the lock to w in its multi; SIGTERM comes before
        -- a's waiter has read its table
        local r = b:start("LOCK.RELEASE", "q2", "h")
        W:run_until(function() return r.done end, 1000)
        assert.equal(1, r.result)
        sigterm(W, a)
        W:run_until(function() return w.done end, 1000)
        assert.is_true(w.done)
        if S.tryagain(w.result) then
            -- refused: then w must not hold it either
            local holders = who(c, "q2")
            assert.same({}, holders, "answered -TRYAGAIN but still holds it")
        else
            integer(w.result)
            assert.same({ "w" }, (who(c, "q2")))
        end
    end)

    it("ends a pending conversion with -TRYAGAIN, the old hold kept until the close", function()
        integer(a:call("LOCK.ACQUIRE", "q3", "o", "MODE", "PR", "PX", "60000"))
        integer(c:call("LOCK.ACQUIRE", "q3", "r", "MODE", "PR", "PX", "60000"))
        local cv = a:start("LOCK.CONVERT", "q3", "o", "MODE", "EX", "WAIT", "60000")
        W:advance(1000)
        assert.is_falsy(cv.done)
        sigterm(W, a)
        W:advance(50)
        assert.is_true(cv.done)
        assert.same(CLOSING, cv.result)
        local holders, waiting = who(c, "q3")
        table.sort(holders)
        assert.same({ "o", "r" }, holders)
        assert.same({}, waiting, "the conversion is still asked")
        a:close()
        W:advance(50)
        assert.same({ "r" }, (who(c, "q3")))
        integer(c:call("LOCK.CONVERT", "q3", "r", "MODE", "EX", "WAIT", "0"))
    end)

    it("answers at once a waiter behind a hold of its own sidecar, still in its own-grace", function()
        integer(a:call("LOCK.ACQUIRE", "q6", "h", "PX", "60000"))
        local w = a:start("LOCK.ACQUIRE", "q6", "w", "PX", "60000", "WAIT", "60000")
        W:advance(5)
        assert.is_falsy(w.done)
        sigterm(W, a)
        W:advance(20)
        assert.is_true(w.done)
        assert.same(CLOSING, w.result)
        assert.same({}, select(2, who(c, "q6")))
    end)

    it("answers at once a queued waiter held back by lock-delay (policy example)", function()
        local function ex() return { config = { policy = S.example("lock_delay") } } end
        W, a, b, c = S.world({ ex(), ex(), ex() })
        S.warm(W, a, b, c)
        integer(c:call("LOCK.ACQUIRE", "q7", "h", "PX", "600000"))
        local w = a:start("LOCK.ACQUIRE", "q7", "w", "PX", "60000", "WAIT", "60000")
        W:advance(1000)
        W:expire_session(c.sid) -- the holder vanished: w waits out the delay in its place
        W:advance(2000)
        assert.is_falsy(w.done)
        sigterm(W, a)
        W:advance(100)
        assert.is_true(w.done)
        assert.same(CLOSING, w.result)
    end)

    it("a command started after on_shutdown that would wait is answered at once", function()
        integer(b:call("LOCK.ACQUIRE", "q4", "h", "PX", "60000"))
        sigterm(W, a)
        W:advance(10)
        local w = a:start("LOCK.ACQUIRE", "q4", "w", "PX", "60000", "WAIT", "60000")
        W:advance(50)
        assert.is_true(w.done)
        assert.same(CLOSING, w.result)
        assert.same({}, select(2, who(c, "q4")))
    end)

    it("an acquisition that needs no wait still completes in the grace (in-flight work finishes)", function()
        sigterm(W, a)
        W:advance(10)
        integer(a:call("LOCK.ACQUIRE", "q5", "h", "PX", "60000"))
        assert.equal(1, a:call("LOCK.RENEW", "q5", "h", "PX", "60000"))
        assert.equal(1, a:call("LOCK.RELEASE", "q5", "h"))
        integer(c:call("LOCK.ACQUIRE", "q5", "x", "WAIT", "0"))
    end)
end)

describe("SIGTERM's close: other sidecars see the locks free at once", function()
    local W, a, b, c
    before_each(function()
        W, a, b, c = S.warm_world(3)
    end)

    it("grants a native waiter on another sidecar within about a round trip", function()
        integer(a:call("LOCK.ACQUIRE", "f1", "h", "PX", "600000"))
        local t1 = a:call("LOCK.ACQUIRE", "f2", "h", "MODE", "PR", "PX", "600000")
        integer(t1)
        local w1 = b:start("LOCK.ACQUIRE", "f1", "w", "PX", "60000", "WAIT", "60000")
        local w2 = c:start("LOCK.ACQUIRE", "f2", "w", "MODE", "EX", "PX", "60000", "WAIT", "60000")
        W:advance(2000)
        assert.is_falsy(w1.done)
        assert.is_falsy(w2.done)
        sigterm(W, a)
        W:advance(10)
        a:close()
        local closed = W.now
        W:run_until(function() return w1.done and w2.done end, 1000)
        assert.is_true(W.now - closed <= 100, "granted after " .. (W.now - closed) .. " ms")
        integer(w1.result)
        integer(w2.result)
        assert.is_true(w2.result > t1)
    end)

    it("frees a string lock (SET NX PX) for SET NX elsewhere at once", function()
        assert.same(S.OK, a:call("SET", "s1", "t", "NX", "PX", "600000"))
        sigterm(W, a)
        a:close()
        W:advance(10)
        assert.same(S.OK, b:call("SET", "s1", "t2", "NX", "PX", "30000"))
    end)

    it("leaves nothing of the closed session's locks in ZooKeeper (native lock node emptied)", function()
        integer(a:call("LOCK.ACQUIRE", "f3", "h", "PX", "600000"))
        a:call("SET", "s3", "t", "NX", "PX", "600000")
        sigterm(W, a)
        a:close()
        W:advance(100)
        assert.is_nil(W:node(a:path("s3")))
        local holders, waiting = who(b, "f3")
        assert.same({}, holders)
        assert.same({}, waiting)
    end)
end)

describe("SIGTERM and Redisson-style locks on another sidecar", function()
    local lockch = "redisson_lock__channel:{L}"
    local acquire = [[
        if redis.call('exists', KEYS[1]) == 0 then
            redis.call('hincrby', KEYS[1], ARGV[2], 1)
            redis.call('pexpire', KEYS[1], ARGV[1])
            return nil
        end
        return redis.call('pttl', KEYS[1])
    ]]

    it("frees the hash lock at the close at once", function()
        local W, a, b = S.warm_world(2)
        assert.equal(null, a:call("EVAL", acquire, "1", "{L}", "30000", "id:1"))
        integer(b:call("EVAL", acquire, "1", "{L}", "30000", "id:2"))
        sigterm(W, a)
        a:close()
        W:advance(10)
        assert.equal(null, b:call("EVAL", acquire, "1", "{L}", "30000", "id:2"))
    end)
end)
