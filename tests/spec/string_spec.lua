-- The string commands' replies and errors, as redis-server 7.0 answers them
-- (SET IFEQ/IFNE and DELEX from Redis 8.4, DELIFEQ from Valkey 9).

local S = require "world"
local make_hash = S.make_hash
local null, OK, E, WRONGTYPE, SYNTAX, NOT_INT = S.null, S.OK, S.E, S.WRONGTYPE, S.SYNTAX, S.NOT_INT

describe("SET", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("sets and overwrites", function()
        assert.same(OK, a:call("SET", "k", "v1"))
        assert.same(OK, a:call("SET", "k", "v2"))
        assert.equal("v2", a:call("GET", "k"))
        assert.same(OK, a:call("SET", "bin", "\0\r\n\255"))
        assert.equal("\0\r\n\255", a:call("GET", "bin"))
        assert.same(OK, a:call("SET", "empty", ""))
        assert.equal("", a:call("GET", "empty"))
    end)

    it("NX sets only a missing key, XX only an existing one", function()
        assert.equal(null, a:call("SET", "k", "v", "XX"))
        assert.equal(null, a:call("GET", "k"))
        assert.same(OK, a:call("SET", "k", "v", "NX"))
        assert.equal(null, a:call("SET", "k", "w", "NX"))
        assert.equal("v", a:call("GET", "k"))
        assert.same(OK, a:call("SET", "k", "w", "XX"))
        assert.equal("w", a:call("GET", "k"))
        assert.same(OK, a:call("SET", "k2", "v", "nx", "NX")) -- a repeated option is fine
    end)

    it("takes options in any order and case", function()
        assert.same(OK, a:call("SET", "k", "v", "px", "10000", "nx"))
        assert.same(OK, a:call("SET", "k2", "v", "Nx", "Px", "10000"))
        assert.same(OK, a:call("SET", "k3", "v", "EX", "10", "EX", "20"))
        assert.equal(20, a:call("TTL", "k3"))
    end)

    it("GET returns the old value, also when the write is skipped", function()
        assert.equal(null, a:call("SET", "k", "v1", "GET"))
        assert.equal("v1", a:call("SET", "k", "v2", "GET"))
        assert.equal("v2", a:call("SET", "k", "v3", "NX", "GET"))
        assert.equal("v2", a:call("GET", "k"))
        assert.equal(null, a:call("SET", "n", "v", "XX", "GET"))
        assert.equal(null, a:call("GET", "n"))
        assert.equal(null, a:call("SET", "n2", "new", "NX", "GET"))
        assert.equal("new", a:call("GET", "n2"))
    end)

    it("answers WRONGTYPE for GET on another type, and overwrites it otherwise", function()
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("SET", "h", "v", "GET"))
        assert.same(WRONGTYPE, a:call("SET", "h", "v", "NX", "GET"))
        assert.same({ ok = "hash" }, a:call("TYPE", "h"))
        assert.same(OK, a:call("SET", "h", "v"))
        assert.same({ ok = "string" }, a:call("TYPE", "h"))
    end)

    it("rejects conflicting or incomplete options", function()
        for _, opts in ipairs({ { "NX", "XX" }, { "XX", "NX" }, { "EX", "10", "PX", "10" },
                                { "PX", "10", "EXAT", "10" }, { "KEEPTTL", "EX", "10" },
                                { "EX", "10", "KEEPTTL" }, { "EX" }, { "PXAT" }, { "FOO" },
                                { "IFEQ" }, { "IFEQ", "a", "NX" }, { "XX", "IFEQ", "a" },
                                { "IFEQ", "a", "IFNE", "b" }, { "IFEQ", "a", "IFEQ", "b" } }) do
            assert.same(SYNTAX, a:call("SET", "k", "v", table.unpack(opts)))
        end
    end)

    it("checks the expire time like Redis", function()
        assert.same(E("ERR invalid expire time in 'set' command"), a:call("SET", "k", "v", "EX", "0"))
        assert.same(E("ERR invalid expire time in 'set' command"), a:call("SET", "k", "v", "PX", "-1"))
        assert.same(E("ERR invalid expire time in 'set' command"), a:call("SET", "k", "v", "PXAT", "0"))
        assert.same(NOT_INT, a:call("SET", "k", "v", "EX", "abc"))
        assert.same(NOT_INT, a:call("SET", "k", "v", "PX", "1.5"))
        -- Overflows: seconds * 1000, or now + ms.
        assert.same(E("ERR invalid expire time in 'set' command"),
                    a:call("SET", "k", "v", "EX", "9223372036854776"))
        assert.same(E("ERR invalid expire time in 'set' command"),
                    a:call("SET", "k", "v", "EX", "9223372036854775"))
        assert.same(E("ERR invalid expire time in 'set' command"),
                    a:call("SET", "k", "v", "PX", "9223372036854775807"))
        assert.same(OK, a:call("SET", "k", "v", "PXAT", "9223372036854775807"))
        assert.is_true(a:call("PTTL", "k") > 9e18)
    end)

    it("PX/EX set a TTL, EXAT/PXAT an absolute time on the wall clock", function()
        a:call("SET", "px", "v", "PX", "1500")
        assert.equal(1499, a:call("PTTL", "px"))
        a:call("SET", "ex", "v", "EX", "100")
        assert.equal(100, a:call("TTL", "ex"))
        local wall = math.floor(a.host.wall())
        a:call("SET", "pxat", "v", "PXAT", tostring(wall + 5000))
        local left = a:call("PTTL", "pxat")
        assert.is_true(left > 4990 and left <= 5000, tostring(left))
        a:call("SET", "exat", "v", "EXAT", tostring(wall // 1000 + 60))
        local ttl = a:call("TTL", "exat")
        assert.is_true(ttl >= 59 and ttl <= 60)
    end)

    it("with EXAT/PXAT in the past leaves the key absent", function()
        a:call("SET", "k", "old")
        assert.same(OK, a:call("SET", "k", "v", "EXAT", "1"))
        assert.equal(null, a:call("GET", "k"))
        assert.is_nil(W:node(a:path("k")))
        assert.equal(null, a:call("SET", "k2", "v", "PXAT", "1", "GET"))
        assert.is_nil(W:node(a:path("k2")))
        a:call("SET", "k3", "old")
        assert.equal("old", a:call("SET", "k3", "v", "PXAT", "1", "GET"))
        assert.equal(null, a:call("GET", "k3"))
    end)

    it("drops the TTL unless KEEPTTL", function()
        a:call("SET", "k", "v", "PX", "10000")
        a:call("SET", "k", "v2")
        assert.equal(-1, a:call("PTTL", "k"))
        a:call("SET", "k", "v", "PX", "10000")
        W:advance(1000)
        assert.same(OK, a:call("SET", "k", "v3", "KEEPTTL"))
        local left = a:call("PTTL", "k")
        assert.is_true(left > 8990 and left <= 9000, tostring(left))
        assert.equal("v3", a:call("GET", "k"))
        assert.same(OK, a:call("SET", "nottl", "v", "KEEPTTL"))
        assert.equal(-1, a:call("PTTL", "nottl"))
    end)

    it("IFEQ sets only when the current string value is equal", function()
        assert.equal(null, a:call("SET", "k", "v", "IFEQ", "x"))
        assert.equal(null, a:call("GET", "k")) -- never creates
        a:call("SET", "k", "token1")
        assert.equal(null, a:call("SET", "k", "v", "IFEQ", "other"))
        assert.equal("token1", a:call("GET", "k"))
        assert.same(OK, a:call("SET", "k", "token2", "ifeq", "token1", "PX", "5000"))
        assert.equal("token2", a:call("GET", "k"))
        assert.is_true(a:call("PTTL", "k") > 4990)
        assert.equal("token2", a:call("SET", "k", "t3", "IFEQ", "nope", "GET"))
        assert.equal("token2", a:call("SET", "k", "t3", "IFEQ", "token2", "GET"))
        assert.equal("t3", a:call("GET", "k"))
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("SET", "h", "v", "IFEQ", "field"))
    end)

    it("IFNE sets unless the current value is equal, creating a missing key", function()
        assert.same(OK, a:call("SET", "k", "v1", "IFNE", "x"))
        assert.equal(null, a:call("SET", "k", "v2", "IFNE", "v1"))
        assert.same(OK, a:call("SET", "k", "v2", "IFNE", "zz"))
        assert.equal("v2", a:call("GET", "k"))
    end)

    it("refuses the digest conditions it does not implement", function()
        assert.same(E("ERR IFDEQ and IFDNE are not supported by zkresp"),
                    a:call("SET", "k", "v", "IFDEQ", "abcd"))
    end)
end)

