-- hooks.lua — the policy as the system layer sees it: loading with a
-- self-check, every hook behind a guard, the client of the running command,
-- notifications, and what INFO says about it.
--
--   H.load(path)        loads a policy file and self-checks it; returns the
--                       hook table keyspace.lua uses (K.policy) and the
--                       policy's commands, or nil and the reason.  The
--                       running policy is untouched by a failure.
--   H.installed(path)   / H.failed(path, reason): bookkeeping for INFO
--   H.client()          the running command's client (host.client(), once
--                       per command), or nil outside a command
--   H.authorize(name, spec, args)
--                       nil, or the NOPERM error text
--   H.authenticate(user, password, addr)
--                       true (known user, right password), false, or nil
--                       when the policy has no authenticate hook
--   H.notify(name, key, info)
--                       runs policy[name](key, info) in the background
--   H.info()            {{name, value}, ...} for INFO's # Policy section
--
-- The guard.  A hook runs under a count hook (debug.sethook) that stops it
-- after BUDGET virtual-machine instructions, so a hook that loops forever
-- holds the loop for a few tens of milliseconds, then fails.  A hook that
-- raises, or runs past its budget, fails the one command that called it
-- with "-ERR policy: <message>" (an abort signal, signal.lua, which txn.lua and
-- M.dispatch turn into the reply) and is logged; nothing else notices.
-- Hooks the policy leaves out are not guarded: they are the built-in
-- defaults below, and cost nothing extra.

local U = require "util"
local S = require "signal"
local Z = require "zkio"

local H = {}

-- A TTL a hook may answer: a positive number of ms, an integer or a float
-- below 2^63 (math.huge or 1e300 would reach the codec as a float).
function H.ms_ok(t)
    return type(t) == "number" and t == t and t > 0 and (math.type(t) == "integer" or t < 2^63)
end

-- Instructions one hook call may run (the count hook looks every COUNT).
H.BUDGET = 20000000
H.COUNT = 1000

-- Every hook and setting a policy may define, with its type.
H.HOOKS = {
    key_path = "function", lifetime = "function", ttl = "function",
    default_ttl = "function", authorize = "function", authenticate = "function",
    before_acquire = "function", on_acquire = "function", on_release = "function",
    on_expire = "function", on_lost = "function", self_check = "function",
    keys_limit = "number", commands = "table",
}

-- The hooks a policy may leave out (keyspace.lua's K.policy falls back to
-- these).
local DEFAULTS = {
    key_path = function() return nil end,
    lifetime = function(_, _, ttl_ms) return ttl_ms and "ephemeral" or "persistent" end,
    ttl = function(_, ttl_ms) return ttl_ms end,
}
H.DEFAULTS = DEFAULTS

H.status = {
    file = nil,          -- the policy running
    loaded_at = nil,     -- host.wall() when it was installed
    reloads = 0,         -- successful loads after the first
    failures = 0,        -- loads refused (syntax, error, self-check)
    last = "none",       -- "ok" or "failed": the last load attempt
    last_error = "",     -- why the last failed attempt failed
    hooks = "",          -- the hooks the running policy defines
    hook_errors = 0,     -- hook calls that raised, ran past their budget or answered outside the contract
    hook_calls = 0,      -- guarded hook calls
    hook_ms = 0,         -- time spent in them (host.now(); with any I/O
                         -- a hook waits for)
}

local active = {}        -- the running policy's table

---------------------------------------------------------------------------
-- Client identity

local clients = U.per_command()

-- The running command's client, as host.client() gives it ({id, addr,
-- laddr, name, user, resp}), asked once per command, with db, the
-- database the command works in; nil outside one.
function H.client()
    local get = host.client
    if not get then return nil end
    local co = coroutine.running()
    local c = clients[co]
    if c == nil then
        local ok, v = pcall(get)
        c = ok and type(v) == "table" and v or false
        clients[co] = c
    end
    if c then c.db = Z.db() end
    return c or nil
end

---------------------------------------------------------------------------
-- The guard

local Overrun = {}

local function now() return host.now() end

-- What each coroutine has left of its running hook's budget, in count-hook
-- ticks (one shared hook function: nothing is allocated per call).
local left = U.per_command()
local running_name = U.per_command()

local function count_hook()
    local co = coroutine.running()
    local n = (left[co] or 0) - 1
    left[co] = n
    if n < 0 then
        local name = running_name[co] or "hook"
        error(setmetatable({ msg = name .. " ran past its budget of " .. H.BUDGET ..
                                   " instructions" }, Overrun), 0)
    end
end

local function oneline(s)
    s = tostring(s)
    return (s:gsub("[\r\n]+", " "))
