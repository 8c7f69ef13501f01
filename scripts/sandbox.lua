-- sandbox.lua — the environment client scripts (EVAL) run in, and their
-- time and memory caps.
--
--   env = sandbox.env(redis_api)   one environment for every script; each
--                                  run's KEYS and ARGV come from its
--                                  coroutine's context (sandbox.enter)
--   sandbox.enter(ctx)             makes ctx (keys, argv, limits) the running
--                                  coroutine's script context and arms the
--                                  caps; returns a to-be-closed guard
--   sandbox.user(on)               marks whether client code runs (the caps
--                                  only interrupt client code, never the
--                                  system code under redis.call)
--   sandbox.is_signal(e)           errors scripts must not catch
--
-- What scripts see is Redis's Lua 5.1 API under Lua 5.4: the base functions
-- (with error, pcall, xpcall, tostring, setmetatable, getmetatable, rawset,
-- load and collectgarbage wrapped), `unpack`, string (no dump), table,
-- math (max/min take numeric strings), os.clock, bit, cjson, redis.  No io,
-- os beyond clock, package, require, debug, coroutine, dofile, loadfile,
-- string.dump; load takes text only.  Globals are read-only, and so are the
-- library tables and the string metatable: scripts share them with each
-- other and the string metatable with the system layer.
--
-- The caps: a count hook on the script's coroutine (host.caps, in C since
-- it runs every few instructions) checks, every HOOK_COUNT instructions of
-- client code, the growth of the VM's memory since the script started (and
-- every TIME_EVERY checks the time since then); past either it raises a
-- Kill, which pcall inside the script cannot catch.  The memory measure is
-- the whole VM's, so it is approximate; a hard bound needs a limit in the
-- host's allocator.  Nothing is committed before a script ends (txn.lua),
-- so killing one writes nothing.

local U = require "util"

local SB = {}

SB.HOOK_COUNT = 8

local Kill = {}
SB.Kill = Kill
local contexts = U.per_command() -- coroutine -> ctx
SB.contexts = contexts

