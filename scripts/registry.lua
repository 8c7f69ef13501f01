-- registry.lua — the one command registry: every command zkresp knows,
-- with its shape (arity, subcommands), key positions, flags and the rules
-- that refuse a request before any command body runs.
--
--   R.commands             lower-case name -> spec (one live table: the
--                          host walks it for COMMAND and /metrics, and
--                          reads it again after a reload)
--   R.install(builtin, extra)   fill it: the built-in commands and the
--                          policy's (which win over built-ins answered in
--                          Lua, never over those answered in C)
--   R.refusal(args, subscribed)  nil, spec, full name when the request may
--                          run; else the error reply
--   R.check(args)          the part of R.refusal that C commands share:
--                          known, and in its shape (MULTI's queue)
--   R.has_flag(spec, flag) whether the spec's flags name it ("write")
--   R.each_key(spec, args, f)  f over the request's key arguments
--   R.names_keys(spec, args)   whether the request names any key
--
-- A spec: { fn, arity, max_args, first_key, last_key, step, flags,
-- subcommands, subscribed_ok, group, in_c, lock_names, numkeys }.  lock_names: its
-- keys name native locks (LOCK.*), not keys of the keyspace.  numkeys: where
-- a command whose keys move (a script) gives their count.  arity counts the command's
-- name; a negative arity -n means at least n, and max_args, when given,
-- is the most (PING [message]).  subcommands maps each lower-case
-- subcommand to its arity, counted the same way ("client setname x": 3).
-- subscribed_ok: allowed in RESP2 subscribed mode.  group: COMMAND DOCS's
-- group (default "keyspace" for a command with keys, else "server").
--
-- in_c: answered by gateway/dispatch.c, which binds the name to a C
-- function and reads the spec at start (lua_host_commands); these specs
-- have no fn.  A built-in spec with part_of_c answers some subcommands of
-- a C command in Lua (MEMORY USAGE, and HELP of CLIENT, COMMAND and
-- MEMORY: the gateway passes them on); its
-- subcommands are among the C entry's.  A request for one of them reaches Lua only when C found it
-- refused (wrong shape, or not allowed while subscribed): R.refusal
-- then gives the error, so that every refusal text is written here and in
-- errors.lua, once.

local E = require "errors"

local R = {}

R.commands = {}
R.lua_parts = {} -- name of a C command -> the built-in spec of its Lua part

-- Answered in C (gateway/dispatch.c).  Redis 7.2's arities and flags.
local CONNECTION = "connection"
R.in_c = {
    ping = { arity = -1, max_args = 2, flags = "fast stale", subscribed_ok = true },
    echo = { arity = 2, flags = "fast stale" },
    quit = { arity = -1, flags = "noauth allow_busy fast", subscribed_ok = true },
    select = { arity = 2, flags = "loading stale fast" },
    auth = { arity = -2, flags = "noscript loading stale fast noauth allow_busy" },
    hello = { arity = -1, flags = "noscript loading stale fast noauth allow_busy" },
    reset = { arity = 1, flags = "noscript loading stale fast noauth allow_busy",
              subscribed_ok = true },
    client = { arity = -2, flags = "noscript loading stale",
               subcommands = { setname = 3, getname = 2, id = 2, setinfo = 4, info = 2,
                               list = -2, kill = -3, unblock = -3, ["no-evict"] = 3, ["no-touch"] = 3,
                               reply = 3, help = 2 } },
    info = { arity = -1, flags = "loading stale" },
    command = { arity = -1, flags = "loading stale",
                subcommands = { count = 2, docs = -2, info = -2, help = 2 } },
    time = { arity = 1, flags = "loading stale fast" },
    memory = { arity = -2, flags = "loading stale", subcommands = { purge = 2, usage = -3, help = 2 } },
    wait = { arity = 3, flags = "noscript" },
    waitaof = { arity = 4, flags = "noscript" },
    readonly = { arity = 1, flags = "loading stale fast" },
    readwrite = { arity = 1, flags = "loading stale fast" },
}
for name, spec in pairs(R.in_c) do
    spec.name, spec.in_c, spec.group = name, true, CONNECTION
    spec.first_key, spec.last_key, spec.step = 0, 0, 0
end

-- Rebuilt in place, so that every holder of R.commands sees the new table.
function R.install(builtin, extra)
    local cmds = R.commands
    for name in pairs(cmds) do cmds[name] = nil end
    for name, spec in pairs(R.in_c) do cmds[name] = spec end
    for name, spec in pairs(builtin) do
        spec.name = name
        if spec.part_of_c then R.lua_parts[name] = spec else cmds[name] = spec end
    end
    for name, spec in pairs(extra or {}) do
        if R.in_c[name] then
            host.log("warn", "policy command " .. name .. " is answered by zkresp itself; ignored")
        else
            if builtin[name] then host.log("warn", "policy command " .. name .. " replaces the built-in one") end
            cmds[name] = spec
        end
    end
    for _, spec in pairs(cmds) do
        spec.group = spec.group or ((spec.first_key or 0) > 0 and "keyspace" or "server")
    end
end

local function arity_ok(arity, n, max)
    return (arity > 0 and n == arity) or (arity < 0 and n >= -arity and not (max and n > max))
end

-- Checks args against the spec's arity and, when it has subcommands,
-- against the named subcommand's.  Returns the name Redis reports for the
-- command ("script|load" for a subcommand), or nil and the error reply.
local function check_shape(spec, args)
    if not arity_ok(spec.arity, #args, spec.max_args) then
        return nil, E.reply(E.wrong_arity(spec.name))
    end
    local subs = spec.subcommands
    if not subs or not args[2] then return spec.name end
    local sub = args[2]:lower()
    local arity = subs[sub]
    if math.type(arity) ~= "integer" then
        return nil, E.reply(E.unknown_subcommand(spec.name, args[2]))
    end
    local full = spec.name .. "|" .. sub
    if not arity_ok(arity, #args) then return nil, E.reply(E.wrong_arity(full)) end
    return full
end

-- Whether a request names a known command in its shape (arity,
-- subcommand), C ones included.  Returns nil, the spec and the command's
-- full name; or the error reply.
function R.check(args)
    local spec = R.commands[args[1]:lower()]
    if not spec then return E.reply(E.unknown_command(args)) end
    local full, bad = check_shape(spec, args)
    if not full then return bad end
    return nil, spec, full
end

-- Whether a request may run, as Redis decides before a command body:
-- known, the right shape, allowed in RESP2 subscribed mode.  Returns nil,
-- the spec and the command's full name; or the error reply.
function R.refusal(args, subscribed)
    local bad, spec, full = R.check(args)
    if bad then return bad end
    if subscribed and not spec.subscribed_ok then
        return E.reply(E.not_while_subscribed(full))
    end
    local part = spec.in_c and R.lua_parts[spec.name]
    if part and part.subcommands[args[2]:lower()] then return nil, part, full end
    if spec.in_c then
        -- C answers it when it is well formed: reaching here is a bug
        return E.reply("ERR " .. spec.name .. " is answered by zkresp's gateway, not its scripts")
    end
    return nil, spec, full
end

-- Calls f(key) for each key argument of args, as the spec's first_key,
-- last_key and step say (Redis's indexes, from the name, 0; a negative
-- last_key counts from the end); returns f's first truthy answer.
function R.each_key(spec, args, f)
    local first = spec.first_key or 0
    if first <= 0 then return nil end
    local last = spec.last_key or first
    if last < 0 then last = #args + last end
    local step = spec.step and spec.step > 0 and spec.step or 1
    for i = first, last, step do
        local key = args[i + 1]
        if key then
            local r = f(key)
            if r then return r end
        end
    end
    return nil
end

-- Whether a request names a key, for a connection's order (queue.lua's
-- Q.turn): a key position of the spec's, else, where the keys move
-- (movablekeys), a count of them at spec.numkeys (a script's) above 0.
-- A pub/sub command's keys are channels (SPUBLISH's): none of the keyspace.
function R.names_keys(spec, args)
    if R.has_flag(spec, "pubsub") then return false end
    local first = spec.first_key or 0
    if first > 0 then return args[first + 1] ~= nil end
    if spec.numkeys then return (math.tointeger(tonumber(args[spec.numkeys + 1])) or 0) > 0 end
    return R.has_flag(spec, "movablekeys")
end

-- Whether spec's flags (its space-separated `flags`) name `flag`: a set
-- made once per spec (redis.call asks twice per call).
local flag_sets = setmetatable({}, { __mode = "k" })

function R.has_flag(spec, flag)
    local set = flag_sets[spec]
    if not set then
        set = {}
        for w in (type(spec.flags) == "string" and spec.flags or ""):gmatch("%S+") do set[w] = true end
        flag_sets[spec] = set
    end
    return set[flag] == true
end

return R
