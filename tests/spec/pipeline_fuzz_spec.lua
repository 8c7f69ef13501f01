-- pipeline_fuzz_spec.lua — a helper's seeded fuzz of one connection's
-- pipeline order with many connections on one or two sidecars (queue.lua's
-- per-key queues and Q.turn, zkresp.lua's dispatch, cmd_multi.lua).
--
-- Seven connections, each with databases of its own (c and c + 7: SELECT
-- switches between them), send random pipelines of 5-30 commands side by
-- side: SET GET INCR DEL APPEND EXPIRE TTL RENAME MSET MGET, DBSIZE KEYS
-- SCAN FLUSHDB PUBLISH SCRIPT LOAD/FLUSH, EVAL with and without KEYS,
-- WATCH, MULTI ... EXEC/DISCARD, a shared counter (INCR in database 0)
-- and a shared native lock (LOCK.ACQUIRE ... WAIT, LOCK.RELEASE), CLIENT
-- UNBLOCK of a waiting acquire from another connection, a connection
-- closed mid-pipeline, and faults (latency, lost replies, a disconnect).
--
-- Since no connection reads another's databases, each connection's replies
-- must be exactly those of its commands run one after another (a -TRYAGAIN
-- forks the model: applied or not); a command without keys finishes after
-- every earlier command of its connection and before any later one; a
-- closed connection's commands from the first that still waited for its
-- turn on never run (README "pipeline order"); the shared counter's
-- replies are distinct; at the end no queue, turn, MULTI or watch is left.
local S = require "world"
local null, OK, E = S.null, S.OK, S.E

local QUEUED = { ok = "QUEUED" }
local ABORTED = { null_array = true }
local NCONN = 7

---------------------------------------------------------------------------
-- PRNG (an LCG of our own: the sidecars' sandbox shares math.random)

local function prng(seed)
    local s = seed
    local r = {}
    function r.int(n)
        s = (s * 1103515245 + 12345) % 2147483648
        return (s >> 8) % n + 1
    end
    function r.pick(list) return list[r.int(#list)] end
    return r
end

---------------------------------------------------------------------------
-- The serial model of one connection: its databases (key -> {v=, ttl=}),
-- its watches, its MULTI queue.

local function copy_state(st)
    local n = { dbs = {}, watched = {}, multi = nil }
    for db, keys in pairs(st.dbs) do
        local t = {}
        for k, e in pairs(keys) do t[k] = { v = e.v, ttl = e.ttl } end
        n.dbs[db] = t
    end
    for k, d in pairs(st.watched) do n.watched[k] = d end
    if st.multi then n.multi = table.move(st.multi, 1, #st.multi, 1, {}) end
    return n
end

local function touch(st, db, k)
    local w = db .. "/" .. k
    if st.watched[w] ~= nil then st.watched[w] = true end
end

local function sorted_keys(keys)
    local l = {}
    for k in pairs(keys) do l[#l + 1] = k end
    table.sort(l)
    return l
end

-- (a script lists or counts before it writes: README, "KEYS, SCAN,
-- RANDOMKEY and DBSIZE cannot follow a write in the same script")
local BODY_SET_DBSIZE = "local n = redis.call('dbsize') redis.call('set', ARGV[1], ARGV[2]) return n"
local BODY_GET = "return redis.call('get', ARGV[1])"
local BODY_APPEND = "return redis.call('append', KEYS[1], ARGV[1])"
local BODY_INCR2 = "return redis.call('incr', KEYS[1]) + redis.call('incr', KEYS[2])"

local function show(r)
    if type(r) == "table" and r.null_array then return "(nil array)" end
    return S.show(r)
end

-- (as Redis's string2ll: no leading zero, no "-0")
local function is_int(v)
    return v ~= nil and (v == "0" or v:match("^%-?[1-9]%d*$") ~= nil) and #v < 18
end

-- Applies command c (words, db) to state st (changed in place); answers
-- the expected reply, or a function checking the reply (for loose ones).
local function apply(st, c)
    local w, db = c.words, c.db
    local keys = st.dbs[db]
    if not keys then keys = {}; st.dbs[db] = keys end
    local name = w[1]:upper()
    if name == "SET" then
        keys[w[2]] = { v = w[3] }
        touch(st, db, w[2])
        return OK
    elseif name == "GET" then
        return keys[w[2]] and keys[w[2]].v or null
    elseif name == "INCR" then
        local e = keys[w[2]]
        if e and not is_int(e.v) then return S.NOT_INT end
        local n = (e and math.tointeger(tonumber(e.v)) or 0) + 1
        keys[w[2]] = { v = tostring(n), ttl = e and e.ttl }
        touch(st, db, w[2])
        return n
    elseif name == "DEL" then
        local n = 0
        for i = 2, #w do
            if keys[w[i]] then
                keys[w[i]] = nil
                touch(st, db, w[i])
                n = n + 1
            end
        end
        return n
    elseif name == "APPEND" then
        local e = keys[w[2]]
        local v = (e and e.v or "") .. w[3]
        keys[w[2]] = { v = v, ttl = e and e.ttl }
        touch(st, db, w[2])
        return #v
    elseif name == "EXPIRE" then
        local e = keys[w[2]]
        if not e then return 0 end
        e.ttl = true
        touch(st, db, w[2])
        return 1
    elseif name == "TTL" then
        local e = keys[w[2]]
        if not e then return -2 end
        if not e.ttl then return -1 end
        -- (EXPIRE's 1000 s, less the run's time since: a few seconds at
        -- most, faults included; seed 190's TTL came two rounds after)
        return function(r) return math.type(r) == "integer" and r >= 990 and r <= 1000 end
    elseif name == "RENAME" then
        local e = keys[w[2]]
        if not e then return E("ERR no such key") end
        keys[w[2]] = nil
        keys[w[3]] = e
        touch(st, db, w[2])
        touch(st, db, w[3])
        return OK
    elseif name == "MSET" then
        for i = 2, #w, 2 do
            keys[w[i]] = { v = w[i + 1] }
            touch(st, db, w[i])
        end
        return OK
    elseif name == "MGET" then
        local out = {}
        for i = 2, #w do out[i - 1] = keys[w[i]] and keys[w[i]].v or null end
        return out
    elseif name == "DBSIZE" then
        local n = 0
        for _ in pairs(keys) do n = n + 1 end
        return n
    elseif name == "KEYS" then
        local want = sorted_keys(keys)
        return function(r)
            if type(r) ~= "table" or r.err then return false end
            local got = table.move(r, 1, #r, 1, {})
            table.sort(got)
            return table.concat(got, ",") == table.concat(want, ",")
        end
    elseif name == "SCAN" then
        local want = sorted_keys(keys)
        return function(r)
            if type(r) ~= "table" or r.err or type(r[2]) ~= "table" then return false end
            local got = table.move(r[2], 1, #r[2], 1, {})
            table.sort(got)
            if r[1] == "0" then return table.concat(got, ",") == table.concat(want, ",") end
            for _, k in ipairs(got) do if not keys[k] then return false end end
            return true
        end
    elseif name == "FLUSHDB" then
        for k in pairs(keys) do touch(st, db, k) end
        st.dbs[db] = {}
        return OK
    elseif name == "PUBLISH" then
        return 0
    elseif name == "SCRIPT" then
        if w[2]:upper() == "FLUSH" then return OK end
        return function(r) return type(r) == "string" and #r == 40 end
    elseif name == "EVAL" then
        if w[2] == BODY_SET_DBSIZE then
            local n = apply(st, { words = { "DBSIZE" }, db = db })
            apply(st, { words = { "SET", w[4], w[5] }, db = db })
            return n
        elseif w[2] == BODY_GET then
            return apply(st, { words = { "GET", w[4] }, db = db })
        elseif w[2] == BODY_APPEND then
            return apply(st, { words = { "APPEND", w[4], w[5] }, db = db })
        elseif w[2] == BODY_INCR2 then
            local e1 = keys[w[4]]
            if (e1 and not is_int(e1.v)) then return function(r) return type(r) == "table" and r.err ~= nil end end
            local saved = copy_state(st)
            local x = apply(st, { words = { "INCR", w[4] }, db = db })
            local y = apply(st, { words = { "INCR", w[5] }, db = db })
            if type(y) ~= "number" then
                -- the script raised after its first INCR: it commits
                -- nothing (README: "A script that raises an error commits
                -- nothing", where Redis keeps that write)
                st.dbs, st.watched = saved.dbs, saved.watched
                return function(r) return type(r) == "table" and r.err ~= nil end
            end
            return x + y
        end
    elseif name == "WATCH" then
        for i = 2, #w do
            local k = db .. "/" .. w[i]
            if st.watched[k] == nil then st.watched[k] = false end
        end
        return OK
    elseif name == "MULTI" then
        st.multi = {}
        return OK
    elseif name == "EXEC" then
        local q = st.multi
        st.multi = nil
        local dirty = false
        for _, d in pairs(st.watched) do dirty = dirty or d end
        st.watched = {}
        if dirty then return ABORTED end
        local out = {}
        for i, qc in ipairs(q) do out[i] = apply(st, qc) end
        return out
    elseif name == "DISCARD" then
        st.multi = nil
        st.watched = {}
        return OK
    end
    error("model: no " .. name)
end

-- Whether reply r is what `want` (a reply, or a check) allows.
local function matches(want, r)
    if type(want) == "function" then return want(r) end
    if type(want) == "table" and type(r) == "table" and not want.err and not want.ok
       and not want.null_array and not r.err then
        if #want ~= #r then return false end
        for i = 1, #want do if not matches(want[i], r[i]) then return false end end
        return true
    end
    if type(want) == "table" and type(r) == "table" then
        return want.err == r.err and want.ok == r.ok and want.null_array == r.null_array
    end
    return want == r
end

-- Feeds command c with reply r to the candidate states; a queued command
-- (inside MULTI) joins the MULTI queue.  Answers the states that explain r.
local WRITES = { SET = 1, INCR = 1, DEL = 1, APPEND = 1, EXPIRE = 1, RENAME = 1, MSET = 1,
                 FLUSHDB = 1, EVAL = 1, EXEC = 1 }
local function feed(states, c, r)
    local out = {}
    for _, st in ipairs(states) do
        if c.mode == "queued" and c.words[1]:upper() ~= "EXEC" and c.words[1]:upper() ~= "DISCARD" then
            if matches(QUEUED, r) then
                st.multi[#st.multi + 1] = { words = c.words, db = c.db }
                out[#out + 1] = st
            end
        elseif S.tryagain(r) then
            -- outcome unknown: applied or not
            local applied = copy_state(st)
            apply(applied, c)
            if WRITES[c.words[1]:upper()] then out[#out + 1] = applied end
            if c.words[1]:upper() == "EXEC" then st.multi = nil; st.watched = {} end
            out[#out + 1] = st
        else
            local want = apply(st, c)
            if matches(want, r) then out[#out + 1] = st end
        end
    end
    while #out > 64 do table.remove(out) end
    return out
end

---------------------------------------------------------------------------
-- Generating a connection's pipeline

local SMALL_KEYS = { "a", "b", "c", "n" }
local VALUES = { "1", "7", "x", "-2" }

local function gen_pipeline(rng, conn, len)
    local cmds = {}
    local db = conn.db
    local in_multi = false
    local function add(words, mode, extra)
        local c = { words = words, db = db, mode = mode }
        if extra then for k, v in pairs(extra) do c[k] = v end end
        cmds[#cmds + 1] = c
        return c
    end
    local function key() return rng.pick(SMALL_KEYS) end
    local function val() return rng.pick(VALUES) end
    local function keyed()
        local k = rng.int(10)
        if k == 1 then return { "SET", key(), val() }
        elseif k == 2 then return { "GET", key() }
        elseif k == 3 then return { "INCR", key() }
        elseif k == 4 then return { "DEL", key(), key() }
        elseif k == 5 then return { "APPEND", key(), val() }
        elseif k == 6 then return { "EXPIRE", key(), "1000" }
        elseif k == 7 then return { "TTL", key() }
        elseif k == 8 then
            local x, y = key(), key()
            if x == y then return { "GET", x } end
            return { "RENAME", x, y }
        elseif k == 9 then return { "MSET", key(), val(), key(), val() }
        else return { "MGET", key(), key(), key() } end
    end
    while #cmds < len do
        local k = rng.int(30)
        if in_multi then
            if k <= 4 then
                add({ rng.int(5) == 1 and "DISCARD" or "EXEC" }, "queued")
                in_multi = false
            else
                add(keyed(), "queued")
            end
        elseif k <= 12 then add(keyed())
        elseif k == 13 then add({ "DBSIZE" })
        elseif k == 14 then add({ "KEYS", "*" })
        elseif k == 15 then add({ "SCAN", "0", "COUNT", "1000" })
        elseif k == 16 and rng.int(3) == 1 then add({ "FLUSHDB" })
        elseif k == 17 then add({ "PUBLISH", "ch" .. conn.id, "m" })
        elseif k == 18 then
            if rng.int(4) == 1 then add({ "SCRIPT", "FLUSH" })
            else add({ "SCRIPT", "LOAD", rng.int(2) == 1 and "return 1" or BODY_GET }) end
        elseif k == 19 then add({ "EVAL", BODY_SET_DBSIZE, "0", key(), val() })
        elseif k == 20 then add({ "EVAL", BODY_GET, "0", key() })
        elseif k == 21 then add({ "EVAL", BODY_APPEND, "1", key(), val() })
        elseif k == 22 then add({ "EVAL", BODY_INCR2, "2", key(), key() })
        elseif k == 23 then add({ "WATCH", key(), key() })
        elseif k == 24 then
            add({ "MULTI" }, "begin")
            in_multi = true
        elseif k == 25 then
            -- SELECT: answered by the gateway as it is read
            db = (db == conn.id) and conn.id + 7 or conn.id
            add({ "SELECT", tostring(db) }, nil, { gateway = true })
        elseif k == 26 then add({ "INCR", "ctr" }, nil, { shared = true, db = 0 })
        elseif k == 27 then
            add({ "LOCK.ACQUIRE", "lk", "o" .. conn.id, "PX", "60000", "WAIT", tostring(50 * rng.int(6)) },
                nil, { lock = true })
        elseif k == 28 then add({ "LOCK.RELEASE", "lk", "o" .. conn.id }, nil, { lock = true })
        else add(keyed()) end
    end
    if in_multi then add({ "EXEC" }, "queued") end
    conn.db = db
    return cmds
end

---------------------------------------------------------------------------
-- One run

local ALONE = { DBSIZE = 1, KEYS = 1, SCAN = 1, FLUSHDB = 1, PUBLISH = 1, SCRIPT = 1 }
local function alone(c)
    local n = c.words[1]:upper()
    if c.mode then return n == "EXEC" end
    if n == "EVAL" then return c.words[3] == "0" end
    return ALONE[n] ~= nil
end

local function run_seed(seed, opts)
    opts = opts or {}
    local rng = prng(seed)
    local skip = os.getenv("PIPELINE_FUZZ_SKIP") or "" -- (replaying: faults left out, the same draws)
    local log = {}
    local function note(s) log[#log + 1] = s end
    local function fail(msg)
        error(string.format("seed %d: %s\n%s", seed, msg, table.concat(log, "\n", math.max(1, #log - (tonumber(os.getenv("PIPELINE_FUZZ_LOG")) or 150)))), 0)
    end
    local W, a, b = S.world(2)
    S.warm(W, a, b)
    local sidecars = { a, b }
    if os.getenv("PIPELINE_FUZZ_TRACE") then
        for _, sc in ipairs(sidecars) do
            local q = sc.require("queue")
            local hold, turn = q.hold, q.turn
            q.hold = function(paths)
                local t = W:task_of()
                note(string.format("   trace t%s client %s hold %s at %s", tostring(t and t.tag), tostring(t and t.client),
                                   table.concat(paths, ","), W.now))
                local r = hold(paths)
                note(string.format("   trace t%s holds %s at %s", tostring(t and t.tag), table.concat(paths, ","), W.now))
                return r
            end
            q.turn = function(id, al, bw)
                local t = W:task_of()
                note(string.format("   trace t%s turn alone=%s at %s", tostring(t and t.tag), tostring(al), W.now))
                local r = turn(id, al, bw)
                note(string.format("   trace t%s got turn at %s", tostring(t and t.tag), W.now))
                return r
            end
        end
    end
    local conns = {}
    for i = 1, NCONN do
        conns[i] = { id = i, cid = 100 + i, db = i, sc = sidecars[(i % 2) + 1], states = { { dbs = {}, watched = {} } } }
    end
    local ctr_seen, ctr_unknown = {}, 0
    local rounds = opts.rounds or 3
    for round = 1, rounds do
        local all = {}
        for _, conn in ipairs(conns) do
            conn.cmds = gen_pipeline(rng, conn, 5 + rng.int(26) - 1)
        end
        -- start them interleaved, each connection's in order
        local pos = {}
        local left = 0
        for _, conn in ipairs(conns) do pos[conn.id] = 1; left = left + #conn.cmds end
        while left > 0 do
            local conn = conns[rng.int(NCONN)]
            local c = conn.cmds[pos[conn.id]]
            if c then
                pos[conn.id] = pos[conn.id] + 1
                left = left - 1
                local sc = conn.sc
                if c.gateway then
                    c.task = { done = true, result = OK, gateway = true }
                else
                    local words, db, mode = c.words, c.db, c.mode
                    c.task = W:spawn(sc, function() return sc.M.dispatch(words, false, db, mode) end)
                    c.task.client = conn.cid
                    c.task.tag = conn.id .. "#" .. (pos[conn.id] - 1)
                end
                all[#all + 1] = c
                note(string.format("r%d c%d#%d db%d %s%s", round, conn.id, pos[conn.id] - 1, c.db,
                                   c.mode and (c.mode .. " ") or "", table.concat(c.words, " "):gsub("return redis.call%(.-%) %+ redis.call%(.-%)", "INCR2"):gsub("return redis.call%(.get., ARGV%[1%]%)", "GETA"):gsub("local n = .- return n", "DBSIZE_SET"):gsub("return redis.call%(.append.-%)", "APPENDK")))
            end
        end
        -- faults
        local nf = rng.int(4) - 1
        local disc = {}
        for _ = 1, nf do
            local sc = rng.pick(sidecars)
            local f = rng.int(4)
            if f == 1 then
                local op, ms, sk = rng.pick({ "get", "create", "set", "multi", "children" }), rng.int(60), rng.int(10) - 1
                sc:fail_next({ op = op, pass = true, latency = ms, skip = sk })
                note(string.format("fault: latency %d ms of a %s, skip %d on %s", ms, op, sk, sc == a and "a" or "b"))
            elseif f == 2 and not opts.no_lost then
                local op = rng.pick({ "create", "set", "multi", "delete" })
                local sk = rng.int(10) - 1
                if not skip:find("lost") then sc:fail_next({ op = op, when = "after", skip = sk,
                               hook = function() note("fired: lost reply of a " .. op .. " at " .. W.now) end }) end
                note("fault: lost reply of a " .. op .. " skip " .. sk .. (sc == a and " on a" or " on b"))
            elseif f == 3 and not opts.no_lost then
                local at = W.now + rng.int(20)
                local back = at + rng.int(300)
                -- (one at a time per sidecar: a real connection is lost
                -- once before it is back)
                if not skip:find("disc") and not disc[sc] then
                    disc[sc] = true
                    W:at(at, function() sc:disconnect() end)
                    W:at(back, function() sc:reconnect() end)
                end
                note("fault: disconnect at " .. at .. " back " .. back .. (sc == a and " on a" or " on b"))
            else
                sc:fail_next({ op = "get", pass = true, latency = 30 })
            end
        end
        -- a connection closed mid-pipeline
        local closed
        if not opts.no_close and rng.int(3) == 1 then
            closed = conns[rng.int(NCONN)]
            local at = W.now + rng.int(40) - 1
            closed.ev = W:at(at, function()
                closed.cut = nil
                for i, c in ipairs(closed.cmds) do
                    local t = c.task
                    if not t.gateway and not t.done then
                        if t.queued == true and not closed.cut then closed.cut = i end
                        closed.sc:abandon(t)
                    end
                end
                closed.cut = closed.cut or #closed.cmds + 1
                closed.sc:run(function() closed.sc.M.on_client_gone(closed.cid) end)
                note("close c" .. closed.id .. " at " .. W.now .. " cut " .. closed.cut)
            end)
        end
        -- CLIENT UNBLOCK of a waiting acquire, from another connection
        if rng.int(2) == 1 then
            W:at(W.now + rng.int(100), function()
                for _, c in ipairs(all) do
                    if c.lock and c.task.blocked and not c.task.done then
                        local r = (c.task.sc):unblock(c.task, rng.int(2) == 1 and "error" or "timeout")
                        note("unblock " .. table.concat(c.words, " ") .. ": " .. r)
                        break
                    end
                end
            end)
        end
        local ok, e = pcall(W.run_until, W, function()
            for _, c in ipairs(all) do if not c.task.done then return false end end
            return true
        end, 120000)
        if not ok then fail("did not settle: " .. tostring(e)) end
        if closed and not closed.cut then
            -- everything was done before the close: none this round
            note("close c" .. closed.id .. " came too late")
            closed.ev.cancel()
            closed = nil
        end
        -- check each connection
        for _, conn in ipairs(conns) do
            local fin = {}
            for i, c in ipairs(conn.cmds) do
                local t = c.task
                local r = t.result
                note(string.format("  c%d#%d -> %s (finished %s)", conn.id, i, show(r), tostring(t.finished)))
                if type(r) == "table" and type(r.err) == "string" and r.err:match("^ERR") and
                   (r.err:find("attempt to") or r.err:find("internal") or r.err:find("%.lua:")) then
                    fail(string.format("c%d#%d %s: internal error %s", conn.id, i, table.concat(c.words, " "), r.err))
                end
                if conn == closed and i >= closed.cut then
                    if not c.gateway and r ~= nil and not (c.mode and (matches(QUEUED, r) or matches(OK, r))) then
                        fail(string.format("c%d#%d ran after its connection closed: %s -> %s", conn.id, i,
                                           table.concat(c.words, " "), show(r)))
                    end
                elseif c.shared then
                    if type(r) == "number" then
                        if ctr_seen[r] then fail("shared counter answered " .. r .. " twice") end
                        ctr_seen[r] = true
                    elseif not S.tryagain(r) then
                        fail("shared INCR: " .. show(r))
                    else
                        ctr_unknown = ctr_unknown + 1
                    end
                elseif c.lock then
                    if not (type(r) == "number" or r == null or S.tryagain(r) or
                            (type(r) == "table" and type(r.err) == "string" and
                             (r.err:find("^UNBLOCKED") or r.err:find("already waits for this lock")))) then
                        fail("lock: " .. table.concat(c.words, " ") .. " -> " .. show(r))
                    end
                elseif not c.gateway then
                    if r == nil and conn ~= closed then fail(string.format("c%d#%d no reply", conn.id, i)) end
                    if conn ~= closed or r ~= nil then
                        local before = copy_state(conn.states[1])
                        conn.states = feed(conn.states, c, r)
                        if #conn.states == 0 then
                            local want = apply(before, c)
                            fail(string.format("c%d#%d %s (db %d): got %s, a serial run answers %s", conn.id, i,
                                               table.concat(c.words, " "), c.db, show(r),
                                               type(want) == "function" and "something else" or show(want)))
                        end
                    end
                end
                if t.finished then fin[i] = t.finished end
            end
            -- a command without keys ran alone in its connection's pipeline
            local cut = conn == closed and closed.cut or math.huge
            for i, c in ipairs(conn.cmds) do
                if alone(c) and fin[i] and i < cut then
                    for j, d in ipairs(conn.cmds) do
                        if not d.gateway and fin[j] and j < cut and not (d.mode == "queued" or d.mode == "begin") then
                            if j < i and fin[j] > fin[i] then
                                fail(string.format("c%d#%d %s finished before #%d", conn.id, i, c.words[1], j))
                            elseif j > i and fin[j] < fin[i] then
                                fail(string.format("c%d#%d %s finished after #%d", conn.id, i, c.words[1], j))
                            end
                        end
                    end
                end
            end
            if conn == closed then
                -- a new connection: no MULTI, no watches; the model keeps
                -- the states (those of the cut's prefix, and, where
                -- commands after it ran without a reply, unknown)
                conn.cid = conn.cid + 1000
                for _, st in ipairs(conn.states) do st.multi = nil; st.watched = {} end
            end
        end
        -- every connection releases the lock (no check of the reply)
        for _, conn in ipairs(conns) do
            local r = conn.sc:call_as(conn.cid, "LOCK.RELEASE", "lk", "o" .. conn.id)
            note(string.format("end of round %d: c%d releases: %s at %s", round, conn.id, show(r), W.now))
        end
        -- the databases as every connection's model has them
        for _, conn in ipairs(conns) do
            for _, db in ipairs({ conn.id, conn.id + 7 }) do
                local got = conn.sc:run(function()
                    local t = W:task_of(); t.client = conn.cid
                    return conn.sc.M.dispatch({ "KEYS", "*" }, false, db)
                end)
                table.sort(got)
                local any = false
                for _, st in ipairs(conn.states) do
                    if table.concat(sorted_keys(st.dbs[db] or {}), ",") == table.concat(got, ",") then any = true end
                end
                if not any then fail(string.format("c%d db %d holds {%s}, no serial run does", conn.id, db,
                                                   table.concat(got, ","))) end
            end
        end
        -- the per-connection state is gone
        for _, sc in ipairs(sidecars) do
            local q, mx = sc.require("queue"), sc.require("cmd_multi")
            if q.busy() ~= 0 then fail("a key queue left") end
            if q.connections() ~= 0 then fail("a connection's turns left") end
            if mx.count() ~= 0 then
                -- a connection in MULTI at the end of its pipeline cannot be:
                -- every MULTI is closed by EXEC or DISCARD (or its close)
                fail("a MULTI queue left: " .. mx.count())
            end
        end
        for _, conn in ipairs(conns) do
            for _, st in ipairs(conn.states) do st.watched = {} end
            conn.sc:run(function() conn.sc.M.on_client_gone(conn.cid) end)
        end
        for _, sc in ipairs(sidecars) do
            if sc.require("cmd_multi").watching() ~= 0 then fail("watches left") end
        end
        W:advance(100)
    end
    -- the shared counter counts every INCR that answered
    local n = 0
    for _ in pairs(ctr_seen) do n = n + 1 end
    local v = tonumber(a:call("GET", "ctr") or 0) or 0
    if v < n or v > n + ctr_unknown then fail(string.format("ctr %d, %d answered, %d unknown", v, n, ctr_unknown)) end
    for i = 1, n do if not ctr_seen[i] and ctr_unknown == 0 then fail("ctr: " .. i .. " never answered") end end
    -- every lease over: no lock is held, nothing of a lock is left
    W:advance(61000)
    local function walk(path, out)
        for _, name in ipairs(W:children(path) or {}) do
            out[#out + 1] = path .. "/" .. name
            walk(path .. "/" .. name, out)
        end
        return out
    end
    -- (the lock's own node is a container: ZooKeeper removes it)
    local left = {}
    for _, name in ipairs(W:children("/zkresp/l") or {}) do walk("/zkresp/l/" .. name, left) end
    if #left > 0 then
        local d = {}
        for _, path in ipairs(left) do
            local n = W:node(path)
            d[#d + 1] = path .. " (" .. tostring(n and n.data):gsub("%c", " ") .. "; session " ..
                        tostring(n and n.stat and n.stat.ephemeralOwner) .. ")"
        end
        for _, sc in ipairs(sidecars) do
            for _, l in ipairs(sc.logs) do if l:find("lock") or l:find("session") then note("log: " .. l) end end
        end
        if os.getenv("PIPELINE_FUZZ_TRACE") then
            for i, op in ipairs(W.ops) do
                if tostring(op.path):find("/zkresp/l") then
                    note(string.format("op %s %s %s %s", tostring(W.op_times and W.op_times[i]), op.kind,
                                       tostring(op.path):sub(1, 160), tostring(op.sc)))
                end
            end
        end
        note("LOCK.INFO through b: " .. show(b:call("LOCK.INFO", "lk")))
        note("LOCK.ACQUIRE zz through a: " .. show(a:call("LOCK.ACQUIRE", "lk", "zz", "PX", "1000")))
        note("after: " .. table.concat(W:children("/zkresp/l/lk") or {}, " "))
        note("LOCK.ACQUIRE o5 through b: " .. show(b:call("LOCK.ACQUIRE", "lk", "o5", "PX", "1000", "WAIT", "100")))
        W:advance(2000)
        note("after 2 s: " .. table.concat(W:children("/zkresp/l/lk") or {}, " "))
        local lk = W:node("/zkresp/l/lk")
        fail("left under /zkresp/l: " .. table.concat(d, " ") .. "; lock node: " ..
             tostring(lk and lk.data):gsub("%c", " ") .. "; sessions a " .. a.sid .. " b " .. b.sid)
    end
    for _, sc in ipairs(sidecars) do
        if sc.require("queue").busy() ~= 0 or sc.require("queue").connections() ~= 0 then fail("queues left") end
    end
    return true
end

describe("pipeline order fuzz", function()
    local seeds = {}
    local env = os.getenv("PIPELINE_FUZZ_SEEDS")
    if env then
        local from, to = env:match("^(%d+)-(%d+)$")
        for s = tonumber(from), tonumber(to) do seeds[#seeds + 1] = s end
    else
        -- (3, 9, 14, 19, 23 and 149 failed before the fix below: each a
        -- script pipelined before a command on its key, overtaken by it)
        -- (191 failed before lock_records_spec's "counted up through the
        -- same sidecar": a request left as WAIT ended, granted meanwhile and
        -- counted up by its owner, held until its sidecar's session ended)
        seeds = { 1, 2, 3, 4, 5, 9, 14, 19, 23, 149, 191 }
    end
    for _, seed in ipairs(seeds) do
        it("keeps every connection's replies those of a serial run (seed " .. seed .. ")", function()
            run_seed(seed)
        end)
    end
end)


-- The shrunk cases.  A script's lookup in the script cache may read
-- ZooKeeper (EVALSHA of a script loaded through another sidecar: its body
-- is fetched; any EVAL or EVALSHA while the cache's generation is unknown,
-- just after a SCRIPT FLUSH, a new session or a reconnection: it is read
-- first).  eval.lua looked the script up before the script took its keys'
-- queues, so a command on one of its keys pipelined after it on the same
-- connection took the queue first and ran before it: the script's reply
-- showed the later write (Redis: the value before it).  A client that
-- pipelines EVALSHA then a write of its key (redis-py's pipeline of
-- registered scripts, Redisson's batches) reads its own later write, or
-- the script's write lands after the later one (a lost update).
describe("a script pipelined before a command on its key", function()
    local GET1 = "return redis.call('get', KEYS[1])"
    local function pipeline(sc, id, cmds)
        local ts = {}
        for i, w in ipairs(cmds) do
            ts[i] = sc:start(table.unpack(w))
            ts[i].client = id
        end
        sc.world:run_until(function()
            for _, t in ipairs(ts) do if not t.done then return false end end
            return true
        end, 60000)
        return ts
    end

    it("runs first when it is an EVALSHA fetched from another sidecar's SCRIPT LOAD", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        assert.same(OK, a:call("SET", "k", "1"))
        local sha = a:call("SCRIPT", "LOAD", GET1)
        W:advance(100)
        local ts = pipeline(b, 7, { { "EVALSHA", sha, "1", "k" }, { "SET", "k", "2" } })
        assert.equal("1", ts[1].result) -- (was "2")
        assert.same(OK, ts[2].result)
        assert.equal("2", b:call("GET", "k"))
    end)

    it("runs first when it is an EVAL just after a SCRIPT FLUSH", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        assert.same(OK, a:call("SET", "k", "1"))
        assert.equal("1", a:call("EVAL", GET1, "1", "k"))
        assert.same(OK, a:call("SCRIPT", "FLUSH"))
        local ts = pipeline(a, 7, { { "EVAL", GET1, "1", "k" }, { "SET", "k", "2" } })
        assert.equal("1", ts[1].result) -- (was "2")
        assert.equal("2", a:call("GET", "k"))
    end)

    it("writes before the command pipelined after it (no lost update)", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        local sha = a:call("SCRIPT", "LOAD", "return redis.call('set', KEYS[1], ARGV[1])")
        W:advance(100)
        local ts = pipeline(b, 7, { { "EVALSHA", sha, "1", "k", "first" }, { "SET", "k", "second" } })
        assert.same(OK, ts[1].result)
        assert.equal("second", b:call("GET", "k")) -- (was "first")
    end)

    it("still answers NOSCRIPT, and a read-only call of a writing script its error", function()
        local W, a = S.world(1)
        assert.same(E("NOSCRIPT No matching script. Please use EVAL."),
                    a:call("EVALSHA", string.rep("a", 40), "1", "k"))
        local body = "#!lua\nreturn redis.call('set', KEYS[1], 'v')"
        assert.same(E("ERR Can not execute a script with write flag using *_ro command."),
                    a:call("EVAL_RO", body, "1", "k"))
        assert.equal(null, a:call("GET", "k"))
        assert.equal(0, a.require("queue").busy())
    end)
end)

-- LOCK.* commands name a lock, not a key: they took no queue, so one
-- connection's pipelined LOCK.ACQUIRE and LOCK.RELEASE of one lock ran
-- side by side.  The RELEASE, which waits for nothing, ran first and
-- answered 0, and the ACQUIRE then took the lock: the client believes it
-- released a lock that stays held to its lease's end (every other owner
-- kept out).  A second ACQUIRE pipelined behind a first one of the same
-- owner found the first's request still on its way and waited instead of
-- counting again (null after its WAIT).  Redis runs a pipeline in order:
-- token, token (reentrant), 1.
describe("one connection's pipelined LOCK commands on one lock", function()
    local function pipeline(sc, id, cmds)
        local ts = {}
        for i, w in ipairs(cmds) do
            ts[i] = sc:start(table.unpack(w))
            ts[i].client = id
        end
        sc.world:run_until(function()
            for _, t in ipairs(ts) do if not t.done then return false end end
            return true
        end, 60000)
        return ts
    end
    local ACQ = { "LOCK.ACQUIRE", "lk", "me", "PX", "60000", "WAIT", "150" }
    local REL = { "LOCK.RELEASE", "lk", "me" }

    it("release what the ACQUIRE before them took", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        local ts = pipeline(a, 7, { ACQ, REL })
        assert.is_number(ts[1].result)
        assert.equal(1, ts[2].result) -- (was 0)
        -- free for another owner at once (was: held for 60 s)
        assert.is_number(b:call("LOCK.ACQUIRE", "lk", "other", "PX", "1000"))
    end)

    it("count a second ACQUIRE of the same owner, in order", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        local ts = pipeline(a, 7, { ACQ, ACQ, REL, ACQ, REL, REL })
        local token = ts[1].result
        assert.is_number(token)
        assert.same({ token, token, 1, token, 1, 1 }, { ts[1].result, ts[2].result, ts[3].result, ts[4].result,
                                                        ts[5].result, ts[6].result })
        assert.is_number(b:call("LOCK.ACQUIRE", "lk", "other", "PX", "1000"))
        assert.equal(0, a.require("queue").busy())
    end)

    it("leave other connections' commands on the lock free to run meanwhile", function()
        local W, a, b = S.world(2)
        S.warm(W, a, b)
        assert.is_number(b:call("LOCK.ACQUIRE", "lk", "holder", "PX", "60000"))
        local w = a:start("LOCK.ACQUIRE", "lk", "me", "PX", "1000", "WAIT", "5000")
        w.client = 7
        W:advance(10)
        -- another connection of the same sidecar releases the holder: no
        -- wait behind the blocked ACQUIRE of connection 7
        local r = a:start("LOCK.RELEASE", "lk", "holder")
        r.client = 8
        W:run_until(function() return r.done and w.done end, 3000)
        assert.equal(1, r.result)
        assert.is_number(w.result)
    end)
end)

return { run_seed = run_seed }
