-- G.applied learns a persistent mark's version from our own bump's answer,
-- for the reads sent after that answer, not after the multi was sent (as
-- it once did: "at = sent - 1").  A grouped multi is held by the bridge (group commit) and
-- a read sent after it may be answered first, so a read of the very node
-- that multi deletes passes for one made after the bump.  A script that
-- reads a key it does not declare (its queue is not held) while a DEL of
-- it through the same sidecar is on its way reads the old node; the DEL
-- applies and teaches the mark's new version; the key is made again (version
-- 0, the version read); the script's commit checks the key at 0 and the
-- mark at the version our bump left: both pass, and the script commits a
-- copy of a value deleted before it committed.
local S = require "world"
local OK = S.OK

describe("our own bump's answer", function()
    it("does not vouch for a read sent while that bump's multi was on its way", function()
        local W, a, b = S.world(2)
        -- copies the key named by ARGV[1] (undeclared) to KEYS[1], after reading KEYS[2]
        local copy = "local v = redis.call('get', ARGV[1]) redis.call('get', KEYS[2]) " ..
                     "redis.call('set', KEYS[1], v) return v"
        a:call("EVAL", copy, "2", "dst0", "slow", "nosuch")
        b:call("SET", "warm2", "x")
        W:advance(100) -- (the script cache's background publish is done)
        assert.same(OK, a:call("SET", "src", "old")) -- persistent, version 0
        -- "slow": a key a saw, absent now (so the script reads it, and reads nothing more)
        assert.same(OK, a:call("SET", "slow", "x"))
        assert.equal(1, b:call("DEL", "slow"))
        -- a's DEL of src: its multi (grouped) is held 50 ms; the watch event of
        -- its own bump comes before its answer (as ZooKeeper sends them)
        a:fail_next({ op = "multi", latency = 50, pass = true, hook = function() W:settle() end })
        local del = a:start("DEL", "src")
        W:advance(10) -- its multi is on its way
        a:fail_next({ op = "get", path = a:path("slow"), latency = 60, pass = true })
        local t = a:start("EVAL", copy, "2", "dst", "slow", "src")
        W:advance(5) -- the script read src ("old", version 0), and waits for "slow"
        W:run_until(function() return del.done end)
        assert.equal(1, del.result)
        assert.is_nil(W:node(a:path("src")))
        assert.is_nil(W:node(a:path("dst")))
        -- a client of b makes src again (version 0)
        assert.same(OK, b:call("SET", "src", "new", "NX"))
        W:run_until(function() return t.done end)
        a.faults = {}
        -- the script's read of src was of a node deleted before it committed:
        -- it must run again and copy "new"
        assert.equal("new", b:call("GET", "dst"))
        assert.equal("new", t.result)
    end)
end)
