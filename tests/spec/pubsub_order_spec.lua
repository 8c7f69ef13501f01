-- Doorbells and publish order (scripts/pubsub_inbox.lua): a doorbell's
-- event delivers its message at once only while the inbox's child watch is
-- known to be armed, every earlier message listed.  After a reconnect, a
-- failed listing, or one that broke off, the message comes from the inbox
-- in its place instead.

local S = require "world"

describe("doorbells keep publish order", function()
    local W, a, b, PS
    local lockch = "redisson_lock__channel:{L}"
    local unlock = "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], ARGV[1]) return 1"
    before_each(function()
        W, a, b = S.world(2)
        PS = b.require("pubsub")
        b:call_as(7, "SUBSCRIBE", lockch, "news")
    end)

    local function texts(list)
        local out = {}
        for i, f in ipairs(list or {}) do
            local payload = f.push[3]
            if #payload > 40 then payload = #payload .. " bytes" end
            out[i] = f.push[2] .. "=" .. payload
        end
        return out
    end
    local function inbox()
        return b:run(function() return b.require("pubsub_nodes").inbox() end)
    end

    it("after a reconnect whose server fires the doorbell's event before the inbox's", function()
        local rung = PS.stats.rung
        b:disconnect({ hold_events = true })
        assert.equal(1, a:call("PUBLISH", "news", "m"))
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        assert.equal(1, a:call("PUBLISH", lockch, "0"))
        b:reconnect()
        W:advance(1000)
        assert.same({ "news=m", lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
        assert.equal(rung, PS.stats.rung) -- both from the listing
        -- and once the inbox is listed again, a doorbell delivers at its event
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(50)
        assert.equal(rung + 1, PS.stats.rung)
        assert.same({ "news=m", lockch .. "=0", lockch .. "=0", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("after a reconnect, when the listing under way at the disconnect ended meanwhile", function()
        b:fail_next({ op = "children", path = inbox(), pass = true, latency = 20 })
        assert.equal(1, a:call("PUBLISH", "news", "m1"))
        W:advance(5)
        b:disconnect({ hold_events = true })
        W:advance(50) -- the listing answers (m1), its watch set
        assert.same({ "news=m1" }, texts(b.pushed[7]))
        assert.equal(1, a:call("PUBLISH", "news", "m2"))
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        b:reconnect()
        W:advance(1000)
        assert.same({ "news=m1", "news=m2", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("after a listing of the inbox that failed (no watch set)", function()
        b:fail_next({ op = "children", path = inbox() })
        assert.equal(1, a:call("PUBLISH", "news", "m"))
        W:advance(10)
        assert.is_nil(b.pushed[7])
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(1000)
        assert.same({ "news=m", lockch .. "=0" }, texts(b.pushed[7]))
    end)

    it("after a listing that broke off to read a long message later", function()
        local big = string.rep("p", 2000)
        b:fail_next({ op = "get", rc = S.codes.CONNECTIONLOSS })
        assert.equal(1, a:call("PUBLISH", "news", big))
        W:advance(10)
        assert.is_nil(b.pushed[7])
        assert.equal(1, a:call("EVAL", unlock, "2", "L", lockch, "0"))
        W:advance(1000)
        assert.same({ "news=2000 bytes", lockch .. "=0" }, texts(b.pushed[7]))
    end)
end)
