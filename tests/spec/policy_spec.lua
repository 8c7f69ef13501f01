-- The policy API (scripts/hooks.lua, README "Writing a policy"): loading and
-- its self-check, the guard around every hook, each hook's effect, POLICY,
-- and the default policy.  The example policies have examples_spec.lua.

local S = require "world"
local null, OK, E = S.null, S.OK, S.E

local policy_file, rewrite = S.policy_file, S.rewrite

-- A client table as host.client() gives it, for every command of sc.
local function as_client(sc, c)
    sc.host.client = function() return c end
end

local function logged(sc, pattern)
    for _, l in ipairs(sc.logs) do
        if l:find(pattern) then return l end
    end
end

describe("the default policy", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("loads from scripts/policy.lua and passes its self-check", function()
        local H = a.require("hooks")
        assert.matches("scripts/policy.lua$", H.status.file)
        assert.equal("ok", H.status.last)
        -- it defines no hook (each is documented there as a comment), so
        -- no command pays for the guard; the built-in defaults apply
        assert.equal("", H.status.hooks)
        local p = assert(H.load(H.status.file))
        assert.is_nil(p.policy.key_path)
        assert.is_nil(H.DEFAULTS.key_path("k"))
        assert.equal("ephemeral", H.DEFAULTS.lifetime("k", "string", 1000))
        assert.equal("persistent", H.DEFAULTS.lifetime("k", "hash", nil))
        assert.equal(1234, H.DEFAULTS.ttl("k", 1234))
    end)

    it("keeps Redis semantics: keys at <root>/k, TTL keys ephemeral, TTLs kept", function()
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "123456"))
        local n = W:node(a:path("lock"))
        assert.equal(a.sid, n.stat.ephemeralOwner)
        assert.is_true(a:call("PTTL", "lock") > 123000)
        assert.same(OK, a:call("SET", "plain", "v"))
        assert.equal(0, W:node(a:path("plain")).stat.ephemeralOwner)
        assert.equal(-1, a:call("PTTL", "plain"))
    end)

    it("reports itself for INFO's # Policy section and POLICY STATUS", function()
        local info = {}
        for _, kv in ipairs(a.M.policy_info()) do info[kv[1]] = kv[2] end
        assert.matches("policy.lua$", info.policy_file)
        assert.equal("ok", info.policy_last_load)
        assert.equal(0, info.policy_reloads)
        assert.equal(0, info.policy_reload_failures)
        local st = a:call("POLICY", "STATUS").map
        assert.equal("file", st[1])
        assert.matches("policy.lua$", st[2])
    end)
end)

