-- cmd_server.lua — the server commands that test suites and clients send
-- around their work: FLUSHDB, FLUSHALL, CONFIG, DEBUG SLEEP, MEMORY USAGE,
-- and MOVE and SWAPDB, which zkresp refuses (README, "Databases").  Same
-- table shape as cmd_string.lua.
--
--   FLUSHDB    the keys of the client's database, in batches of DELs
--   FLUSHALL   the same for every database (<root>/k and <root>/db/<n>/k)
--   CONFIG GET the parameters clients read, with zkresp's real values

local K = require "keyspace"
local T = require "txn"
local E = require "errors"
local U = require "util"

local C = {}

local err = E.reply

---------------------------------------------------------------------------
-- FLUSHDB / FLUSHALL [ASYNC | SYNC]
--
-- Each batch of FLUSH_BATCH keys is one DEL (txn.lua's T.delete_keys:
-- versioned deletes through the keyspace, so every sidecar's owned-key
-- cache, leases, watches and expiry see them as any DEL).  Batches are not
-- one transaction: a concurrent writer may see some keys gone and others
-- not yet, and a key written during the flush may survive it.  Only the
-- keys at their default path are removed: a key a policy's key_path puts
-- elsewhere, native LOCK.* locks, the script cache and pub/sub stay.

local FLUSH_BATCH = 1000

