-- settle_fuzz_spec.lua — a seeded long-run fuzz: nothing grows without
-- bound and everything settles.
--
-- Three sidecars, eight connections (each a sequence of commands run one
-- after another, as a client waiting for each reply), random mixes of
-- string keys with and without TTL, collections with TTLs, MULTI/EXEC
-- with WATCH, EVAL/EVALSHA/SCRIPT, SUBSCRIBE/PSUBSCRIBE/UNSUBSCRIBE/
-- PUBLISH, LOCK.* (ACQUIRE with WAIT, RELEASE, RENEW, CONVERT), clients
-- gone mid-command, CLIENT UNBLOCK, and faults: lost replies (fail_next
-- before/after on every op kind), disconnects, sessions expired or given
-- up, big clock advances.
--
-- During the run: no reply is an internal error and every command is
-- answered within its WAIT plus a bounded slack.  At the end (every
-- connection gone, every session settled, the clock past every TTL, lease
-- and --pubsub-gc-delay): each sidecar's per-key Lua tables are back to
-- their size at the start (census.lua), no task, queue, MULTI or watch is
-- left, and ZooKeeper holds only the documented permanent nodes (README
-- "How a key lives in ZooKeeper", "The script cache", "Pub/sub across
-- sidecars"): the roots, the live sessions' guards and marks, persistent
-- marks p.<n>, the scripts, each live sidecar's inbox (empty) and
-- liveness node, and the keys written without a TTL that are still there
-- (each visible to EXISTS, then removed by DEL).
--
-- SETTLE_FUZZ_SEEDS=1-200 runs a range; SETTLE_FUZZ_STEPS the run length.
local S = require "world"
local C = require "census"

local ROOT = "/zkresp"

---------------------------------------------------------------------------
-- The census: census.lua's per-key tables (C.per_key); the tasks left

local function live_tasks(W)
    local n = 0
    for _, t in pairs(W.tasks) do if not t.done then n = n + 1 end end
    return n
end

---------------------------------------------------------------------------
-- What the clients send

local STR_T = { "t1", "t2", "t3" }          -- strings only ever written with a TTL
local STR_M = { "m1", "m2", "m3" }          -- strings with and without TTL
local HASH, LIST, SET, ZSET = { "h1", "h2" }, { "l1" }, { "s1" }, { "z1" }
local LOCKS = { "lk1", "lk2" }
local CHANS = { "ch1", "ch2", "redisson_lock__channel:{lk1}" }
local PATS = { "ch*", "redisson_lock__channel:*" }
local MODES = { "EX", "PR", "CR", "PW" }
local BODIES = {
    "redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[2])",
    "return redis.call('get', KEYS[1])",
    "local v = redis.call('hget', KEYS[1], 'f') redis.call('hset', KEYS[1], 'f', ARGV[1]) " ..
        "redis.call('pexpire', KEYS[1], 800) return v",
    "redis.call('set', KEYS[1], ARGV[1], 'px', 700) redis.call('publish', 'ch1', ARGV[1]) return 1",
}
local ALL_KEYS = {}
for _, l in ipairs({ STR_T, STR_M, HASH, LIST, SET, ZSET }) do
    for _, k in ipairs(l) do ALL_KEYS[#ALL_KEYS + 1] = k end
end

-- A connection's next commands (a list: one, or a transaction's).
local function gen(rng, conn)
    local function px() return tostring(100 * rng.int(1, 30)) end
    local function v() return rng.pick({ "1", "7", "x" }) end
    local t, m = rng.pick(STR_T), rng.pick(STR_M)
    local owner = "o" .. conn.id
    if conn.subscriber then
        local k = rng.int(1, 4)
        if k == 1 then return { { "SUBSCRIBE", rng.pick(CHANS) } }
        elseif k == 2 then return { { "PSUBSCRIBE", rng.pick(PATS) } }
        elseif k == 3 then return { { "UNSUBSCRIBE", rng.pick(CHANS) } }
        else return { { "PUNSUBSCRIBE", rng.pick(PATS) } } end
    end
    local k = rng.int(1, 40)
    if k == 1 then return { { "SET", t, v(), "PX", px() } }
    elseif k == 2 then return { { "SET", t, v(), "EX", "1" } }
    elseif k == 3 then return { { "GETEX", t, "PX", px() } }
    elseif k == 4 then return { { "GET", t } }
    elseif k == 5 then return { { "DEL", t } }
    elseif k == 6 then return { { "PEXPIRE", t, px() } }
    elseif k == 7 then return { { "SET", m, v() } }
    elseif k == 8 then return { { "SET", m, v(), "PX", px() } }
    elseif k == 9 then return { { "INCR", m } }
    elseif k == 10 then return { { "APPEND", m, "a" } }
    elseif k == 11 then return { { "PERSIST", m } }
    elseif k == 12 then return { { "EXPIRE", m, "2" } }
    elseif k == 13 then return { { "RENAME", m, rng.pick(STR_M) } }
    elseif k == 14 then return { { "DEL", m, rng.pick(STR_M) } }
    elseif k == 15 then return { { "GETEX", m, "PERSIST" } }
    elseif k == 16 then return { { "HSET", rng.pick(HASH), "f" .. rng.int(1, 3), v() } }
    elseif k == 17 then return { { "HDEL", rng.pick(HASH), "f" .. rng.int(1, 3) } }
    elseif k == 18 then return { { rng.pick({ "LPUSH", "RPUSH" }), LIST[1], v() } }
    elseif k == 19 then return { { "LPOP", LIST[1] } }
    elseif k == 20 then return { { "SADD", SET[1], v() } }
    elseif k == 21 then return { { "SREM", SET[1], v() } }
    elseif k == 22 then return { { "ZADD", ZSET[1], tostring(rng.int(1, 9)), v() } }
    elseif k == 23 then return { { "ZREM", ZSET[1], v() } }
    elseif k == 24 then
        return { { "PEXPIRE", rng.pick({ HASH[1], HASH[2], LIST[1], SET[1], ZSET[1] }), px() } }
    elseif k == 25 then return { { "DEL", rng.pick({ HASH[1], HASH[2], LIST[1], SET[1], ZSET[1] }) } }
    elseif k == 26 or k == 27 then
        local txn = { { "WATCH", m, rng.pick(STR_M) }, { "MULTI", mode = "begin" } }
        for _ = 1, rng.int(1, 3) do
            local c = rng.pick({ { "SET", m, v() }, { "INCR", rng.pick(STR_M) }, { "SET", t, v(), "PX", px() },
                                 { "HSET", HASH[1], "f", v() }, { "GET", m } })
            c.mode = "queued"
            txn[#txn + 1] = c
        end
        txn[#txn + 1] = { rng.chance(0.2) and "DISCARD" or "EXEC", mode = "queued" }
        return txn
    elseif k == 28 then return { { "EVAL", BODIES[1], "2", m, rng.pick(STR_M), v() } }
    elseif k == 29 then return { { "EVAL", BODIES[rng.int(2, 4)], "1", rng.pick({ m, HASH[2], t }), v() } }
    elseif k == 30 then
        local b = rng.pick(BODIES)
        return { { "SCRIPT", "LOAD", b }, { "EVALSHA", "?", "1", t, v(), body = b } }
    elseif k == 31 then
        if rng.chance(0.1) then return { { "SCRIPT", "FLUSH" } } end
        return { { "PUBLISH", rng.pick(CHANS), "m" } }
    elseif k <= 34 then
        local c = { "LOCK.ACQUIRE", rng.pick(LOCKS), owner, "MODE", rng.pick(MODES), "PX", px() }
        if rng.chance(0.6) then c[#c + 1] = "WAIT"; c[#c + 1] = tostring(100 * rng.int(0, 20)) end
        return { c }
    elseif k <= 36 then return { { "LOCK.RELEASE", rng.pick(LOCKS), owner } }
    elseif k == 37 then return { { "LOCK.RENEW", rng.pick(LOCKS), owner, "PX", px() } }
    elseif k == 38 then
        return { { "LOCK.CONVERT", rng.pick(LOCKS), owner, "MODE", rng.pick(MODES), "WAIT", tostring(100 * rng.int(0, 10)) } }
    elseif k == 39 then return { { "PUBLISH", rng.pick(CHANS), "0" } }
    else return { { "GET", m } } end
end

local function wait_of(words)
    for i = 1, #words - 1 do if tostring(words[i]):upper() == "WAIT" then return tonumber(words[i + 1]) end end
    return 0
end

-- A reply that shows a Lua error inside the scripts.
local function internal(r)
    if type(r) ~= "table" or type(r.err) ~= "string" then return false end
    local e = r.err
    return e:find("attempt to", 1, true) or e:find("nil value", 1, true) or e:find("%.lua:%d") or
           e:find("internal", 1, true) ~= nil
end

---------------------------------------------------------------------------
-- One run

local function walk(W, path, out)
    for _, name in ipairs(W:children(path) or {}) do
        out[#out + 1] = path .. "/" .. name
        walk(W, path .. "/" .. name, out)
    end
    return out
end

local function run_seed(seed, steps)
    local rng = S.prng(seed)
    math.randomseed(seed) -- (the scripts' retry jitter: a seed replays alone)
    local log = {}
    local function note(s) log[#log + 1] = string.format("%s", s) end
    local W, a, b, c = S.world(3)
    local scs = { a, b, c }
    local function fail(msg)
        error(string.format("seed %d: %s\n%s", seed, msg,
                            table.concat(log, "\n", math.max(1, #log - (tonumber(os.getenv("SETTLE_FUZZ_LOG")) or 80)))), 0)
    end
    local function name(sc) return ({ "a", "b", "c" })[sc.id] end
    S.warm(W, a, b, c)
    -- every family once, then past every deadline: the baseline
    a:call_as(900, "SUBSCRIBE", "ch0"); a:call_as(900, "PSUBSCRIBE", "x*")
    b:call("PUBLISH", "ch0", "m")
    a:run(function() a.M.on_client_gone(900) end)
    for _, sc in ipairs(scs) do
        sc:call("EVAL", "return 1", "0")
        sc:call("LOCK.ACQUIRE", "lk0", "o", "PX", "100")
        sc:call("HSET", "h0", "f", "v"); sc:call("DEL", "h0")
    end
    W:advance(200000)
    local base, base_tasks = {}, live_tasks(W)
    for i, sc in ipairs(scs) do base[i] = C.per_key(sc) end
    local shas = {}
    local function sha(body) return shas[body] or string.rep("0", 40) end

    local conns = {}
    for i = 1, 8 do
        conns[i] = { id = i, cid = 100 + i, sc = scs[(i - 1) % 3 + 1], todo = {}, subscriber = i >= 7 }
    end
    local pending_ev, old_sessions, down = {}, {}, {}
    local nreplies, nerr = 0, 0

    local function finish(conn)
        local t = conn.task
        if not t or not t.done then return end
        conn.task = nil
        local r = t.result
        note(string.format("  %s c%d %s -> %s", name(conn.sc), conn.id, t.text, S.show(r)))
        if t.gone then return end
        nreplies = nreplies + 1
        if type(r) == "table" and r.err then nerr = nerr + 1 end
        if internal(r) then fail(string.format("c%d %s: internal error %s", conn.id, t.text, r.err)) end
        if r == nil and not t.mode then fail(string.format("c%d %s: no reply", conn.id, t.text)) end
        if t.words[1] == "SCRIPT" and t.words[2] == "LOAD" and type(r) == "string" then shas[t.words[3]] = r end
        -- a transaction cut short (WATCH/MULTI refused): drop the rest
        if t.mode == "begin" and not (type(r) == "table" and r.ok) then conn.todo = {} end
    end

    local function start(conn)
        if #conn.todo == 0 then conn.todo = gen(rng, conn) end
        local cmd = table.remove(conn.todo, 1)
        local words = {}
        for i, w in ipairs(cmd) do words[i] = w end
        if cmd.body then words[2] = sha(cmd.body) end
        local sc, mode = conn.sc, cmd.mode
        local task = W:spawn(sc, function() return sc.M.dispatch(words, false, 0, mode) end)
        task.client, task.words, task.mode = conn.cid, words, mode
        task.text = table.concat(words, " "):sub(1, 60)
        task.limit = W.now + wait_of(words) + 40000
        conn.task = task
        note(string.format("%d %s c%d/%d %s%s", W.now, name(sc), conn.id, conn.cid, mode and (mode .. " ") or "",
                           task.text))
    end

    local function gone(conn)
        -- (a command the host started runs at once, up to its first wait:
        -- its client cannot go before that; without this settle the model
        -- ran a MULTI-queued command of a gone client, as client 0)
        W:settle()
        local t = conn.task
        if t and not t.done then conn.sc:abandon(t) end
        local sc, cid = conn.sc, conn.cid
        note(string.format("%d %s c%d/%d gone", W.now, name(sc), conn.id, cid))
        sc:run(function() sc.M.on_client_gone(cid) end)
        conn.cid = conn.cid + 100
        conn.todo = {}
    end

    local function fault()
        local sc = rng.pick(scs)
        local k = rng.int(1, 10)
        if k <= 5 then
            local op = rng.pick({ "get", "create", "set", "multi", "delete", "children", "exists", "sync" })
            local when = rng.chance(0.5) and "after" or "before"
            local skip = rng.int(0, 4)
            sc:fail_next({ op = op, when = when, skip = skip })
            note(string.format("%d fault %s: lost %s %s skip %d", W.now, name(sc), op, when, skip))
        elseif k <= 7 and not down[sc] and sc.connected then
            down[sc] = true
            local back, lose = rng.int(50, 4000), rng.chance(0.3)
            local expire_old = rng.chance(0.5)
            sc:disconnect()
            note(string.format("%d fault %s: disconnect, %s at +%d", W.now, name(sc), lose and "lose" or "back", back))
            pending_ev[#pending_ev + 1] = W:at(W.now + back, function()
                down[sc] = nil
                if lose then
                    local old = sc:lose({ expire_old = expire_old })
                    note(string.format("%d %s lost session %s (expired %s)", W.now, name(sc), old, tostring(expire_old)))
                    if not expire_old then
                        old_sessions[#old_sessions + 1] = old
                        -- the server ends it a session timeout later
                        pending_ev[#pending_ev + 1] = W:at(W.now + 10000, function() W:expire_session(old) end)
                    end
                else
                    sc:reconnect()
                    note(string.format("%d %s reconnected", W.now, name(sc)))
                end
            end)
        elseif k == 8 and not down[sc] and sc.connected then
            note(string.format("%d fault %s: session expired", W.now, name(sc)))
            sc:expire()
        elseif k == 9 then
            -- a client unblocked by another
            for _, conn in ipairs(conns) do
                local t = conn.task
                if t and not t.done and t.blocked then
                    local r = conn.sc:unblock(t, rng.chance(0.5) and "error" or "timeout")
                    note(string.format("%d unblock c%d: %d", W.now, conn.id, r))
                    break
                end
            end
        else
            local conn = rng.pick(conns)
            gone(conn)
        end
    end

    local ok, err = pcall(function()
        for _ = 1, steps do
            for _, conn in ipairs(conns) do
                finish(conn)
                if not conn.task and rng.chance(0.5) then start(conn) end
                if conn.task and not conn.task.done and W.now > conn.task.limit then
                    fail(string.format("c%d %s: no answer after %d ms", conn.id, conn.task.text,
                                       W.now - conn.task.limit + 40000))
                end
            end
            if rng.chance(0.08) then fault() end
            local adv = rng.chance(0.03) and rng.int(2000, 40000) or rng.int(0, 60)
            W:advance(adv)
        end
        -- the end: every client gone, every session settled, every
        -- deadline passed
        for _, conn in ipairs(conns) do finish(conn); gone(conn) end
        for _, ev in ipairs(pending_ev) do ev.cancel() end
        for _, sc in ipairs(scs) do
            sc.faults = {}
            if not sc.connected then sc:reconnect(); note(name(sc) .. " reconnected at the end") end
        end
        for _, old in ipairs(old_sessions) do W:expire_session(old) end
        for _ = 1, 4 do W:advance(60000) end
        for _, conn in ipairs(conns) do finish(conn) end
    end)
    if not ok then fail("crashed: " .. tostring(err)) end

    local bad = {}
    -- no task, queue, MULTI or watch left
    if live_tasks(W) > base_tasks then bad[#bad + 1] = "tasks left: " .. live_tasks(W) .. " (at the start " .. base_tasks .. ")" end
    for i, sc in ipairs(scs) do
        local q, mx = sc.require("queue"), sc.require("cmd_multi")
        if q.busy() ~= 0 then bad[#bad + 1] = name(sc) .. ": key queues left: " .. q.busy() end
        if q.connections() ~= 0 then bad[#bad + 1] = name(sc) .. ": connections left: " .. q.connections() end
        if mx.count() ~= 0 then
            local ids = {}
            for id in pairs(C.upvalue(sc, "cmd_multi", "queues")) do ids[#ids + 1] = tostring(id) end
            bad[#bad + 1] = name(sc) .. ": MULTI queues left of clients " .. table.concat(ids, ",")
        end
        if mx.watching() ~= 0 then bad[#bad + 1] = name(sc) .. ": watches left" end
        for k, n in pairs(C.per_key(sc)) do
            -- (guard.dead: one entry per session change, never dropped;
            -- its own case below)
            if k ~= "guard.dead" and n > (base[i][k] or 0) + 2 then
                bad[#bad + 1] = string.format("%s: %s %d -> %d", name(sc), k, base[i][k] or 0, n)
            end
        end
    end
    -- ZooKeeper: nothing of a lock, a channel, a message
    local live = {}
    for _, sc in ipairs(scs) do live[sc.sid] = true end
    for _, p in ipairs(walk(W, ROOT .. "/l", {})) do
        if p:find("^" .. ROOT .. "/l/[^/]+/") then bad[#bad + 1] = "lock request left: " .. p end
    end
    for _, p in ipairs(walk(W, ROOT .. "/ps", {})) do
        local kind, rest = p:match("^" .. ROOT .. "/ps/(%a)/(.*)$")
        if kind == "i" or kind == "l" or kind == "b" then
            if rest:find("/") then bad[#bad + 1] = "message left: " .. p
            else
                local n = W:node(p)
                if kind ~= "i" and kind ~= "b" and not live[n.stat.ephemeralOwner] then bad[#bad + 1] = "dead liveness node: " .. p end
            end
        elseif kind then
            bad[#bad + 1] = "pub/sub node left: " .. p
        end
    end
    local nl = #(W:children(ROOT .. "/ps/l") or {})
    local ni = #(W:children(ROOT .. "/ps/i") or {})
    if nl ~= 3 or ni ~= 3 then bad[#bad + 1] = string.format("pub/sub: %d liveness nodes, %d inboxes", nl, ni) end
    for _, g in ipairs(W:children(ROOT .. "/g") or {}) do
        local n = W:node(ROOT .. "/g/" .. g)
        if not live[n.stat.ephemeralOwner] then bad[#bad + 1] = "guard of a dead session: " .. g end
    end
    for _, m in ipairs(W:children(ROOT .. "/m") or {}) do
        local n = W:node(ROOT .. "/m/" .. m)
        if not m:find("^p%.%d+$") and not live[n.stat.ephemeralOwner] then
            bad[#bad + 1] = "mark of a dead session: " .. m
        end
    end
    if #(W:children(ROOT .. "/s") or {}) > #BODIES + 1 then bad[#bad + 1] = "scripts: " .. #W:children(ROOT .. "/s") end
    -- keys: only those written without a TTL, each visible, each removed by DEL
    local expected = { warm1 = true, warm2 = true, warm3 = true }
    for _, k in ipairs(ALL_KEYS) do
        local there = W:node(a:path(k)) ~= nil
        for _, sc in ipairs(scs) do
            local e = sc:call("EXISTS", k)
            if e ~= (there and 1 or 0) then
                bad[#bad + 1] = string.format("%s: EXISTS %s %s, its node %s", name(sc), k, S.show(e),
                                              there and "is there" or "is not")
            end
        end
        if there then
            local n = W:node(a:path(k))
            if n.stat.ephemeralOwner ~= 0 then bad[#bad + 1] = "ephemeral key left past every TTL: " .. k end
            for _, t in ipairs(STR_T) do if t == k then bad[#bad + 1] = "a key written only with a TTL left: " .. k end end
        end
        local r = rng.pick(scs):call("DEL", k)
        if r ~= (there and 1 or 0) then bad[#bad + 1] = "DEL " .. k .. ": " .. S.show(r) end
    end
    W:advance(1000)
    for _, k in ipairs(W:children(ROOT .. "/k") or {}) do
        if not expected[k] then bad[#bad + 1] = "key node left after DEL: " .. k end
    end
    if W:children(ROOT .. "/db") and #W:children(ROOT .. "/db") > 0 then bad[#bad + 1] = "a database directory" end
    if #bad > 0 then
        table.sort(bad)
        fail(table.concat(bad, "\n"))
    end
    return nreplies, nerr
end

---------------------------------------------------------------------------

describe("settle fuzz: every command family with faults, then nothing left", function()
    local seeds = {}
    local env = os.getenv("SETTLE_FUZZ_SEEDS")
    local steps = tonumber(os.getenv("SETTLE_FUZZ_STEPS")) or 400
    if env then
        local from, to = env:match("^(%d+)-(%d+)$")
        for s = tonumber(from), tonumber(to) do seeds[#seeds + 1] = s end
    else
        -- (1-40 at 400 steps and 41-110 at 1500 passed; 1, 2, 4, 7 and 10
        -- found guard.dead's growth, now its own case below)
        seeds = { 1, 2, 3, 4, 7, 10 }
    end
    for _, seed in ipairs(seeds) do
        it("settles (seed " .. seed .. ")", function() run_seed(seed, steps) end)
    end
    if not env then
        for _, seed in ipairs({ 44, 77 }) do
            it("settles after a long run (seed " .. seed .. ", 1500 steps)", function() run_seed(seed, 1500) end)
        end
    end
end)

-- Before (minor, real): guard.lua's G.dead, filled by expiry.lua's
-- X.forget_session, was never emptied.  Every session change (an expiry,
-- a lost lease) adds the old session id to G.dead, which only serves to
-- tell a node of one of our earlier sessions (held, not writable) while
-- ZooKeeper keeps that session alive; once the session has ended no node
-- can carry its id, yet the entry stayed for the process's life.  Nothing
-- a client sees: one entry per session change, so a sidecar on a flapping
-- network (a session lost every minute for months) kept hundreds of
-- thousands.  Found by the sweep above (guard.dead 0 -> 3 or 4 in seeds
-- 1, 2, 4, 7, 10 at 400 steps).  Now a guard refresh forgets the earlier
-- sessions whose guard is gone.
describe("settle: a sidecar's earlier sessions", function()
    it("are forgotten once ZooKeeper ended them", function()
        local W, a, b = S.warm_world(2)
        local G = a.require("guard")
        local before = C.count(G.dead)
        for i = 1, 5 do
            assert.same(S.OK, a:call("SET", "k" .. i, "v", "PX", "500"))
            if i % 2 == 0 then a:expire() else a:lose({ expire_old = true }) end
            W:advance(1000)
        end
        W:advance(120000)
        assert.same(S.OK, a:call("SET", "k", "v"))
        -- every earlier session is over: none of its nodes is left
        for _, g in ipairs(W:children("/zkresp/g")) do
            local owner = W:node("/zkresp/g/" .. g).stat.ephemeralOwner
            assert.is_true(owner == a.sid or owner == b.sid, g .. " of " .. owner .. "; a " .. a.sid .. " b " .. b.sid)
        end
        assert.is_true(C.count(G.dead) <= before + 1, "G.dead: " .. C.count(G.dead))
    end)
end)

return { run_seed = run_seed }
