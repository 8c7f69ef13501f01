-- The Node lock clients of COMPAT.md as they talk to Redis: node-redlock's
-- acquire/extend/release scripts and redis-semaphore's Mutex, Semaphore and
-- MultiSemaphore (their script texts exactly as the clients send them, by
-- EVALSHA, then EVAL on NOSCRIPT), across two or three sidecars, under
-- faults: lost commits (applied or not), -TRYAGAIN, a session given up
-- while holding, the TTL of the semaphore's zset ending around a refresh,
-- refreshes through another sidecar than the acquire, and the client clock
-- (Date.now()) the semaphore's scores come from.
--
-- Invariants: never more holders than the limit; an acquire answered 1 is
-- held; a release or refresh answers what happened; nothing is left in
-- ZooKeeper once every holder released or expired.
local S = require "world"
local null = S.null

---------------------------------------------------------------------------
-- The scripts, byte for byte.

-- node-redlock 5 (src/index.ts)
local RL_ACQUIRE = [[
  -- Return 0 if an entry already exists.
  for i, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then
      return 0
    end
  end

  -- Create an entry for each provided key.
  for i, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end

  -- Return the number of entries added.
  return #KEYS
]]
local RL_EXTEND = [[
  -- Return 0 if an entry exists with a *different* lock value.
  for i, key in ipairs(KEYS) do
    if redis.call("get", key) ~= ARGV[1] then
      return 0
    end
  end

  -- Update the entry for each provided key.
  for i, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end

  -- Return the number of entries updated.
  return #KEYS
]]
local RL_RELEASE = [[
  local count = 0
  for i, key in ipairs(KEYS) do
    -- Only remove entries for *this* lock value.
    if redis.call("get", key) == ARGV[1] then
      redis.pcall("del", key)
      count = count + 1
    end
  end

  -- Return the number of entries removed.
  return count
]]

-- redis-semaphore (src/mutex/refresh.ts, src/mutex/release.ts; the Mutex
-- acquires with SET key id PX ms NX)
local MX_REFRESH = [[
  local key = KEYS[1]
  local identifier = ARGV[1]
  local lockTimeout = ARGV[2]

  local value = redis.call('get', key)

  if value == identifier then
    redis.call('pexpire', key, lockTimeout)
    return 1
  end

  return 0
  ]]
local MX_RELEASE = [[
  local key = KEYS[1]
  local identifier = ARGV[1]

  if redis.call('get', key) == identifier then
    return redis.call('del', key)
  end

  return 0
  ]]

-- redis-semaphore's Semaphore (src/semaphore/{acquire,refresh}/lua.ts; its
-- release is a plain ZREM)
local SEM_ACQUIRE = [[
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
local SEM_REFRESH = [[
  local key = KEYS[1]
  local limit = tonumber(ARGV[1])
  local identifier = ARGV[2]
  local lockTimeout = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])
  local expiredTimestamp = now - lockTimeout

  redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)

  if redis.call('zscore', key, identifier) then
    redis.call('zadd', key, now, identifier)
    redis.call('pexpire', key, lockTimeout)
    return 1
  else
    return 0
  end]]

-- redis-semaphore's MultiSemaphore (src/multiSemaphore/*/lua.ts)
local MS_ACQUIRE = [[
  local key = KEYS[1]
  local limit = tonumber(ARGV[1])
  local permits = tonumber(ARGV[2])
  local identifier = ARGV[3]
  local lockTimeout = tonumber(ARGV[4])
  local now = tonumber(ARGV[5])
  local expiredTimestamp = now - lockTimeout
  local args = {}

  redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)

  if (redis.call('zcard', key) + permits) <= limit then
    for i=0, permits - 1 do
      table.insert(args, now)
      table.insert(args, identifier .. '_' .. i)
    end
    redis.call('zadd', key, unpack(args))
    redis.call('pexpire', key, lockTimeout)
    return 1
  else
    return 0
  end]]
local MS_REFRESH = [[
  local key = KEYS[1]
  local limit = tonumber(ARGV[1])
  local permits = tonumber(ARGV[2])
  local identifier = ARGV[3]
  local lockTimeout = tonumber(ARGV[4])
  local now = tonumber(ARGV[5])
  local expiredTimestamp = now - lockTimeout
  local args = {}

  redis.call('zremrangebyscore', key, '-inf', expiredTimestamp)

  if redis.call('zscore', key, identifier .. '_0') then
    for i=0, permits - 1 do
      table.insert(args, now)
      table.insert(args, identifier .. '_' .. i)
    end
    redis.call('zadd', key, unpack(args))
    redis.call('pexpire', key, lockTimeout)
    return 1
  else
    return 0
  end]]
