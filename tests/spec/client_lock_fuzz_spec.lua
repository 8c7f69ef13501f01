-- client_lock_fuzz_spec: string-key locks as the Redis lock clients use
-- them (redis-py's Lock, node-redlock, Redisson's RLock: their scripts as
-- sent), six clients on two keys through three sidecars, under a seeded
-- random schedule of faults: lost replies (applied or not, maybe with the
-- connection cut), disconnects shorter than the session, sessions expired
-- or given up, a sidecar's next session after a gap, restarts, PX ends.
-- Invariants, from the clients' replies (a -TRYAGAIN is an unknown outcome):
--  * one holder: a client holds from an OK/1 until the earliest of the PX
--    counted from when it SENT the request, its release's sending, the end
--    of the session that wrote its node (README "Guarantees"); no two
--    clients' holds of a key overlap;
--  * a release or renewal answered 0/nil inside the client's hold is wrong;
--  * a GET/EXISTS inside a hold sees it, a PTTL at least what it counts on;
--  * no error reply but -TRYAGAIN;
--  * at the end, the clock past every PX: no key seen by EXISTS/KEYS, no
--    node left under the keyspace, every per-key table of every sidecar
--    back to its size after warm-up (long_life_spec's census).
-- A failing seed prints its seed, what went wrong and its step log.
local S = require "world"
local C = require "census"
local null, tryagain, show = S.null, S.tryagain, S.show

---------------------------------------------------------------------------
-- The clients' scripts, as they send them.

-- redis-py (redis/lock.py)
local PY_RELEASE = [[
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1
]]
local PY_EXTEND = [[
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
local expiration = redis.call('pttl', KEYS[1])
if not expiration then
    expiration = 0
end
if expiration < 0 then
    return 0
end
local newttl = ARGV[2]
if ARGV[3] == "0" then
    newttl = ARGV[2] + expiration
end
redis.call('pexpire', KEYS[1], newttl)
return 1
]]
local PY_REACQUIRE = [[
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
]]

-- node-redlock 5
local RL_ACQUIRE = [[
  for i, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then
      return 0
    end
  end
  for i, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end
  return #KEYS
]]
local RL_EXTEND = [[
  for i, key in ipairs(KEYS) do
    if redis.call("get", key) ~= ARGV[1] then
      return 0
    end
  end
  for i, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end
  return #KEYS
]]
local RL_RELEASE = [[
  local count = 0
  for i, key in ipairs(KEYS) do
    if redis.call("get", key) == ARGV[1] then
      redis.pcall("del", key)
      count = count + 1
    end
  end
  return count
]]

-- Redisson RLock
local RS_LOCK = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " ..
                "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
                "return redis.call('pttl', KEYS[1]);"
local RS_UNLOCK = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; " ..
                  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " ..
                  "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; " ..
                  "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;"
local RS_RENEW = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); " ..
                 "return 1; end; return 0;"

local BODIES = { PY_RELEASE, PY_EXTEND, PY_REACQUIRE, RL_ACQUIRE, RL_EXTEND, RL_RELEASE, RS_LOCK, RS_UNLOCK, RS_RENEW }

---------------------------------------------------------------------------
-- What each library sends, and what its answers mean.
-- acquire(key, token, px) -> argv; won(r): a hold; extend(...) -> argv,
-- and whether its 1 means held until t0 + px; release(...) -> argv.

