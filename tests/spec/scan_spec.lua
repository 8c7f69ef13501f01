-- SCAN's cursor and walk (scan.lua), and the number helpers of INCRBYFLOAT
-- and the random picks (util.lua).

local S = require "world"

describe("scan", function()
    local N = S.module("scan")
    local U = S.module("util")

    it("reads cursors as Redis's parseScanCursorOrReply does", function()
        assert.equal(0, N.cursor("0"))
        assert.equal(0, N.cursor(""))
        assert.equal(5, N.cursor("+5"))
        assert.equal(-1, N.cursor("18446744073709551615"))
        assert.equal(-1, N.cursor("-1"))
        assert.equal(math.mininteger, N.cursor("9223372036854775808"))
        for _, bad in ipairs({ " 5", "x", "1.5", "18446744073709551616", "5 ", "0x10", "+", "-" }) do
            assert.is_nil(N.cursor(bad), bad)
        end
    end)

    it("walks every key present throughout exactly once while keys come and go", function()
        local present = {}
        for i = 1, 200 do present[i] = "k" .. i end
        local stays = {}
        for i = 51, 200 do stays["k" .. i] = true end
        local seen, cursor, calls = {}, 0, 0
        repeat
            local batch
            batch, cursor = N.step(present, cursor, 7)
            assert.is_true(#batch >= 1 or cursor == 0)
            for _, k in ipairs(batch) do seen[k] = (seen[k] or 0) + 1 end
            calls = calls + 1
            -- between calls: one key gone, two new
            table.remove(present, 1)
            present[#present + 1] = "new" .. calls .. "a"
            present[#present + 1] = "new" .. calls .. "b"
        until cursor == 0
        for k in pairs(stays) do assert.equal(1, seen[k], k) end
        for _, n in pairs(seen) do assert.equal(1, n) end
        assert.is_true(calls >= 200 // 7)
    end)

    it("parses options as scanGenericCommand does", function()
        assert.same({ count = 10 }, N.options({ "scan", "0" }, 3, true))
        assert.same({ count = 3, match = "a*", type = "hash" },
                    N.options({ "scan", "0", "COUNT", "3", "match", "a*", "Type", "hash" }, 3, true))
        assert.same({ nil, "ERR syntax error" }, { N.options({ "hscan", "k", "0", "TYPE", "x" }, 4, false) })
        assert.same({ nil, "ERR syntax error" }, { N.options({ "scan", "0", "COUNT", "0" }, 3, true) })
        assert.same({ nil, "ERR syntax error" }, { N.options({ "scan", "0", "MATCH" }, 3, true) })
        assert.same({ nil, "ERR value is not an integer or out of range" },
                    { N.options({ "scan", "0", "COUNT", "x" }, 3, true) })
    end)

    it("writes INCRBYFLOAT's results as Redis's ld2string does", function()
        local cases = { { 0.1 + 0.2, "0.3" }, { 10.5 + 0.1, "10.6" }, { 1.5e-5, "0.000015" },
                        { 1e20, "100000000000000000000" }, { 3.0, "3" }, { -5.0, "-5" },
                        { 1e-18, "0" }, { -0.0, "0" }, { 5000.25, "5000.25" }, { -2.5e-3, "-0.0025" } }
        for _, c in ipairs(cases) do assert.equal(c[2], U.human_double(c[1])) end
        assert.equal(1.5, U.to_double("1.5"))
        assert.equal(math.huge, U.to_double("inf"))
        for _, bad in ipairs({ "", " 1", "1 ", "nan", "abc", "1e400" }) do
            assert.is_nil(U.to_double(bad), bad)
        end
    end)

    it("picks distinct entries for a positive count, any for a negative one", function()
        for _, n in ipairs({ 0, 1, 3, 5, 9, math.maxinteger }) do
            local picks = U.random_picks(5, n)
            assert.equal(math.min(n, 5), #picks)
            local seen = {}
            for _, i in ipairs(picks) do
                assert.is_true(i >= 1 and i <= 5 and not seen[i])
                seen[i] = true
            end
        end
        local picks = U.random_picks(2, -9)
        assert.equal(9, #picks)
        for _, i in ipairs(picks) do assert.is_true(i == 1 or i == 2) end
        assert.same({ nil, "ERR value is out of range" }, { U.random_count("-1000001") })
        assert.same({ nil, "ERR value is out of range, value must between -9223372036854775807 and " ..
                      "9223372036854775807" }, { U.random_count("-9223372036854775808") })
    end)
end)
