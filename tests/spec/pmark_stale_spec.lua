-- After our own bump of a persistent mark, the watch that told us of its
-- moves has fired (our bump fired it).  G.applied kept the version its
-- answer gave with no watch, so another sidecar's later bumps went
-- unheard; and a failed multi dropped only the one mark whose check
-- failed (ZooKeeper flags a single op; the rest answer OK or
-- RUNTIMEINCONSISTENCY).  A DEL of N keys whose N marks went stale that
-- way cost two attempts per mark (fail, learn) and gave up at
-- T.MAX_ATTEMPTS: "too many conflicting writes" with nobody writing.  Now
-- a failed mark drops every mark of its multi: one failed multi, one
-- read of them all, one that goes.
local S = require "world"
local OK = S.OK

describe("a DEL of many persistent keys whose marks went stale unheard", function()
    it("deletes them all (nobody writes meanwhile)", function()
        local W, a, b = S.warm_world(2)
        local N = 30
        local keys = {}
        for i = 1, N do keys[i] = "k" .. i end
        local G = a.require("guard")
        local marks = {}
        for _, k in ipairs(keys) do marks[G.pmark_path(a:path(k))] = true end
        local nmarks = 0
        for _ in pairs(marks) do nmarks = nmarks + 1 end
        assert.is_true(nmarks >= 28) -- (distinct marks, nearly all)
        -- a sets and deletes them: its own bumps teach it the marks, no watch
        -- left (the watch events of its bump come before the multi's answer,
        -- as ZooKeeper sends them)
        for _, k in ipairs(keys) do assert.same(OK, a:call("SET", k, "v")) end
        a:fail_next({ op = "multi", pass = true, hook = function() W:settle() end })
        assert.equal(N, a:call("DEL", table.unpack(keys)))
        a.faults = {}
        -- made again through a, deleted through b (b bumps the marks: a hears nothing)
        for _, k in ipairs(keys) do assert.same(OK, a:call("SET", k, "v")) end
        assert.equal(N, b:call("DEL", table.unpack(keys)))
        -- made again, then a DEL through a, alone
        for _, k in ipairs(keys) do assert.same(OK, a:call("SET", k, "v")) end
        W:advance(100)
        local first = #W.ops
        local r = a:call("DEL", table.unpack(keys))
        local multis = 0
        for i = first + 1, #W.ops do
            if W.ops[i].sc == a.id and W.ops[i].kind == "multi" then multis = multis + 1 end
        end
        assert.equal(N, r)
        assert.is_true(multis <= 3, multis .. " multis")
    end)
end)