local LIB = {}
LIB.redispy = {
    acquire = function(k, tok, px) return { "SET", k, tok, "NX", "PX", tostring(px) } end,
    won = function(r) return type(r) == "table" and r.ok == "OK" end,
    lost = function(r) return r == null end,
    extend = function(k, tok, px, rng)
        local how = rng(3)
        if how == 1 then return { "EVAL", PY_REACQUIRE, "1", k, tok, tostring(px) } end
        -- replace_ttl (ARGV[3] "1") or additive ("0": at least px from when it runs)
        return { "EVAL", PY_EXTEND, "1", k, tok, tostring(px), how == 2 and "1" or "0" }
    end,
    release = function(k, tok) return { "EVAL", PY_RELEASE, "1", k, tok } end,
    read = function(k) return { "GET", k } end,
    reads_holder = function(r, tok) return r == tok end,
}
LIB.redlock = {
    acquire = function(k, tok, px) return { "EVAL", RL_ACQUIRE, "1", k, tok, tostring(px) } end,
    won = function(r) return r == 1 end,
    lost = function(r) return r == 0 end,
    extend = function(k, tok, px) return { "EVAL", RL_EXTEND, "1", k, tok, tostring(px) } end,
    release = function(k, tok) return { "EVAL", RL_RELEASE, "1", k, tok } end,
    read = function(k) return { "GET", k } end,
    reads_holder = function(r, tok) return r == tok end,
}
LIB.redisson = {
    acquire = function(k, tok, px) return { "EVAL", RS_LOCK, "1", k, tostring(px), tok } end,
    won = function(r) return r == null end,
    lost = function(r) return math.type(r) == "integer" end,
    extend = function(k, tok, px) return { "EVAL", RS_RENEW, "1", k, tostring(px), tok } end,
    release = function(k, tok)
        return { "EVAL", RS_UNLOCK, "2", k, "redisson_lock__channel:{" .. k .. "}", "0", "30000", tok }
    end,
    read = function(k) return { "EXISTS", k } end,
    reads_holder = function(r) return r == 1 end,
}

---------------------------------------------------------------------------
-- The world, its census, the PRNG.

-- xorshift32; rng(n): 1..n
local function prng(seed)
    local x = seed & 0xffffffff
    x = x == 0 and 0x9e3779b9 or x
    return function(n)
        x = x ~ ((x << 13) & 0xffffffff)
        x = x ~ (x >> 17)
        x = x ~ ((x << 5) & 0xffffffff)
        return x % n + 1
    end
end

local PER_KEY = {
    { "owned", "owned", function(sc) return sc.K.owned end }, { "owned", "heap" },
    { "queue", "queues" }, { "queue", "conns" }, { "expiry", "expiry_waiters" },
    { "lockwait", "watching" }, { "lockwait", "own" }, { "lockwait", "settling" }, { "lockwait", "writing" },
}
-- (guard.dead, one entry per earlier session of the sidecar, is left out:
-- it grows by one at each session change, a few bytes, by design.)
local function sizes(sc) return C.sizes(sc, PER_KEY) end

-- The gateway's check of a reply before it writes it (gateway/conn.c,
-- check_reply; sidecar/lua_co.c, lua_host_reply_deadline), which the model
-- does not make: a reply resting on answers of a session that is over
-- since (the sidecar has another one, or none yet) goes as E.STALLED.
-- Here each task remembers the session of its last answer.
local ZK_CALLS = { "get", "exists", "children", "create", "set", "delete", "multi", "sync" }
local function track_answers(W, sc)
    for _, kind in ipairs(ZK_CALLS) do
        local f = sc.zk[kind]
        sc.zk[kind] = function(...)
            local sid = sc.sid
            local r = table.pack(f(...))
            local task = W:task_of()
            if task then task.answer_sid = sid ~= 0 and sid or sc.sid end
            return table.unpack(r, 1, r.n)
        end
    end
end
local STALLED = S.E("TRYAGAIN zkresp stalled past its ZooKeeper session, outcome unknown")

local function world3()
    local W, a, b, c = S.world(3)
    S.warm(W, a, b, c)
    for _, sc in ipairs({ a, b, c }) do
        for _, body in ipairs(BODIES) do sc:call("EVAL", body, "2", "warmk", "warmch", "0", "1", "x") end
    end
    a:call("DEL", "warmk")
    W:advance(200)
    for _, sc in ipairs({ a, b, c }) do track_answers(W, sc) end
    return W, { a, b, c }
end