describe("GET and GETDEL", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("GET answers null for a missing key and WRONGTYPE for another type", function()
        assert.equal(null, a:call("GET", "nokey"))
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("GET", "h"))
    end)

    it("GETDEL returns the value and deletes the key", function()
        a:call("SET", "k", "v")
        assert.equal("v", a:call("GETDEL", "k"))
        assert.is_nil(W:node(a:path("k")))
        assert.equal(null, a:call("GETDEL", "k"))
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("GETDEL", "h"))
        assert.is_not_nil(W:node(a:path("h")))
    end)
end)

describe("INCR, INCRBY, DECR, DECRBY", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("counts from a missing key and replies with the new value", function()
        assert.equal(1, a:call("INCR", "n"))
        assert.equal(2, a:call("INCR", "n"))
        assert.equal(12, a:call("INCRBY", "n", "10"))
        assert.equal(11, a:call("DECR", "n"))
        assert.equal(-9, a:call("DECRBY", "n", "20"))
        assert.equal("-9", a:call("GET", "n"))
        assert.equal(-5, a:call("DECRBY", "fresh", "5"))
    end)

    it("refuses values and increments that are not integers", function()
        for _, v in ipairs({ " 1", "01", "-0", "1.0", "abc", "", "9223372036854775808" }) do
            a:call("SET", "n", v)
            assert.same(NOT_INT, a:call("INCR", "n"))
            assert.equal(v, a:call("GET", "n"))
        end
        assert.same(NOT_INT, a:call("INCRBY", "m", "abc"))
        assert.same(NOT_INT, a:call("DECRBY", "m", "1.5"))
        assert.is_nil(W:node(a:path("m")))
    end)

    it("refuses to overflow", function()
        a:call("SET", "n", "9223372036854775807")
        assert.same(E("ERR increment or decrement would overflow"), a:call("INCR", "n"))
        a:call("SET", "n", "-9223372036854775808")
        assert.same(E("ERR increment or decrement would overflow"), a:call("DECR", "n"))
        assert.same(E("ERR decrement would overflow"), a:call("DECRBY", "n", "-9223372036854775808"))
        assert.same(E("ERR increment or decrement would overflow"),
                    a:call("INCRBY", "n", "-1"))
        assert.equal(-1, a:call("INCRBY", "z", "-1"))
    end)

    it("answers WRONGTYPE on another type", function()
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("INCR", "h"))
    end)

    it("keeps the TTL", function()
        a:call("SET", "n", "5", "PX", "10000")
        W:advance(2000)
        assert.equal(6, a:call("INCR", "n"))
        local left = a:call("PTTL", "n")
        assert.is_true(left > 7990 and left <= 8000, tostring(left))
    end)
