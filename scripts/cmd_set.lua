-- cmd_set.lua — the set commands: SADD, SREM, SISMEMBER, SMEMBERS, SCARD,
-- with Redis 7.0's replies and errors.  Same table shape as cmd_string.lua.
--
-- A set is one znode of codec type SET (payload.lua), members in insertion
-- order (Redis leaves SMEMBERS's order unspecified).  Writes keep the key's
-- TTL; removing the last member deletes the key.

local T = require "txn"
local U = require "util"
local P = require "payload"
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

return S
