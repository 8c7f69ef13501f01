-- The TTL commands' exact replies against Redis 7.2 (expire.c's
-- expireGenericCommand/ttlGenericCommand, t_string.c's
-- getExpireMillisecondsOrReply/getexCommand), on one and on two sidecars.
-- What keys_spec/string_spec/expiry_spec/ttl_elsewhere_spec already cover
-- is not repeated here.

local S = require "world"
local null, OK, E, SYNTAX, NOT_INT, WRONGTYPE = S.null, S.OK, S.E, S.SYNTAX, S.NOT_INT, S.WRONGTYPE

local function wall(sc) return math.floor(sc.host.wall()) end

describe("EXPIRE family: edge values (one sidecar)", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("the overflow checks come before the key lookup, as Redis's", function()
        assert.same(E("ERR invalid expire time in 'expire' command"),
                    a:call("EXPIRE", "nokey", "9223372036854775807"))
        assert.same(E("ERR invalid expire time in 'expire' command"),
                    a:call("EXPIRE", "nokey", "-9223372036854776"))
        assert.same(E("ERR invalid expire time in 'pexpire' command"),
                    a:call("PEXPIRE", "nokey", "9223372036854775807"))
        assert.same(NOT_INT, a:call("PEXPIRE", "nokey", "1.5"))
    end)

    it("the smallest times Redis accepts delete the key and answer 1", function()
        a:call("SET", "k", "v")
        -- LLONG_MIN / 1000 in C truncates to -9223372036854775: accepted
        assert.equal(1, a:call("EXPIRE", "k", "-9223372036854775"))
        assert.equal(-2, a:call("PTTL", "k"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIRE", "k", "-9223372036854775808"))
        assert.equal(0, a:call("EXISTS", "k"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIREAT", "k", "-9223372036854775808"))
        assert.equal(0, a:call("EXISTS", "k"))
    end)

    it("NX/XX/GT/LT are judged before the past-time delete", function()
        a:call("SET", "k", "v")
        assert.equal(0, a:call("EXPIRE", "k", "-1", "XX"))   -- no TTL: XX fails
        assert.equal(0, a:call("EXPIRE", "k", "-1", "GT"))   -- no TTL is infinite
        assert.equal("v", a:call("GET", "k"))
        assert.equal(1, a:call("EXPIRE", "k", "100"))
        assert.equal(0, a:call("EXPIRE", "k", "-1", "GT"))
        assert.equal(0, a:call("EXPIRE", "k", "-1", "NX"))
        assert.equal("v", a:call("GET", "k"))
        assert.equal(1, a:call("EXPIRE", "k", "-1", "LT"))
        assert.equal(0, a:call("EXISTS", "k"))
        -- LT on a key without TTL sets it (and deletes for a past time)
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIRE", "k", "0", "LT"))
        assert.equal(0, a:call("EXISTS", "k"))
    end)

    it("a missing key answers 0 whatever the options", function()
        for _, o in ipairs({ "NX", "XX", "GT", "LT" }) do
            assert.equal(0, a:call("EXPIRE", "nokey", "10", o))
            assert.equal(0, a:call("PEXPIREAT", "nokey", "1", o))
        end
    end)
end)

describe("EXPIRETIME / PEXPIRETIME", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("-2 missing, -1 no TTL", function()
        assert.equal(-2, a:call("EXPIRETIME", "nokey"))
        assert.equal(-2, a:call("PEXPIRETIME", "nokey"))
        a:call("SET", "k", "v")
        assert.equal(-1, a:call("EXPIRETIME", "k"))
        assert.equal(-1, a:call("PEXPIRETIME", "k"))
    end)

    -- Redis answers the PEXPIREAT time exactly; zkresp counts the deadline
    -- from its write's acknowledgment (README: late, never early), so a ms
    -- or two later is the documented rule, not a defect.
    local function late(at, got)
        assert.is_true(got >= at and got <= at + 5, tostring(at) .. " " .. tostring(got))
    end

    it("PEXPIRETIME answers the PEXPIREAT time (late by the ack); EXPIRETIME rounds (ms+500)/1000", function()
        a:call("SET", "k", "v")
        local at = (wall(a) // 1000 + 100) * 1000 + 600
        assert.equal(1, a:call("PEXPIREAT", "k", tostring(at)))
        late(at, a:call("PEXPIRETIME", "k"))
        assert.equal((at + 500) // 1000, a:call("EXPIRETIME", "k"))
        W:advance(1234)
        late(at, a:call("PEXPIRETIME", "k"))
        assert.equal(1, a:call("EXPIREAT", "k", tostring(at // 1000 + 5)))
        assert.equal(at // 1000 + 5, a:call("EXPIRETIME", "k"))
        late((at // 1000 + 5) * 1000, a:call("PEXPIRETIME", "k"))
    end)

    it("SET PXAT / GETEX PXAT: PEXPIRETIME is that time", function()
        local at = wall(a) + 45678
        assert.same(OK, a:call("SET", "k", "v", "PXAT", tostring(at)))
        late(at, a:call("PEXPIRETIME", "k"))
        assert.equal("v", a:call("GETEX", "k", "PXAT", tostring(at + 7)))
        late(at + 7, a:call("PEXPIRETIME", "k"))
    end)

    -- Before (contrived): PEXPIRETIME/EXPIRETIME compute wall + left in
    -- floats, so past 2^53 the reply is a Lua float (9.2233720368548e+18),
    -- where Redis answers :9223372036854775807 (EXPIRETIME: C's wrapped
    -- (ms+500)/1000). cmd_keys.lua ttl_generic.
    it("PEXPIREAT of LLONG_MAX answers an integer PEXPIRETIME", function()
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIREAT", "k", "9223372036854775807"))
        local r = a:call("PEXPIRETIME", "k")
        assert.equal("number", type(r))
        assert.is_true(math.type(r) == "integer", tostring(r))
        assert.equal(9223372036854775807, r)
        -- (Redis's (ms+500)/1000 overflows in C here; an integer is all we ask)
        assert.equal("integer", math.type(a:call("EXPIRETIME", "k")))
    end)
end)

describe("GETEX", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("a missing key answers nil before the time is checked", function()
        assert.equal(null, a:call("GETEX", "nokey", "EX", "0"))
        assert.equal(null, a:call("GETEX", "nokey", "PX", "abc"))
        assert.equal(null, a:call("GETEX", "nokey"))
    end)

    it("another type answers WRONGTYPE before the time is checked", function()
        S.make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("GETEX", "h", "EX", "0"))
    end)

    it("rejects what Redis rejects with a syntax error", function()
        a:call("SET", "k", "v")
        for _, o in ipairs({ { "KEEPTTL" }, { "GET" }, { "NX" }, { "XX" }, { "EX" },
                             { "PERSIST", "EX", "10" }, { "EX", "10", "PERSIST" },
                             { "EX", "10", "PX", "10" }, { "PXAT", "10", "EXAT", "10" } }) do
            assert.same(SYNTAX, a:call("GETEX", "k", table.unpack(o)))
        end
        -- repeats of the same option are fine
        assert.equal("v", a:call("GETEX", "k", "EX", "10", "ex", "20"))
        assert.equal(20, a:call("TTL", "k"))
        assert.equal("v", a:call("GETEX", "k", "PERSIST", "persist"))
        assert.equal(-1, a:call("TTL", "k"))
    end)

    it("checks the time like Redis, naming 'getex'", function()
        a:call("SET", "k", "v")
        assert.same(E("ERR invalid expire time in 'getex' command"), a:call("GETEX", "k", "EX", "0"))
        assert.same(E("ERR invalid expire time in 'getex' command"), a:call("GETEX", "k", "PX", "-5"))
        assert.same(E("ERR invalid expire time in 'getex' command"), a:call("GETEX", "k", "EXAT", "0"))
        assert.same(E("ERR invalid expire time in 'getex' command"),
                    a:call("GETEX", "k", "EX", "9223372036854776"))
        assert.same(NOT_INT, a:call("GETEX", "k", "EX", "1.5"))
        assert.equal(-1, a:call("PTTL", "k"))
    end)

    it("EXAT/PXAT in the past answers the value and deletes the key", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal("v", a:call("GETEX", "k", "EXAT", "1"))
        assert.equal(-2, a:call("PTTL", "k"))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("without options leaves the TTL alone", function()
        a:call("SET", "k", "v", "PX", "10000")
        W:advance(1000)
        assert.equal("v", a:call("GETEX", "k"))
        local left = a:call("PTTL", "k")
        assert.is_true(left > 8990 and left <= 9000, tostring(left))
    end)
end)

describe("SETEX / PSETEX", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("reject 0, negative and overflowing times with the command's name", function()
        assert.same(E("ERR invalid expire time in 'setex' command"), a:call("SETEX", "k", "0", "v"))
        assert.same(E("ERR invalid expire time in 'setex' command"), a:call("SETEX", "k", "-1", "v"))
        assert.same(E("ERR invalid expire time in 'psetex' command"), a:call("PSETEX", "k", "0", "v"))
        assert.same(E("ERR invalid expire time in 'setex' command"),
                    a:call("SETEX", "k", "9223372036854775", "v"))
        assert.same(E("ERR invalid expire time in 'psetex' command"),
                    a:call("PSETEX", "k", "9223372036854775807", "v"))
        assert.same(NOT_INT, a:call("SETEX", "k", "ten", "v"))
        assert.equal(0, a:call("EXISTS", "k"))
    end)

    it("replace another type and any TTL", function()
        S.make_hash(W, a, "h")
        assert.same(OK, a:call("SETEX", "h", "100", "v"))
        assert.same({ ok = "string" }, a:call("TYPE", "h"))
        assert.equal(100, a:call("TTL", "h"))
        assert.same(OK, a:call("PSETEX", "h", "1500", "w"))
        assert.equal(1499, a:call("PTTL", "h"))
    end)
end)

describe("SET's expiry options", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("GET with KEEPTTL keeps it, with EX replaces it", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal("v", a:call("SET", "k", "w", "KEEPTTL", "GET"))
        assert.is_true(a:call("PTTL", "k") > 9900)
        assert.equal("w", a:call("SET", "k", "x", "GET", "EX", "50"))
        assert.equal(50, a:call("TTL", "k"))
        assert.equal("x", a:call("SET", "k", "y", "GET"))
        assert.equal(-1, a:call("TTL", "k"))
    end)

    it("KEEPTTL with PERSIST, or EXAT with KEEPTTL, is a syntax error", function()
        assert.same(SYNTAX, a:call("SET", "k", "v", "PERSIST"))
        assert.same(SYNTAX, a:call("SET", "k", "v", "KEEPTTL", "PXAT", "99999999999999"))
    end)

    it("NX with a TTL on a key whose TTL ran out sets it", function()
        a:call("SET", "k", "v", "PX", "100")
        W:advance(150)
        assert.same(OK, a:call("SET", "k", "w", "NX", "PX", "1000"))
        assert.equal("w", a:call("GET", "k"))
    end)
end)

describe("writes that keep or clear a TTL", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("RENAME and COPY carry the TTL", function()
        a:call("SET", "k", "v", "PX", "10000")
        W:advance(2000)
        assert.same(OK, a:call("RENAME", "k", "k2"))
        local left = a:call("PTTL", "k2")
        assert.is_true(left > 7990 and left <= 8000, tostring(left))
        assert.equal(1, a:call("COPY", "k2", "k3"))
        left = a:call("PTTL", "k3")
        assert.is_true(left > 7990 and left <= 8000, tostring(left))
        assert.equal(-2, a:call("PTTL", "k"))
        W:advance(8100)
        assert.equal(0, a:call("EXISTS", "k2", "k3"))
    end)

    it("RENAME onto a key with a TTL drops the destination's TTL", function()
        a:call("SET", "src", "v")
        a:call("SET", "dst", "v", "PX", "5000")
        assert.same(OK, a:call("RENAME", "src", "dst"))
        assert.equal(-1, a:call("PTTL", "dst"))
    end)

    it("HSET, LPUSH, SADD, ZADD, APPEND, SETRANGE, INCRBYFLOAT keep the TTL", function()
        local function check(key)
            assert.equal(1, a:call("PEXPIRE", key, "10000"))
            W:advance(1000)
        end
        a:call("HSET", "h", "f", "1"); check("h"); a:call("HSET", "h", "g", "2")
        a:call("LPUSH", "l", "1"); check("l"); a:call("LPUSH", "l", "2")
        a:call("SADD", "s", "1"); check("s"); a:call("SADD", "s", "2")
        a:call("ZADD", "z", "1", "a"); check("z"); a:call("ZADD", "z", "2", "b")
        a:call("SET", "str", "a"); check("str"); a:call("APPEND", "str", "b")
        a:call("SET", "r", "a"); check("r"); a:call("SETRANGE", "r", "3", "x")
        a:call("SET", "f", "1"); check("f"); a:call("INCRBYFLOAT", "f", "0.5")
        for _, k in ipairs({ "h", "l", "s", "z", "str", "r", "f" }) do
            local left = a:call("PTTL", k)
            assert.is_true(left > 2000 and left <= 9000, k .. " " .. tostring(left))
        end
    end)

    it("GETSET and SET clear it; MSET clears it", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal("v", a:call("GETSET", "k", "w"))
        assert.equal(-1, a:call("PTTL", "k"))
        a:call("SET", "k", "v", "PX", "10000")
        a:call("MSET", "k", "x")
        assert.equal(-1, a:call("PTTL", "k"))
    end)

    it("popping the last element deletes the key; a new push has no TTL", function()
        a:call("RPUSH", "l", "1")
        a:call("PEXPIRE", "l", "10000")
        a:call("LPOP", "l")
        a:call("RPUSH", "l", "2")
        assert.equal(-1, a:call("PTTL", "l"))
    end)
end)

describe("what another sidecar sees", function()
    local W, a, b
    before_each(function()
        W, a, b = S.warm_world(2)
    end)

    local function near(owner, other, what)
        -- (each call moves the model's clock a few ms: owner read first)
        assert.is_true(other >= owner - 6 and other <= owner + 20,
                       what .. ": owner " .. tostring(owner) .. " other " .. tostring(other))
    end

    it("PTTL, TTL, PEXPIRETIME through b track a's, late never early", function()
        a:call("SET", "k", "v", "PX", "10000")
        near(a:call("PTTL", "k"), b:call("PTTL", "k"), "PTTL")
        assert.equal(a:call("TTL", "k"), b:call("TTL", "k"))
        -- (the model's sidecars' wall clocks differ by 7.9 s: compare each
        -- PEXPIRETIME against its own machine's clock)
        near(a:call("PEXPIRETIME", "k") - wall(a), b:call("PEXPIRETIME", "k") - wall(b), "PEXPIRETIME")
        assert.equal(1, a:call("PEXPIRE", "k", "3000"))
        near(a:call("PTTL", "k"), b:call("PTTL", "k"), "PTTL after PEXPIRE")
        assert.equal(1, a:call("PERSIST", "k"))
        assert.equal(-1, b:call("PTTL", "k"))
        assert.equal(-1, b:call("EXPIRETIME", "k"))
    end)

    it("NX/XX/GT/LT through b judge a's TTL", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal(0, b:call("PEXPIRE", "k", "5000", "NX"))
        assert.equal(0, b:call("PEXPIRE", "k", "5000", "GT"))
        assert.equal(0, b:call("PEXPIRE", "k", "20000", "LT"))
        assert.equal(1, b:call("PEXPIRE", "k", "20000", "GT"))
        near(b:call("PTTL", "k"), a:call("PTTL", "k"), "after b's GT")
        assert.equal(1, b:call("PEXPIRE", "k", "5000", "XX"))
        local left = a:call("PTTL", "k")
        assert.is_true(left > 4900 and left <= 5000, tostring(left))
    end)

    it("an EXPIRE in the past through b deletes a's key", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal(1, b:call("EXPIRE", "k", "-1"))
        assert.equal(-2, a:call("PTTL", "k"))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("PEXPIREAT through b: both sidecars answer that PEXPIRETIME (b within its latency)", function()
        a:call("SET", "k", "v")
        local at = wall(b) + 30000
        assert.equal(1, b:call("PEXPIREAT", "k", tostring(at)))
        assert.is_true(b:call("PEXPIRETIME", "k") - at <= 5)
        near(at - wall(b), a:call("PEXPIRETIME", "k") - wall(a), "a's PEXPIRETIME")
    end)

    it("RENAME/COPY through b of a's key keep its deadline (late, never early)", function()
        a:call("SET", "k", "v", "PX", "10000")
        W:advance(2000)
        assert.same(OK, b:call("RENAME", "k", "k2"))
        near(7990, b:call("PTTL", "k2"), "b's PTTL of k2")
        near(b:call("PTTL", "k2"), a:call("PTTL", "k2"), "a's PTTL of k2")
        assert.equal(1, a:call("COPY", "k2", "k3"))
        near(a:call("PTTL", "k2") - 1, a:call("PTTL", "k3"), "k3")
        W:advance(8100)
        assert.equal(0, a:call("EXISTS", "k2", "k3"))
        assert.equal(0, b:call("EXISTS", "k2", "k3"))
    end)

    it("INCR and HSET through b keep a's TTL; SET through b clears it", function()
        a:call("SET", "n", "1", "PX", "10000")
        a:call("HSET", "h", "f", "1")
        a:call("PEXPIRE", "h", "10000")
        W:advance(1000)
        assert.equal(2, b:call("INCR", "n"))
        assert.equal(1, b:call("HSET", "h", "g", "2"))
        for _, k in ipairs({ "n", "h" }) do
            local l = a:call("PTTL", k)
            assert.is_true(l > 8900 and l <= 9050, k .. " " .. tostring(l))
        end
        assert.same(OK, b:call("SET", "n", "x"))
        assert.equal(-1, a:call("PTTL", "n"))
        W:advance(9500)
        assert.equal("x", a:call("GET", "n"))
        assert.equal(0, a:call("EXISTS", "h"))
        assert.equal(0, b:call("EXISTS", "h"))
    end)

    it("GETEX EX through b moves the deadline for both", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal("v", b:call("GETEX", "k", "PX", "2000"))
        near(b:call("PTTL", "k") , a:call("PTTL", "k") + 0, "after GETEX")
        W:advance(2100)
        assert.equal(null, a:call("GET", "k"))
        assert.equal(null, b:call("GET", "k"))
    end)

    it("GETEX EXAT in the past through b answers the value and deletes a's key", function()
        a:call("SET", "k", "v", "PX", "10000")
        assert.equal("v", b:call("GETEX", "k", "EXAT", "1"))
        assert.equal(-2, a:call("PTTL", "k"))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("COPY REPLACE through b onto a's key with a TTL: the source's (none) wins", function()
        a:call("SET", "dst", "old", "PX", "5000")
        b:call("SET", "src", "new")
        assert.equal(1, b:call("COPY", "src", "dst", "REPLACE"))
        assert.equal(-1, a:call("PTTL", "dst"))
        W:advance(6000)
        assert.equal("new", a:call("GET", "dst"))
    end)
end)
