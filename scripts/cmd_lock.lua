-- cmd_lock.lua — the native lock commands (locks.lua does the work):
--
--   LOCK.ACQUIRE key owner [MODE m] [PX ms] [WAIT ms]  -> token | nil
--   LOCK.RELEASE key owner                              -> 1 | 0
--   LOCK.RENEW key owner PX ms                          -> 1 | 0
--   LOCK.CONVERT key owner MODE m [WAIT ms]             -> token | nil
--   LOCK.INFO key                                       -> {holders, waiters}
--
-- Modes NL CR CW PR PW EX (SHARED = PR, EXCLUSIVE = EX), lockq.lua's
-- matrix.  The lease (PX) defaults to the policy's default_ttl(key,
-- "lock"), else 30000 ms, and passes through its ttl hook like a key's.
-- WAIT blocks only the calling connection.  Same table shape as
-- cmd_string.lua; not callable from scripts (noscript: a script cannot
-- wait).

local Q = require "lockq"
local LK = require "locks"
local LC = require "lockconvert"
local LI = require "lockinfo"
local LS = require "lockstore"
local K = require "keyspace"
local E = require "errors"
local U = require "util"
local queue = require "queue"

local C = {}

local function bad_mode(m)
    return { err = "ERR unknown lock mode '" .. m:sub(1, 64):gsub("[\r\n]", " ") ..
                   "' (NL CR CW PR PW EX SHARED EXCLUSIVE)" }
end

-- The options after key and owner: {mode, px, wait}, or nil and the error
-- reply.  allowed: option name -> true.
local function options(args, name, allowed)
    local o = {}
    local i = 4
    while i <= #args do
        local opt = args[i]:upper()
        local v = args[i + 1]
        if not allowed[opt] or v == nil then return nil, { err = E.SYNTAX } end
        if opt == "MODE" then
            local m = Q.parse_mode(v)
            if not m then return nil, bad_mode(v) end
            o.mode = m
        elseif opt == "PX" then
            local n, _, e = U.parse_expire("px", v, name) -- as SET's PX
            if not n then return nil, { err = e } end
            o.px = n
        else
            local n = U.to_int(v)
            if not n then return nil, { err = "ERR timeout is not an integer or out of range" } end
            if n < 0 then return nil, { err = "ERR timeout is negative" } end
            o.wait = n
        end
        i = i + 2
    end
    return o
end

local function owner_error(owner)
    if #owner > K.max_key_len() then
        return { err = "ERR owner too long" }
    end
end

-- The lease of a hold: PX, else the policy's default_ttl(key, "lock"),
-- else 30000; then the policy's ttl clamp (K.effective_ttl's rules).
local function lease(key, px)
    local ttl = K.effective_ttl(key, px or 0, "lock")
    if ttl == 0 then ttl = K.effective_ttl(key, LK.DEFAULT_PX) end
    return ttl
end

local ACQUIRE_OPTS = { MODE = true, PX = true, WAIT = true }

-- The policy's before_acquire as it is when asked: a waiter held back by
-- it asks again while it waits, and a reload may have replaced the hook
-- (or removed it: no longer held back) meanwhile.
local function before_acquire(...)
    local hook = K.policy.before_acquire
    if hook then return hook(...) end
end

local function acquire(args)
    local key, owner = args[2], args[3]
    local bad = owner_error(owner)
    if bad then return bad end
    local o, err = options(args, "lock.acquire", ACQUIRE_OPTS)
    if not o then return err end
    local r = LK.acquire(key, owner, o.mode or "EX", lease(key, o.px), o.wait or 0,
                         K.policy.before_acquire and before_acquire)
    if r == nil then return host.null end
    return r
end

local function release(args)
    return LK.release(args[2], args[3])
end

local function renew(args)
    local o, err = options(args, "lock.renew", { PX = true })
    if not o then return err end
    if not o.px then return { err = E.SYNTAX } end
    return LK.renew(args[2], args[3], K.effective_ttl(args[2], o.px))
end

local function convert(args)
    local o, err = options(args, "lock.convert", { MODE = true, WAIT = true })
    if not o then return err end
    if not o.mode then return { err = E.SYNTAX } end
    local r = LC.convert(args[2], args[3], o.mode, o.wait or 0)
    if r == nil then return host.null end
    return r
end

local function info(args)
    return LI.info(LS.lock_path(args[2]))
end

-- A connection's LOCK.* commands on one lock run one after another, in
-- its pipeline's order, as Redis runs a pipeline (a RELEASE pipelined
-- behind an ACQUIRE releases what that took; a second ACQUIRE counts
-- again): they wait in a queue of that connection's own (queue.lua), so
-- no other client waits behind a blocking ACQUIRE.
local function in_order(fn)
    return function(args)
        local id = host.client_id()
        if not id then return fn(args) end
        local held <close> = queue.hold({ "lock-order\0" .. tostring(id) .. "\0" .. LK.lock_path(args[2]) })
        return fn(args)
    end
end

local function spec(fn, arity, flags)
    return { fn = in_order(fn), arity = arity, flags = flags, first_key = 1, last_key = 1, step = 1,
             lock_names = true }
end

C["lock.acquire"] = spec(acquire, -3, "write noscript")
C["lock.release"] = spec(release, 3, "write noscript")
C["lock.renew"] = spec(renew, 5, "write noscript")
C["lock.convert"] = spec(convert, -5, "write noscript")
C["lock.info"] = spec(info, 2, "readonly noscript")

return C
