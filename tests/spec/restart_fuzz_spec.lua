-- restart_fuzz_spec.lua — rolling restarts: a sidecar gets SIGTERM (its
-- grace period: M.on_shutdown, the gateway refusing new Lua commands with
-- -TRYAGAIN zkresp is shutting down, in-flight commands finishing), its
-- session is closed (or, its close lost, left to expire a session timeout
-- later), and a fresh sidecar (new instance, new session) takes its place
-- on the same root, while clients of every family are mid-flight on it
-- and on the others.
--
-- The gateway's part is C (gateway/dispatch.c, main.c); the model plays it
-- here (send): once stopping, a command is refused before Lua, except a
-- command queued inside MULTI (queued in Lua as before); an EXEC then drops
-- the transaction (lua_host_client_gone) and is refused.  The grace ends
-- when no command of the sidecar's clients runs, or after GRACE ms; then
-- the connections close (on_client_gone) and the session is closed.
--
-- Invariants, checked from the clients' replies (what each was told, with
-- the earliest time its hold can have ended: the lease counted from when
-- it SENT the request, its release's sending, its sidecar's session end):
--  * no two owners hold conflicting native locks, nor two clients one
--    string lock (SET NX PX), at once;
--  * a new grant's token is greater than every conflicting grant
--    answered before it was asked;
--  * every command on the stopping sidecar is answered (a reply or the
--    shutdown error) within the grace period;
--  * no reply is an internal error; no NOSCRIPT for a script loaded
--    before (no SCRIPT FLUSH is sent);
--  * after each restart (faults cleared): EVALSHA of a loaded script works
--    on the new sidecar, and a PUBLISH through the new sidecar reaches a
--    subscriber on every surviving one (and one through a survivor reaches
--    the new one's);
--  * at the end (every client gone, every session ended, the clock past
--    every lease/TTL): nothing under the root but the documented permanent
--    nodes, and the census of the sidecars back to their start.
--
-- RESTART_FUZZ_SEEDS=1-200 runs a range; RESTART_FUZZ_STEPS the run length.
local S = require "world"
local C = require "census"

local ROOT = "/zkresp"
local CLOSING = "TRYAGAIN zkresp is shutting down"
local GRACE = 5000
local null = S.null

---------------------------------------------------------------------------
-- Shared helpers

-- DLM compatibility (README "Native locks"): held row, requested column.
local ORDER = { NL = 1, CR = 2, CW = 3, PR = 4, PW = 5, EX = 6 }
local ROWS = { NL = "YYYYYY", CR = "YYYYY.", CW = "YYY...", PR = "YY.Y..", PW = "YY....", EX = "Y....." }
local function conflict(held, req) return ROWS[held]:sub(ORDER[req], ORDER[req]) ~= "Y" end

local function internal(r)
    if type(r) ~= "table" or type(r.err) ~= "string" then return false end
    local e = r.err
    return e:find("attempt to", 1, true) or e:find("nil value", 1, true) or e:find("%.lua:%d") or
           e:find("internal", 1, true) ~= nil
end

local function messages(sc, cid)
    local out = {}
    for _, f in ipairs(sc.pushed[cid] or {}) do
        if f.push[1] == "message" then out[#out + 1] = f.push[2] .. "=" .. f.push[3] end
    end
    return out
end

local function has(list, x) for _, v in ipairs(list) do if v == x then return true end end return false end

-- The gateway: a command of client cid on sc, as dispatch.c sends it (see
-- the header).  The task records when it was answered (task.at).
local function send(W, sc, cid, words, mode)
    local task = W:spawn(sc, function()
        local r
        if sc.stopping and not (mode == "queued" and words[1] ~= "EXEC") then
            if mode == "queued" then sc.M.on_client_gone(cid) end
            r = { err = CLOSING }
        else
            r = sc.M.dispatch(words, false, 0, mode)
        end
        W:task_of().at = W.now
        return r
    end)
    task.client, task.words, task.mode, task.sent = cid, words, mode, W.now
    return task
end

local function call(W, sc, cid, ...)
    local t = send(W, sc, cid, { ... })
    W:run_until(function() return t.done end, 60000)
    return t.result
end

-- SIGTERM: the gateway stops (sc.stopping), on_shutdown runs.
local function sigterm(W, sc)
    sc.stopping, sc.stop_at = true, W.now
    W:spawn(sc, sc.M.on_shutdown)
end

---------------------------------------------------------------------------
-- What the clients send

local PY_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
local GETSET = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[1], ARGV[1], 'px', 900) return v"
local LOCKS = { "L1", "L2" }
local SLOCKS = { "S1", "S2" }
local TTLK = { "t1", "t2" }
local MKEYS = { "m1", "m2" }
local MODES = { "EX", "PR", "CR", "PW", "CW" }

local function gen(rng, conn, shas)
    local function px() return tostring(100 * rng.int(2, 40)) end
    local owner = "o" .. conn.id
    local k = rng.int(1, 20)
    if k <= 4 then
        local c = { "LOCK.ACQUIRE", rng.pick(LOCKS), owner, "MODE", rng.pick(MODES), "PX", px() }
        if rng.chance(0.7) then c[#c + 1] = "WAIT"; c[#c + 1] = tostring(100 * rng.int(0, 30)) end
        return { c }
    elseif k <= 6 then return { { "LOCK.RELEASE", rng.pick(LOCKS), owner } }
    elseif k == 7 then return { { "LOCK.RENEW", rng.pick(LOCKS), owner, "PX", px() } }
    elseif k == 8 then
        return { { "LOCK.CONVERT", rng.pick(LOCKS), owner, "MODE", rng.pick(MODES), "WAIT",
                   tostring(100 * rng.int(0, 20)) } }
    elseif k <= 10 then return { { "SET", rng.pick(SLOCKS), owner .. "." .. rng.int(1, 999), "NX", "PX", px() } }
    elseif k <= 12 then
        local key = rng.pick(SLOCKS)
        local tok = conn.stoks[key] or (owner .. ".0")
        if rng.chance(0.5) then return { { "EVALSHA", shas.release, "1", key, tok } } end
        return { { "EVAL", PY_RELEASE, "1", key, tok } }
    elseif k == 13 then return { { "SET", rng.pick(TTLK), "v", "PX", px() } }
    elseif k == 14 then return { { "GET", rng.pick(TTLK) } }
    elseif k == 15 then return { { "EVALSHA", shas.getset, "1", rng.pick(TTLK), "g" } }
    elseif k <= 17 then
        local m = rng.pick(MKEYS)
        local txn = { { "WATCH", m }, { "MULTI", mode = "begin" },
                      { "INCR", m, mode = "queued" }, { "SET", rng.pick(TTLK), "x", "PX", px(), mode = "queued" },
                      { rng.chance(0.2) and "DISCARD" or "EXEC", mode = "queued" } }
        return txn
    elseif k == 18 then return { { "PUBLISH", "news", "m" .. conn.id } }
    elseif k == 19 then return { { "DEL", rng.pick(MKEYS) } }
    else return { { "GET", rng.pick(MKEYS) } } end
end

local function wait_of(words)
    for i = 1, #words - 1 do if tostring(words[i]):upper() == "WAIT" then return tonumber(words[i + 1]) end end
    return 0
end

local function walk(W, path, out)
    for _, name in ipairs(W:children(path) or {}) do
        out[#out + 1] = path .. "/" .. name
        walk(W, path .. "/" .. name, out)
    end
    return out
end

---------------------------------------------------------------------------
-- One run

local function run_seed(seed, steps)
    local rng = S.prng(seed)
    math.randomseed(seed)
    local log = {}
    local function note(s) log[#log + 1] = s end
    local W = S.world(0)
    local scs, names, serial = {}, {}, 0
    local base = {}
    local ended = {} -- sid -> when its session ended (as far as we made it end)
    local function fail(msg)
        error(string.format("seed %d: %s\n%s", seed, msg,
                            table.concat(log, "\n", math.max(1, #log - (tonumber(os.getenv("RESTART_FUZZ_LOG")) or 60)))), 0)
    end
    local function new_sidecar(i)
        serial = serial + 1
        local sc = W:sidecar()
        names[sc] = string.char(96 + i) .. serial
        scs[i] = sc
        return sc
    end
    for i = 1, 3 do new_sidecar(i) end
    S.warm(W, scs[1], scs[2], scs[3])
    local shas = {
        release = scs[1]:call("SCRIPT", "LOAD", PY_RELEASE),
        getset = scs[2]:call("SCRIPT", "LOAD", GETSET),
    }
    -- probe subscribers: client 100000 + i on slot i
    local probe_n = 0
    local function probe_subscribe(i)
        local r = call(W, scs[i], 100000 + i, "SUBSCRIBE", "probe")
        if type(r) == "table" and r.err then fail("probe SUBSCRIBE on " .. names[scs[i]] .. ": " .. r.err) end
    end
    for i = 1, 3 do probe_subscribe(i) end
    W:advance(200000)
    for i, sc in ipairs(scs) do base[sc] = C.per_key(sc) end

    local conns = {}
    for i = 1, 8 do
        conns[i] = { id = i, cid = 100 + i, slot = (i - 1) % 3 + 1, todo = {}, stoks = {}, subscriber = i >= 7 }
    end
    local holds = { L1 = {}, L2 = {} }    -- key -> owner -> belief {mode, token, untl, sids, since}
    local granted = { L1 = {}, L2 = {} }  -- key -> list of {owner, mode, token, at}
    local tokens_of = {}                  -- owner .. key -> {token = true}
    local unknown = {}                    -- owner .. key -> sids of acquires with an unknown outcome
    local sholds = {}                     -- string lock key -> belief {conn, tok, untl, sids}
    local stopping = {}                   -- slot -> {sc, deadline, how}
    local down, pending_ev = {}, {}

    local function alive_at(sids, t)
        for sid in pairs(sids) do if ended[sid] and ended[sid] <= t then return false end end
        return true
    end
    local function valid(b, t) return b.mode and t < b.untl and alive_at(b.sids, t) end
    local function end_session(sid) if not ended[sid] then ended[sid] = W.now end end

    local function on_reply(conn, t)
        local r, w, at = t.result, t.words, t.at
        local sc = t.sc
        note(string.format("  %d %s c%d %s -> %s", at, names[sc], conn.id, t.text, S.show(r)))
        if internal(r) then fail(string.format("c%d %s: internal error %s", conn.id, t.text, r.err)) end
        if r == nil and not t.mode then fail(string.format("c%d %s: no reply", conn.id, t.text)) end
        if type(r) == "table" and type(r.err) == "string" and r.err:find("^NOSCRIPT") then
            fail(string.format("c%d %s: NOSCRIPT for a loaded script", conn.id, t.text))
        end
        if t.mode == "begin" and not (type(r) == "table" and r.ok) then conn.todo = {} end
        local cmd, key, owner = w[1], w[2], w[3]
        local sid = sc.sid
        if cmd == "LOCK.ACQUIRE" or cmd == "LOCK.CONVERT" then
            local mode = (function() for i = 4, #w - 1 do if w[i] == "MODE" then return w[i + 1] end end return "EX" end)()
            local px = (function() for i = 4, #w - 1 do if w[i] == "PX" then return tonumber(w[i + 1]) end end return 30000 end)()
            local ok = owner .. key
            local b = holds[key][owner]
            if math.type(r) == "integer" then
                -- two holders?
                for o2, b2 in pairs(holds[key]) do
                    if o2 ~= owner and valid(b2, at) and b2.since <= at and conflict(b2.mode, mode) then
                        fail(string.format("two holders of %s: %s (%s, token %d) granted %s at %d while %s holds %s (token %d, lease >= %d)",
                                           key, owner, mode, r, cmd, at, o2, b2.mode, b2.token, b2.untl))
                    end
                end
                -- tokens grow
                tokens_of[ok] = tokens_of[ok] or {}
                if not tokens_of[ok][r] then
                    for _, g in ipairs(granted[key]) do
                        if g.owner ~= owner and g.at < t.sent and conflict(g.mode, mode) and r <= g.token then
                            fail(string.format("%s's token %d on %s (asked at %d) not above %s's %d (granted at %d)",
                                               owner, r, key, t.sent, g.owner, g.token, g.at))
                        end
                    end
                end
                tokens_of[ok][r] = true
                granted[key][#granted[key] + 1] = { owner = owner, mode = mode, token = r, at = at }
                local sids = { [sid] = true }
                for s in pairs(unknown[ok] or {}) do sids[s] = true end
                if b and b.sids then for s in pairs(b.sids) do sids[s] = true end end
                local untl = (cmd == "LOCK.ACQUIRE") and (t.sent + px) or (b and b.untl or t.sent)
                holds[key][owner] = { mode = mode, token = r, untl = untl, sids = sids, since = at }
            elseif r == null and cmd == "LOCK.CONVERT" and b then
                b.mode = b.old
            elseif cmd == "LOCK.ACQUIRE" and S.tryagain(r) then
                unknown[ok] = unknown[ok] or {}
                unknown[ok][sid] = true
            elseif cmd == "LOCK.CONVERT" then
                holds[key][owner] = nil
            end
        elseif cmd == "LOCK.RENEW" then
            local b = holds[key][owner]
            if b then
                if r == 1 then b.untl = t.sent + tonumber(w[5]) elseif r == 0 then holds[key][owner] = nil end
            end
        elseif cmd == "SET" and w[4] == "NX" then
            if type(r) == "table" and r.ok then
                local b = sholds[key]
                if b and b.conn ~= conn and at < b.untl and alive_at(b.sids, at) then
                    fail(string.format("two holders of string lock %s: c%d at %d while c%d (lease >= %d)",
                                       key, conn.id, at, b.conn.id, b.untl))
                end
                sholds[key] = { conn = conn, untl = t.sent + tonumber(w[6]), sids = { [sid] = true } }
            end
            if type(r) == "table" and r.ok or S.tryagain(r) then conn.stoks[key] = w[3] end
        end
    end

    local function finish(conn)
        local t = conn.task
        if not t or not t.done then return end
        conn.task = nil
        if t.gone then return end
        on_reply(conn, t)
    end

    local function start(conn)
        local sc = scs[conn.slot]
        if conn.subscriber then
            if conn.subscribed ~= sc then
                conn.task = send(W, sc, conn.cid, { "SUBSCRIBE", "news" })
                conn.task.text = "SUBSCRIBE news"
                conn.subscribed = sc
                note(string.format("%d %s c%d/%d SUBSCRIBE news", W.now, names[sc], conn.id, conn.cid))
            end
            return
        end
        if #conn.todo == 0 then conn.todo = gen(rng, conn, shas) end
        local cmd = table.remove(conn.todo, 1)
        local words = {}
        for i, x in ipairs(cmd) do words[i] = x end
        -- the redis-py release carries the token this client last set
        if (words[1] == "EVAL" or words[1] == "EVALSHA") and words[2] ~= shas.getset and words[4] and words[4]:sub(1, 1) == "S" then
            words[5] = conn.stoks[words[4]] or words[5]
            local b = sholds[words[4]]
            if b and b.conn == conn then b.untl = math.min(b.untl, W.now) end -- (its release sent)
        end
        if words[1] == "LOCK.RELEASE" then
            local b = holds[words[2]][words[3]]
            if b then b.untl = math.min(b.untl, W.now) end
        elseif words[1] == "LOCK.CONVERT" then
            local b = holds[words[2]][words[3]]
            if b then b.old, b.mode = b.mode, nil end
        elseif words[1] == "LOCK.RENEW" or words[1] == "LOCK.ACQUIRE" then
            -- (a renewal, or a reentrant acquire, may shorten the lease:
            -- from its sending on, the hold may end at now + PX)
            local b = holds[words[2]][words[3]]
            local px = 30000
            for j = 4, #words - 1 do if words[j] == "PX" then px = tonumber(words[j + 1]) end end
            if b then b.untl = math.min(b.untl, W.now + px) end
        end
        local task = send(W, sc, conn.cid, words, cmd.mode)
        task.text = table.concat(words, " "):sub(1, 70)
        task.limit = W.now + wait_of(words) + 40000
        conn.task = task
        note(string.format("%d %s c%d/%d %s%s", W.now, names[sc], conn.id, conn.cid, cmd.mode and (cmd.mode .. " ") or "",
                           task.text))
    end

    local function gone(conn, sc)
        W:settle()
        local t = conn.task
        if t and not t.done then sc:abandon(t) end
        note(string.format("%d %s c%d/%d gone", W.now, names[sc], conn.id, conn.cid))
        if not sc.closing then sc:run(function() sc.M.on_client_gone(conn.cid) end) end
        conn.cid = conn.cid + 100
        conn.todo, conn.task, conn.subscribed = {}, nil, nil
    end

    -- After a restart, with every fault cleared: the new sidecar knows the
    -- loaded scripts, and messages cross between it and the survivors.
    local function probe(i)
        for _, s in ipairs(scs) do if not s.connected or down[s] then return end end
        for _, s in ipairs(scs) do s.faults = {} end
        local sc = scs[i]
        local r = call(W, sc, 99999, "EVALSHA", shas.release, "1", "nokey", "x")
        if r ~= 0 then fail("EVALSHA of a loaded script on the new sidecar " .. names[sc] .. ": " .. S.show(r)) end
        probe_n = probe_n + 1
        local m1, m2 = "from-new." .. probe_n, "to-new." .. probe_n
        local p1 = call(W, sc, 99999, "PUBLISH", "probe", m1)
        local p2 = call(W, scs[i % 3 + 1], 99999, "PUBLISH", "probe", m2)
        note(string.format("%d probe %d: PUBLISH through %s -> %s, through %s -> %s", W.now, probe_n, names[sc],
                           S.show(p1), names[scs[i % 3 + 1]], S.show(p2)))
        W:advance(500)
        for j = 1, 3 do
            local got = messages(scs[j], 100000 + j)
            if not has(got, "probe=" .. m1) then fail(string.format("probe: %s's subscriber missed %s published through %s",
                                                       names[scs[j]], m1, names[sc])) end
            if not has(got, "probe=" .. m2) then fail(string.format("probe: %s's subscriber missed %s", names[scs[j]], m2)) end
        end
        note(string.format("%d probe %d ok", W.now, probe_n))
    end

    local function finish_stop(i)
        local st = stopping[i]
        stopping[i] = nil
        local sc = st.sc
        W:settle() -- (a command sent just now and refused is answered)
        for _, conn in ipairs(conns) do
            if conn.slot == i and conn.task and not conn.task.done then
                if sc.connected then
                    fail(string.format("c%d %s on stopping %s: no answer within the grace period", conn.id,
                                       conn.task.text, names[sc]))
                end
                note(string.format("c%d %s abandoned at the grace's end (ZooKeeper away)", conn.id, conn.task.text))
            end
        end
        -- the connections close
        for _, conn in ipairs(conns) do
            if conn.slot == i then
                finish(conn)
                gone(conn, sc)
                if conn.subscriber then conn.slot = rng.pick({ 1, 2, 3 }) if conn.slot == i then conn.slot = i % 3 + 1 end end
            end
        end
        for _, ev in ipairs(st.events) do ev.cancel() end
        down[sc] = nil
        local sid = sc.sid
        if st.how == "left" then
            sc.closing = true
            note(string.format("%d %s closed, its close lost: session %d left to expire", W.now, names[sc], sid))
            pending_ev[#pending_ev + 1] = W:at(W.now + 10000, function() end_session(sid); W:expire_session(sid) end)
        else
            end_session(sid)
            sc:close()
            note(string.format("%d %s closed", W.now, names[sc]))
        end
        local new = new_sidecar(i)
        base[new] = C.per_key(new)
        W:advance(0)
        note(string.format("%d %s started in slot %d", W.now, names[new], i))
        probe_subscribe(i)
        probe(i)
    end

    local function fault()
        local i = rng.int(1, 3)
        local sc = scs[i]
        local k = rng.int(1, 12)
        if k <= 4 then
            local op = rng.pick({ "get", "create", "set", "multi", "delete", "children", "exists" })
            local when = rng.chance(0.5) and "after" or "before"
            sc:fail_next({ op = op, when = when, skip = rng.int(0, 4) })
            note(string.format("%d fault %s: lost %s %s", W.now, names[sc], op, when))
        elseif k <= 5 and not down[sc] and sc.connected and not stopping[i] then
            down[sc] = true
            local back = rng.int(50, 3000)
            sc:disconnect()
            note(string.format("%d fault %s: disconnect, back at +%d", W.now, names[sc], back))
            pending_ev[#pending_ev + 1] = W:at(W.now + back, function()
                down[sc] = nil
                if not sc.closing then sc:reconnect() note(string.format("%d %s reconnected", W.now, names[sc])) end
            end)
        elseif k == 6 and not down[sc] and sc.connected and not stopping[i] then
            local old = sc.sid
            end_session(old)
            sc:expire()
            note(string.format("%d fault %s: session %d expired", W.now, names[sc], old))
        elseif k <= 8 then
            local conn = rng.pick(conns)
            if not (stopping[conn.slot] and scs[conn.slot].stopping) then gone(conn, scs[conn.slot]) end
        elseif not stopping[i] and not next(stopping) then
            -- SIGTERM
            local how = rng.chance(0.25) and "left" or "close"
            stopping[i] = { sc = sc, deadline = W.now + GRACE, how = how, events = {} }
            note(string.format("%d SIGTERM %s (%s)", W.now, names[sc], how))
            sigterm(W, sc)
        end
    end

    local ok, err = pcall(function()
        for _ = 1, steps do
            for _, conn in ipairs(conns) do
                finish(conn)
                if not conn.task and rng.chance(0.5) then start(conn) end
                if conn.task and not conn.task.done and conn.task.limit and W.now > conn.task.limit then
                    fail(string.format("c%d %s: no answer after %d ms", conn.id, conn.task.text,
                                       W.now - conn.task.limit + 40000))
                end
            end
            for i, st in pairs(stopping) do
                local busy = false
                for _, conn in ipairs(conns) do
                    if conn.slot == i and conn.task and not conn.task.done then busy = true end
                end
                if not busy or W.now >= st.deadline then finish_stop(i) end
            end
            if rng.chance(0.1) then fault() end
            local adv = rng.chance(0.03) and rng.int(2000, 20000) or rng.int(0, 60)
            -- a grace's end comes on time
            for _, st in pairs(stopping) do adv = math.min(adv, math.max(0, st.deadline - W.now)) end
            W:advance(adv)
        end
        for i in pairs(stopping) do
            W:advance(math.max(0, stopping[i].deadline - W.now))
            finish_stop(i)
        end
        for _, conn in ipairs(conns) do finish(conn); gone(conn, scs[conn.slot]) end
        for i = 1, 3 do scs[i]:run(function() scs[i].M.on_client_gone(100000 + i) end) end
        for _, ev in ipairs(pending_ev) do ev.cancel() end
        for _, sc in ipairs(scs) do
            sc.faults = {}
            if not sc.connected then sc:reconnect() end
        end
        for sid, s in pairs(W.sessions) do
            local live = false
            for _, sc in ipairs(scs) do if sc.sid == sid then live = true end end
            if s.alive and not live then W:expire_session(sid) end
        end
        for _ = 1, 4 do W:advance(60000) end
        for _, conn in ipairs(conns) do finish(conn) end
    end)
    if not ok then
        if tostring(err):find("^seed ") then error(err, 0) end
        fail("crashed: " .. tostring(err))
    end

    local bad = {}
    local live = {}
    for _, sc in ipairs(scs) do live[sc.sid] = true end
    for _, sc in ipairs(scs) do
        local q, mx = sc.require("queue"), sc.require("cmd_multi")
        if q.busy() ~= 0 then bad[#bad + 1] = names[sc] .. ": key queues left: " .. q.busy() end
        if mx.count() ~= 0 then bad[#bad + 1] = names[sc] .. ": MULTI queues left" end
        if mx.watching() ~= 0 then bad[#bad + 1] = names[sc] .. ": watches left" end
        for k, n in pairs(C.per_key(sc)) do
            if n > (base[sc][k] or 0) + 2 then
                bad[#bad + 1] = string.format("%s: %s %d -> %d", names[sc], k, base[sc][k] or 0, n)
            end
        end
    end
    for _, p in ipairs(walk(W, ROOT .. "/l", {})) do
        if p:find("^" .. ROOT .. "/l/[^/]+/") then bad[#bad + 1] = "lock request left: " .. p end
    end
    for _, p in ipairs(walk(W, ROOT .. "/ps", {})) do
        local kind, rest = p:match("^" .. ROOT .. "/ps/(%a)/(.*)$")
        if kind == "i" or kind == "l" or kind == "b" then
            if rest:find("/") then bad[#bad + 1] = "message or doorbell left: " .. p
            elseif kind == "l" and not live[W:node(p).stat.ephemeralOwner] then bad[#bad + 1] = "dead liveness node: " .. p end
        elseif kind then
            bad[#bad + 1] = "pub/sub node left: " .. p
        end
    end
    local nl = #(W:children(ROOT .. "/ps/l") or {})
    local ni = #(W:children(ROOT .. "/ps/i") or {})
    if nl ~= 3 or ni ~= 3 then
        bad[#bad + 1] = string.format("pub/sub: %d liveness nodes, %d inboxes (%s)", nl, ni,
                                      table.concat(W:children(ROOT .. "/ps/i") or {}, ","))
    end
    for _, g in ipairs(W:children(ROOT .. "/g") or {}) do
        if not live[W:node(ROOT .. "/g/" .. g).stat.ephemeralOwner] then bad[#bad + 1] = "guard of a dead session: " .. g end
    end
    for _, m in ipairs(W:children(ROOT .. "/m") or {}) do
        if not m:find("^p%.%d+$") and not live[W:node(ROOT .. "/m/" .. m).stat.ephemeralOwner] then
            bad[#bad + 1] = "mark of a dead session: " .. m
        end
    end
    if #(W:children(ROOT .. "/s") or {}) > 4 then bad[#bad + 1] = "scripts: " .. #W:children(ROOT .. "/s") end
    for _, k in ipairs(W:children(ROOT .. "/k") or {}) do
        local n = W:node(ROOT .. "/k/" .. k)
        if n.stat.ephemeralOwner ~= 0 then bad[#bad + 1] = "ephemeral key left past every TTL: " .. k
        elseif not (k:find("^warm") or k:find("^m%d$")) then bad[#bad + 1] = "key left: " .. k end
    end
    if #bad > 0 then
        table.sort(bad)
        fail(table.concat(bad, "\n"))
    end
end

---------------------------------------------------------------------------
-- Shrunk, deterministic cases (each passes on the current scripts; kept as
-- regression coverage of what the sweep checks)

-- SIGTERM, the grace, then the session closed ("close") or, the close lost,
-- left for the server to expire a session timeout later ("left"); a fresh
-- sidecar on the same root.  Answers the new sidecar.
local function restart(W, sc, how)
    sigterm(W, sc)
    W:advance(20)
    if how == "left" then
        sc.closing = true
        local sid = sc.sid
        W:at(W.now + 10000, function() W:expire_session(sid) end)
    else
        sc:close()
    end
    local new = W:sidecar()
    W:advance(0)
    return new
end

describe("restart: what the new sidecar knows", function()
    it("EVALSHA of a script loaded through the stopped sidecar runs on the new one", function()
        local W, a = S.warm_world(3)
        local sha = a:call("SCRIPT", "LOAD", "return redis.call('get', KEYS[1])")
        assert.same(S.OK, a:call("SET", "k", "v"))
        local a2 = restart(W, a, "close")
        assert.equal("v", a2:call("EVALSHA", sha, "1", "k"))
    end)

    for _, how in ipairs({ "close", "left" }) do
        it("its first PUBLISH reaches a subscriber of a survivor, and back (" .. how .. ")", function()
            local W, a, b, c = S.warm_world(3)
            b:call_as(7, "SUBSCRIBE", "news")
            a:call_as(8, "SUBSCRIBE", "news") -- the stopped sidecar's own subscriber goes with it
            W:advance(100)
            local a2 = restart(W, a, how)
            assert.is_true(a2:call("PUBLISH", "news", "1") >= 1)
            a2:call_as(9, "SUBSCRIBE", "news")
            assert.is_true(c:call("PUBLISH", "news", "2") >= 2)
            W:advance(300)
            assert.same({ "news=1", "news=2" }, messages(b, 7))
            assert.same({ "news=2" }, messages(a2, 9))
            -- once the old session has ended and --pubsub-gc-delay passed:
            -- only the live sidecars' liveness nodes and inboxes
            W:advance(70000)
            assert.equal(2, c:call("PUBLISH", "news", "3"))
            W:advance(300)
            assert.same({ "news=1", "news=2", "news=3" }, messages(b, 7))
            assert.equal(3, #W:children(ROOT .. "/ps/i"))
            assert.equal(3, #W:children(ROOT .. "/ps/l"))
        end)
    end

    it("an old session left to expire keeps its locks until it ends; its owner may release through the new sidecar", function()
        local W, a, b = S.warm_world(3)
        local t1 = a:call("LOCK.ACQUIRE", "L", "o1", "PX", "60000")
        assert.same(S.OK, a:call("SET", "s", "tok", "NX", "PX", "60000"))
        local w = b:start("LOCK.ACQUIRE", "L", "o2", "PX", "60000", "WAIT", "30000")
        local a2 = restart(W, a, "left")
        assert.equal(null, a2:call("LOCK.ACQUIRE", "L", "o3", "WAIT", "0"))
        assert.equal(null, a2:call("SET", "s", "x", "NX", "PX", "1000"))
        -- (README "Native locks": the owner, not the connection, holds)
        assert.equal(1, a2:call("LOCK.RELEASE", "L", "o1"))
        W:run_until(function() return w.done end, 5000)
        assert.is_true(w.result > t1)
        -- the string lock stays the old session's until it ends
        assert.equal(null, a2:call("SET", "s", "x", "NX", "PX", "1000"))
        W:advance(10000)
        assert.same(S.OK, a2:call("SET", "s", "x", "NX", "PX", "1000"))
    end)
end)

describe("restart: the grace period", function()
    it("a MULTI opened before SIGTERM queues on; its EXEC is refused and applies nothing", function()
        local W, a, b = S.warm_world(2)
        assert.same(S.OK, call(W, a, 5, "WATCH", "m"))
        local function q(...) local t = send(W, a, 5, { ... }, "queued") W:run_until(function() return t.done end) return t.result end
        local t = send(W, a, 5, { "MULTI" }, "begin")
        W:run_until(function() return t.done end)
        assert.same(S.OK, t.result)
        assert.same({ ok = "QUEUED" }, q("SET", "m", "1"))
        sigterm(W, a)
        W:advance(10)
        assert.same({ ok = "QUEUED" }, q("INCR", "n"))
        assert.same({ err = CLOSING }, q("EXEC"))
        assert.equal(0, a.require("cmd_multi").count())
        assert.equal(0, a.require("cmd_multi").watching())
        assert.equal(null, b:call("GET", "m"))
        assert.equal(null, b:call("GET", "n"))
    end)

    it("a string-lock release sent in the grace is refused, the lock goes at the close, not before", function()
        local W, a, b = S.warm_world(2)
        assert.same(S.OK, a:call("SET", "s", "t", "NX", "PX", "60000"))
        sigterm(W, a)
        W:advance(10)
        assert.same({ err = CLOSING }, call(W, a, 5, "EVAL", PY_RELEASE, "1", "s", "t"))
        assert.equal(null, b:call("SET", "s", "u", "NX", "PX", "1000"))
        a:close()
        W:advance(10)
        assert.same(S.OK, b:call("SET", "s", "u", "NX", "PX", "1000"))
    end)
end)

---------------------------------------------------------------------------

describe("restart fuzz: rolling restarts under every command family", function()
    local seeds = {}
    local env = os.getenv("RESTART_FUZZ_SEEDS")
    local steps = tonumber(os.getenv("RESTART_FUZZ_STEPS")) or 400
    if env then
        local from, to = env:match("^(%d+)-(%d+)$")
        for s = tonumber(from), tonumber(to) do seeds[#seeds + 1] = s end
    else
        -- (1-150 at 400 steps passed)
        seeds = { 1, 2, 3, 4, 5, 6 }
    end
    for _, seed in ipairs(seeds) do
        it("holds every invariant (seed " .. seed .. ")", function() run_seed(seed, steps) end)
    end
end)

return { run_seed = run_seed, send = send, sigterm = sigterm }
