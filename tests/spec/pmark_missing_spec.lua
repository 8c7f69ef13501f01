-- A persistent mark gone when a removal checks it fails that removal's
-- multi with NONODE, which is not the node gone: the removal makes the
-- mark again (G.note) and looks again.
--
-- settle_later (resolve.lua) deletes a lock without a TTL whose create's
-- reply was lost and could not be looked at (the client was answered
-- TRYAGAIN, so it holds nothing).  Its delete now goes with its persistent
-- mark's check and bump; a mark found missing fails that multi with
-- NONODE, which settle_later took for "the node is gone" and stopped
-- looking: the lock stayed held for ever (no TTL), by nobody.
local S = require "world"
local OK, UNAVAILABLE = S.OK, S.UNAVAILABLE

describe("settling a lost create of a lock without a TTL", function()
    it("still deletes it when the mark was gone at its delete", function()
        local W, a, b = S.warm_world(2)
        local lock = a:path("lock")
        local mark = a.require("guard").pmark_path(lock)
        -- the create applies, its reply is lost, and the connection stays away
        a:fail_next({ op = "create", path = lock, when = "after", hook = function() a.connected = false end })
        local r = a:call("SET", "lock", "t1", "NX")
        assert.same(UNAVAILABLE, r)
        assert.is_not_nil(W:node(lock))
        -- back; settle_later looks: the mark goes (by hand) as it reads the node
        a:fail_next({ op = "get", path = lock, pass = true, hook = function() W:raw_delete(mark) end })
        a:reconnect()
        W:advance(10000)
        -- the client was told it failed: nobody holds the lock, another may take it
        assert.is_nil(W:node(lock))
        assert.same(OK, b:call("SET", "lock", "t2", "NX"))
    end)

    -- expiry.lua's expire_one the same way: NONODE from the mark's check is
    -- taken for the node gone (expired(NONODE)): the entry is forgotten and
    -- the persistent node, past its TTL, stays in ZooKeeper for ever
    it("(expiry) still deletes a persistent key past its TTL when the mark was gone at its delete", function()
        local W = S.world(0)
        local file = S.policy_file([[ return { lifetime = function() return "persistent" end } ]])
        local c = W:sidecar({ config = { policy = file } })
        S.warm(W, c)
        local dk = c:path("dk")
        local mark = c.require("guard").pmark_path(dk)
        assert.same(OK, c:call("SET", "dk", "v", "PX", "1000"))
        assert.equal(0, W:node(dk).stat.ephemeralOwner)
        c:fail_next({ op = "get", path = dk, pass = true, hook = function() W:raw_delete(mark) end })
        W:advance(10000)
        assert.is_nil(W:node(dk))
        os.remove(file)
    end)
end)
