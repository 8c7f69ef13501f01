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
--   sandbox.busy_reply(name, args) Redis's -BUSY answer while another
--                                  client's script is running past a slice
--
-- What scripts see is Redis's Lua 5.1 API under Lua 5.4: the base functions
-- (with error, pcall, xpcall, tostring, setmetatable, getmetatable, rawset,
-- load and collectgarbage wrapped), `unpack`, string (no dump), table,
-- math (max/min take numeric strings; random is Redis's rand48, not the
-- system's generator), os.clock, bit, struct, cjson, redis.  No io,
-- os beyond clock, package, require, debug, coroutine, dofile, loadfile,
-- string.dump; load takes text only.  Globals are read-only, and so are the
-- library tables and the string metatable: scripts share them with each
-- other and the string metatable with the system layer.
--
-- The caps: a count hook on the script's coroutine (host.caps, in C since
-- it runs every few instructions) watches client code: every TIME_EVERY
-- calls it compares the script's own running time (host.busy(), which
-- leaves out the time it waited for ZooKeeper or was paused) with the time
-- cap, and after SLICE_MS of running it pauses the script so that the loop
-- serves everyone else; meanwhile other clients' commands are answered
-- Redis's -BUSY and SCRIPT KILL kills it.  While client code runs, the VM's
-- allocator refuses to grow past the memory cap (one C call included).
-- A kill ("time", "memory", "killed") is sticky: the host raises it again
-- in any client function that would run afterwards, so neither the
-- script's pcall nor its __close handlers outlive it.  Scripts cannot have
-- finalizers at all: as in Lua 5.1, a table's __gc does nothing.  System
-- code never looks into a script's values through metamethods (it uses
-- rawget/next), so client code never runs outside the caps.  Nothing is
-- committed before a script ends (txn.lua), so killing one writes nothing.

local U = require "util"
local L51 = require "lua51_errors"

local SB = {}

SB.HOOK_COUNT = 8

-- The chunk name of client scripts: the host tells client functions from
-- system ones by it (and by not starting with "@", see env.load).
SB.CHUNK = "@user_script"

SB.BUSY = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."

local Kill = {}
SB.Kill = Kill
local contexts = U.per_command() -- coroutine -> ctx
SB.contexts = contexts

