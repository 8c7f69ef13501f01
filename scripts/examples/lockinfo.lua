-- lockinfo.lua — an example policy: a custom command.
--
--   LOCKINFO key
--
-- answers who holds a lock, for how long and with which fencing token:
--
--   holder         the value (the lock token of SET key token NX PX ...);
--                  for a hash (Redisson's lock) its first field
--   type           the Redis type
--   pttl           ms left, -1 without a TTL
--   fencing_token  the znode's czxid: strictly greater for every new
--                  acquisition, across the whole ensemble
--   owner_session  the ZooKeeper session holding the ephemeral node, as
--                  hex, or "" for a persistent key
--   lifetime       "ephemeral" or "persistent"
--   local          1 when the holder is this sidecar's session
--
-- as a map (RESP3) or a flat array (RESP2); a nil reply when nobody holds
-- the key.  It reads ZooKeeper (never the cache), inside a transaction like
-- every built-in command (txn.lua), and is listed by COMMAND.

local T = require "txn"
local K = require "keyspace"
local codec = require "codec"

local policy = {}

local function holder(rec)
    if rec.vtype == codec.STRING then return rec.value end
    if rec.vtype == codec.HASH then
        local h = require("payload").decode_hash(rec.value)
        return h and h.keys[1] or ""
    end
    return ""
end

local function lockinfo(args)
    local key = args[2]
    return T.run({ key }, function(t)
        local rec = t:read(key)
        if not rec.live then return host.null end
        local left = K.remaining(rec)
        local owner = rec.node.ephemeralOwner or 0
        return { map = {
            "holder", holder(rec),
            "type", codec.type_name(rec.vtype),
            "pttl", left and math.max(0, math.ceil(left)) or -1,
            "fencing_token", rec.node.czxid,
            "owner_session", owner ~= 0 and string.format("0x%x", owner) or "",
            "lifetime", owner ~= 0 and "ephemeral" or "persistent",
            "local", rec.mine and 1 or 0,
        } }
    end)
end

policy.commands = {
    lockinfo = { fn = lockinfo, arity = 2, flags = "readonly fast",
                 first_key = 1, last_key = 1, step = 1 },
}

return policy
