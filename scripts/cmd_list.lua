-- cmd_list.lua — the list commands: RPUSH, LPUSH, LPOP, RPOP, LINDEX,
-- LRANGE, LREM, LLEN, LSET, LTRIM, LINSERT, LPOS, LMOVE, RPOPLPUSH, with
-- Redis 7.2's replies and errors.  Same table shape as cmd_string.lua.
--
-- A list is one znode of codec type LIST (payload.lua), head first.
-- Writes keep the key's TTL; a list left empty is deleted.  LMOVE and
-- RPOPLPUSH write both their keys in one ZooKeeper multi (txn.atomic).

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

local function pop(args, name, left)
    if #args > 3 then return err(E.wrong_arity(name)) end
    local key = args[2]
    local count
    if #args == 3 then
        count = U.to_int(args[3])
        if not count or count < 0 then return err(E.NOT_POSITIVE) end
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

---------------------------------------------------------------------------
-- LSET key index element: "no such key" before the index is parsed.

L.lset = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        if not list then return err(E.NO_SUCH_KEY) end
        local i = U.to_int(args[3])
        if not i then return err(E.NOT_INTEGER) end
        if i < 0 then i = #list + i end
        if i < 0 or i >= #list then return err("ERR index out of range") end
        list[i + 1] = args[4]
        store(t, rec, list)
        return { ok = "OK" }
    end)
end, 4, "write denyoom")

-- LTRIM key start stop: keeps [start, stop]; OK even for a missing key.
L.ltrim = spec(function(args)
    local key = args[2]
    local start, stop = U.to_int(args[3]), U.to_int(args[4])
    if not start or not stop then return err(E.NOT_INTEGER) end
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        if not list then return { ok = "OK" } end
        -- (a trim that keeps the whole list writes it too: Redis counts it
        -- a change of the key, which a WATCH of it sees)
        local first, last = span(start, stop, #list)
        store(t, rec, first and table.move(list, first, last, 1, {}) or {})
        return { ok = "OK" }
    end)
end, 4, "write")

-- LINSERT key BEFORE|AFTER pivot element: the new length, 0 for a missing
-- key, -1 when the pivot is not there.
L.linsert = spec(function(args)
    local key, pivot = args[2], args[4]
    local where = args[3]:lower()
    if where ~= "before" and where ~= "after" then return err(E.SYNTAX) end
    return T.run({ key }, function(t)
        local rec, list = load(t, key)
        if not list then return 0 end
        for i, v in ipairs(list) do
            if v == pivot then
                table.insert(list, where == "before" and i or i + 1, args[5])
                store(t, rec, list)
                return #list
            end
        end
        return -1
    end)
end, 5, "write denyoom")

---------------------------------------------------------------------------
-- LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
--
-- The index (from the head) of the rank-th match, searching from the tail
-- for a negative rank, among the first maxlen elements looked at (0: all);
-- with COUNT, an array of up to num-matches of them (0: all).

local RANK_ZERO = "ERR RANK can't be zero: use 1 to start from the first match, " ..
                  "2 from the second ... or use negative to start from the end of the list"

L.lpos = spec(function(args)
    local key, value = args[2], args[3]
    local rank, count, maxlen = 1, nil, 0
    local i = 4
    while i <= #args do
        local opt, v = args[i]:lower(), args[i + 1]
        if opt == "rank" and v then
            rank = U.to_int(v)
            if not rank then return err(E.NOT_INTEGER) end
            if rank == math.mininteger then return err(E.LONG_RANGE) end
            if rank == 0 then return err(RANK_ZERO) end
        elseif opt == "count" and v then
            count = U.to_int(v)
            if not count or count < 0 then return err("ERR COUNT can't be negative") end
        elseif opt == "maxlen" and v then
            maxlen = U.to_int(v)
            if not maxlen or maxlen < 0 then return err("ERR MAXLEN can't be negative") end
        else
            return err(E.SYNTAX)
        end
        i = i + 2
    end
    return T.run({ key }, function(t)
        local _, list = load(t, key)
        if not list then return count and {} or host.null end
        local n, out, matches = #list, {}, 0
        local looked = (maxlen == 0 or maxlen > n) and n or maxlen
        for j = 0, looked - 1 do
            local pos = rank > 0 and j or n - 1 - j
            if list[pos + 1] == value then
                matches = matches + 1
                if matches >= math.abs(rank) then
                    if not count then return pos end
                    out[#out + 1] = pos
                    if count > 0 and #out >= count then break end
                end
            end
        end
        if count then return out end
        return host.null
    end)
end, -3, "readonly")

---------------------------------------------------------------------------
-- LMOVE source destination LEFT|RIGHT LEFT|RIGHT, RPOPLPUSH source
-- destination: the element moved, or null when the source is missing.
-- Both keys change in one multi; the same key rotates its list.

local function lmove(src, dst, from_left, to_left)
    return T.atomic({ src, dst }, function(t)
        local srec, slist = load(t, src)
        if not slist then return host.null end
        local drec, dlist = srec, slist
        if dst ~= src then
            drec, dlist = load(t, dst)
            dlist = dlist or {}
        end
        local v = table.remove(slist, from_left and 1 or #slist)
        table.insert(dlist, to_left and 1 or #dlist + 1, v)
        if dst ~= src then store(t, srec, slist) end
        store(t, drec, dlist)
        return v
    end)
end

local function side(s)
    s = s:lower()
    if s == "left" or s == "right" then return s == "left" end
end

L.lmove = { arity = 5, flags = "write denyoom", first_key = 1, last_key = 2, step = 1,
            fn = function(args)
    local from_left, to_left = side(args[4]), side(args[5])
    if from_left == nil or to_left == nil then return err(E.SYNTAX) end
    return lmove(args[2], args[3], from_left, to_left)
end }

L.rpoplpush = { arity = 3, flags = "write denyoom", first_key = 1, last_key = 2, step = 1,
                fn = function(args) return lmove(args[2], args[3], false, true) end }

return L
