-- cmd_set.lua — the set commands: SADD, SREM, SISMEMBER, SMISMEMBER,
-- SMEMBERS, SCARD, SPOP, SRANDMEMBER, SMOVE, SINTER, SUNION, SDIFF, their
-- STORE forms, SINTERCARD and SSCAN, with Redis 7.0's replies and errors.  Same table shape as cmd_string.lua.
--
-- A set is one znode of codec type SET (payload.lua), members in insertion
-- order (Redis leaves SMEMBERS's order unspecified).  Writes keep the key's
-- TTL; removing the last member deletes the key.

local T = require "txn"
local E = require "errors"
local U = require "util"
local K = require "keyspace"
local P = require "payload"
local N = require "scan"
local codec = require "codec"

local SET = codec.SET

local S = {}

local spec = U.key_command

local function load(t, key) return P.load(t, key, SET) end

local function store(t, rec, s)
    P.store(t, rec, SET, #s.keys, P.encode_set(s))
end

S.sadd = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, s = load(t, key)
        s = s or P.new_set()
        local added = 0
        for i = 3, #args do
            local m = args[i]
            if not s.has[m] then
                s.has[m] = true
                s.keys[#s.keys + 1] = m
                added = added + 1
            end
        end
        if added > 0 then store(t, rec, s) end
        return added
    end)
end, -3, "write denyoom fast")

S.srem = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, s = load(t, key)
        if not s then return 0 end
        local del, n = {}, 0
        for i = 3, #args do
            local m = args[i]
            if s.has[m] then
                s.has[m] = nil
                del[m] = true
                n = n + 1
            end
        end
        if n == 0 then return 0 end
        P.drop_keys(s.keys, del)
        store(t, rec, s)
        return n
    end)
end, -3, "write fast")

S.sismember = spec(function(args)
    local key, m = args[2], args[3]
    return T.run({ key }, function(t)
        local _, s = load(t, key)
        return (s and s.has[m]) and 1 or 0
    end)
end, 3, "readonly fast")

S.smembers = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local _, s = load(t, key)
        return { set = s and s.keys or {} }
    end)
end, 2, "readonly")

S.scard = spec(function(args)
    return T.run({ args[2] }, function(t) return P.size(t, args[2], SET) end)
end, 2, "readonly fast")

S.smismember = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local _, s = load(t, key)
        local out = {}
        for i = 3, #args do out[#out + 1] = (s and s.has[args[i]]) and 1 or 0 end
        return out
    end)
end, -3, "readonly fast")

-- SSCAN key cursor [MATCH pattern] [COUNT count]: the whole set at once
-- (scan.lua).
S.sscan = spec(function(args)
    return N.collection(args, function(t, key)
        local _, s = load(t, key)
        return s and s.keys
    end, false)
end, -3, "readonly")

---------------------------------------------------------------------------
-- SPOP key [count], SRANDMEMBER key [count]

