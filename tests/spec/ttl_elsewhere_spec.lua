-- TTLs changed through a sidecar that does not own the key: PERSIST and
-- GETEX PERSIST, SET KEEPTTL, a shortened TTL, the owner's expiry delete
-- lost while another client takes the key, a renewal near the deadline.

local S = require "world"
local null, OK = S.null, S.OK

describe("a TTL changed through a sidecar that does not own the key", function()
    local W, a, b
    before_each(function()
        W, a, b = S.warm_world(2)
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "5000"))
    end)

    it("PERSIST through b: a's expiry leaves it", function()
        assert.equal(1, b:call("PERSIST", "lock"))
        W:advance(6000)
        assert.equal("t", a:call("GET", "lock"))
        assert.equal(-1, a:call("PTTL", "lock"))
    end)

    it("GETEX PERSIST through b: the same", function()
        assert.equal("t", b:call("GETEX", "lock", "PERSIST"))
        W:advance(6000)
        assert.equal("t", a:call("GET", "lock"))
    end)

    it("SET KEEPTTL through b: b ends it near a's deadline, never before", function()
        W:advance(1000)
        assert.same(OK, b:call("SET", "lock", "u", "KEEPTTL"))
        W:advance(3900)
        assert.equal("u", a:call("GET", "lock"))
        W:advance(700)
        assert.same(null, a:call("GET", "lock"))
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("a TTL shortened through b ends at the new deadline; a's old timer deletes nothing later", function()
        assert.equal(1, b:call("PEXPIRE", "lock", "1000"))
        W:advance(1100)
        assert.is_nil(W:node(a:path("lock")))
        assert.same(OK, b:call("SET", "lock", "v", "NX", "PX", "30000"))
        W:advance(5000)
        assert.equal("v", a:call("GET", "lock"))
    end)

    it("a's expiry delete lost while b takes the key: b's lock stays", function()
        a:fail_next({ op = "multi", when = "after", hook = function() a.connected = false end })
        W:advance(5005)
        assert.is_nil(W:node(a:path("lock")))
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "10000"))
        a:reconnect()
        W:advance(3000)
        assert.equal("tb", a:call("GET", "lock"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("a renewal within G.ENDED_MARGIN_MS of the deadline, its reply lost, answers 1 and lives on", function()
        W:advance(4500)
        a:fail_next({ op = "multi", when = "after" })
        assert.equal(1, a:call("PEXPIRE", "lock", "3000"))
        W:advance(1000) -- past the first deadline
        assert.equal("t", b:call("GET", "lock"))
        W:advance(2600)
        assert.is_nil(W:node(a:path("lock")))
    end)
end)
