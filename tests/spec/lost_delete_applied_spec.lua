-- A removal of our own key that applied but whose answer was lost.  The
-- resolve found the node gone and could not tell our delete from another
-- remover's (the key's deadline within a second, our guard moved), so the
-- command ran again, found nothing and answered 0 for a key it had deleted
-- (a release "not owned" that released).  The multi's bump of the node's
-- mark now writes a token of its own: the mark holding it proves the multi
-- applied, whole.  Its edges: a token an earlier removal left on the same
-- mark, a second attempt's, a session given up after the multi applied, a
-- commit of deletes and writes, a DEL cut in halves.

local S = require "world"
local OK = S.OK

local RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

local count = S.count_ops

-- Another key whose node hashes to the same mark of a's as key's.
local function same_mark(a, key)
    local m = a.K.mark_path(a.sid, a:path(key))
    for i = 1, 10000 do
        local o = "o" .. i
        if a.K.mark_path(a.sid, a:path(o)) == m then return o end
    end
end

describe("a lost removal of our own key that applied", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
        a:call("SET", "warmup", "x")
    end)

    it("answers 1 when the key's deadline is within a second", function()
        assert.same(OK, a:call("SET", "k", "v", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "after" })
        local before = #W.ops
        assert.equal(1, a:call("DEL", "k"))
        assert.equal(1, count(W, "multi", before)) -- (not run again)
        assert.is_nil(W:node(a:path("k")))
        assert.equal(0, a:call("DEL", "k"))
    end)

    it("answers 2 for two keys whose deadlines are within a second", function()
        assert.same(OK, a:call("SET", "k1", "v", "PX", "1500"))
        assert.same(OK, a:call("SET", "k2", "v", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "after" })
        assert.equal(2, a:call("DEL", "k1", "k2"))
        assert.is_nil(W:node(a:path("k1")))
        assert.is_nil(W:node(a:path("k2")))
    end)

    it("a compare-and-delete release near its deadline answers 1", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "after" })
        assert.equal(1, a:call("EVAL", RELEASE, "1", "lock", "t1"))
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("answers 1 when another sidecar removed another key of ours before the look", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        assert.same(OK, a:call("SET", "other", "x", "PX", "30000"))
        a:fail_next({ op = "multi", when = "after", hook = function()
            -- applied; then another sidecar removes a node of a's, which
            -- moves a's guard, before a looks
            W:raw_delete(a:path("other"))
            W:raw_set(a.K.guard.path, "")
        end })
        assert.equal(1, a:call("DEL", "lock"))
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("a removal that did not apply still runs again", function()
        assert.same(OK, a:call("SET", "k", "v", "PX", "1500"))
        W:advance(800)
        a:fail_next({ op = "multi", when = "before" })
        local before = #W.ops
        assert.equal(1, a:call("DEL", "k"))
        assert.equal(2, count(W, "multi", before))
        assert.is_nil(W:node(a:path("k")))
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

-- delete_parts (keyspace.lua) cuts a DEL into multis that leave
-- K.DELETE_RESERVE bytes for the guard ops: our guard's check and a bump of
-- each of our marks.  Bumps writing a whole 16-byte nonce took 64 of them
-- past 4096 bytes, so a DEL of many of our own keys planned as one multi
-- was cut in halves; our own bumps write a short token (Z.own_nonce).
describe("a DEL of many of our own keys near the request limit", function()
    it("goes out as the multis delete_parts planned (its guard ops fit the reserve)", function()
        local W, a = S.world({ { config = { zk_max_request = 12000 } } })
        a:call("SET", "warmup", "x")
        local args = { "DEL" }
        for i = 1, 255 do
            assert.same(OK, a:call("SET", "k" .. i, "v", "PX", "600000"))
            args[#args + 1] = "k" .. i
        end
        local G = a.require("guard")
        local plain, planned = G.ops, 0
        G.ops = function(...) planned = planned + 1 return plain(...) end
        local before = #W.ops
        assert.equal(255, a:call(table.unpack(args)))
        G.ops = plain
        local sent = 0
        for i = before + 1, #W.ops do if W.ops[i].kind == "multi" then sent = sent + 1 end end
        assert.equal(sent, planned) -- (a part cut in halves plans once more than it sends)
    end)
end)
