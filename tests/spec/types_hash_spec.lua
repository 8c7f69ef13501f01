-- The hash commands (cmd_hash.lua) and the payload codec (payload.lua), as
-- redis-server 7.0 answers them.

local S = require "world"
local null, OK, E, WRONGTYPE, NOT_INT = S.null, S.OK, S.E, S.WRONGTYPE, S.NOT_INT

describe("payload", function()
    local P, codec
    before_each(function()
        local _, sc = S.world(1)
        P, codec = sc.require("payload"), sc.require("codec")
    end)

    it("round-trips every type, binary-safe and deterministic", function()
        local items = { "", "a", "\0\r\n\255", string.rep("x", 70000) }
        assert.same(items, P.decode_list(P.encode_list(items)))
        assert.equal(P.encode_list(items), P.encode_list({ "", "a", "\0\r\n\255", string.rep("x", 70000) }))
        assert.same({}, P.decode_list(P.encode_list({})))

        local h = P.new_hash()
        P.hash_set(h, "f\0", "v1")
        P.hash_set(h, "", "")
        P.hash_set(h, "f\0", "v2")
        local back = P.decode_hash(P.encode_hash(h))
        assert.same({ "f\0", "" }, back.keys)
        assert.same({ ["f\0"] = "v2", [""] = "" }, back.vals)

        local s = P.decode_set(P.encode_list({ "b", "a", "\0" }))
        assert.same({ "b", "a", "\0" }, s.keys)
        assert.is_true(s.has["\0"])

        local z = { { "b", 1.5 }, { "a", -math.huge }, { "c", 1.5 }, { "d", math.huge } }
        P.zset_sort(z)
        local zb = P.decode_zset(P.encode_zset(z))
        assert.same({ { "a", -math.huge }, { "b", 1.5 }, { "c", 1.5 }, { "d", math.huge } },
                    { zb[1], zb[2], zb[3], zb[4] })
        assert.equal(1.5, zb.score.c)
        assert.equal(4, #zb)
    end)

    it("rejects garbage without crashing", function()
        local good = P.encode_list({ "ab", "c" })
        for _, bad in ipairs({ "", "\0\0\0", "\0\0\0\1", good .. "x", good:sub(1, -2),
                               "\255\255\255\255", "\0\0\0\2\0\0\0\1a" }) do
            assert.is_nil(P.decode_list(bad))
            assert.is_nil(P.decode_set(bad))
            assert.is_nil(P.decode_zset(bad))
        end
        -- Odd string count for a hash, duplicate fields and members.
        assert.is_nil(P.decode_hash(P.encode_list({ "a", "b", "c" })))
        assert.is_nil(P.decode_hash(P.encode_list({ "a", "1", "a", "2" }):gsub("^\0\0\0\4", "\0\0\0\2")))
        assert.is_nil(P.decode_set(P.encode_list({ "a", "a" })))
        -- Zsets: NaN, duplicates, out of order.
        local function zraw(list)
            local parts = { string.pack(">I4", #list) }
            for _, e in ipairs(list) do parts[#parts + 1] = string.pack(">s4d", e[1], e[2]) end
            return table.concat(parts)
        end
        assert.is_table(P.decode_zset(zraw({ { "a", 1 }, { "b", 1 } })))
        assert.is_nil(P.decode_zset(zraw({ { "a", 0 / 0 } })))
        assert.is_nil(P.decode_zset(zraw({ { "a", 1 }, { "a", 2 } })))
        assert.is_nil(P.decode_zset(zraw({ { "b", 1 }, { "a", 1 } })))
        assert.is_nil(P.decode_zset(zraw({ { "a", 2 }, { "b", 1 } })))
        -- Random bytes never raise.
        math.randomseed(7)
        for _ = 1, 500 do
            local n = math.random(0, 40)
            local b = {}
            for i = 1, n do b[i] = string.char(math.random(0, 255)) end
            local s = table.concat(b)
            for _, f in ipairs({ P.decode_list, P.decode_hash, P.decode_set, P.decode_zset }) do
                local ok = pcall(f, s)
                assert.is_true(ok)
            end
        end
        assert.equal(codec.HASH, 1)
    end)
end)

describe("hashes", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("HSET adds pairs and counts the new fields; HGET, HMGET read them", function()
        assert.equal(2, a:call("HSET", "h", "f1", "v1", "f2", "v2"))
        assert.equal(1, a:call("HSET", "h", "f1", "x", "f3", "v3"))
        assert.equal(0, a:call("HSET", "h", "f1", "y"))
        assert.equal(1, a:call("HSET", "h", "f4", "a", "f4", "b"))
        assert.equal("y", b:call("HGET", "h", "f1"))
        assert.equal("b", b:call("HGET", "h", "f4"))
        assert.equal(null, a:call("HGET", "h", "nope"))
        assert.equal(null, a:call("HGET", "missing", "f1"))
        assert.same({ "y", null, "v3" }, a:call("HMGET", "h", "f1", "nope", "f3"))
        assert.same({ null, null }, a:call("HMGET", "missing", "a", "b"))
        assert.same(OK, a:call("HMSET", "h", "f5", "v5"))
        assert.equal("v5", a:call("HGET", "h", "f5"))
    end)

    it("is binary-safe", function()
        assert.equal(2, a:call("HSET", "h", "\0\r\n", "\255\0", "", ""))
        assert.equal("\255\0", a:call("HGET", "h", "\0\r\n"))
        assert.equal("", a:call("HGET", "h", ""))
        assert.equal(1, a:call("HEXISTS", "h", ""))
    end)

    it("checks HSET's pairs and the arity", function()
        assert.same(E("ERR wrong number of arguments for 'hset' command"), a:call("HSET", "h", "f"))
        assert.same(E("ERR wrong number of arguments for 'hset' command"), a:call("HSET", "h", "f", "v", "g"))
        assert.same(E("ERR wrong number of arguments for 'hmset' command"), a:call("HMSET", "h", "f"))
        assert.same(E("ERR wrong number of arguments for 'hget' command"), a:call("HGET", "h"))
        assert.same(E("ERR wrong number of arguments for 'hdel' command"), a:call("HDEL", "h"))
        assert.same(E("ERR wrong number of arguments for 'hlen' command"), a:call("HLEN", "h", "x"))
        assert.equal(0, a:call("EXISTS", "h"))
    end)

    it("HEXISTS, HLEN, HKEYS, HVALS, HGETALL in insertion order", function()
        a:call("HSET", "h", "b", "1", "a", "2", "c", "3")
        a:call("HDEL", "h", "a")
        a:call("HSET", "h", "a", "4")
        assert.equal(1, a:call("HEXISTS", "h", "b"))
        assert.equal(0, a:call("HEXISTS", "h", "x"))
        assert.equal(0, a:call("HEXISTS", "missing", "x"))
        assert.equal(3, a:call("HLEN", "h"))
        assert.equal(0, a:call("HLEN", "missing"))
        assert.same({ "b", "c", "a" }, a:call("HKEYS", "h"))
        assert.same({ "1", "3", "4" }, a:call("HVALS", "h"))
        assert.same({ map = { "b", "1", "c", "3", "a", "4" } }, a:call("HGETALL", "h"))
        assert.same({}, a:call("HKEYS", "missing"))
        assert.same({}, a:call("HVALS", "missing"))
        assert.same({ map = {} }, a:call("HGETALL", "missing"))
    end)

    it("HINCRBY counts with Redis's errors", function()
        assert.equal(5, a:call("HINCRBY", "h", "n", "5"))
        assert.equal(2, a:call("HINCRBY", "h", "n", "-3"))
        assert.equal("2", a:call("HGET", "h", "n"))
        assert.same(NOT_INT, a:call("HINCRBY", "h", "n", "x"))
        assert.same(NOT_INT, a:call("HINCRBY", "h", "n", "1.5"))
        assert.same(NOT_INT, a:call("HINCRBY", "h", "n", "9223372036854775808"))
        a:call("HSET", "h", "s", "abc", "sp", " 1", "f", "1.0", "max", "9223372036854775807",
               "min", "-9223372036854775808")
        for _, f in ipairs({ "s", "sp", "f" }) do
            assert.same(E("ERR hash value is not an integer"), a:call("HINCRBY", "h", f, "1"))
        end
        assert.same(E("ERR increment or decrement would overflow"), a:call("HINCRBY", "h", "max", "1"))
        assert.same(E("ERR increment or decrement would overflow"), a:call("HINCRBY", "h", "min", "-1"))
        assert.equal(math.maxinteger, a:call("HINCRBY", "h", "max", "0"))
        assert.equal(-1, a:call("HINCRBY", "h", "min", "9223372036854775807"))
        assert.equal("2", a:call("HGET", "h", "n"))
        -- The argument is checked before the key's type.
        a:call("SET", "str", "v")
        assert.same(NOT_INT, a:call("HINCRBY", "str", "n", "x"))
        assert.same(WRONGTYPE, a:call("HINCRBY", "str", "n", "1"))
    end)

    it("HDEL counts the removed fields; the last one deletes the key", function()
        a:call("HSET", "h", "a", "1", "b", "2")
        assert.equal(0, a:call("HDEL", "missing", "a"))
        assert.equal(0, a:call("HDEL", "h", "x"))
        assert.equal(1, a:call("HDEL", "h", "a", "a", "x"))
        assert.equal(1, a:call("EXISTS", "h"))
        assert.equal(1, b:call("HDEL", "h", "b"))
        assert.equal(0, a:call("EXISTS", "h"))
        assert.is_nil(W:node(a:path("h")))
        assert.same({ ok = "none" }, a:call("TYPE", "h"))
    end)

    it("answers WRONGTYPE on other types, and string commands answer it on hashes", function()
        a:call("SET", "str", "v")
        for _, cmd in ipairs({ { "HSET", "str", "f", "v" }, { "HGET", "str", "f" }, { "HMGET", "str", "f" },
                               { "HEXISTS", "str", "f" }, { "HDEL", "str", "f" }, { "HLEN", "str" },
                               { "HKEYS", "str" }, { "HVALS", "str" }, { "HGETALL", "str" },
                               { "HINCRBY", "str", "f", "1" }, { "HMSET", "str", "f", "v" } }) do
            assert.same(WRONGTYPE, a:call(table.unpack(cmd)))
        end
        assert.equal("v", a:call("GET", "str"))
        a:call("HSET", "h", "f", "1")
        assert.same(WRONGTYPE, a:call("GET", "h"))
        assert.same(WRONGTYPE, a:call("INCR", "h"))
        assert.same(WRONGTYPE, a:call("GETDEL", "h"))
        assert.same(WRONGTYPE, a:call("SET", "h", "v", "GET"))
        assert.same({ ok = "hash" }, a:call("TYPE", "h"))
        assert.equal(1, a:call("DEL", "h"))
    end)

    it("answers an error for a payload that does not decode", function()
        local codec = a.require("codec")
        W:raw_create(a:path("bad"), codec.encode({ type = codec.HASH, nonce = string.rep("n", 16),
                                                   payload = "\0\0\0\9garbage" }))
        assert.same(E("ERR stored value is corrupt"), a:call("HGET", "bad", "f"))
        assert.same(E("ERR stored value is corrupt"), a:call("HSET", "bad", "f", "v"))
        assert.same({ ok = "hash" }, a:call("TYPE", "bad"))
        assert.equal(1, a:call("DEL", "bad"))
    end)

    it("keeps the TTL across writes, as Redis does; the key is ephemeral", function()
        a:call("HSET", "h", "f", "1")
        assert.equal(0, W:node(a:path("h")).stat.ephemeralOwner)
        assert.equal(1, a:call("PEXPIRE", "h", "10000"))
        assert.equal(a.sid, W:node(a:path("h")).stat.ephemeralOwner)
        W:advance(1000)
        assert.equal(1, a:call("HSET", "h", "g", "2"))
        assert.equal(2, a:call("HINCRBY", "h", "f", "1"))
        assert.equal(1, a:call("HDEL", "h", "g"))
        local left = a:call("PTTL", "h")
        assert.is_true(left > 8900 and left <= 9000, tostring(left))
        -- Another sidecar's write keeps the TTL it had left and makes the
        -- key shared: persistent, so that neither sidecar's end takes the
        -- other's fields with it.
        assert.equal(1, b:call("HSET", "h", "x", "y"))
        assert.equal(0, W:node(a:path("h")).stat.ephemeralOwner)
        left = b:call("PTTL", "h")
        assert.is_true(left > 8800 and left <= 9000, tostring(left))
        W:expire_session(b.sid)
        assert.equal("y", a:call("HGET", "h", "x"))
        assert.equal(1, a:call("PERSIST", "h"))
        assert.equal(0, W:node(a:path("h")).stat.ephemeralOwner)
        assert.equal(-1, a:call("PTTL", "h"))
        assert.same({ "2", "y" }, a:call("HVALS", "h"))
    end)

    it("expires as a whole, and a write after expiry starts a new hash", function()
        a:call("HSET", "h", "f", "1")
        a:call("PEXPIRE", "h", "500")
        W:advance(600)
        assert.equal(null, b:call("HGET", "h", "f"))
        assert.equal(0, b:call("HLEN", "h"))
        assert.equal(1, b:call("HSET", "h", "g", "2"))
        assert.same({ "g" }, b:call("HKEYS", "h"))
        assert.equal(-1, b:call("PTTL", "h"))
    end)

    it("a session's death deletes its hash with a TTL", function()
        a:call("HSET", "lock", "uuid:1", "1")
        a:call("PEXPIRE", "lock", "30000")
        W:expire_session(a.sid)
        assert.equal(0, b:call("EXISTS", "lock"))
    end)

    it("concurrent writes from two sidecars are each applied once", function()
        local tasks = {}
        for i = 1, 40 do
            local sc = i % 2 == 0 and a or b
            tasks[#tasks + 1] = sc:start("HINCRBY", "h", "n", "1")
            tasks[#tasks + 1] = sc:start("RPUSH", "l", tostring(i))
            tasks[#tasks + 1] = sc:start("SADD", "s", tostring(i), "common")
            tasks[#tasks + 1] = sc:start("ZINCRBY", "z", "1", "m")
        end
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end)
        for _, t in ipairs(tasks) do assert.is_nil(type(t.result) == "table" and t.result.err or nil) end
        assert.equal("40", a:call("HGET", "h", "n"))
        assert.equal(40, b:call("LLEN", "l"))
        assert.equal(41, a:call("SCARD", "s"))
        assert.same({ double = 40.0 }, b:call("ZSCORE", "z", "m"))
    end)

    it("refuses a hash grown over the value cap", function()
        local c = W:sidecar({ config = { max_value_len = 100 } })
        assert.equal(1, c:call("HSET", "h", "f", string.rep("x", 50)))
        assert.same(E("ERR value too large"), c:call("HSET", "h", "g", string.rep("x", 50)))
        assert.same({ "f" }, c:call("HKEYS", "h"))
    end)
end)