-- Other signals (txn.lua's retry/abort) register a test here.
local signal_tests = {}
function SB.add_signal(test) signal_tests[#signal_tests + 1] = test end

-- Signals are the system's tables; a script's error object is only looked
-- at raw (its metatable's own metatable could hold an __eq of the script's).
function SB.is_signal(e)
    if type(e) ~= "table" then return false end
    local mt = getmetatable(e)
    if type(mt) ~= "table" or getmetatable(mt) ~= nil then return false end
    if rawequal(mt, Kill) then return true end
    for _, test in ipairs(signal_tests) do
        if test(e) then return true end
    end
    return false
end

function SB.is_kill(e)
    return type(e) == "table" and rawequal(getmetatable(e), Kill)
end

-- redis.call's system code raised e: a signal (a retry, an abort) is kept
-- in the running script's context, so that no pcall of the script goes on
-- from it and the run ends with it (eval.lua), whatever error replaced it.
function SB.raised(e)
    local c = contexts[coroutine.running()]
    if c and not c.signal and SB.is_signal(e) and not SB.is_kill(e) then c.signal = e end
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
        if n == 0 then error("bad argument #1 to '" .. fname .. "' (number expected, got no value)", 2) end
        for i = 1, n do
            local v = tonumber(args[i])
            if v == nil then
                error(string.format("bad argument #%d to '%s' (number expected, got %s)",
                                    i, fname, type(args[i])), 2)
            end
            args[i] = v
        end
        return math[fname](table.unpack(args, 1, n))
    end
end

-- A function of Lua 5.1 whose first argument must be a table (ipairs,
-- pairs, unpack, table.insert...): its error for anything else, in 5.1's
-- words (Lua 5.4's ipairs takes any value and fails later, indexing it;
-- its pairs names 'for iterator'; its unpack fails on the length).
local function table_arg(fname, f)
    return function(...)
        local t = ...
        if type(t) ~= "table" then
            error(string.format("bad argument #1 to '%s' (table expected, got %s)", fname,
                                select("#", ...) == 0 and "no value" or type(t)), 2)
        end
        return f(...)
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

-- math.random and math.randomseed as Redis 7's: its rand48 (a 48-bit
-- linear congruential generator, libc's lrand48, from lrand48's initial
-- state), one for every script of this VM and never reset, as Redis's.
-- The VM's own generator is the system layer's (SRANDMEMBER, SPOP, the
-- retries' jitter): a script's randomseed must not make it predictable.
local RAND48_MAX = 0x7fffffff
local rand48 = 0x1234ABCD330E
local function rand48_seed(seed) return ((seed & 0xffffffff) << 16) | 0x330E end
local function lrand48()
    rand48 = (0x5DEECE66D * rand48 + 0xB) & 0xffffffffffff
    return rand48 >> 17
end

-- Lua 5.1's luaL_checkint: a number (or numeric string) cut toward 0, as a
-- C int.
local function int_arg(v, i, fname)
    local n = tonumber(v)
    if n == nil then
        error(string.format("bad argument #%d to '%s' (number expected, got %s)", i, fname,
                            v == nil and "no value" or type(v)), 3)
    end
    n = math.tointeger(n) or (n == n and math.tointeger(n >= 0 and math.floor(n) or math.ceil(n))) or 0
    return ((n & 0xffffffff) ~ 0x80000000) - 0x80000000
end

local function random(...)
    local n = select("#", ...)
    local r = (lrand48() % RAND48_MAX) / RAND48_MAX
    if n == 0 then return r end
    local l, u = 1, int_arg((...), 1, "random")
    if n == 2 then l, u = u, int_arg((select(2, ...)), 2, "random") end
    if n > 2 then error("wrong number of arguments", 2) end
    if l > u then error(string.format("bad argument #%d to 'random' (interval is empty)", n), 2) end
    return math.floor(r * (u - l + 1)) + l
end

local function randomseed(seed)
    rand48 = rand48_seed(int_arg(seed, 1, "randomseed"))
end

local function memory_limit_kb()
    local c = ctx()
    return c and c.mem_limit_kb
end

-- string.rep guarded against one allocation bigger than the memory cap.
-- The stock function is called as a field, with the script's very
-- arguments, so that its errors say "bad argument #1 to 'rep' (... got no
-- value)" as Redis's do.
local stock = { rep = string.rep }
local function rep(...)
    local s, n, sep = ...
    -- nothing to repeat: the stock function would still loop n times
    if type(n) == "number" and n > 0 and (s == "" and (sep == nil or sep == "")) then return "" end
    local lim = memory_limit_kb()
    if lim and type(n) == "number" and n > 0 and
       (#tostring(s) + #tostring(sep or "")) * n > lim * 1024 then
        host.kill("memory")
    end
    local r = stock.rep(...)
    return r
end

-- string.format as Lua 5.1's while client code runs: a float given to %s
-- is written as 5.1 writes it (%.14g: 3, not 3.0) and one given to an
-- integer conversion (%d %i %c %o %u %x %X) is cut toward 0, as 5.1's cast
-- does (5.4 refuses a float with a fraction there).  The system layer (the
-- string metatable is shared) gets the stock function.
stock.format = string.format
local function format(fmt, ...)
    local c = ctx()
    if not (c and c.user) or type(fmt) ~= "string" then return stock.format(fmt, ...) end
    local args, i = nil, 0
    for conv in fmt:gmatch("%%[-+ #0]*%d*%.?%d*(.)") do
        if conv ~= "%" then
            i = i + 1
            local v = select(i, ...)
            if math.type(v) == "float" and v == v and v ~= math.huge and v ~= -math.huge then
                if conv == "s" then
                    args = args or table.pack(...)
                    args[i] = num2str(v)
                elseif conv:match("[dicouxX]") then
                    args = args or table.pack(...)
                    args[i] = math.tointeger(v >= 0 and math.floor(v) or math.ceil(v)) or v
                end
            end
        end
    end
    if not args then return stock.format(fmt, ...) end
    return stock.format(fmt, table.unpack(args, 1, args.n))
end

-- Pattern matching: the C host's Lua 5.1 find/match/gmatch/gsub
-- (sidecar/lua_pattern.h), bounded by a step budget while client code runs
-- and the stock functions otherwise (the specs' model has none: there the
-- stock functions serve both).
local patterns = {}
for _, name in ipairs({ "find", "match", "gmatch", "gsub" }) do
    patterns[name] = host.patterns and host.patterns[name] or string[name]
end

-- A new table of the string functions client code sees: the bounded
-- pattern functions, the capped rep, no dump.
local function string_functions()
    local t = {}
    for k, v in pairs(string) do t[k] = v end
    for k, v in pairs(patterns) do t[k] = v end
    t.dump = nil
    t.rep = rep
    t.format = format
    return t
end

local string_lib = string_functions()
SB.string_lib = string_lib

-- Method calls on strings ("x"):rep(n) go through the string metatable,
-- shared with the system layer: point it at the same functions (rep only
-- differs while a script runs) and never hand it to a script.
do
    local mt = getmetatable("")
    -- (Loaded again, as the specs' model does per sidecar: the latest wins.)
    if mt and (mt.__index == string or rawget(mt, "zkresp_sandbox")) then
        mt.zkresp_sandbox = true
        mt.__index = string_functions()
    end
end

-- The kill: a signal no script can catch.  host.kill records it (sticky,
-- see above) and raises the error raise_kill makes.
local function raise_kill(why)
    error(setmetatable({ why = why }, Kill), 0)
end

function SB.kill(_, why)
    host.kill(why)
end

-- The clock is looked at every TIME_EVERY hook calls; a script runs at most
-- SLICE_MS at a time before the loop serves the others (0: never paused).
SB.TIME_EVERY = 128
SB.SLICE_MS = 5
local gccount = collectgarbage

-- ctx: {keys, argv, time_limit (ms), mem_limit_kb, ...}.
function SB.enter(c)
    local co = coroutine.running()
    -- The time cap counts the script's own running time: host.busy() stops
    -- while its coroutine waits (for ZooKeeper, which may be a reconnect,
    -- or for its next slice), since the VM serves everyone else meanwhile.
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

-- Why the running script was killed ("time", "memory", "killed"), or nil.
function SB.killed()
    return host.killed()
end

-- The hook is set only while client code runs: the system code under
-- redis.call and the commit run at full speed.
function SB.user(on)
    local c = ctx()
    if not c then return end
    c.user = on
    if not on then
        host.caps()
        return
    end
    host.caps(c.time_deadline, c.mem0, c.mem_limit_kb or 0, raise_kill, SB.HOOK_COUNT,
              SB.TIME_EVERY, SB.SLICE_MS, SB.CHUNK)
    -- Back from redis.call: the count restarts with each call, so a loop
    -- of calls is looked at here.
    local why = host.killed()
    if why then host.kill(why) end
    if c.start then
        if host.busy() > c.time_deadline then host.kill("time") end
        if c.mem_limit_kb and gccount("count") - c.mem0 > c.mem_limit_kb then
            gccount("collect")
            if gccount("count") - c.mem0 > c.mem_limit_kb then host.kill("memory") end
        end
    end
end

-- While another client's script is paused between slices, Redis answers
-- -BUSY to all but SCRIPT KILL (the commands the C gateway answers, PING,
-- CLIENT, INFO..., never get here and are served).
function SB.busy_reply(name, args)
    if not host.busy_scripts() then return nil end
    if name == "script" and args[2] and args[2]:lower() == "kill" then return nil end
    return { err = SB.BUSY }
end

function SB.env(redis_api, cjson_lib, bit_lib, struct_lib)
    local env = {}
    local rawpcall, rawxpcall, rawerror = pcall, xpcall, error

    env.assert = assert
    env.ipairs = table_arg("ipairs", ipairs)
    env.next = next
    env.pairs = table_arg("pairs", pairs)
    env.rawequal = rawequal
    env.rawget = rawget
    env.rawlen = rawlen
    env.select = select
    env.tonumber = tonumber
    env.type = type
    env.unpack = table_arg("unpack", table.unpack)
    env._VERSION = "Lua 5.1"

    -- tostring of a float as 5.1; other values as 5.4.
    env.tostring = function(...)
        local v = ...
        if select("#", ...) == 0 then error("bad argument #1 to 'tostring' (value expected)", 2) end
        if math.type(v) == "float" then return num2str(v) end
        return tostring(v)
    end

    -- The real error: a Lua wrapper would lose the script's frame in
    -- `return error(...)` (a tail call), and with it the position.
    env.error = error

    -- After a pcall or xpcall: a killed script goes on being killed (the
    -- error that reached the pcall may be another one, raised by a C
    -- function the script made its __close handler, or "not enough
    -- memory"); signals are never caught.
    -- A pcall's error message is in Lua 5.1's words (lua51_errors.lua), as
    -- is the one an xpcall's handler gets.
    local function caught(words, ok, ...)
        local why = host.killed()
        if why then host.kill(why) end
        -- A signal redis.call raised is sticky too: a __close handler that
        -- raised another error in its unwinding does not make it catchable.
        local c = ctx()
        if c and c.signal then rawerror(c.signal, 0) end
        if ok then return ok, ... end
        local e = ...
        if SB.is_signal(e) then rawerror(e, 0) end
        -- As in Redis 7.0: an error table {err = text} (what redis.call
        -- raises) reaches the script's pcall as its text.
        if type(e) == "table" then
            local text = rawget(e, "err")
            if type(text) == "string" then return false, text end
        end
        if words and type(e) == "string" then return false, L51.rewrite(e) end
        return false, ...
    end

    env.pcall = function(f, ...)
        return caught(true, rawpcall(f, ...))
    end

    env.xpcall = function(f, handler, ...)
        return caught(false, rawxpcall(f, function(e)
            if SB.is_signal(e) or host.killed() then return e end
            return handler(L51.rewrite(e))
        end, ...))
    end

    -- The system's own tables: the protected proxies, and the signals
    -- (a retry or an abort) a script's __close handler may be handed as
    -- its error: their shared metatables are never a script's.
    local function system(t) return protected[t] or SB.is_signal(t) end

    env.rawset = function(t, k, v)
        if system(t) then rawerror(READONLY, 0) end
        return rawset(t, k, v)
    end

    -- Lua 5.1 (Redis's) has no __gc for tables: the field may be set and
    -- read back, and does nothing.  Lua 5.4 marks a table for finalization
    -- when its metatable has __gc as it is set, so the field is held aside
    -- meanwhile (a finalizer would run later, in whatever command the
    -- collector happens to run in: another client's script).
    env.setmetatable = function(t, mt)
        if system(t) then rawerror(READONLY, 0) end
        if type(mt) == "table" and not protected[mt] then
            local gc = rawget(mt, "__gc")
            if gc ~= nil then
                rawset(mt, "__gc", nil)
                local ok, e = rawpcall(setmetatable, t, mt)
                rawset(mt, "__gc", gc)
                if not ok then rawerror(e, 0) end
                return t
            end
        end
        return setmetatable(t, mt)
    end

    local string_mt -- set below, once the string proxy exists
    env.getmetatable = function(v)
        if type(v) == "string" then return string_mt end
        if system(v) then return false end
        return getmetatable(v)
    end

    -- Text chunks only, in the script environment unless one is given:
    -- the read-only proxy every script sees, never the table behind it
    -- (a chunk that could write that would change every later script's
    -- globals, its redis.call among them).  A name "@x" becomes "=x"
    -- (shown the same): names starting with "@" are the system's files,
    -- whose code the caps leave alone once a script is killed.
    local proxy -- set below
    env.load = function(chunk, name, _, e)
        if type(name) == "string" and name:sub(1, 1) == "@" then name = "=" .. name:sub(2) end
        return load(chunk, name, "t", e or proxy)
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

    -- Lua 5.1's table library (Redis's): no move, whose ranges loop in C
    -- past any hook; insert and remove by the raw length, as 5.1's (it has
    -- no __len for tables), so that a __len of a huge number cannot make
    -- them loop in C either.
    local tbl = {}
    for k, v in pairs(table) do tbl[k] = v end
    tbl.move = nil
    for _, name in ipairs({ "insert", "remove" }) do
        local f = table[name]
        tbl[name] = table_arg(name, function(t, ...)
            local mt = type(t) == "table" and getmetatable(t)
            local len = type(mt) == "table" and rawget(mt, "__len")
            if not len then return f(t, ...) end
            rawset(mt, "__len", nil)
            local r = table.pack(rawpcall(f, t, ...))
            rawset(mt, "__len", len)
            if not r[1] then rawerror(r[2], 0) end
            return table.unpack(r, 2, r.n)
        end)
    end
    env.table = readonly(tbl)

    local m = {}
    for k, v in pairs(math) do m[k] = v end
    m.max = number_arg("max")
    m.min = number_arg("min")
    m.random = random
    m.randomseed = randomseed
    env.math = readonly(m)

    env.os = readonly({ clock = os.clock })
    env.bit = readonly(bit_lib)
    env.struct = struct_lib and readonly(struct_lib)
    env.cjson = readonly(cjson_lib)
    env.redis = readonly(redis_api)

    -- Globals that do not exist, and KEYS/ARGV from the running script.
    proxy = readonly(env, function(_, k)
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
