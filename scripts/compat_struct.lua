-- compat_struct.lua — the `struct` library Redis scripts have (Roberto
-- Ierusalimschy's struct for Lua 5.1, as Redis 7 embeds it), written over
-- Lua 5.4 integers: struct.pack(fmt, ...), struct.unpack(fmt, s [, init]),
-- struct.size(fmt).  The format, read left to right:
--
--   > <          big / little endian (the machine's, little, at first)
--   ![n]         alignment n, a power of 2 (no n: 8; at first 1: none)
--   x            a zero byte of padding
--   b B h H      signed / unsigned char (1 byte), short (2)
--   l L T        signed / unsigned long, size_t (8)
--   i[n] I[n]    signed / unsigned integer of n bytes (no n: 4)
--   f d          float (4), double (8)
--   s            a zero-terminated string
--   c[n]         n chars (no n: 1); packing, c0 is the whole string;
--                unpacking, c0 is as many chars as the number read just
--                before says, and takes that number's place
--   (space)      ignored
--
-- As the C library does, an integer is cut to its size (a cast), a string
-- too short for its cN is an error, and unpack answers the values then
-- the position after them.

local S = {}

local SIZES = { b = 1, B = 1, h = 2, H = 2, l = 8, L = 8, T = 8, i = 4, I = 4, f = 4, d = 8, x = 1 }
local INTS = { b = true, B = true, h = true, H = true, l = true, L = true, T = true, i = true, I = true }
local MAXALIGN, MAXINTSIZE = 8, 32

local function argerror(n, fname, msg)
    error("bad argument #" .. n .. " to '" .. fname .. "' (" .. msg .. ")", 3)
end

-- A format being read: its text, where it stands, endianness, alignment.
local function reader(fmt, fname)
    if type(fmt) ~= "string" and type(fmt) ~= "number" then
        argerror(1, fname, "string expected, got " .. (fmt == nil and "no value" or type(fmt)))
    end
    return { fmt = tostring(fmt), at = 1, little = true, align = 1, fname = fname }
end

local function number_at(r, default)
    local digits = r.fmt:match("^%d+", r.at)
    if not digits then return default end
    r.at = r.at + #digits
    return tonumber(digits)
end

-- The next option and its size, or nil at the end.
local function next_option(r)
    if r.at > #r.fmt then return nil end
    local opt = r.fmt:sub(r.at, r.at)
    r.at = r.at + 1
    if opt == "c" then return opt, number_at(r, 1) end
    if opt == "i" or opt == "I" then
        local n = number_at(r, 4)
        if n > MAXINTSIZE then
            error(string.format("integral size %d is larger than limit of %d", n, MAXINTSIZE), 3)
        end
        return opt, n
    end
    return opt, SIZES[opt] or 0
end

-- The options that set how the rest is read (and the invalid ones).
local function control(r, opt)
    if opt == " " then return end
    if opt == ">" then r.little = false return end
    if opt == "<" then r.little = true return end
    if opt == "!" then
        local a = number_at(r, MAXALIGN)
        if a & (a - 1) ~= 0 then error(string.format("alignment %d is not a power of 2", a), 3) end
        r.align = a
        return
    end
    argerror(1, r.fname, string.format("invalid format option '%s'", opt))
end

local function padding(r, len, opt, size)
    if size == 0 or opt == "c" then return 0 end
    if size > r.align then size = r.align end
    return (size - (len & (size - 1))) & (size - 1)
end

-- A Lua number as the C library's cast to an integer makes it (toward 0).
local function to_int(n)
    local i = math.tointeger(n)
    if i then return i end
    i = math.tointeger(n >= 0 and math.floor(n) or math.ceil(n))
    return i or 0 -- (out of range: undefined in C)
end

local function int_bytes(v, size, little)
    local b = {}
    for k = 0, size - 1 do b[k + 1] = k < 8 and (v >> (8 * k)) & 0xff or 0 end
    local s = string.char(table.unpack(b))
    return little and s or s:reverse()
end

local function bytes_int(s, signed, little)
    if not little then s = s:reverse() end
    local size, v = #s, 0
    for k = math.min(size, 8), 1, -1 do v = (v << 8) | s:byte(k) end
    if size < 8 and signed and v >= 1 << (8 * size - 1) then return v - (1 << (8 * size)) end
    if size >= 8 and not signed and v < 0 then return v + 2.0 ^ 64 end
    return v
end

function S.pack(fmt, ...)
    local r = reader(fmt, "pack")
    local out, len, arg = {}, 0, 1
    local args = table.pack(...)
    local nargs = args.n
    local function value(kind)
        local v = args[arg]
        if arg > nargs or (kind == "number" and tonumber(v) == nil) or
           (kind == "string" and type(v) ~= "string" and type(v) ~= "number") then
            argerror(arg + 1, "pack", kind .. " expected, got " .. (arg > nargs and "no value" or type(v)))
        end
        arg = arg + 1
        return kind == "number" and tonumber(v) or tostring(v)
    end
    while true do
        local opt, size = next_option(r)
        if not opt then break end
        local pad = padding(r, len, opt, size)
        if pad > 0 then out[#out + 1] = string.rep("\0", pad) len = len + pad end
        local piece
        if INTS[opt] then
            piece = int_bytes(to_int(value("number")), size, r.little)
        elseif opt == "x" then
            piece = "\0"
        elseif opt == "f" or opt == "d" then
            piece = string.pack((r.little and "<" or ">") .. opt, value("number"))
        elseif opt == "c" or opt == "s" then
            local s = value("string")
            if size == 0 then size = #s end
            if #s < size then argerror(arg + 1, "pack", "string too short") end -- (C's: one past)
            piece = s:sub(1, size) .. (opt == "s" and "\0" or "")
        else
            control(r, opt)
        end
        if piece then out[#out + 1] = piece len = len + #piece end
    end
    return table.concat(out)
end

function S.unpack(fmt, data, init)
    local r = reader(fmt, "unpack")
    if type(data) ~= "string" and type(data) ~= "number" then
        argerror(2, "unpack", "string expected, got " .. (data == nil and "no value" or type(data)))
    end
    data = tostring(data)
    local pos = (init and to_int(tonumber(init) or argerror(3, "unpack", "number expected")) or 1) - 1
    if pos < 0 or pos > #data then argerror(3, "unpack", "offset out of range") end
    local out, n = {}, 0
    while true do
        local opt, size = next_option(r)
        if not opt then break end
        pos = pos + padding(r, pos, opt, size)
        if size > #data - pos then argerror(2, "unpack", "data string too short") end
        if INTS[opt] then
            n = n + 1
            out[n] = bytes_int(data:sub(pos + 1, pos + size), opt:lower() == opt, r.little)
        elseif opt == "f" or opt == "d" then
            n = n + 1
            out[n] = string.unpack((r.little and "<" or ">") .. opt, data, pos + 1)
        elseif opt == "c" then
            if size == 0 then
                if n == 0 or type(out[n]) ~= "number" then error("format 'c0' needs a previous size", 2) end
                size = to_int(out[n])
                n = n - 1
                if size > #data - pos then argerror(2, "unpack", "data string too short") end
            end
            n = n + 1
            out[n] = data:sub(pos + 1, pos + size)
        elseif opt == "s" then
            local e = data:find("\0", pos + 1, true)
            if not e then error("unfinished string in data", 2) end
            size = e - pos
            n = n + 1
            out[n] = data:sub(pos + 1, e - 1)
        elseif opt ~= "x" then
            control(r, opt)
        end
        pos = pos + size
    end
    n = n + 1
    out[n] = pos + 1
    return table.unpack(out, 1, n)
end

function S.size(fmt)
    local r = reader(fmt, "size")
    local pos = 0
    while true do
        local opt, size = next_option(r)
        if not opt then break end
        pos = pos + padding(r, pos, opt, size)
        if opt == "s" then argerror(1, "size", "option 's' has no fixed size") end
        if opt == "c" and size == 0 then argerror(1, "size", "option 'c0' has no fixed size") end
        if not opt:match("%w") then control(r, opt) end
        pos = pos + size
    end
    return pos
end

return S
