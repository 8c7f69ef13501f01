-- scan.lua — the cursor and options of SCAN, HSCAN and SSCAN (Redis's
-- scanGenericCommand), and the order SCAN walks the keyspace in.
--
-- SCAN's cursor is a position in a fixed order of all possible keys: by a
-- 62-bit hash of the key (FNV-1a), then by the key.  A call lists the keys
-- present now whose hash is at or after the cursor, takes COUNT of them
-- (and every other key of the last one's hash) and answers the hash after
-- the last one as the next cursor, 0 when none is left.  A key present for
-- the whole scan is therefore returned exactly once, however the keyspace
-- changes meanwhile, as Redis guarantees (Redis may return one twice).
--
-- HSCAN, SSCAN and ZSCAN answer the whole collection at once with cursor
-- 0, as Redis does for a collection small enough for a listpack or an
-- intset (N.collection).

local E = require "errors"
local U = require "util"
local T = require "txn"

local N = {}

-- Redis's parseScanCursorOrReply: strtoul of the whole argument (a sign
-- allowed, a negative one wraps; no leading space; the empty string is 0).
-- Returns the cursor as a signed integer of the same 64 bits, or nil.
function N.cursor(text)
    if text == "" then return 0 end
    local sign, digits = text:match("^([+-]?)(%d+)$")
    if not digits then return nil end
    digits = digits:gsub("^0+(%d)", "%1")
    if #digits > 20 or (#digits == 20 and digits > "18446744073709551615") then return nil end
    local n = math.tointeger(tonumber(digits))
    if not n then
        -- beyond 2^63 - 1: the unsigned value's bits
        local hi, lo = tonumber(digits:sub(1, -10)), tonumber(digits:sub(-9))
        n = hi * 1000000000 + lo -- wraps, as unsigned arithmetic
    end
    if sign == "-" then n = -n end
    return n
end

-- The options after the cursor (args[first] on): {match, count, type}, or
-- nil and the error.  with_type: SCAN's TYPE option is accepted.
function N.options(args, first, with_type)
    local o = { count = 10 }
    local i = first
    while i <= #args do
        local a, v = args[i], args[i + 1]
        if v and U.is(a, "count") then
            local n = U.to_int(v)
            if not n then return nil, E.NOT_INTEGER end
            if n < 1 then return nil, E.SYNTAX end
            o.count = n
        elseif v and U.is(a, "match") then
            o.match = v
        elseif v and with_type and U.is(a, "type") then
            o.type = v
        else
            return nil, E.SYNTAX
        end
        i = i + 2
    end
    return o
end

-- The place of key in SCAN's order: FNV-1a over its bytes, 62 bits, never
-- 0 (cursor 0 starts and ends a scan).
local FNV_OFFSET, FNV_PRIME = -3750763034362895579, 1099511628211

function N.hash(key)
    local h = FNV_OFFSET
    for i = 1, #key do h = (h ~ key:byte(i)) * FNV_PRIME end
    h = h & 0x3fffffffffffffff
    return h == 0 and 1 or h
end

-- One SCAN step over `names` (every key present): the keys at or after
-- cursor in SCAN's order, count of them and the rest of the last one's
-- hash; and the next cursor (0: done).
function N.step(names, cursor, count)
    local after = {}
    for _, k in ipairs(names) do
        local h = N.hash(k)
        if h >= cursor then after[#after + 1] = { h, k } end
    end
    table.sort(after, function(a, b)
        if a[1] ~= b[1] then return a[1] < b[1] end
        return a[2] < b[2]
    end)
    local out, last = {}, nil
    for _, e in ipairs(after) do
        if #out >= count and e[1] ~= last then return out, e[1] end
        out[#out + 1] = e[2]
        last = e[1]
    end
    return out, 0
end

-- The HSCAN/SSCAN/ZSCAN reply: cursor 0 and the entries of `list` that
-- match (pairs: list is field, value, ...; the field is matched).
function N.whole(list, match, pairs)
    local out = {}
    local step = pairs and 2 or 1
    for i = 1, #list, step do
        if not match or U.glob(match, list[i]) then
            for j = i, i + step - 1 do out[#out + 1] = list[j] end
        end
    end
    return { "0", out }
end

-- HSCAN, SSCAN, ZSCAN key cursor [MATCH pattern] [COUNT count]: listing(t,
-- key) reads the collection into the flat list N.whole answers from (nil
-- when the key is absent); pairs as N.whole's.
function N.collection(args, listing, pairs)
    local key = args[2]
    if not N.cursor(args[3]) then return E.reply(E.INVALID_CURSOR) end
    return T.run({ key }, function(t)
        local list = listing(t, key)
        if not list then return { "0", {} } end
        local o, e = N.options(args, 4, false)
        if not o then return E.reply(e) end
        return N.whole(list, o.match, pairs)
    end)
end

return N
