-- lua_cjson.lua — the `cjson` table client scripts see: Debian's lua-cjson
-- 2.1 (the C module, through package.cpath; scripts themselves never reach
-- require), configured as Redis 7 configures its copy of the same library.
--
-- What differs from calling the C module directly is Lua 5.4's own: JSON
-- numbers decode as floats there, and a float that holds an integer prints
-- as "12.0" where Redis's Lua 5.1 prints "12".  decode turns such floats
-- (below 1e14, the numbers 5.1's "%.14g" prints without an exponent) into
-- integers, and keeps its errors at the script's line, as Redis does.

local cjson = require "cjson"

local M = {}

-- Redis's settings (its lua-cjson 2.1 defaults, which Debian's share).
local function configure(c)
    c.encode_sparse_array(false, 2, 10)
    c.encode_max_depth(1000)
    c.decode_max_depth(1000)
    c.encode_number_precision(14)
    c.encode_keep_buffer(true)
    c.encode_invalid_numbers(false)
    c.decode_invalid_numbers(true)
    return c
end

local function integral(x)
    if math.type(x) == "float" and x == math.floor(x) and x > -1e14 and x < 1e14
       and (x ~= 0 or 1 / x > 0) then
        return math.tointeger(x)
    end
    return x
end

local function integers(v)
    if type(v) == "number" then return integral(v) end
    if type(v) == "table" then
        for k, x in next, v do
            if type(x) == "number" then
                v[k] = integral(x)
            elseif type(x) == "table" then
                integers(x)
            end
        end
    end
    return v
end

-- The message of an error the C function raised at `named`'s line (so
-- that it names the function 'decode'); the caller raises it again at the
-- script's line.
local HERE = debug.getinfo(1, "S").short_src

local function at_script(ok, v)
    if ok then return v end
    if type(v) ~= "string" then error(v, 0) end -- a kill, memory
    local at = v:find(": ", 1, true)
    if v:sub(1, #HERE) == HERE and at then v = v:sub(at + 2) end
    error(v, 3)
end

local function decoder(c)
    local function named(...)
        local v = c.decode(...)
        return v
    end
    return function(...)
        return integers(at_script(pcall(named, ...)))
    end
end

-- The settings: a script may read them (called without arguments, as
-- Redis's scripts may), never change them.  The instance is every
-- client's, and a depth past Redis's 1000 lets decode and encode recurse
-- in C until the process's stack runs out.
local SETTINGS = { "encode_sparse_array", "encode_max_depth", "decode_max_depth",
                   "encode_number_precision", "encode_keep_buffer",
                   "encode_invalid_numbers", "decode_invalid_numbers" }

local function reader(c, name)
    return function(...)
        if select("#", ...) > 0 then
            error("cjson." .. name .. ": zkresp's cjson settings are Redis's and cannot be changed", 2)
        end
        return c[name]()
    end
end

-- encode builds its text with the C library's own malloc, which the
-- script's memory cap does not see: a reply of 2,000 copies of a 1 MB
-- string would take 2 GB of C memory.  So the text's size is reckoned
-- first, in Lua (under the script's time cap: a table that holds itself
-- twice, 40 levels deep, is walked as long as encode would), and a text
-- larger than the cap (M.limit(), bytes) kills the script as its memory
-- would.  The reckoning is what encode writes: strings with their escapes,
-- numbers at most 32 bytes, keys, separators.
local ESCAPED = '[%c"\\/\127]'

local function text_size(v, depth, left)
    local tv = type(v)
    if tv == "string" then
        local _, escapes = v:gsub(ESCAPED, "")
        return left - (#v + 2 + 5 * escapes)
    elseif tv ~= "table" then
        return left - 32
    end
    if depth > 1000 then return left end -- encode refuses it (max depth)
    left = left - 2
    for k, x in next, v do
        if type(k) == "string" then left = text_size(k, depth + 1, left) - 1 end
        left = text_size(x, depth + 1, left) - 1
        if left < 0 then return left end
    end
    return left
end

local function encoder(c)
    local function named(...)
        local v = c.encode(...)
        return v
    end
    return function(...)
        local limit = M.limit and M.limit()
        if limit and select("#", ...) > 0 and text_size((...), 0, limit) < 0 then host.kill("memory") end
        local v = at_script(pcall(named, ...))
        return v
    end
end

-- A new table of cjson functions over the C instance c (configured).
local function wrap(c)
    local t = {}
    for k, v in pairs(c) do t[k] = v end
    t.decode = decoder(c)
    t.encode = encoder(c)
    for _, name in ipairs(SETTINGS) do t[name] = reader(c, name) end
    -- Another instance would differ in nothing a script can see (the
    -- settings cannot be changed) but its C buffer: encode keeps it at the
    -- size of its largest text (keep_buffer), out of the memory cap's sight,
    -- so that a script keeping many instances, each encoding a text just
    -- under the cap, would hold gigabytes.  So every `new` shares c.
    t.new = function() return wrap(c) end
    return t
end

-- The table a script environment gets (its null is lua-cjson's:
-- a NULL light userdata, which a script's reply turns into a null).
function M.new()
    return wrap(configure(cjson.new()))
end

return M
