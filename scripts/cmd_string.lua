-- cmd_string.lua — the string commands: SET, GET, GETDEL, INCR, INCRBY,
-- DECR, DECRBY, DELEX and DELIFEQ, with Redis's replies and errors.
--
-- Each entry: name -> {fn = function(args) -> reply, arity, first_key,
-- last_key, step, flags}; arity counts the name (positive: exact, negative:
-- minimum), first_key/last_key/step say which arguments are keys and flags
-- are COMMAND's flags, as in Redis's command table.  args[1] is the name
-- as sent.

local K = require "keyspace"
local T = require "txn"
local E = require "errors"
local U = require "util"
local codec = require "codec"

local STRING = codec.STRING

local S = {}

local err = E.reply
local function ok() return { ok = "OK" } end

---------------------------------------------------------------------------
-- SET key value [NX | XX | IFEQ v | IFNE v] [GET]
--               [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]

-- Options in any order and case.  As in Redis, an option may repeat (the
-- last value wins) but two conditions or two kinds of expiry conflict.
-- Returns the options, or nil and the error.
local function parse_set(args)
    local o = {}
    local i = 4
    while i <= #args do
        local a = args[i]:lower()
        local nxt = args[i + 1]
        local cond = o.nx or o.xx or o.ifeq ~= nil or o.ifne ~= nil
        local exp = o.expire_kind
        if a == "nx" and not (o.xx or o.ifeq ~= nil or o.ifne ~= nil) then
            o.nx = true
        elseif a == "xx" and not (o.nx or o.ifeq ~= nil or o.ifne ~= nil) then
            o.xx = true
        elseif a == "ifeq" and not cond and nxt then
            o.ifeq = nxt
            i = i + 1
        elseif a == "ifne" and not cond and nxt then
            o.ifne = nxt
            i = i + 1
        elseif (a == "ifdeq" or a == "ifdne") and not cond and nxt then
            return nil, E.DIGEST_UNSUPPORTED
        elseif a == "get" then
            o.get = true
        elseif a == "keepttl" and not exp then
            o.keepttl = true
        elseif (a == "ex" or a == "px" or a == "exat" or a == "pxat") and nxt and
               not o.keepttl and (exp == nil or exp == a) then
            o.expire_kind = a
            o.expire = nxt
            i = i + 1
        else
            return nil, E.SYNTAX
        end
        i = i + 1
    end
    if o.expire then
        local n = U.to_int(o.expire)
        if not n then return nil, E.NOT_INTEGER end
        local seconds = o.expire_kind == "ex" or o.expire_kind == "exat"
        if n <= 0 or (seconds and n > math.maxinteger // 1000) then
            return nil, E.invalid_expire("set")
        end
        if seconds then n = n * 1000 end
        if o.expire_kind == "ex" or o.expire_kind == "px" then
            if n > math.maxinteger - math.floor(host.wall()) then
                return nil, E.invalid_expire("set")
            end
            o.ttl = n
        else
            o.at = n
        end
    end
    return o
end

local function set(args)
    local key, value = args[2], args[3]
    local o, e = parse_set(args)
    if not o then return err(e) end
    e = K.value_error(value)
    if e then return err(e) end
    -- SET NX with a relative or no TTL (the lock acquire) first tries a
    -- bare create: one round trip when the key is free (not when the
    -- policy's before_acquire must see what is there).
    local optimistic = o.nx and not o.get and not o.at and not o.keepttl and
                       not K.policy.before_acquire
    return T.run({ key }, function(t)
        local rec = optimistic and t:presume_absent(key) or t:read(key)
        local old
        if o.get then
            if rec.live and rec.vtype ~= STRING then return err(E.WRONGTYPE) end
            old = rec.live and rec.value or host.null
        end
        local aborted = o.get and old or host.null
        local found = rec.live
        if o.nx and found then return aborted end
        if o.xx and not found then return aborted end
        if o.ifeq ~= nil then
            if not found then return aborted end
            if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
            if rec.value ~= o.ifeq then return aborted end
        end
        if o.ifne ~= nil and found then
            if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
            if rec.value == o.ifne then return aborted end
        end
        local ttl = 0
        if o.ttl then
            ttl = o.ttl
        elseif o.at then
            local left = o.at - host.wall()
            if left <= 0 then
                -- Set and expired at once: the key ends up absent.
                if found then t:delete({ rec }) end
                return o.get and old or ok()
            end
            ttl = math.ceil(left)
        elseif o.keepttl and found and rec.deadline then
            ttl = math.max(1, math.ceil(K.remaining(rec)))
        end
        -- The policy may hold a free key back (lock-delay): SET NX then
        -- answers as on a held key.
        if o.nx and K.acquire_refused(rec) then return aborted end
        t:put(rec, STRING, value, ttl)
        return o.get and old or ok()
    end)
end

S.set = { fn = set, arity = -3, flags = "write denyoom",
          first_key = 1, last_key = 1, step = 1 }

---------------------------------------------------------------------------
-- GET key, GETDEL key

-- GET always reads ZooKeeper: after another sidecar's DEL returns, this
-- sidecar must not answer from its owned-key cache before the watch event
-- arrives (redis-py's Lock.owned() is a GET).  The cache only serves
-- conditional writes, whose versions catch anything stale.
local function get(args, delete)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return host.null end
        if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
        if delete then t:delete({ rec }) end
        return rec.value
    end)
end

S.get = { fn = get, arity = 2, flags = "readonly fast",
          first_key = 1, last_key = 1, step = 1 }

local function getdel(args) return get(args, true) end

S.getdel = { fn = getdel, arity = 2, flags = "write fast",
             first_key = 1, last_key = 1, step = 1 }

---------------------------------------------------------------------------
-- INCR, DECR, INCRBY, DECRBY: the TTL is kept.

local function incr_by(key, by)
    return T.run({ key }, function(t)
        local rec = t:read(key)
        local cur = 0
        if rec.live then
            if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
            cur = U.to_int(rec.value)
            if not cur then return err(E.NOT_INTEGER) end
        end
        local n = U.add_checked(cur, by)
        if not n then return err(E.INCR_OVERFLOW) end
        local ttl = 0
        if rec.live and rec.deadline then ttl = math.max(1, math.ceil(K.remaining(rec))) end
        t:put(rec, STRING, tostring(n), ttl)
        return n
    end)
end

S.incr = { fn = function(args) return incr_by(args[2], 1) end, arity = 2,
           flags = "write denyoom fast", first_key = 1, last_key = 1, step = 1 }
S.decr = { fn = function(args) return incr_by(args[2], -1) end, arity = 2,
           flags = "write denyoom fast", first_key = 1, last_key = 1, step = 1 }

S.incrby = { arity = 3, flags = "write denyoom fast", first_key = 1, last_key = 1, step = 1,
             fn = function(args)
    local by = U.to_int(args[3])
    if not by then return err(E.NOT_INTEGER) end
    return incr_by(args[2], by)
end }

S.decrby = { arity = 3, flags = "write denyoom fast", first_key = 1, last_key = 1, step = 1,
             fn = function(args)
    local by = U.to_int(args[3])
    if not by then return err(E.NOT_INTEGER) end
    if by == math.mininteger then return err(E.DECR_OVERFLOW) end
    return incr_by(args[2], -by)
end }

---------------------------------------------------------------------------
-- Compare-and-delete: DELIFEQ key value (Valkey 9) and DELEX key
-- [IFEQ value | IFNE value] (Redis 8.4).
--
-- The lock-release path: a read, then a delete of exactly the version read.
-- With the owned-key cache on (keyspace.lua, K.CACHE_WRITES), the first
-- attempt on a key this sidecar owns compares against the cache and sends
-- the versioned delete at once; a failed delete, or a value that does not
-- match, is checked again with a fresh read before answering.

local function compare_delete(key, value, equal)
    return T.run({ key }, function(t)
        local rec = t:read(key, true)
        if not rec.live then return 0 end
        if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
        if (rec.value == value) ~= equal then
            t:confirm(rec)
            return 0
        end
        t:delete({ rec })
        return 1
    end)
end

S.delifeq = { fn = function(args) return compare_delete(args[2], args[3], true) end,
              arity = 3, flags = "write fast", first_key = 1, last_key = 1, step = 1 }

local function delete_one(key)
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return 0 end
        t:delete({ rec })
        return 1
    end)
end

S.delex = { arity = -2, flags = "write fast", first_key = 1, last_key = 1, step = 1,
            fn = function(args)
    if #args == 2 then return delete_one(args[2]) end
    local cond = args[3]:lower()
    if #args == 4 and (cond == "ifdeq" or cond == "ifdne") then
        return err(E.DIGEST_UNSUPPORTED)
    end
    if #args ~= 4 or (cond ~= "ifeq" and cond ~= "ifne") then return err(E.SYNTAX) end
    return compare_delete(args[2], args[4], cond == "ifeq")
end }

return S
