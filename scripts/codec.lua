-- codec.lua — the typed value stored as a znode's data.
--
--   +-----+-----+------+-------+--------------+------------------+---------
--   | "Z" | ver | type | flags | ttl ms (i64) | nonce (16 bytes) | payload
--   +-----+-----+------+-------+--------------+------------------+---------
--     1     1     1      1       8 big-endian   16                  rest
--
-- ver is the format version (1).  type is the Redis type (0 string, 1 hash,
-- 2 list, 3 set, 4 zset).  ttl is the time to live left when the value was
-- written, counted from the znode's mtime; 0 means none.  The nonce names the
-- write that stored this value (16 bytes: the sidecar's instance id and a
-- counter) so that a write whose outcome was lost can be recognised.
--
-- Data that does not carry this header — a node made by hand with zkCli,
-- garbage — decodes as a plain string with no TTL, so such nodes read as
-- strings rather than crashing anything.  A header is recognised by the
-- magic, version 1 and a known type; the magic with a version from 2 to 9 is
-- a newer format this code cannot read (type UNKNOWN).

local C = {}

C.VERSION = 1
C.HEADER = ">c1BBBi8c16"
C.HEADER_LEN = string.packsize(C.HEADER) -- 28

C.STRING, C.HASH, C.LIST, C.SET, C.ZSET = 0, 1, 2, 3, 4
-- A header we cannot read (a newer format version): commands treat the
-- value as a type they cannot handle (WRONGTYPE), never as raw bytes.
C.UNKNOWN = 255

C.NAMES = { [0] = "string", [1] = "hash", [2] = "list", [3] = "set",
            [4] = "zset", [255] = "unknown" }

-- v: {type = n, flags = n, ttl = ms, nonce = 16 bytes, payload = string}.
function C.encode(v)
    local ttl = v.ttl or 0
    assert(math.type(ttl) == "integer" and ttl >= 0, "ttl must be a non-negative integer")
    local nonce = v.nonce or ""
    assert(#nonce <= 16, "nonce longer than 16 bytes")
    return string.pack(C.HEADER, "Z", C.VERSION, v.type or C.STRING,
                       v.flags or 0, ttl, nonce) .. (v.payload or "")
end

-- Returns {type, flags, ttl, nonce, payload, foreign}.  foreign is true when
-- the data carried no header (then nonce is nil and ttl 0).
function C.decode(data)
    data = data or ""
    if #data < C.HEADER_LEN or data:byte(1) ~= 90 then -- 90 = "Z"
        return { type = C.STRING, flags = 0, ttl = 0, payload = data, foreign = true }
    end
    local _, ver, typ, flags, ttl, nonce = string.unpack(C.HEADER, data)
    if ver ~= C.VERSION or typ > C.ZSET then
        if ver > C.VERSION and ver <= 9 then
            return { type = C.UNKNOWN, flags = 0, ttl = 0, payload = "", version = ver }
        end
        return { type = C.STRING, flags = 0, ttl = 0, payload = data, foreign = true }
    end
    if ttl < 0 then ttl = 0 end
    return { type = typ, flags = flags, ttl = ttl, nonce = nonce,
             payload = data:sub(C.HEADER_LEN + 1) }
end

function C.type_name(t)
    return C.NAMES[t] or "unknown"
end

return C
