-- cmd_policy.lua — POLICY, the admin command of the policy (hooks.lua):
--
--   POLICY RELOAD    loads the policy file again, as SIGHUP does: +OK, or
--                    -ERR policy not reloaded: <reason> (the running policy
--                    stays)
--   POLICY STATUS    what INFO's # Policy section says, as a map
--   POLICY HELP
--
-- A policy's authorize hook sees it as command "policy" with no keys, so a
-- policy can keep it for an admin user.  Same table shape as cmd_string.lua.

local E = require "errors"
local H = require "hooks"

local C = {}

local HELP = {
    "RELOAD",
    "    Load the policy file again; on failure the running policy stays.",
    "STATUS",
    "    The policy file, when it was loaded, the last reload's outcome.",
}

local function policy(args)
    local sub = args[2]:lower()
    if sub == "reload" and #args == 2 then
        local ok, e = H.reload()
        if ok then return { ok = "OK" } end
        return { err = "ERR policy not reloaded: " .. (tostring(e):gsub("[\r\n]+", " ")) }
    elseif sub == "status" and #args == 2 then
        local flat = {}
        for _, kv in ipairs(H.info()) do
            flat[#flat + 1] = kv[1]:gsub("^policy_", "")
            local v = kv[2]
            flat[#flat + 1] = math.type(v) == "integer" and v or tostring(v)
        end
        return { map = flat }
    elseif sub == "help" and #args == 2 then
        return E.help("policy", HELP)
    elseif sub == "reload" or sub == "status" or sub == "help" then
        return { err = "ERR wrong number of arguments for 'policy|" .. sub .. "' command" }
    end
    return { err = "ERR unknown subcommand '" .. args[2]:sub(1, 128):gsub("[\r\n]", " ") ..
                   "'. Try POLICY HELP." }
end

C.policy = { fn = policy, arity = -2, flags = "admin noscript loading stale",
             first_key = 0, last_key = 0, step = 0,
             subcommands = { reload = 2, status = 2, help = 2 } }

return C
