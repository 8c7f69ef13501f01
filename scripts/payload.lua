-- payload.lua — the payload of the collection types (codec.HASH, LIST, SET,
-- ZSET) and the load/store steps their commands share.
--
-- Every payload is a 4-byte big-endian count followed by that many entries;
-- each string is a 4-byte big-endian length and its bytes (string.pack's
-- ">s4"), each score an 8-byte big-endian IEEE double (">d"):
--
--   hash   count | field value | field value ...     (insertion order)
--   list   count | item | item ...                    (head first)
--   set    count | member | member ...                (insertion order)
--   zset   count | member score | member score ...    (score, then bytes)
--
-- The encoding of a value is deterministic and binary-safe.  Decoding checks
-- every length against the data, that nothing trails, that fields, members
-- are unique and scores are not NaN; anything else is rejected (nil), never
-- a crash.  An empty collection is never stored: its key is deleted.
--
-- In memory:
--   hash  {keys = {f1, f2, ...}, vals = {[f] = v}}
--   list  {item, ...}
--   set   {keys = {m1, m2, ...}, has = {[m] = true}}
--   zset  {{member, score}, ...} sorted, and .score = {[member] = score}

local K = require "keyspace"
local E = require "errors"
local codec = require "codec"

local P = {}

P.CORRUPT = "ERR stored value is corrupt"

local function count_of(data)
    if #data < 4 then return nil end
    local n = string.unpack(">I4", data)
    return n
end

-- Reads n strings of ">s4" from data at pos; returns the list and the next
-- position, or nil.
local function strings(data, pos, n)
    local out = {}
    local len = #data
    for i = 1, n do
        if pos + 3 > len then return nil end
        local sl = string.unpack(">I4", data, pos)
        if pos + 3 + sl > len then return nil end
        out[i] = data:sub(pos + 4, pos + 3 + sl)
        pos = pos + 4 + sl
    end
    return out, pos
end

