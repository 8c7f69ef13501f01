-- cmd_zset.lua — the sorted set commands: ZADD (NX, XX, GT, LT, CH, INCR),
-- ZINCRBY, ZREM, ZSCORE, ZRANK, ZCARD, ZRANGE (by index, BYSCORE, BYLEX,
-- REV, LIMIT, WITHSCORES), ZRANGEBYSCORE, ZREMRANGEBYSCORE, ZSCAN, with Redis
-- 7.0's replies and errors.  Same table shape as cmd_string.lua.
--
-- A sorted set is one znode of codec type ZSET (payload.lua), ordered by
-- score, then member bytes.  Writes keep the key's TTL; removing the last
-- member deletes the key.  Scores are replied as {double = x}: a bulk
-- string in RESP2 ("%.17g", inf, -inf), a double in RESP3.  WITHSCORES
-- replies are {pairs = ...}: [member, score] pairs in RESP3, the flat array
-- in RESP2, as Redis.

local T = require "txn"
local E = require "errors"
local U = require "util"
local P = require "payload"
local N = require "scan"
local codec = require "codec"

local ZSET = codec.ZSET

local Z = {}

local NOT_FLOAT = E.NOT_FLOAT
local NAN_SCORE = "ERR resulting score is not a number (NaN)"
local RANGE_NOT_FLOAT = "ERR min or max is not a float"
local LEX_RANGE = "ERR min or max not valid string range item"

local err = E.reply

local spec = U.key_command

local function load(t, key) return P.load(t, key, ZSET) end

local function store(t, rec, z)
    P.store(t, rec, ZSET, #z, P.encode_zset(z))
end

local strtod_all, to_score = U.strtod_all, U.to_double

-- A bound as zslParseRange reads it: strtod on the C string (up to a NUL),
-- leading spaces skipped, an empty string is 0, overflow gives inf; NaN and
-- trailing bytes are refused.  Returns value, exclusive or nil.
local function to_bound(s)
    local ex = false
    if s:sub(1, 1) == "(" then
        ex = true
        s = s:sub(2)
    end
    s = s:match("^[^\0]*")
    if s == "" then return 0.0, ex end
    local rest = s:match("^[ \t\n\v\f\r]*(.*)$")
    if rest == "" then return nil end
    local v = strtod_all(rest)
    if v == nil or v ~= v then return nil end
    return v, ex
end

---------------------------------------------------------------------------
-- ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
-- ZINCRBY key increment member

local function zadd_generic(args, o)
    local key = args[2]
    local i = 3
    if not o.incr_cmd then
        o = {}
        while i <= #args do
            local a = args[i]:lower()
            if a == "nx" then o.nx = true
            elseif a == "xx" then o.xx = true
            elseif a == "gt" then o.gt = true
            elseif a == "lt" then o.lt = true
            elseif a == "ch" then o.ch = true
            elseif a == "incr" then o.incr = true
            else break end
            i = i + 1
        end
    end
    local n = #args - i + 1
    if n == 0 or n % 2 ~= 0 then return err(E.SYNTAX) end
    if o.nx and o.xx then return err("ERR XX and NX options at the same time are not compatible") end
    if (o.gt and o.nx) or (o.lt and o.nx) or (o.gt and o.lt) then
        return err("ERR GT, LT, and/or NX options at the same time are not compatible")
    end
    if o.incr and n > 2 then return err("ERR INCR option supports a single increment-element pair") end
    local pairs_ = {}
    for j = i, #args, 2 do
        local sc = to_score(args[j])
        if not sc then return err(NOT_FLOAT) end
        pairs_[#pairs_ + 1] = { args[j + 1], sc }
    end
    return T.run({ key }, function(t)
        local rec, z = load(t, key)
        if not z then
            if o.xx then return o.incr and host.null or 0 end
            z = P.new_zset()
        end
        local added, updated, processed, score = 0, 0, 0, nil
        for _, p in ipairs(pairs_) do
            local m, sc = p[1], p[2]
            local cur = z.score[m]
            if cur ~= nil then
                if not o.nx then
                    if o.incr then
                        sc = sc + cur
                        if sc ~= sc then return err(NAN_SCORE) end
                    end
                    if not ((o.lt and sc >= cur) or (o.gt and sc <= cur)) then
                        sc = sc + 0.0 -- no negative zero, as a small Redis zset stores it
                        if sc ~= cur then
                            for _, e in ipairs(z) do
                                if e[1] == m then e[2] = sc break end
                            end
                            z.score[m] = sc
                            updated = updated + 1
                        end
                        processed = processed + 1
                        score = sc
                    end
                end
            elseif not o.xx then
                sc = sc + 0.0
                z[#z + 1] = { m, sc }
                z.score[m] = sc
                added = added + 1
                processed = processed + 1
                score = sc
            end
        end
        if added + updated > 0 then
            P.zset_sort(z)
            store(t, rec, z)
        end
        if o.incr then
            if processed > 0 then return { double = score } end
            return host.null
        end
        return o.ch and (added + updated) or added
    end)
end

Z.zadd = spec(function(args) return zadd_generic(args, {}) end, -4, "write denyoom fast")
Z.zincrby = spec(function(args)
    return zadd_generic({ args[1], args[2], args[3], args[4] }, { incr_cmd = true, incr = true })
end, 4, "write denyoom fast")

---------------------------------------------------------------------------
-- ZREM key member [member ...]

Z.zrem = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, z = load(t, key)
        if not z then return 0 end
        local del, n = {}, 0
        for i = 3, #args do
            local m = args[i]
            if z.score[m] ~= nil and not del[m] then
                del[m] = true
                n = n + 1
            end
        end
        if n == 0 then return 0 end
        local kept = P.new_zset()
        for _, e in ipairs(z) do
            if not del[e[1]] then
                kept[#kept + 1] = e
                kept.score[e[1]] = e[2]
            end
        end
        store(t, rec, kept)
        return n
    end)
end, -3, "write fast")

---------------------------------------------------------------------------
-- ZSCORE, ZRANK, ZCARD

Z.zscore = spec(function(args)
    local key, m = args[2], args[3]
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        local sc = z and z.score[m]
        if sc == nil then return host.null end
        return { double = sc }
    end)
end, 3, "readonly fast")

Z.zrank = spec(function(args)
    local key, m = args[2], args[3]
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not z or z.score[m] == nil then return host.null end
        for i, e in ipairs(z) do
            if e[1] == m then return i - 1 end
        end
        return host.null
    end)
end, 3, "readonly fast")