describe("loading a policy", function()
    local W, a, file
    before_each(function()
        W = S.world(0)
        file = policy_file("return { ttl = function(key, ms) return math.min(ms, 5000) end }")
        a = W:sidecar({ config = { policy = file } })
    end)
    after_each(function() os.remove(file) end)

    local function clamp()
        a:call("SET", "k", "v", "PX", "100000")
        return a:call("PTTL", "k")
    end

    it("POLICY RELOAD swaps the policy, and says why when it keeps the old one", function()
        assert.is_true(clamp() <= 5000)
        rewrite(file, "return { ttl = function(key, ms) return math.min(ms, 3000) end }")
        assert.same(OK, a:call("POLICY", "RELOAD"))
        assert.is_true(clamp() <= 3000)
        rewrite(file, "return { ttl = function(key, ms) return 0 end }")
        local r = a:call("POLICY", "RELOAD")
        assert.matches("^ERR policy not reloaded: .*self%-check: ttl returned 0", r.err)
        assert.is_true(clamp() <= 3000 and clamp() > 2000)
        local H = a.require("hooks")
        assert.equal("failed", H.status.last)
        assert.matches("ttl returned 0", H.status.last_error)
        assert.equal(1, H.status.reloads)
        assert.equal(1, H.status.failures)
        assert.truthy(logged(a, "^error policy not reloaded, the old one stays"))
    end)

    local broken = {
        syntax = { "return {", "expected" },
        raises = { "error('boom at load')", "boom at load" },
        ["not a table"] = { "return 42", "a policy must return a table" },
        ["wrong type"] = { "return { authorize = 'yes' }", "policy.authorize must be a function" },
        ["relative path"] = { "return { key_path = function(k) return 'k/' .. k end }",
                              "key_path.*not nil or an absolute znode path" },
        ["the root itself"] = { "return { key_path = function(k) return '/zkresp/k' end }",
                                "not nil or an absolute znode path" },
        ["dot component"] = { "return { key_path = function(k) return '/x/../' .. #k end }",
                              "absolute znode path" },
        collision = { "return { key_path = function(k) return '/one/path' end }",
                      "maps two keys to /one/path" },
        unstable = { "local n = 0 return { key_path = function(k) n = n + 1 return '/x/' .. n end }",
                     "is not stable" },
        lifetime = { "return { lifetime = function() return 'forever' end }",
                     "lifetime returned forever" },
        default_ttl = { "return { default_ttl = function() return -5 end }",
                        "default_ttl returned %-5" },
        authorize = { "return { authorize = function() return {} end }",
                      "authorize returned a table" },
        ["own check"] = { "return { self_check = function() return nil, 'no users file' end }",
                          "self%-check: no users file" },
        ["loops at load"] = { "while true do end", "load ran past its budget" },
        ["loops in a hook"] = { "return { ttl = function() while true do end end }",
                                "ttl ran past its budget" },
        ["bad command"] = { "return { commands = { Foo = { fn = print, arity = 1 } } }",
                            "policy.commands.Foo needs a lower%-case name" },
    }
    for what, case in pairs(broken) do
        it("refuses a policy that fails to load or to pass the self-check: " .. what, function()
            a.require("hooks").BUDGET = 200000
            rewrite(file, case[1])
            local ok, msg = a.M.reload_policy()
            assert.is_nil(ok)
            assert.matches(case[2], msg)
            assert.is_true(clamp() <= 5000) -- the old policy is in force
            assert.equal(0, a.require("hooks").status.reloads)
        end)
    end

    it("warns about names that are not hooks (a typo)", function()
        rewrite(file, "return { on_aquire = function() end }")
        assert.is_true(a.M.reload_policy())
        assert.truthy(logged(a, "policy.on_aquire is not a hook or setting zkresp knows"))
    end)

    it("reloads on SIGHUP (the \"reload\" session event)", function()
        rewrite(file, "return { ttl = function(key, ms) return math.min(ms, 2000) end }")
        a:reload()
        assert.is_true(clamp() <= 2000)
        assert.truthy(logged(a, "^info policy reloaded from"))
    end)

    it("POLICY takes RELOAD, STATUS and HELP, with Redis's errors otherwise", function()
        assert.same(E("ERR unknown subcommand 'nope'. Try POLICY HELP."), a:call("POLICY", "nope"))
        assert.same(E("ERR wrong number of arguments for 'policy|reload' command"),
                    a:call("POLICY", "RELOAD", "x"))
        assert.same(E("ERR wrong number of arguments for 'policy' command"), a:call("POLICY"))
        assert.is_true(#a:call("POLICY", "HELP") > 3)
        assert.equal("admin noscript loading stale", a.M.commands.policy.flags)
    end)
end)

describe("the guard around hooks", function()
    local W, a, b, file
    before_each(function()
        W = S.world(0)
        file = policy_file([[
            return {
                key_path = function(key)
                    if key == "raise" then error("no path for you") end
                    if key == "loop" then while true do end end
                    if key == "bad" then return "relative" end
                    if key == "dots" then return "/zkresp/k/../x" end
                    if key == "quota" then return "/zookeeper/quota/x" end
                end,
                ttl = function(key, ms)
                    if key == "ttl-raise" then error({ code = 7 }) end
                    if key == "ttl-loop" then local x = 0 while true do x = x + 1 end end
                    return ms
                end,
                lifetime = function(key, t, ms)
                    if key == "life-raise" then error("lifetime broke") end
                    return ms and "ephemeral" or "persistent"
                end,
            }
        ]])
        a = W:sidecar({ config = { policy = file } })
        b = W:sidecar()
        a.require("hooks").BUDGET = 500000
    end)
    after_each(function() os.remove(file) end)

    it("a hook that raises fails that command with -ERR policy: <message>", function()
        local r = a:call("SET", "raise", "v")
        assert.matches("^ERR policy: .*no path for you$", r.err)
        r = a:call("SET", "ttl-raise", "v", "PX", "1000")
        assert.equal("ERR policy: policy.ttl raised table", r.err:match("^(ERR policy: policy.ttl raised table)"))
        r = a:call("SET", "life-raise", "v")
        assert.matches("^ERR policy: .*lifetime broke$", r.err)
        assert.same(E("ERR policy: key_path must return an absolute znode path or nil"),
                    a:call("GET", "bad"))
        assert.truthy(logged(a, "^warn policy hook key_path failed"))
        -- An answer outside the contract is logged and counted as well; the
        -- run-time check is the self-check's (no "..", not under /zookeeper).
        assert.truthy(logged(a, "^warn policy hook key_path failed: key_path must return an absolute"))
        for _, k in ipairs({ "dots", "quota" }) do
            assert.same(E("ERR policy: key_path must return an absolute znode path or nil"),
                        a:call("SET", k, "v"))
        end
        -- Nothing was written, and everything else works.
        assert.equal(null, b:call("GET", "life-raise"))
        assert.same(OK, a:call("SET", "fine", "v", "PX", "1000"))
        assert.equal("v", a:call("GET", "fine"))
        assert.equal(6, a.require("hooks").status.hook_errors)
    end)

    it("a hook that loops forever is stopped and fails only its command", function()
        local r = a:call("SET", "loop", "v")
        assert.same(E("ERR policy: key_path ran past its budget of 500000 instructions"), r)
        r = a:call("SET", "ttl-loop", "v", "PX", "1000")
        assert.same(E("ERR policy: ttl ran past its budget of 500000 instructions"), r)
        assert.same(OK, a:call("SET", "after", "v"))
        assert.equal("v", a:call("GET", "after"))
    end)

    it("also inside a script: the script fails with the policy's error, writes nothing", function()
        local r = a:call("EVAL", "redis.call('set', 'ok1', 'v') return redis.call('set', KEYS[1], 'v')",
                         "1", "life-raise")
        assert.matches("lifetime broke", r.err)
        assert.equal(null, a:call("GET", "ok1"))
        r = a:call("EVAL", "return redis.call('get', KEYS[1])", "1", "loop")
        assert.matches("key_path ran past its budget", r.err)
        assert.same(OK, a:call("EVAL", "return redis.call('set', KEYS[1], 'v')", "1", "fine"))
    end)
end)

describe("TTL hooks", function()
    it("default_ttl gives a TTL to writes without one; ttl clamps every TTL", function()
        local W = S.world(0)
        local file = policy_file([[
            return {
                default_ttl = function(key, type)
                    if key:find("^lock:") and type == "string" then return 5000 end
                end,
                ttl = function(key, ms) return math.min(ms, 60000) end,
            }
        ]])
        local a = W:sidecar({ config = { policy = file } })
        local b = W:sidecar()
        assert.same(OK, a:call("SET", "lock:leak", "t", "NX"))
        local left = a:call("PTTL", "lock:leak")
        assert.is_true(left > 4900 and left <= 5000)
        -- It is ephemeral, as every key with a TTL.
        assert.equal(a.sid, W:node(a:path("lock:leak")).stat.ephemeralOwner)
        -- Other keys and types keep Redis semantics; the clamp applies to all.
        assert.same(OK, a:call("SET", "other", "v"))
        assert.equal(-1, a:call("PTTL", "other"))
        assert.equal(1, a:call("HSET", "lock:h", "f", "v"))
        assert.equal(-1, a:call("PTTL", "lock:h"))
        assert.same(OK, a:call("SET", "long", "v", "EX", "86400"))
        assert.is_true(a:call("PTTL", "long") <= 60000)
        assert.equal(1, a:call("PEXPIRE", "other", "999999"))
        assert.is_true(a:call("PTTL", "other") <= 60000)
        -- Scripts' writes too.
        a:call("EVAL", "return redis.call('set', KEYS[1], 'v')", "1", "lock:script")
        assert.is_true(a:call("PTTL", "lock:script") > 4900)
        -- The default-TTL lock expires for everybody.
        W:advance(5001)
        assert.equal(null, b:call("GET", "lock:leak"))
        os.remove(file)
    end)
end)

describe("authorize", function()
    local W, a, file, seen
    before_each(function()
        W = S.world(0)
        file = policy_file([[
            return {
                authorize = function(client, command, keys)
                    _G.__authz_seen = { client = client, command = command, keys = keys }
                    if client.user == "reader" and command ~= "get" and command ~= "eval" then
                        return false
                    end
                    for _, k in ipairs(keys) do
                        if k:find("^secret:") then return "no access to " .. k end
                    end
                    if command == "boom" then error("authz broke") end
                    return true
                end,
            }
        ]])
        a = W:sidecar({ config = { policy = file } })
        seen = function() return a.env.__authz_seen end
    end)
    after_each(function()
        os.remove(file)
        a.env.__authz_seen = nil
    end)

    it("refuses with -NOPERM and the reason, or Redis's text for false", function()
        as_client(a, { id = 7, addr = "10.0.0.1:5000", user = "reader", resp = 2 })
        assert.same(null, a:call("GET", "k"))
        assert.same(E("NOPERM User reader has no permissions to run the 'set' command"),
                    a:call("SET", "k", "v"))
        as_client(a, { id = 8, addr = "10.0.0.2:5000", user = "default", resp = 2 })
        assert.same(E("NOPERM no access to secret:x"), a:call("DEL", "a", "secret:x"))
        assert.same({ "a", "secret:x" }, seen().keys)
        assert.equal("del", seen().command)
        assert.equal("10.0.0.2:5000", seen().client.addr)
        assert.equal(1, a:call("EXISTS", "k") + 1)
    end)

    it("sees EVAL's keys and every command a script runs", function()
        assert.same(E("NOPERM no access to secret:1"), a:call("EVAL", "return 1", "2", "x", "secret:1"))
        local r = a:call("EVAL", "return redis.call('get', 'secret:2')", "0")
        assert.matches("NOPERM no access to secret:2", r.err)
        assert.equal(1, a:call("EVAL", "return 1", "1", "x"))
    end)

    it("an authorize hook that raises fails the command, not the sidecar", function()
        local H = a.require("hooks")
        -- A command of the policy's own is easiest to call with a name.
        local r = H.authorize("boom", { first_key = 0 }, { "BOOM" })
        assert.equal("ERR policy: " .. "authz broke", r:gsub("^ERR policy: .-:%d+: ", "ERR policy: "))
        assert.same(OK, a:call("SET", "k", "v"))
    end)
end)

describe("notifications", function()
    local W, a, b, file
    before_each(function()
        W = S.world(0)
        file = policy_file([[
            local log = {}
            _G.__events = log
            local function rec(ev) return function(key, info)
                log[#log + 1] = { ev = ev, key = key, info = info }
            end end
            return { on_acquire = rec("acquire"), on_release = rec("release"),
                     on_expire = rec("expire"), on_lost = rec("lost") }
        ]])
        a = W:sidecar({ config = { policy = file } })
        b = W:sidecar()
        as_client(a, { id = 3, addr = "127.0.0.1:4444", user = "default", name = "app", resp = 2 })
    end)
    after_each(function()
        os.remove(file)
        a.env.__events = nil
    end)

    local function events()
        W:advance(20) -- the hooks run in the background
        local out = {}
        for _, e in ipairs(a.env.__events) do out[#out + 1] = e.ev .. " " .. e.key end
        return out
    end

    it("gets the fencing token from a create that is never grouped", function()
        -- The model's grouped create answers no stat (as the bridge's in a
        -- group), so the token below proves this create was not grouped.
        local from = #W.ops + 1
        assert.same(OK, a:call("SET", "lock", "tok-1", "NX", "PX", "30000"))
        assert.same({ sc = a.id, kind = "create", path = a:path("lock") }, W.ops[from])
        assert.same({ "acquire lock" }, events())
        assert.equal(W:node(a:path("lock")).stat.czxid, a.env.__events[1].info.czxid)
    end)

    it("acquire and release, with the client, the token and the fencing token", function()
        assert.same(OK, a:call("SET", "lock", "tok-1", "NX", "PX", "30000"))
        assert.equal(null, a:call("SET", "lock", "tok-2", "NX", "PX", "30000"))
        assert.same(OK, a:call("SET", "lock", "tok-1b", "XX", "PX", "30000")) -- not an acquire
        assert.equal(1, a:call("DELIFEQ", "lock", "tok-1b"))
        assert.same({ "acquire lock", "release lock" }, events())
        local acq = a.env.__events[1].info
        assert.equal("tok-1", acq.value)
        assert.equal(30000, acq.ttl)
        assert.equal("ephemeral", acq.lifetime)
        assert.equal("string", acq.type)
        assert.equal("127.0.0.1:4444", acq.client.addr)
        assert.equal(a:path("lock"), acq.path)
        assert.is_number(acq.czxid)
        assert.equal("tok-1b", a.env.__events[2].info.value)
        -- DEL, GETDEL and a script's writes count too.
        a:call("SET", "k1", "v")
        a:call("GETDEL", "k1")
        a:call("EVAL", "redis.call('set', KEYS[1], 'v') return redis.call('del', KEYS[2])", "2", "k2", "k3")
        a:call("DEL", "k2")
        assert.same({ "acquire lock", "release lock", "acquire k1", "release k1", "acquire k2",
                      "release k2" }, events())
    end)

    it("expiry by TTL", function()
        a:call("SET", "lock", "t", "NX", "PX", "100")
        W:advance(150)
        assert.same({ "acquire lock", "expire lock" }, events())
    end)

    it("loss: the session, or another client deleting or overwriting the key", function()
        a:call("SET", "s1", "t", "NX", "PX", "30000")
        a:call("SET", "gone", "t", "NX", "PX", "30000")
        a:call("SET", "over", "t", "NX", "PX", "30000")
        W:settle()
        assert.equal(1, b:call("DEL", "gone"))
        assert.same(OK, b:call("SET", "over", "theirs"))
        local ev = events()
        assert.same({ "acquire s1", "acquire gone", "acquire over", "lost gone", "lost over" }, ev)
        assert.equal("deleted", a.env.__events[4].info.reason)
        assert.equal("overwritten", a.env.__events[5].info.reason)
        a:lose()
        ev = events()
        assert.equal("lost s1", ev[6])
        assert.equal("session", a.env.__events[6].info.reason)
        assert.equal(6, #ev)
    end)

    it("a notification hook that raises is logged, and changes nothing", function()
        rewrite(file, "return { on_acquire = function() error('audit down') end }")
        assert.is_true(a.M.reload_policy())
        assert.same(OK, a:call("SET", "lock", "t", "NX", "PX", "30000"))
        W:settle()
        assert.truthy(logged(a, "policy hook on_acquire failed: .*audit down"))
        assert.equal("t", b:call("GET", "lock"))
    end)
end)

describe("extra commands", function()
    it("are listed by COMMAND, checked for arity and keys, and authorised", function()
        local W = S.world(0)
        local file = policy_file([[
            local T = require "txn"
            return {
                commands = { whoholds = { arity = 2, first_key = 1, last_key = 1, step = 1,
                                          flags = "readonly",
                    fn = function(args)
                        return T.run({ args[2] }, function(t)
                            local rec = t:read(args[2])
                            return rec.live and rec.value or host.null
                        end)
                    end } },
                authorize = function(client, command, keys)
                    if command == "whoholds" and keys[1] == "hidden" then return "hidden" end
                end,
            }
        ]])
        local a = W:sidecar({ config = { policy = file } })
        a:call("SET", "l", "me")
        assert.equal("me", a:call("WHOHOLDS", "l"))
        assert.equal("readonly", a.M.commands.whoholds.flags)
        assert.same(E("ERR wrong number of arguments for 'whoholds' command"), a:call("WHOHOLDS"))
        assert.same(E("NOPERM hidden"), a:call("WHOHOLDS", "hidden"))
        assert.equal("me", a:call("EVAL", "return redis.call('whoholds', KEYS[1])", "1", "l"))
        -- A reload without it takes it away.
        rewrite(file, "return {}")
        assert.same(OK, a:call("POLICY", "RELOAD"))
        assert.is_nil(a.M.commands.whoholds)
        os.remove(file)
    end)

    it("may declare subcommands, checked before fn runs", function()
        local W = S.world(0)
        local calls = 0
        _G.__gw_calls = function() calls = calls + 1 end
        local file = policy_file([[
            return { commands = { lease = { arity = -2, subcommands = { show = 2, set = 4 },
                fn = function(args) __gw_calls() return { ok = args[2]:upper() } end } } }
        ]])
        local a = W:sidecar({ config = { policy = file } })
        assert.same({ ok = "SHOW" }, a:call("LEASE", "show"))
        assert.same({ ok = "SET" }, a:call("LEASE", "Set", "k", "v"))
        assert.same(E("ERR unknown subcommand 'nope'. Try LEASE HELP."), a:call("LEASE", "nope"))
        assert.same(E("ERR wrong number of arguments for 'lease|set' command"), a:call("LEASE", "set", "k"))
        assert.same(E("ERR wrong number of arguments for 'lease|show' command"), a:call("LEASE", "show", "x"))
        assert.same(E("ERR wrong number of arguments for 'lease' command"), a:call("LEASE"))
        assert.equal(2, calls)
        _G.__gw_calls = nil
        rewrite(file, "return { commands = { lease = { arity = -2, fn = print, subcommands = { Show = 2 } } } }")
        local ok, e = a.M.reload_policy()
        assert.is_nil(ok)
        assert.truthy(tostring(e):find("subcommands must map lower-case names to integer arities", 1, true))
        os.remove(file)
    end)
end)
