-- delete_parts (keyspace.lua) cuts a DEL into multis that leave
-- K.DELETE_RESERVE bytes for the guard ops: our guard's check and a bump of
-- each of our marks.  A bump writing a whole 16-byte nonce (963b841) took
-- 64 bumps past 4096 bytes, so a DEL of many of our own keys planned as one
-- multi was cut in halves (more multis, less atomic than planned); our own
-- bumps write a short token (Z.own_nonce).

local S = require "world"
local OK = S.OK

describe("a DEL of many of our own keys near the request limit", function()
    it("goes out as the multis delete_parts planned (its guard ops fit the reserve)", function()
        local W, a = S.world({ { config = { zk_max_request = 12000 } } })
        a:call("SET", "warmup", "x")
        local args = { "DEL" }
        for i = 1, 255 do
            assert.same(OK, a:call("SET", "k" .. i, "v", "PX", "600000"))
            args[#args + 1] = "k" .. i
        end
        local G = a.require("guard")
        local plain, planned = G.ops, 0
        G.ops = function(...) planned = planned + 1 return plain(...) end
        local before = #W.ops
        assert.equal(255, a:call(table.unpack(args)))
        G.ops = plain
        local sent = 0
        for i = before + 1, #W.ops do if W.ops[i].kind == "multi" then sent = sent + 1 end end
        assert.equal(sent, planned) -- (a part cut in halves plans once more than it sends)
    end)
end)
