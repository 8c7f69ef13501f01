-- lua51_errors.lua — Lua 5.4's runtime error messages in Lua 5.1's words.
--
-- Redis runs client scripts under Lua 5.1, and clients (and their logs)
-- see its messages; zkresp runs them under Lua 5.4.  rewrite(msg, line)
-- turns the 5.4 forms into the 5.1 ones:
--
--   attempt to concatenate a nil value (local 'x')
--     -> attempt to concatenate local 'x' (a nil value)
--   attempt to index a nil value (field 'integer index')
--     -> attempt to index field '?' (a nil value)
--   attempt to call a string value (constant 'x')   (5.1 names no constant,
--     -> attempt to call a string value              for iterator, metamethod)
--   attempt to add a 'string' with a 'number'       (5.4's string coercion)
--     -> attempt to perform arithmetic on a string value
--   bad 'for' limit (number expected, got string)
--     -> 'for' limit must be a number
--
-- and, given the script's line, a position in one of the system's own
-- files (an error raised by a stock function that a system wrapper
-- called) becomes that line of the script, as Redis's C functions report
-- it.  Any other text is returned as it is.

local L51 = {}

-- The kinds of name Lua 5.1 puts in its messages; 5.4's others
-- ("constant", "for iterator", "metamethod") it does not know.
local KINDS = { global = true, ["local"] = true, method = true, upvalue = true, field = true }

local function named(op, ty, kind, name)
    if not KINDS[kind] then return "attempt to " .. op .. " a " .. ty .. " value" end
    if name == "integer index" then name = "?" end
    return "attempt to " .. op .. " " .. kind .. " '" .. name .. "' (a " .. ty .. " value)"
end

-- 5.4's string arithmetic ("attempt to add a 'string' with a 'number'"):
-- 5.1 names the first operand that is no number.
local function arith(_, t1, t2)
    local ty = t1 ~= "number" and t1 or t2
    return "attempt to perform arithmetic on a " .. ty .. " value"
end

-- The directory the system's modules are loaded from, as messages show it.
local SYSTEM = debug.getinfo(1, "S").short_src:match("^(.*/)") or ""

-- (A message longer than REWRITE_MAX is a script's own text, not one of
-- Lua's: left as it is, as the rewriting may run with no step budget.)
local REWRITE_MAX = 4096

function L51.rewrite(msg, line)
    if type(msg) ~= "string" or #msg > REWRITE_MAX then return msg end
    if line and SYSTEM ~= "" and msg:sub(1, #SYSTEM) == SYSTEM then
        msg = msg:gsub("^[^:]*:%d+: ", "user_script:" .. line .. ": ", 1)
    end
    msg = msg:gsub("attempt to ([%a ]-) a (%a+) value %(([%a ]+) '([^']*)'%)", named)
    msg = msg:gsub("attempt to (%a+) a '(%a+)' with a '(%a+)'", arith)
    msg = msg:gsub("bad 'for' ([%a ]+) %(number expected, got %a+%)", "'for' %1 must be a number")
    return msg
end

return L51
