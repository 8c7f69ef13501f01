-- cmd_string.lua — the string commands: SET, SETNX, SETEX, PSETEX, GETSET,
-- GET, GETDEL, GETEX, MGET, MSET, MSETNX, APPEND, STRLEN, GETRANGE (SUBSTR),
-- SETRANGE, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, DELEX and DELIFEQ,
-- with Redis's replies and errors.
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
local P = require "payload"
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
        local e
        o.ttl, o.at, e = U.parse_expire(o.expire_kind, o.expire, "set")
        if e then return nil, e end
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
        local ttl, kept = 0, nil
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
            ttl, kept = P.kept_ttl(rec)
        end
        -- The policy may hold a free key back (lock-delay): SET NX then
        -- answers as on a held key.
        if o.nx and K.acquire_refused(rec) then return aborted end
        t:put(rec, STRING, value, ttl, kept)
        return o.get and old or ok()
    end)
end

S.set = { fn = set, arity = -3, flags = "write denyoom",
          first_key = 1, last_key = 1, step = 1 }

-- SETNX key value (1 or 0) and GETSET key value: SET NX and SET GET.
S.setnx = U.key_command(function(args)
    local r = set({ args[1], args[2], args[3], "NX" })
    if r == host.null then return 0 end
    return r.ok and 1 or r
end, 3, "write denyoom fast")

S.getset = U.key_command(function(args)
    return set({ args[1], args[2], args[3], "GET" })
end, 3, "write denyoom fast")

-- SETEX key seconds value, PSETEX key milliseconds value.
local function setex(args, name, kind)
    local key, value = args[2], args[4]
    local ttl, _, e = U.parse_expire(kind, args[3], name)
    if e then return err(e) end
    e = K.value_error(value)
    if e then return err(e) end
    return T.run({ key }, function(t)
        t:put(t:read(key), STRING, value, ttl)
        return ok()
    end)
end

S.setex = U.key_command(function(args) return setex(args, "setex", "ex") end, 4,
                        "write denyoom")
S.psetex = U.key_command(function(args) return setex(args, "psetex", "px") end, 4,
                         "write denyoom")

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
-- GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]

local function getex(args)
    local key = args[2]
    local kind, when, persist
    local i = 3
    while i <= #args do
        local a = args[i]:lower()
        if (a == "ex" or a == "px" or a == "exat" or a == "pxat") and args[i + 1] and
           not persist and (kind == nil or kind == a) then
            kind, when = a, args[i + 1]
            i = i + 1
        elseif a == "persist" and not kind then
            persist = true
        else
            return err(E.SYNTAX)
        end
        i = i + 1
    end
    return T.run({ key }, function(t)
        local rec = t:read(key)
        -- as Redis: the key and its type before the expiry's value
        if not rec.live then return host.null end
        if rec.vtype ~= STRING then return err(E.WRONGTYPE) end
        local ttl, at, e
        if kind then
            ttl, at, e = U.parse_expire(kind, when, "getex")
            if e then return err(e) end
        end
        local value = rec.value
        if at then ttl = math.ceil(at - host.wall()) end
        if ttl and ttl <= 0 then
            t:delete({ rec })
        elseif ttl then
            t:put(rec, STRING, value, ttl)
        elseif persist and rec.deadline then
            t:put(rec, STRING, value, 0)
        end
        return value
    end)
end

S.getex = U.key_command(getex, -2, "write fast")

---------------------------------------------------------------------------
-- MGET key [key ...]; MSET and MSETNX key value [key value ...], whose
-- writes are one multi (txn.atomic): every sidecar sees all or none.