S.spop = spec(function(args)
    local key = args[2]
    if #args > 3 then return E.reply(E.SYNTAX) end
    local count
    if #args == 3 then
        count = U.to_int(args[3])
        if not count or count < 0 then return E.reply(E.NOT_POSITIVE) end
    end
    return T.run({ key }, function(t)
        local rec, s = load(t, key)
        if not s then return count and { set = {} } or host.null end
        local picked = {}
        for i, j in ipairs(U.random_picks(#s.keys, count or 1)) do picked[i] = s.keys[j] end
        local del = {}
        for _, m in ipairs(picked) do
            del[m] = true
            s.has[m] = nil
        end
        P.drop_keys(s.keys, del)
        if #picked > 0 then store(t, rec, s) end
        if not count then return picked[1] end
        return { set = picked }
    end)
end, -2, "write fast")

S.srandmember = spec(function(args)
    local key = args[2]
    if #args > 3 then return E.reply(E.SYNTAX) end
    local count, e
    if #args == 3 then
        count, e = U.random_count(args[3])
        if not count then return E.reply(e) end
    end
    return T.run({ key }, function(t)
        local _, s = load(t, key)
        if not count then return s and s.keys[math.random(#s.keys)] or host.null end
        local out = {}
        if not s or count == 0 then return out end
        for i, j in ipairs(U.random_picks(#s.keys, count)) do out[i] = s.keys[j] end
        return out
    end)
end, -2, "readonly")

---------------------------------------------------------------------------
-- SMOVE source destination member: one multi (txn.atomic).

S.smove = { arity = 4, flags = "write fast", first_key = 1, last_key = 2, step = 1,
            fn = function(args)
    local src, dst, m = args[2], args[3], args[4]
    return T.atomic({ src, dst }, function(t)
        -- A missing source answers 0 before the types are checked.
        if not t:read_all({ src, dst })[src].live then return 0 end
        local srec, s = load(t, src)
        local drec, d = load(t, dst)
        if src == dst then return s.has[m] and 1 or 0 end
        if not s.has[m] then return 0 end
        s.has[m] = nil
        P.drop_keys(s.keys, { [m] = true })
        store(t, srec, s)
        d = d or P.new_set()
        if not d.has[m] then
            d.has[m] = true
            d.keys[#d.keys + 1] = m
            store(t, drec, d)
        end
        return 1
    end)
end }

---------------------------------------------------------------------------
-- SINTER, SUNION, SDIFF key [key ...]; SINTERSTORE, SUNIONSTORE,
-- SDIFFSTORE destination key [key ...]; SINTERCARD numkeys key [key ...]
-- [LIMIT limit].  Every key must hold a set or nothing (WRONGTYPE).

-- The sets at keys, read together: a list (a missing key's set is empty).
local function load_all(t, keys)
    t:read_all(keys)
    local sets = {}
    for i, k in ipairs(keys) do
        local _, s = load(t, k)
        sets[i] = s or P.new_set()
    end
    return sets
end

-- The members of op ("inter", "union", "diff") over sets, in the first
-- set's order (then each later set's, for a union); stops at `limit`
-- members when given.
local function combine(op, sets, limit)
    local out, seen = {}, {}
    local function add(m)
        if not seen[m] and (not limit or #out < limit) then
            seen[m] = true
            out[#out + 1] = m
        end
    end
    for _, m in ipairs(sets[1].keys) do
        local keep = true
        for i = 2, #sets do
            local has = sets[i].has[m] ~= nil
            if (op == "inter" and not has) or (op == "diff" and has) then
                keep = false
                break
            end
        end
        if keep then add(m) end
    end
    if op == "union" then
        for i = 2, #sets do
            for _, m in ipairs(sets[i].keys) do add(m) end
        end
    end
    return out
end

local function set_op(op)
    return { arity = -2, flags = "readonly", first_key = 1, last_key = -1, step = 1,
             fn = function(args)
        local keys = table.move(args, 2, #args, 1, {})
        return T.run(keys, function(t)
            return { set = combine(op, load_all(t, keys)) }
        end)
    end }
end

S.sinter, S.sunion, S.sdiff = set_op("inter"), set_op("union"), set_op("diff")

local function set_op_store(op)
    return { arity = -3, flags = "write denyoom", first_key = 1, last_key = -1, step = 1,
             fn = function(args)
        local dst = args[2]
        local keys = table.move(args, 3, #args, 1, {})
        local all = table.move(keys, 1, #keys, 2, { dst })
        return T.atomic(all, function(t)
            t:read_all(all)
            local members = combine(op, load_all(t, keys))
            local rec = t:read(dst)
            if #members == 0 then
                if rec.live then t:delete({ rec }) end
                return 0
            end
            local s = P.new_set()
            for i, m in ipairs(members) do
                s.keys[i] = m
                s.has[m] = true
            end
            local payload = P.encode_set(s)
            local e = K.value_error(payload)
            if e then return E.reply(e) end
            t:put(rec, SET, payload, 0)
            return #members
        end)
    end }
end

S.sinterstore, S.sunionstore, S.sdiffstore =
    set_op_store("inter"), set_op_store("union"), set_op_store("diff")

-- (numkeys: where the count of its keys is, as EVAL's: hooks.lua's
-- authorize sees them)
S.sintercard = { arity = -3, flags = "readonly movablekeys", first_key = 0, last_key = 0, step = 0,
                 numkeys = 1, fn = function(args)
    local n = U.to_int(args[2])
    if not n or n <= 0 then return E.reply(E.NUMKEYS_ZERO) end
    if n > #args - 2 then return E.reply(E.NUMKEYS_ARGS) end
    local keys = table.move(args, 3, 2 + n, 1, {})
    for _, key in ipairs(keys) do
        local e = K.key_error(key)
        if e then return E.reply(e) end
    end
    local limit
    local i = 3 + n
    while i <= #args do
        if U.is(args[i], "limit") and args[i + 1] then
            limit = U.to_int(args[i + 1])
            if not limit or limit < 0 then return E.reply(E.LIMIT_NEGATIVE) end
            i = i + 2
        else
            return E.reply(E.SYNTAX)
        end
    end
    if limit == 0 then limit = nil end
    return T.run(keys, function(t)
        return #combine("inter", load_all(t, keys), limit)
    end)
end }

return S
