-- The policy's hooks for keys where a command goes wrong: a hook that
-- fails inside a script, a TTL hook's answer out of range, a TTL clamped
-- once, and the notifications of a commit or an expiry whose outcome was
-- not plain.

local S = require "world"
local OK = S.OK

local function world_with(src, n)
    local file = S.policy_file(src)
    local list = {}
    for i = 1, n or 1 do list[i] = { config = { policy = file } } end
    return S.world(list)
end

-- A policy recording every notification in _G.__events ("ev key").
local RECORDER = [[
    _G.__events = {}
    local function rec(ev) return function(key) _G.__events[#_G.__events + 1] = ev .. " " .. key end end
    return { on_acquire = rec("acquire"), on_release = rec("release"),
             on_expire = rec("expire"), on_lost = rec("lost") }
]]

describe("a hook that fails inside a script", function()
    it("fails the script even through redis.pcall, and commits nothing (key_path)", function()
        local W, a = world_with([[
            return { key_path = function(key) if key == "bad" then error("no path for bad") end end }
        ]])
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'a'); redis.pcall('set', 'bad', 'b'); return 1", "1", "good")
        assert.matches("^ERR policy", r.err)
        assert.is_nil(W:node(a:path("good")))
    end)

    it("fails the script even through redis.pcall, and commits nothing (ttl answering junk)", function()
        local W, a = world_with([[
            return { ttl = function(key, ms) if key == "bad" then return "junk" end return ms end }
        ]])
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'a'); redis.pcall('set', KEYS[2], 'b', 'PX', 1000); return 1",
                         "2", "good", "bad")
        assert.matches("^ERR policy", r.err)
        assert.is_nil(W:node(a:path("good")))
    end)
end)

describe("a TTL hook's answer", function()
    for _, v in ipairs({ "math.huge", "1e300", "2^63" }) do
        it("out of an integer's range (" .. v .. ") fails the command with -ERR policy, counted", function()
            local W, a = world_with([[
                return { ttl = function(key, ms) if key:sub(1, 4) == "big:" then return ]] .. v .. [[ end return ms end }
            ]])
            local H = a.require("hooks")
            local before = H.status.hook_errors
            assert.matches("^ERR policy", a:call("SET", "big:k", "v", "PX", "1000").err)
            assert.equal(before + 1, H.status.hook_errors)
            assert.is_nil(W:node(a:path("big:k")))
            assert.same(OK, a:call("SET", "k", "v", "PX", "1000"))
        end)
    end

    it("out of range from default_ttl fails the command too", function()
        local _, a = world_with([[
            return { default_ttl = function(key) if key:sub(1, 4) == "big:" then return math.huge end end }
        ]])
        assert.matches("^ERR policy", a:call("SET", "big:k", "v").err)
    end)

    it("clamps a script's write once, as a command's", function()
        local _, a = world_with([[
            _G.__calls = 0
            return { ttl = function(key, ms) _G.__calls = _G.__calls + 1 return ms // 2 end }
        ]])
        assert.same(OK, a:call("SET", "k1", "v", "PX", "10000"))
        local n0 = a.env.__calls
        assert.same(OK, a:call("EVAL", "return redis.call('set', KEYS[1], 'v', 'PX', 10000)", "1", "k2"))
        assert.equal(1, a.env.__calls - n0)
        local p2 = a:call("PTTL", "k2")
        assert.is_true(p2 > 4900 and p2 <= 5000, "PTTL " .. p2)
    end)
end)

describe("notifications", function()
    it("no on_acquire for the ephemeral key of a script whose commit landed under a session given up", function()
        local W, a = world_with(RECORDER)
        local t = a:start("EVAL", "redis.call('set', KEYS[1], 'v'); redis.call('set', KEYS[2], 'tok', 'PX', 30000); return 1",
                          "2", "plain", "lock")
        a:fail_next({ op = "multi", pass = true, latency = 300 })
        W:advance(100)
        local old = a:lose() -- the local lease ran out while the commit was on its way
        W:run_until(function() return t.done end)
        assert.same(S.UNAVAILABLE, t.result)
        W:expire_session(old)
        W:advance(100)
        assert.is_nil(W:node(a:path("lock")))
        for _, e in ipairs(a.env.__events) do assert.is_nil(e:match("^acquire lock")) end
    end)

    it("on_expire hears of an expiry whose delete's reply was lost", function()
        local W, a = world_with(RECORDER)
        assert.same(OK, a:call("SET", "k", "v", "NX", "PX", "1000"))
        a:fail_next({ op = "multi", when = "after" }) -- the expiry's {delete, check guard, set mark}
        W:advance(3000)
        assert.is_nil(W:node(a:path("k")))
        assert.same({ "acquire k", "expire k" }, a.env.__events)
    end)

    it("lock_delay: a lock whose expiry lost its reply is free at once on another sidecar", function()
        local W, a, b = S.world({ { config = { policy = S.example("lock_delay") } },
                                  { config = { policy = S.example("lock_delay") } } })
        assert.same(OK, a:call("SET", "k", "v", "NX", "PX", "1000"))
        W:advance(10)
        a:fail_next({ op = "multi", when = "after" })
        W:advance(3000)
        assert.is_nil(W:node(a:path("k")))
        assert.same(OK, b:call("SET", "k", "w", "NX", "PX", "1000"))
    end)
end)
