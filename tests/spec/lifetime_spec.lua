-- Lifetime: a key with a TTL is an ephemeral znode owned by the session of
-- its last writer; without a TTL it is persistent; a collection with a TTL
-- written through several sidecars is shared: persistent, with its TTL.

local S = require "world"
local null, OK = S.null, S.OK

-- The operations since `from`, without the background exists that watches
-- a session guard (keyspace.lua's owned-key cache).
local function kinds(W, from)
    local out = {}
    for i = from + 1, #W.ops do
        if W.ops[i].kind ~= "exists" then out[#out + 1] = W.ops[i].kind end
    end
    return out
end

describe("lifetime", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("a key with a TTL is ephemeral, owned by the writer's session", function()
        a:call("SET", "lock", "t", "NX", "PX", "30000")
        local n = W:node(a:path("lock"))
        assert.equal(a.sid, n.stat.ephemeralOwner)
        a:call("SET", "plain", "v")
        assert.equal(0, W:node(a:path("plain")).stat.ephemeralOwner)
    end)

    it("SET NX PX on a missing key is one create", function()
        local before = #W.ops
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        assert.same({ "create" }, kinds(W, before))
    end)

    it("SET NX PX on a held key: the create fails, a read decides", function()
        a:call("SET", "lock", "t", "NX", "PX", "30000")
        local before = #W.ops
        assert.equal(null, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
        assert.same({ "create", "get" }, kinds(W, before))
        assert.equal("t", b:call("GET", "lock"))
    end)

    it("rewriting one's own ephemeral key is a versioned set in place, guarded", function()
        a:call("SET", "lock", "t", "PX", "30000")
        local czxid = W:node(a:path("lock")).stat.czxid
        local before = #W.ops
        assert.equal(1, a:call("PEXPIRE", "lock", "60000"))
        -- {set, check our guard}: a set of our node read afresh cannot land
        -- on a node someone made after removing ours
        assert.same({ "get", "multi" }, kinds(W, before))
        local n = W:node(a:path("lock"))
        assert.equal(czxid, n.stat.czxid)
        assert.equal(1, n.stat.version)
        assert.equal(a.sid, n.stat.ephemeralOwner)
    end)

    it("another sidecar's write re-creates the node under its own session, in one multi", function()
        a:call("SET", "lock", "t", "PX", "30000")
        local czxid = W:node(a:path("lock")).stat.czxid
        local before = #W.ops
        assert.equal(1, b:call("PEXPIRE", "lock", "60000"))
        -- (the node's mark of a's read between its two reads of the node)
        assert.same({ "get", "get", "multi" }, kinds(W, before))
        -- a's node was at version 0: the new one is created and set, so it
        -- starts at version 1, never at a version a knew; and a's session
        -- guard is bumped, so a's cache no longer stands for the node.
        assert.equal("delete " .. a:path("lock") .. ", create " .. a:path("lock") ..
                     ", set " .. a:path("lock") .. ", set " .. a.K.guard_path(a.sid) ..
                     ", set " .. a.K.mark_path(a.sid, a:path("lock")),
                     W.ops[#W.ops].path)
        local n = W:node(a:path("lock"))
        assert.equal(b.sid, n.stat.ephemeralOwner)
        assert.equal(1, n.stat.version)
        assert.is_true(n.stat.czxid > czxid)
        assert.equal("t", a:call("GET", "lock"))
        -- The key now lives and dies with b's session.
        W:expire_session(b.sid)
        assert.equal(null, a:call("GET", "lock"))
    end)

    it("the old owner's expiry never deletes the node another sidecar re-created", function()
        a:call("SET", "lock", "ta", "PX", "1000")
        b:call("SET", "lock", "tb", "PX", "5000") -- overwrite: b's node, version 0 again
        W:advance(2000)                           -- a's deadline passes
        assert.equal("tb", b:call("GET", "lock"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        assert.is_nil(next(a.K.owned))
    end)

    it("PERSIST makes the node persistent, PEXPIRE ephemeral again", function()
        a:call("SET", "k", "v", "PX", "30000")
        assert.equal(1, a:call("PERSIST", "k"))
        assert.equal(0, W:node(a:path("k")).stat.ephemeralOwner)
        W:expire_session(a.sid)
        assert.equal("v", b:call("GET", "k"))
        assert.equal(1, b:call("PEXPIRE", "k", "30000"))
        assert.equal(b.sid, W:node(a:path("k")).stat.ephemeralOwner)
    end)

    it("a node past version 0 is replaced by a new one at version 0, in two ops", function()
        a:call("SET", "lock", "t", "PX", "30000")
        a:call("PEXPIRE", "lock", "30000") -- version 1
        b:call("PEXPIRE", "lock", "30000")
        assert.equal("delete " .. a:path("lock") .. ", create " .. a:path("lock") ..
                     ", set " .. a.K.guard_path(a.sid) .. ", set " .. a.K.mark_path(a.sid, a:path("lock")),
                     W.ops[#W.ops].path)
        local n = W:node(a:path("lock"))
        assert.equal(0, n.stat.version)
        assert.equal(b.sid, n.stat.ephemeralOwner)
    end)

    it("SET without KEEPTTL turns a TTL key persistent", function()
        a:call("SET", "k", "v", "PX", "30000")
        b:call("SET", "k", "w")
        local n = W:node(a:path("k"))
        assert.equal(0, n.stat.ephemeralOwner)
        assert.equal(-1, a:call("PTTL", "k"))
    end)

    it("keys vanish with their sidecar's session (kill -9), others stay", function()
        a:call("SET", "lock", "t", "PX", "30000")
        a:call("SET", "data", "v")
        W:expire_session(a.sid)
        assert.equal(null, b:call("GET", "lock"))
        assert.equal("v", b:call("GET", "data"))
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
    end)

    it("closing the sidecar releases its locks at once", function()
        a:call("SET", "lock", "t", "PX", "30000")
        a:close()
        assert.same({ err = "TRYAGAIN zkresp is shutting down" }, a:call("GET", "lock"))
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
    end)

    it("follows the policy's lifetime and TTL clamp", function()
        local file = S.policy_file([[
            return {
                lifetime = function(key, type, ttl)
                    -- (the load's self-check asks about every type)
                    if key:find("^durable:") then
                        assert(type == "string")
                        return "persistent"
                    end
                    if key:find("^session:") then return "ephemeral" end
                    return ttl and "ephemeral" or "persistent"
                end,
                ttl = function(key, ms) return math.min(ms, 10000) end,
            }
        ]])
        local c = W:sidecar({ config = { policy = file } })
        c:call("SET", "durable:x", "v", "PX", "60000")
        local n = W:node(c:path("durable:x"))
        assert.equal(0, n.stat.ephemeralOwner)
        assert.equal(10000, c.require("codec").decode(n.data).ttl)
        c:call("SET", "session:y", "v")
        assert.equal(c.sid, W:node(c:path("session:y")).stat.ephemeralOwner)
        assert.equal(-1, c:call("PTTL", "session:y"))
        -- A persistent key with a TTL still expires, by its writer and for all
        -- (a few round trips after its deadline: the first use of its
        -- persistent mark makes and reads it).
        W:advance(10010)
        assert.equal(null, b:call("GET", "durable:x"))
        assert.is_nil(W:node(c:path("durable:x")))
        os.remove(file)
    end)
end)

-- A persistent key with a TTL outlives its writer's session: its writer
-- still deletes it at its deadline, in the next session, as nobody else
-- would (readers only take it for absent).
describe("a persistent key with a TTL across a session change", function()
    local W, b, c, file
    before_each(function()
        W, b = S.world(1)
        file = S.policy_file([[
            return {
                lifetime = function(key, type, ttl)
                    if key:find("^durable:") then return "persistent" end
                    return ttl and "ephemeral" or "persistent"
                end,
            }
        ]])
        c = W:sidecar({ config = { policy = file } })
    end)
    after_each(function() os.remove(file) end)

    local changes = {
        { "the server expired the session", function() c:expire() end },
        { "the session was lost", function() c:lose() end },
        { "the session was lost, the next one came later", function()
            c:lose({ gap = true })
            W:advance(500)
            c:next_session()
        end },
    }
    for _, case in ipairs(changes) do
        local name, change = case[1], case[2]
        it("is deleted at its deadline when " .. name, function()
            assert.same(OK, c:call("SET", "durable:x", "v", "PX", "2000"))
            assert.equal(0, W:node(c:path("durable:x")).stat.ephemeralOwner)
            change()
            assert.is_not_nil(W:node(c:path("durable:x")))
            W:advance(2100)
            assert.is_nil(W:node(c:path("durable:x")))
            assert.equal(0, b:call("DBSIZE"))
        end)
    end

    it("a node written again by another sidecar meanwhile stays", function()
        assert.same(OK, c:call("SET", "durable:x", "v", "PX", "2000"))
        c:lose()
        assert.same(OK, b:call("SET", "durable:x", "v2"))
        W:advance(2100)
        assert.equal("v2", b:call("GET", "durable:x"))
        assert.equal("v2", c:call("GET", "durable:x"))
    end)

    -- (settle_later remembered a node only in the session that wrote it,
    -- while the old entry's expiry, seeing another nonce, forgot the key)
    it("is deleted at its deadline when the session changed before a renewal's outcome was settled", function()
        S.warm(W, b, c)
        assert.same(OK, c:call("SET", "durable:x", "v", "PX", "3000"))
        c:fail_next({ op = "multi", when = "after", hook = function()
            W:post(function() c:disconnect() end)
        end })
        local t = c:start("PEXPIRE", "durable:x", "6000")
        W:run_until(function() return t.done end)
        assert.same(S.UNAVAILABLE, t.result)
        c:lose()
        W:advance(20000)
        assert.same(null, b:call("GET", "durable:x"))
        assert.is_nil(W:node(c:path("durable:x"))) -- was left for ever
    end)

    it("an ephemeral key's entry goes with its session", function()
        assert.same(OK, c:call("SET", "lock", "t", "PX", "2000"))
        c:expire()
        assert.is_nil(W:node(c:path("lock")))
        assert.is_nil(c.require("owned").get(c:path("lock")))
    end)
end)

-- a holds k in its owned-key cache; through b, k is deleted and made
-- again as a string, and a has not heard of its guard's bump yet (the
-- watch event is late): an answer that rests on the cached type is
-- confirmed by a read first.
describe("the owned-key cache behind a late guard event", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
        b:call("SET", "warmup", "x")
        assert.equal(1, a:call("HSET", "k", "f", "v"))
        assert.equal(1, a:call("PEXPIRE", "k", "30000"))
        assert.is_not_nil(a.K.owned[a:path("k")])
        local on_watch = a.M.on_watch
        a.M.on_watch = function(ev, path)
            if path ~= a.K.guard.path then return on_watch(ev, path) end
        end
        assert.equal(1, b:call("DEL", "k"))
        assert.same(S.OK, b:call("SET", "k", "tok", "PX", "30000"))
    end)

    it("DELIFEQ does not answer WRONGTYPE from the cache", function()
        assert.equal(1, a:call("DELIFEQ", "k", "tok"))
    end)

    it("a script that fails on the cached type runs again, reading", function()
        assert.equal("tok", a:call("EVAL", "return redis.call('GET', KEYS[1])", "1", "k"))
    end)
end)

describe("fencing tokens", function()
    it("the czxid grows with every acquisition, even before the old node is deleted", function()
        local W, a, b = S.world(2)
        local expire_due = a.K.expire_due
        a.K.expire_due = function() end -- a does not get to delete its nodes
        local last = -1
        local function take(sc, tok)
            assert.same(OK, sc:call("SET", "fk", tok, "NX", "PX", "200"))
            local n = W:node(a:path("fk"))
            assert.is_true(n.stat.czxid > last, tok)
            last = n.stat.czxid
            W:advance(201)
        end
        take(a, "t1")
        take(a, "t2")   -- re-taken on the same sidecar: a new node
        take(a, "t2b")
        -- Another sidecar takes it once its owner deleted it.
        assert.equal(null, b:call("SET", "fk", "t3", "NX", "PX", "200"))
        a.K.expire_due = expire_due
        a:run(function() a.K.expire_due(true) end)
        take(b, "t3")
        take(b, "t3b")
        take(a, "t4")
    end)

    it("a live key rewritten by its owner keeps its node", function()
        local W, a = S.world(1)
        a:call("SET", "k", "v", "PX", "1000")
        local czxid = W:node(a:path("k")).stat.czxid
        a:call("SET", "k", "w", "XX", "PX", "1000")
        assert.equal(czxid, W:node(a:path("k")).stat.czxid)
    end)
end)

-- redis-semaphore's Semaphore (a zset shared by its holders, PEXPIREd by
-- every acquire) and Redisson's RReadWriteLock (a hash of its readers):
-- one holder's sidecar dying must not free the other holders' entries.
local ACQUIRE = [[
  local key = KEYS[1]
  local limit = tonumber(ARGV[1])
  local identifier = ARGV[2]
  local lockTimeout = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])
  local expiredTimestamp = now - lockTimeout
  redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)
  if redis.call('zcard', key) < limit then
    redis.call('zadd', key, now, identifier)
    redis.call('pexpire', key, lockTimeout)
    return 1
  else
    return 0
  end]]

describe("a collection written through several sidecars (shared)", function()
    it("a permit holder's sidecar dying does not free the other holders' permits", function()
        local W, a, b, c = S.world(3)
        local now = "1000000"
        -- limit 2: X through a, Y through b
        assert.equal(1, a:call("EVAL", ACQUIRE, "1", "sem", "2", "X", "10000", now))
        assert.equal(1, b:call("EVAL", ACQUIRE, "1", "sem", "2", "Y", "10000", now))
        -- full
        assert.equal(0, c:call("EVAL", ACQUIRE, "1", "sem", "2", "Z", "10000", now))
        -- Y's pod (its sidecar with it) is killed: its session ends
        W:expire_session(b.sid)
        W:advance(10)
        -- X still holds (a lives, X's entry has 10 s left): at most one more
        local granted = 0
        for _, id in ipairs({ "Z", "V" }) do
            granted = granted + c:call("EVAL", ACQUIRE, "1", "sem", "2", id, "10000", now)
        end
        assert.is_true(granted <= 1, "X plus " .. granted .. " new holders on a semaphore of 2")
    end)

    -- Redisson's RReadWriteLock: one hash for every reader (mode=read, a
    -- field per reader), PEXPIREd by each reader's acquire.
    local READ = "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
        "if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'read'); " ..
        "redis.call('hset', KEYS[1], ARGV[2], 1); " ..
        "redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); " ..
        "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
        "if (mode == 'read') then local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
        "local key = KEYS[2] .. ':' .. ind; redis.call('set', key, 1); " ..
        "redis.call('pexpire', key, ARGV[1]); local remainTime = redis.call('pttl', KEYS[1]); " ..
        "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); return nil; end; " ..
        "return redis.call('pttl', KEYS[1]);"
    local WRITE = "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
        "if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'write'); " ..
        "redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); " ..
        "return nil; end; return redis.call('pttl', KEYS[1]);"

    it("a reader's sidecar dying does not let a writer in while another reader holds", function()
        local W, a, b, c = S.world(3)
        -- reader R1 through a, then reader R2 through b (the hash moves to b's session)
        assert.equal(S.null, a:call("EVAL", READ, "2", "rw", "{rw}:R1:rwlock_timeout", "30000", "R1"))
        assert.equal(S.null, b:call("EVAL", READ, "2", "rw", "{rw}:R2:rwlock_timeout", "30000", "R2"))
        assert.is_true(math.type(c:call("EVAL", WRITE, "1", "rw", "30000", "W1:write")) == "integer")
        W:expire_session(b.sid) -- R2's pod is killed
        W:advance(10)
        -- R1 still holds its read lock (a lives, 30 s lease): no writer
        assert.is_true(math.type(c:call("EVAL", WRITE, "1", "rw", "30000", "W1:write")) == "integer",
                       "a writer got the lock while reader R1 (through a) still holds it")
    end)
    it("a hash written through its holder's sidecar alone stays that session's (Redisson's RLock)", function()
        local W, a, b = S.world(2)
        local acquire = "if redis.call('exists', KEYS[1]) == 0 or " ..
                        "redis.call('hexists', KEYS[1], ARGV[2]) == 1 then " ..
                        "redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
                        "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
                        "return redis.call('pttl', KEYS[1]);"
        assert.equal(S.null, a:call("EVAL", acquire, "1", "rl", "30000", "X:1"))
        assert.equal(S.null, a:call("EVAL", acquire, "1", "rl", "30000", "X:1")) -- reentrant
        assert.equal("integer", math.type(b:call("EVAL", acquire, "1", "rl", "30000", "Y:1")))
        assert.equal(a.sid, W:node(a:path("rl")).stat.ephemeralOwner)
        W:expire_session(a.sid) -- its holder's pod dies: released with it
        assert.equal(S.null, b:call("EVAL", acquire, "1", "rl", "30000", "Y:1"))
    end)
end)
