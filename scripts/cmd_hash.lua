-- cmd_hash.lua — the hash commands: HSET, HMSET, HSETNX, HGET, HMGET,
-- HINCRBY, HINCRBYFLOAT, HEXISTS, HDEL, HLEN, HSTRLEN, HKEYS, HVALS,
-- HGETALL, HRANDFIELD, HSCAN, with Redis 7.0's replies and errors.  Same table shape as cmd_string.lua.
--
-- A hash is one znode of codec type HASH (payload.lua); fields keep their
-- insertion order, as a small Redis hash (listpack) does.  Writes keep the
-- key's TTL; removing the last field deletes the key.

local T = require "txn"
local E = require "errors"
local U = require "util"
local P = require "payload"
local N = require "scan"
local codec = require "codec"

local HASH = codec.HASH

local C = {}

local err = E.reply

local spec = U.key_command

-- Reads the hash at key inside t: rec and the hash (nil when missing).
local function load(t, key) return P.load(t, key, HASH) end

local function store(t, rec, h)
    P.store(t, rec, HASH, #h.keys, P.encode_hash(h))
end

---------------------------------------------------------------------------
-- HSET key field value [field value ...]; HMSET the same, answering OK.

local function hset_generic(args, name, reply_ok)
    if #args % 2 ~= 0 then return err(E.wrong_arity(name)) end
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, h = load(t, key)
        h = h or P.new_hash()
        local added = 0
        for i = 3, #args, 2 do
            if P.hash_set(h, args[i], args[i + 1]) then added = added + 1 end
        end
        store(t, rec, h)
        if reply_ok then return { ok = "OK" } end
        return added
    end)
end

C.hset = spec(function(args) return hset_generic(args, "hset", false) end, -4,
              "write denyoom fast")
C.hmset = spec(function(args) return hset_generic(args, "hmset", true) end, -4,
               "write denyoom fast")

---------------------------------------------------------------------------
-- Reads

C.hget = spec(function(args)
    local key, field = args[2], args[3]
    return T.run({ key }, function(t)
        local _, h = load(t, key)
        return h and h.vals[field] or host.null
    end)
end, 3, "readonly fast")

C.hmget = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local _, h = load(t, key)
        local out = {}
        for i = 3, #args do
            out[#out + 1] = h and h.vals[args[i]] or host.null
        end
        return out
    end)
end, -3, "readonly fast")

C.hexists = spec(function(args)
    local key, field = args[2], args[3]
    return T.run({ key }, function(t)
        local _, h = load(t, key)
        return (h and h.vals[field]) and 1 or 0
    end)
end, 3, "readonly fast")

C.hlen = spec(function(args)
    return T.run({ args[2] }, function(t) return P.size(t, args[2], HASH) end)
end, 2, "readonly fast")

