-- A write whose reply was lost: resolve.lua looks for its nonce.  A node
-- carrying another's, or none at all, was taken for "did not apply" (a
-- create beaten by another's), and the command ran again.  But the write
-- may have applied, been seen and been removed since (and the key made
-- again): run again, an INCR counts twice and a SET NX takes again a lock
-- that every client saw deleted.  A removal since is told by the
-- persistent mark of a persistent node (moved past the version known as
-- the write was planned, when this sidecar knew it: read with a watch
-- whose event has not come) and, for a node of our session, by our guard
-- (another sidecar's removal bumps it).  A mark not known tells by when it
-- was last written: after the newest zxid the sidecar had seen as it
-- planned the write, maybe by a removal since (TRYAGAIN); before it, not
-- (the command runs again, the recipe's "not there: not ours").
local S = require "world"
local OK, null = S.OK, S.null

describe("a lost write", function()
    local W, a, b
    before_each(function()
        W, a, b = S.warm_world(2)
    end)

    -- a runs its command, whose write (op) applies or not (when) and loses
    -- its reply, its look slow; meanwhile b runs between()
    local function lost(op, when, between, ...)
        a:fail_next({ op = op, when = when, latency = 5 })
        a:fail_next({ op = "sync", pass = true, latency = 50 })
        local t = a:start(...)
        W:advance(20) -- the write's reply lost; the look on its way
        between()
        W:run_until(function() return t.done end)
        a.faults = {}
        return t.result
    end

    -- a knows the mark of key (read with a watch), bumped once before (by
    -- b's DEL)
    local function known_mark(key)
        assert.same(OK, b:call("SET", key, "0"))
        assert.equal(1, b:call("DEL", key))
        a:run(function() return a.require("guard").pmark_removal(a:path(key)) end)
        assert.is_not_nil(a:run(function() return a.require("guard").pmark_known(a:path(key)) end))
    end

    -- a's INCR of ctr applied, then b removed the counter (and set it again)
    local function incr_removed(again)
        local r = lost("create", "after", function()
            assert.equal("1", b:call("GET", "ctr"))
            assert.equal(1, b:call("DEL", "ctr")) -- (its mark bumped)
            if again then assert.same(OK, b:call("SET", "ctr", "5")) end
        end, "INCR", "ctr")
        assert.same(S.UNAVAILABLE, r)
        assert.equal(again and "5" or null, b:call("GET", "ctr"))
    end

    it("a create of a persistent key, removed and made again since, is not applied again", function()
        known_mark("ctr")
        incr_removed(true)
    end)

    it("a create of a persistent key, removed since, is not applied again", function()
        known_mark("ctr")
        incr_removed(false)
    end)

    -- b's counter, read by a: a's INCR of it applied in place, then b
    -- removed it
    local function incr_in_place_removed()
        assert.same(OK, b:call("SET", "ctr", "5"))
        assert.equal("5", a:call("GET", "ctr"))
        W:advance(100)
        local r = lost("multi", "after", function()
            assert.equal("6", b:call("GET", "ctr"))
            assert.equal(1, b:call("DEL", "ctr"))
        end, "INCR", "ctr")
        assert.same(S.UNAVAILABLE, r)
        assert.equal(null, b:call("GET", "ctr"))
    end

    it("an in-place write of a persistent key, removed since, is not applied again", function()
        incr_in_place_removed()
    end)

    -- (a helper's review: its multi checked the mark at the version a knew
    -- from its own bump, which a create would not count)
    it("the same with the mark known from a's own bump only", function()
        assert.same(OK, a:call("SET", "ctr", "1"))
        assert.equal(1, a:call("DEL", "ctr")) -- (a's own bump: its watch spent)
        assert.is_nil(a:run(function() return a.require("guard").pmark_known(a:path("ctr")) end))
        incr_in_place_removed()
    end)

    it("a create of a key with a TTL, removed by another sidecar since, is not made again", function()
        local r = lost("create", "after", function()
            assert.equal("v", b:call("GET", "ek"))
            assert.equal(1, b:call("DEL", "ek")) -- (a's guard bumped)
        end, "SET", "ek", "v", "NX", "PX", "60000")
        assert.same(S.UNAVAILABLE, r)
        assert.equal(null, b:call("GET", "ek"))
    end)

    it("a create that did not apply, beaten by another's, runs again (the mark did not move)", function()
        known_mark("ctr")
        local r = lost("create", "before", function()
            assert.same(OK, b:call("SET", "ctr", "5"))
        end, "INCR", "ctr")
        assert.equal(6, r)
        assert.equal("6", b:call("GET", "ctr"))
    end)

    -- (a helper's review: these answered TRYAGAIN, the mark bumped before
    -- the command and not known to a, or known from its own bump only; a
    -- has seen a newer zxid since: its own write of another key in place,
    -- whose answer carries a stat, as a grouped create's does not)
    local function seen_newer()
        assert.same(OK, a:call("SET", "other", "1"))
        assert.same(OK, a:call("SET", "other", "2"))
    end

    it("a create that did not apply runs again, the key's mark not known", function()
        assert.same(OK, b:call("SET", "lock", "x", "NX"))
        assert.equal(1, b:call("DEL", "lock")) -- (a release through b, long before)
        W:advance(1000)
        seen_newer()
        assert.same(OK, lost("create", "before", function() end, "SET", "lock", "mine", "NX"))
        assert.equal("mine", b:call("GET", "lock"))
        assert.same(OK, a:call("SET", "ctr", "1"))
        assert.equal(1, a:call("DEL", "ctr")) -- (a's own bump: its watch spent)
        assert.same(OK, b:call("SET", "ctr", "1"))
        assert.equal(1, b:call("DEL", "ctr")) -- (b's bump, not told to a)
        W:advance(1000)
        seen_newer()
        assert.equal(1, lost("create", "before", function() end, "INCR", "ctr"))
        assert.equal("1", b:call("GET", "ctr"))
    end)

    -- a never read the mark of ctr: its INCR applied, then b removed the
    -- counter (and set it again)
    it("a create of a persistent key whose mark a does not know, removed since, is not applied again", function()
        for _, again in ipairs({ true, false }) do
            assert.same(OK, a:call("SET", "other", "1"))
            assert.is_nil(a:run(function() return a.require("guard").pmark_known(a:path("ctr")) end))
            incr_removed(again)
            if again then assert.equal(1, b:call("DEL", "ctr")) end
        end
    end)

    -- The price: a removal of another key on the same mark after the
    -- newest zxid a had seen is not told from one of a's node.
    it("a create that did not apply, its mark not known and written since a's newest zxid, answers TRYAGAIN", function()
        assert.same(OK, a:call("SET", "other", "1"))
        assert.same(OK, b:call("SET", "ctr", "1"))
        assert.equal(1, b:call("DEL", "ctr")) -- (after a's newest zxid)
        assert.same(S.UNAVAILABLE, lost("create", "before", function() end, "INCR", "ctr"))
        assert.equal(null, b:call("GET", "ctr"))
        assert.equal(1, a:call("INCR", "ctr"))
    end)

    -- A key with a TTL is a node of a's session: another sidecar's removal
    -- of one bumps a's guard and the node's mark (one of G.MARKS).

    -- a key of a's on another mark than key's, or on the same one
    local function other_key(key, same)
        for i = 1, 2000 do
            local o = "o" .. i
            if (a.K.mark_path(a.sid, a:path(o)) == a.K.mark_path(a.sid, a:path(key))) == same then return o end
        end
    end

    it("a create of a key with a TTL that did not apply runs again after a removal of another key of a's", function()
        local o = other_key("ek3", false)
        assert.same(OK, a:call("SET", o, "v", "PX", "60000"))
        assert.same(OK, lost("create", "before", function()
            assert.equal(1, b:call("DEL", o)) -- (a's guard bumped, not ek3's mark)
        end, "SET", "ek3", "mine", "NX", "PX", "60000"))
        assert.equal("mine", b:call("GET", "ek3"))
        -- beaten by b's, made after that removal: runs again on it
        assert.same(OK, a:call("SET", o, "v", "PX", "60000"))
        assert.equal(null, lost("create", "before", function()
            assert.equal(1, b:call("DEL", o))
            assert.same(OK, b:call("SET", "ek4", "b's", "NX", "PX", "60000"))
        end, "SET", "ek4", "mine", "NX", "PX", "60000"))
        assert.equal("b's", b:call("GET", "ek4"))
    end)

    -- The price: a removal of another key of a's on the same mark since is
    -- not told from one of ek5's node.
    it("a create of a key with a TTL that did not apply answers TRYAGAIN after a removal on its mark", function()
        local o = other_key("ek5", true)
        assert.same(OK, a:call("SET", o, "v", "PX", "60000"))
        assert.same(S.UNAVAILABLE, lost("create", "before", function()
            assert.equal(1, b:call("DEL", o))
        end, "SET", "ek5", "mine", "NX", "PX", "60000"))
        assert.equal(null, b:call("GET", "ek5"))
    end)

    -- (a helper's review: a script naming a key it did not declare held no
    -- queue of it, so its DEL of the lock, a removal of a's own that moves
    -- no guard, ran while the lost SET was resolved, and the SET ran again)
    it("a script's removal of a key it did not declare waits for a lost write of that key", function()
        local release = "if redis.call('GET', ARGV[1]) == ARGV[2] then return redis.call('DEL', ARGV[1]) end return 0"
        a:fail_next({ op = "create", when = "after", latency = 5 })
        a:fail_next({ op = "sync", pass = true, latency = 50 })
        local set = a:start("SET", "lk", "mine", "NX", "PX", "60000")
        W:advance(20) -- applied, its reply lost; the look on its way
        assert.equal("mine", b:call("GET", "lk"))
        local del = a:start("EVAL", release, "0", "lk", "mine")
        W:run_until(function() return set.done and del.done end)
        a.faults = {}
        assert.same(OK, set.result)
        assert.equal(1, del.result)
        assert.equal(null, b:call("GET", "lk"))
    end)

    it("a create that did not apply, nothing removed since, runs again", function()
        assert.equal(1, lost("create", "before", function() end, "INCR", "fresh"))
        assert.same(OK, lost("create", "before", function() end, "SET", "ek2", "v", "NX", "PX", "60000"))
        assert.equal("v", b:call("GET", "ek2"))
        assert.equal(6, lost("create", "before", function()
            assert.same(OK, b:call("SET", "fresh2", "5"))
        end, "INCR", "fresh2")) -- (on a mark never made)
    end)
end)
