-- A removal of our own key that applied but whose answer was lost.  The
-- resolve found the node gone and could not tell our delete from another
-- remover's (the key's deadline within a second, our guard moved), so the
-- command ran again, found nothing and answered 0 for a key it had deleted
-- (a release "not owned" that released).  The multi's bump of the node's
-- mark now writes a token of its own: the mark holding it proves the multi
-- applied, whole.

local S = require "world"
local OK = S.OK

local RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

local count = S.count_ops

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
end)
