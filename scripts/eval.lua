-- eval.lua — EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD|EXISTS|
-- FLUSH|KILL, with Redis 7.0's replies, conversions and error texts.
--
--   EVAL body numkeys key... arg...
--     -> compile (cached by SHA-1 for every connection, and known to every
--        sidecar through ZooKeeper: script_cache.lua)
--     -> txn.script(KEYS): the keys' local queues, then the script runs in
--        buffered mode (txn.lua): redis.call dispatches to the same command
--        table as the top level, its reads recorded, its writes buffered
--     -> the reply is converted, then ONE multi commits; a conflict re-runs
--        the script from the start.  A script that fails, or runs past its
--        time or memory cap (sandbox.lua), commits nothing.

local K = require "keyspace"
local T = require "txn"
local E = require "errors"
local U = require "util"
local SB = require "sandbox"
local L51 = require "lua51_errors"
-- Loaded at start: a machine without Debian's lua-cjson fails there, loudly.
local CJSON = require "lua_cjson"
-- the largest text a script's cjson.encode may build: its memory cap
CJSON.limit = function()
    local c = SB.context()
    return c and c.mem_limit_kb and c.mem_limit_kb * 1024
end
local sha1 = require "sha1"
local SC = require "script_cache"

SB.add_signal(K.is_retry)
SB.add_signal(K.is_abort)

local V = {}

local R = require "registry"

local NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."

local function err(text) return { err = text } end

local function clean(s)
    return (s:gsub("[\r\n]", " "))
end

---------------------------------------------------------------------------
-- Conversions

-- A float as Redis turns it into a reply integer (truncated; out of range
-- or NaN: the minimum, as the C cast gives on x86-64).
local function to_integer(x)
    if math.type(x) == "integer" then return x end
    if x ~= x or x >= 2^63 or x < -2^63 then return math.mininteger end
    return math.tointeger(x < 0 and math.ceil(x) or math.floor(x))
end

