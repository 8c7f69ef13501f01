-- cmd_keys.lua — the generic key commands: DEL, UNLINK, EXISTS, TYPE,
-- PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT, PTTL, TTL, EXPIRETIME, PEXPIRETIME,
-- PERSIST, COPY, RENAME, RENAMENX, OBJECT, DBSIZE, KEYS, SCAN, RANDOMKEY.
-- Same table shape as cmd_string.lua.

local K = require "keyspace"
local T = require "txn"
local E = require "errors"
local U = require "util"
local P = require "payload"
local N = require "scan"
local codec = require "codec"

local C = {}

local err = E.reply

local function key_args(args)
    local keys = {}
    for i = 2, #args do keys[#keys + 1] = args[i] end
    return keys
end

---------------------------------------------------------------------------
-- DEL key [key ...], UNLINK: one multi of versioned deletes (several
-- beyond keyspace.MULTI_MAX keys); the reply counts the distinct keys that
-- existed.

local function del(args)
    return T.delete_keys(key_args(args))
end

C.del = { fn = del, arity = -2, flags = "write", first_key = 1, last_key = -1, step = 1 }
C.unlink = { fn = del, arity = -2, flags = "write fast", first_key = 1, last_key = -1, step = 1 }

-- EXISTS key [key ...]: a key named twice counts twice.
C.exists = { arity = -2, flags = "readonly fast", first_key = 1, last_key = -1, step = 1,
             fn = function(args)
    local keys = key_args(args)
    return T.run(keys, function(t)
        local recs = t:read_all(keys)
        local n = 0
        for _, k in ipairs(keys) do
            if recs[k].live then n = n + 1 end
        end
        return n
    end)
end }

C.type = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
           fn = function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return { ok = "none" } end
        return { ok = codec.type_name(rec.vtype) }
    end)
end }

---------------------------------------------------------------------------
-- PEXPIRE / EXPIRE / PEXPIREAT / EXPIREAT key time [NX | XX | GT | LT]

local function expire_generic(args, name, seconds, absolute)
    local nx, xx, gt, lt
    for i = 4, #args do
        local a = args[i]:lower()
        if a == "nx" then nx = true
        elseif a == "xx" then xx = true
        elseif a == "gt" then gt = true
        elseif a == "lt" then lt = true
        else return err(E.unsupported_option(args[i])) end
    end
    if nx and (xx or gt or lt) then return err(E.EXPIRE_NX_COMBO) end
    if gt and lt then return err(E.EXPIRE_GT_LT) end
    local when = U.to_int(args[3])
    if not when then return err(E.NOT_INTEGER) end
    if seconds then
        -- C's bounds: LLONG_MAX / 1000 and LLONG_MIN / 1000, truncated
        if when > math.maxinteger // 1000 or when < -(math.maxinteger // 1000) then
            return err(E.invalid_expire(name))
        end
        when = when * 1000
    end
    local base = absolute and 0 or math.floor(host.wall())
    if when > math.maxinteger - base then return err(E.invalid_expire(name)) end
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return 0 end
        if rec.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        local left = absolute and (when - host.wall()) or when
        local cur = K.remaining(rec)
        if nx and cur then return 0 end
        if xx and not cur then return 0 end
        if gt and (not cur or left <= cur) then return 0 end
        if lt and cur and left >= cur then return 0 end
        if left <= 0 then
            t:delete({ rec })
        else
            t:put(rec, rec.vtype, rec.value, math.ceil(left))
        end
        return 1
    end)
end

C.pexpire = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
              fn = function(args) return expire_generic(args, "pexpire", false, false) end }
C.expire = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
             fn = function(args) return expire_generic(args, "expire", true, false) end }
C.pexpireat = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
                fn = function(args) return expire_generic(args, "pexpireat", false, true) end }
C.expireat = { arity = -3, flags = "write fast", first_key = 1, last_key = 1, step = 1,
               fn = function(args) return expire_generic(args, "expireat", true, true) end }

---------------------------------------------------------------------------
-- PTTL / TTL key: -2 missing, -1 no TTL; TTL rounds like Redis.

-- EXPIRETIME / PEXPIRETIME (absolute): the unix time the key expires at,
-- the wall clock plus the time it has left.
local function ttl_generic(key, ms, absolute)
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return -2 end
        local left = K.remaining(rec)
        if not left then return -1 end
        local n = math.max(0, math.floor(left))
        if absolute then
            -- in floats: a time past 2^63 (PEXPIREAT of LLONG_MAX) is LLONG_MAX
            local at = host.wall() + left
            n = at >= 2.0 ^ 63 and math.maxinteger or math.floor(at)
        end
        if ms then return n end
        return n // 1000 + (n % 1000 >= 500 and 1 or 0)  -- (n + 500) / 1000, no overflow
    end)
end

C.pttl = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
           fn = function(args) return ttl_generic(args[2], true) end }
C.ttl = { arity = 2, flags = "readonly fast", first_key = 1, last_key = 1, step = 1,
          fn = function(args) return ttl_generic(args[2], false) end }
