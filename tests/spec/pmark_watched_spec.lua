-- A lost write of a key without a TTL is told removed since by its
-- persistent mark's version as this sidecar knew it when planning the
-- write (resolve.lua), which counts only while a watch vouches for it.  A
-- helper's review found two ways an entry was kept as watched with no
-- watch armed: learn_pmarks reads several marks at once and wrote their
-- entries only once all had answered (an event between the two was lost),
-- and a mark it moved past -1 itself (ZooKeeper's version wrap) fired the
-- watch it had just set.  A stale version passed for current, and a lost
-- create on that mark that did not apply answered TRYAGAIN.
local S = require "world"
local OK = S.OK

describe("a persistent mark known to a sidecar", function()
    local W, a, b
    before_each(function()
        W, a, b = S.warm_world(2)
    end)

    local function G() return a.require("guard") end
    local function known(key) return a:run(function() return G().pmark_known(a:path(key)) end) end
    local function mark(key) return a:run(function() return G().pmark_path(a:path(key)) end) end

    -- a's DEL of two keys on different marks learns both; the second read
    -- is slow, and b bumps the first meanwhile; answers that key
    local function raced()
        local k1, k2 = "k1", nil
        for i = 2, 6 do
            if mark("k" .. i) ~= mark(k1) then k2 = "k" .. i break end
        end
        for _, k in ipairs({ k1, k2 }) do
            assert.same(OK, b:call("SET", k, "0"))
            assert.equal(1, b:call("DEL", k)) -- (its mark made)
            assert.same(OK, b:call("SET", k, "1"))
        end
        W:advance(100)
        a:fail_next({ op = "exists", path = mark(k2), pass = true, latency = 50 })
        local t = a:start("DEL", k1, k2)
        W:advance(5) -- a's read of k1's mark answered, k2's still out
        assert.equal(1, b:call("DEL", k1)) -- (bumps k1's mark: a's watch fires)
        W:run_until(function() return t.done end)
        W:advance(1000)
        return k1
    end

    it("is not kept as watched when its event came while another read was out", function()
        local k1 = raced()
        local v = known(k1)
        if v ~= nil then assert.equal(W:node(mark(k1)).stat.version, v) end
    end)

    it("after that race, a lost create on it that did not apply runs again", function()
        local k1 = raced()
        a:fail_next({ op = "create", when = "before", latency = 5 })
        a:fail_next({ op = "sync", pass = true, latency = 50 })
        assert.same(OK, a:call("SET", k1, "mine", "NX"))
        a.faults = {}
        assert.equal("mine", b:call("GET", k1))
    end)

    it("is not kept as watched when moving it past -1 spent its watch", function()
        local m = mark("lock")
        assert.same(OK, b:call("SET", "lock", "0"))
        assert.equal(1, b:call("DEL", "lock")) -- (the mark made)
        W.nodes[m].stat.version = -1 -- 2^32 - 1 removals on it so far
        a:run(function() return G().pmark_removal(a:path("lock")) end) -- (a learns it)
        local v = known("lock")
        if v ~= nil then assert.equal(W:node(m).stat.version, v) end
        assert.same(OK, b:call("SET", "lock", "x"))
        assert.equal(1, b:call("DEL", "lock")) -- (not told to a if its watch is spent)
        W:advance(1000)
        v = known("lock")
        if v ~= nil then assert.equal(W:node(m).stat.version, v) end
    end)
end)
