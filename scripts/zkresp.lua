-- zkresp.lua — the system layer's entry point (see sidecar/lua_host.h).
--
--   M.dispatch(args)             one Redis command -> its reply value
--   M.on_session(event, id)      ZooKeeper session events, and "reload"
--                                (SIGHUP: load the policy again; if it fails
--                                the old policy stays)
--   M.commands                   every command: lower-case name -> {fn,
--                                arity, first_key, last_key, step, flags}
--                                (cmd_string.lua, cmd_keys.lua, and the
--                                policy's own `commands`); the host lists it
--                                for COMMAND
--
-- dispatch checks the name, the arity and the key length, then calls fn.

local errors = require "errors"
local K = require "keyspace"

local M = {}

local builtin = {}
for _, mod in ipairs({ "cmd_string", "cmd_keys", "cmd_hash", "cmd_list", "cmd_set", "cmd_zset", "cmd_pubsub", "eval" }) do
    for name, spec in pairs(require(mod)) do
        spec.name = name
        builtin[name] = spec
    end
end
M.builtin = builtin

-- Built-in commands and the policy's; the policy's win.  Rebuilt in place
-- when the policy changes, so the host's reference stays good.
M.commands = require "command_table"

local function build_commands(extra)
    for name in pairs(M.commands) do M.commands[name] = nil end
    for name, spec in pairs(builtin) do M.commands[name] = spec end
    for name, spec in pairs(extra) do
        if builtin[name] then host.log("warn", "policy command " .. name .. " replaces the built-in one") end
        M.commands[name] = spec
    end
end

---------------------------------------------------------------------------
-- Policy

local function policy_file()
    local p = host.config and host.config.policy
    if p and p ~= "" then return p end
    local found = package.searchpath("policy", package.path)
    if found then return found end
    if debug and debug.getinfo then
        local src = debug.getinfo(1, "S").source
        local dir = src:match("^@(.*)/[^/]*$")
        if dir then return dir .. "/policy.lua" end
    end
    return "scripts/policy.lua"
end

local HOOKS = { key_path = "function", lifetime = "function", ttl = "function",
                keys_limit = "number", commands = "table" }

-- Loads the policy from `path` (default: host.config.policy, else
-- policy.lua next to this file).  Returns true, or nil and the reason.
function M.load_policy(path)
    path = path or policy_file()
    local chunk, lerr = loadfile(path, "t", _ENV)
    if not chunk then return nil, lerr end
    local ok, p = pcall(chunk)
    if not ok then return nil, path .. ": " .. tostring(p) end
    if type(p) ~= "table" then return nil, path .. ": a policy must return a table" end
    for k, want in pairs(HOOKS) do
        if p[k] ~= nil and type(p[k]) ~= want then
            return nil, path .. ": policy." .. k .. " must be a " .. want
        end
    end
    local cmds = {}
    for name, spec in pairs(p.commands or {}) do
        if type(name) ~= "string" or name ~= name:lower() or type(spec) ~= "table" or
           type(spec.fn) ~= "function" or math.type(spec.arity) ~= "integer" then
            return nil, path .. ": policy.commands." .. tostring(name) ..
                        " needs a lower-case name, fn and an integer arity"
        end
        cmds[name] = { fn = spec.fn, arity = spec.arity, first_key = spec.first_key or 0,
                       last_key = spec.last_key or 0, step = spec.step or 0,
                       flags = spec.flags or "", name = name }
    end
    K.set_policy(p)
    build_commands(cmds)
    M.policy_path = path
    return true
end

function M.reload_policy()
    return M.load_policy()
end

do
    local ok, e = M.load_policy()
    if not ok then error("loading the policy: " .. tostring(e), 0) end
end

---------------------------------------------------------------------------
-- Dispatch

function M.command(name)
    return M.commands[name]
end

-- The key arguments of a command, as Redis's first_key/last_key/step say
-- (Redis's indexes count from the name, 0).
local function check_keys(spec, args)
    local first = spec.first_key or 0
    if first <= 0 then return nil end
    local last = spec.last_key or first
    if last < 0 then last = #args + last end
    local step = spec.step and spec.step > 0 and spec.step or 1
    for i = first, last, step do
        local key = args[i + 1]
        if key then
            local e = K.key_error(key)
            if e then return e end
        end
    end
end

function M.dispatch(args)
    local spec = M.command(args[1]:lower())
    if not spec then return { err = errors.unknown_command(args) } end
    local arity = spec.arity
    if (arity > 0 and #args ~= arity) or (arity < 0 and #args < -arity) then
        return { err = errors.wrong_arity(spec.name) }
    end
    local e = check_keys(spec, args)
    if e then return { err = e } end
    return spec.fn(args)
end

-- Numbers for the metrics endpoint (sidecar/metrics.c), called on every
-- scrape outside any command: cheap, and never a zk.* call.  owned_keys is
-- exported as zkresp_owned_keys; names ending in _total become counters
-- zkresp_lua_<name>, the others gauges.
function M.stats()
    local T = require "txn"
    local sid = zk.session()
    local owned = 0
    for _, e in pairs(K.owned) do
        if e.lifetime == "ephemeral" and e.sid == sid then owned = owned + 1 end
    end
    return {
        owned_keys = owned,
        script_commits_total = T.stats.committed,
        script_retries_total = T.stats.retries,
        pubsub_published_total = require("counters").published,
    }
end

-- A watch left by keyspace.lua fired (see sidecar/lua_host.h).
function M.on_watch(event, path)
    K.on_watch(event, path)
end

function M.on_session(event, session_id)
    if event == "reload" then
        local ok, e = M.reload_policy()
        if ok then
            host.log("info", "policy reloaded from " .. M.policy_path)
        else
            host.log("error", "policy not reloaded, the old one stays: " .. tostring(e))
        end
        return
    end
    host.log("info", string.format("session %s 0x%x", tostring(event),
                                   math.tointeger(session_id) or 0))
    K.on_session(event, session_id)
end

return M
