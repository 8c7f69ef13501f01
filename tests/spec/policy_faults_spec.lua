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

-- (the recorder's _G.__infos keeps each notification's info too)
local C = {}
function C.with_example(name) return { config = { policy = S.example(name) } } end
function C.recorder()
    return S.policy_file([[
        _G.__events, _G.__infos = {}, {}
        local function rec(ev) return function(key, info)
            _G.__events[#_G.__events + 1] = ev .. " " .. key .. (info.reason and (" " .. info.reason) or "")
            _G.__infos[#_G.__infos + 1] = { ev = ev, key = key, info = info }
        end end
        return { on_acquire = rec("acquire"), on_release = rec("release"),
                 on_expire = rec("expire"), on_lost = rec("lost") }
    ]])
end
function C.last(sc, ev)
    for i = #sc.env.__infos, 1, -1 do
        local r = sc.env.__infos[i]
        if r.ev == ev then return r end
    end
end
local null = S.null

local REDISSON_LOCK = [[
if (redis.call('exists', KEYS[1]) == 0) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);]]
local REDISSON_UNLOCK = [[
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0;
else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;]]
local PY_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


describe("a live key's node made again by a write (a new fencing token)", function()
    it("on_acquire hears of the new node made by overwriting another sidecar's key", function()
        local file = C.recorder()
        local W, a, b = S.world({ { config = { policy = file } }, { config = { policy = file } } })
        assert.same(OK, a:call("SET", "k", "v1", "NX", "PX", "30000"))
        local cz1 = W:node(a:path("k")).stat.czxid
        assert.same(OK, b:call("SET", "k", "v2", "PX", "30000"))
        W:advance(10)
        local n = W:node(a:path("k"))
        assert.equal(b.sid, n.stat.ephemeralOwner)
        assert.is_true(n.stat.czxid > cz1)
        assert.same({ "acquire k" }, b.env.__events)
    end)

    it("lock_delay: a key overwritten by another sidecar, then DELeted there, is free at once", function()
        local W, a, b, c = S.world({ C.with_example("lock_delay"), C.with_example("lock_delay"),
                                     C.with_example("lock_delay") })
        assert.same(OK, a:call("SET", "k", "v1", "NX", "PX", "30000"))
        W:advance(10)
        assert.same(OK, b:call("SET", "k", "v2", "PX", "30000"))
        W:advance(10)
        assert.equal(1, b:call("DEL", "k"))
        W:advance(500)
        assert.same(OK, c:call("SET", "k", "v3", "NX", "PX", "30000"))
    end)

    it("lock_delay: a lock made persistent (PERSIST), then DELeted, is free at once", function()
        local W, a, b = S.world({ C.with_example("lock_delay"), C.with_example("lock_delay") })
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        W:advance(50)
        assert.equal(1, a:call("PERSIST", "lock"))
        assert.equal(1, a:call("DEL", "lock"))
        W:advance(500)
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
    end)
end)

describe("a re-acquire over our own expired, renewed node", function()
    local W, a
    before_each(function()
        local file = C.recorder()
        W, a = S.world({ { config = { policy = file } } })
        assert.same(OK, a:call("SET", "k", "t1", "NX", "PX", "1000"))
        assert.equal(1, a:call("PEXPIRE", "k", "1000")) -- a renewal: version 1
        W:advance(950)
        -- a slow read (RELIABILITY 27): the re-acquire reads the node after its
        -- deadline, before the expiry (queued behind it on the key) deletes it
        a:fail_next({ op = "get", path = a:path("k"), pass = true, latency = 300 })
        assert.same(OK, a:call("SET", "k", "t2", "NX", "PX", "1000"))
        W:advance(10)
    end)

    it("on_acquire gets the new node's fencing token", function()
        local r = assert(C.last(a, "acquire"))
        assert.equal("t2", r.info.value)
        assert.equal(W:node(a:path("k")).stat.czxid, r.info.czxid)
    end)

    it("the old hold's end is told (on_expire) before the new acquire", function()
        assert.same({ "acquire k", "expire k", "acquire k" }, a.env.__events)
    end)
end)

describe("the notifications that already held (a review's checks)", function()
    it("on_acquire czxid: Redisson EVAL acquire and a SET NX whose create reply was lost", function()
        local file = C.recorder()
        local W, a = S.world({ { config = { policy = file } } })
        assert.equal(null, a:call("EVAL", REDISSON_LOCK, "1", "rl", "30000", "uuid:1"))
        W:advance(10)
        assert.equal(W:node(a:path("rl")).stat.czxid, C.last(a, "acquire").info.czxid)
        a:fail_next({ op = "create", when = "after" })
        assert.same(OK, a:call("SET", "k", "t1", "NX", "PX", "30000"))
        W:advance(10)
        assert.equal(W:node(a:path("k")).stat.czxid, C.last(a, "acquire").info.czxid)
    end)

    it("session loss fires on_lost once per key", function()
        local file = C.recorder()
        local W, a = S.world({ { config = { policy = file } } })
        assert.same(OK, a:call("SET", "l1", "t", "NX", "PX", "30000"))
        a:lose({ expire_old = true })
        W:advance(100)
        assert.same({ "acquire l1", "lost l1 session" }, a.env.__events)
    end)

    it("PEXPIRE 0, RENAME and FLUSHDB fire on_release / on_acquire as expected", function()
        local file = C.recorder()
        local W, a = S.world({ { config = { policy = file } } })
        a:call("SET", "x", "t", "PX", "30000")
        a:call("PEXPIRE", "x", "0")
        a:call("SET", "y", "t", "PX", "30000")
        a:call("RENAME", "y", "z")
        a:call("FLUSHDB")
        W:advance(100)
        assert.same({ "acquire x", "release x", "acquire y", "acquire z", "release y", "release z" }, a.env.__events)
    end)

    it("lock_delay: DEL and redis-py's release script with lost replies leave the lock free at once", function()
        local W, a, b = S.world({ C.with_example("lock_delay"), C.with_example("lock_delay") })
        assert.same(OK, a:call("SET", "l", "t", "NX", "PX", "30000"))
        W:advance(50)
        a:fail_next({ op = "delete", when = "after" })
        assert.equal(1, a:call("DEL", "l"))
        W:advance(500)
        assert.same(OK, b:call("SET", "l", "t2", "NX", "PX", "30000"))
        W:advance(50)
        b:fail_next({ op = "multi", when = "after" })
        assert.equal(1, b:call("EVAL", PY_RELEASE, "1", "l", "t2"))
        W:advance(500)
        assert.same(OK, a:call("SET", "l", "t3", "NX", "PX", "30000"))
    end)

    it("lock_delay: Redisson lock/unlock across sidecars is free at once; a vanished holder is held back", function()
        local W, a, b = S.world({ C.with_example("lock_delay"), C.with_example("lock_delay") })
        assert.equal(null, a:call("EVAL", REDISSON_LOCK, "1", "rl", "30000", "u:1"))
        W:advance(50)
        assert.equal(1, a:call("EVAL", REDISSON_UNLOCK, "2", "rl", "redisson_lock__channel:{rl}", "0", "30000", "u:1"))
        W:advance(300)
        assert.equal(null, b:call("EVAL", REDISSON_LOCK, "1", "rl", "30000", "u:2"))
        W:advance(50)
        b:lose({ expire_old = true })
        local r = a:call("EVAL", REDISSON_LOCK, "1", "rl", "30000", "u:1")
        assert.matches("^TRYAGAIN lock%-delay", r.err) -- (Redisson sees an error, not a pttl)
    end)

    it("failing lifetime / before_acquire / key_path (redis.call) in a script: ERR policy, nothing committed", function()
        local file = S.policy_file([[
            return { lifetime = function(key, t, ms) if key == "bad" then error("x") end return ms and "ephemeral" or "persistent" end,
                     before_acquire = function(key) if key == "bad2" then error("y") end return true end,
                     key_path = function(key) if key == "bad3" then error("z") end end }
        ]])
        local W, a = S.world({ { config = { policy = file } } })
        for _, bad in ipairs({ "bad", "bad2" }) do
            local r = a:call("EVAL", "redis.call('set', KEYS[1], 'a'); redis.pcall('set', KEYS[2], 'b'); return 1", "2", "good", bad)
            assert.matches("^ERR policy", r.err)
            assert.is_nil(W:node(a:path("good")))
            r = a:call("MSET", "good", "1", bad, "2")
            assert.matches("^ERR policy", r.err)
            assert.is_nil(W:node(a:path("good")))
        end
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'a'); redis.call('set', 'bad3', 'b'); return 1", "1", "good")
        assert.matches("ERR policy", r.err)
        assert.is_nil(W:node(a:path("good")))
        assert.same(OK, a:call("SET", "good", "1"))
    end)
end)