local MS_RELEASE = [[
  local key = KEYS[1]
  local permits = tonumber(ARGV[1])
  local identifier = ARGV[2]
  local args = {}

  for i=0, permits - 1 do
    table.insert(args, identifier .. '_' .. i)
  end

  return redis.call('zrem', key, unpack(args))
]]

local ALL = { RL_ACQUIRE, RL_EXTEND, RL_RELEASE, MX_REFRESH, MX_RELEASE, SEM_ACQUIRE, SEM_REFRESH,
              MS_ACQUIRE, MS_REFRESH, MS_RELEASE }

---------------------------------------------------------------------------
-- Helpers

local SHA = {}
do
    local sha1 = S.module("sha1")
    for _, body in ipairs(ALL) do SHA[body] = sha1.hex(body) end
end

local show, tryagain = S.show, S.tryagain
local function noscript(r) return type(r) == "table" and r.err ~= nil and r.err:find("^NOSCRIPT") ~= nil end

-- EVALSHA, then EVAL on NOSCRIPT, as the clients do.  body, keys, args
local function ev(sc, body, keys, args)
    local argv = { "EVALSHA", SHA[body], tostring(#keys) }
    for _, k in ipairs(keys) do argv[#argv + 1] = k end
    for _, v in ipairs(args) do argv[#argv + 1] = tostring(v) end
    local r = sc:call(table.unpack(argv))
    if noscript(r) then
        argv[1], argv[2] = "EVAL", body
        r = sc:call(table.unpack(argv))
    end
    return r
end
-- The same, as a task (the scripts known already: see world()).
local function ev_start(sc, body, keys, args)
    local argv = { "EVALSHA", SHA[body], tostring(#keys) }
    for _, k in ipairs(keys) do argv[#argv + 1] = k end
    for _, v in ipairs(args) do argv[#argv + 1] = tostring(v) end
    return sc:start(table.unpack(argv))
end
local function finish(W, t)
    W:run_until(function() return t.done end)
    return t.result
end

-- n sidecars, each writing a key of its own, every script known to the
-- shared cache (its background upkeep done before a fault is armed).
local function world(n)
    local out = table.pack(S.world(n))
    local W = out[1]
    for i = 2, n + 1 do out[i]:call("SET", "warm" .. i, "x") end
    for _, body in ipairs(ALL) do
        assert.is_false(noscript(out[2]:call("EVAL", body, "1", "warmkey", "1", "1", "1", "1", "1")))
    end
    W:advance(100)
    for i = 2, n + 1 do
        for _, body in ipairs(ALL) do assert.same({ 1 }, out[i]:call("SCRIPT", "EXISTS", SHA[body])) end
    end
    out[2]:call("DEL", "warmkey")
    W:advance(100)
    return table.unpack(out, 1, n + 1)
end

-- The client clock (Date.now()): the world's, from a base.
local BASE = 1700000000000
local function now(W) return BASE + W.now end

-- A semaphore client: acquire/refresh/release of `id` on key "sem"
local LIMIT, LT = 2, 10000
local function acquire(W, sc, id, t) return ev(sc, SEM_ACQUIRE, { "sem" }, { LIMIT, id, LT, t or now(W) }) end
local function refresh(W, sc, id, t) return ev(sc, SEM_REFRESH, { "sem" }, { LIMIT, id, LT, t or now(W) }) end
local function release(sc, id) return sc:call("ZREM", "sem", id) end
local function members(sc)
    local r = sc:call("ZRANGE", "sem", "0", "-1")
    assert.is_true(type(r) == "table" and r.err == nil, show(r))
    return r
end
local function has(list, x)
    for _, v in ipairs(list) do if v == x then return true end end
    return false
end

-- No node left under the keys' directory but the warm-up keys'.
local function leftovers(W, a)
    local out = {}
    local dir = a:path("x"):match("^(.*)/[^/]*$")
    for _, name in ipairs(W:children(dir) or {}) do
        if not name:find("^warm") then out[#out + 1] = name end
    end
    return out
end

-- The next write of sc to `key`'s node (a create, set, delete or multi
-- naming its path: the command's commit) is lost: applied and its reply
-- lost (when = "after") or never applied ("before"); hook as fail_next's.
local function lose_commit(sc, key, when, hook)
    local path = sc:path(key)
    local saved, state = {}, {}
    local function restore() for k, f in pairs(saved) do sc.zk[k] = f end end
    for _, kind in ipairs({ "create", "set", "delete", "multi" }) do
        local f = sc.zk[kind]
        saved[kind] = f
        sc.zk[kind] = function(p, ...)
            local hit = p == path
            if kind == "multi" then
                for _, o in ipairs(p) do if o[2] == path then hit = true end end
            end
            if hit then
                restore()
                state.fired = kind
                sc:fail_next({ op = kind, when = when, hook = hook })
            end
            return f(p, ...)
        end
    end
    state.restore = restore
    return state
end

-- The zset's holders, read through sc (its own view), as a set.
local function holders(sc, key)
    local r = sc:call("ZRANGE", key or "sem", "0", "-1")
    assert.is_true(type(r) == "table" and r.err == nil, show(r))
    local out = {}
    for _, m in ipairs(r) do out[m] = true end
    return out, #r
end

describe("redis-semaphore Semaphore: the limit", function()
    it("three sidecars racing for two permits, ten rounds: never three holders", function()
        local W, a, b, c = world(3)
        local scs = { a, b, c }
        local held = {} -- id -> sidecar
        for round = 1, 10 do
            local ts = {}
            for i, sc in ipairs(scs) do
                local id = "r" .. round .. "-" .. i
                ts[id] = { sc = sc, t = ev_start(sc, SEM_ACQUIRE, { "sem" }, { LIMIT, id, LT, now(W) }) }
            end
            for id, x in pairs(ts) do
                local r = finish(W, x.t)
                assert.is_true(r == 1 or r == 0, show(r))
                if r == 1 then held[id] = x.sc end
            end
            local n = 0
            for _ in pairs(held) do n = n + 1 end
            assert.is_true(n <= LIMIT, "round " .. round .. ": " .. n .. " holders")
            local set, card = holders(scs[round % 3 + 1])
            assert.equal(n, card)
            for id in pairs(held) do assert.is_true(set[id], id .. " answered 1 but not in the zset") end
            -- one holder releases, through another sidecar than its own
            local id = next(held)
            if id and round % 2 == 0 then
                assert.equal(1, release(scs[(round + 1) % 3 + 1], id))
                held[id] = nil
            end
            W:advance(300)
        end
    end)

    it("a stale entry is removed by the next acquire, a live one never (another sidecar, its server lagging)",
       function()
        local W, a, b, c = world(3)
        assert.equal(1, acquire(W, a, "X"))
        W:advance(4000)
        assert.equal(1, acquire(W, b, "Y"))
        W:advance(4000)
        assert.equal(1, refresh(W, a, "X")) -- X's score now 8000
        S.lag(W, c, a:path("sem"), true)    -- c's server has not seen X's refresh
        W:advance(3000)                     -- 11000: Y (4000) alive, X (8000) alive
        assert.equal(0, acquire(W, c, "Z"))
        W:advance(3500)                     -- 14500: Y stale, X alive
        assert.equal(1, acquire(W, c, "Z"))
        local set, n = holders(b)
        assert.is_true(set.X and set.Z and not set.Y, "holders: " .. n)
        assert.equal(0, acquire(W, b, "V"))
    end)
end)

describe("redis-semaphore Semaphore: an acquire whose commit is lost", function()
    for _, pre in ipairs({ "none", "a" }) do
        for _, via in ipairs({ "a", "b" }) do
            for _, when in ipairs({ "after", "before" }) do
                for _, cut in ipairs({ false, true }) do
                    local name = "via " .. via .. " (" .. when .. (cut and ", cut off" or "") .. "), " ..
                                 (pre == "none" and "the first holder" or "X holding through a")
                    it(name .. ": answered as held, no phantom counts for ever", function()
                        local W, a, b, c = world(3)
                        if pre == "a" then assert.equal(1, acquire(W, a, "X")) end
                        W:advance(10)
                        local sc = via == "a" and a or b
                        sc:call("ZCARD", "sem") -- (its commit, not a presumed-absent create, is what is lost)
                        local lost = lose_commit(sc, "sem", when, cut and function() sc.connected = false end or nil)
                        local t = ev_start(sc, SEM_ACQUIRE, { "sem" }, { LIMIT, "Y", LT, now(W) })
                        if cut then
                            W:advance(cut and 3000 or 0)
                            sc:reconnect()
                        end
                        local r = finish(W, t)
                        assert.is_true(r == 1 or tryagain(r), show(r))
                        assert.is_not_nil(lost.fired)
                        local set, n = holders(c)
                        if r == 1 then assert.is_true(set.Y, "acquired, not in the zset") end
                        if pre == "a" then assert.is_true(set.X, "X's permit gone") end
                        -- never more than the limit, whatever is there; a phantom Y
                        -- (answered -TRYAGAIN, landed) counts as Redis would count it
                        local z = acquire(W, c, "Z")
                        assert.equal(n < LIMIT and 1 or 0, z)
                        local answered = (pre == "a" and 1 or 0) + (r == 1 and 1 or 0) + z
                        assert.is_true(answered <= LIMIT)
                        -- every holder answered releases; then nothing but stale phantoms,
                        -- gone by the zset's TTL at the latest
                        release(c, "X"); release(c, "Y"); release(a, "Z")
                        W:advance(LT + 3000)
                        assert.same({}, leftovers(W, a))
                        -- and the semaphore is whole again
                        assert.equal(1, acquire(W, b, "P"))
                        assert.equal(1, acquire(W, c, "Q"))
                        assert.equal(0, acquire(W, a, "R"))
                    end)
                end
            end
        end
    end
end)

describe("redis-semaphore Semaphore: refreshes and releases", function()
    for _, via in ipairs({ "a", "b" }) do
        for _, fault in ipairs({ "none", "after", "before" }) do
            it("refresh via " .. via .. " (" .. fault .. ") around the zset's TTL end answers what happened", function()
                local bad = {}
                for off = -40, 40, 8 do
                    local W, a, b, c = world(3)
                    assert.equal(1, acquire(W, a, "X"))
                    W:advance(LT + off - 1)
                    local sc = via == "a" and a or b
                    if fault ~= "none" then lose_commit(sc, "sem", fault) end
                    local t0 = now(W)
                    local r = finish(W, ev_start(sc, SEM_REFRESH, { "sem" }, { LIMIT, "X", LT, t0 }))
                    if r == 1 then
                        -- held: X counts until t0 + LT on every sidecar
                        for _ = 1, 8 do
                            W:advance(1000)
                            local set = holders(c)
                            if now(W) < t0 + LT and not set.X then
                                bad[#bad + 1] = off .. ": refreshed, gone at +" .. (now(W) - t0)
                                break
                            end
                        end
                        assert.equal(1, acquire(W, c, "Z"))
                        assert.equal(0, acquire(W, b, "V"))
                    elseif r == 0 then
                        -- not held: the semaphore is free for two others
                        if acquire(W, c, "Z") ~= 1 or acquire(W, b, "V") ~= 1 then
                            bad[#bad + 1] = off .. ": refresh 0, yet X counts"
                        end
                    elseif not tryagain(r) then
                        bad[#bad + 1] = off .. ": " .. show(r)
                    end
                end
                assert.same({}, bad)
            end)
        end
    end

    for _, via in ipairs({ "a", "b" }) do
        for _, when in ipairs({ "after", "before" }) do
            it("ZREM via " .. via .. " whose commit is lost (" .. when .. ") answers what it removed", function()
                local W, a, b, c = world(3)
                assert.equal(1, acquire(W, a, "X"))
                assert.equal(1, acquire(W, b, "Y"))
                W:advance(10)
                local sc = via == "a" and a or b
                sc:call("ZCARD", "sem")
                lose_commit(sc, "sem", when)
                assert.equal(1, release(sc, "X"))
                local set, n = holders(c)
                assert.equal(1, n)
                assert.is_true(set.Y)
                lose_commit(sc, "sem", when)
                assert.equal(1, release(sc, "Y"))
                assert.equal(0, release(sc, "Y"))
                W:advance(100)
                assert.same({}, leftovers(W, a))
            end)
        end
    end

    it("holders through three sidecars, each refreshing through another: the zset lives while any refreshes",
       function()
        local W, a, b, c = world(3)
        local scs = { a, b, c }
        assert.equal(1, acquire(W, a, "X"))
        assert.equal(1, acquire(W, b, "Y"))
        for i = 1, 12 do
            W:advance(LT // 3)
            assert.equal(1, refresh(W, scs[i % 3 + 1], "X"), "X round " .. i)
            assert.equal(1, refresh(W, scs[(i + 1) % 3 + 1], "Y"), "Y round " .. i)
            assert.equal(0, acquire(W, scs[(i + 2) % 3 + 1], "Z"), "Z round " .. i)
        end
        -- X releases; Y's sidecar-of-last-refresh dies; Y stops refreshing
        assert.equal(1, release(c, "X"))
        W:advance(LT + 2000)
        assert.same({}, leftovers(W, a))
    end)

    it("the last refresher's ZREMRANGEBYSCORE without a PEXPIRE: still gone at the TTL", function()
        local W, a, b, c = world(3)
        assert.equal(1, acquire(W, a, "X"))
        W:advance(2000)
        assert.equal(1, acquire(W, b, "Y"))
        W:advance(LT - 1000) -- X stale (client clock), zset's TTL 1 s on
        assert.equal(0, refresh(W, c, "X")) -- removes X, writes through c, no PEXPIRE
        local set, n = holders(a)
        assert.equal(1, n)
        W:advance(3000)
        assert.same({}, leftovers(W, a))
        assert.equal(1, acquire(W, a, "P"))
        assert.equal(1, acquire(W, b, "Q"))
    end)
end)

describe("redis-semaphore Semaphore: a holder's session given up", function()
    it("X through a, a's session given up; Y through b meanwhile: X's permit stays until its own timeout",
       function()
        local W, a, b, c = world(3)
        assert.equal(1, acquire(W, a, "X"))
        W:advance(100)
        local old = a:lose()
        W:advance(100)
        assert.equal(1, acquire(W, b, "Y"))
        W:expire_session(old)
        W:advance(100)
        local set = holders(c)
        assert.is_true(set.X and set.Y)
        assert.equal(0, acquire(W, c, "Z"))
        local r = refresh(W, a, "X")
        assert.equal(1, r)
        W:advance(LT + 2000)
        assert.same({}, leftovers(W, a))
    end)

    it("X refreshing through a while a's session is given up: never 1 for a permit that went", function()
        local W, a, b, c = world(3)
        assert.equal(1, acquire(W, a, "X"))
        W:advance(100)
        local old = a:lose()
        local t = ev_start(a, SEM_REFRESH, { "sem" }, { LIMIT, "X", LT, now(W) })
        W:advance(300)
        W:expire_session(old)
        local r = finish(W, t)
        assert.is_true(r == 0 or tryagain(r), show(r))
        assert.equal(1, acquire(W, b, "Y"))
        assert.equal(1, acquire(W, c, "Z"))
    end)
end)

describe("redis-semaphore MultiSemaphore", function()
    local function ms_acquire(W, sc, id, permits)
        return ev(sc, MS_ACQUIRE, { "ms" }, { 3, permits, id, LT, now(W) })
    end
    it("racing for 3 permits, 2 each, through three sidecars: one wins each round", function()
        local W, a, b, c = world(3)
        local scs = { a, b, c }
        for round = 1, 6 do
            local ts = {}
            for i, sc in ipairs(scs) do
                ts[i] = ev_start(sc, MS_ACQUIRE, { "ms" }, { 3, 2, "r" .. round .. i, LT, now(W) })
            end
            local wins, winner = 0, nil
            for i, t in ipairs(ts) do
                local r = finish(W, t)
                if r == 1 then wins, winner = wins + 1, i end
            end
            assert.equal(1, wins)
            local _, n = holders(a, "ms")
            assert.equal(2, n)
            assert.equal(2, ev(scs[winner % 3 + 1], MS_RELEASE, { "ms" }, { 2, "r" .. round .. winner }))
        end
        W:advance(100)
        assert.same({}, leftovers(W, a))
    end)
    for _, when in ipairs({ "after", "before" }) do
        it("release through another sidecar, its commit lost (" .. when .. "): answers 2, frees both", function()
            local W, a, b = world(2)
            assert.equal(1, ms_acquire(W, a, "X", 2))
            assert.equal(1, ms_acquire(W, b, "Y", 1))
            b:call("ZCARD", "ms")
            lose_commit(b, "ms", when)
            assert.equal(2, ev(b, MS_RELEASE, { "ms" }, { 2, "X" }))
            assert.equal(1, ms_acquire(W, a, "Z", 2))
            assert.equal(1, ev(b, MS_REFRESH, { "ms" }, { 3, 2, "Z", LT, now(W) }))
        end)
    end
end)

describe("redis-semaphore Semaphore: the client retries after -TRYAGAIN", function()
    -- acquire() rejected: the client calls it again, same identifier, at once
    for _, via2 in ipairs({ "a", "b" }) do
        for _, gap in ipairs({ 0, 200, 600, 2500 }) do
            it("first acquire lost through a (cut off), retried through " .. via2 .. " after " .. gap .. " ms",
               function()
                local W, a, b, c = world(3)
                a:call("ZCARD", "sem")
                lose_commit(a, "sem", "after", function() a.connected = false end)
                local t = ev_start(a, SEM_ACQUIRE, { "sem" }, { LIMIT, "Y", LT, now(W) })
                W:advance(3000)
                local r = finish(W, t)
                a:reconnect()
                W:advance(gap)
                local sc = via2 == "a" and a or b
                local r2 = acquire(W, sc, "Y")
                assert.is_true(r2 == 1 or tryagain(r2), show(r2))
                W:advance(5000) -- (any background settle done)
                local set, n = holders(c)
                if r2 == 1 then assert.is_true(set.Y, "Y acquired (" .. show(r) .. ", then 1), not in the zset") end
                assert.equal(1, acquire(W, c, "Z"))
                assert.equal(r2 == 1 and 0 or 1, acquire(W, b, "V"))
            end)
        end
    end
end)

describe("node-redlock", function()
    local function rl_acquire(sc, keys, value, ttl) return ev(sc, RL_ACQUIRE, keys, { value, ttl or 1000 }) end
    local function rl_extend(sc, keys, value, ttl) return ev(sc, RL_EXTEND, keys, { value, ttl or 1000 }) end
    local function rl_release(sc, keys, value) return ev(sc, RL_RELEASE, keys, { value }) end
    local K = { "r1", "r2", "r3" }

    it("three sidecars racing for three resources, ten rounds: one wins each, releases through another", function()
        local W, a, b, c = world(3)
        local scs = { a, b, c }
        for round = 1, 10 do
            local ts = {}
            for i, sc in ipairs(scs) do ts[i] = ev_start(sc, RL_ACQUIRE, K, { "v" .. round .. i, 30000 }) end
            local wins, winner = 0, nil
            for i, t in ipairs(ts) do
                local r = finish(W, t)
                assert.is_true(r == 3 or r == 0, show(r))
                if r == 3 then wins, winner = wins + 1, i end
            end
            assert.equal(1, wins)
            assert.equal(3, rl_release(scs[winner % 3 + 1], K, "v" .. round .. winner))
        end
        W:advance(100)
        assert.same({}, leftovers(W, a))
    end)

    it("one resource held by another: the acquire writes none of them", function()
        local W, a, b = world(2)
        assert.same(S.OK, b:call("SET", "r2", "other", "PX", "30000"))
        assert.equal(0, rl_acquire(a, K, "v"))
        assert.equal(0, a:call("EXISTS", "r1", "r3"))
    end)

    for _, when in ipairs({ "after", "before" }) do
        for _, cut in ipairs({ false, true }) do
            it("acquire of three whose commit is lost (" .. when .. (cut and ", cut off" or "") ..
               "): all or nothing, nothing left if not answered", function()
                local W, a, b = world(2)
                local lost = lose_commit(a, "r1", when, cut and function() a.connected = false end or nil)
                local t = ev_start(a, RL_ACQUIRE, K, { "va", 30000 })
                if cut then W:advance(3000); a:reconnect() end
                local r = finish(W, t)
                assert.is_not_nil(lost.fired)
                assert.is_true(r == 3 or tryagain(r), show(r))
                W:advance(5000)
                local held = b:call("EXISTS", "r1", "r2", "r3")
                assert.equal(r == 3 and 3 or 0, held)
                assert.equal(r == 3 and 0 or 3, rl_acquire(b, K, "vb", 30000))
            end)
            for _, via in ipairs({ "a", "b" }) do
                it("release via " .. via .. " whose commit is lost (" .. when .. (cut and ", cut off" or "") ..
                   "): answers 3 or -TRYAGAIN, frees all", function()
                    local W, a, b, c = world(3)
                    assert.equal(3, rl_acquire(a, K, "va", 30000))
                    W:advance(10)
                    local sc = via == "a" and a or b
                    sc:call("EXISTS", "r1", "r2", "r3")
                    local lost = lose_commit(sc, "r1", when, cut and function() sc.connected = false end or nil)
                    local t = ev_start(sc, RL_RELEASE, K, { "va" })
                    if cut then W:advance(1000); sc:reconnect() end
                    local r = finish(W, t)
                    assert.is_not_nil(lost.fired)
                    assert.is_true(r == 3 or tryagain(r), show(r))
                    if tryagain(r) then r = rl_release(sc, K, "va") end
                    W:advance(100)
                    assert.equal(3, rl_acquire(c, K, "vc", 30000))
                    assert.equal(0, rl_release(b, K, "va"))
                end)
            end
        end
    end

    for _, via in ipairs({ "a", "b" }) do
        for _, fault in ipairs({ "none", "after", "before" }) do
            it("extend via " .. via .. " (" .. fault .. ") around the TTL: answers 3 only when it holds", function()
                local bad = {}
                for off = -30, 30, 6 do
                    local W, a, b, c = world(3)
                    assert.equal(3, rl_acquire(a, K, "va", 1000))
                    W:advance(1000 + off - 1)
                    local sc = via == "a" and a or b
                    sc:call("EXISTS", "r1")
                    if fault ~= "none" then lose_commit(sc, "r1", fault) end
                    local t = ev_start(sc, RL_EXTEND, K, { "va", 5000 })
                    S.renewal_told(W, bad, off, finish(W, t), {
                        yes = 3, no = 0, keep_ms = 4000, step = 500,
                        taken = function() return rl_acquire(c, K, "vc", 1000) ~= 0 end,
                        got = function() return rl_acquire(c, K, "vc", 1000) == 3 end })
                end
                assert.same({}, bad)
            end)
        end
    end
end)

describe("redis-semaphore Mutex", function()
    for _, via in ipairs({ "a", "b" }) do
        for _, when in ipairs({ "after", "before" }) do
            it("refresh then release via " .. via .. ", each commit lost (" .. when .. ")", function()
                local W, a, b, c = world(3)
                assert.same(S.OK, a:call("SET", "mx", "id1", "PX", "3000", "NX"))
                W:advance(2000)
                local sc = via == "a" and a or b
                sc:call("GET", "mx")
                lose_commit(sc, "mx", when)
                assert.equal(1, ev(sc, MX_REFRESH, { "mx" }, { "id1", 3000 }))
                W:advance(2500)
                assert.equal(null, c:call("SET", "mx", "id2", "PX", "3000", "NX"))
                lose_commit(sc, "mx", when)
                assert.equal(1, ev(sc, MX_RELEASE, { "mx" }, { "id1" }))
                assert.equal(0, ev(sc, MX_RELEASE, { "mx" }, { "id1" }))
                assert.same(S.OK, c:call("SET", "mx", "id2", "PX", "3000", "NX"))
            end)
        end
    end
end)

describe("redis-semaphore Semaphore: the zset's last writer cut off at its TTL", function()
    for _, back in ipairs({ 200, 1500, 4000 }) do
        it("others take the semaphore past the TTL; the writer back after " .. back .. " ms keeps their permits",
           function()
            local W, a, b, c = world(3)
            assert.equal(1, acquire(W, a, "X"))
            assert.equal(1, acquire(W, b, "Y")) -- shared now, b its last writer
            W:advance(100)
            b:disconnect()
            W:advance(LT + 300)
            assert.equal(1, acquire(W, c, "P"))
            assert.equal(1, acquire(W, a, "Q"))
            W:advance(back)
            b:reconnect()
            W:advance(3000)
            local set, n = holders(c)
            assert.is_true(set.P and set.Q and n == 2, "holders: " .. n)
            assert.equal(0, acquire(W, b, "R"))
        end)
    end
end)
