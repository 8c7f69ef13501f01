-- Redis's integer parsing and glob matcher (checked against redis-server).

local S = require "world"

describe("util", function()
    local U = S.module("util")

    it("parses integers like string2ll", function()
        assert.equal(0, U.to_int("0"))
        assert.equal(-5, U.to_int("-5"))
        assert.equal(math.maxinteger, U.to_int("9223372036854775807"))
        assert.equal(math.mininteger, U.to_int("-9223372036854775808"))
        for _, s in ipairs({ "30000", "-5", "999999999999999999", "-99999999999999999",
                             "1000000000000000000" }) do
            assert.equal("integer", math.type(U.to_int(s)), s)
            assert.equal(s, tostring(U.to_int(s)))
        end
        for _, bad in ipairs({ "", "-", "-0", "01", "+1", " 1", "1 ", "1.0", "1e3", "0x10",
                               "9223372036854775808", "-9223372036854775809",
                               "99999999999999999999", "abc" }) do
            assert.is_nil(U.to_int(bad), bad)
        end
    end)

    it("adds with Redis's overflow check", function()
        assert.equal(3, U.add_checked(1, 2))
        assert.is_nil(U.add_checked(math.maxinteger, 1))
        assert.is_nil(U.add_checked(math.mininteger, -1))
        assert.equal(-1, U.add_checked(math.maxinteger, math.mininteger))
    end)

    it("matches globs like stringmatchlen", function()
        local keys = { "hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "a[b", "a\\b", "x", "" }
        local function keys_matching(p)
            local out = {}
            for _, k in ipairs(keys) do if U.glob(p, k) then out[#out + 1] = k end end
            table.sort(out)
            return out
        end
        -- Expected lists are redis-server 7.0's KEYS answers on the same keys.
        assert.same({ "h*llo", "hallo", "hello", "hxllo" }, keys_matching("h?llo"))
        assert.same({ "h*llo", "hallo", "heeeello", "hello", "hllo", "hxllo" }, keys_matching("h*llo"))
        assert.same({ "hallo", "hello" }, keys_matching("h[ae]llo"))
        assert.same({ "h*llo", "hallo", "hxllo" }, keys_matching("h[^e]llo"))
        assert.same({ "hallo" }, keys_matching("h[a-b]llo"))
        assert.same({ "hallo" }, keys_matching("h[b-a]llo"))
        assert.same({ "h*llo" }, keys_matching("h\\*llo"))
        assert.same({}, keys_matching("a[b"))
        assert.same({ "a[b" }, keys_matching("a\\[b"))
        assert.same({ "a[b", "a\\b" }, keys_matching("a?b"))
        assert.equal(9, #keys_matching("**"))  -- not the empty key
        assert.is_true(U.glob("*", "abc"))
        assert.is_false(U.glob("a*c", "abd"))
        assert.is_true(U.glob("a*b*c", "aXbYbZc"))
        assert.is_false(U.glob(string.rep("*a", 40) .. "b", string.rep("a", 60)))
    end)

    it("forgets a reused coroutine's per-command state, and only its", function()
        local a, b = U.per_command(), U.per_command()
        local co1, co2 = coroutine.create(function() end), coroutine.create(function() end)
        a[co1], b[co1], a[co2] = "client 1", "path 1", "client 2"
        U.new_command(co1)
        assert.is_nil(a[co1])
        assert.is_nil(b[co1])
        assert.equal("client 2", a[co2])
    end)

    it("compacts per-command state without losing a live coroutine's", function()
        local a = U.per_command()
        local live = coroutine.create(function() end)
        for i = 1, 2000 do a[coroutine.create(function() end)] = i end
        a[live] = "live"
        U.compact_per_command()
        assert.equal("live", a[live])
        a[live] = nil
        assert.is_nil(a[live])
        local co = coroutine.create(function() end)
        a[co] = 1
        U.new_command(co)
        assert.is_nil(a[co])
    end)
end)
