-- The set commands (cmd_set.lua), as redis-server 7.0 answers them.

local S = require "world"
local E, WRONGTYPE = S.E, S.WRONGTYPE

local function sorted(reply)
    assert.is_table(reply.set)
    local out = table.move(reply.set, 1, #reply.set, 1, {})
    table.sort(out)
    return out
end

describe("sets", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("SADD counts the new members; SISMEMBER, SMEMBERS, SCARD read them", function()
        assert.equal(2, a:call("SADD", "s", "a", "b", "a"))
        assert.equal(1, b:call("SADD", "s", "b", "c"))
        assert.equal(0, b:call("SADD", "s", "c"))
        assert.equal(1, a:call("SADD", "s", "\0\r\n"))
        assert.equal(1, a:call("SISMEMBER", "s", "a"))
        assert.equal(1, a:call("SISMEMBER", "s", "\0\r\n"))
        assert.equal(0, a:call("SISMEMBER", "s", "x"))
        assert.equal(0, a:call("SISMEMBER", "missing", "x"))
        assert.same({ "\0\r\n", "a", "b", "c" }, sorted(b:call("SMEMBERS", "s")))
        assert.same({ set = {} }, a:call("SMEMBERS", "missing"))
        assert.equal(4, a:call("SCARD", "s"))
        assert.equal(0, a:call("SCARD", "missing"))
        assert.same({ ok = "set" }, a:call("TYPE", "s"))
    end)

    it("SADD of members already there writes nothing", function()
        a:call("SADD", "s", "a")
        local v = W:node(a:path("s")).stat.version
        assert.equal(0, a:call("SADD", "s", "a", "a"))
        assert.equal(v, W:node(a:path("s")).stat.version)
    end)

    it("SREM counts the removed members; the last one deletes the key", function()
        a:call("SADD", "s", "a", "b", "c")
        assert.equal(0, a:call("SREM", "missing", "a"))
        assert.equal(0, a:call("SREM", "s", "x"))
        assert.equal(1, a:call("SREM", "s", "a", "a", "x"))
        assert.same({ "b", "c" }, sorted(a:call("SMEMBERS", "s")))
        assert.equal(2, b:call("SREM", "s", "b", "c"))
        assert.equal(0, a:call("EXISTS", "s"))
        assert.is_nil(W:node(a:path("s")))
    end)

    it("answers WRONGTYPE on other types, and other commands answer it on sets", function()
        a:call("SET", "str", "v")
        for _, cmd in ipairs({ { "SADD", "str", "a" }, { "SREM", "str", "a" }, { "SISMEMBER", "str", "a" },
                               { "SMEMBERS", "str" }, { "SCARD", "str" } }) do
            assert.same(WRONGTYPE, a:call(table.unpack(cmd)))
        end
        a:call("SADD", "s", "a")
        assert.same(WRONGTYPE, a:call("GET", "s"))
        assert.same(WRONGTYPE, a:call("HGET", "s", "a"))
        assert.same(WRONGTYPE, a:call("RPUSH", "s", "a"))
        assert.same(E("ERR wrong number of arguments for 'sadd' command"), a:call("SADD", "s"))
    end)

    it("keeps the TTL across SADD and SREM", function()
        a:call("SADD", "s", "a", "b")
        a:call("PEXPIRE", "s", "5000")
        W:advance(1000)
        assert.equal(1, b:call("SADD", "s", "c"))
        assert.equal(1, b:call("SREM", "s", "a"))
        local left = a:call("PTTL", "s")
        assert.is_true(left > 3900 and left <= 4000, tostring(left))
        assert.equal(0, W:node(a:path("s")).stat.ephemeralOwner)
        W:advance(4100)
        assert.equal(0, a:call("SCARD", "s"))
    end)
end)
