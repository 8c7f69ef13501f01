-- The session mark (guard.lua): a write to another session's node reads
-- that session's guard and mark, then the node, and lands only while
-- neither moved; the owner bumps its mark with each removal of its own.
-- So a write delayed on its way can never land on a node the owner made
-- since at the version the writer read.

local S = require "world"
local OK, null = S.OK, S.null

local REDIS_PY_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) " ..
                         "else return 0 end"
local RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) " ..
              "else return 0 end"

-- Client 1 holds "lock" = t1 through b (b's session owns the node, version
-- 0) and sends `cmd` through a, whose write is slow to land (700 ms).
-- Meanwhile `between(W, b, c)` removes t1's node and b gives the key to
-- client 2 (t2, a new node of b's session, at version 0 again).  Returns
-- the world, the sidecars and the command's answer.
local function delayed(cmd, between)
    local W, a, b, c = S.world(3)
    assert.same(OK, b:call("SET", "lock", "t1", "NX", "PX", "1000"))
    W:advance(500)
    if cmd[1] == "EVAL" then a:call("SCRIPT", "LOAD", cmd[2]) end -- (its publication is a multi too)
    a:fail_next({ op = "multi", pass = true, latency = 700 })
    local t = a:start(table.unpack(cmd))
    W:advance(10) -- a has read t1 (and b's guard and mark) and sent its write
    between(W, b, c)
    assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
    assert.equal(0, W:node(b:path("lock")).stat.version)
    W:run_until(function() return t.done end)
    return W, a, b, c, t.result
end

-- client 2 still holds the lock as it took it: nobody else may take it.
-- (A PEXPIRE asks for no value: run again after t2 came, it moves t2's
-- TTL, as it would in Redis; only t2's value must stay.)
local function t2_holds(W, b, c, cmd)
    assert.equal("t2", c:call("GET", "lock"))
    if cmd[1] == "PEXPIRE" then return end
    assert.equal(null, c:call("SET", "lock", "t3", "NX", "PX", "30000"))
    local n = W:node(b:path("lock"))
    assert.equal(b.sid, n.stat.ephemeralOwner)
    local pttl = c:call("PTTL", "lock")
    assert.is_true(pttl > 25000 and pttl <= 30000, "t2's TTL moved: " .. tostring(pttl))
end

local expires = function(W) W:advance(600) end -- b's expiry deletes t1's node at its TTL
local released = function(_, b) assert.equal(1, b:call("DELIFEQ", "lock", "t1")) end
local deleted = function(_, _, c) assert.equal(1, c:call("DEL", "lock")) end

describe("a write through another sidecar than the key's owner", function()
    local cases = {
        { "DELIFEQ", { "DELIFEQ", "lock", "t1" } },
        { "redis-py's release script", { "EVAL", REDIS_PY_RELEASE, "1", "lock", "t1" } },
        { "a renewal script", { "EVAL", RENEW, "1", "lock", "t1", "60000" } },
        { "PEXPIRE", { "PEXPIRE", "lock", "60000" } },
    }
    local befores = {
        { "the owner's expiry (its mark)", expires },
        { "a release through the owner (its mark)", released },
        { "a DEL through a third sidecar (the guard, bumped at the version read)", deleted },
    }
    for _, case in ipairs(cases) do
        for _, before in ipairs(befores) do
            it(case[1] .. " never lands on the node made after " .. before[1], function()
                local W, _, b, c = delayed(case[2], before[2])
                t2_holds(W, b, c, case[2])
            end)
        end
    end

    it("answers as if it came after: DELIFEQ then finds t2 and deletes nothing", function()
        local _, _, _, _, answer = delayed({ "DELIFEQ", "lock", "t1" }, expires)
        assert.equal(0, answer)
    end)
end)

describe("the session marks", function()
    it("are ephemeral nodes of the session, made before its guard", function()
        local W, a = S.world(1)
        local g = W:node(a.K.guard.path)
        local names = {}
        for _, name in ipairs(W:children("/zkresp/m")) do
            if not name:find("^p%.") then names[#names + 1] = name end -- (the persistent marks)
        end
        assert.equal(a.K.MARKS, #names)
        for n = 0, a.K.MARKS - 1 do
            local m = W:node(("/zkresp/m/%016x.%d"):format(a.sid, n))
            assert.is_not_nil(m)
            assert.equal(a.sid, m.stat.ephemeralOwner)
            assert.is_true(m.stat.czxid < g.stat.czxid)
        end
    end)

    it("take a node's removal by the session's own hand, never conditionally", function()
        local W, a = S.world(1)
        local function mark(key) return W:node(a.K.mark_path(a.sid, a:path(key))).stat.version end
        -- keys whose nodes hash to three different marks
        local keys, seen = {}, {}
        for i = 1, 1000 do
            local m = a.K.mark_path(a.sid, a:path("lock" .. i))
            if not seen[m] then
                seen[m] = true
                keys[#keys + 1] = "lock" .. i
            end
            if #keys == 3 then break end
        end
        local v0 = {}
        for i, key in ipairs(keys) do
            v0[i] = mark(key)
            assert.same(OK, a:call("SET", key, "t", "NX", "PX", "30000"))
        end
        -- three releases at once: one group, no conflict among them
        local ts = {}
        for i, key in ipairs(keys) do ts[i] = a:start("DELIFEQ", key, "t") end
        W:run_until(function() return ts[1].done and ts[2].done and ts[3].done end)
        for i = 1, 3 do
            assert.equal(1, ts[i].result)
            assert.equal(v0[i] + 1, mark(keys[i]))
        end
        -- and an expiry
        assert.same(OK, a:call("SET", keys[1], "v", "PX", "100"))
        W:advance(200)
        assert.is_nil(W:node(a:path(keys[1])))
        assert.equal(v0[1] + 2, mark(keys[1]))
        -- the owner's cache stands across its own bumps: a pair is still
        -- a create and one multi
        local from = #W.ops + 1
        assert.same(OK, a:call("SET", keys[2], "t", "NX", "PX", "30000"))
        assert.equal(1, a:call("DELIFEQ", keys[2], "t"))
        local kinds = {}
        for i = from, #W.ops do
            if not S.script_cache_op(W.ops[i]) then kinds[#kinds + 1] = W.ops[i].kind end
        end
        assert.same({ "create", "multi" }, kinds)
    end)

    it("cost nothing to a script that reads another session's key and writes nothing", function()
        local W, a, b = S.world(2)
        assert.same(OK, b:call("SET", "lock", "t1", "NX", "PX", "30000"))
        local from = #W.ops + 1
        -- a waiter's try (Redisson's acquire when held: the TTL, no write)
        local try = "if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[1]) " ..
                    "return false end return redis.call('pttl', KEYS[1])"
        local pttl = a:call("EVAL", try, "1", "lock", "t9")
        assert.is_true(pttl > 0)
        for i = from, #W.ops do
            local op = W.ops[i]
            -- (a guard or a session mark: not the persistent mark its
            -- presumed create would have bumped)
            assert.is_false(op.sc == a.id and (op.path:find("/g/", 1, true) or op.path:find("/m/%x+%.")) ~= nil,
                            op.kind .. " " .. op.path)
        end
    end)

    it("are left out for an owner that has a guard and no marks (an older zkresp)", function()
        local W, a, b = S.world(2)
        assert.same(OK, b:call("SET", "lock", "t1", "NX", "PX", "30000"))
        W:raw_delete(b.K.mark_path(b.sid, a:path("lock")))
        assert.equal(1, a:call("DELIFEQ", "lock", "t1"))
        assert.is_nil(W:node(a:path("lock")))
        assert.equal("delete " .. a:path("lock") .. ", set " .. b.K.guard.path, W.ops[#W.ops].path)
    end)

    it("are read again when the one checked moved between the reads and the write", function()
        local W, a, b = S.world(2)
        assert.same(OK, b:call("SET", "lock", "t1", "NX", "PX", "30000"))
        -- another key of b's on the same mark
        local other
        for i = 1, 1000 do
            if b.K.mark_path(b.sid, a:path("o" .. i)) == b.K.mark_path(b.sid, a:path("lock")) then
                other = "o" .. i
                break
            end
        end
        assert.same(OK, b:call("SET", other, "x", "NX", "PX", "30000"))
        -- b removes that node of its own while a's write is on its way
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local t = a:start("DELIFEQ", "lock", "t1")
        W:advance(10)
        local v = W:node(b.K.mark_path(b.sid, a:path("lock"))).stat.version
        assert.equal(1, b:call("DELIFEQ", other, "x"))
        assert.equal(v + 1, W:node(b.K.mark_path(b.sid, a:path("lock"))).stat.version)
        W:run_until(function() return t.done end)
        assert.equal(1, t.result) -- t1 was still there: the next attempt deleted it
        assert.is_nil(W:node(a:path("lock")))
    end)
end)

-- Found in review (2026-12-05), each failing before its fix.
describe("the session marks, in review", function()
    it("keep a new session's nodes from being made before its marks", function()
        local W, _, b = S.world(2)
        -- b's session is replaced; the new one's marks are slow to come
        b:lose({ gap = true, expire_old = true })
        b:fail_next({ op = "multi", pass = true, latency = 300 })
        b.sid = W:new_session()
        b.connected = true
        W:spawn(b, b.M.on_session, "new", b.sid) -- not waited for
        local t = b:start("SET", "lock", "t1", "NX", "PX", "30000")
        W:advance(100)
        assert.is_nil(W:node(b:path("lock")), "a node of b's before its marks")
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        local m = W:node(b.K.mark_path(b.sid, b:path("lock")))
        assert.is_not_nil(m)
        assert.equal(b.sid, m.stat.ephemeralOwner)
    end)

    it("let concurrent releases of one owner's locks through another sidecar all succeed", function()
        -- (the guard bumped at a version read made them conflict, 47 of
        -- 150 ending in TRYAGAIN; a mark is shared by 1 in 64)
        local W, a, b = S.world(2, { latency = 3 })
        local n = 150
        for i = 1, n do assert.same(OK, b:call("SET", "lock" .. i, "t", "NX", "PX", "60000")) end
        local ts = {}
        for i = 1, n do ts[i] = a:start("DELIFEQ", "lock" .. i, "t") end
        W:run_until(function()
            for i = 1, n do if not ts[i].done then return false end end
            return true
        end)
        for i = 1, n do assert.equal(1, ts[i].result) end
    end)

    it("guard a script's check of a lock of one of our own earlier sessions", function()
        local fenced = "if redis.call('get', KEYS[1]) == ARGV[1] then " ..
                       "redis.call('set', KEYS[2], ARGV[2]) return 1 end return 0"
        local W, a, _, c = S.world(3)
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        a:call("SCRIPT", "LOAD", fenced)
        local old = a:lose() -- given up; ZooKeeper has not ended it yet
        -- client 1's fenced write through a, its commit slow to land
        a:fail_next({ op = "multi", pass = true, latency = 700 })
        local t = a:start("EVAL", fenced, "2", "lock", "resource", "t1", "client1")
        W:advance(20)
        W:expire_session(old)
        assert.same(OK, c:call("SET", "lock", "t2", "NX", "PX", "30000"))
        assert.equal(0, W:node(a:path("lock")).stat.version)
        W:run_until(function() return t.done end)
        assert.equal(0, t.result)
        assert.equal(null, c:call("GET", "resource"))
    end)

    it("tell a lost DEL through another sidecar from the owner's own removal", function()
        local W, a, b = S.world(2)
        assert.same(OK, b:call("SET", "k", "v", "PX", "30000"))
        -- a's multi is lost with the connection, not applied
        a:fail_next({ op = "multi", latency = 50, rc = S.codes.CONNECTIONLOSS })
        local t = a:start("DEL", "k")
        W:advance(20)
        assert.equal(1, b:call("DEL", "k")) -- the owner's
        W:run_until(function() return t.done end)
        assert.equal(0, t.result)
    end)

    it("keep a command that came between two sessions from making its node before the marks", function()
        local W, _, b = S.world(2)
        b:lose({ gap = true, expire_old = true })
        local t = b:start("SET", "lock", "t1", "NX", "PX", "30000")
        W:advance(10) -- parked, waiting for the next session
        b:fail_next({ op = "multi", pass = true, latency = 300 }) -- its marks, slow
        b:next_session()
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        local node = W:node(b:path("lock"))
        local mark = W:node(b.K.mark_path(b.sid, b:path("lock")))
        assert.is_true(mark.stat.czxid < node.stat.czxid)
    end)

    it("are read at once for a DEL of keys held through several sidecars", function()
        -- (one after another, 512 marks at a 5 ms round trip ran past the
        -- command's time)
        local owners, sidecars = 8, {}
        for i = 1, owners + 1 do sidecars[i] = {} end
        local W = S.world(sidecars, { latency = 5 })
        local a = W.sidecars[1]
        local keys = {}
        for o = 1, owners do
            local sc, seen, n, i = W.sidecars[o + 1], {}, 0, 0
            while n < 64 do -- one key on each of the owner's 64 marks
                i = i + 1
                local key = ("o%d_%d"):format(o, i)
                local m = sc.K.mark_path(sc.sid, sc:path(key))
                if not seen[m] then
                    seen[m], n = true, n + 1
                    assert.same(OK, sc:call("SET", key, "v", "PX", "600000"))
                    keys[#keys + 1] = key
                end
            end
        end
        local t = a:start("DEL", table.unpack(keys))
        W:run_until(function() return t.done end)
        assert.equal(#keys, t.result)
    end)
end)

describe("a command of several multis over another sidecar's marks", function()
    -- b holds n keys (their TTL far off); returns the world, a, b and the keys.
    local function held(n)
        local W, a, b = S.world(2)
        local keys = {}
        for i = 1, n do
            keys[i] = "k" .. i
            assert.same(OK, b:call("SET", keys[i], "v", "PX", "600000"))
        end
        return W, a, b, keys
    end

    -- A command in database db.
    local function in_db(sc, db, ...)
        local args = { ... }
        return sc:run(function() return sc.M.dispatch(args, false, db) end)
    end

    -- (each multi bumps the marks it names: the next multi of the same
    -- command bumps them from there, not from the version it first read)
    it("deletes every key of a DEL in parts", function()
        local W, a, _, keys = held(1200) -- parts of 1000
        assert.equal(1200, a:call("DEL", table.unpack(keys)))
        assert.same({}, W:children("/zkresp/k"))
    end)

    it("reads each mark once for a DEL in many parts", function()
        local W, a, _, keys = held(300)
        a.K.MULTI_MAX = 100
        local from = #W.ops + 1
        assert.equal(300, a:call("DEL", table.unpack(keys)))
        local reads = 0
        for i = from, #W.ops do
            if W.ops[i].sc == a.id and W.ops[i].kind == "exists" then reads = reads + 1 end
        end
        assert.is_true(reads <= 64, reads .. " reads of 64 marks")
    end)

    it("empties the database with FLUSHDB", function()
        local W, a = held(1200) -- batches of 1000
        assert.same(OK, a:call("FLUSHDB"))
        assert.same({}, W:children("/zkresp/k"))
    end)

    it("empties every database with FLUSHALL", function()
        local W, a, b = S.world(2)
        for i = 1, 100 do
            assert.same(OK, in_db(b, 0, "SET", "k" .. i, "v", "PX", "600000"))
            assert.same(OK, in_db(b, 1, "SET", "k" .. i, "v", "PX", "600000"))
        end
        assert.same(OK, in_db(a, 0, "FLUSHALL"))
        assert.same({}, W:children("/zkresp/k"))
        assert.same({}, W:children("/zkresp/db/1/k"))
    end)

    it("reads again at once every mark of a multi that found one moved", function()
        -- 30 of b's keys on 30 marks, and a second key of b on each mark,
        -- which b deletes while a's DEL of the first 30 is on its way
        local W, a, b = S.world(2)
        local firsts, seconds, on = {}, {}, {}
        local i = 0
        while #firsts < 30 do
            i = i + 1
            local m = b.K.mark_path(b.sid, b:path("f" .. i))
            if not on[m] then on[m], firsts[#firsts + 1] = true, "f" .. i end
        end
        local j = 0
        for _, k in ipairs(firsts) do
            local m = b.K.mark_path(b.sid, b:path(k))
            repeat j = j + 1 until b.K.mark_path(b.sid, b:path("g" .. j)) == m
            seconds[#seconds + 1] = "g" .. j
        end
        for n = 1, 30 do
            assert.same(OK, b:call("SET", firsts[n], "v", "PX", "600000"))
            assert.same(OK, b:call("SET", seconds[n], "v", "PX", "600000"))
        end
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local t = a:start("DEL", table.unpack(firsts))
        W:advance(10)
        assert.equal(30, b:call("DEL", table.unpack(seconds)))
        W:run_until(function() return t.done end)
        assert.equal(30, t.result)
    end)
end)

describe("the guard's directories", function()
    it("are made when <root>/m is there and <root>/g is not", function()
        local W = S.world(0)
        W:raw_create("/zkresp", "")
        W:raw_create("/zkresp/m", "")
        local a = W:sidecar()
        a:call("SET", "lock", "t1", "NX", "PX", "30000") -- (may come before the guard)
        W:advance(5000)
        assert.same(OK, a:call("SET", "lock2", "t1", "NX", "PX", "30000"))
        assert.is_not_nil(W:node("/zkresp/g"))
    end)

    it("are made once a first sidecar's creates of <root>/g stop failing", function()
        local W = S.world(0)
        local a = W:sidecar({ connect = false })
        for _ = 1, 10 do a:fail_next({ op = "create", path = "/zkresp/g" }) end
        a.connected = true
        a:event("connected")
        a.faults = {}
        W:advance(5000)
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
    end)
end)