end

-- Runs fn(...) under the budget; returns true and up to two results, or
-- false and the error (a string; keyspace signals are raised on).
local function guarded(name, fn, ...)
    local st = H.status
    st.hook_calls = st.hook_calls + 1
    local t0 = now()
    local sethook = debug.sethook
    local oh, om, oc = debug.gethook()
    local co = coroutine.running()
    local saved_left, saved_name = left[co], running_name[co]
    left[co], running_name[co] = H.BUDGET // H.COUNT, name
    sethook(count_hook, "", H.COUNT)
    local ok, a, b = pcall(fn, ...)
    if oh then sethook(oh, om, oc) else sethook() end
    left[co], running_name[co] = saved_left, saved_name
    st.hook_ms = st.hook_ms + (now() - t0)
    if ok then return true, a, b end
    if S.is_retry(a) or S.is_abort(a) then error(a, 0) end
    st.hook_errors = st.hook_errors + 1
    if getmetatable(a) == Overrun then a = a.msg end
    if type(a) ~= "string" then a = "policy." .. name .. " raised " .. tostring(a) end
    a = oneline(a)
    host.log("warn", "policy hook " .. name .. " failed: " .. a)
    return false, a
end
H.guarded = guarded

-- A hook's answer broke its contract (keyspace.lua checks the answers):
-- logged and counted as a hook that raised, and the command fails with
-- "-ERR policy: <message>".
function H.bad_answer(name, msg)
    H.status.hook_errors = H.status.hook_errors + 1
    host.log("warn", "policy hook " .. name .. " failed: " .. msg)
    S.abort({ err = "ERR policy: " .. msg }, true)
end

-- Calls hook `name` for a command: its results, or the command fails with
-- "-ERR policy: <message>".
local function call(name, fn, ...)
    local ok, a, b = guarded(name, fn, ...)
    if ok then return a, b end
    S.abort({ err = "ERR policy: " .. a }, true)
end

---------------------------------------------------------------------------
-- The hook table keyspace.lua calls (K.policy).  The client is appended as
-- the last argument of each hook.

-- A command asks for its key's path several times (its queue, its read,
-- its write); the answer is the same every time (the contract), so the
-- last one is kept per command: {key_path hook, key, path}.
local path_memo = U.per_command()

local function wrap(p)
    local w = { keys_limit = p.keys_limit }
    local key_path, lifetime, ttl = p.key_path, p.lifetime, p.ttl
    local default_ttl, before_acquire = p.default_ttl, p.before_acquire
    w.key_path = key_path and function(key)
        local co = coroutine.running()
        local m = path_memo[co]
        if m and m[1] == key_path and m[2] == key then return m[3] end
        local path = call("key_path", key_path, key, H.client())
        if m then
            m[1], m[2], m[3] = key_path, key, path
        else
            path_memo[co] = { key_path, key, path }
        end
        return path
    end or DEFAULTS.key_path
    w.lifetime = lifetime and function(key, vtype, ttl_ms)
        return (call("lifetime", lifetime, key, vtype, ttl_ms, H.client()))
    end or DEFAULTS.lifetime
    w.ttl = ttl and function(key, ttl_ms)
        return (call("ttl", ttl, key, ttl_ms, H.client()))
    end or DEFAULTS.ttl
    if default_ttl then
        w.default_ttl = function(key, vtype)
            return (call("default_ttl", default_ttl, key, vtype, H.client()))
        end
    end
    if before_acquire then
        -- -> true and the reason (or nil) when the policy refuses, else nil
        w.before_acquire = function(key, info)
            info.client = H.client()
            local ok, why = call("before_acquire", before_acquire, key, info)
            if ok == false or type(ok) == "string" then
                return true, type(ok) == "string" and ok or (type(why) == "string" and why or nil)
            end
        end
    end
    return w
end

---------------------------------------------------------------------------
-- Self-check: the hooks are called on sample keys, under the guard, and
-- their answers validated, before a policy replaces the running one.

local SAMPLE_CLIENT = { id = 0, addr = "127.0.0.1:0", laddr = "127.0.0.1:6379",
                        user = "default", resp = 2 }
local SAMPLE_KEYS = { "lock:order-42", "", "a/b/../c", "\0\255 \r\n", "{tag}:x", string.rep("k", 300) }
local TYPES = { "string", "hash", "list", "set", "zset" }