local function flush_db(db)
    local dir = K.keys_dir(db)
    local batch = {}
    local function send()
        if #batch > 0 then
            local r = T.delete_keys(batch)
            if type(r) == "table" and r.err then K.abort(r) end
        end
        batch = {}
    end
    for _, key in ipairs(K.key_names(db)) do
        if K.path(key) == dir .. "/" .. host.key_encode(key) then
            batch[#batch + 1] = key
            if #batch >= FLUSH_BATCH then send() end
        end
    end
    send()
end

-- The databases that have a directory: 0 and the numbers under <root>/db.
local function databases()
    local dbs = { 0 }
    for _, n in ipairs(K.children(K.root() .. "/db")) do
        local db = U.to_int(n)
        if db and db > 0 then dbs[#dbs + 1] = db end
    end
    table.sort(dbs)
    return dbs
end

local function flush_mode_error(args)
    if #args > 2 then return err(E.SYNTAX) end
    local mode = args[2] and args[2]:lower()
    if mode and mode ~= "async" and mode ~= "sync" then return err(E.SYNTAX) end
end

C.flushdb = { arity = -1, flags = "write noscript", first_key = 0, last_key = 0, step = 0,
              fn = function(args)
    local bad = flush_mode_error(args)
    if bad then return bad end
    flush_db(K.db())
    return { ok = "OK" }
end }

C.flushall = { arity = -1, flags = "write noscript", first_key = 0, last_key = 0, step = 0,
               fn = function(args)
    local bad = flush_mode_error(args)
    if bad then return bad end
    local mine = K.db()
    for _, db in ipairs(databases()) do
        K.use_db(db)
        flush_db(db)
    end
    K.use_db(mine)
    return { ok = "OK" }
end }

---------------------------------------------------------------------------
-- MOVE key db, SWAPDB index1 index2: refused (errors.lua says why).

C.move = { arity = 3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
           fn = function() return err(E.MOVE_UNSUPPORTED) end }
C.swapdb = { arity = 3, flags = "write fast", first_key = 0, last_key = 0, step = 0,
             fn = function() return err(E.SWAPDB_UNSUPPORTED) end }

---------------------------------------------------------------------------
-- CONFIG GET parameter [parameter ...]: Redis 7's names (aliases
-- included), values from zkresp's own settings where it has them, else
-- what zkresp does (no eviction, no persistence of its own, no cluster).

local function cfg(name, default)
    local v = host.config and host.config[name]
    if v == nil then return default end
    return tostring(v)
end

local PARAMETERS = {
    { "databases", function() return cfg("databases", "16") end },
    { "maxmemory", function() return "0" end },
    { "maxmemory-policy", function() return "noeviction" end },
    { "timeout", function() return cfg("timeout", "0") end },
    { "save", function() return "" end },
    { "appendonly", function() return "no" end },
    { "notify-keyspace-events", function() return "" end },
    { "busy-reply-threshold", function() return cfg("script_time_limit", "5000") end },
    { "lua-time-limit", function() return cfg("script_time_limit", "5000") end },
    { "proto-max-bulk-len", function() return cfg("max_bulk_len", "536870912") end },
    { "maxclients", function() return cfg("maxclients", "10000") end },
    { "cluster-enabled", function() return "no" end },
    { "port", function() return cfg("port", "6379") end },
    { "bind", function() return cfg("bind", "127.0.0.1") end },
    { "replica-read-only", function() return "yes" end },
    { "lazyfree-lazy-user-flush", function() return "no" end },
}
local BY_NAME = {}
for _, p in ipairs(PARAMETERS) do BY_NAME[p[1]] = p end

-- Redis's configGetCommand: a name without glob characters is looked up
-- (any case) and answered under the name as sent; a pattern matches every
-- name, aliases included, in any case.  A parameter is answered once.
local function config_get(args)
    local out, seen = {}, {}
    local function add(name, p)
        if seen[p[1]] then return end
        seen[p[1]] = true
        out[#out + 1] = name
        out[#out + 1] = p[2]()
    end
    for i = 3, #args do
        local pat = args[i]
        if not pat:find("[%[%*%?]") then
            local p = BY_NAME[pat:lower()]
            if p then add(pat, p) end
        else
            local lower = pat:lower()
            for _, p in ipairs(PARAMETERS) do
                if U.glob(lower, p[1]) then add(p[1], p) end
            end
        end
    end
    return { map = out }
end

local CONFIG_HELP = {
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Refused: zkresp's settings are its command-line flags.",
    "RESETSTAT",
    "    Refused, as SET.",
    "REWRITE",
    "    Refused, as SET.",
}

C.config = { arity = -2, flags = "admin noscript loading stale", first_key = 0, last_key = 0, step = 0,
             subcommands = { get = -3, set = -4, resetstat = 2, rewrite = 2, help = 2 },
             fn = function(args)
    local sub = args[2]:lower()
    if sub == "get" then return config_get(args) end
    if sub == "help" then return E.help("config", CONFIG_HELP) end
    return err(E.CONFIG_READONLY)
end }

---------------------------------------------------------------------------
-- DEBUG SLEEP seconds: this client's reply waits; the sidecar serves the
-- others meanwhile (Redis's whole server sleeps).  As Redis's strtod, an
-- argument that is not a number sleeps 0.

C.debug = { arity = -2, flags = "admin noscript loading stale", first_key = 0, last_key = 0, step = 0,
            fn = function(args)
    local sub = args[2]
    local lsub = sub:lower()
    if lsub ~= "sleep" and lsub ~= "help" then return err(E.debug_unsupported(sub)) end
    if #args ~= (lsub == "sleep" and 3 or 2) then
        return err("ERR unknown subcommand or wrong number of arguments for '" .. sub .. "'. Try DEBUG HELP.")
    end
    if lsub == "help" then
        return E.help("debug", {
            "SLEEP <seconds>",
            "    Delay this client's reply by <seconds> (decimals allowed); the sidecar",
            "    serves the other clients meanwhile.",
        })
    end
    local s = tonumber((args[3]:match("^%s*([%+%-]?[%d%.]+[eE]?[%+%-]?%d*)"))) or 0
    if s > 0 then host.sleep(s * 1000) end
    return { ok = "OK" }
end }

---------------------------------------------------------------------------
-- MEMORY USAGE key [SAMPLES count] (MEMORY PURGE is the gateway's,
-- gateway/dispatch.c; the registry's MEMORY entry has both shapes): the
-- znode's bytes, its path and ZooKeeper's per-node bookkeeping (NODE_BYTES,
-- about what a server keeps for a node's stat and entry); null for a
-- missing key.

local NODE_BYTES = 120

local MEMORY_HELP = {
    "PURGE",
    "    Collect the Lua VM and give free memory back to the system.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return the bytes of <key>'s znode (its data, its path and ZooKeeper's",
    "    bookkeeping).",
}

C.memory = { part_of_c = true, arity = -2, flags = "readonly", first_key = 2, last_key = 2, step = 1,
             subcommands = { usage = -3, help = 2 },
             fn = function(args)
    if args[2]:lower() == "help" then return E.help("memory", MEMORY_HELP) end
    for i = 4, #args, 2 do
        if args[i]:lower() ~= "samples" or not args[i + 1] then return err(E.SYNTAX) end
        local n = U.to_int(args[i + 1])
        if not n then return err(E.NOT_INTEGER) end
        if n < 0 then return err(E.SYNTAX) end
    end
    local key = args[3]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return host.null end
        local data = rec.node and rec.node.dataLength or #tostring(rec.value or "") + 32
        return data + #rec.path + NODE_BYTES
    end)
end }

---------------------------------------------------------------------------
-- CLIENT HELP and COMMAND HELP: the gateway answers the rest of these two
-- in C (gateway/conncmd.c, dispatch.c) and passes HELP on, as MEMORY's.

local CLIENT_HELP = {
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>,",
    "    TYPE (NORMAL|PUBSUB), USER <username>, SKIPME (YES|NO).",
    "LIST [TYPE NORMAL|PUBSUB] [ID <id> [<id> ...]]",
    "    Return information about client connections.",
    "NO-EVICT (ON|OFF)",
    "    Accepted; nothing is evicted.",
    "NO-TOUCH (ON|OFF)",
    "    Accepted; nothing is touched.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set the client's library name or version, shown by CLIENT LIST and CLIENT INFO.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
}

local COMMAND_HELP = {
    "(no subcommand)",
    "    Return details about all commands.",
    "COUNT",
    "    Return the total number of commands.",
    "DOCS [<command-name> ...]",
    "    Return documentary information about commands; all of them without names.",
    "INFO [<command-name> ...]",
    "    Return details about the named commands; all of them without names.",
}

C.client = { part_of_c = true, arity = -2, flags = "noscript loading stale", first_key = 0, last_key = 0,
             step = 0, subcommands = { help = 2 },
             fn = function() return E.help("client", CLIENT_HELP) end }

C.command = { part_of_c = true, arity = -1, flags = "loading stale", first_key = 0, last_key = 0, step = 0,
              subcommands = { help = 2 },
              fn = function() return E.help("command", COMMAND_HELP) end }

return C
