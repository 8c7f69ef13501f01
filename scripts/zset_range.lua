-- zset_range.lua — how the sorted set commands (cmd_zset.lua) read their
-- numbers and select their ranges: scores and score bounds as Redis's
-- strtod-based parsers accept them, lex bounds, and the walks that pick a
-- run of elements by index, by score or by member, in order or reversed.
--
-- A selection is a list of indexes into the zset (payload.lua's in-memory
-- form: {{member, score}, ...} sorted), in the order the reply lists them.

local P = require "payload"
local U = require "util"

local R = {}

-- Redis's getDoubleFromObject (util.lua).
R.to_score = U.to_double
local strtod_all = U.strtod_all

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

-- A score range {min, minex, max, maxex} from the command's min and max
-- arguments, or nil when one is not a float.
function R.score_range(lo, hi)
    local min, minex = to_bound(lo)
    local max, maxex = to_bound(hi)
    if not min or not max then return nil end
    return { min = min, minex = minex, max = max, maxex = maxex }
end

-- Score range: indexes of the selected elements.
function R.select_score(z, r, rev)
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

-- A lex range {min, max} from the command's min and max arguments, or nil
-- when one is not a valid string range item.
function R.lex_range(lo, hi)
    local min, max = lex_item(lo), lex_item(hi)
    if not min or not max then return nil end
    return { min = min, max = max }
end

function R.select_lex(z, r, rev)
    local min, max = r.min, r.max
    local n = #z
    if n == 0 or lex_empty(min, max) then return {} end
    if not lex_gte_min(z[n][1], min) or not lex_lte_max(z[1][1], max) then return {} end
    return walk(z, 1, function(m) return lex_gte_min(m, min) end,
                function(m) return lex_lte_max(m, max) end, rev)
end

function R.apply_limit(idx, offset, limit)
    if offset < 0 then return {} end
    local out = {}
    for j = offset + 1, #idx do
        if limit >= 0 and #out >= limit then break end
        out[#out + 1] = idx[j]
    end
    return out
end

function R.select_rank(z, start, stop, rev)
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

-- z without the elements at the indexes in idx: a new zset.
function R.without(z, idx)
    local drop = {}
    for _, i in ipairs(idx) do drop[i] = true end
    local kept = P.new_zset()
    for i, e in ipairs(z) do
        if not drop[i] then
            kept[#kept + 1] = e
            kept.score[e[1]] = e[2]
        end
    end
    return kept
end

return R
