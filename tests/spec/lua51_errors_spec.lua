-- lua51_errors_spec.lua — the rewrite of Lua 5.4's runtime messages into
-- Lua 5.1's words (scripts/lua51_errors.lua), on the messages this very
-- VM raises.

package.path = "scripts/?.lua;" .. package.path
local L51 = require "lua51_errors"

-- The message Lua 5.4 raises for chunk `src`, rewritten.
local function words(src, line)
    local f = assert(load(src, "=user_script"))
    local ok, e = pcall(f)
    assert.is_false(ok)
    return L51.rewrite(e, line)
end

describe("lua51_errors.rewrite", function()
    it("puts the name before the value, as 5.1 does", function()
        assert.equal("user_script:1: attempt to concatenate local 'x' (a nil value)",
                     words("local x; return x .. 'a'"))
        assert.equal("user_script:1: attempt to perform arithmetic on upvalue 'u' (a nil value)",
                     words("local u; return (function() return u + 1 end)()"))
        assert.equal("user_script:1: attempt to index field 'a' (a nil value)",
                     words("local t = {} return t.a.b"))
        assert.equal("user_script:1: attempt to call method 'm' (a nil value)",
                     words("local t = {} t:m()"))
        assert.equal("user_script:1: attempt to call global 'print' (a nil value)",
                     words("print = nil print()"))
        assert.equal("user_script:1: attempt to get length of local 'b' (a boolean value)",
                     words("local b = true return #b"))
    end)

    it("names an integer index '?'", function()
        assert.equal("user_script:1: attempt to concatenate field '?' (a nil value)",
                     words("local t = {} return t[2] .. ':'"))
        assert.equal("user_script:1: attempt to index field '?' (a nil value)",
                     words("local t = {} local k = 'a' return t[k].x"))
    end)

    it("names no constant, for iterator or metamethod", function()
        assert.equal("user_script:1: attempt to call a string value", words("return ('x')()"))
        assert.equal("user_script:1: attempt to call a number value", words("for k in 5 do end"))
        assert.equal("user_script:1: attempt to call a number value",
                     words("return setmetatable({}, {__add = 5}) + 1"))
    end)

    it("words string arithmetic and 'for' loops as 5.1", function()
        assert.equal("user_script:1: attempt to perform arithmetic on a string value", words("return 'a' + 1"))
        assert.equal("user_script:1: attempt to perform arithmetic on a table value", words("return {} + 'a'"))
        assert.equal("user_script:1: 'for' limit must be a number", words("for i = 1, 'x' do end"))
        assert.equal("user_script:1: 'for' initial value must be a number", words("for i = {}, 1 do end"))
        assert.equal("user_script:1: 'for' step must be a number", words("for i = 1, 2, nil do end"))
    end)

    it("leaves what 5.1 words alike, and values that are no text", function()
        assert.equal("user_script:1: attempt to compare two table values", words("return {} < {}"))
        assert.equal("user_script:1: attempt to perform arithmetic on a table value", words("return -{}"))
        assert.equal("boom", L51.rewrite("boom"))
        local t = {}
        assert.equal(t, L51.rewrite(t))
        assert.equal(42, L51.rewrite(42))
    end)

    it("rewrites a 5.4 message inside a longer text", function()
        assert.equal("caught: x: attempt to index local 't' (a nil value)!",
                     L51.rewrite("caught: x: attempt to index a nil value (local 't')!"))
    end)

    it("puts a position in the system's own files at the script's line", function()
        local dir = debug.getinfo(L51.rewrite, "S").short_src:match("^(.*/)")
        assert.equal("user_script:7: bad argument #1 to 'rep' (string expected, got no value)",
                     L51.rewrite(dir .. "sandbox.lua:140: bad argument #1 to 'rep' (string expected, got no value)", 7))
        assert.equal("other.lua:3: x", L51.rewrite("other.lua:3: x", 7))
        assert.equal(dir .. "sandbox.lua:140: x", L51.rewrite(dir .. "sandbox.lua:140: x"))
    end)
end)
