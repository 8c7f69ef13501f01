-- compat_bit.lua — LuaBitOp's `bit` module (Redis scripts have it) over Lua
-- 5.4 integers: every result is a signed 32-bit integer, as in LuaBitOp.

local B = {}

local function tobit(x)
    x = math.tointeger(x) or math.floor(tonumber(x) or error("bad argument to bit function (number expected)", 3))
    x = x & 0xffffffff
    if x >= 0x80000000 then x = x - 0x100000000 end
    return x
end

B.tobit = function(x) return tobit(x) end
B.bnot = function(x) return tobit(~tobit(x)) end

local function fold(op)
    return function(x, ...)
        local r = tobit(x)
        for i = 1, select("#", ...) do r = op(r, tobit((select(i, ...)))) end
        return tobit(r)
    end
end
B.band = fold(function(a, b) return a & b end)
B.bor = fold(function(a, b) return a | b end)
B.bxor = fold(function(a, b) return a ~ b end)

B.lshift = function(x, n) return tobit((tobit(x) & 0xffffffff) << (tobit(n) & 31)) end
B.rshift = function(x, n) return tobit((tobit(x) & 0xffffffff) >> (tobit(n) & 31)) end
B.arshift = function(x, n) return tobit(tobit(x) >> (tobit(n) & 31) | (tobit(x) < 0 and ~(0xffffffff >> (tobit(n) & 31)) or 0)) end
B.rol = function(x, n)
    x, n = tobit(x) & 0xffffffff, tobit(n) & 31
    return tobit((x << n) | (x >> (32 - n)))
end
B.ror = function(x, n)
    x, n = tobit(x) & 0xffffffff, tobit(n) & 31
    return tobit((x >> n) | (x << (32 - n)))
end
B.bswap = function(x)
    x = tobit(x) & 0xffffffff
    return tobit(((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >> 8) & 0xff00) | (x >> 24))
end

-- tohex(x [, n]): n digits (default 8), upper case when n is negative.
B.tohex = function(x, n)
    n = n and tobit(n) or 8
    local fmt = "%0" .. math.min(math.abs(n), 8) .. (n < 0 and "X" or "x")
    local digits = math.min(math.abs(n), 8)
    local v = tobit(x) & ((1 << (4 * digits)) - 1)
    return string.format(fmt, v)
end

return B
