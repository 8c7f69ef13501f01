-- cmd_keys.lua — the generic key commands: DEL, UNLINK, EXISTS, TYPE,
-- PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT, PTTL, TTL, PERSIST, DBSIZE, KEYS.
-- Same table shape as cmd_string.lua.

local K = require "keyspace"
local T = require "txn"
local E = require "errors"
local U = require "util"
local codec = require "codec"

local C = {}

local err = E.reply

local function key_args(args)
    local keys = {}
    for i = 2, #args do keys[#keys + 1] = args[i] end
    return keys
end

---------------------------------------------------------------------------
-- DEL key [key ...], UNLINK: one multi of versioned deletes (several
-- beyond keyspace.MULTI_MAX keys); the reply counts the distinct keys that
-- existed.

local function del(args)
    return T.delete_keys(key_args(args))
end

C.del = { fn = del, arity = -2, flags = "write", first_key = 1, last_key = -1, step = 1 }
C.unlink = { fn = del, arity = -2, flags = "write fast", first_key = 1, last_key = -1, step = 1 }

-- EXISTS key [key ...]: a key named twice counts twice.
C.exists = { arity = -2, flags = "readonly fast", first_key = 1, last_key = -1, step = 1,
             fn = function(args)
    local keys = key_args(args)
    return T.run(keys, function(t)
        local recs = t:read_all(keys)
        local n = 0
        for _, k in ipairs(keys) do
            if recs[k].live then n = n + 1 end
        end
        return n
    end)
end }

C.type = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
           fn = function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return { ok = "none" } end
        return { ok = codec.type_name(rec.vtype) }
    end)
end }

---------------------------------------------------------------------------
-- PEXPIRE / EXPIRE / PEXPIREAT / EXPIREAT key time [NX | XX | GT | LT]

local function expire_generic(args, name, seconds, absolute)
    local nx, xx, gt, lt
    for i = 4, #args do
        local a = args[i]:lower()
        if a == "nx" then nx = true
        elseif a == "xx" then xx = true
        elseif a == "gt" then gt = true
        elseif a == "lt" then lt = true
        else return err(E.unsupported_option(args[i])) end
    end
    if nx and (xx or gt or lt) then return err(E.EXPIRE_NX_COMBO) end
    if gt and lt then return err(E.EXPIRE_GT_LT) end
    local when = U.to_int(args[3])
    if not when then return err(E.NOT_INTEGER) end
    if seconds then
        if when > math.maxinteger // 1000 or when < math.mininteger // 1000 then
            return err(E.invalid_expire(name))
        end
        when = when * 1000
    end
    local base = absolute and 0 or math.floor(host.wall())
    if when > math.maxinteger - base then return err(E.invalid_expire(name)) end
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return 0 end
        if rec.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        local left = absolute and (when - host.wall()) or when
        local cur = K.remaining(rec)
        if nx and cur then return 0 end
        if xx and not cur then return 0 end
        if gt and (not cur or left <= cur) then return 0 end
        if lt and cur and left >= cur then return 0 end
        if left <= 0 then
            t:delete({ rec })
        else
            t:put(rec, rec.vtype, rec.value, math.ceil(left))
        end
        return 1
    end)
end

C.pexpire = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
              fn = function(args) return expire_generic(args, "pexpire", false, false) end }
C.expire = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
             fn = function(args) return expire_generic(args, "expire", true, false) end }
C.pexpireat = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
                fn = function(args) return expire_generic(args, "pexpireat", false, true) end }
C.expireat = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
               fn = function(args) return expire_generic(args, "expireat", true, true) end }

---------------------------------------------------------------------------
-- PTTL / TTL key: -2 missing, -1 no TTL; TTL rounds like Redis.

local function ttl_generic(key, ms)
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return -2 end
        local left = K.remaining(rec)
        if not left then return -1 end
        local n = math.max(0, math.floor(left))
        if ms then return n end
        return (n + 500) // 1000
    end)
end

C.pttl = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
           fn = function(args) return ttl_generic(args[2], true) end }
C.ttl = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
          fn = function(args) return ttl_generic(args[2], false) end }

C.persist = { arity = 2, flags = "write fast", first_key = 1, last_key = 1, step = 1,
              fn = function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live or not rec.deadline then return 0 end
        if rec.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        t:put(rec, rec.vtype, rec.value, 0)
        return 1
    end)
end }

---------------------------------------------------------------------------
-- DBSIZE: the children of <root>/k (expired nodes not yet deleted count).

C.dbsize = { arity = 1, flags = "readonly fast", first_key = 0, last_key = 0, step = 0,
             fn = function()
    return T.run({}, function()
        local rc, stat = K.stat(K.keys_dir())
        if rc == zk.NONODE then return 0 end
        return stat.numChildren
    end)
end }

-- KEYS pattern: Redis's glob over the keys under <root>/k, expired keys
-- skipped; refused beyond KEYS_LIMIT matches (policy.keys_limit).
local KEYS_LIMIT = 10000

C.keys = { arity = 2, flags = "readonly", first_key = 0, last_key = 0, step = 0,
           fn = function(args)
    local pattern = args[2]
    local all = pattern == "*"
    return T.run({}, function()
        local keys = {}
        local limit = K.policy.keys_limit or KEYS_LIMIT
        for _, key in ipairs(K.key_names()) do
            if all or U.glob(pattern, key) then
                keys[#keys + 1] = key
                if #keys > limit then return err(E.TOO_MANY_KEYS) end
            end
        end
        local recs = K.read_many(keys)
        local out = {}
        for _, k in ipairs(keys) do
            if recs[k].live then out[#out + 1] = k end
        end
        return out
    end)
end }

return C
