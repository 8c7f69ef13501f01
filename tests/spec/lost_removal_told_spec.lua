-- The edges of telling a lost removal of our own key by the token its
-- multi wrote into the node's mark (resolve.lua): a token an earlier
-- removal left on the same mark, a second attempt's, a session given up
-- after the multi applied, a commit of deletes and writes, a DEL cut in
-- halves.

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
