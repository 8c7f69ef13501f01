-- The data types' non-idempotent commands whose write's reply was lost
-- (applied: "after", or not: "before"), with or without another sidecar's
-- write of the key while the sidecar looks, and writes that applied under
-- a session given up (the lease ran out while they were on their way).
-- What must hold: each answer is what exactly one application did and
-- agrees with the store (the final state is a sequential run of the same
-- commands in the applied order), or TRYAGAIN when the outcome is unknown
-- and running again could apply it twice.  (INCR and a plain LPOP are
-- lost_nonidempotent_spec's.)
local S = require "world"
local OK, UNAVAILABLE = S.OK, S.UNAVAILABLE

local BOTH_LISTS = "return {redis.call('lrange', KEYS[1], 0, -1), redis.call('lrange', KEYS[2], 0, -1)}"
local BOTH_SETS = "local s, d = redis.call('smembers', KEYS[1]), redis.call('smembers', KEYS[2]) " ..
                  "table.sort(s) table.sort(d) return {s, d}"

-- A set's members, sorted.
local function members(sc, key)
    local r = sc:call("SMEMBERS", key)
    local out = table.move(r.set or r, 1, #(r.set or r), 1, {})
    table.sort(out)
    return out
end

-- A world of two warmed sidecars; b writes the setup, a reads its keys
-- (so that a's records come from ZooKeeper: czxid known, nothing presumed).
local function world(setup)
    local W, a, b = S.warm_world(2)
    for _, c in ipairs(setup or {}) do b:call(table.unpack(c)) end
    for _, c in ipairs(setup or {}) do a:call("TYPE", c[2]) end
    return W, a, b
end

-- a runs cmd, its write (a multi: the in-place write and its mark's
-- check, or a commit) applying or not (when), its reply lost and its look
-- slow; meanwhile between() runs.  Returns a's answer.
local function lost(W, a, when, between, ...)
    a:fail_next({ op = "multi", when = when, latency = 5 })
    a:fail_next({ op = "sync", pass = true, latency = 50 })
    local t = a:start(...)
    W:advance(20)
    if between then between() end
    W:run_until(function() return t.done end)
    assert.equal(0, #a.faults) -- (both faults were met)
    a.faults = {}
    return t.result
end

describe("a lost reply, nobody else writing: answered once, applied once", function()
    -- { setup, command, its answer, a read, what it reads }
    local cases = {
        { { { "HSET", "h", "f", "5" } }, { "HINCRBYFLOAT", "h", "f", "1.5" }, "6.5", { "HGET", "h", "f" }, "6.5" },
        { { { "HSET", "h", "f", "5" } }, { "HSETNX", "h", "g", "v" }, 1, { "HMGET", "h", "f", "g" }, { "5", "v" } },
        { { { "HSET", "h", "f", "5", "g", "1" } }, { "HDEL", "h", "f", "g", "x" }, 2, { "EXISTS", "h" }, 0 },
        { { { "RPUSH", "l", "a", "b", "c" } }, { "RPOP", "l", "2" }, { "c", "b" }, { "LRANGE", "l", "0", "-1" }, { "a" } },
        { { { "RPUSH", "l", "a", "b" } }, { "LPOP", "l", "5" }, { "a", "b" }, { "EXISTS", "l" }, 0 },
        { { { "RPUSH", "l", "a", "b", "a" } }, { "LREM", "l", "1", "a" }, 1, { "LRANGE", "l", "0", "-1" }, { "b", "a" } },
        { { { "RPUSH", "l", "a", "b" } }, { "LINSERT", "l", "BEFORE", "b", "x" }, 3, { "LRANGE", "l", "0", "-1" }, { "a", "x", "b" } },
        { { { "RPUSH", "s", "a", "b", "c" } }, { "LMOVE", "s", "s", "LEFT", "RIGHT" }, "a", { "LRANGE", "s", "0", "-1" }, { "b", "c", "a" } },
        { { { "RPUSH", "s", "a" }, { "RPUSH", "d", "z" } }, { "RPOPLPUSH", "s", "d" }, "a",
          { "EVAL", BOTH_LISTS, "2", "s", "d" }, { {}, { "a", "z" } } },
        { { { "SADD", "s", "a", "b" }, { "SADD", "d", "z" } }, { "SMOVE", "s", "d", "a" }, 1,
          { "EVAL", BOTH_SETS, "2", "s", "d" }, { { "b" }, { "a", "z" } } },
        { { { "ZADD", "z", "1", "a" } }, { "ZADD", "z", "INCR", "2", "a" }, S.D(3), { "ZSCORE", "z", "a" }, S.D(3) },
        { { { "ZADD", "z", "1", "a" } }, { "ZADD", "z", "GT", "CH", "5", "a", "1", "b" }, 2, { "ZRANGE", "z", "0", "-1" }, { "b", "a" } },
        { { { "SADD", "s1", "a", "b" }, { "SADD", "s2", "b" } }, { "SINTERSTORE", "d", "s1", "s2" }, 1, { "EVAL", BOTH_SETS, "2", "d", "s2" }, { { "b" }, { "b" } } },
        { { { "SET", "k", "1.5" } }, { "INCRBYFLOAT", "k", "1" }, "2.5", { "GET", "k" }, "2.5" },
        { { { "SET", "k", "abc" } }, { "GETSET", "k", "n" }, "abc", { "GET", "k" }, "n" },
        { { { "SET", "k", "abc" } }, { "SETRANGE", "k", "4", "z" }, 5, { "GET", "k" }, "abc\0z" },
    }
    for _, when in ipairs({ "after", "before" }) do
        for _, c in ipairs(cases) do
            it(table.concat(c[2], " ") .. " (" .. when .. ")", function()
                local W, a, b = world(c[1])
                local r = lost(W, a, when, nil, table.unpack(c[2]))
                assert.same(c[3], r)
                assert.same(c[5], b:call(table.unpack(c[4])))
            end)
        end
    end
end)

describe("a lost reply that applied, then b's write of the key", function()
    -- a's answer must be its own (after its write, before b's) or TRYAGAIN;
    -- the store has both writes, a's once.
    it("HSETNX: never 0 for the field it set", function()
        local W, a, b = world({ { "HSET", "h", "f", "5" } })
        local r = lost(W, a, "after", function() assert.equal(1, b:call("HSET", "h", "z", "1")) end,
                       "HSETNX", "h", "g", "v")
        assert.is_true(r == 1 or S.tryagain(r), S.show(r))
        assert.same({ "5", "v", "1" }, b:call("HMGET", "h", "f", "g", "z"))
    end)

    it("RPOP with a count: the elements popped are answered or reported unknown, not popped again", function()
        local W, a, b = world({ { "RPUSH", "l", "a", "b", "c" } })
        local r = lost(W, a, "after", function() assert.equal(2, b:call("RPUSH", "l", "y")) end, "RPOP", "l", "2")
        assert.is_true(S.tryagain(r) or (type(r) == "table" and r[1] == "c" and r[2] == "b"), S.show(r))
        assert.same({ "a", "y" }, b:call("LRANGE", "l", "0", "-1"))
    end)

    it("LMOVE of the source's last element, then b pushes onto the destination: moved once", function()
        local W, a, b = world({ { "RPUSH", "s", "a" } })
        local r = lost(W, a, "after", function() assert.equal(2, b:call("RPUSH", "d", "y")) end,
                       "LMOVE", "s", "d", "LEFT", "RIGHT")
        assert.is_true(r == "a" or S.tryagain(r), S.show(r))
        assert.same({ {}, { "a", "y" } }, b:call("EVAL", BOTH_LISTS, "2", "s", "d"))
    end)

    it("SPOP: the member popped is answered or reported unknown, one member gone", function()
        local W, a, b = world({ { "SADD", "s", "a", "b", "c" } })
        local r = lost(W, a, "after", function() assert.equal(1, b:call("SADD", "s", "z")) end, "SPOP", "s")
        assert.equal(3, #members(b, "s"))
        if not S.tryagain(r) then assert.equal(0, b:call("SISMEMBER", "s", r)) end
    end)

    it("ZPOPMIN: the member popped is not popped twice", function()
        local W, a, b = world({ { "ZADD", "z", "1", "a", "2", "b" } })
        local r = lost(W, a, "after", function() assert.equal(1, b:call("ZADD", "z", "0", "c")) end, "ZPOPMIN", "z")
        assert.is_true(S.tryagain(r) or (type(r) == "table" and r[1] == "a"), S.show(r))
        assert.same({ "c", "b" }, b:call("ZRANGE", "z", "0", "-1"))
    end)

    it("GETDEL, then b sets the key again: answers the value it deleted", function()
        local W, a, b = world({ { "SET", "k", "abc" } })
        assert.equal("abc", lost(W, a, "after", function() assert.same(OK, b:call("SET", "k", "new")) end, "GETDEL", "k"))
        assert.equal("new", b:call("GET", "k"))
    end)
end)

describe("a lost reply that did not apply, b's write first: run again once, after it", function()
    it("SMOVE of a member b added to the destination meanwhile: 1, gone from the source", function()
        local W, a, b = world({ { "SADD", "s", "a", "b" }, { "SADD", "d", "z" } })
        assert.equal(1, lost(W, a, "before", function() assert.equal(1, b:call("SADD", "d", "a")) end,
                             "SMOVE", "s", "d", "a"))
        assert.same({ { "b" }, { "a", "z" } }, b:call("EVAL", BOTH_SETS, "2", "s", "d"))
    end)

    it("LINSERT: the length after its own insert", function()
        local W, a, b = world({ { "RPUSH", "l", "a", "b" } })
        assert.equal(4, lost(W, a, "before", function() assert.equal(3, b:call("LINSERT", "l", "BEFORE", "b", "y")) end,
                             "LINSERT", "l", "BEFORE", "b", "x"))
        assert.same({ "a", "y", "x", "b" }, b:call("LRANGE", "l", "0", "-1"))
    end)

    it("GETDEL: answers b's value", function()
        local W, a, b = world({ { "SET", "k", "abc" } })
        assert.equal("new", lost(W, a, "before", function() assert.same(OK, b:call("SET", "k", "new")) end, "GETDEL", "k"))
        assert.equal(0, b:call("EXISTS", "k"))
    end)
end)

-- A key with a TTL is an ephemeral node of its writer's session.  a's
-- write of it is on its way when a's lease runs out (partitioned longer
-- than the lease, the server still keeping the session a little longer):
-- it applies under the session given up.  Before that session ends, b
-- writes the key: its write makes the node b's (a string) or persistent
-- (a shared collection), carrying a's change on past the session.
--
-- Before the fix: a ran its command again under its new session (K.put
-- and txn.lua's commit: "the node dies with that session, run again"), on
-- b's node, which already held a's change: an INCRBY counted twice, an
-- element pushed twice, an LMOVE moving two elements for one command, and
-- the answer agreeing with none of the single runs.  After: a's answer is
-- TRYAGAIN (the outcome unknown), and its change is in the store once.
describe("a write of a live key with a TTL applied under a session given up", function()
    -- setup by a; a's cmd slow on its way; a's lease lost (the server keeps
    -- the old session); b's write; then, with expire, the old session ends.
    local function given_up(setup, cmd, between, expire)
        local W, a, b = S.warm_world(2)
        for _, c in ipairs(setup) do a:call(table.unpack(c)) end
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local t = a:start(table.unpack(cmd))
        W:advance(10)
        local old = a:lose()
        W:advance(100) -- a's write applied; a looks under its new session
        b:call(table.unpack(between))
        if expire then W:expire_session(old) end
        W:run_until(function() return t.done end, 60000)
        return t.result, b
    end

    for _, expire in ipairs({ false, true }) do
        local sfx = expire and " (the old session then ends)" or ""
        it("INCRBY then b's INCRBY: counted once" .. sfx, function()
            local r, b = given_up({ { "SET", "c", "5", "PX", "60000" } }, { "INCRBY", "c", "1" }, { "INCRBY", "c", "10" }, expire)
            assert.same(UNAVAILABLE, r) -- before: 17
            assert.equal("16", b:call("GET", "c"))
        end)

        it("RPUSH onto a list then b's RPUSH: pushed once" .. sfx, function()
            local r, b = given_up({ { "RPUSH", "l", "a" }, { "PEXPIRE", "l", "60000" } }, { "RPUSH", "l", "x" },
                                  { "RPUSH", "l", "y" }, expire)
            assert.same(UNAVAILABLE, r) -- before: 4, the list a, x, y, x
            assert.same({ "a", "x", "y" }, b:call("LRANGE", "l", "0", "-1"))
        end)

        it("HINCRBY then b's HINCRBY: counted once" .. sfx, function()
            local r, b = given_up({ { "HSET", "h", "f", "1" }, { "PEXPIRE", "h", "60000" } }, { "HINCRBY", "h", "f", "1" },
                                  { "HINCRBY", "h", "f", "10" }, expire)
            assert.same(UNAVAILABLE, r) -- before: 13
            assert.equal("12", b:call("HGET", "h", "f"))
        end)

        it("APPEND then b's APPEND: appended once" .. sfx, function()
            local r, b = given_up({ { "SET", "k", "ab", "PX", "60000" } }, { "APPEND", "k", "x" }, { "APPEND", "k", "y" }, expire)
            assert.same(UNAVAILABLE, r) -- before: 5, the string abxyx
            assert.equal("abxy", b:call("GET", "k"))
        end)

        it("LMOVE between two lists then b pushes onto both: one element moved" .. sfx, function()
            local r, b = given_up({ { "RPUSH", "s", "a", "b" }, { "PEXPIRE", "s", "60000" },
                                    { "RPUSH", "d", "z" }, { "PEXPIRE", "d", "60000" } },
                                  { "LMOVE", "s", "d", "LEFT", "RIGHT" },
                                  { "EVAL", "redis.call('rpush', KEYS[1], 'y') return redis.call('rpush', KEYS[2], 'y')", "2", "s", "d" },
                                  expire)
            assert.same(UNAVAILABLE, r) -- before: "b", and b moved too
            assert.same({ { "b", "y" }, { "z", "a", "y" } }, b:call("EVAL", BOTH_LISTS, "2", "s", "d"))
        end)
    end

    -- (kept as before: a create of an absent key runs again, the recipe's
    -- "not there: not ours"; faults_spec's SET NX)
    it("SET PX of an absent key, the session expired: runs again, OK under the new one", function()
        local W, a = S.warm_world(2)
        a:fail_next({ op = "create", pass = true, latency = 50 })
        local t = a:start("SET", "lk", "v", "PX", "60000")
        W:advance(10)
        local old = a:lose()
        W:expire_session(old)
        W:run_until(function() return t.done end, 60000)
        assert.same(OK, t.result)
        assert.equal(a.sid, W:node(a:path("lk")).stat.ephemeralOwner)
    end)
end)