local function pack_strings(list)
    local parts = { string.pack(">I4", #list) }
    for i, s in ipairs(list) do parts[i + 1] = string.pack(">s4", s) end
    return table.concat(parts)
end

-- Plain lists of strings (lists; the flat form of hashes and sets).
local function unpack_strings(data, per_entry)
    local n = count_of(data)
    -- Each entry takes at least 4 bytes per string: a count beyond that is
    -- garbage (and would make us loop for nothing).
    if not n or n * 4 * per_entry > #data - 4 then return nil end
    local list, pos = strings(data, 5, n * per_entry)
    if not list or pos ~= #data + 1 then return nil end
    return list
end

---------------------------------------------------------------------------
-- Lists

function P.encode_list(items) return pack_strings(items) end

function P.decode_list(data)
    return unpack_strings(data, 1)
end

---------------------------------------------------------------------------
-- Hashes

function P.new_hash() return { keys = {}, vals = {} } end

function P.encode_hash(h)
    local flat = {}
    for _, f in ipairs(h.keys) do
        flat[#flat + 1] = f
        flat[#flat + 1] = h.vals[f]
    end
    -- The count is the number of pairs.
    local parts = { string.pack(">I4", #h.keys) }
    for i, s in ipairs(flat) do parts[i + 1] = string.pack(">s4", s) end
    return table.concat(parts)
end

function P.decode_hash(data)
    local flat = unpack_strings(data, 2)
    if not flat then return nil end
    local h = P.new_hash()
    for i = 1, #flat, 2 do
        local f = flat[i]
        if h.vals[f] then return nil end
        h.keys[#h.keys + 1] = f
        h.vals[f] = flat[i + 1]
    end
    return h
end

-- Sets field f to v; true when f is new.
function P.hash_set(h, f, v)
    local new = h.vals[f] == nil
    if new then h.keys[#h.keys + 1] = f end
    h.vals[f] = v
    return new
end

-- Removes the fields in `del` (a set of names) from the key order.
local function drop_keys(keys, del)
    local j = 0
    for i = 1, #keys do
        local k = keys[i]
        keys[i] = nil
        if not del[k] then
            j = j + 1
            keys[j] = k
        end
    end
end
P.drop_keys = drop_keys

---------------------------------------------------------------------------
-- Sets

function P.new_set() return { keys = {}, has = {} } end

function P.encode_set(s) return pack_strings(s.keys) end

function P.decode_set(data)
    local list = unpack_strings(data, 1)
    if not list then return nil end
    local s = P.new_set()
    for _, m in ipairs(list) do
        if s.has[m] then return nil end
        s.has[m] = true
        s.keys[#s.keys + 1] = m
    end
    return s
end

---------------------------------------------------------------------------
-- Sorted sets

-- Redis's order: by score, then by member bytes.
function P.zless(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
end

function P.new_zset() return { score = {} } end

-- Sorts z and rebuilds its member index.
function P.zset_sort(z)
    table.sort(z, P.zless)
    local score = {}
    for _, e in ipairs(z) do score[e[1]] = e[2] end
    z.score = score
end

function P.encode_zset(z)
    local parts = { string.pack(">I4", #z) }
    for i, e in ipairs(z) do parts[i + 1] = string.pack(">s4d", e[1], e[2]) end
    return table.concat(parts)
end

function P.decode_zset(data)
    local n = count_of(data)
    if not n or n * 12 > #data - 4 then return nil end
    local z = P.new_zset()
    local pos, len = 5, #data
    for i = 1, n do
        if pos + 3 > len then return nil end
        local sl = string.unpack(">I4", data, pos)
        if pos + 11 + sl > len then return nil end
        local m = data:sub(pos + 4, pos + 3 + sl)
        local sc = string.unpack(">d", data, pos + 4 + sl)
        if sc ~= sc or z.score[m] then return nil end
        z[i] = { m, sc }
        z.score[m] = sc
        pos = pos + 12 + sl
    end
    if pos ~= len + 1 then return nil end
    for i = 2, n do
        if not P.zless(z[i - 1], z[i]) then return nil end
    end
    return z
end

---------------------------------------------------------------------------
-- What the commands share

local DECODE = {
    [codec.HASH] = P.decode_hash, [codec.LIST] = P.decode_list,
    [codec.SET] = P.decode_set, [codec.ZSET] = P.decode_zset,
}

-- Inside a transaction t: the record of key and its decoded value of type
-- vtype, or the record and nil when the key does not exist.  A key of
-- another type ends the command with WRONGTYPE, one that does not decode
-- with P.CORRUPT.
function P.load(t, key, vtype)
    local rec = t:read(key)
    if not rec.live then return rec, nil end
    if rec.vtype ~= vtype then K.abort({ err = E.WRONGTYPE }) end
    local v = DECODE[vtype](rec.value)
    if not v then K.abort({ err = P.CORRUPT }) end
    return rec, v
end

-- The size of the collection at key (HLEN, LLEN, SCARD, ZCARD): 0 when the
-- key is missing, WRONGTYPE when it holds another type.
function P.size(t, key, vtype)
    local _, v = P.load(t, key, vtype)
    if not v then return 0 end
    return v.keys and #v.keys or #v
end

-- The TTL a rewrite of rec keeps (Redis keeps a key's TTL when a command
-- modifies its value): the time it has left, or 0; and its deadline, which
-- the write keeps as it is (t:put's `deadline`): counted again from the
-- write's answer, every write would move it later by its round trip, and a
-- key written without pause (INCR after EXPIRE ... NX) would never expire.
function P.kept_ttl(rec)
    if rec.live and rec.deadline then return math.max(1, math.ceil(K.remaining(rec))), rec.deadline end
    return 0
end

-- Writes the new value of rec's key: deletes the key when the collection is
-- empty (n == 0), else stores `payload` (encoded) keeping the TTL.  A value
-- over the size cap ends the command with Redis's error.
function P.store(t, rec, vtype, n, payload)
    if n == 0 then
        if rec.live then t:delete({ rec }) end
        return
    end
    local e = K.value_error(payload)
    if e then K.abort({ err = e }) end
    t:put(rec, vtype, payload, P.kept_ttl(rec))
end

return P