end)

describe("DELIFEQ and DELEX", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("DELIFEQ deletes only when the value matches", function()
        assert.equal(0, a:call("DELIFEQ", "k", "v"))
        a:call("SET", "k", "mine")
        assert.equal(0, a:call("DELIFEQ", "k", "other"))
        assert.equal("mine", a:call("GET", "k"))
        assert.equal(1, a:call("DELIFEQ", "k", "mine"))
        assert.equal(null, a:call("GET", "k"))
        assert.equal(0, a:call("DELIFEQ", "k", "mine"))
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("DELIFEQ", "h", "x"))
    end)

    it("DELEX without a condition deletes like DEL of one key, of any type", function()
        assert.equal(0, a:call("DELEX", "k"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("DELEX", "k"))
        make_hash(W, a, "h")
        assert.equal(1, a:call("DELEX", "h"))
        assert.is_nil(W:node(a:path("h")))
    end)

    it("DELEX IFEQ / IFNE compare the string value", function()
        a:call("SET", "k", "v")
        assert.equal(0, a:call("DELEX", "k", "IFEQ", "x"))
        assert.equal(0, a:call("DELEX", "k", "ifne", "v"))
        assert.equal(1, a:call("DELEX", "k", "IFNE", "x"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("DELEX", "k", "IfEq", "v"))
        assert.equal(0, a:call("DELEX", "k", "IFEQ", "v"))
        make_hash(W, a, "h")
        assert.same(WRONGTYPE, a:call("DELEX", "h", "IFEQ", "x"))
        assert.same(SYNTAX, a:call("DELEX", "k", "IFEQ"))
        assert.same(SYNTAX, a:call("DELEX", "k", "FOO", "x"))
        assert.same(SYNTAX, a:call("DELEX", "k", "IFEQ", "x", "y"))
        assert.same(E("ERR IFDEQ and IFDNE are not supported by zkresp"),
                    a:call("DELEX", "k", "IFDEQ", "1234"))
    end)

    it("right after SET, deletes that version checking the session guard: no read", function()
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        local before = #W.ops
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        assert.same({ { sc = a.id, kind = "multi", grouped = true,
                        path = "delete " .. a:path("lock") .. ", check " .. a.K.guard_path(a.sid) ..
                               ", set " .. a.K.mark_path(a.sid, a:path("lock")) } },
                    { table.unpack(W.ops, before + 1) })
    end)

    it("compares against a fresh read when the key is not in the cache", function()
        b:call("SET", "lock", "tok", "NX", "PX", "30000")
        local before = #W.ops
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        local kinds = {}
        for i = before + 1, #W.ops do
            if W.ops[i].sc == a.id then kinds[#kinds + 1] = W.ops[i].kind end
        end
        -- b owns the node: a reads the node's mark of b's, then the node
        -- again, and bumps b's guard (b's cache) and that mark at the
        -- version it read in the same multi
        assert.same({ "get", "exists", "get", "multi" }, kinds)
        assert.equal("delete " .. a:path("lock") .. ", set " .. a.K.guard_path(b.sid) ..
                     ", set " .. a.K.mark_path(b.sid, a:path("lock")), W.ops[#W.ops].path)
    end)

    describe("with the owned-key cache on", function()
        local K
        before_each(function()
            K = a.K
            K.CACHE_WRITES = true
        end)

        it("releases an owned lock with one multi, no watch left on the node", function()
            a:call("SET", "lock", "tok", "NX", "PX", "30000")
            W:advance(5)
            local before = #W.ops
            assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
            assert.same({ { sc = a.id, kind = "multi", grouped = true,
                            path = "delete " .. a:path("lock") .. ", check " .. K.guard_path(a.sid) ..
                                   ", set " .. K.mark_path(a.sid, a:path("lock")) } },
                        { table.unpack(W.ops, before + 1) })
            for i = 1, #W.ops do
                assert.is_false(W.ops[i].kind == "exists" and W.ops[i].path == a:path("lock"))
            end
        end)

        it("falls back to a fresh read when the cached version is stale", function()
            a:call("SET", "lock", "tok", "NX", "PX", "30000")
            W:advance(5)
            local n = W:node(a:path("lock"))
            W:raw_set(a:path("lock"), n.data) -- same value, version 1
            assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
            assert.is_nil(W:node(a:path("lock")))
        end)

        it("a lock deleted elsewhere and re-created at version 0 is not ours to delete", function()
            a:call("SET", "lock", "tok", "NX", "PX", "30000")
            W:advance(5) -- armed
            -- b deletes it (an operator's DEL) and takes it with the same
            -- token text: a fresh node at version 0, the version a cached.
            assert.equal(1, b:call("DEL", "lock"))
            assert.same(OK, b:call("SET", "lock", "tok", "NX", "PX", "30000"))
            local n = W:node(a:path("lock"))
            assert.equal(0, n.stat.version)
            assert.equal(b.sid, n.stat.ephemeralOwner)
            -- b's DEL bumped a's guard: a's DELIFEQ cannot go by its cache
            -- (at most its guard check fails) and reads the node.
            assert.equal(1, W:node(K.guard_path(a.sid)).stat.version)
            local before = #W.ops
            assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
            local read = false
            for i = before + 1, #W.ops do
                if W.ops[i].sc == a.id and W.ops[i].kind == "get" then read = true end
            end
            assert.is_true(read)
            -- (it deleted b's node after reading it: equal tokens, as Redis)
            W:advance(5)
            assert.same(OK, b:call("SET", "lock", "tok2", "NX", "PX", "30000"))
            W:advance(5)
            assert.equal(0, a:call("DELIFEQ", "lock", "tok"))
            assert.equal("tok2", b:call("GET", "lock"))
        end)

        it("confirms a cached mismatch with a fresh read", function()
            a:call("SET", "lock", "tok", "NX", "PX", "30000")
            W:advance(5)
            local before = #W.ops
            assert.equal(0, a:call("DELIFEQ", "lock", "wrong"))
            assert.equal("get", W.ops[#W.ops].kind)
            assert.is_true(#W.ops > before)
            assert.is_not_nil(W:node(a:path("lock")))
        end)
    end)

    it("GET after another sidecar's DEL never answers from the owner's cache", function()
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        W:advance(5) -- armed
        assert.equal(1, b:call("DEL", "lock"))
        -- no time passes: a's watch event is still on its way
        assert.equal(null, a:call("GET", "lock"))
    end)

    it("never deletes a lock that another sidecar re-created", function()
        a:call("SET", "lock", "tokA", "NX", "PX", "30000")
        W:advance(5) -- a's cache entry stands: only its guard can save it
        -- b overwrites it (a plain SET): the node is now b's, version 0.
        assert.same(OK, b:call("SET", "lock", "tokB", "PX", "30000"))
        assert.equal(0, a:call("DELIFEQ", "lock", "tokA"))
        assert.equal("tokB", b:call("GET", "lock"))
        -- and the owner's stale cache does not let a set slip through either
        assert.equal(0, a:call("DELEX", "lock", "IFEQ", "tokA"))
        assert.equal(1, a:call("DELIFEQ", "lock", "tokB"))
    end)
end)