C.pexpiretime = U.key_command(function(args) return ttl_generic(args[2], true, true) end,
                              2, "readonly fast")
C.expiretime = U.key_command(function(args) return ttl_generic(args[2], false, true) end,
                             2, "readonly fast")

C.persist = { arity = 2, flags = "write fast", first_key = 1, last_key = 1, step = 1,
              fn = function(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live or not rec.deadline then return 0 end
        if rec.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        t:put(rec, rec.vtype, rec.value, 0)
        return 1
    end)
end }

---------------------------------------------------------------------------
-- COPY source destination [DB destination-db] [REPLACE], RENAME,
-- RENAMENX: the value and its TTL move in one multi (txn.atomic).

C.copy = { arity = -3, flags = "write denyoom", first_key = 1, last_key = 2, step = 1,
           fn = function(args)
    local src, dst = args[2], args[3]
    local replace, db = false, K.db()
    local i = 4
    while i <= #args do
        if U.is(args[i], "replace") then
            replace = true
        elseif U.is(args[i], "db") and args[i + 1] then
            db = U.to_int(args[i + 1])
            if not db then return err(E.NOT_INTEGER) end
            if db < -2147483648 or db > 2147483647 then
                return err(E.value_between(-2147483648, 2147483647))
            end
            if db < 0 or db >= K.databases() then return err(E.DB_RANGE) end
            i = i + 1
        else
            return err(E.SYNTAX)
        end
        i = i + 1
    end
    if db ~= K.db() then return err(E.OTHER_DB) end
    if src == dst then return err(E.SAME_OBJECT) end
    return T.atomic({ src, dst }, function(t)
        local recs = t:read_all({ src, dst })
        local from, to = recs[src], recs[dst]
        if not from.live then return 0 end
        if from.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        if to.live and not replace then return 0 end
        t:put(to, from.vtype, from.value, P.kept_ttl(from))
        return 1
    end)
end }

local function rename(args, nx)
    local src, dst = args[2], args[3]
    return T.atomic({ src, dst }, function(t)
        local recs = t:read_all({ src, dst })
        local from, to = recs[src], recs[dst]
        if not from.live then return err(E.NO_SUCH_KEY) end
        if src == dst then return nx and 0 or { ok = "OK" } end
        if to.live and nx then return 0 end
        if from.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        t:put(to, from.vtype, from.value, P.kept_ttl(from))
        t:delete({ from })
        return nx and 1 or { ok = "OK" }
    end)
end

C.rename = { arity = 3, flags = "write", first_key = 1, last_key = 2, step = 1,
             fn = function(args) return rename(args, false) end }
C.renamenx = { arity = 3, flags = "write fast", first_key = 1, last_key = 2, step = 1,
               fn = function(args) return rename(args, true) end }

---------------------------------------------------------------------------
-- OBJECT ENCODING | FREQ | IDLETIME | REFCOUNT key, OBJECT HELP
--
-- ENCODING names what Redis 7.2 would use for the value by its default
-- thresholds (it does not remember a conversion: a hash that grew past
-- them and shrank again reads as a listpack here, a hashtable in Redis).
-- IDLETIME counts from the key's last write; FREQ answers Redis's error
-- without an LFU policy; REFCOUNT is 1, or Redis's shared integers' count.

-- Redis's built-in defaults (not its sample redis.conf's).
local HASH_LISTPACK_ENTRIES = 512               -- hash-max-listpack-entries
local LISTPACK_ENTRIES, LISTPACK_VALUE = 128, 64 -- set-, zset-max-listpack-*; *-value
local INTSET_ENTRIES = 512                      -- set-max-intset-entries
local LIST_LISTPACK_BYTES = 8192                -- list-max-listpack-size -2
local EMBSTR_MAX = 44
local SHARED_INTEGERS = 10000

-- Whether every string of `list` is at most LISTPACK_VALUE bytes.
local function short(list)
    for _, s in ipairs(list) do
        if #s > LISTPACK_VALUE then return false end
    end
    return true
end

-- A listpack's size holding `list` (entry header, bytes, back-length).
local function listpack_bytes(list)
    local n = 7
    for _, s in ipairs(list) do
        local len = #s + (#s < 64 and 1 or #s < 4096 and 2 or 5)
        n = n + len + (len < 128 and 1 or len < 16384 and 2 or 3)
    end
    return n
end

