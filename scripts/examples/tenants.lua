-- tenants.lua — an example policy: per-tenant namespaces.
--
-- Each tenant's keys live under <root>/t/<tenant>/, so two applications
-- that share one ZooKeeper ensemble (and one --root) can both use the key
-- "lock:orders" without ever seeing each other's lock.  The tenant is:
--
--   * the AUTH user, for users this policy knows (AUTH alice alice-secret,
--     or HELLO 3 AUTH alice alice-secret);
--   * else the client name, when it is "tenant:<name>" (CLIENT SETNAME
--     tenant:acme): for clients that cannot AUTH with a user name.  <name>
--     may not be a user's (a name is no password): a client named
--     tenant:alice without a user of its own has its commands refused;
--   * else none: the default keyspace, <root>/k/, as without a policy.
--
-- The user "admin" works in the default keyspace and is the only one that
-- may run POLICY and SCRIPT FLUSH (the script cache is every tenant's);
-- tenants may not run KEYS, SCAN, RANDOMKEY or DBSIZE (they list the
-- default keyspace only).  A tenant name is letters, digits, '_' and '-'.
--
-- Native locks (LOCK.*) are one namespace for every client, outside the
-- keys (key_path does not route them), so they are kept apart by name: a
-- tenant's lock names start with "<tenant>:" (alice's "alice:orders"), and
-- a client of another tenant or of the default keyspace may not use a name
-- that starts with an AUTH user's "<user>:" (admin may).  A client-name
-- tenant is whoever sets that name, for locks as for keys.
--
-- Not kept apart: pub/sub channels (one namespace: a tenant's Redisson
-- unlock message reaches another tenant's waiters on a lock of the same
-- name, which then retry; PSUBSCRIBE * hears every tenant's) and the
-- connection commands the gateway answers (CLIENT LIST, CLIENT KILL,
-- CLIENT UNBLOCK, INFO), which no policy hook sees.
--
-- Use: zkresp --policy scripts/examples/tenants.lua --requirepass ...
-- (passwords here are examples: read them from a mounted secret in a real
-- deployment, e.g. io.lines("/etc/zkresp/users")).

local policy = {}

local USERS = {
    alice = "alice-secret",
    bob = "bob-secret",
    admin = "admin-secret",
}

-- authenticate(user, password, info) -> true to accept.  Called for every
-- user but "default" (whose password is --requirepass).
function policy.authenticate(user, password)
    return USERS[user] ~= nil and USERS[user] == password
end

-- The tenant a client's name claims ("tenant:<name>"), or nil.
local function named(client)
    return client.name and client.name:match("^tenant:([%w_%-]+)$")
end

-- The tenant of a client, or nil for the default keyspace.  A name that
-- claims a user's tenant is none (authorize refuses that client).
local function tenant(client)
    if not client then return nil end
    local user = client.user
    if user and user ~= "default" and user ~= "admin" and USERS[user] then return user end
    local name = named(client)
    if name and USERS[name] then return nil end
    return name
end

function policy.key_path(key, client)
    local t = tenant(client)
    if not t then return nil end
    return host.config.root .. "/t/" .. t .. "/" .. host.key_encode(key)
end

local DEFAULT_ONLY = { keys = true, dbsize = true, scan = true, randomkey = true }

-- Whether client may use the native lock `name` (see the top), else why not.
local function lock_name_ok(client, name)
    if client and client.user == "admin" then return true end
    local t = tenant(client)
    if t then
        if name:sub(1, #t + 1) == t .. ":" then return true end
        return "tenant " .. t .. "'s lock names start with '" .. t .. ":' (native locks are one namespace)"
    end
    local owner = name:match("^([%w_%-]+):")
    if owner and USERS[owner] and owner ~= "admin" then
        return "lock '" .. name .. "' is tenant " .. owner .. "'s"
    end
    return true
end

-- FLUSHDB and FLUSHALL remove every client's keys of the default keyspace
-- (a tenant's own keys under <root>/t/ stay): off unless set to true.
local ALLOW_FLUSH = false
local FLUSH = { flushdb = true, flushall = true }

function policy.authorize(client, command, keys, args)
    local claimed = client and named(client)
    if claimed and USERS[claimed] and not tenant(client) and client.user ~= "admin" then
        return "client name 'tenant:" .. claimed .. "' is user " .. claimed .. "'s tenant: AUTH as " .. claimed
    end
    if FLUSH[command] and not ALLOW_FLUSH then
        return "FLUSHDB and FLUSHALL are off in this policy (tenants.lua: ALLOW_FLUSH)"
    end
    if command == "script" and args and (args[2] or ""):lower() == "flush"
       and not (client and client.user == "admin") then
        return "SCRIPT FLUSH empties every tenant's scripts: admin only in this policy"
    end
    if command == "policy" and not (client and client.user == "admin") then
        return false
    end
    if DEFAULT_ONLY[command] and tenant(client) then
        return "tenants cannot list keys: '" .. command .. "' covers the default keyspace only"
    end
    if command:sub(1, 5) == "lock." then return lock_name_ok(client, keys[1]) end
    return true
end

return policy