local function listing(what)
    return function(args)
        local key = args[2]
        return T.run({ key }, function(t)
            local _, h = load(t, key)
            local out = {}
            for _, f in ipairs(h and h.keys or {}) do
                if what ~= "vals" then out[#out + 1] = f end
                if what ~= "keys" then out[#out + 1] = h.vals[f] end
            end
            if what == "all" then return { map = out } end
            return out
        end)
    end
end

C.hkeys = spec(listing("keys"), 2, "readonly")
C.hvals = spec(listing("vals"), 2, "readonly")
C.hgetall = spec(listing("all"), 2, "readonly")

---------------------------------------------------------------------------
-- HINCRBY key field increment

C.hincrby = spec(function(args)
    local key, field = args[2], args[3]
    local by = U.to_int(args[4])
    if not by then return err(E.NOT_INTEGER) end
    return T.run({ key }, function(t)
        local rec, h = load(t, key)
        h = h or P.new_hash()
        local cur = 0
        if h.vals[field] then
            cur = U.to_int(h.vals[field])
            if not cur then return err(E.HASH_NOT_INTEGER) end
        end
        local n = U.add_checked(cur, by)
        if not n then return err(E.INCR_OVERFLOW) end
        P.hash_set(h, field, tostring(n))
        store(t, rec, h)
        return n
    end)
end, 4, "write denyoom fast")

-- HINCRBYFLOAT key field increment: the sum as INCRBYFLOAT writes it.
C.hincrbyfloat = spec(function(args)
    local key, field = args[2], args[3]
    local by = U.to_double(args[4])
    if not by then return err(E.NOT_FLOAT) end
    if by == math.huge or by == -math.huge then return err(E.NAN_OR_INFINITY_VALUE) end
    return T.run({ key }, function(t)
        local rec, h = load(t, key)
        h = h or P.new_hash()
        local cur = 0.0
        if h.vals[field] then
            cur = U.to_double(h.vals[field])
            if not cur then return err(E.HASH_NOT_FLOAT) end
        end
        local n = cur + by
        if n ~= n or n == math.huge or n == -math.huge then return err(E.NAN_OR_INFINITY) end
        local text = U.human_double(n)
        P.hash_set(h, field, text)
        store(t, rec, h)
        return text
    end)
end, 4, "write denyoom fast")

-- HSETNX key field value
C.hsetnx = spec(function(args)
    local key, field = args[2], args[3]
    return T.run({ key }, function(t)
        local rec, h = load(t, key)
        h = h or P.new_hash()
        if h.vals[field] then return 0 end
        P.hash_set(h, field, args[4])
        store(t, rec, h)
        return 1
    end)
end, 4, "write denyoom fast")

C.hstrlen = spec(function(args)
    local key, field = args[2], args[3]
    return T.run({ key }, function(t)
        local _, h = load(t, key)
        local v = h and h.vals[field]
        return v and #v or 0
    end)
end, 3, "readonly fast")

---------------------------------------------------------------------------
-- HRANDFIELD key [count [WITHVALUES]]

C.hrandfield = spec(function(args)
    local key = args[2]
    local count, withvalues
    if #args >= 3 then
        local e
        count, e = U.random_count(args[3])
        if not count then return err(e) end
        if #args > 4 or (#args == 4 and not U.is(args[4], "withvalues")) then
            return err(E.SYNTAX)
        end
        withvalues = #args == 4
        if withvalues and (count < -(math.maxinteger // 2) or count > math.maxinteger // 2) then
            return err(E.OUT_OF_RANGE)
        end
    end
    return T.run({ key }, function(t)
        local _, h = load(t, key)
        if not count then
            return h and h.keys[math.random(#h.keys)] or host.null
        end
        if not h or count == 0 then return {} end
        local out = {}
        for _, i in ipairs(U.random_picks(#h.keys, count)) do
            local f = h.keys[i]
            out[#out + 1] = f
            if withvalues then out[#out + 1] = h.vals[f] end
        end
        if withvalues then return { pairs = out } end
        return out
    end)
end, -2, "readonly")

-- HSCAN key cursor [MATCH pattern] [COUNT count]: the whole hash at once
-- (scan.lua).
C.hscan = spec(function(args)
    return N.collection(args, function(t, key)
        local _, h = load(t, key)
        if not h then return nil end
        local flat = {}
        for _, f in ipairs(h.keys) do
            flat[#flat + 1] = f
            flat[#flat + 1] = h.vals[f]
        end
        return flat
    end, true)
end, -3, "readonly")

---------------------------------------------------------------------------
-- HDEL key field [field ...]

C.hdel = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, h = load(t, key)
        if not h then return 0 end
        local del, n = {}, 0
        for i = 3, #args do
            local f = args[i]
            if h.vals[f] and not del[f] then
                del[f] = true
                h.vals[f] = nil
                n = n + 1
            end
        end
        if n == 0 then return 0 end
        P.drop_keys(h.keys, del)
        store(t, rec, h)
        return n
    end)
end, -3, "write fast")

return C
