-- A create of a persistent key (no TTL) whose reply was lost: resolve.lua
-- looks for its nonce, and a node at version 0 carrying another's was taken
-- for the create that beat ours.  But ours may have applied and been
-- removed since, and that node made after it: then running the command
-- again applies it twice (an INCR counted twice).  A removal of a
-- persistent node bumps its persistent mark, so a mark that did not move
-- since the create was planned tells the two apart.
local S = require "world"
local OK = S.OK

describe("a lost create of a persistent key", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
        S.warm(W, a, b)
    end)

    -- a knows the mark of key, bumped once before (by b's DEL)
    local function known_mark(key)
        assert.same(OK, b:call("SET", key, "0"))
        assert.equal(1, b:call("DEL", key))
        a:run(function() return a.require("guard").pmark_removal(a:path(key)) end)
        assert.is_not_nil(a:run(function() return a.require("guard").pmark_known(a:path(key)) end))
    end

    -- a's INCR of key, whose create's reply is lost (applied or not, by
    -- when), while its look at the node afterwards is slow: between the
    -- two, b runs `between`
    local function incr_lost(key, when, between)
        a:fail_next({ op = "create", when = when, latency = 5 })
        a:fail_next({ op = "sync", pass = true, latency = 50 })
        local t = a:start("INCR", key)
        W:advance(20) -- the create's reply lost; the look on its way
        between()
        W:run_until(function() return t.done end)
        a.faults = {}
        return t.result
    end

    -- a's INCR applied and its counter removed and set again by b: not
    -- counted again on b's
    local function not_counted_twice()
        local r = incr_lost("ctr", "after", function()
            assert.equal(1, b:call("DEL", "ctr"))
            assert.same(OK, b:call("SET", "ctr", "5"))
        end)
        assert.equal("5", b:call("GET", "ctr"))
        assert.same(S.E("TRYAGAIN ZooKeeper unavailable"), r)
    end

    it("that applied and was removed since is not applied again to the key made after it", function()
        known_mark("ctr")
        not_counted_twice()
    end)

    it("with its mark not known, bumped before, is not applied again either", function()
        assert.same(OK, b:call("SET", "ctr", "0"))
        assert.equal(1, b:call("DEL", "ctr")) -- (the mark bumped, a not told)
        not_counted_twice()
    end)

    it("that did not apply, beaten by another's create, runs again (its mark did not move)", function()
        known_mark("ctr")
        local r = incr_lost("ctr", "before", function()
            assert.same(OK, b:call("SET", "ctr", "5"))
        end)
        assert.equal(6, r)
        assert.equal("6", b:call("GET", "ctr"))
    end)

    it("that did not apply, on a mark never made, runs again", function()
        local r = incr_lost("fresh", "before", function()
            assert.same(OK, b:call("SET", "fresh", "5"))
        end)
        assert.equal(6, r)
        assert.equal("6", b:call("GET", "fresh"))
    end)
end)
