-- types_fuzz_spec.lua — the data types (lists, hashes, sets, sorted sets)
-- under concurrent commands from six clients over three sidecars, with
-- faults (a write's reply lost, applied or not; a connection down for a
-- while; a session expired or given up): a seeded linearizability fuzz.
--
-- Every client runs a few random commands one after the other, several
-- clients at once (1 ms ticks, so that they interleave).  The check looks
-- for a total order of the commands, consistent with real time (a command
-- answered before another was sent comes first), in which every reply that
-- is not -TRYAGAIN is a sequential model's (WRONGTYPE included); a command
-- answered -TRYAGAIN may apply or not, at most once, at any point after it
-- was sent.  The final state (every key read through another sidecar once
-- all settled) is the last step of that order.  Then, after every TTL has
-- passed, the keys with a TTL are gone and nothing but the live keys is
-- left in the tree.
--
-- Replay: TYPES_FUZZ_SEEDS=7-7 TYPES_FUZZ_VERBOSE=1 busted ...
local S = require "world"
local null, OK, D, E, WRONGTYPE = S.null, S.OK, S.D, S.E, S.WRONGTYPE

---------------------------------------------------------------------------
-- PRNG (xorshift32, as txn_fuzz_spec's), never math.random

local prng = S.prng

---------------------------------------------------------------------------
-- Replies, normalized: a hash's map as sorted "f=v", a set sorted, a
-- zset's pairs flat.

local function sorted(t)
    local out = table.move(t, 1, #t, 1, {})
    table.sort(out)
    return out
end

local function norm(r)
    if type(r) ~= "table" or r == null then return r end
    if r.map then
        local out = {}
        for i = 1, #r.map, 2 do out[#out + 1] = r.map[i] .. "=" .. r.map[i + 1] end
        return sorted(out)
    end
    if r.set then return sorted(r.set) end
    if r.pairs then return table.move(r.pairs, 1, #r.pairs, 1, {}) end
    return r
end

local function same(x, y)
    if type(x) ~= type(y) then return false end
    if type(x) ~= "table" then return x == y end
    for k, v in pairs(x) do if not same(v, y[k]) then return false end end
    for k in pairs(y) do if x[k] == nil then return false end end
    return true
end

local function show(x)
    if x == null then return "NULL" end
    if type(x) ~= "table" then return tostring(x) end
    if x.err or x.ok then return x.err or x.ok end
    if x.double then return "D" .. x.double end
    local parts = {}
    for i, v in ipairs(x) do parts[i] = show(v) end
    for k, v in pairs(x) do
        if type(k) ~= "number" then parts[#parts + 1] = tostring(k) .. "=" .. show(v) end
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

---------------------------------------------------------------------------
-- The sequential model.  A state maps a key to {t = type, v = value, ttl}:
-- list: array; hash: field -> value; set: member -> true; zset: member ->
-- score.  model(st, cmd) answers a list of {reply, state} (several for
-- SPOP: any member may go); it never changes st.

local KEYS = { list = { "L1", "L2" }, hash = { "H1", "H2" }, set = { "S1", "S2" }, zset = { "Z1", "Z2" } }
local ALL = { "L1", "L2", "H1", "H2", "S1", "S2", "Z1", "Z2" }
local NO_KEY, NO_INT_HASH = E("ERR no such key"), E("ERR hash value is not an integer")

local function deep(t)
    if type(t) ~= "table" then return t end
    local o = {}
    for k, v in pairs(t) do o[k] = deep(v) end
    return o
end

local function state_key(st)
    local parts = {}
    for _, k in ipairs(ALL) do
        local o = st[k]
        if o then
            local items = {}
            if o.t == "list" then items = o.v
            else
                for f, v in pairs(o.v) do items[#items + 1] = f .. "=" .. tostring(v) end
                table.sort(items)
            end
            parts[#parts + 1] = k .. (o.ttl and "+" or "") .. ":" .. table.concat(items, ",")
        end
    end
    return table.concat(parts, ";")
end

local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end

-- The key's object of type t: obj, or nil (absent), or false (another type).
local function get(st, k, t)
    local o = st[k]
    if o == nil then return nil end
    if o.t ~= t then return false end
    return o
end

-- Deletes an emptied collection.
local function tidy(st, k)
    local o = st[k]
    if o and ((o.t == "list" and #o.v == 0) or (o.t ~= "list" and next(o.v) == nil)) then st[k] = nil end
end

local function zsorted(v)
    local out = {}
    for m, s in pairs(v) do out[#out + 1] = { m, s } end
    table.sort(out, function(x, y) if x[2] ~= y[2] then return x[2] < y[2] end return x[1] < y[1] end)
    return out
end

local function range(n, s, e)
    if s < 0 then s = n + s end
    if e < 0 then e = n + e end
    if s < 0 then s = 0 end
    if e >= n then e = n - 1 end
    return s, e -- 0-based, empty when s > e
end

local M = {}

local function one(reply, st) return { { reply, st } } end

local function push(left)
    return function(st, c)
        local o = get(st, c[2], "list")
        if o == false then return one(WRONGTYPE, st) end
        if not o then o = { t = "list", v = {} } st[c[2]] = o end
        for i = 3, #c do
            if left then table.insert(o.v, 1, c[i]) else o.v[#o.v + 1] = c[i] end
        end
        return one(#o.v, st)
    end
end
M.LPUSH, M.RPUSH = push(true), push(false)

local function pop(left)
    return function(st, c)
        local o = get(st, c[2], "list")
        if o == false then return one(WRONGTYPE, st) end
        if not c[3] then
            if not o then return one(null, st) end
            local v = table.remove(o.v, left and 1 or #o.v)
            tidy(st, c[2])
            return one(v, st)
        end
        if not o then return one({ null_array = true }, st) end
        local out = {}
        for _ = 1, tonumber(c[3]) do
            if #o.v == 0 then break end
            out[#out + 1] = table.remove(o.v, left and 1 or #o.v)
        end
        tidy(st, c[2])
        return one(out, st)
    end
end
M.LPOP, M.RPOP = pop(true), pop(false)

function M.LMOVE(st, c)
    local src, dst = c[2], c[3]
    local s = get(st, src, "list")
    if s == nil then return one(null, st) end
    if s == false or get(st, dst, "list") == false then return one(WRONGTYPE, st) end
    local v = table.remove(s.v, c[4] == "LEFT" and 1 or #s.v)
    local d = st[dst] or { t = "list", v = {} }
    st[dst] = d
    if c[5] == "LEFT" then table.insert(d.v, 1, v) else d.v[#d.v + 1] = v end
    tidy(st, src)
    return one(v, st)
end

function M.LREM(st, c)
    local o = get(st, c[2], "list")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(0, st) end
    local n, want, removed = tonumber(c[3]), c[4], 0
    local limit = n == 0 and math.huge or math.abs(n)
    if n >= 0 then
        local i = 1
        while i <= #o.v do
            if o.v[i] == want and removed < limit then table.remove(o.v, i) removed = removed + 1 else i = i + 1 end
        end
    else
        for i = #o.v, 1, -1 do
            if o.v[i] == want and removed < limit then table.remove(o.v, i) removed = removed + 1 end
        end
    end
    tidy(st, c[2])
    return one(removed, st)
end

function M.LINSERT(st, c)
    local o = get(st, c[2], "list")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(0, st) end
    for i, v in ipairs(o.v) do
        if v == c[4] then
            table.insert(o.v, c[3] == "BEFORE" and i or i + 1, c[5])
            return one(#o.v, st)
        end
    end
    return one(-1, st)
end

function M.LSET(st, c)
    local o = get(st, c[2], "list")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(NO_KEY, st) end
    local i = tonumber(c[3])
    if i < 0 then i = #o.v + i end
    if i < 0 or i >= #o.v then return one(E("ERR index out of range"), st) end
    o.v[i + 1] = c[4]
    return one(OK, st)
end

function M.LTRIM(st, c)
    local o = get(st, c[2], "list")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(OK, st) end
    local s, e = range(#o.v, tonumber(c[3]), tonumber(c[4]))
    local nv = {}
    for i = s + 1, e + 1 do nv[#nv + 1] = o.v[i] end
    o.v = nv
    tidy(st, c[2])
    return one(OK, st)
end

function M.LRANGE(st, c)
    local o = get(st, c[2], "list")
    if o == false then return one(WRONGTYPE, st) end
    return one(o and table.move(o.v, 1, #o.v, 1, {}) or {}, st)
end

function M.HSET(st, c)
    local o = get(st, c[2], "hash")
    if o == false then return one(WRONGTYPE, st) end
    if not o then o = { t = "hash", v = {} } st[c[2]] = o end
    local n = 0
    for i = 3, #c, 2 do
        if o.v[c[i]] == nil then n = n + 1 end
        o.v[c[i]] = c[i + 1]
    end
    return one(n, st)
end

function M.HDEL(st, c)
    local o = get(st, c[2], "hash")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(0, st) end
    local n = 0
    for i = 3, #c do
        if o.v[c[i]] ~= nil then n = n + 1 o.v[c[i]] = nil end
    end
    tidy(st, c[2])
    return one(n, st)
end

function M.HINCRBY(st, c)
    local o = get(st, c[2], "hash")
    if o == false then return one(WRONGTYPE, st) end
    local cur = o and o.v[c[3]] or "0"
    if not cur:match("^%-?%d+$") then return one(NO_INT_HASH, st) end
    if not o then o = { t = "hash", v = {} } st[c[2]] = o end
    local n = math.tointeger(cur) + math.tointeger(c[4])
    o.v[c[3]] = tostring(n)
    return one(n, st)
end

function M.HSETNX(st, c)
    local o = get(st, c[2], "hash")
    if o == false then return one(WRONGTYPE, st) end
    if o and o.v[c[3]] ~= nil then return one(0, st) end
    if not o then o = { t = "hash", v = {} } st[c[2]] = o end
    o.v[c[3]] = c[4]
    return one(1, st)
end

function M.HGETALL(st, c)
    local o = get(st, c[2], "hash")
    if o == false then return one(WRONGTYPE, st) end
    local out = {}
    for f, v in pairs(o and o.v or {}) do out[#out + 1] = f .. "=" .. v end
    return one(sorted(out), st)
end

function M.SADD(st, c)
    local o = get(st, c[2], "set")
    if o == false then return one(WRONGTYPE, st) end
    if not o then o = { t = "set", v = {} } st[c[2]] = o end
    local n = 0
    for i = 3, #c do if not o.v[c[i]] then n = n + 1 o.v[c[i]] = true end end
    return one(n, st)
end

function M.SREM(st, c)
    local o = get(st, c[2], "set")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(0, st) end
    local n = 0
    for i = 3, #c do if o.v[c[i]] then n = n + 1 o.v[c[i]] = nil end end
    tidy(st, c[2])
    return one(n, st)
end

-- Every choice of k members of list ms (sorted lists).
local function choose(ms, k, from, acc, out)
    if #acc == k then out[#out + 1] = table.move(acc, 1, #acc, 1, {}) return out end
    for i = from, #ms do
        acc[#acc + 1] = ms[i]
        choose(ms, k, i + 1, acc, out)
        acc[#acc] = nil
    end
    return out
end

function M.SPOP(st, c)
    local o = get(st, c[2], "set")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(c[3] and {} or null, st) end
    local ms = {}
    for m in pairs(o.v) do ms[#ms + 1] = m end
    table.sort(ms)
    local k = math.min(tonumber(c[3] or 1), #ms)
    local out = {}
    for _, pick in ipairs(choose(ms, k, 1, {}, {})) do
        local s2 = deep(st)
        for _, m in ipairs(pick) do s2[c[2]].v[m] = nil end
        tidy(s2, c[2])
        out[#out + 1] = { c[3] and pick or pick[1], s2 }
    end
    return out
end

function M.SMOVE(st, c)
    local src, dst, m = c[2], c[3], c[4]
    local s = get(st, src, "set")
    if s == nil then return one(0, st) end
    if s == false or get(st, dst, "set") == false then return one(WRONGTYPE, st) end
    if src == dst then return one(s.v[m] and 1 or 0, st) end
    if not s.v[m] then return one(0, st) end
    s.v[m] = nil
    tidy(st, src)
    local d = st[dst] or { t = "set", v = {} }
    st[dst] = d
    d.v[m] = true
    return one(1, st)
end

function M.SINTERSTORE(st, c)
    local sets, empty = {}, false
    for i = 3, #c do
        local o = get(st, c[i], "set")
        if o == false then return one(WRONGTYPE, st) end
        if not o then empty = true end
        sets[#sets + 1] = o
    end
    local res = {}
    if not empty then
        for m in pairs(sets[1].v) do
            local all = true
            for j = 2, #sets do if not sets[j].v[m] then all = false end end
            if all then res[m] = true end
        end
    end
    st[c[2]] = nil
    if next(res) then st[c[2]] = { t = "set", v = res } end
    return one(count(res), st)
end

function M.SMEMBERS(st, c)
    local o = get(st, c[2], "set")
    if o == false then return one(WRONGTYPE, st) end
    local out = {}
    for m in pairs(o and o.v or {}) do out[#out + 1] = m end
    return one(sorted(out), st)
end

function M.ZADD(st, c)
    local o = get(st, c[2], "zset")
    if o == false then return one(WRONGTYPE, st) end
    local flags, i = {}, 3
    while c[i] and not tonumber(c[i]) do flags[c[i]] = true i = i + 1 end
    if not o then o = { t = "zset", v = {} } st[c[2]] = o end
    local added, changed, incr_reply = 0, 0, null
    for j = i, #c, 2 do
        local s, m = tonumber(c[j]) + 0.0, c[j + 1]
        local old = o.v[m]
        if not ((flags.NX and old) or (flags.XX and not old)) then
            local new = flags.INCR and (old or 0.0) + s or s
            if old == nil then
                o.v[m] = new
                added = added + 1
                incr_reply = D(new)
            elseif not ((flags.GT and new <= old) or (flags.LT and new >= old)) then
                if new ~= old then changed = changed + 1 end
                o.v[m] = new
                incr_reply = D(new)
            end
        end
    end
    tidy(st, c[2])
    if flags.INCR then return one(incr_reply, st) end
    return one(flags.CH and added + changed or added, st)
end

function M.ZINCRBY(st, c)
    local o = get(st, c[2], "zset")
    if o == false then return one(WRONGTYPE, st) end
    if not o then o = { t = "zset", v = {} } st[c[2]] = o end
    o.v[c[4]] = (o.v[c[4]] or 0.0) + tonumber(c[3])
    return one(D(o.v[c[4]]), st)
end

function M.ZREM(st, c)
    local o = get(st, c[2], "zset")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one(0, st) end
    local n = 0
    for i = 3, #c do if o.v[c[i]] then n = n + 1 o.v[c[i]] = nil end end
    tidy(st, c[2])
    return one(n, st)
end

function M.ZPOPMIN(st, c)
    local o = get(st, c[2], "zset")
    if o == false then return one(WRONGTYPE, st) end
    if not o then return one({}, st) end
    local out = {}
    for i, p in ipairs(zsorted(o.v)) do
        if i > tonumber(c[3] or 1) then break end
        out[#out + 1] = p[1]
        out[#out + 1] = D(p[2])
        o.v[p[1]] = nil
    end
    tidy(st, c[2])
    return one(out, st)
end

function M.ZRANGE(st, c)
    local o = get(st, c[2], "zset")
    if o == false then return one(WRONGTYPE, st) end
    local out = {}
    for _, p in ipairs(zsorted(o and o.v or {})) do out[#out + 1] = p[1] out[#out + 1] = D(p[2]) end
    return one(out, st)
end

function M.DEL(st, c)
    local n = 0
    for i = 2, #c do if st[c[i]] then n = n + 1 st[c[i]] = nil end end
    return one(n, st)
end

function M.RENAME(st, c)
    local o = st[c[2]]
    if not o then return one(NO_KEY, st) end
    st[c[2]] = nil
    st[c[3]] = o
    return one(OK, st)
end

function M.EXPIRE(st, c)
    local o = st[c[2]]
    if not o then return one(0, st) end
    o.ttl = true
    return one(1, st)
end

function M.TYPE(st, c)
    return one({ ok = st[c[2]] and st[c[2]].t or "none" }, st)
end

function M.TTL(st, c)
    local o = st[c[2]]
    return one(not o and -2 or o.ttl and "pos" or -1, st)
end

-- A session ended (expired, or given up and the old one expired later):
-- any key with a TTL may be gone (an ephemeral node of that session,
-- README "Design notes"), or not (another's, or made persistent).
function M.VANISH(st)
    local ks = {}
    for _, k in ipairs(ALL) do if st[k] and st[k].ttl then ks[#ks + 1] = k end end
    local out = {}
    for mask = 0, (1 << #ks) - 1 do
        local s2 = deep(st)
        for i, k in ipairs(ks) do if mask & (1 << (i - 1)) ~= 0 then s2[k] = nil end end
        out[#out + 1] = { "?", s2 }
    end
    return out
end

-- The final read of every key (through one sidecar, after all settled).
function M.SNAPSHOT(st)
    return one(state_key(st), st)
end

---------------------------------------------------------------------------
-- Random commands

local VALS = { "a", "b", "c" }

local function key_of(r, t)
    if r.chance(0.1) then return r.pick(ALL) end -- (WRONGTYPE, or not)
    return r.chance(0.7) and KEYS[t][1] or KEYS[t][2]
end

local function gen(r, with_ttl)
    local t = r.pick({ "list", "list", "hash", "set", "set", "zset", "zset", "any" })
    local k = t ~= "any" and key_of(r, t)
    local v, ms = function() return r.pick(VALS) end, function() return r.pick({ "a", "b", "c", "d" }) end
    if t == "list" then
        return r.pick({
            function() return { r.pick({ "LPUSH", "RPUSH" }), k, v(), r.chance(0.4) and v() or nil } end,
            function() return { r.pick({ "LPOP", "RPOP" }), k, r.chance(0.5) and tostring(r.int(1, 3)) or nil } end,
            function() return { "LMOVE", k, key_of(r, "list"), r.pick({ "LEFT", "RIGHT" }), r.pick({ "LEFT", "RIGHT" }) } end,
            function() return { "LREM", k, tostring(r.int(-2, 2)), v() } end,
            function() return { "LINSERT", k, r.pick({ "BEFORE", "AFTER" }), v(), v() } end,
            function() return { "LSET", k, tostring(r.int(-3, 2)), v() } end,
            function() return { "LTRIM", k, tostring(r.int(0, 2)), tostring(r.pick({ -1, 1, 3 })) } end,
            function() return { "LRANGE", k, "0", "-1" } end,
        })()
    elseif t == "hash" then
        local f = function() return r.pick({ "f", "g" }) end
        return r.pick({
            function() return { "HSET", k, f(), r.pick({ "1", "5", "x" }) } end,
            function() return { "HSET", k, "f", tostring(r.int(0, 9)), "g", r.pick({ "1", "x" }) } end,
            function() return { "HDEL", k, f(), r.chance(0.3) and "g" or nil } end,
            function() return { "HINCRBY", k, f(), tostring(r.int(-2, 3)) } end,
            function() return { "HSETNX", k, f(), tostring(r.int(0, 9)) } end,
            function() return { "HGETALL", k } end,
        })()
    elseif t == "set" then
        return r.pick({
            function() return { "SADD", k, ms(), r.chance(0.5) and ms() or nil } end,
            function() return { "SREM", k, ms(), r.chance(0.3) and ms() or nil } end,
            function() return { "SPOP", k, r.chance(0.4) and tostring(r.int(1, 2)) or nil } end,
            function() return { "SMOVE", k, key_of(r, "set"), ms() } end,
            function() return { "SINTERSTORE", key_of(r, "set"), k, key_of(r, "set") } end,
            function() return { "SMEMBERS", k } end,
        })()
    elseif t == "zset" then
        local flags = r.pick({ {}, { "NX" }, { "XX" }, { "GT" }, { "LT" }, { "XX", "GT" }, { "CH" }, { "GT", "CH" },
                               { "INCR" }, { "NX", "INCR" }, { "XX", "INCR" }, { "GT", "INCR" } })
        return r.pick({
            function()
                local c = { "ZADD", k }
                table.move(flags, 1, #flags, 3, c)
                c[#c + 1] = tostring(r.int(-1, 4))
                c[#c + 1] = ms()
                if flags[#flags] ~= "INCR" and r.chance(0.4) then c[#c + 1] = tostring(r.int(0, 4)) c[#c + 1] = ms() end
                return c
            end,
            function() return { "ZINCRBY", k, tostring(r.int(-1, 2)), ms() } end,
            function() return { "ZREM", k, ms(), r.chance(0.3) and ms() or nil } end,
            function() return { "ZPOPMIN", k, r.chance(0.4) and tostring(r.int(1, 2)) or nil } end,
            function() return { "ZADD", k, r.pick({ "LT", "GT" }), "CH", tostring(r.int(0, 4)), ms(), "2", ms() } end,
            function() return { "ZRANGE", k, "0", "-1", "WITHSCORES" } end,
        })()
    end
    local gens = {
        function() return { "DEL", r.pick(ALL), r.chance(0.3) and r.pick(ALL) or nil } end,
        function()
            local tt = r.pick({ "list", "hash", "set", "zset" })
            return { "RENAME", r.pick(KEYS[tt]), r.chance(0.8) and r.pick(KEYS[tt]) or r.pick(ALL) }
        end,
        function() return { "TYPE", r.pick(ALL) } end,
    }
    if with_ttl then
        gens[#gens + 1] = function() return { "EXPIRE", r.pick(ALL), "1000" } end
        gens[#gens + 1] = function() return { "TTL", r.pick(ALL) } end
    end
    return r.pick(gens)()
end

---------------------------------------------------------------------------
-- The linearizability check: a depth-first search over the orders, each
-- next command one that no other pending command's answer precedes (a
-- -TRYAGAIN one's answer is never: it may apply later, or never), with
-- the states seen (pending set, state) remembered.

local function linearizable(ops, init)
    local n = #ops
    local seen = {}
    local best = { depth = -1 }
    local function pending_key(done)
        local b = {}
        for i = 1, n do b[i] = done[i] and "1" or "0" end
        return table.concat(b)
    end
    local function search(st, done, depth, path)
        local required = false
        local horizon = math.huge -- the earliest answer among the pending
        for i = 1, n do
            if not done[i] then
                if not ops[i].unknown then required = true horizon = math.min(horizon, ops[i].done_at) end
            end
        end
        if not required then return true end
        local memo = pending_key(done) .. "|" .. state_key(st)
        if seen[memo] then return false end
        seen[memo] = true
        if depth > best.depth then best = { depth = depth, path = table.move(path, 1, #path, 1, {}), st = state_key(st) } end
        for i = 1, n do
            local op = ops[i]
            if not done[i] and op.start_at <= horizon then
                for _, out in ipairs(op.model(deep(st))) do
                    if op.unknown or same(out[1], op.reply) then
                        done[i] = true
                        path[#path + 1] = op.id
                        if search(out[2], done, depth + 1, path) then return true end
                        path[#path] = nil
                        done[i] = nil
                    end
                end
            end
        end
        return false
    end
    if search(init, {}, 0, {}) then return true end
    return false, best
end

---------------------------------------------------------------------------
-- Running a history

local function read_all(sc)
    local st = {}
    for _, k in ipairs(ALL) do
        local t = sc:call("TYPE", k).ok
        local c = ({ list = { "LRANGE", k, "0", "-1" }, hash = { "HGETALL", k }, set = { "SMEMBERS", k },
                     zset = { "ZRANGE", k, "0", "-1", "WITHSCORES" } })[t]
        if c then
            local r = norm(sc:call(table.unpack(c)))
            local v = {}
            if t == "list" then v = r
            elseif t == "hash" then for _, fv in ipairs(r) do local f, x = fv:match("^(.-)=(.*)$") v[f] = x end
            elseif t == "set" then for _, m in ipairs(r) do v[m] = true end
            else for i = 1, #r, 2 do v[r[i]] = r[i + 1].double end end
            st[k] = { t = t, v = v, ttl = sc:call("TTL", k) >= 0 or nil }
        end
    end
    return st
end

local function fmt(c) return table.concat(c, " ") end

-- One seeded history: three sidecars, six clients (two per sidecar), each
-- running `per` commands; faults at random ticks.
local function history(seed, per)
    local r = prng(seed)
    local W, a, b, c = S.world(3)
    local scs = { a, b, c }
    S.warm(W, a, b, c)
    local with_ttl = r.chance(0.4)
    -- a start state, written through several sidecars
    for _, cmd in ipairs({ { "RPUSH", "L1", "a", "b", "c" }, { "HSET", "H1", "f", "1", "g", "x" },
                           { "SADD", "S1", "a", "b", "c" }, { "ZADD", "Z1", "1", "a", "2", "b", "3", "c" } }) do
        r.pick(scs):call(table.unpack(cmd))
    end
    W:advance(100)
    local init = read_all(a)
    local ops = {}
    local log, clients = {}, {}
    for i = 1, 6 do
        local cl = { id = 200 + i, sc = scs[(i - 1) % 3 + 1], left = per, at = r.int(0, 6) }
        clients[i] = cl
    end
    local faults = {}
    local function vanish()
        ops[#ops + 1] = { id = "vanish" .. #ops, cmd = { "VANISH" }, start_at = W.now, unknown = true, model = M.VANISH }
    end
    for _ = 1, r.int(2, 8) do
        local sc = r.pick(scs)
        local at = r.int(0, 30)
        local kind = r.int(0, 11)
        local f = { at = at }
        if kind <= 3 then
            local op = r.pick({ "multi", "multi", "set", "create", "delete" })
            local when = r.pick({ "after", "before" })
            -- (the bridge's TIMEOUT is a request never sent: never "after")
            local rc = r.pick(when == "after" and { S.codes.CONNECTIONLOSS, S.codes.OPERATIONTIMEOUT }
                              or { S.codes.CONNECTIONLOSS, S.codes.TIMEOUT, S.codes.OPERATIONTIMEOUT })
            f.what = op .. " " .. when .. " rc " .. rc .. " on " .. sc.id
            f.fn = function() sc:fail_next({ op = op, when = when, rc = rc }) end
        elseif kind <= 5 then
            local back = at + r.int(1, 60)
            f.what = "disconnect " .. sc.id .. " until " .. back
            f.fn = function() if sc.connected then sc:disconnect() end end
            faults[#faults + 1] = { at = back, what = "reconnect " .. sc.id, fn = function()
                if not sc.connected then sc:reconnect() end end }
        elseif kind == 6 then
            f.what = "get lost on " .. sc.id
            f.fn = function() sc:fail_next({ op = "get" }) end
        elseif kind == 7 then
            f.what = "expire " .. sc.id
            f.fn = function() sc:expire() vanish() end
        elseif kind == 8 then
            -- given up while disconnected; the server ends the old
            -- session a little later
            local back = at + r.int(0, 80)
            f.what = "lose " .. sc.id .. ", the old session ends at " .. back
            f.fn = function()
                if sc.connected then sc:disconnect() end
                local old = sc:lose()
                faults[#faults + 1] = { at = back, what = "old session of " .. sc.id .. " ends",
                                        fn = function() W:expire_session(old) vanish() end }
            end
        elseif kind >= 10 then
            -- slow: the commands overlap more
            local op, ms = r.pick({ "multi", "get", "set", "create", "delete", "children" }), r.int(2, 40)
            f.what = op .. " slow " .. ms .. " on " .. sc.id
            f.fn = function() sc:fail_next({ op = op, pass = true, latency = ms }) end
        else
            local back = at + r.int(5, 40)
            f.what = "multi after, then expire " .. sc.id .. " at " .. back
            f.fn = function() sc:fail_next({ op = "multi", when = "after" }) end
            faults[#faults + 1] = { at = back, what = "expire " .. sc.id, fn = function() sc:expire() vanish() end }
        end
        faults[#faults + 1] = f
    end
    local t0, tick = W.now, 0
    while true do
        for _, f in ipairs(faults) do
            if f.at == tick and not f.fired then
                f.fired = true
                log[#log + 1] = string.format("%5d fault %s", W.now - t0, f.what)
                f.fn()
            end
        end
        local all = true
        for _, cl in ipairs(clients) do
            if cl.op and cl.task.done then
                local op = cl.op
                op.reply, op.done_at = norm(cl.task.result), W.now
                if op.cmd[1] == "TTL" and type(op.reply) == "number" and op.reply >= 0 then op.reply = "pos" end
                op.unknown = S.tryagain(op.reply)
                log[#log + 1] = string.format("%5d %s %s -> %s", W.now - t0, op.id, fmt(op.cmd), show(op.reply))
                cl.op, cl.at = nil, tick + r.int(0, 3)
            end
            if not cl.op and cl.left > 0 and cl.at <= tick then
                cl.left = cl.left - 1
                local cmd = gen(r, with_ttl)
                local op = { id = "c" .. cl.id .. "." .. (per - cl.left), cmd = cmd, start_at = W.now }
                op.model = function(st) return M[cmd[1]](st, cmd) end
                ops[#ops + 1] = op
                cl.op = op
                cl.task = cl.sc:start(table.unpack(cmd))
                cl.task.client = cl.id
            end
            if cl.op or cl.left > 0 then all = false end
        end
        if all and tick > 120 then break end
        assert(tick < 60000, "the history never settled")
        W:advance(1)
        tick = tick + 1
    end
    for _, sc in ipairs(scs) do if not sc.connected then sc:reconnect() end end
    W:advance(5000)
    local final = read_all(b)
    local bad = {}
    local snap = { id = "final", cmd = { "SNAPSHOT" }, start_at = W.now, done_at = W.now, reply = state_key(final) }
    snap.model = function(st) return M.SNAPSHOT(st) end
    ops[#ops + 1] = snap
    local ok, best = linearizable(ops, init)
    if not ok then
        bad[#bad + 1] = "not linearizable; final " .. snap.reply .. "\n  longest order: "
            .. table.concat(best.path, " ") .. "\n  its state: " .. best.st
    end
    -- every TTL passes: the keys with one go, nothing else is left
    W:advance(1001 * 1000)
    local later = read_all(c)
    for _, k in ipairs(ALL) do
        local want = final[k] and not final[k].ttl and final[k] or nil
        if state_key({ [k] = want }) ~= state_key({ [k] = later[k] }) then
            bad[#bad + 1] = "after the TTLs " .. k .. ": " .. state_key({ [k] = later[k] }) .. ", want "
                .. state_key({ [k] = want })
        end
    end
    local live = {}
    for _, k in ipairs(ALL) do if later[k] then live[#live + 1] = a:path(k):match("[^/]+$") end end
    for i = 1, 3 do live[#live + 1] = "warm" .. i end
    local kids = W:children("/zkresp/k") or {}
    if not same(sorted(kids), sorted(live)) then
        bad[#bad + 1] = "tree: " .. table.concat(sorted(kids), " ") .. ", keys " .. table.concat(sorted(live), " ")
        if os.getenv("TYPES_FUZZ_VERBOSE") then
            for _, k in ipairs(kids) do
                local nd = W:node("/zkresp/k/" .. k)
                bad[#bad + 1] = k .. ": owner " .. nd.stat.ephemeralOwner .. " version " .. nd.stat.version
                    .. " mtime " .. (nd.stat.mtime - W.leader_offset - t0)
                for i, o in ipairs(W.ops) do
                    if (o.path or ""):find("/k/" .. k, 1, true) then
                        bad[#bad + 1] = string.format("   op %d t=%d sc%s %s %s", i, W.op_times[i] - t0, o.sc, o.kind, o.path)
                    end
                end
            end
        end
    end
    if #bad > 0 or os.getenv("TYPES_FUZZ_VERBOSE") then
        local init_s = state_key(init)
        local text = "seed " .. seed .. ":\n  " .. table.concat(bad, "\n  ") .. "\ninit: " .. init_s
            .. "\nlog:\n" .. table.concat(log, "\n")
        if os.getenv("TYPES_FUZZ_VERBOSE") then print(text) end
        if #bad > 0 then return text end
    end
    return nil
end

-- Shrunk from the sweep (kept as regression coverage; they pass): a list
-- with a TTL written through two sidecars is a persistent node with a TTL
-- (README "Design notes"); a write of it whose reply is lost must answer
-- once and leave the key to expire at its TTL, the node deleted, however
-- the write was met (alone, or parked while its sidecar was disconnected
-- and the others wrote meanwhile).  A sweep whose fault model answered an
-- applied multi with the bridge's TIMEOUT left the node for ever: not a
-- defect, TIMEOUT is a request never sent (sidecar/zk.h), so the fuzz
-- never pairs it with "after".
describe("a persistent list with a TTL, a write's reply lost", function()
    local codes = { S.codes.CONNECTIONLOSS, S.codes.OPERATIONTIMEOUT }
    for _, rc in ipairs(codes) do
        for _, when in ipairs({ "after", "before" }) do
            it("LSET (" .. when .. ", rc " .. rc .. "): answered once, the key expires at its TTL", function()
                local W, a, b = S.world(2)
                S.warm(W, a, b)
                a:call("RPUSH", "L", "a", "b", "c")
                assert.equal(1, b:call("EXPIRE", "L", "1000"))
                assert.equal(1, a:call("LREM", "L", "1", "c"))
                assert.equal(0, W:node(a:path("L")).stat.ephemeralOwner)
                b:fail_next({ op = "multi", when = when, rc = rc })
                assert.same(OK, b:call("LSET", "L", "0", "z"))
                W:advance(5000)
                assert.same({ "z", "b" }, a:call("LRANGE", "L", "0", "-1"))
                assert.is_true(a:call("TTL", "L") > 0)
                W:advance(1001 * 1000)
                assert.equal(0, a:call("EXISTS", "L"))
                assert.is_nil(W:node(a:path("L")))
            end)
        end

        it("LSET parked while disconnected, two others write, applied, reply lost (rc " .. rc .. ")", function()
            local W, a, b, c = S.world(3)
            S.warm(W, a, b, c)
            a:call("RPUSH", "L", "a", "b", "c")
            assert.equal(1, b:call("EXPIRE", "L", "1000"))
            b:disconnect()
            local t = b:start("LSET", "L", "0", "z")
            W:advance(2)
            assert.equal(1, a:call("LREM", "L", "1", "c"))
            assert.equal(3, c:call("RPUSH", "L", "x"))
            b:fail_next({ op = "multi", when = "after", rc = rc })
            W:advance(10)
            b:reconnect()
            W:run_until(function() return t.done end)
            assert.same(OK, t.result)
            W:advance(5000)
            assert.same({ "z", "b", "x" }, c:call("LRANGE", "L", "0", "-1"))
            W:advance(1001 * 1000)
            assert.equal(0, c:call("EXISTS", "L"))
            assert.is_nil(W:node(a:path("L")))
        end)
    end
end)

describe("the data types across three sidecars (seeded linearizability fuzz)", function()
    local seeds = {}
    local env = os.getenv("TYPES_FUZZ_SEEDS")
    if env then
        local lo, hi = env:match("^(%d+)%-(%d+)$")
        for s = tonumber(lo), tonumber(hi) do seeds[#seeds + 1] = s end
    else
        for s = 1, 60 do seeds[#seeds + 1] = s end
    end
    it("every history is linearizable, faults included", function()
        local failures = {}
        for _, seed in ipairs(seeds) do
            local ok, text = pcall(history, seed, tonumber(os.getenv("TYPES_FUZZ_N") or 5))
            if not ok then
                failures[#failures + 1] = "seed " .. seed .. ": crashed: " .. tostring(text)
            elseif text then
                failures[#failures + 1] = text
            end
        end
        assert(#failures == 0, table.concat(failures, "\n\n"))
    end)
end)

return { history = history, model = M }
