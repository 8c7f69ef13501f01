-- zkresp.lua — the system layer's entry point (see sidecar/lua_host.h).
--
--   M.dispatch(args)             one Redis command -> its reply value
--   M.on_session(event, id)      ZooKeeper session events
--   M.reload_policy()            loads the policy again (SIGHUP); on failure
--                                returns nil and the reason, the old policy
--                                stays
--
-- Commands live in tables, lower-case name -> {fn, arity, first, last,
-- step} (cmd_string.lua, cmd_keys.lua, and the policy's own `commands`).
-- dispatch checks the name, the arity and the key length, then calls fn.

local errors = require "errors"
local K = require "keyspace"

local M = {}

local builtin = {}
for _, mod in ipairs({ "cmd_string", "cmd_keys" }) do
    for name, spec in pairs(require(mod)) do
        spec.name = name
        builtin[name] = spec
    end
end
M.builtin = builtin

local extra = {} -- the policy's commands

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
                takeover_grace_ms = "number", keys_limit = "number", commands = "table" }

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
        cmds[name] = { fn = spec.fn, arity = spec.arity, first = spec.first or 0,
                       last = spec.last or 0, step = spec.step or 0, name = name }
    end
    K.set_policy(p)
    extra = cmds
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
    return extra[name] or builtin[name]
end

-- The key arguments of a command, as Redis's first/last/step say (Redis's
-- indexes count from the name, 0).
local function check_keys(spec, args)
    local first = spec.first or 0
    if first <= 0 then return nil end
    local last = spec.last or first
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

function M.on_session(event, session_id)
    host.log("info", "session " .. tostring(event) .. " " .. string.format("0x%x", math.tointeger(session_id) or 0))
    K.on_session(event, session_id)
end

return M