local function encoding(t, rec)
    local vt, v = rec.vtype, rec.value
    if vt == codec.STRING then
        if #v <= 20 and U.to_int(v) then return "int" end
        return #v <= EMBSTR_MAX and "embstr" or "raw"
    end
    local _, x = P.load(t, rec.key, vt)
    if vt == codec.HASH then
        local flat = {}
        for _, f in ipairs(x.keys) do
            flat[#flat + 1] = f
            flat[#flat + 1] = x.vals[f]
        end
        return (#x.keys <= HASH_LISTPACK_ENTRIES and short(flat)) and "listpack" or "hashtable"
    elseif vt == codec.LIST then
        return listpack_bytes(x) <= LIST_LISTPACK_BYTES and "listpack" or "quicklist"
    elseif vt == codec.SET then
        local ints = #x.keys <= INTSET_ENTRIES
        for _, m in ipairs(x.keys) do
            if not ints then break end
            ints = U.to_int(m) ~= nil
        end
        if ints then return "intset" end
        return (#x.keys <= LISTPACK_ENTRIES and short(x.keys)) and "listpack" or "hashtable"
    end
    local members = {}
    for i, e in ipairs(x) do members[i] = e[1] end
    return (#x <= LISTPACK_ENTRIES and short(members)) and "listpack" or "skiplist"
end

local OBJECT_HELP = {
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
}

C.object = { arity = -2, flags = "", first_key = 0, last_key = 0, step = 0,
             group = "keyspace",
             subcommands = { encoding = 3, freq = 3, idletime = 3, refcount = 3, help = 2 },
             fn = function(args)
    local sub = args[2]:lower()
    if sub == "help" then return E.help("object", OBJECT_HELP) end
    local key = args[3]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return host.null end
        if rec.vtype == codec.UNKNOWN then return err(E.WRONGTYPE) end
        if sub == "encoding" then return encoding(t, rec) end
        if sub == "freq" then return err(E.NO_LFU) end
        if sub == "idletime" then
            K.ensure_clock(rec.node.mzxid)
            return math.max(0, math.floor((host.now() - K.local_time(rec.node.mtime, rec.node.mzxid, rec.node.mtime)) / 1000))
        end
        local n = rec.vtype == codec.STRING and #rec.value <= 20 and U.to_int(rec.value)
        return (n and n >= 0 and n < SHARED_INTEGERS) and 2147483647 or 1
    end)
end }

---------------------------------------------------------------------------
-- The commands that list the keyspace read ZooKeeper's committed listing:
-- after a write of the same script or MULTI, not yet committed, they would
-- answer a keyspace without it, so they refuse (the write's transaction
-- goes on, as after any command's error).
local function listing(fn)
    return function(args)
        if T.has_writes() then return err(E.LISTING_AFTER_WRITE) end
        return fn(args)
    end
end

-- DBSIZE: the children of <root>/k (expired nodes not yet deleted count).

C.dbsize = { arity = 1, flags = "readonly fast", first_key = 0, last_key = 0, step = 0,
             fn = listing(function()
    return T.run({}, function()
        local rc, stat = K.stat(K.keys_dir())
        if rc == zk.NONODE then return 0 end
        return stat.numChildren
    end)
end) }

-- The most keys KEYS answers and SCAN reads in one call.
local KEYS_LIMIT = 10000


-- The keys of `keys` that live (and hold a value of type name `vtype`,
-- when given), in the same order.
local function live_keys(keys, vtype)
    local recs = K.read_many(keys)
    local out = {}
    for _, k in ipairs(keys) do
        local rec = recs[k]
        if rec.live and (not vtype or codec.type_name(rec.vtype) == vtype) then out[#out + 1] = k end
    end
    return out
end

-- KEYS pattern: Redis's glob over the keyspace, expired keys skipped;
-- refused beyond KEYS_LIMIT matches (policy.keys_limit).

C.keys = { arity = 2, flags = "readonly", first_key = 0, last_key = 0, step = 0,
           fn = listing(function(args)
    local pattern = args[2]
    local all = pattern == "*"
    return T.run({}, function()
        local keys = {}
        local limit = K.policy.keys_limit or KEYS_LIMIT
        for _, key in ipairs(K.key_names()) do
            if all or U.glob(pattern, key) then
                keys[#keys + 1] = key
                if #keys > limit then return err(E.TOO_MANY_KEYS) end
            end
        end
        return live_keys(keys)
    end)
end) }

-- SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] (scan.lua says
-- how the cursor walks the keyspace).  A COUNT beyond KEYS_LIMIT reads
-- KEYS_LIMIT keys (COUNT is a hint in Redis too).
C.scan = { arity = -2, flags = "readonly", first_key = 0, last_key = 0, step = 0,
           fn = listing(function(args)
    local cursor = N.cursor(args[2])
    if not cursor then return err(E.INVALID_CURSOR) end
    local o, e = N.options(args, 3, true)
    if not o then return err(e) end
    return T.run({}, function()
        local count = math.min(o.count, K.policy.keys_limit or KEYS_LIMIT)
        local batch, next_cursor = N.step(K.key_names(), cursor, count)
        local keys = {}
        for _, k in ipairs(batch) do
            if not o.match or U.glob(o.match, k) then keys[#keys + 1] = k end
        end
        return { tostring(next_cursor), live_keys(keys, o.type and o.type:lower()) }
    end)
end) }

-- RANDOMKEY: a live key picked at random, nil when there is none.
C.randomkey = { arity = 1, flags = "readonly", first_key = 0, last_key = 0, step = 0,
                fn = listing(function()
    return T.run({}, function()
        local names = K.key_names()
        for _, i in ipairs(U.random_picks(#names, #names)) do
            local rec = K.read(names[i])
            if rec.live then return names[i] end
        end
        return host.null
    end)
end) }

return C