describe("lock_delay's marker", function()
    it("of a lock released through another sidecar before the marker landed does not hold the next one back", function()
        local W, a, b, c = S.world({ C.with_example("lock_delay"), C.with_example("lock_delay"),
                                     C.with_example("lock_delay") })
        assert.same(OK, a:call("SET", "w", "t", "NX", "PX", "30000")) -- (makes <root>/ld)
        W:advance(50)
        assert.equal(1, a:call("DEL", "w"))
        W:advance(50)
        local marker = "/zkresp/ld/" .. a.host.key_encode(a:path("lock"))
        a:fail_next({ op = "create", path = marker, pass = true, latency = 200 }) -- a slow reply
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        assert.equal(1, b:call("DEL", "lock")) -- released, cleanly, through b
        W:advance(1000)
        assert.same(OK, c:call("SET", "lock", "t2", "NX", "PX", "30000"))
    end)
end)

-- lock_delay's marker read through a lagging server (a session moved to a
-- follower that has not applied the vanished holder's acquire and marker):
-- no marker there is no news, so it syncs before it lets the next in.
local function with_example(name) return { config = { policy = S.example(name) } } end

describe("lock_delay through a lagging server", function()
    it("holds back a key lock whose holder vanished", function()
        local W, a, b = S.world({ with_example("lock_delay"), with_example("lock_delay") })
        -- (one earlier acquire and release: <root>/ld exists, empty)
        assert.same(OK, a:call("SET", "lock", "t0", "NX", "PX", "30000"))
        W:advance(10)
        assert.equal(1, a:call("DELIFEQ", "lock", "t0"))
        W:advance(10)
        S.lag(W, b, "/zkresp", true) -- b's server applies nothing more for now
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        W:advance(10)
        assert.equal(1, W:node("/zkresp/ld").stat.numChildren) -- the marker
        a:lose({ expire_old = true }) -- the holder's session ends: the node goes
        assert.equal(null, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
    end)

    it("holds back a native lock whose holder vanished", function()
        local W, a, b = S.world({ with_example("lock_delay"), with_example("lock_delay") })
        assert.is_number(a:call("LOCK.ACQUIRE", "nl", "o0", "PX", "30000"))
        W:advance(10)
        assert.equal(1, a:call("LOCK.RELEASE", "nl", "o0"))
        W:advance(10)
        S.lag(W, b, "/zkresp", true)
        assert.is_number(a:call("LOCK.ACQUIRE", "nl", "o1", "PX", "30000"))
        W:advance(10)
        a:lose({ expire_old = true })
        assert.equal(null, b:call("LOCK.ACQUIRE", "nl", "o2", "WAIT", "0"))
    end)
end)
