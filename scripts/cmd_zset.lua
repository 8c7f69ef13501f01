-- cmd_zset.lua — the sorted set commands: ZADD (NX, XX, GT, LT, CH, INCR),
-- ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZRANK, ZREVRANK (WITHSCORE), ZCARD,
-- ZRANGE (by index, BYSCORE, BYLEX, REV, LIMIT, WITHSCORES), ZRANGEBYSCORE,
-- ZRANGEBYLEX, ZREVRANGE, ZREVRANGEBYSCORE, ZREVRANGEBYLEX, ZCOUNT,
-- ZLEXCOUNT, ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZREMRANGEBYRANK, ZPOPMIN,
-- ZPOPMAX, ZRANDMEMBER, ZSCAN, with Redis 7.2's replies and errors.  Same table
-- shape as cmd_string.lua; zset_range.lua parses and selects the ranges.
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
local R = require "zset_range"

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
        local sc = R.to_score(args[j])
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
-- ZSCORE, ZMSCORE, ZRANK, ZREVRANK, ZCARD

Z.zscore = spec(function(args)
    local key, m = args[2], args[3]
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        local sc = z and z.score[m]
        if sc == nil then return host.null end
        return { double = sc }
    end)
end, 3, "readonly fast")

-- ZMSCORE key member [member ...]: a score or null for each member.
Z.zmscore = spec(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        local out = {}
        for i = 3, #args do
            local sc = z and z.score[args[i]]
            out[#out + 1] = sc and { double = sc } or host.null
        end
        return out
    end)
end, -3, "readonly fast")

-- ZRANK / ZREVRANK key member [WITHSCORE] (Redis 7.2): the rank, or with
-- WITHSCORE [rank, score]; a null (a null array with WITHSCORE) when the
-- member or the key is missing.
local function rank(args, name, rev)
    if #args > 4 then return err(E.wrong_arity(name)) end
    local withscore = false
    if #args == 4 then
        if args[4]:lower() ~= "withscore" then return err(E.SYNTAX) end
        withscore = true
    end
    local key, m = args[2], args[3]
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        local sc = z and z.score[m]
        if sc == nil then return withscore and { null_array = true } or host.null end
        for i, e in ipairs(z) do
            if e[1] == m then
                local r = rev and #z - i or i - 1
                if withscore then return { r, { double = sc } } end
                return r
            end
        end
    end)
end

Z.zrank = spec(function(args) return rank(args, "zrank", false) end, -3, "readonly fast")
Z.zrevrank = spec(function(args) return rank(args, "zrevrank", true) end, -3, "readonly fast")

Z.zcard = spec(function(args)
    return T.run({ args[2] }, function(t) return P.size(t, args[2], ZSET) end)
end, 2, "readonly fast")

-- ZSCAN key cursor [MATCH pattern] [COUNT count]: the whole sorted set at
-- once (scan.lua), scores as bulk strings ("%.17g") in RESP2 and RESP3.
Z.zscan = spec(function(args)
    return N.collection(args, function(t, key)
        local _, z = load(t, key)
        if not z then return nil end
        local flat = {}
        for _, m in ipairs(z) do
            flat[#flat + 1] = m[1]
            flat[#flat + 1] = ("%.17g"):format(m[2])
        end
        return flat
    end, true)
end, -3, "readonly")

---------------------------------------------------------------------------
-- Ranges (zset_range.lua selects them)

-- A range's parsed bounds, or nil plus Redis's error: kind "score" (min
-- max), "lex" or "rank" (start stop).
local function bounds(kind, lo, hi)
    if kind == "score" then
        local r = R.score_range(lo, hi)
        if not r then return nil, err(RANGE_NOT_FLOAT) end
        return r
    elseif kind == "lex" then
        local r = R.lex_range(lo, hi)
        if not r then return nil, err(LEX_RANGE) end
        return r
    end
    local start, stop = U.to_int(lo), U.to_int(hi)
    if not start or not stop then return nil, err(E.NOT_INTEGER) end
    return { start = start, stop = stop }
end

-- The indexes a parsed range selects in z.
local function select(z, kind, r, rev)
    if kind == "score" then return R.select_score(z, r, rev) end
    if kind == "lex" then return R.select_lex(z, r, rev) end
    return R.select_rank(z, r.start, r.stop, rev)
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
-- and the commands that fix its kind and direction: ZRANGEBYSCORE,
-- ZRANGEBYLEX, ZREVRANGE, ZREVRANGEBYSCORE, ZREVRANGEBYLEX (Redis's
-- zrangeGenericCommand; `fixed` nil for ZRANGE).
local function zrange_generic(args, fixed, fixed_rev)
    local key = args[2]
    local kind, rev, withscores = fixed, fixed_rev or false, false
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
        elseif not fixed and not rev and a == "rev" then
            rev = true
        elseif not fixed and not kind and a == "bylex" then
            kind = "lex"
        elseif not fixed and not kind and a == "byscore" then
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
    local r, e = bounds(kind, lo, hi)
    if not r then return e end
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not z then return {} end
        local idx
        if kind == "rank" then
            idx = select(z, kind, r, rev)
        elseif offset > 0 and offset >= #z then
            idx = {}
        else
            idx = R.apply_limit(select(z, kind, r, rev), offset, limit)
        end
        return reply_range(z, idx, withscores)
    end)
end

local function zrange_cmd(kind, rev)
    return spec(function(args) return zrange_generic(args, kind, rev) end, -4, "readonly")
end

Z.zrange = zrange_cmd(nil, false)
Z.zrangebyscore = zrange_cmd("score", false)
Z.zrangebylex = zrange_cmd("lex", false)
Z.zrevrange = zrange_cmd("rank", true)
Z.zrevrangebyscore = zrange_cmd("score", true)
Z.zrevrangebylex = zrange_cmd("lex", true)

-- ZCOUNT key min max, ZLEXCOUNT key min max: how many lie in the range.
local function count(args, kind)
    local key = args[2]
    local r, e = bounds(kind, args[3], args[4])
    if not r then return e end
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not z then return 0 end
        return #select(z, kind, r, false)
    end)
