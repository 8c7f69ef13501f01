-- The edges of telling a lost removal of our own key by the token its
-- multi wrote into the node's mark (resolve.lua): a token an earlier
-- removal left on the same mark, a second attempt's, a session given up
-- after the multi applied, a commit of deletes and writes, a DEL cut in
-- halves; and a conversion granted by its own lost write, recorded by the
-- give-up, then released, or released meanwhile through another sidecar.

local S = require "world"
local OK = S.OK

local count = S.count_ops

-- Another key whose node hashes to the same mark of a's as key's.
local function same_mark(a, key)
    local m = a.K.mark_path(a.sid, a:path(key))
    for i = 1, 10000 do
        local o = "o" .. i
        if a.K.mark_path(a.sid, a:path(o)) == m then return o end
    end
end

describe("a lost removal of our own key (the token in its mark)", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
        a:call("SET", "warmup", "x")
    end)

    it("is not claimed by the nonce an earlier removal on the same mark wrote", function()
        local o = same_mark(a, "k")
        assert.same(OK, a:call("SET", "k", "v", "PX", "1500"))
        assert.same(OK, a:call("SET", o, "v", "PX", "30000"))
        assert.equal(1, a:call("DEL", o)) -- applied: the mark holds its nonce
        W:advance(800)
        a:fail_next({ op = "multi", when = "before" })
        local before = #W.ops
        assert.equal(1, a:call("DEL", "k"))
        assert.equal(2, count(W, "multi", before)) -- (ran again)
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a second attempt's applied multi is told by its own nonce", function()
        assert.same(OK, a:call("SET", "k", "v", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "before" })
        a:fail_next({ op = "multi", when = "after" })
        local before = #W.ops
        assert.equal(1, a:call("DEL", "k"))
        assert.equal(2, count(W, "multi", before))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a release applied under a session given up meanwhile answers 1, once", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        a:fail_next({ op = "multi", when = "after", hook = function() a:lose() end })
        assert.equal(1, a:call("DELIFEQ", "lock", "t1"))
        assert.is_nil(W:node(a:path("lock")))
        assert.equal(0, a:call("DELIFEQ", "lock", "t1"))
    end)

    it("an EXEC of deletes and a write, lost after it applied, answers what it did", function()
        assert.same(OK, a:call("SET", "k", "v", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "after" })
        local r = a:call("EVAL", "redis.call('del', KEYS[1]) return redis.call('set', KEYS[2], 'n')", "2", "k", "n")
        assert.same(OK, r)
        assert.is_nil(W:node(a:path("k")))
        assert.equal("n", b:call("GET", "n"))
    end)

    it("a DEL cut in halves (request limit): each half is told by its own marks", function()
        local W2, c = S.world({ { config = { zk_max_request = 12000 } } })
        c:call("SET", "warmup", "x")
        local keys = {}
        for i = 1, 260 do
            keys[i] = "k" .. i
            assert.same(OK, c:call("SET", keys[i], "v", "PX", "1500"))
        end
        W2:advance(800)
        c:fail_next({ op = "multi", when = "after", skip = 1 }) -- the second multi: applied, lost
        local args = { "DEL" }
        for i = 1, #keys do args[#args + 1] = keys[i] end
        local before = #W2.ops
        assert.equal(#keys, c:call(table.unpack(args)))
        for i = 1, #keys do assert.is_nil(W2:node(c:path(keys[i]))) end
        assert.equal(0, #(W2.refused or {}))
    end)
end)

describe("a conversion granted by a lost write, recorded by the give-up", function()
    it("its hold's release still lets the next waiter in, with no clash", function()
        local W, a, b, c = S.world(3)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cv", "x", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cv", "y", "MODE", "PR", "PX", "600000")))
        local cv = a:start("LOCK.CONVERT", "cv", "x", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        a:fail_next({ op = "multi", when = "after", hook = function() a:disconnect() end })
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "y"))
        W:run_until(function() return cv.done end)
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
        local W, a, b = S.world(2)
        assert.equal("integer", math.type(a:call("LOCK.ACQUIRE", "cv", "x", "MODE", "PR", "PX", "600000")))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cv", "y", "MODE", "PR", "PX", "600000")))
        local cv = a:start("LOCK.CONVERT", "cv", "x", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        a:fail_next({ op = "multi", when = "after", hook = function() a:disconnect() end })
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "y"))
        W:run_until(function() return cv.done end)
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "x")) -- through b, while a is cut off
        W:advance(900)
        a:reconnect()
        W:advance(2000)
        for _, h in pairs(a.LK.holds) do assert.equal("PR", h.mode) end
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "cv", "w", "MODE", "EX", "WAIT", "0")))
    end)
end)
