-- The key commands' replies and errors, as redis-server 7.0 answers them.

local S = require "world"
local make_hash = S.make_hash
local null, OK, E = S.null, S.OK, S.E

describe("DEL, UNLINK, EXISTS, TYPE", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("DEL counts the distinct keys that existed", function()
        a:call("SET", "a", "1")
        a:call("SET", "b", "1")
        assert.equal(2, a:call("DEL", "a", "a", "b", "c"))
        assert.equal(0, a:call("DEL", "a", "b"))
        assert.same({}, W:children("/zkresp/k"))
        a:call("SET", "u", "1")
        assert.equal(1, a:call("UNLINK", "u", "v"))
    end)

    it("DEL of several keys is one multi of versioned deletes", function()
        a:call("SET", "a", "1")
        a:call("SET", "b", "1")
        local before = #W.ops
        a:call("DEL", "a", "b")
        local last = W.ops[#W.ops]
        assert.equal("multi", last.kind)
        -- (with the checks of their persistent marks, then their bumps)
        local G = a.require("guard")
        local marks = { G.pmark_path(a:path("a")), G.pmark_path(a:path("b")) }
        table.sort(marks)
        assert.equal("delete " .. a:path("a") .. ", delete " .. a:path("b") .. ", check " .. marks[1] ..
                     ", check " .. marks[2] .. ", set " .. marks[1] .. ", set " .. marks[2], last.path)
        local writes = 0
        for i = before + 1, #W.ops do
            local op = W.ops[i]
            -- (not the reads and first-time creates of the persistent marks)
            local mark_made = op.kind == "create" and op.path:find("/m/p.", 1, true)
            if op.kind ~= "get" and op.kind ~= "exists" and not mark_made then
                writes = writes + 1
            end
        end
        assert.equal(1, writes)
    end)

    it("DEL re-reads when a key changed under it, and never deletes the newer value blindly", function()
        a:call("SET", "a", "1")
        a:call("SET", "b", "1")
        -- Another client rewrites b after our reads, before our multi.
        a:fail_next({ op = "multi", when = "before", rc = S.codes.BADVERSION,
                      hook = function() W:raw_set(a:path("b"), "raw") end })
        assert.equal(2, a:call("DEL", "a", "b"))
        assert.same({}, W:children("/zkresp/k"))
    end)

    it("EXISTS counts a key named twice twice", function()
        a:call("SET", "a", "1")
        assert.equal(2, a:call("EXISTS", "a", "a", "b"))
        assert.equal(0, a:call("EXISTS", "nokey"))
    end)

    it("TYPE answers a status reply", function()
        a:call("SET", "s", "v")
        make_hash(W, a, "h")
        assert.same({ ok = "string" }, a:call("TYPE", "s"))
        assert.same({ ok = "hash" }, a:call("TYPE", "h"))
        assert.same({ ok = "none" }, a:call("TYPE", "nokey"))
    end)
end)

describe("PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("answer 0 for a missing key, 1 when the TTL is set", function()
        assert.equal(0, a:call("PEXPIRE", "nokey", "1000"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIRE", "k", "1500"))
        assert.equal(1499, a:call("PTTL", "k"))
        assert.equal(1, a:call("EXPIRE", "k", "100"))
        assert.equal(100, a:call("TTL", "k"))
        assert.equal("v", a:call("GET", "k"))
    end)

    it("*AT take a wall-clock time", function()
        a:call("SET", "k", "v")
        local wall = math.floor(a.host.wall())
        assert.equal(1, a:call("PEXPIREAT", "k", tostring(wall + 3000)))
        local left = a:call("PTTL", "k")
        assert.is_true(left > 2990 and left <= 3000, tostring(left))
        assert.equal(1, a:call("EXPIREAT", "k", tostring(wall // 1000 + 100)))
        local ttl = a:call("TTL", "k")
        assert.is_true(ttl >= 99 and ttl <= 100)
    end)

    it("delete the key for a time in the past", function()
        a:call("SET", "k", "v")
        assert.equal(1, a:call("PEXPIRE", "k", "0"))
        assert.equal(0, a:call("EXISTS", "k"))
        assert.is_nil(W:node(a:path("k")))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("EXPIRE", "k", "-5"))
        assert.equal(0, a:call("EXISTS", "k"))
        a:call("SET", "k", "v")
        assert.equal(1, a:call("EXPIREAT", "k", "1"))
        assert.equal(0, a:call("EXISTS", "k"))
    end)

    it("honour NX, XX, GT and LT", function()
        a:call("SET", "e", "v")
        assert.equal(0, a:call("EXPIRE", "e", "10", "XX"))
        assert.equal(0, a:call("EXPIRE", "e", "10", "GT"))
        assert.equal(1, a:call("EXPIRE", "e", "10", "LT"))
        assert.equal(10, a:call("TTL", "e"))
        assert.equal(0, a:call("EXPIRE", "e", "5", "GT"))
        assert.equal(1, a:call("EXPIRE", "e", "20", "gt"))
        assert.equal(20, a:call("TTL", "e"))
        assert.equal(0, a:call("EXPIRE", "e", "30", "LT"))
        assert.equal(1, a:call("EXPIRE", "e", "15", "LT", "XX"))
        assert.equal(0, a:call("EXPIRE", "e", "30", "NX"))
        assert.equal(1, a:call("PERSIST", "e"))
        assert.equal(0, a:call("EXPIRE", "e", "30", "XX"))
        assert.equal(1, a:call("EXPIRE", "e", "30", "NX"))
    end)

    it("reject bad options and times with Redis's texts", function()
        a:call("SET", "k", "v")
        assert.same(E("ERR NX and XX, GT or LT options at the same time are not compatible"),
                    a:call("EXPIRE", "k", "10", "NX", "XX"))
        assert.same(E("ERR NX and XX, GT or LT options at the same time are not compatible"),
                    a:call("EXPIRE", "k", "10", "lt", "nx"))
        assert.same(E("ERR GT and LT options at the same time are not compatible"),
                    a:call("EXPIRE", "k", "10", "GT", "LT"))
        assert.same(E("ERR Unsupported option foo"), a:call("EXPIRE", "k", "10", "foo"))
        assert.same(E("ERR Unsupported option f"), a:call("EXPIRE", "k", "10", "f\0oo"))
        assert.same(E("ERR value is not an integer or out of range"), a:call("EXPIRE", "k", "abc"))
        assert.same(E("ERR invalid expire time in 'expire' command"),
                    a:call("EXPIRE", "k", "9223372036854775807"))
        assert.same(E("ERR invalid expire time in 'pexpire' command"),
                    a:call("PEXPIRE", "k", "9223372036854775807"))
        assert.same(E("ERR invalid expire time in 'expireat' command"),
                    a:call("EXPIREAT", "k", "9223372036854775807"))
        assert.equal(1, a:call("PEXPIREAT", "k", "9223372036854775807"))
        -- The option is checked before the key is looked up.
        assert.same(E("ERR Unsupported option foo"), a:call("EXPIRE", "nokey", "10", "foo"))
    end)

    it("work on other types too, keeping the value", function()
        make_hash(W, a, "h")
        assert.equal(1, a:call("PEXPIRE", "h", "5000"))
        assert.same({ ok = "hash" }, a:call("TYPE", "h"))
        local codec = a.require("codec")
        local v = codec.decode(W:node(a:path("h")).data)
        assert.equal("field", v.payload)
        assert.equal(5000, v.ttl)
    end)
end)

describe("PTTL, TTL, PERSIST", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("answer -2 for a missing key and -1 for a key without TTL", function()
        assert.equal(-2, a:call("PTTL", "nokey"))
        assert.equal(-2, a:call("TTL", "nokey"))
        a:call("SET", "k", "v")
        assert.equal(-1, a:call("PTTL", "k"))
        assert.equal(-1, a:call("TTL", "k"))
    end)

    it("TTL rounds to the nearest second like Redis", function()
        a:call("SET", "k", "v", "PX", "1600")
        assert.equal(2, a:call("TTL", "k"))  -- 1599 ms left: (1599 + 500) // 1000
        a:call("SET", "k", "v", "PX", "1400")
        assert.equal(1, a:call("TTL", "k"))  -- 1399 ms
        W:advance(900)
        assert.equal(0, a:call("TTL", "k"))  -- 498 ms
        assert.equal(497, a:call("PTTL", "k"))
    end)

    it("PERSIST removes the TTL once", function()
        assert.equal(0, a:call("PERSIST", "nokey"))
        a:call("SET", "k", "v", "PX", "5000")
        assert.equal(1, a:call("PERSIST", "k"))
        assert.equal(-1, a:call("PTTL", "k"))
        assert.equal(0, a:call("PERSIST", "k"))
        assert.equal("v", a:call("GET", "k"))
    end)
end)

describe("DBSIZE and KEYS", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("DBSIZE counts the nodes under <root>/k", function()
        assert.equal(0, a:call("DBSIZE"))
        a:call("SET", "a", "1")
        a:call("SET", "b", "1", "PX", "100000")
        assert.equal(2, a:call("DBSIZE"))
    end)

    it("KEYS matches the decoded names and skips expired keys", function()
        for _, k in ipairs({ "hello", "hallo", "h/llo", "", "lock:1" }) do a:call("SET", k, "v") end
        a:call("SET", "hexp", "v", "PX", "50")
        W:raw_create("/zkresp/k/not.canonical", "x") -- no key encodes to it
        local function sorted(t) table.sort(t) return t end
        assert.same({ "", "h/llo", "hallo", "hello", "hexp", "lock:1" }, sorted(a:call("KEYS", "*")))
        assert.same({ "h/llo", "hallo", "hello" }, sorted(a:call("KEYS", "h?llo")))
        assert.same({ "lock:1" }, a:call("KEYS", "lock:*"))
        -- hexp's owner has not deleted it yet: it still reads as absent.
        a.K.expire_due = function() end
        W:advance(60)
        assert.same({ "hallo", "hello" }, sorted(a:call("KEYS", "h[ae]*")))
        assert.same({}, a:call("KEYS", "hexp"))
    end)
end)

describe("DEL of many keys", function()
    it("deletes in several multis beyond MULTI_MAX and counts every key once", function()
        local W, a = S.world(1)
        a.K.MULTI_MAX = 3
        local keys = {}
        for i = 1, 8 do
            keys[i] = "k" .. i
            a:call("SET", keys[i], "v")
        end
        -- The second multi finds a key changed and the command runs again:
        -- the keys the first one deleted still count.
        local multis = 0
        a:fail_next({ op = "multi", skip = 1, when = "before", rc = S.codes.BADVERSION })
        W.ops = {}
        assert.equal(8, a:call("DEL", table.unpack(keys)))
        assert.same({}, W:children("/zkresp/k"))
        for _, op in ipairs(W.ops) do if op.kind == "multi" then multis = multis + 1 end end
        assert.equal(4, multis)  -- 3 keys, 3 (refused), then 3 + 2
    end)
end)

describe("requests over ZooKeeper's limit", function()
    local function long_keys(n, prefix)
        local keys = {}
        for i = 1, n do keys[i] = prefix .. i .. ":" .. string.rep("/", 900) end
        return keys
    end

    it("a DEL is split into multis that each fit, and counts every key", function()
        local W, a = S.world({ { config = { zk_max_request = 40000 } } })
        local keys = long_keys(60, "d") -- 2.7 KB of path each: 160 KB of deletes
        for _, k in ipairs(keys) do assert.equal("OK", a:call("SET", k, "v").ok) end
        W.ops = {}
        assert.equal(60, a:call("DEL", table.unpack(keys)))
        assert.same({}, W:children("/zkresp/k"))
        local multis = 0
        for _, op in ipairs(W.ops) do if op.kind == "multi" then multis = multis + 1 end end
        assert.is_true(multis >= 5, "multis: " .. multis)
        assert.is_nil(W.refused)
    end)

    it("a script whose commit does not fit is refused, nothing written", function()
        local W, a = S.world({ { config = { zk_max_request = 40000 } } })
        local keys = long_keys(20, "s")
        for _, k in ipairs(keys) do assert.equal("OK", a:call("SET", k, "v").ok) end
        local r = a:call("EVAL", "return redis.call('DEL', unpack(KEYS))", tostring(#keys), table.unpack(keys))
        assert.is_table(r)
        assert.matches("exceeds ZooKeeper's request limit of 40000 bytes", r.err, 1, true)
        assert.equal(20, #W:children("/zkresp/k"))
        assert.equal(1, #W.refused)
        r = a:call("EVAL", "for i = 1, 3 do redis.call('SET', KEYS[i], string.rep('x', 15000)) end return 1",
                   "3", table.unpack(keys))
        assert.matches("exceeds ZooKeeper's request limit", r.err, 1, true)
        assert.equal("v", a:call("GET", keys[1]))
        assert.equal(1, a:call("EVAL", "for i = 1, 2 do redis.call('SET', KEYS[i], string.rep('x', 15000)) end return 1",
                               "2", table.unpack(keys)))
    end)
end)

describe("databases", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    -- A command in database db (the gateway passes the connection's SELECT).
    local function in_db(s, db, ...)
        local args = { ... }
        return s:run(function() return s.M.dispatch(args, false, db) end)
    end

    it("gives database n its own znodes under <root>/db/<n>/k; database 0 keeps <root>/k", function()
        a:call("SET", "k", "zero")
        assert.same(OK, in_db(a, 3, "SET", "k", "three", "PX", "100000"))
        assert.is_not_nil(W:node("/zkresp/k/k"))
        assert.is_not_nil(W:node("/zkresp/db/3/k/k"))
        assert.equal("zero", b:call("GET", "k"))
        assert.equal("three", in_db(b, 3, "GET", "k"))
        assert.equal(null, in_db(b, 4, "GET", "k"))
        assert.equal(1, in_db(a, 3, "DBSIZE"))
        assert.same({ "k" }, in_db(b, 3, "KEYS", "*"))
        assert.same({}, in_db(b, 5, "KEYS", "*"))
    end)

    it("FLUSHDB through one sidecar empties that database on both, others stay", function()
        for i = 1, 5 do in_db(a, 2, "SET", "lock:" .. i, "t", "NX", "PX", "100000") end
        a:call("SET", "lock:1", "db0")
        assert.same(OK, in_db(b, 2, "FLUSHDB"))
        assert.same({}, W:children("/zkresp/db/2/k"))
        assert.equal(null, in_db(a, 2, "GET", "lock:3"))
        assert.same(OK, in_db(a, 2, "SET", "lock:3", "again", "NX", "PX", "100000"))
        assert.equal("db0", a:call("GET", "lock:1"))
        assert.same(OK, in_db(b, 7, "FLUSHALL"))
        assert.equal(null, a:call("GET", "lock:1"))
        assert.equal(null, in_db(a, 2, "GET", "lock:3"))
    end)
end)

describe("FLUSHDB", function()
    it("answers the error of a batch it could not delete, not OK", function()
        local W, a = S.world(1)
        for i = 1, 3 do assert.same(OK, a:call("SET", "k" .. i, "v")) end
        a:fail_next({ op = "multi", rc = S.codes.NOAUTH })
        local r = a:call("FLUSHDB")
        assert.matches("^ERR ZooKeeper denies", r.err)
        assert.equal(3, #W:children("/zkresp/k"))
    end)
end)
