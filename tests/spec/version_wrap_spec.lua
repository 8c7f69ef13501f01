-- ZooKeeper's node version is a Java int: one write short of 2^32 a node
-- is at -1, which a conditional set, delete or check takes for "any
-- version".  A set at -2 never gets there (the bridge's wrap_sets takes it
-- on to 0, as the model's bridge does), but a node bumped unconditionally
-- does: a session's marks (its own removals) and guard (other sidecars'
-- removals of its nodes), a pub/sub directory (each channel made).  Such a
-- node read at -1 is moved on to 0 before its version is used (Z.past_any).
--
-- The marks: a DELIFEQ delayed on its way would land on the node the
-- owner made since at the version it read: client 2's lock deleted, a
-- third client taking it.

local S = require "world"
local OK, null = S.OK, S.null

describe("a session's mark past ZooKeeper's version wrap", function()
    it("still keeps a delayed DELIFEQ off the node its owner made since", function()
        local W, a, b, c = S.world(3)
        local mark = b.K.mark_path(b.sid, b:path("lock"))
        -- b's own removals of nodes on this mark: 2^32 - 2 of them so far
        assert.same(OK, b:call("SET", "lock", "t0", "NX", "PX", "1000"))
        W.nodes[mark].stat.version = -2
        assert.equal(1, b:call("DELIFEQ", "lock", "t0")) -- one more (an unconditional bump)
        assert.same(OK, b:call("SET", "lock", "t1", "NX", "PX", "1000"))
        W:advance(500)
        a:fail_next({ op = "multi", pass = true, latency = 700 })
        local t = a:start("DELIFEQ", "lock", "t1")
        W:advance(10) -- a has read b's mark and t1, and sent its delete
        W:advance(600) -- b's expiry deletes t1 (its mark bumped)
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
        assert.equal(0, W:node(b:path("lock")).stat.version)
        W:run_until(function() return t.done end)
        assert.equal(0, t.result)
        assert.equal("t2", c:call("GET", "lock"))
        assert.equal(null, c:call("SET", "lock", "t3", "NX", "PX", "30000"))
    end)

    it("still keeps our owned-key cache off a node replaced while our guard sits at -1", function()
        local W, a, b = S.world(2)
        local gpath = a.K.guard_path(a.sid)
        W.nodes[gpath].stat.version = -3
        -- two removals of a's nodes by b bump a's guard, unconditionally: -2, -1
        for i = 1, 2 do
            assert.same(OK, a:call("SET", "g" .. i, "v", "PX", "60000"))
            assert.equal(1, b:call("DEL", "g" .. i))
        end
        W:advance(10)
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "60000"))
        -- b deletes a's lock (guard: -1 -> 0) and a's session makes it again
        -- at version 0 for another client (written behind a's cache's back)
        assert.equal(1, b:call("DEL", "lock"))
        W:raw_create(a:path("lock"), W.sidecars[1].require("codec").encode(
            { type = 0, ttl = 60000, nonce = string.rep("z", 16), payload = "t2" }), a.sid)
        -- a's cache still says t1 at version 0, checked against a guard "at -1"
        assert.equal(0, a:call("DELIFEQ", "lock", "t1"))
        assert.equal("t2", b:call("GET", "lock"))
    end)
end)

describe("a pub/sub directory past ZooKeeper's version wrap", function()
    it("is moved on to 0 before a publish's route checks it", function()
        local W, a, b = S.world(2)
        local dir = a.require("pubsub_nodes").dir("c")
        b:call_as(1, "SUBSCRIBE", "other") -- (the directory made)
        W.nodes[dir].stat.version = -1 -- (4294967295 channels made)
        assert.equal(0, a:call("PUBLISH", "quiet", "m"))
        assert.equal(0, W.nodes[dir].stat.version)
    end)

    it("as is a channel's node and the patterns' directory, bumped by each subscriber", function()
        local W, a, b = S.world(2)
        local PN = a.require("pubsub_nodes")
        b:call_as(1, "SUBSCRIBE", "busy")
        b:call_as(1, "PSUBSCRIBE", "b*")
        local ch, pats = PN.node("c", "busy"), PN.dir("p")
        W.nodes[ch].stat.version = -1
        W.nodes[pats].stat.version = -1
        assert.equal(2, a:call("PUBLISH", "busy", "m"))
        assert.equal(0, W.nodes[ch].stat.version)
        assert.equal(0, W.nodes[pats].stat.version)
    end)
end)
