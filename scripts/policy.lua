-- policy.lua — the default policy: Redis semantics, nothing more.
--
-- A policy is a Lua file returning a table of hooks.  zkresp loads
-- scripts/policy.lua, or the file given with --policy, at start; again on
-- SIGHUP and on POLICY RELOAD.  Before a policy replaces the running one it
-- must load and pass a self-check (its hooks are called on sample keys and
-- their answers validated); a policy that fails either leaves the old one
-- running, and the log and INFO's # Policy section say why.  A hook that a
-- policy leaves out keeps the behaviour shown here, so a policy only needs
-- the hooks it changes.  README "Writing a policy" documents the API;
-- scripts/examples/ has policies to copy.
--
-- Every hook runs under a guard: one that raises, or runs past its budget
-- of instructions (a loop), fails the one command that called it with
-- "-ERR policy: <message>" and is logged; the sidecar goes on serving.
-- `client`, the last argument of several hooks, is the connection the
-- command came from: {id, addr = "ip:port", laddr, name = CLIENT SETNAME or
-- nil, user = the AUTH user ("default" without one), lib_name, resp = 2|3},
-- or nil when no client is involved (expiry, background work).
--
-- Hooks run inside commands, between ZooKeeper calls: keep them quick.
-- Only before_acquire and the on_* notifications may call zk.* or
-- host.sleep.  All may use host.log, host.now, host.key_encode.

local policy = {}

-- key_path(key, client) -> path or nil
--   Where a Redis key lives.  nil keeps the default, <root>/k/<encoded key>
--   (see sidecar/keyenc.h).  A path must be absolute and must be the same
--   for the same key and client every time; missing parent nodes are
--   created (persistent, empty).  Keys mapped outside <root>/k are not
--   listed by KEYS nor counted by DBSIZE.
--   Example (scripts/examples/tenants.lua):
--     function(key, client) if client and client.user ~= "default" then
--       return host.config.root .. "/t/" .. client.user .. "/" .. host.key_encode(key) end end
function policy.key_path(key, client)
    return nil
end

-- lifetime(key, type, ttl_ms, client) -> "ephemeral" | "persistent"
--   Whether the znode of a key being written is EPHEMERAL (it vanishes
--   when the session of the sidecar that wrote it ends: the sidecar died
--   or lost ZooKeeper) or PERSISTENT.  type is the Redis type ("string",
--   "hash", "list", "set", "zset"); ttl_ms is the key's TTL in
--   milliseconds, or nil when it has none.  The default: keys with a TTL are
--   ephemeral (a lock dies with its holder's sidecar), others persistent
--   (Redis semantics).
function policy.lifetime(key, type, ttl_ms, client)
    if ttl_ms then return "ephemeral" end
    return "persistent"
end

-- ttl(key, ttl_ms, client) -> ttl_ms
--   Clamps the TTL given to a key (by SET EX/PX/..., EXPIRE and friends,
--   INCR keeping one, or default_ttl); called only when there is one.  Must
--   return a positive number of milliseconds.  The default keeps it.
--   Example: function(key, ttl_ms) return math.min(ttl_ms, 60000) end
function policy.ttl(key, ttl_ms, client)
    return ttl_ms
end

-- The other hooks, left out here (their defaults cost nothing):
--
-- default_ttl(key, type, client) -> ttl_ms or nil
--   The TTL of a write that has none (SET k v NX without PX: the classic
--   leaked lock).  nil: none (the default).  Applies to every write without
--   a TTL, PERSIST included.
--
-- authorize(client, command, keys, args) -> true | nil | false | reason
--   May this client run this command (lower-case name) on these keys (the
--   command's key arguments; EVAL's numkeys keys)?  true or nil: yes.  A
--   string: no, "-NOPERM <reason>".  false: no, Redis's "-NOPERM User <user>
--   has no permissions to run the '<command>' command".  Asked for every
--   command written in Lua (all keyed commands, EVAL, POLICY, a policy's
--   own) and for every redis.call in a script; not for the connection
--   commands answered in C (AUTH, HELLO, PING, CLIENT, INFO, COMMAND...).
--
-- authenticate(user, password, info) -> true | false
--   AUTH user password / HELLO ... AUTH user password for a user other than
--   "default" (whose password is --requirepass).  info = {addr, user}.
--   Without this hook no other user exists.  A refusal is Redis's WRONGPASS.
--
-- before_acquire(key, info) -> true | nil | false[, reason] | reason
--   Asked before a command creates a key that does not exist (absent, or
--   expired: info.exists), info = {client, path, exists}.  A refusal makes
--   SET ... NX answer nil, as on a held key, and any other write answer
--   "-TRYAGAIN <reason>".  May call zk.* (lock-delay reads a marker).
--
-- on_acquire(key, info)   a key was created by this sidecar (a lock taken)
-- on_release(key, info)   a key was deleted by a command on this sidecar
-- on_expire(key, info)    a key this sidecar owned reached its TTL and was
--                         deleted by it
-- on_lost(key, info)      a key this sidecar owned is gone without a
--                         release: info.reason "session" (the ZooKeeper
--                         session ended), "deleted" or "overwritten" (by
--                         another client, seen through the watch on it)
--   info = {path, type, ttl (ms or nil), lifetime, czxid (the fencing
--   token, when known), value (a string's value: the lock token), client}.
--   They run after the event, in the background: they never delay a reply
--   and may call zk.* and host.sleep.
--
-- self_check() -> true | nil, reason
--   Runs when the policy loads; a failure keeps the running policy.
--
-- Settings:
--   keys_limit         KEYS refuses to look at more matches (default 10000)
--
-- Extra commands: commands = { name = {fn = function(args) ... end,
--   arity = n, first_key = 1, last_key = 1, step = 1, flags = "readonly"} },
--   lower-case names, the same shape as the command tables in
--   cmd_string.lua; listed by COMMAND, callable from scripts; they may use
--   require "txn", "keyspace", "codec", "errors" (scripts/examples/lockinfo.lua).

return policy
