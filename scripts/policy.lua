-- policy.lua — the default policy: Redis semantics, nothing more.
--
-- A policy is a Lua file returning a table of hooks.  zkresp loads
-- scripts/policy.lua, or the file given with --policy, at start and again
-- on SIGHUP (a policy that fails to load leaves the old one running).  A
-- hook that a policy leaves out keeps the behaviour shown here, so a policy
-- only needs the hooks it changes.
--
-- Hooks run inside commands, between ZooKeeper calls: keep them quick and
-- never call zk.* or host.sleep from them.  They may use host.log.

local policy = {}

-- key_path(key) -> path or nil
--   Where a Redis key lives.  nil keeps the default, <root>/k/<encoded key>
--   (see sidecar/keyenc.h).  A path must be absolute and must be the same
--   for the same key every time; missing parent nodes are created
--   (persistent, empty).  Keys mapped outside <root>/k are not listed by
--   KEYS nor counted by DBSIZE.
--   Example: function(key) if key:find("^tenant1:") then
--              return "/tenant1/locks/" .. host.key_encode(key) end end
function policy.key_path(key)
    return nil
end

-- lifetime(key, type, ttl_ms) -> "ephemeral" | "persistent"
--   Whether the znode of a key being written is EPHEMERAL (it vanishes
--   when the session of the sidecar that wrote it ends: the sidecar died
--   or lost ZooKeeper) or PERSISTENT.  type is the Redis type ("string",
--   "hash", "list", "set", "zset"); ttl_ms is the key's TTL in
--   milliseconds, or nil when it has none.  The default: keys with a TTL are
--   ephemeral (a lock dies with its holder's sidecar), others persistent
--   (Redis semantics).
function policy.lifetime(key, type, ttl_ms)
    if ttl_ms then return "ephemeral" end
    return "persistent"
end

-- ttl(key, ttl_ms) -> ttl_ms
--   Clamps the TTL given to a key (by SET EX/PX/..., EXPIRE and friends,
--   INCR keeping one); called only when there is one.  Must return a
--   positive number of milliseconds.  The default keeps it.
--   Example: function(key, ttl_ms) return math.min(ttl_ms, 60000) end
function policy.ttl(key, ttl_ms)
    return ttl_ms
end

-- Optional settings:
--   keys_limit         KEYS refuses to look at more matches (default 10000)
--
-- Extra commands (optional): commands = { name = {fn = function(args)
--   ... end, arity = n, first_key = 1, last_key = 1, step = 1} }, lower-case
--   names, the same shape as the command tables in cmd_string.lua; they may
--   use require "txn", "keyspace", "codec", "errors".

return policy
