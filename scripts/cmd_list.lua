-- cmd_list.lua — the list commands: RPUSH, LPUSH, LPOP, RPOP, LINDEX,
-- LRANGE, LREM, LLEN, with Redis 7.0's replies and errors.  Same table
-- shape as cmd_string.lua.
--
-- A list is one znode of codec type LIST (payload.lua), head first.
-- Writes keep the key's TTL; a list left empty is deleted.

local T = require "txn"
local E = require "errors"
local U = require "util"
local P = require "payload"
local codec = require "codec"

local LIST = codec.LIST

local L = {}

local err = E.reply

local spec = U.key_command

local function load(t, key) return P.load(t, key, LIST) end

local function store(t, rec, list)
    P.store(t, rec, LIST, #list, P.encode_list(list))
end

---------------------------------------------------------------------------
-- RPUSH / LPUSH key element [element ...]: the new length.

local function push(args, left)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        list = list or {}
        if left then
            local n = #args - 2
            table.move(list, 1, #list, n + 1)
            for i = 3, #args do list[n - (i - 3)] = args[i] end
        else
            for i = 3, #args do list[#list + 1] = args[i] end
        end
        store(t, rec, list)
        return #list
    end)
end

L.rpush = spec(function(args) return push(args, false) end, -3, "write denyoom fast")
L.lpush = spec(function(args) return push(args, true) end, -3, "write denyoom fast")

---------------------------------------------------------------------------
-- LPOP / RPOP key [count]
--
-- Without count: the element, or null.  With count (a positive integer,
-- else "value is out of range, must be positive"): an array of up to count
-- elements, an empty array for count 0 on an existing list, and a null
-- array when the key is missing (`*-1` in RESP2, `_` in RESP3).

local POSITIVE = "ERR value is out of range, must be positive"

local function pop(args, name, left)
    if #args > 3 then return err(E.wrong_arity(name)) end
    local key = args[2]
    local count
    if #args == 3 then
        count = U.to_int(args[3])
        if not count or count < 0 then return err(POSITIVE) end
    end
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        if not list then return count and { null_array = true } or host.null end
        if count == 0 then return {} end
        local n = math.min(count or 1, #list)
        local out = {}
        if left then
            out = table.move(list, 1, n, 1, {})
            table.move(list, n + 1, #list + n, 1)
        else
            for i = 1, n do
                out[i] = list[#list]
                list[#list] = nil
            end
        end
        store(t, rec, list)
        if count then return out end
        return out[1]
    end)
end

L.lpop = spec(function(args) return pop(args, "lpop", true) end, -2, "write fast")
L.rpop = spec(function(args) return pop(args, "rpop", false) end, -2, "write fast")

---------------------------------------------------------------------------
-- Reads

-- LINDEX key index: the key is looked up before the index is parsed, as
-- in Redis.
L.lindex = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local _, list = load(t, key)
        if not list then return host.null end
        local i = U.to_int(args[3])
        if not i then return err(E.NOT_INTEGER) end
        if i < 0 then i = #list + i end
        return list[i + 1] or host.null
    end)
end, 3, "readonly")

-- The 1-based inclusive range [first, last] of Redis's start/stop over n
-- elements, or nil when it is empty.
local function span(start, stop, n)
    if start < 0 then start = n + start end
    if stop < 0 then stop = n + stop end
    if start < 0 then start = 0 end
    if start > stop or start >= n then return nil end
    if stop >= n then stop = n - 1 end
    return start + 1, stop + 1
end

L.lrange = spec(function(args)
    local key = args[2]
    local start, stop = U.to_int(args[3]), U.to_int(args[4])
    if not start or not stop then return err(E.NOT_INTEGER) end
    return T.run({ key }, function(t)
        local _, list = load(t, key)
        if not list then return {} end
        local first, last = span(start, stop, #list)
        if not first then return {} end
        return table.move(list, first, last, 1, {})
    end)
end, 4, "readonly")

L.llen = spec(function(args)
    return T.run({ args[2] }, function(t) return P.size(t, args[2], LIST) end)
end, 2, "readonly fast")

---------------------------------------------------------------------------
-- LREM key count element: count > 0 from the head, < 0 from the tail, 0
-- all; the number removed.

L.lrem = spec(function(args)
    local key, value = args[2], args[4]
    local count = U.to_int(args[3])
    if not count then return err(E.NOT_INTEGER) end
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        if not list then return 0 end
        local n = #list
        local drop, removed = {}, 0
        -- As in Redis, -count wraps for the most negative count, which
        -- then removes every match, like 0.
        local limit = (count == 0 or count == math.mininteger) and n or math.abs(count)
        local from, to, step = 1, n, 1
        if count < 0 then from, to, step = n, 1, -1 end
        for i = from, to, step do
            if removed >= limit then break end
            if list[i] == value then
                drop[i] = true
                removed = removed + 1
            end
        end
        if removed == 0 then return 0 end
        local kept = {}
        for i = 1, n do
            if not drop[i] then kept[#kept + 1] = list[i] end
        end
        store(t, rec, kept)
        return removed
    end)
end, 4, "write")

return L