-- A path a key may live at (every key_path answer, at the self-check and at
-- run time: keyspace.lua's K.path).
function H.valid_path(p, root)
    if type(p) ~= "string" or p:sub(1, 1) ~= "/" or #p < 2 or p:sub(-1) == "/" then
        return false
    end
    if p:find("\0", 1, true) or p:find("//", 1, true) then return false end
    for part in p:gmatch("[^/]+") do
        if part == "." or part == ".." then return false end
    end
    if p == root or p == root .. "/k" or p == root .. "/db" or p == "/zookeeper" or p:find("^/zookeeper/") then
        return false
    end
    return true
end

local function self_check(p, path)
    local root = Z.root()
    local function fail(msg) return nil, path .. ": self-check: " .. msg end
    local function try(name, ...)
        local ok, a, b = guarded(name, p[name], ...)
        if not ok then return false, a end
        return true, a, b
    end
    local seen = {}
    for _, key in ipairs(SAMPLE_KEYS) do
        local shown = string.format("%q", key:sub(1, 20))
        if p.key_path then
            local ok, a = try("key_path", key, SAMPLE_CLIENT)
            if not ok then return fail(a) end
            if a ~= nil then
                if not H.valid_path(a, root) then
                    return fail("key_path(" .. shown .. ") returned " .. tostring(a) ..
                                ", not nil or an absolute znode path of its own")
                end
                local ok2, again = try("key_path", key, SAMPLE_CLIENT)
                if not ok2 then return fail(again) end
                if again ~= a then return fail("key_path(" .. shown .. ") is not stable") end
                if seen[a] then
                    return fail("key_path maps two keys to " .. a)
                end
                seen[a] = true
            end
        end
        if p.lifetime then
            for _, t in ipairs(TYPES) do
                for _, ms in ipairs({ false, 30000 }) do
                    local ok, a = try("lifetime", key, t, ms or nil, SAMPLE_CLIENT)
                    if not ok then return fail(a) end
                    if a ~= "ephemeral" and a ~= "persistent" then
                        return fail("lifetime returned " .. tostring(a) ..
                                    ", not \"ephemeral\" or \"persistent\"")
                    end
                end
            end
        end
        if p.ttl then
            local ok, a = try("ttl", key, 30000, SAMPLE_CLIENT)
            if not ok then return fail(a) end
            if not H.ms_ok(a) then
                return fail("ttl returned " .. tostring(a) .. ", not a positive number of ms")
            end
        end
        if p.default_ttl then
            for _, t in ipairs(TYPES) do
                local ok, a = try("default_ttl", key, t, SAMPLE_CLIENT)
                if not ok then return fail(a) end
                if a ~= nil and not H.ms_ok(a) then
                    return fail("default_ttl returned " .. tostring(a) ..
                                ", not nil or a positive number of ms")
                end
            end
        end
        if p.authorize then
            local ok, a = try("authorize", SAMPLE_CLIENT, "get", { key })
            if not ok then return fail(a) end
            if a ~= nil and type(a) ~= "boolean" and type(a) ~= "string" then
                return fail("authorize returned a " .. type(a) .. ", not true, false, nil or a reason")
            end
        end
    end
    if p.self_check then
        local ok, a, b = try("self_check")
        if not ok then return fail(a) end
        if not a then return fail(tostring(b or "the policy's self_check failed")) end
    end
    return true
end

---------------------------------------------------------------------------
-- Loading

-- Loads `path`; returns the hook table for K.set_policy and the commands
-- (name -> spec), or nil and the reason.
function H.load(path)
    -- (its top level's globals are its own: a file refused below leaves
    -- the running policy's as they were; _G is still the shared table)
    local chunk, lerr = loadfile(path, "t", setmetatable({}, { __index = _ENV }))
    if not chunk then return nil, oneline(lerr) end
    local ok, p = guarded("load", chunk)
    if not ok then return nil, path .. ": " .. p end
    if type(p) ~= "table" then return nil, path .. ": a policy must return a table" end
    local names = {}
    for k, v in pairs(p) do
        local want = H.HOOKS[k]
        if want == nil then
            host.log("warn", path .. ": policy." .. tostring(k) .. " is not a hook or setting zkresp knows")
        elseif type(v) ~= want then
            return nil, path .. ": policy." .. k .. " must be a " .. want
        elseif want == "function" then
            names[#names + 1] = k
        end
    end
    if p.keys_limit and (math.type(p.keys_limit) ~= "integer" or p.keys_limit < 1) then
        return nil, path .. ": policy.keys_limit must be a positive integer"
    end
    local cmds = {}
    for name, spec in pairs(p.commands or {}) do
        if type(name) ~= "string" or name ~= name:lower() or type(spec) ~= "table" or
           type(spec.fn) ~= "function" or math.type(spec.arity) ~= "integer" then
            return nil, path .. ": policy.commands." .. tostring(name) ..
                        " needs a lower-case name, fn and an integer arity"
        end
        local subs = spec.subcommands
        if subs ~= nil then
            local ok = type(subs) == "table"
            for sub, arity in pairs(ok and subs or {}) do
                if type(sub) ~= "string" or sub ~= sub:lower() or math.type(arity) ~= "integer" then
                    ok = false
                end
            end
            if not ok then
                return nil, path .. ": policy.commands." .. name .. ".subcommands must map " ..
                            "lower-case names to integer arities"
            end
        end
        cmds[name] = { fn = spec.fn, arity = spec.arity, first_key = spec.first_key or 0,
                       last_key = spec.last_key or 0, step = spec.step or 0,
                       flags = spec.flags or "", name = name, subcommands = subs }
    end
    local sok, serr = self_check(p, path)
    if not sok then return nil, serr end
    table.sort(names)
    return { policy = p, hooks = wrap(p), commands = cmds, names = names }
end

function H.installed(path, loaded)
    local st = H.status
    if st.file then st.reloads = st.reloads + 1 end
    active = loaded.policy
    st.file = path
    st.loaded_at = host.wall()
    st.last = "ok"
    st.last_error = ""
    st.hooks = table.concat(loaded.names, ",")
end

function H.failed(path, reason)
    local st = H.status
    st.failures = st.failures + 1
    st.last = "failed"
    st.last_error = oneline(reason or "unknown error")
    if not st.file then st.file = path end
end

---------------------------------------------------------------------------
-- Authorisation and authentication

-- The keys a command names: Redis's first_key/last_key/step, and the
-- counted keys of EVAL and friends and of SINTERCARD (spec.numkeys: where
-- the count is).
local function command_keys(name, spec, args)
    local keys = {}
    local first = spec.first_key or 0
    if first > 0 then
        local last = spec.last_key or first
        if last < 0 then last = #args + last end
        local step = spec.step and spec.step > 0 and spec.step or 1
        for i = first, last, step do
            if args[i + 1] then keys[#keys + 1] = args[i + 1] end
        end
    elseif spec.numkeys or name:find("^eval") then
        local at = spec.numkeys or 2
        local n = math.tointeger(tonumber(args[at + 1])) or 0
        for i = at + 2, math.min(at + 1 + n, #args) do keys[#keys + 1] = args[i] end
    end
    return keys
end

-- nil when the running command may go ahead, else the error text.
function H.authorize(name, spec, args)
    local f = active.authorize
    if not f then return nil end
    local client = H.client()
    local ok, a, b = guarded("authorize", f, client or SAMPLE_CLIENT, name,
                             command_keys(name, spec, args), args)
    if not ok then return "ERR policy: " .. a end
    if a == nil or a == true then return nil end
    if type(a) == "string" then return "NOPERM " .. oneline(a) end
    if a == false and type(b) == "string" then return "NOPERM " .. oneline(b) end
    local user = client and client.user or "default"
    return "NOPERM User " .. user .. " has no permissions to run the '" .. name .. "' command"
end

-- From AUTH / HELLO AUTH for a user other than "default".
function H.authenticate(user, password, addr)
    local f = active.authenticate
    if not f then return nil end
    local ok, a = guarded("authenticate", f, user, password, { addr = addr, user = user })
    return ok and a == true
end

---------------------------------------------------------------------------
-- Notifications

-- Runs policy[name](key, info) (name: "on_acquire", "on_release",
-- "on_expire", "on_lost") in a background coroutine: it may call zk.* and
-- host.sleep, and the command's reply does not wait for it.  The client is
-- the running command's, taken now.
function H.notify(name, key, info)
    local f = active[name]
    if not f then return end
    info.client = info.client or H.client()
    host.spawn(function()
        guarded(name, f, key, info)
    end)
end

-- Whether the running policy defines hook `name`.
function H.has(name)
    return active[name] ~= nil
end

---------------------------------------------------------------------------
-- INFO

function H.info()
    local st = H.status
    return {
        { "policy_file", st.file or "" },
        { "policy_loaded_at", st.loaded_at and math.floor(st.loaded_at / 1000) or 0 },
        { "policy_reloads", st.reloads },
        { "policy_reload_failures", st.failures },
        { "policy_last_load", st.last },
        { "policy_last_error", st.last_error },
        { "policy_hooks", st.hooks },
        { "policy_hook_calls", st.hook_calls },
        { "policy_hook_errors", st.hook_errors },
        { "policy_hook_time_us", math.floor(st.hook_ms * 1000) },
    }
end

return H
