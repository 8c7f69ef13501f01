-- The session guard (keyspace.lua): the owned-key cache stands for a read
-- until another sidecar removes one of our nodes, which bumps our guard in
-- the same multi; every write from the cache checks the guard.

local S = require "world"
local null = S.null

describe("session guard", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    -- The kinds of a's operations from W.ops[from] on, without the guard's
    -- own upkeep.
    local function kinds(from)
        local out = {}
        for i = from, #W.ops do
            local op = W.ops[i]
            if op.sc == a.id and op.path:sub(1, 10) ~= "/zkresp/g/" and not S.script_cache_op(op) then
                out[#out + 1] = op.kind
            end
        end
        return out
    end

    it("is an ephemeral node of the session, watched", function()
        local g = W:node(a.K.guard_path(a.sid))
        assert.is_not_nil(g)
        assert.equal(a.sid, g.stat.ephemeralOwner)
        assert.equal(0, a.K.guard.version)
        assert.equal(g.stat.czxid, a.K.guard.czxid)
    end)

    it("makes a lock pair two requests: a create and one multi", function()
        local from = #W.ops + 1
        assert.same({ ok = "OK" }, a:call("SET", "lock", "tok", "NX", "PX", "30000"))
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        assert.same({ "create", "multi" }, kinds(from))
        assert.is_nil(W:node(a:path("lock")))
    end)

    it("is bumped by another sidecar's DEL of our key, in the same multi", function()
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        assert.equal(1, b:call("DEL", "lock"))
        assert.equal("delete " .. a:path("lock") .. ", set " .. a.K.guard_path(a.sid) ..
                     ", set " .. a.K.mark_path(a.sid, a:path("lock")), W.ops[#W.ops].path)
        assert.equal(1, W:node(a.K.guard_path(a.sid)).stat.version)
        W:advance(5) -- the watch event: a learns the new version
        assert.equal(1, a.K.guard.version)
    end)

    it("keeps a stale entry from deleting the lock that replaced ours", function()
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        -- b deletes our lock and takes it with the same token text at
        -- version 0: only the guard tells the two nodes apart.
        assert.equal(1, b:call("DEL", "lock"))
        assert.same({ ok = "OK" }, b:call("SET", "lock", "tok", "NX", "PX", "30000"))
        -- Whether or not a has heard of the bump, its cached multi fails.
        local before = #W.ops
        local t = a:start("DELIFEQ", "lock", "tok")
        W:run_until(function() return t.done end)
        local reads = 0
        for i = before + 1, #W.ops do
            if W.ops[i].sc == a.id and W.ops[i].kind == "get" then reads = reads + 1 end
        end
        -- it looked before deleting (equal tokens: Redis deletes), and
        -- looked again after reading b's guard and mark
        assert.equal(2, reads)
        assert.equal(1, t.result)
    end)

    it("leaves entries written after a bump usable", function()
        a:call("SET", "old", "x", "NX", "PX", "30000")
        assert.equal(1, b:call("DEL", "old"))
        W:advance(5)
        local from = #W.ops + 1
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        assert.same({ "create", "multi" }, kinds(from))
        assert.equal("delete " .. a:path("lock") .. ", check " .. a.K.guard_path(a.sid) ..
                     ", set " .. a.K.mark_path(a.sid, a:path("lock")), W.ops[#W.ops].path)
    end)

    it("guards a script's commit from the cache (Redisson's unlock)", function()
        local unlock = "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end " ..
                       "redis.call('del', KEYS[1]) return 1"
        assert.equal(1, a:call("HINCRBY", "rlock", "id:1", "1"))
        assert.equal(1, a:call("PEXPIRE", "rlock", "30000"))
        local from = #W.ops + 1
        assert.equal(1, a:call("EVAL", unlock, "1", "rlock", "id:1"))
        assert.same({ "multi" }, kinds(from))
        local last = #W.ops
        while S.script_cache_op(W.ops[last]) do last = last - 1 end -- the EVAL's publication
        assert.equal("delete " .. a:path("rlock") .. ", check " .. a.K.guard_path(a.sid) ..
                     ", set " .. a.K.mark_path(a.sid, a:path("rlock")), W.ops[last].path)
    end)

    it("deletes a key whose owner has no guard (a zkresp without guards)", function()
        b:call("SET", "k", "v", "PX", "30000") -- a node as zkresp writes it
        local data = W:node(a:path("k")).data
        local other = W:new_session()          -- a live session that made no guard
        W:raw_delete(a:path("k"))
        W:raw_create(a:path("k"), data, other)
        assert.equal(1, b:call("DEL", "k"))
        assert.is_nil(W:node(a:path("k")))
    end)

    it("is made again when deleted, and entries from before it never count", function()
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        local czxid = a.K.guard.czxid
        W:raw_delete(a.K.guard_path(a.sid))
        W:advance(5)
        local g = W:node(a.K.guard_path(a.sid))
        assert.is_not_nil(g)
        assert.is_true(g.stat.czxid > czxid)
        assert.equal(g.stat.czxid, a.K.guard.czxid)
        local from = #W.ops + 1
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        -- read afresh; the delete of our own node checks the guard as it
        -- was when the read was sent
        assert.same({ "get", "multi" }, kinds(from))
    end)

    it("a delete planned on a fresh read of our node never lands on its successor", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        a.K.CACHE_WRITES = false -- the release reads afresh
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local t = a:start("DELIFEQ", "lock", "ta")
        W:advance(W.latency + 1) -- a's read is answered; its delete is on its way
        -- b removes a's lock and takes it again: a new node at version 0,
        -- the version a read
        assert.equal(1, b:call("DEL", "lock"))
        assert.same({ ok = "OK" }, b:call("SET", "lock", "tb", "NX", "PX", "30000"))
        assert.equal(0, W:node(a:path("lock")).stat.version)
        W:run_until(function() return t.done end)
        assert.equal(0, t.result)
        assert.equal("tb", b:call("GET", "lock"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("a token-checked renewal planned on a fresh read never lands on the successor", function()
        a:call("SET", "lock", "ta", "NX", "PX", "30000")
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local t = a:start("SET", "lock", "ta", "IFEQ", "ta", "PX", "60000")
        W:advance(W.latency + 1)
        assert.equal(1, b:call("DEL", "lock"))
        assert.same({ ok = "OK" }, b:call("SET", "lock", "tb", "NX", "PX", "30000"))
        W:run_until(function() return t.done end)
        assert.equal(null, t.result)
        assert.equal("tb", b:call("GET", "lock"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("follows a new session", function()
        local old = a:expire()
        assert.is_nil(W:node(a.K.guard_path(old)))
        assert.equal(a.sid, W:node(a.K.guard_path(a.sid)).stat.ephemeralOwner)
        local from = #W.ops + 1
        a:call("SET", "lock", "tok", "NX", "PX", "30000")
        assert.equal(1, a:call("DELIFEQ", "lock", "tok"))
        assert.same({ "create", "multi" }, kinds(from))
    end)
end)

-- A guard's create must go out under the session it names: one retried
-- after the session was given up (its first try found <root>/g missing,
-- and making it outlasted the session) would name the old session and be
-- owned by the next, and other sidecars would take the old one for alive.
describe("session guard across a session change", function()
    local OK = S.OK

    -- a, the first sidecar on a fresh ensemble (<root>/g missing), loses
    -- its session S1 while making <root>/g; its next session's start has
    -- run.  Returns the world, S1 and the sidecars.
    local function lose_while_making_the_guard_dir()
        local W, a, b, c, d = S.world({ { connect = false }, { connect = false },
                                        { connect = false }, { connect = false } })
        a:fail_next({ op = "create", path = "/zkresp/g", latency = 100,
                      hook = function() a:disconnect() end })
        a.connected = true
        local started = W:spawn(a, a.M.on_session, "connected", a.sid)
        local s1 = a.sid
        W:run_until(function() return not a.connected end)
        W:advance(10)
        assert.is_falsy(started.done)
        a:lose({ gap = true }) -- its lease ran out; the server keeps S1 a while
        W:advance(10)
        a:next_session()
        W:run_until(function() return started.done end)
        W:advance(100)
        return W, s1, a, b, c, d
    end

    it("makes no guard named after a session given up", function()
        local W, s1, a = lose_while_making_the_guard_dir()
        assert.is_nil(W:node(a.K.guard_path(s1)))
        local g2 = W:node(a.K.guard_path(a.sid))
        assert.is_not_nil(g2)
        assert.equal(a.sid, g2.stat.ephemeralOwner)
    end)

    it("so another sidecar's DELIFEQ of the old session's lock leaves a newer holder's alone", function()
        local W, s1, a, b, c, d = lose_while_making_the_guard_dir()
        -- a lock of S1's (a zkresp makes none before its guard is known:
        -- an older one's, or one written with other means)
        local codec = a.require("codec")
        W:raw_create(a:path("k"), codec.encode({ type = codec.STRING, ttl = 60000, nonce = string.rep("s", 16),
                                                 payload = "v1" }), s1)
        for _, sc in ipairs({ b, c, d }) do
            sc.connected = true
            sc:event("connected")
        end
        -- b reads a's lock (S1's, alive); then the server ends S1, its node
        -- goes, and c takes the key (a node at version 0 again)
        local c_reply
        b:fail_next({ op = "get", path = a:path("k"), pass = true, hook = function()
            W:expire_session(s1)
            c_reply = c:call("SET", "k", "v2", "NX", "PX", "60000")
        end })
        assert.equal(0, b:call("DELIFEQ", "k", "v1"))
        assert.same(OK, c_reply)
        assert.equal(null, d:call("SET", "k", "v3", "NX", "PX", "60000"))
    end)
end)