S.mget = { arity = -2, flags = "readonly fast", first_key = 1, last_key = -1, step = 1,
           fn = function(args)
    local keys = table.move(args, 2, #args, 1, {})
    return T.run(keys, function(t)
        local recs = t:read_all(keys)
        local out = {}
        for i, k in ipairs(keys) do
            local rec = recs[k]
            out[i] = (rec.live and rec.vtype == STRING) and rec.value or host.null
        end
        return out
    end)
end }

local function mset_generic(args, name, nx)
    if #args % 2 ~= 1 then return err(E.wrong_arity(name)) end
    local keys = {}
    for i = 2, #args, 2 do
        local e = K.value_error(args[i + 1])
        if e then return err(e) end
        keys[#keys + 1] = args[i]
    end
    return T.atomic(keys, function(t)
        local recs = t:read_all(keys)
        if nx then
            for _, k in ipairs(keys) do
                if recs[k].live then return 0 end
            end
        end
        for i = 2, #args, 2 do t:put(t:read(args[i]), STRING, args[i + 1], 0) end
        return nx and 1 or ok()
    end)
end

S.mset = { arity = -3, flags = "write denyoom", first_key = 1, last_key = -1, step = 2,
           fn = function(args) return mset_generic(args, "mset", false) end }
S.msetnx = { arity = -3, flags = "write denyoom", first_key = 1, last_key = -1, step = 2,
             fn = function(args) return mset_generic(args, "msetnx", true) end }

---------------------------------------------------------------------------
-- APPEND, STRLEN, GETRANGE (SUBSTR), SETRANGE: writes keep the TTL.

-- The string at key inside t: rec and its value, nil when missing; a key
-- of another type ends the command with WRONGTYPE.
local function load(t, key)
    local rec = t:read(key)
    if not rec.live then return rec, nil end
    if rec.vtype ~= STRING then K.abort(err(E.WRONGTYPE)) end
    return rec, rec.value
end

S.append = U.key_command(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, cur = load(t, key)
        local value = (cur or "") .. args[3]
        local e = K.value_error(value)
        if e then return err(e) end
        t:put(rec, STRING, value, P.kept_ttl(rec))
        return #value
    end)
end, 3, "write denyoom fast")

S.strlen = U.key_command(function(args)
    return T.run({ args[2] }, function(t)
        local _, v = load(t, args[2])
        return v and #v or 0
    end)
end, 2, "readonly fast")

-- Redis's getrangeCommand: negative indexes count from the end, both are
-- clamped to the string; an empty range is "".
local function getrange(args)
    local key = args[2]
    local first, last = U.to_int(args[3]), U.to_int(args[4])
    if not first or not last then return err(E.NOT_INTEGER) end
    return T.run({ key }, function(t)
        local _, v = load(t, key)
        if not v or (first < 0 and last < 0 and first > last) then return "" end
        local n = #v
        if first < 0 then first = math.max(0, n + first) end
        if last < 0 then last = math.max(0, n + last) end
        if last >= n then last = n - 1 end
        if first > last or n == 0 then return "" end
        return v:sub(first + 1, last + 1)
    end)
end

S.getrange = U.key_command(getrange, 4, "readonly")
S.substr = U.key_command(getrange, 4, "readonly")

-- SETRANGE key offset value: pads with zero bytes; the length of the
-- string after.  Redis's proto-max-bulk-len (512 MB) bounds the result.
local MAX_STRING = 512 * 1024 * 1024

S.setrange = U.key_command(function(args)
    local key, value = args[2], args[4]
    local offset = U.to_int(args[3])
    if not offset then return err(E.NOT_INTEGER) end
    if offset < 0 then return err(E.OFFSET_RANGE) end
    return T.run({ key }, function(t)
        local rec, cur = load(t, key)
        if #value == 0 then return cur and #cur or 0 end
        if offset > MAX_STRING - #value then return err(E.STRING_TOO_LONG) end
        cur = cur or ""
        if #cur < offset then cur = cur .. string.rep("\0", offset - #cur) end
        local new = cur:sub(1, offset) .. value .. cur:sub(offset + #value + 1)
        local e = K.value_error(new)
        if e then return err(e) end
        t:put(rec, STRING, new, P.kept_ttl(rec))
        return #new
    end)
end, 4, "write denyoom")

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
        t:put(rec, STRING, tostring(n), P.kept_ttl(rec))
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

-- INCRBYFLOAT key increment: the sum as U.human_double writes it.
S.incrbyfloat = U.key_command(function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec, v = load(t, key)
        local cur = 0.0
        if v then cur = U.to_double(v) end
        local by = U.to_double(args[3])
        if not cur or not by then return err(E.NOT_FLOAT) end
        local n = cur + by
        if n ~= n or n == math.huge or n == -math.huge then return err(E.NAN_OR_INFINITY) end
        local text = U.human_double(n)
        t:put(rec, STRING, text, P.kept_ttl(rec))
        return text
    end)
end, 3, "write denyoom fast")

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
        if rec.vtype ~= STRING then
            t:confirm(rec)
            return err(E.WRONGTYPE)
        end
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
