-- The value stored in a znode: header, round trip, foreign data.

local S = require "world"

describe("codec", function()
    local codec = S.module("codec")

    it("round-trips every field", function()
        local nonce = "0123456789abcdef"
        for _, typ in ipairs({ codec.STRING, codec.HASH, codec.LIST, codec.SET, codec.ZSET }) do
            local data = codec.encode({ type = typ, flags = 3, ttl = 30000, nonce = nonce,
                                        payload = "p\0\255q" })
            assert.equal(28 + 4, #data)
            local v = codec.decode(data)
            assert.same({ type = typ, flags = 3, ttl = 30000, nonce = nonce,
                          payload = "p\0\255q" }, v)
        end
    end)

    it("lays the header out as documented", function()
        local data = codec.encode({ type = codec.STRING, ttl = 258, nonce = string.rep("n", 16),
                                    payload = "xy" })
        assert.equal("Z\1\0\0", data:sub(1, 4))
        assert.equal("\0\0\0\0\0\0\1\2", data:sub(5, 12))
        assert.equal(string.rep("n", 16), data:sub(13, 28))
        assert.equal("xy", data:sub(29))
    end)

    it("stores no TTL as 0 and an empty payload", function()
        local v = codec.decode(codec.encode({ type = codec.STRING, nonce = string.rep("\0", 16) }))
        assert.equal(0, v.ttl)
        assert.equal("", v.payload)
        assert.is_nil(v.foreign)
    end)

    it("reads data without the header as a plain string with no TTL", function()
        for _, raw in ipairs({ "hello", "", "Z", "Zebra crossings are long enough to fool a parser" }) do
            local v = codec.decode(raw)
            assert.equal(codec.STRING, v.type)
            assert.equal(0, v.ttl)
            assert.equal(raw, v.payload)
            assert.is_true(v.foreign)
        end
        local v = codec.decode(nil) -- a node with null data
        assert.equal("", v.payload)
        assert.is_true(v.foreign)
    end)

    it("marks a newer format version as unknown rather than raw bytes", function()
        local data = codec.encode({ type = codec.STRING, nonce = "", payload = "x" })
        local newer = "Z\2" .. data:sub(3)
        assert.equal(codec.UNKNOWN, codec.decode(newer).type)
    end)

    it("refuses a bad TTL or nonce (programming errors)", function()
        assert.has_error(function() codec.encode({ ttl = -1 }) end)
        assert.has_error(function() codec.encode({ ttl = 1.5 }) end)
        assert.has_error(function() codec.encode({ nonce = string.rep("x", 17) }) end)
    end)
end)

describe("foreign nodes", function()
    it("a node made by hand reads as a string", function()
        local W, a = S.world(1)
        W:raw_create("/zkresp/k/hand", "made in zkCli")
        W:raw_create("/zkresp/k/empty", nil)
        assert.equal("made in zkCli", a:call("GET", "hand"))
        assert.equal("", a:call("GET", "empty"))
        assert.same({ ok = "string" }, a:call("TYPE", "hand"))
        assert.equal(-1, a:call("PTTL", "hand"))
        assert.equal(1, a:call("DELIFEQ", "hand", "made in zkCli"))
        assert.is_nil(W:node("/zkresp/k/hand"))
    end)

    it("a newer format answers WRONGTYPE instead of leaking its bytes", function()
        local W, a = S.world(1)
        local codec = a.require("codec")
        local data = codec.encode({ type = codec.STRING, nonce = "", payload = "x" })
        W:raw_create("/zkresp/k/new", "Z\3" .. data:sub(3))
        assert.same({ err = "WRONGTYPE Operation against a key holding the wrong kind of value" },
                    a:call("GET", "new"))
        assert.same({ err = "WRONGTYPE Operation against a key holding the wrong kind of value" },
                    a:call("PEXPIRE", "new", "1000"))
    end)
end)