-- A script's value -> a reply (lua_host.h's reply values).  Only raw
-- access (rawget, next): the script's metamethods would run client code
-- after its caps are off.
-- The most values one script's reply may hold: a table that holds
-- itself twice, 40 levels deep, would be 2^40 of them (the conversion runs
-- after the script's caps are off).
V.REPLY_MAX_VALUES = 1024 * 1024
local reply_left = 0

local function to_reply(v, depth, resp)
    reply_left = reply_left - 1
    if reply_left < 0 then
        error(string.format("reply too large (more than %d values)", V.REPLY_MAX_VALUES), 0)
    end
    local tv = type(v)
    -- After redis.setresp(3) a boolean is a RESP3 boolean: #t/#f to a RESP3
    -- client, :1/:0 to a RESP2 one.
    if (v == true or v == false) and resp == 3 then return { bool = v } end
    if v == nil or v == false or v == host.null then return host.null end
    if v == true then return 1 end
    if tv == "number" then return to_integer(v) end
    if tv == "string" then return v end
    if tv ~= "table" then return host.null end
    if depth > 1000 then error("reached lua stack limit", 0) end
    local f = rawget(v, "err")
    if type(f) == "string" then return { err = clean(f) } end
    f = rawget(v, "ok")
    if type(f) == "string" then return { ok = clean(f) } end
    f = rawget(v, "double")
    if type(f) == "number" then return { double = f } end
    f = rawget(v, "map")
    if type(f) == "table" then
        local flat = {}
        for k, val in next, f do
            flat[#flat + 1] = to_reply(k, depth + 1, resp)
            flat[#flat + 1] = to_reply(val, depth + 1, resp)
        end
        return { map = flat }
    end
    f = rawget(v, "set")
    if type(f) == "table" then
        local list = {}
        for k in next, f do list[#list + 1] = to_reply(k, depth + 1, resp) end
        return { set = list }
    end
    local out, i = {}, 1
    while rawget(v, i) ~= nil do
        out[i] = to_reply(rawget(v, i), depth + 1, resp)
        i = i + 1
    end
    return out
end
local function convert(v, resp)
    reply_left = V.REPLY_MAX_VALUES
    return to_reply(v, 0, resp)
end
V.to_reply = convert

-- A command's reply -> the Lua value redis.call returns (resp: 2 or 3).
-- Errors come back as {err = text}; the caller raises or returns them.
local function to_lua(r, resp)
    if r == nil or r == false or r == host.null then
        if resp == 3 then return nil end
        return false
    end
    if r == true then return 1 end
    local tr = type(r)
    if tr == "number" then return to_integer(r) end
    if tr == "string" then return r end
    if tr ~= "table" then return false end
    if r.null_array then -- a null array (*-1) is a null too
        if resp == 3 then return nil end
        return false
    end
    if r.err then return { err = r.err } end
    if r.ok then return { ok = r.ok } end
    if r.null_array then
        if resp == 3 then return nil end
        return false
    end
    if r.bool ~= nil then
        if resp == 3 then return r.bool end
        return r.bool and 1 or false
    end
    if r.pairs then
        if resp == 3 then
            local out = {}
            for i = 1, #r.pairs - 1, 2 do
                out[#out + 1] = { to_lua(r.pairs[i], resp), to_lua(r.pairs[i + 1], resp) }
            end
            return out
        end
        r = r.pairs
    end
    if r.double then
        if resp == 3 then return { double = r.double } end
        return string.format("%.17g", r.double)
    end
    if r.map then
        if resp == 3 then
            local m = {}
            for i = 1, #r.map, 2 do m[to_lua(r.map[i], resp)] = to_lua(r.map[i + 1], resp) end
            return { map = m }
        end
        r = r.map
    elseif r.set then
        if resp == 3 then
            local s = {}
            for _, m in ipairs(r.set) do s[to_lua(m, resp)] = true end
            return { set = s }
        end
        r = r.set
    end
    local out, i = {}, 1
    while r[i] ~= nil do
        local v = to_lua(r[i], resp)
        if v == nil then v = false end
        out[i] = v
        i = i + 1
    end
    return out
end
V.to_lua = to_lua

---------------------------------------------------------------------------
-- The redis table

local function raise(text) error({ err = text }, 0) end

-- redis.call's arguments: strings, or numbers formatted as Redis does.
local function argument(v)
    local tv = type(v)
    if tv == "string" then return v end
    if tv == "number" then
        if math.type(v) == "integer" then return string.format("%d", v) end
        return string.format("%.17g", v)
    end
    return nil
end

local function execute(...)
    local n = select("#", ...)
    if n == 0 then return err("ERR Please specify at least one argument for this redis lib call") end
    local args = {}
    for i = 1, n do
        local a = argument((select(i, ...)))
        if not a then return err("ERR Lua redis lib command arguments must be strings or integers") end
        args[i] = a
    end
    local spec = R.commands[args[1]:lower()]
    if args[1]:lower() == "select" then return err(E.SELECT_IN_SCRIPT) end
    -- As Redis's scriptCall: a container's subcommand is the command looked
    -- up (unknown, or its own arity); then noscript.  The gateway's own
    -- commands cannot run here: unknown, but for those Redis keeps from
    -- scripts anyway.
    if spec and spec.in_c and not R.has_flag(spec, "noscript") then spec = nil end
    if not spec then return err("ERR Unknown Redis command called from script") end
    local arity = spec.arity
    if spec.subcommands and n >= 2 then
        arity = spec.subcommands[args[2]:lower()]
        if math.type(arity) ~= "integer" then return err("ERR Unknown Redis command called from script") end
    end
    if (arity > 0 and n ~= arity) or (arity < 0 and n < -arity) then
        return err("ERR Wrong number of args calling Redis command from script")
    end
    if R.has_flag(spec, "noscript") then
        return err("ERR This Redis command is not allowed from script")
    end
    local c = SB.context()
    if c and c.ro and R.has_flag(spec, "write") then
        return err("ERR Write commands are not allowed from read-only scripts.")
    end
    local e = R.each_key(spec, args, K.key_error)
    if e then return err(e) end
    -- The policy's authorize sees what a script runs too, as Redis's ACLs do.
    local denied = require("hooks").authorize(spec.name, spec, args)
    if denied then return err(denied) end
    return spec.fn(args)
end

local function call(raising, ...)
    -- Inside a callback a C function runs (string.gsub's replacement,
    -- table.sort's comparator, a metamethod) the command's coroutine cannot
    -- wait for ZooKeeper: a clear error, the same whether or not the call
    -- would have waited (Redis runs it; zkresp's calls yield).
    if not coroutine.isyieldable() then
        if raising then raise(E.CALL_IN_C_CALLBACK) end
        return { err = E.CALL_IN_C_CALLBACK }
    end
    SB.user(false)
    local ok, r = pcall(execute, ...)
    SB.user(true)
    -- A retry of the whole script, an abort, or a bug: on up.
    if not ok then
        SB.raised(r)
        error(r, 0)
    end
    local c = SB.context()
    local v = to_lua(r, c and c.resp or 2)
    if type(v) == "table" and v.err and raising then raise(v.err) end
    return v
end

local LEVELS = { [0] = "debug", [1] = "info", [2] = "info", [3] = "warn" }

local api = {
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
    REPL_NONE = 0, REPL_SLAVE = 1, REPL_REPLICA = 1, REPL_AOF = 2, REPL_ALL = 3,
}
-- The version HELLO and INFO answer; its number as Redis's: 0x00MMmmpp.
api.REDIS_VERSION = host.redis_version
do
    local maj, min, patch = api.REDIS_VERSION:match("^(%d+)%.(%d+)%.(%d+)")
    api.REDIS_VERSION_NUM = (tonumber(maj) << 16) | (tonumber(min) << 8) | tonumber(patch)
end
api.call = function(...) return call(true, ...) end
api.pcall = function(...) return call(false, ...) end

-- A bad argument is an error reply the script may return (Redis's
-- luaPushError), not an error raised.
local BAD_ARGS = "ERR wrong number or type of arguments"

api.error_reply = function(msg)
    if type(msg) ~= "string" then return { err = BAD_ARGS } end
    msg = msg:gsub("^%-", "")
    if not msg:find(" ", 1, true) then msg = "ERR " .. msg end
    return { err = msg }
end

api.status_reply = function(msg)
    if type(msg) ~= "string" then return { err = BAD_ARGS } end
    return { ok = msg }
end

api.sha1hex = function(...)
    if select("#", ...) ~= 1 then raise("ERR wrong number of arguments") end
    local s = ...
    return sha1.hex(argument(s) or "")
end

api.log = function(level, ...)
    if select("#", ...) < 1 then raise("ERR redis.log() requires two arguments or more.") end
    if math.type(level) == "float" then level = math.tointeger(level) end
    if not LEVELS[level] then raise("ERR Invalid debug level.") end
    local parts = {}
    for i = 1, select("#", ...) do
        local v = select(i, ...)
        parts[i] = argument(v) or tostring(v)
    end
    host.log(LEVELS[level], "script: " .. table.concat(parts, " "))
end

api.setresp = function(v)
    if v ~= 2 and v ~= 3 then raise("ERR RESP version must be 2 or 3.") end
    local c = SB.context()
    if c then c.resp = math.tointeger(v) end
end

api.set_repl = function() end
api.replicate_commands = function() return true end
api.breakpoint = function() return false end
api.debug = function() end

local env
local function environment()
    if not env then
        env = SB.env(api, CJSON.new(), require "compat_bit", require "compat_struct")
    end
    return env
end

---------------------------------------------------------------------------
-- Running a script

-- The line of client code an error came from: the innermost frame of the
-- script's chunk.
local function user_line()
    if not (debug and debug.getinfo) then return 1 end
    for level = 2, 200 do
        local info = debug.getinfo(level, "Sl")
        if not info then break end
        if info.source == SB.CHUNK then return info.currentline end
    end
    return 1
end

-- The message handler of the script's call: it runs before the script's
-- frames unwind, so the caps stay on (the script's __close handlers run in
-- that unwinding); a kill in here shows as host.killed().
local function handler(e)
    if SB.is_signal(e) and not SB.is_kill(e) then return e end
    return { failed = e, line = user_line() }
end

local KILLED = {
    time = function(c)
        return string.format("ERR Script ran past the time limit of %d ms and was aborted, " ..
                             "nothing was written", c.time_limit)
    end,
    memory = function(c)
        return string.format("ERR Script exceeded the memory limit of %d KB and was aborted, " ..
                             "nothing was written", c.mem_limit_kb)
    end,
    killed = function() return "ERR Script killed by user with SCRIPT KILL..." end,
}

local function with_origin(text, c, line)
    return { err = clean(string.format("%s script: %s, on @user_script:%d.", text, c.sha, line)) }
end

local function format_error(f, c)
    local e = f.failed
    local text
    if type(e) == "table" and type(rawget(e, "err")) == "string" then
        text = rawget(e, "err")
    elseif type(e) == "string" then
        text = "ERR " .. L51.rewrite(e, f.line)
    elseif math.type(e) then
        -- Lua 5.1's error() gives a number the position a string gets.
        text = string.format("ERR user_script:%d: %s", f.line, SB.num2str(e))
    elseif e == nil then
        text = "ERR nil"
    else
        text = "ERR unknown error"
    end
    return with_origin(text, c, f.line)
end

local function limits()
    local cfg = host.config or {}
    local t = tonumber(cfg.script_time_limit)
    if not t or t <= 0 then t = 5000 end
    local m = tonumber(cfg.script_memory_limit)
    if not m or m <= 0 then m = 64 * 1024 * 1024 end
    return math.tointeger(t) or math.floor(t), math.max(1, m // 1024)
end
V.limits = limits

-- A script's shebang line, Redis 7's "#!lua [flags=f1,f2]": its flags
-- (a set) and the body to compile, the line cut but its line feed kept so
-- that line numbers stay the user's; false and the error for a bad one;
-- nil flags without one (Redis's compatibility mode).
local SHEBANG_FLAGS = { ["no-writes"] = true, ["allow-oom"] = true, ["allow-stale"] = true,
                        ["no-cluster"] = true, ["allow-cross-slot-keys"] = true }

local function shebang(body)
    if body:sub(1, 2) ~= "#!" then return nil, body end
    local nl = body:find("\n", 1, true)
    if not nl then return false, "ERR Invalid script shebang" end
    local parts = {}
    for w in body:sub(1, nl - 1):gmatch("%S+") do parts[#parts + 1] = w end
    if parts[1] ~= "#!lua" then
        return false, "ERR Unexpected engine in script shebang: " .. (parts[1] or "")
    end
    local flags = {}
    for j = 2, #parts do
        local list = parts[j]:match("^flags=(.*)$")
        if not list then return false, "ERR Unknown lua shebang option: " .. parts[j] end
        for f in list:gmatch("[^,]+") do
            if not SHEBANG_FLAGS[f] then return false, "ERR Unexpected flag in script shebang: " .. f end
            flags[f] = true
        end
    end
    return flags, body:sub(nl)
end

-- The shebang flags of a compiled script (its function as the key).
local script_flags = setmetatable({}, { __mode = "k" })

-- Compiles body; returns the function or nil, the error.
local function compile(body)
    local flags, text = shebang(body)
    if flags == false then return nil, text end
    local f, e = load(text, SB.CHUNK, "t", environment())
    if not f then
        -- Lua 5.1 quotes the end of the script as it quotes every token
        e = tostring(e):gsub(" near <eof>$", " near '<eof>'")
        return nil, "ERR Error compiling script (new function): " .. clean(e)
    end
    script_flags[f] = flags
    return f
end
V.compile = compile

-- EVAL's numkeys, checked before the script is compiled or looked up (as
-- Redis): n, or nil and the error.
local function numkeys(args)
    local n = U.to_int(args[3])
    if not n then return nil, E.NOT_INTEGER end
    if n > #args - 3 then return nil, "ERR Number of keys can't be greater than number of args" end
    if n < 0 then return nil, "ERR Number of keys can't be negative" end
    return n
end

-- The cached script of sha (script_cache.lua): this sidecar's, else the
-- one in ZooKeeper, compiled and kept; nil when there is none.  A sha that
-- is not 40 hex digits names no script (Redis looks no further either).
local function lookup(sha)
    if #sha ~= 40 then return nil end
    SC.verify()
    local e = SC.get(sha)
    if e then return e end
    -- (checked on a miss only: every cached sha is one; the pattern costs
    -- about 7K instructions, 2% of a SET NX PX + release script pair)
    if sha:find("[^0-9a-f]") then return nil end
    local body, token = SC.fetch(sha)
    if not body then return nil end
    local fn = compile(body)
    if not fn then return nil end -- not a script this sidecar could have stored
    return SC.put(sha, body, fn, "shared", token)
end
V.lookup = lookup

-- entry: the cached script EVALSHA runs (nil for EVAL).  A FLUSH made
-- through another sidecar that this one learns of while the script runs
-- (the watch of script_cache.lua fires before any later ZooKeeper answer
-- comes in) makes it run again, looking the sha up again: NOSCRIPT if it
-- is gone.
--
-- find(), which may read ZooKeeper (the script cache's generation, a
-- script loaded through another sidecar), answers fn, sha and entry, or nil
-- and the error: it runs once the keys' queues are taken, so that a
-- command on one of them pipelined after the script waits for it.
local function run(args, find, ro)
    local n, nerr = numkeys(args)
    if not n then return err(nerr) end
    local keys = {}
    for i = 1, n do
        keys[i] = args[3 + i]
        local e = K.key_error(keys[i])
        if e then return err(e) end
    end
    local tl, ml = limits()
    local c = { ro = ro, time_limit = tl, mem_limit_kb = ml }
    local guard <close> = SB.enter(c)
    local fn, sha, entry
    return T.script(keys, function(t)
        if not fn then
            fn, sha, entry = find()
            if not fn then return err(sha), false end
            local flags = script_flags[fn]
            if flags then
                -- a script with a shebang says whether it writes
                if ro and not flags["no-writes"] then
                    return err("ERR Can not execute a script with write flag using *_ro command."), false
                end
                c.ro = ro or flags["no-writes"]
            end
            c.sha = sha
        end
        if entry then
            if SC.peek(sha) ~= entry then
                entry = lookup(sha)
                if not entry then return err(NOSCRIPT), false end
                fn = entry.fn
            end
            t.still = function() return SC.peek(sha) == entry end
        end
        c.resp, c.signal = 2, nil
        c.keys = table.move(args, 4, 3 + n, 1, {})
        c.argv = table.move(args, 4 + n, #args, 1, {})
        -- The caps interrupt client code only, and only inside this xpcall.
        local ok, r = xpcall(function()
            SB.user(true)
            local res = fn()
            SB.user(false)
            return res
        end, handler)
        SB.user(false)
        -- A kill is what the script gets, whatever error the unwinding
        -- left (one from a __close handler, "not enough memory", an error
        -- in the handler).
        local why = SB.killed()
        if why then
            local line = not ok and type(r) == "table" and rawget(r, "line")
            return with_origin(KILLED[why](c), c, math.type(line) and line or 1), false
        end
        if t.still and not t.still() then K.retry(0) end
        -- a signal of redis.call's ends the run, whatever error replaced it
        if c.signal then error(c.signal, 0) end
        if not ok then
            if SB.is_signal(r) then error(r, 0) end
            if type(r) ~= "table" or rawget(r, "failed") == nil and rawget(r, "line") == nil then
                r = { failed = r, line = 1 } -- not through the handler ("not enough memory")
            end
            return format_error(r, c), false
        end
        local cok, reply = pcall(convert, r, c.resp)
        if not cok then
            return { err = clean("ERR " .. tostring(reply) .. " script: " .. sha .. ", on @user_script:1.") }, false
        end
        return reply
    end)
end
V.run = run

local function eval(ro)
    return function(args)
        local _, nerr = numkeys(args)
        if nerr then return err(nerr) end
        local body = args[2]
        local e, sha = SC.lookup_body(body)
        if not e then
            local fn, cerr = compile(body)
            if not fn then return err(cerr) end
            e = SC.put(sha, body, fn, "eval")
        end
        return run(args, function()
            -- (publish_later may read ZooKeeper: inside the keys' queues)
            SC.publish_later(sha, body)
            return e.fn, sha
        end, ro)
    end
end

local function evalsha(ro)
    return function(args)
        -- as Redis: a sha of the wrong length, then numkeys, then the lookup
        if #args[2] ~= 40 then return err(NOSCRIPT) end
        local _, nerr = numkeys(args)
        if nerr then return err(nerr) end
        return run(args, function()
            local e = lookup(args[2]:lower())
            if not e then return nil, NOSCRIPT end
            return e.fn, e.sha, e
        end, ro)
    end
end

---------------------------------------------------------------------------
-- SCRIPT

local SCRIPT_HELP = {
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache, on every sidecar.",
    "KILL",
    "    Kill the currently executing Lua scripts.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
}

local function script(args)
    local sub = args[2]:lower()
    if sub == "help" then return E.help("script", SCRIPT_HELP) end
    if sub == "load" then
        local body = args[3]
        local known, sha = SC.lookup_body(body)
        local fn, cerr = known and known.fn, nil
        if not fn then fn, cerr = compile(body) end
        if not fn then return err(cerr) end
        SC.publish(sha, body)
        SC.put(sha, body, fn, "load")
        return sha
    elseif sub == "exists" then
        SC.catch_up()
        local out = {}
        for i = 3, #args do out[i - 2] = lookup(args[i]:lower()) and 1 or 0 end
        return out
    elseif sub == "flush" then
        if #args > 3 or (#args == 3 and not (U.is(args[3], "sync") or U.is(args[3], "async"))) then
            return err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
        end
        SC.flush()
        return { ok = "OK" }
    else -- "kill" (the registry admits only the five subcommands, each with its arity)
        -- Every script paused between slices (sandbox.lua): Redis has one
        -- at most.  Nothing a script wrote is committed before it ends, so
        -- there is no UNKILLABLE case.
        if host.kill_scripts() > 0 then return { ok = "OK" } end
        return err("NOTBUSY No scripts in execution right now.")
    end
end

local FLAGS = "noscript skip_monitor may_replicate no_mandatory_keys stale movablekeys"

-- (numkeys: where the count of keys is, registry.lua's R.names_keys)
local function spec(fn, flags)
    return { fn = fn, arity = -3, flags = flags, first_key = 0, last_key = 0, step = 0, numkeys = 2 }
end

return {
    eval = spec(eval(false), FLAGS),
    evalsha = spec(evalsha(false), FLAGS),
    eval_ro = spec(eval(true), "readonly " .. FLAGS),
    evalsha_ro = spec(evalsha(true), "readonly " .. FLAGS),
    script = { fn = script, arity = -2, flags = "noscript", first_key = 0, last_key = 0, step = 0,
               subcommands = { load = 3, exists = -3, flush = -2, kill = 2, help = 2 } },
}