-- Other signals (txn.lua's retry/abort) register a test here.
local signal_tests = {}
function SB.add_signal(test) signal_tests[#signal_tests + 1] = test end

function SB.is_signal(e)
    if getmetatable(e) == Kill then return true end
    for _, test in ipairs(signal_tests) do
        if test(e) then return true end
    end
    return false
end

local function ctx()
    return contexts[coroutine.running()]
end
SB.context = ctx

local READONLY = "Attempt to modify a readonly table"
local protected = setmetatable({}, { __mode = "k" })

local function readonly(real, index)
    local p = setmetatable({}, {
        __index = index or real,
        __newindex = function() error(READONLY, 2) end,
        __metatable = false,
    })
    protected[p] = true
    return p
end

local function number_arg(fname)
    return function(...)
        local n = select("#", ...)
        local args = { ... }
        for i = 1, n do
            local v = tonumber(args[i])
            if v == nil then
                error(string.format("bad argument #%d to '%s' (number expected, got %s)",
                                    i, fname, type(args[i]) == "nil" and "no value" or type(args[i])), 2)
            end
            args[i] = v
        end
        return math[fname](table.unpack(args, 1, n))
    end
end

-- Lua 5.1's number to string (LUAI_NUMFFORMAT "%.14g").
local function num2str(x)
    if math.type(x) == "float" then
        if x ~= x then return (string.format("%.14g", x):gsub("^%-?", "-")) end
        return string.format("%.14g", x)
    end
    return tostring(x)
end
SB.num2str = num2str

local function memory_limit_kb()
    local c = ctx()
    return c and c.mem_limit_kb
end

-- string.rep guarded against one allocation bigger than the memory cap.
local real_rep = string.rep
local function rep(s, n, sep)
    local lim = memory_limit_kb()
    if lim and type(n) == "number" and n > 0 and
       (#tostring(s) + #tostring(sep or "")) * n > lim * 1024 then
        SB.kill(ctx(), "memory")
    end
    return real_rep(s, n, sep)
end

local string_lib = {}
for k, v in pairs(string) do string_lib[k] = v end
string_lib.dump = nil
string_lib.rep = rep
SB.string_lib = string_lib

-- Method calls on strings ("x"):rep(n) go through the string metatable,
-- shared with the system layer: point it at the same functions (rep only
-- differs while a script runs) and never hand it to a script.
do
    local mt = getmetatable("")
    -- (Loaded again, as the specs' model does per sidecar: the latest wins.)
    if mt and (mt.__index == string or rawget(mt, "zkresp_sandbox")) then
        mt.zkresp_sandbox = true
        local idx = {}
        for k, v in pairs(string) do idx[k] = v end
        idx.rep = rep
        idx.dump = nil
        mt.__index = idx
    end
end

-- The kill: a signal no script can catch.
function SB.kill(c, why)
    -- From here on the hook stays quiet: the error handlers that run next
    -- are the system's.
    if c then c.user = false end
    host.caps()
    error(setmetatable({ why = why, ctx = c }, Kill), 0)
end

-- Memory is looked at on every hook call (cheap), so that a script
-- doubling a string in a loop overshoots the cap by a few doublings at
-- most; the clock every TIME_EVERY calls.
SB.TIME_EVERY = 128
local gccount = collectgarbage

-- What the hook calls past a cap ("memory" or "time").
local function kill(why) SB.kill(ctx(), why) end

-- ctx: {keys, argv, time_limit (ms), mem_limit_kb, ...}.
function SB.enter(c)
    local co = coroutine.running()
    -- The time cap counts the script's own running time: host.busy() stops
    -- while its coroutine waits (for ZooKeeper, which may be a reconnect),
    -- since the VM serves everyone else meanwhile.
    c.start = host.busy()
    c.time_deadline = c.start + (c.time_limit or 5000)
    c.mem0 = collectgarbage("count")
    c.user = false
    contexts[co] = c
    return setmetatable({}, { __close = function()
        if contexts[co] == c then contexts[co] = nil end
        host.caps()
    end })
end

-- The hook is set only while client code runs: the system code under
-- redis.call and the commit run at full speed.
function SB.user(on)
    local c = ctx()
    if not c then return end
    c.user = on
    if on then
        host.caps(c.time_deadline, c.mem0, c.mem_limit_kb or 0, kill, SB.HOOK_COUNT, SB.TIME_EVERY)
    else
        host.caps()
    end
    -- Back from redis.call: the count restarts with each call, so a loop
    -- of calls is looked at here.
    if on and c.start then
        if host.busy() > c.time_deadline then SB.kill(c, "time") end
        if c.mem_limit_kb and gccount("count") - c.mem0 > c.mem_limit_kb then
            gccount("collect")
            if gccount("count") - c.mem0 > c.mem_limit_kb then SB.kill(c, "memory") end
        end
    end
end

function SB.env(redis_api, cjson_lib, bit_lib)
    local env = {}
    local rawpcall, rawxpcall, rawerror = pcall, xpcall, error

    env.assert = assert
    env.ipairs = ipairs
    env.next = next
    env.pairs = pairs
    env.rawequal = rawequal
    env.rawget = rawget
    env.rawlen = rawlen
    env.select = select
    env.tonumber = tonumber
    env.type = type
    env.unpack = table.unpack
    env._VERSION = "Lua 5.1"

    -- tostring of a float as 5.1; other values as 5.4.
    env.tostring = function(v)
        if math.type(v) == "float" then return num2str(v) end
        return tostring(v)
    end

    -- The real error: a Lua wrapper would lose the script's frame in
    -- `return error(...)` (a tail call), and with it the position.
    env.error = error

    -- As in Redis 7.0: an error table {err = text} (what redis.call raises)
    -- reaches the script's pcall as its text.
    env.pcall = function(f, ...)
        local r = table.pack(rawpcall(f, ...))
        if not r[1] then
            local e = r[2]
            if SB.is_signal(e) then rawerror(e, 0) end
            if type(e) == "table" and type(e.err) == "string" then r[2] = e.err end
        end
        return table.unpack(r, 1, r.n)
    end

    env.xpcall = function(f, handler, ...)
        local r = table.pack(rawxpcall(f, function(e)
            if SB.is_signal(e) then return e end
            return handler(e)
        end, ...))
        if not r[1] and SB.is_signal(r[2]) then rawerror(r[2], 0) end
        return table.unpack(r, 1, r.n)
    end

    env.rawset = function(t, k, v)
        if protected[t] then rawerror(READONLY, 0) end
        return rawset(t, k, v)
    end

    env.setmetatable = function(t, mt)
        if protected[t] then rawerror(READONLY, 0) end
        return setmetatable(t, mt)
    end

    local string_mt -- set below, once the string proxy exists
    env.getmetatable = function(v)
        if type(v) == "string" then return string_mt end
        if protected[v] then return false end
        return getmetatable(v)
    end

    -- Text chunks only, in the script environment unless one is given.
    env.load = function(chunk, name, _, e)
        return load(chunk, name, "t", e or env)
    end

    local GC_OK = { count = true, collect = true, step = true }
    env.collectgarbage = function(opt, ...)
        opt = opt or "collect"
        if not GC_OK[opt] then rawerror("collectgarbage('" .. tostring(opt) .. "') is not allowed in scripts", 2) end
        return collectgarbage(opt, ...)
    end

    local sp = readonly(string_lib)
    string_mt = readonly({ __index = sp })
    env.string = sp

    local tbl = {}
    for k, v in pairs(table) do tbl[k] = v end
    env.table = readonly(tbl)

    local m = {}
    for k, v in pairs(math) do m[k] = v end
    m.max = number_arg("max")
    m.min = number_arg("min")
    env.math = readonly(m)

    env.os = readonly({ clock = os.clock })
    env.bit = readonly(bit_lib)
    env.cjson = readonly(cjson_lib)
    env.redis = readonly(redis_api)

    -- Globals that do not exist, and KEYS/ARGV from the running script.
    local proxy = readonly(env, function(_, k)
        local v = env[k]
        if v ~= nil then return v end
        if k == "KEYS" or k == "ARGV" then
            local c = ctx()
            if c then return k == "KEYS" and c.keys or c.argv end
        end
        rawerror("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end)
    env._G = proxy
    return proxy
end

return SB
