-- util.lua — small helpers shared by the modules: Redis's integer parsing
-- and its glob matcher, and the tables of per-command state.

local E = require "errors"

local U = {}

---------------------------------------------------------------------------
-- State kept per command, keyed by the command's coroutine
--
-- lua_co.c keeps the coroutines of finished commands for later ones (a new
-- thread per command would build its stack and call records again), so a
-- coroutine is one command's only while that command runs.  State keyed by
-- coroutine.running() for the running command lives in tables made here,
-- and M.dispatch clears them for its coroutine before the command starts.

--
-- A table of Lua never shrinks by itself: one that held the state of 2,000
-- concurrent commands keeps room for them after they are gone.  So the
-- table a module gets is an empty front whose metatable sends every read
-- and write to a weak-keyed store behind it, which U.compact_per_command
-- replaces with a copy of its live entries when the sidecar is idle.  (No
-- pairs, next or rawget on these tables: they see the empty front.)

local per_command = {} -- the fronts' metatables

-- A weak-keyed table for state of the running command (or of a background
-- coroutine: those are never reused).
function U.per_command()
    local store = setmetatable({}, { __mode = "k" })
    local mt = { __index = store, __newindex = store }
    per_command[#per_command + 1] = mt
    return setmetatable({}, mt)
end

-- Forgets what earlier commands left for coroutine co.
function U.new_command(co)
    for i = 1, #per_command do per_command[i].__index[co] = nil end
end

-- Gives every per-command table a store of its size now (for idle times).
function U.compact_per_command()
    for i = 1, #per_command do
        local mt = per_command[i]
        local store = setmetatable({}, { __mode = "k" })
        for co, v in pairs(mt.__index) do store[co] = v end
        mt.__index, mt.__newindex = store, store
    end
end

-- Redis's string2ll: a decimal integer in the signed 64-bit range with no
-- sign other than a leading '-', no leading zeros, no spaces, shorter than
-- 21 bytes.  Returns the integer or nil.
function U.to_int(s)
    if type(s) ~= "string" or #s == 0 or #s >= 21 then return nil end
    if s == "0" then return 0 end
    if not s:find("^%-?[1-9]%d*$") then return nil end
    -- Up to 18 digits always fit.  Longer, out-of-range literals become
    -- floats in Lua; a round trip rejects them (and a float that happens to
    -- be integral, like -2^63 - 1 rounded).
    if #s <= 18 then return tonumber(s) end
    local n = math.tointeger(tonumber(s))
    if n == nil or tostring(n) ~= s then return nil end
    return n
end

-- An expiry argument of SET, SETEX, GETEX, LOCK.* (kind "ex", "px", "exat"
-- or "pxat"; text as sent; name: the command, for the error): the TTL in
-- ms, or nil and the absolute time in unix ms; or nil, nil and the error.
function U.parse_expire(kind, text, name)
    local n = U.to_int(text)
    if not n then return nil, nil, E.NOT_INTEGER end
    local seconds = kind == "ex" or kind == "exat"
    if n <= 0 or (seconds and n > math.maxinteger // 1000) then
        return nil, nil, E.invalid_expire(name)
    end
    if seconds then n = n * 1000 end
    if kind == "exat" or kind == "pxat" then return nil, n end
    if n > math.maxinteger - math.floor(host.wall()) then
        return nil, nil, E.invalid_expire(name)
    end
    return n
end

-- a + b, or nil when it would leave the signed 64-bit range (Redis's
-- incrDecrCommand check).
function U.add_checked(a, b)
    if (b < 0 and a < 0 and b < math.mininteger - a) or
       (b > 0 and a > 0 and b > math.maxinteger - a) then
        return nil
    end
    return a + b
end

---------------------------------------------------------------------------
-- Numbers, as C's strtod reads them

-- A whole string in strtod's syntax (no surrounding spaces): the double,
-- and whether the conversion overflowed or underflowed (ERANGE); nil when
-- it is not a number.  NaN is returned as NaN.
function U.strtod_all(s)
    local sign, body = s:match("^([+-]?)(.*)$")
    local word = body:lower()
    if word == "inf" or word == "infinity" then
        return sign == "-" and -math.huge or math.huge, false
    end
    if word == "nan" or word:match("^nan%([%w_]*%)$") then return 0 / 0, false end
    local v, mantissa
    if body:match("^0[xX]") then
        local m, e = body:match("^0[xX](%x*%.?%x*)([pP]?[+-]?%d*)$")
        if not m or not m:find("%x") or (e ~= "" and not e:match("^[pP][+-]?%d+$")) then return nil end
        v = tonumber(sign .. "0x" .. m .. (e ~= "" and e or "p0"))
        mantissa = m:gsub("[0.]", "")
    else
        local m, e = body:match("^(%d*%.?%d*)([eE]?[+-]?%d*)$")
        if not m or not m:find("%d") or (e ~= "" and not e:match("^[eE][+-]?%d+$")) then return nil end
        v = tonumber(sign .. m .. e)
        mantissa = m:gsub("[0.]", "")
    end
    if v == nil then return nil end
    v = v + 0.0
    local erange = (v == math.huge or v == -math.huge) or (v == 0 and mantissa ~= "")
    return v, erange
end

-- Redis's getDoubleFromObject (and string2ld): the whole argument, no
-- spaces, no NaN, no overflow or underflow to zero.
function U.to_double(s)
    if #s == 0 or s:find("^%s") or s:find("\0", 1, true) then return nil end
    local v, erange = U.strtod_all(s)
    if v == nil or v ~= v then return nil end
    if erange and (v == math.huge or v == -math.huge or v == 0) then return nil end
    return v
end

-- A finite double as INCRBYFLOAT and HINCRBYFLOAT write it (Redis's
-- ld2string, human form: fixed point, at most 17 decimals, no trailing
-- zeros).  Redis adds in long double; in double precision a sum such as
-- 0.1 + 0.2 lands an ulp or two off the decimal Redis prints, so the
-- shortest of 15 digits is taken when it is that close, else 17.
function U.human_double(v)
    if v == math.floor(v) and math.abs(v) < 1e17 then
        return v == 0 and "0" or ("%.0f"):format(v)
    end
    local s = ("%.15g"):format(v)
    if math.abs(tonumber(s) - v) > math.abs(v) * 2 ^ -51 then s = ("%.17g"):format(v) end
    local mant, exp = s:match("^(.-)e([+-]%d+)$")
    if mant then
        local decimals = #(mant:match("%.(%d+)$") or "") - tonumber(exp)
        s = ("%." .. math.min(17, math.max(0, decimals)) .. "f"):format(tonumber(s))
        if s:find(".", 1, true) then s = s:gsub("0+$", ""):gsub("%.$", "") end
    end
    if s == "-0" then s = "0" end
    return s
end

-- Redis's stringmatchlen (case sensitive): '*', '?', '[...]' with '^'
-- negation and 'a-z' ranges, '\' escapes.  Byte-wise; beyond the end of the
-- pattern reads as NUL, as the C code's terminator does.
local function match(p, pi, s, si, skip, nesting)
    if nesting > 1000 then return false end
    local plen, slen = #p, #s
    local function pb(i) return i <= plen and p:byte(i) or 0 end
    while pi <= plen and si <= slen do
        local c = p:byte(pi)
        if c == 42 then -- '*'
            while pi < plen and p:byte(pi + 1) == 42 do pi = pi + 1 end
            if pi == plen then return true end
            while si <= slen do
                if match(p, pi + 1, s, si, skip, nesting + 1) then return true end
                if skip.v then return false end
                si = si + 1
            end
            skip.v = true
            return false
        elseif c == 63 then -- '?'
            si = si + 1
        elseif c == 91 then -- '['
            pi = pi + 1
            local negate = pb(pi) == 94 -- '^'
            if negate then pi = pi + 1 end
            local matched = false
            local sc = s:byte(si)
            while true do
                local rest = plen - pi + 1
                if pb(pi) == 92 and rest >= 2 then -- '\'
                    pi = pi + 1
                    if pb(pi) == sc then matched = true end
                elseif pb(pi) == 93 then -- ']'
                    break
                elseif rest <= 0 then
                    pi = pi - 1
                    break
                elseif rest >= 3 and pb(pi + 1) == 45 then -- 'a-z'
                    local lo, hi = pb(pi), pb(pi + 2)
                    if lo > hi then lo, hi = hi, lo end
                    pi = pi + 2
                    if sc >= lo and sc <= hi then matched = true end
                elseif pb(pi) == sc then
                    matched = true
                end
                pi = pi + 1
            end
            if negate then matched = not matched end
            if not matched then return false end
            si = si + 1
        else
            if c == 92 and plen - pi + 1 >= 2 then -- '\'
                pi = pi + 1
                c = p:byte(pi)
            end
            if c ~= s:byte(si) then return false end
            si = si + 1
        end
        pi = pi + 1
        if si > slen then
            while pb(pi) == 42 do pi = pi + 1 end
            break
        end
    end
    return pi > plen and si > slen
end

function U.glob(pattern, s)
    return match(pattern, 1, s, 1, { v = false }, 0)
end

-- Case-insensitive comparison of an argument with an ASCII keyword.
function U.is(arg, word)
    return #arg == #word and arg:lower() == word
end

-- Whether ZooKeeper sequence number a (a sequential node's suffix) comes
-- before b.  The counter is a signed 32-bit int that wraps (2147483647,
-- then -2147483648) under a parent never left empty, so two live children
-- (never 2^31 changes apart) compare by their distance modulo 2^32.
function U.seq_before(a, b) return a ~= b and (b - a) % 4294967296 < 2147483648 end

-- How many entries table t holds (any keys).
function U.count(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
end

-- The count of SRANDMEMBER, HRANDFIELD (and ZRANDMEMBER): Redis's
-- getRangeLongFromObjectOrReply over -LONG_MAX..LONG_MAX.  A negative
-- count asks for that many picks with repetition; beyond RANDOM_MAX picks
-- (Redis would build the reply until memory runs out) it is refused as out
-- of range.  Returns the count, or nil and the error text.
U.RANDOM_MAX = E.RANDOM_MAX

function U.random_count(text)
    local n = U.to_int(text)
    if not n then return nil, E.NOT_INTEGER end
    if n == math.mininteger then return nil, E.LONG_RANGE end
    if n < -U.RANDOM_MAX then return nil, E.OUT_OF_RANGE end
    return n
end

-- n picks among `size` entries (n > 0: distinct entries, at most #list, in a
-- random order; n < 0: -n picks with repetition).  Returns the picked
-- indexes.
function U.random_picks(size, n)
    local out = {}
    if n < 0 then
        for i = 1, -n do out[i] = math.random(size) end
        return out
    end
    for i = 1, size do out[i] = i end
    for i = size, 2, -1 do
        local j = math.random(i)
        out[i], out[j] = out[j], out[i]
    end
    if n < size then
        for i = size, n + 1, -1 do out[i] = nil end
    end
    return out
end

-- A command table entry for a command whose one key is its first argument
-- (the shape cmd_*.lua export; see zkresp.lua's command table).
function U.key_command(fn, arity, flags)
    return { fn = fn, arity = arity, flags = flags, first_key = 1, last_key = 1, step = 1 }
end

-- A string's bytes in lower-case hex (nonces, instance ids).
local HEX = {}
for b = 0, 255 do HEX[string.char(b)] = string.format("%02x", b) end

function U.hex(s) return (s:gsub(".", HEX)) end

return U