Z.zcard = spec(function(args)
    return T.run({ args[2] }, function(t) return P.size(t, args[2], ZSET) end)
end, 2, "readonly fast")

-- ZSCAN key cursor [MATCH pattern] [COUNT count]: the whole sorted set at
-- once (scan.lua), scores as bulk strings ("%.17g") in RESP2 and RESP3.
Z.zscan = spec(function(args)
    local key = args[2]
    if not N.cursor(args[3]) then return err(E.INVALID_CURSOR) end
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not z then return { "0", {} } end
        local o, e = N.options(args, 4, false)
        if not o then return err(e) end
        local flat = {}
        for _, m in ipairs(z) do
            flat[#flat + 1] = m[1]
            flat[#flat + 1] = ("%.17g"):format(m[2])
        end
        return N.whole(flat, o.match, true)
    end)
end, -3, "readonly")

---------------------------------------------------------------------------
-- Ranges
--
-- A range selects, in the set's order (or reversed), a run of elements:
-- by index, by score or by member (lex).  The selection walks like Redis's
-- listpack code does: from the first element past the lower bound, while
-- the upper one holds, after skipping `offset` (a negative offset skips
-- everything), at most `limit` (negative: no limit).

local function in_min(v, min, ex)
    if ex then return v > min end
    return v >= min
end

local function in_max(v, max, ex)
    if ex then return v < max end
    return v <= max
end

-- The indexes of z's elements whose z[i][field] (1 the member, 2 the
-- score) lies within a range, in z's order or reversed: above(v) says v is
-- not below the range's start, below(v) not past its end.  z is sorted by
-- that field within the range, so the walk stops at the first one past.
local function walk(z, field, above, below, rev)
    local out = {}
    local n = #z
    local from, to, step = 1, n, 1
    if rev then from, to, step = n, 1, -1 end
    local first, inside = above, below
    if rev then first, inside = below, above end
    local started = false
    for i = from, to, step do
        local v = z[i][field]
        started = started or first(v)
        if started then
            if not inside(v) then break end
            out[#out + 1] = i
        end
    end
    return out
end

-- Score range: indexes of the selected elements.
local function select_score(z, r, rev)
    if r.min > r.max or (r.min == r.max and (r.minex or r.maxex)) then return {} end
    return walk(z, 2, function(s) return in_min(s, r.min, r.minex) end,
                function(s) return in_max(s, r.max, r.maxex) end, rev)
end

-- Lex bounds: "-" and "+" are the extremes, "[x" inclusive, "(x" exclusive.
local function lex_item(s)
    local c = s:sub(1, 1)
    if c == "+" or c == "-" then
        if #s > 1 and s:byte(2) ~= 0 then return nil end
        return { inf = c == "+" and 1 or -1, ex = true }
    elseif c == "(" or c == "[" then
        return { v = s:sub(2), ex = c == "(" }
    end
end

-- a compared with bound b: -1, 0, 1.
local function lex_cmp(a, b)
    if b.inf then return -b.inf end
    if a == b.v then return 0 end
    return a < b.v and -1 or 1
end

local function lex_gte_min(m, min)
    local c = lex_cmp(m, min)
    if min.inf then return min.inf < 0 end
    return min.ex and c > 0 or (not min.ex and c >= 0)
end

local function lex_lte_max(m, max)
    local c = lex_cmp(m, max)
    if max.inf then return max.inf > 0 end
    return max.ex and c < 0 or (not max.ex and c <= 0)
end

local function lex_empty(min, max)
    if min.inf == 1 or max.inf == -1 then return true end
    if min.inf or max.inf then return false end
    if min.v > max.v then return true end
    return min.v == max.v and (min.ex or max.ex)
end

local function select_lex(z, min, max, rev)
    local n = #z
    if n == 0 or lex_empty(min, max) then return {} end
    if not lex_gte_min(z[n][1], min) or not lex_lte_max(z[1][1], max) then return {} end
    return walk(z, 1, function(m) return lex_gte_min(m, min) end,
                function(m) return lex_lte_max(m, max) end, rev)
end

local function apply_limit(idx, offset, limit)
    if offset < 0 then return {} end
    local out = {}
    for j = offset + 1, #idx do
        if limit >= 0 and #out >= limit then break end
        out[#out + 1] = idx[j]
    end
    return out
end

local function select_rank(z, start, stop, rev)
    local n = #z
    if start < 0 then start = n + start end
    if stop < 0 then stop = n + stop end
    if start < 0 then start = 0 end
    local out = {}
    if start > stop or start >= n then return out end
    if stop >= n then stop = n - 1 end
    for r = start, stop do
        out[#out + 1] = rev and (n - r) or (r + 1)
    end
    return out
end

local function reply_range(z, idx, withscores)
    local out = {}
    for _, i in ipairs(idx) do
        out[#out + 1] = z[i][1]
        if withscores then out[#out + 1] = { double = z[i][2] } end
    end
    if withscores then return { pairs = out } end
    return out
end

-- ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count]
--                       [WITHSCORES]
-- ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
-- (Redis's zrangeGenericCommand; `kind` fixed for ZRANGEBYSCORE.)
local function zrange_generic(args, fixed_kind)
    local key = args[2]
    local kind, rev, withscores = fixed_kind, false, false
    local offset, limit = 0, -1
    local i = 5
    while i <= #args do
        local a = args[i]:lower()
        local left = #args - i
        if a == "withscores" then
            withscores = true
        elseif a == "limit" and left >= 2 then
            offset, limit = U.to_int(args[i + 1]), U.to_int(args[i + 2])
            if not offset or not limit then return err(E.NOT_INTEGER) end
            i = i + 2
        elseif not fixed_kind and not rev and a == "rev" then
            rev = true
        elseif not fixed_kind and not kind and a == "bylex" then
            kind = "lex"
        elseif not fixed_kind and not kind and a == "byscore" then
            kind = "score"
        else
            return err(E.SYNTAX)
        end
        i = i + 1
    end
    kind = kind or "rank"
    if limit ~= -1 and kind == "rank" then
        return err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    end
    if withscores and kind == "lex" then
        return err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    end
    local lo, hi = args[3], args[4]
    if rev and kind ~= "rank" then lo, hi = hi, lo end
    local select
    if kind == "rank" then
        local start, stop = U.to_int(lo), U.to_int(hi)
        if not start or not stop then return err(E.NOT_INTEGER) end
        select = function(z) return select_rank(z, start, stop, rev) end
    elseif kind == "score" then
        local min, minex = to_bound(lo)
        local max, maxex = to_bound(hi)
        if not min or not max then return err(RANGE_NOT_FLOAT) end
        local r = { min = min, minex = minex, max = max, maxex = maxex }
        select = function(z)
            if offset > 0 and offset >= #z then return {} end
            return apply_limit(select_score(z, r, rev), offset, limit)
        end
    else
        local min, max = lex_item(lo), lex_item(hi)
        if not min or not max then return err(LEX_RANGE) end
        select = function(z)
            if offset > 0 and offset >= #z then return {} end
            return apply_limit(select_lex(z, min, max, rev), offset, limit)
        end
    end
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not z then return {} end
        return reply_range(z, select(z), withscores)
    end)
end

Z.zrange = spec(function(args) return zrange_generic(args, nil) end, -4, "readonly")
Z.zrangebyscore = spec(function(args) return zrange_generic(args, "score") end, -4, "readonly")

-- ZREMRANGEBYSCORE key min max: the number removed.
Z.zremrangebyscore = spec(function(args)
    local key = args[2]
    local min, minex = to_bound(args[3])
    local max, maxex = to_bound(args[4])
    if not min or not max then return err(RANGE_NOT_FLOAT) end
    local r = { min = min, minex = minex, max = max, maxex = maxex }
    return T.run({ key }, function(t)
        local rec, z = load(t, key)
        if not z then return 0 end
        local idx = select_score(z, r, false)
        if #idx == 0 then return 0 end
        local drop = {}
        for _, i in ipairs(idx) do drop[i] = true end
        local kept = P.new_zset()
        for i, e in ipairs(z) do
            if not drop[i] then
                kept[#kept + 1] = e
                kept.score[e[1]] = e[2]
            end
        end
        store(t, rec, kept)
        return #idx
    end)
end, 4, "write")

return Z