-- The names under the keyspace's directory, but the warm-up keys'.
local function leftovers(W, a)
    local out = {}
    local dir = a:path("x"):match("^(.*)/[^/]*$")
    for _, name in ipairs(W:children(dir) or {}) do
        if not name:find("^warm") then out[#out + 1] = name end
    end
    table.sort(out)
    return out
end

---------------------------------------------------------------------------
-- One run: `steps` random steps, then the end.  Returns nil, or what went
-- wrong and the step log.

local KEYS = { "k1", "k2" }
local PXS = { 200, 500, 1000, 3000, 8000 }
local DTS = { 0, 5, 20, 50, 100, 300, 800, 1500 }

-- opts: roam (clients send one request in five through another sidecar;
-- default: even seeds), faults (a fault step one step in `faults`, 3).
local function run(seed, steps, opts)
    opts = opts or {}
    if opts.roam == nil then opts.roam = seed % 2 == 0 end
    local rng = prng(seed)
    local W, scs = world3()
    local log = {}
    local function note(s) log[#log + 1] = string.format("%6d %s", W.now, s) end
    local bad
    local function fail(s) if not bad then bad = s; note("BAD " .. s) end end

    -- k1: redis-py or node-redlock; k2: Redisson or redis-py
    local libs = { k1 = opts.k1 or (rng(2) == 1 and "redispy" or "redlock"),
                   k2 = opts.k2 or (rng(2) == 1 and "redisson" or "redispy") }
    local clients = {}
    for i = 1, 6 do
        local key = KEYS[(i - 1) % 2 + 1]
        clients[i] = { id = i, sc = (i - 1) % 3 + 1, key = key, lib = LIB[libs[key]], n = 0 }
    end
    local holds = { k1 = {}, k2 = {} } -- key -> list of {c, from, to}
    local sstate = { {}, {}, {} }      -- per sidecar: down_until, gap_until
    local expiring = {}                -- {at, sid}: the server ends an old session
    local ending = false               -- (the end: no more cuts)
    local restarted = false            -- (a sidecar restarted)
    note("libs k1=" .. libs.k1 .. " k2=" .. libs.k2)
    local base = {}
    for i, sc in ipairs(scs) do base[i] = sizes(sc) end

    -- The last hold of key covering [t0, t1] whole, of client c (mine ==
    -- true), of another (false) or anyone's (nil).
    local function over(key, t0, t1, c, mine)
        local found
        for _, h in ipairs(holds[key]) do
            if h.from <= t0 and h.to > t1 and (mine == nil or (h.c == c) == mine) then found = h end
        end
        return found
    end
    local function covering(c, t0, t1) return over(c.key, t0, t1, c, true) end
    local function add_hold(c, from, to, why)
        if to <= from then return end
        local new = { c = c, from = from, to = to, token = c.token }
        for _, h in ipairs(holds[c.key]) do
            if h.c ~= c and math.max(h.from, from) < math.min(h.to, to) then
                fail(string.format("two holders of %s: client %d [%d,%d) and client %d [%d,%d) (%s)",
                                   c.key, h.c.id, h.from, h.to, c.id, from, to, why))
            end
        end
        holds[c.key][#holds[c.key] + 1] = new
    end
    local function end_holds(c, t)
        for _, h in ipairs(holds[c.key]) do
            if h.c == c and h.to > t then h.to = math.max(h.from, t) end
        end
    end

    local function start(c, kind, argv, extra)
        -- its own sidecar, or (opts.roam: one request in five) another, as
        -- behind a load balancer
        local via = c.sc
        if opts.roam and rng(5) == 1 then via = (c.sc + rng(2) - 1) % 3 + 1 end
        local sc = scs[via]
        local M = sc.M
        local task
        task = W:spawn(sc, function()
            local r = M.dispatch(argv)
            task.t1 = W.now
            if task.answer_sid and task.answer_sid ~= sc.sid then r = STALLED end
            return r
        end)
        task.client = 100 + c.id
        c.task = { t = task, kind = kind, t0 = W.now, extra = extra or {}, via = via }
        note(string.format("c%d@%s %s: %s", c.id, string.char(96 + via), kind,
                           argv[1] == "EVAL" and table.concat(argv, " ", 3) or table.concat(argv, " ")))
    end
    local function on_reply(c)
        local x = c.task
        local r, t0, t1 = x.t.result, x.t0, x.t.t1
        c.task = nil
        note(string.format("c%d %s -> %s (sent %d)", c.id, x.kind, show(r), t0))
        if type(r) == "table" and r.err and not tryagain(r) then
            fail("c" .. c.id .. " " .. x.kind .. " answered " .. r.err)
            return
        end
        local lib = c.lib
        if x.kind == "acquire" then
            if lib.won(r) then
                c.token, c.holding = x.extra.token, true
                c.owners = { [x.via] = true }
                add_hold(c, t1, t0 + x.extra.px, "acquire")
            elseif lib.lost(r) or tryagain(r) then
                c.holding = false
                -- redis-py's blocking acquire tries again with the same token
                -- (not Redisson: its retry with the same thread id after an unknown
                -- outcome may count the hold twice, as with Redis)
                if tryagain(r) and libs[c.key] ~= "redisson" and rng(2) == 1 then c.retry = x.extra end
            else
                fail("c" .. c.id .. " acquire answered " .. show(r))
            end
        elseif x.kind == "extend" then
            if r == 1 then
                c.owners = { [x.via] = true }
                add_hold(c, t1, t0 + x.extra.px, "extend")
            elseif r == 0 or r == null then
                if x.extra.held and covering(c, t0, t1) then
                    fail(string.format("c%d extend answered %s inside its hold (sent %d)", c.id, show(r), t0))
                end
                c.holding = false
            elseif tryagain(r) then
                c.owners[x.via] = true -- (it may have landed: the node that sidecar's now)
            else
                fail("c" .. c.id .. " extend answered " .. show(r))
            end
        elseif x.kind == "release" then
            if r == 1 then
                local h = over(c.key, t0, t1, c, false)
                if h then fail(string.format("c%d release answered 1 inside client %d's hold", c.id, h.c.id)) end
            elseif r == 0 or r == null then
                if x.extra.held and t1 < x.extra.held then
                    fail(string.format("c%d release answered %s inside its hold (sent %d)", c.id, show(r), t0))
                end
            elseif not tryagain(r) then
                fail("c" .. c.id .. " release answered " .. show(r))
            end
        elseif x.kind == "read" then
            local h = over(c.key, t0, t1)
            if h and not tryagain(r) and not lib.reads_holder(r, h.token) then
                fail(string.format("c%d read %s [%d,%d] inside client %d's hold [%d,%d) of %s", c.id, show(r), t0, t1,
                                   h.c.id, h.from, h.to, h.token))
            end
        elseif x.kind == "pttl" then
            -- inside a hold the key's TTL is at least what the holder counts on
            -- (every sidecar's estimate of the deadline is late, never early)
            local h = over(c.key, t0, t1)
            if h and not tryagain(r) and not (math.type(r) == "integer" and r >= h.to - t1) then
                fail(string.format("c%d PTTL %s inside client %d's hold, which counts on %d more ms",
                                   c.id, show(r), h.c.id, h.to - t1))
            end
        end
    end

    -- (a hold ends when its release is sent; held: until when it was held)
    local function release(c)
        local h = covering(c, W.now, W.now)
        start(c, "release", c.lib.release(c.key, c.token), { held = h and h.to })
        end_holds(c, W.now)
        c.holding = false
    end

    local function client_step(c)
        local lib = c.lib
        local roll = rng(10)
        if not c.holding then
            if roll <= 5 then
                c.n = c.n + 1
                local tok = "c" .. c.id .. "-" .. c.n .. (libs[c.key] == "redisson" and ":1" or "")
                local px = PXS[rng(#PXS)]
                if c.retry then tok, px, c.retry = c.retry.token, c.retry.px, nil end
                start(c, "acquire", lib.acquire(c.key, tok, px), { token = tok, px = px })
            elseif roll == 6 then
                start(c, "read", lib.read(c.key))
            elseif roll == 7 then
                start(c, "pttl", { "PTTL", c.key })
            end
        else
            local px = PXS[rng(#PXS)]
            if roll <= 4 then
                -- (held: its hold covers a round trip that ends before its validity)
                -- a renewal sets the TTL to px from when it runs (redis-py's additive
                -- extend to more): from its sending the client counts on t0 + px at most
                for _, h in ipairs(holds[c.key]) do
                    if h.c == c and h.to > W.now + px then h.to = W.now + px end
                end
                start(c, "extend", lib.extend(c.key, c.token, px, rng), { px = px, held = true })
                -- (through another sidecar, its write makes the node that one's)
                c.owners[c.task.via] = true
            elseif roll <= 7 then
                release(c)
            elseif roll == 8 then
                if rng(2) == 1 then start(c, "read", lib.read(c.key)) else start(c, "pttl", { "PTTL", c.key }) end
            elseif roll == 9 then
                c.holding = false -- walks away, the lock left to its PX
            end
        end
    end
    local function session_ended(i)
        for _, c in ipairs(clients) do
            if c.owners and c.owners[i] then
                end_holds(c, W.now)
                if c.task then c.task.extra.held = false end -- (its answer may be the loss's)
            end
        end
    end

    local function fault_step()
        local i = rng(3)
        local sc, st = scs[i], sstate[i]
        local roll = rng(100)
        local op = ({ "create", "multi", "set", "delete" })[rng(4)]
        local when = rng(2) == 1 and "after" or "before"
        if roll <= 12 then
            sc:fail_next({ op = op, when = when })
            note(string.format("fault %s: next %s lost (%s)", string.char(96 + i), op, when))
        elseif roll <= 20 and not st.down and not st.gap then
            -- a lost reply, the connection cut with it, back some time later
            local d = ({ 300, 1500, 3000, 6000 })[rng(4)]
            sc:fail_next({ op = op, when = when, hook = function()
                if not ending and not sstate[i].down and not sstate[i].gap and scs[i] == sc then
                    sc.connected = false
                    sstate[i].down = W.now + d
                    note(string.format("cut %s for %d", string.char(96 + i), d))
                end
            end })
            note(string.format("fault %s: next %s lost (%s), cut off", string.char(96 + i), op, when))
        elseif roll <= 22 and not st.down and not st.gap then
            -- a restart: the sidecar closes (its session with it), a new one
            session_ended(i)
            restarted = true
            sc:close()
            scs[i] = W:sidecar()
            track_answers(W, scs[i])
            W:advance(0)
            base[i] = nil
            note(string.format("fault %s: restarted", string.char(96 + i)))
        elseif roll <= 26 and not st.down and not st.gap then
            local d = ({ 100, 500, 1500, 3000, 5000 })[rng(5)]
            sc:disconnect()
            st.down = W.now + d
            note(string.format("fault %s: disconnected for %d", string.char(96 + i), d))
        elseif roll <= 30 and not st.gap then
            st.down = nil
            session_ended(i)
            if roll <= 28 then
                note(string.format("fault %s: session %d expired", string.char(96 + i), sc:expire()))
                return
            end
            local gap = rng(2) == 1
            local old = sc:lose({ gap = gap })
            local later = ({ 0, 500, 3000, 9000 })[rng(4)]
            expiring[#expiring + 1] = { at = W.now + later, sid = old }
            if gap then st.gap = W.now + ({ 100, 1000, 3000 })[rng(3)] end
            note(string.format("fault %s: session %d given up%s, server ends it at +%d", string.char(96 + i), old,
                               gap and " (gap)" or "", later))
        end
    end
    local function upkeep()
        for i, st in ipairs(sstate) do
            if st.down and W.now >= st.down then
                st.down = nil
                scs[i]:reconnect()
                note("reconnect " .. string.char(96 + i))
            end
            if st.gap and W.now >= st.gap then
                st.gap = nil
                scs[i]:next_session()
                note("next session " .. string.char(96 + i))
            end
        end
        for j = #expiring, 1, -1 do
            local e = expiring[j]
            if W.now >= e.at then
                table.remove(expiring, j)
                if W.sessions[e.sid] and W.sessions[e.sid].alive then W:expire_session(e.sid) end
                note("server ends session " .. e.sid)
            end
        end
    end

    local function collect()
        for _, c in ipairs(clients) do if c.task and c.task.t.done then on_reply(c) end end
    end

    for _ = 1, steps do
        if bad then break end
        upkeep()
        for _, c in ipairs(clients) do
            if not c.task and rng(3) == 1 then client_step(c) end
        end
        if rng(opts.faults or 3) == 1 then fault_step() end
        local dt = DTS[rng(#DTS)]
        -- (in small slices, so that replies are taken in when they come)
        while dt > 0 and not bad do
            local d = math.min(dt, 50)
            W:advance(d); collect(); upkeep()
            dt = dt - d
        end
        W:advance(0); collect()
    end

    -- The end: every sidecar back, every command answered, the old
    -- sessions ended; holders release or walk away; the clock passes
    -- every PX and the sidecars' settling.
    local function drain() -- (until every command is answered, 10 s at most)
        for _ = 1, 200 do
            W:advance(50); upkeep(); collect()
            local busy = false
            for _, c in ipairs(clients) do busy = busy or c.task ~= nil end
            if not busy then break end
        end
    end
    if not bad then
        ending = true
        for _, sc in ipairs(scs) do sc.faults = {} end -- (faults armed and not met yet)
        for _, st in ipairs(sstate) do
            if st.down then st.down = W.now end
            if st.gap then st.gap = W.now end
        end
        for _, e in ipairs(expiring) do e.at = W.now end
        upkeep()
        drain()
        for _, c in ipairs(clients) do
            if c.task then fail("c" .. c.id .. " " .. c.task.kind .. " never answered") end
            if c.holding and rng(2) == 1 then release(c) end
        end
        drain()
        W:advance(60000)
        for i, sc in ipairs(scs) do
            for _, k in ipairs(KEYS) do
                local g = sc:call("EXISTS", k)
                if g ~= 0 then fail(string.format("%s: EXISTS %s = %s at the end", string.char(96 + i), k, show(g))) end
            end
            local ks = sc:call("KEYS", "k*")
            if type(ks) ~= "table" or #ks ~= 0 then fail(string.char(96 + i) .. ": KEYS k* = " .. show(ks)) end
        end
        -- (README, "How a key lives in ZooKeeper": a persistent key with a TTL
        -- (a hash written through two sidecars, Redisson's with roaming
        -- clients) whose writer restarted before its deadline stays, absent
        -- for every reader, until written again: by design, not counted)
        local left = {}
        for _, name in ipairs(leftovers(W, scs[1])) do
            local n = W:node(scs[1]:path(name))
            if not (restarted and n and n.stat.ephemeralOwner == 0) then left[#left + 1] = name end
        end
        if #left > 0 then fail("nodes left: " .. table.concat(left, ",")) end
        W:advance(60000)
        for i, sc in ipairs(scs) do
            for name, n in pairs(sizes(sc)) do
                if base[i] and n > (base[i][name] or 0) + 2 then
                    fail(string.format("sidecar %s %s: %d -> %d", string.char(96 + i), name, base[i][name] or 0, n))
                end
            end
        end
    end
    if bad then
        local tail = {}
        for j = math.max(1, #log - (opts.tail or 60)), #log do tail[#tail + 1] = log[j] end
        return string.format("seed %d: %s\n%s", seed, bad, table.concat(tail, "\n"))
    end
end

---------------------------------------------------------------------------

-- The kept sweep: {seed, steps, faults}.  Seed 72 (600 steps, a fault
-- step in two) found the release answered 0 of the describe below under
-- an earlier draw order of this schedule (it passes now; the shrunk cases
-- keep the defect).  Wider: ZKRESP_FUZZ_SEEDS=1-300
-- [ZKRESP_FUZZ_STEPS=600] [ZKRESP_FUZZ_FAULTS=2], about 1 s a seed.
local SEEDS = {
    { 72, 600, 2 },
    { 1, 300, 2 }, { 2, 300, 2 }, { 3, 300, 2 }, { 4, 300, 2 }, { 5, 300, 2 }, { 6, 300, 2 },
    { 7, 300, 3 }, { 8, 300, 3 }, { 9, 300, 3 }, { 10, 300, 3 },
}

describe("client locks under random faults, three sidecars", function()
    local env = os.getenv("ZKRESP_FUZZ_SEEDS")
    local seeds = SEEDS
    if env then
        local lo, hi = env:match("^(%d+)-(%d+)$")
        local steps, faults = tonumber(os.getenv("ZKRESP_FUZZ_STEPS") or 300), tonumber(os.getenv("ZKRESP_FUZZ_FAULTS") or 2)
        seeds = {}
        for x = tonumber(lo), tonumber(hi) do seeds[#seeds + 1] = { x, steps, faults } end
    end
    it("seeded sweep (" .. #seeds .. " seeds): one holder, true answers, nothing left", function()
        local failures = {}
        for _, e in ipairs(seeds) do
            local ok, f = xpcall(run, debug.traceback, e[1], e[2], { faults = e[3] })
            if not ok then f = "seed " .. e[1] .. ": " .. f end
            if f then failures[#failures + 1] = f; print(f) end
        end
        assert.same({}, failures)
    end)
end)

---------------------------------------------------------------------------
-- Seed 72, shrunk.  A redis-py client took its lock through sidecar a and
-- releases it through b (a load balancer, a pool over sidecars).  b's
-- multi (delete of a's node + bump of its mark to b's nonce) applies, its
-- reply lost (b cut off 300 ms).  Meanwhile the lock is taken again
-- through a and that lock moves a's mark (released or expired through a,
-- rewritten through c).  Back, b finds its node gone and the mark moved
-- on: resolve.lua's resolve_delete says "not applied", the script runs
-- again, finds another's token: 0 (before the fix).  The client was told "not owned"
-- (redis-py raises LockNotOwnedError) for a lock it held, seconds from its
-- TTL, that this very command released.  A mark moved further than one
-- bump saw removals after ours may have applied: an outcome unknown
-- (-TRYAGAIN, as resolve_puts' unsure), not "not applied".  The three
-- "multi lost after" cases fail without the fix.
describe("a release through another sidecar, its reply lost while the lock is taken again", function()
    local AGAIN = {
        { "taken and extended through c", function(W, a, c)
            assert.same(S.OK, a:call("SET", "k1", "t1", "NX", "PX", "8000"))
            assert.equal(1, c:call("EVAL", PY_EXTEND, "1", "k1", "t1", "3000", "0"))
            return "t1"
        end },
        { "taken, released, taken again through a", function(W, a)
            assert.same(S.OK, a:call("SET", "k1", "t1", "NX", "PX", "8000"))
            assert.equal(1, a:call("EVAL", PY_RELEASE, "1", "k1", "t1"))
            assert.same(S.OK, a:call("SET", "k1", "t2", "NX", "PX", "8000"))
            return "t2"
        end },
        { "taken with PX 100, expired, taken again through a", function(W, a)
            assert.same(S.OK, a:call("SET", "k1", "t1", "NX", "PX", "100"))
            W:advance(200)
            assert.same(S.OK, a:call("SET", "k1", "t2", "NX", "PX", "8000"))
            return "t2"
        end },
        { "not taken again", function() return nil end },
    }
    for _, e in ipairs(AGAIN) do
        for _, when in ipairs({ "after", "before" }) do
            it(e[1] .. " (multi lost " .. when .. "): 1 or -TRYAGAIN, the new holder's lock kept", function()
                local W, scs = world3()
                local a, b, c = scs[1], scs[2], scs[3]
                assert.same(S.OK, a:call("SET", "k1", "t5", "NX", "PX", "8000"))
                W:advance(100)
                b:call("GET", "k1")
                b:fail_next({ op = "multi", when = when, hook = function() b.connected = false end })
                local t = b:start("EVAL", PY_RELEASE, "1", "k1", "t5")
                W:advance(20)
                local holder = when == "after" and e[2](W, a, c) or nil
                W:advance(300)
                b:reconnect()
                W:run_until(function() return t.done end)
                local r = t.result
                assert.is_true(r == 1 or tryagain(r), "release answered " .. show(r))
                if tryagain(r) then assert.equal(0, b:call("EVAL", PY_RELEASE, "1", "k1", "t5")) end
                assert.equal(holder or null, c:call("GET", "k1"))
            end)
        end
    end
end)