end

Z.zcount = spec(function(args) return count(args, "score") end, 4, "readonly fast")
Z.zlexcount = spec(function(args) return count(args, "lex") end, 4, "readonly fast")

-- ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZREMRANGEBYRANK key min max: the
-- number removed.
local function zremrange(args, kind)
    local key = args[2]
    local r, e = bounds(kind, args[3], args[4])
    if not r then return e end
    return T.run({ key }, function(t)
        local rec, z = load(t, key)
        if not z then return 0 end
        local idx = select(z, kind, r, false)
        if #idx == 0 then return 0 end
        store(t, rec, R.without(z, idx))
        return #idx
    end)
end

Z.zremrangebyscore = spec(function(args) return zremrange(args, "score") end, 4, "write")
Z.zremrangebylex = spec(function(args) return zremrange(args, "lex") end, 4, "write")
Z.zremrangebyrank = spec(function(args) return zremrange(args, "rank") end, 4, "write")

---------------------------------------------------------------------------
-- ZPOPMIN / ZPOPMAX key [count]: the lowest (highest) members with their
-- scores, removed.  Flat [member, score, ...]; in RESP3 with a count,
-- [member, score] pairs.  A missing key answers an empty array.

local function zpop(args, max)
    if #args > 3 then return err(E.SYNTAX) end
    local key, n = args[2], nil
    if #args == 3 then
        n = U.to_int(args[3])
        if not n or n < 0 then return err(E.NOT_POSITIVE) end
    end
    return T.run({ key }, function(t)
        local rec, z = load(t, key)
        if not z or n == 0 then return {} end
        local idx = R.select_rank(z, 0, (n or 1) - 1, max)
        local out = reply_range(z, idx, true)
        store(t, rec, R.without(z, idx))
        if n then return out end
        return out.pairs
    end)
end

Z.zpopmin = spec(function(args) return zpop(args, false) end, -2, "write fast")
Z.zpopmax = spec(function(args) return zpop(args, true) end, -2, "write fast")

---------------------------------------------------------------------------
-- ZRANDMEMBER key [count [WITHSCORES]]
--
-- Without count: one random member, or null.  A positive count: that many
-- distinct members in the set's order (the whole set, highest first, when
-- it has no more: Redis's iterator walks from the tail); a
-- negative one: -count members drawn with repetition, at most
-- E.RANDOM_MAX of them (a zkresp limit: the reply is built in memory).

Z.zrandmember = spec(function(args)
    local key = args[2]
    local n, withscores
    if #args >= 3 then
        n = U.to_int(args[3])
        if not n then return err(E.NOT_INTEGER) end
        if n == math.mininteger then return err(E.LONG_RANGE) end
        if #args > 4 or (#args == 4 and args[4]:lower() ~= "withscores") then return err(E.SYNTAX) end
        withscores = #args == 4
        if withscores and (n < -(math.maxinteger // 2) or n > math.maxinteger // 2) then
            return err("ERR value is out of range")
        end
        if n < -E.RANDOM_MAX then return err(E.RANDOM_TOO_MANY) end
    end
    return T.run({ key }, function(t)
        local _, z = load(t, key)
        if not n then
            if not z then return host.null end
            return z[math.random(#z)][1]
        end
        if not z or n == 0 then return {} end
        local idx = {}
        if n < 0 then
            for i = 1, -n do idx[i] = math.random(#z) end
        elseif n >= #z then
            for i = 1, #z do idx[i] = #z + 1 - i end
        else
            local all = {}
            for i = 1, #z do all[i] = i end
            for i = 1, n do
                local j = math.random(i, #z)
                all[i], all[j] = all[j], all[i]
                idx[i] = all[i]
            end
            table.sort(idx)
        end
        return reply_range(z, idx, withscores)
    end)
end, -2, "readonly")

return Z
