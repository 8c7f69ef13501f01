-- scripts/examples/tenants.lua as a boundary between tenants that share
-- one sidecar (and one ZooKeeper): what a client of one tenant can reach of
-- another's keys, native locks, scripts and channels.
--
-- Connections are client ids (sc:call_as(id, ...)); each id's AUTH user and
-- CLIENT SETNAME name are set in a table the fake host.client reads, so a
-- test changes them as AUTH / CLIENT SETNAME would (the gateway answers
-- those in C: they never reach authorize).

local S = require "world"
local null, OK, E = S.null, S.OK, S.E

local ALICE, BOB, ANON, ADMIN = 1, 2, 3, 4
local CLAIMED = E("NOPERM client name 'tenant:alice' is user alice's tenant: AUTH as alice")

-- Two sidecars loading tenants.lua; returns W, a, b and the identity table
-- (id -> {user =, name =}) both sidecars' host.client read.
local function tenants_world()
    local opts = { config = { policy = S.example("tenants") } }
    local W, a, b = S.world({ opts, opts })
    local who = {
        [ALICE] = { user = "alice" }, [BOB] = { user = "bob" },
        [ANON] = { user = "default" }, [ADMIN] = { user = "admin" },
    }
    for _, sc in ipairs({ a, b }) do
        local base = sc.host.client
        sc.host.client = function()
            local c = base()
            if not c then return nil end
            local w = who[c.id]
            if w then c.user, c.name = w.user or "default", w.name end
            return c
        end
    end
    return W, a, b, who
end

local function nodes(W, dir)
    local out = W:children(dir) or {}
    table.sort(out)
    return out
end

local function frames(list)
    local out = {}
    for _, f in ipairs(list or {}) do out[#out + 1] = f.push end
    return out
end

---------------------------------------------------------------------------
describe("tenants.lua: a client name cannot claim an AUTH user's tenant", function()
    -- Before: tenant() takes the AUTH user first, but a client of the
    -- default user (anyone who knows --requirepass, or anyone at all
    -- without it) that runs CLIENT SETNAME tenant:alice is tenant alice:
    -- its keys are /t/alice/..., and lock_name_ok lets it use "alice:"
    -- native locks.  alice's password protects nothing.  The example (and
    -- the README's table) promise "only that tenant and admin may use an
    -- AUTH user's prefix" and key namespaces per AUTH user.
    it("keys: CLIENT SETNAME tenant:alice does not read, write or delete alice's keys", function()
        local W, a, _, who = tenants_world()
        assert.same(OK, a:call_as(ALICE, "SET", "lock:orders", "alice-tok", "PX", "30000"))
        who[ANON].name = "tenant:alice"
        -- today: "alice-tok" (alice's lock token), and DEL answers 1
        assert.same(CLAIMED, a:call_as(ANON, "GET", "lock:orders"))
        assert.same(CLAIMED, a:call_as(ANON, "DEL", "lock:orders"))
        assert.same(CLAIMED, a:call_as(ANON, "SET", "planted", "x"))
        assert.equal("alice-tok", a:call_as(ALICE, "GET", "lock:orders"))
        assert.same({ "lock:orders" }, nodes(W, "/zkresp/t/alice"))
    end)

    it("locks: CLIENT SETNAME tenant:alice does not get alice's lock names", function()
        local _, a, _, who = tenants_world()
        assert.is_number(a:call_as(ALICE, "LOCK.ACQUIRE", "alice:orders", "o1"))
        who[ANON].name = "tenant:alice"
        -- today LOCK.INFO answers alice's holders, with the owner string
        -- ("o1"), her address and sidecar; and LOCK.RELEASE with that
        -- owner answers 1: alice's lock is gone while she works under it
        assert.same(CLAIMED, a:call_as(ANON, "LOCK.INFO", "alice:orders"))
        assert.same(CLAIMED, a:call_as(ANON, "LOCK.RELEASE", "alice:orders", "o1"))
        assert.equal(1, a:call_as(ALICE, "LOCK.RELEASE", "alice:orders", "o1"))
    end)

    it("an AUTH user's name wins over its client name (bob named tenant:alice is bob)", function()
        local W, a, _, who = tenants_world()
        who[BOB].name = "tenant:alice"
        assert.same(OK, a:call_as(BOB, "SET", "k", "bob"))
        assert.truthy(W:node("/zkresp/t/bob/k"))
        assert.is_nil(W:node("/zkresp/t/alice/k"))
        assert.same(E("NOPERM tenant bob's lock names start with 'bob:' (native locks are one namespace)"),
                    a:call_as(BOB, "LOCK.ACQUIRE", "alice:x", "o"))
    end)

    it("a client-name tenant that is no AUTH user keeps its namespace", function()
        local W, a, _, who = tenants_world()
        who[ANON].name = "tenant:acme"
        assert.same(OK, a:call_as(ANON, "SET", "k", "acme"))
        assert.truthy(W:node("/zkresp/t/acme/k"))
        assert.is_number(a:call_as(ANON, "LOCK.ACQUIRE", "acme:x", "o"))
    end)
end)

---------------------------------------------------------------------------
describe("tenants.lua: listing the keyspace", function()
    -- Before: KEYS and DBSIZE are refused to tenants ("they list the
    -- default keyspace only"), but SCAN and RANDOMKEY list the same
    -- default keyspace (K.key_names) and then read each name through the
    -- tenant's key_path: a tenant's SCAN answers the names that exist in
    -- BOTH the default keyspace and its own, never its own other keys, and
    -- its cursor walks the default keyspace (COUNT 1 steps = DBSIZE).  So a
    -- tenant learns whether any name exists among the default keyspace's
    -- keys (make it in its own namespace, SCAN MATCH it), and gets wrong
    -- answers about its own keys.
    it("SCAN and RANDOMKEY are refused to tenants, as KEYS and DBSIZE are", function()
        local _, a = tenants_world()
        assert.same(OK, a:call_as(ANON, "SET", "payroll:2024", "x"))
        assert.same(OK, a:call_as(ANON, "SET", "other", "x"))
        assert.same(OK, a:call_as(ALICE, "SET", "payroll:2024", "probe"))
        assert.same(OK, a:call_as(ALICE, "SET", "mine", "v"))
        -- today: {"0", {"payroll:2024"}}: not alice's "mine", and it tells
        -- her the default keyspace holds "payroll:2024"; RANDOMKEY answers
        -- "payroll:2024"; SCAN 0 COUNT 1 walks the default keyspace's names
        assert.same(E("NOPERM tenants cannot list keys: 'scan' covers the default keyspace only"),
                    a:call_as(ALICE, "SCAN", "0", "COUNT", "100"))
        assert.same(E("NOPERM tenants cannot list keys: 'randomkey' covers the default keyspace only"),
                    a:call_as(ALICE, "RANDOMKEY"))
    end)

    it("the default keyspace still lists its own keys with SCAN", function()
        local _, a = tenants_world()
        assert.same(OK, a:call_as(ANON, "SET", "d", "x"))
        assert.same(OK, a:call_as(ALICE, "SET", "t", "x"))
        assert.same({ "0", { "d" } }, a:call_as(ANON, "SCAN", "0"))
    end)
end)

---------------------------------------------------------------------------
describe("tenants.lua: keys stay in the caller's namespace", function()
    it("every key command maps through the caller's tenant, on either sidecar", function()
        local W, a, b = tenants_world()
        assert.same(OK, a:call_as(BOB, "SET", "k", "bob"))
        assert.equal(1, a:call_as(BOB, "HSET", "h", "f", "v"))
        -- alice sees none of bob's, whatever the command
        for _, sc in ipairs({ a, b }) do
            assert.equal(null, sc:call_as(ALICE, "GET", "k"))
            assert.equal(0, sc:call_as(ALICE, "EXISTS", "k", "h"))
            assert.same({ ok = "none" }, sc:call_as(ALICE, "TYPE", "h"))
            assert.equal(null, sc:call_as(ALICE, "OBJECT", "ENCODING", "k"))
            assert.equal(null, sc:call_as(ALICE, "MEMORY", "USAGE", "k"))
            assert.equal(-2, sc:call_as(ALICE, "PTTL", "k"))
            assert.equal(0, sc:call_as(ALICE, "HLEN", "h"))
        end
        -- RENAME / COPY / DEL of the same names act on alice's own
        assert.same(E("ERR no such key"), a:call_as(ALICE, "RENAME", "k", "k2"))
        assert.same(OK, a:call_as(ALICE, "SET", "src", "alice"))
        assert.equal(1, a:call_as(ALICE, "COPY", "src", "k", "DB", "0"))
        assert.same(OK, b:call_as(ALICE, "RENAME", "k", "h"))
        assert.equal(0, b:call_as(ALICE, "DEL", "nothing"))
        assert.equal("bob", b:call_as(BOB, "GET", "k"))
        assert.same({ map = { "f", "v" } }, b:call_as(BOB, "HGETALL", "h"))
        assert.same({ "h", "src" }, nodes(W, "/zkresp/t/alice"))
        assert.same({ "h", "k" }, nodes(W, "/zkresp/t/bob"))
        assert.same({}, nodes(W, "/zkresp/k"))
    end)

    it("a script's undeclared keys are the caller's tenant's too", function()
        local W, a, b = tenants_world()
        assert.same(OK, a:call_as(BOB, "SET", "secret", "bob-secret"))
        local body = "redis.call('SET', 'written', 'x'); return redis.call('GET', 'secret')"
        assert.equal(null, a:call_as(ALICE, "EVAL", body, "0"))
        local sha = a:call_as(ALICE, "SCRIPT", "LOAD", body)
        -- the cached script run by another tenant runs in that one's keys
        assert.equal("bob-secret", b:call_as(BOB, "EVALSHA", sha, "0"))
        assert.truthy(W:node("/zkresp/t/alice/written"))
        assert.truthy(W:node("/zkresp/t/bob/written"))
        assert.is_nil(W:node("/zkresp/k/written"))
    end)

    it("a script's redis.call is authorized: no KEYS or FLUSHDB from inside EVAL", function()
        local _, a = tenants_world()
        local r = a:call_as(ALICE, "EVAL", "return redis.pcall('KEYS', '*')", "0")
        assert.same(E("NOPERM tenants cannot list keys: 'keys' covers the default keyspace only"), r)
        r = a:call_as(ALICE, "EVAL", "return redis.pcall('SCAN', '0')", "0")
        assert.same(E("NOPERM tenants cannot list keys: 'scan' covers the default keyspace only"), r)
    end)

    it("MULTI/EXEC runs in the caller's namespace and is authorized at queue time", function()
        local W, a = tenants_world()
        local function send(id, mode, ...)
            local args = { ... }
            local t = W:spawn(a, function() return a.M.dispatch(args, false, 0, mode) end)
            t.client = id
            W:run_until(function() return t.done end)
            return t.result
        end
        assert.same(OK, a:call_as(BOB, "SET", "k", "bob"))
        assert.same(OK, send(ALICE, "begin", "MULTI"))
        assert.same({ ok = "QUEUED" }, send(ALICE, "queued", "GET", "k"))
        assert.same({ ok = "QUEUED" }, send(ALICE, "queued", "SET", "k", "alice"))
        assert.same({ null, OK }, send(ALICE, "queued", "EXEC"))
        assert.equal("bob", a:call_as(BOB, "GET", "k"))
        assert.same(OK, send(ALICE, "begin", "MULTI"))
        assert.same(E("NOPERM tenants cannot list keys: 'dbsize' covers the default keyspace only"),
                    send(ALICE, "queued", "DBSIZE"))
        assert.same(E("EXECABORT Transaction discarded because of previous errors."),
                    send(ALICE, "queued", "EXEC"))
    end)

    it("a tenant's key expiring on its owner leaves the default key of that name alone", function()
        local W, a = tenants_world()
        assert.same(OK, a:call_as(ANON, "SET", "k", "default"))
        assert.same(OK, a:call_as(ALICE, "SET", "k", "alice", "PX", "100"))
        W:advance(150)
        W:run_until(function() return W:node("/zkresp/t/alice/k") == nil end)
        assert.equal("default", a:call_as(ANON, "GET", "k"))
        assert.equal(null, a:call_as(ALICE, "GET", "k"))
    end)
end)

---------------------------------------------------------------------------
describe("tenants.lua: native lock names", function()
    it("every LOCK.* command checks the name's prefix, not only ACQUIRE", function()
        local _, a = tenants_world()
        local token = a:call_as(ALICE, "LOCK.ACQUIRE", "alice:orders", "o1", "PX", "60000")
        assert.is_number(token)
        local refused = E("NOPERM lock 'alice:orders' is tenant alice's")
        for _, cmd in ipairs({
            { "LOCK.ACQUIRE", "alice:orders", "x" },
            { "LOCK.RELEASE", "alice:orders", "o1" },
            { "LOCK.RENEW", "alice:orders", "o1", "PX", "1" },
            { "LOCK.CONVERT", "alice:orders", "o1", "MODE", "NL" },
            { "LOCK.INFO", "alice:orders" },
        }) do
            assert.same(refused, a:call_as(ANON, table.unpack(cmd)))
        end
        -- the hold is intact
        assert.equal(1, a:call_as(ALICE, "LOCK.RELEASE", "alice:orders", "o1"))
    end)

    it("names that only look like alice's are other locks", function()
        local W, a = tenants_world()
        assert.is_number(a:call_as(ALICE, "LOCK.ACQUIRE", "alice:x", "o1"))
        -- case, a NUL before the ':' or a leading byte make another name,
        -- and so another lock node: none of them is alice's lock
        for _, name in ipairs({ "Alice:x", "alice\0:x", " alice:x", "alice" }) do
            local tok = a:call_as(ANON, "LOCK.ACQUIRE", name, "o2", "WAIT", "0")
            assert.is_number(tok, name)
        end
        local info = a:call_as(ALICE, "LOCK.INFO", "alice:x").map
        assert.equal(1, #info[2])
        assert.is_not_nil(W:node("/zkresp/l/alice:x"))
    end)
end)

---------------------------------------------------------------------------
describe("tenants.lua: what is shared between tenants", function()
    -- Before (a gap of the example; no key is touched): the script cache
    -- is one for all sidecars and all tenants, and SCRIPT FLUSH is not
    -- refused to a tenant, so any tenant empties every other tenant's
    -- cache on every sidecar (their EVALSHA then answer NOSCRIPT).  The
    -- example refuses FLUSHDB/FLUSHALL for what they do to others; SCRIPT
    -- FLUSH is the same kind of command.
    it("a tenant cannot SCRIPT FLUSH other tenants' scripts", function()
        local _, a, b = tenants_world()
        local sha = b:call_as(BOB, "SCRIPT", "LOAD", "return 'bob'")
        -- today: OK, and bob's EVALSHA answers NOSCRIPT
        assert.same(E("NOPERM SCRIPT FLUSH empties every tenant's scripts: admin only in this policy"),
                    a:call_as(ALICE, "SCRIPT", "FLUSH"))
        assert.equal("bob", b:call_as(BOB, "EVALSHA", sha, "0"))
        assert.same(OK, a:call_as(ADMIN, "SCRIPT", "FLUSH"))
    end)

    -- Not claimed by the example, no hook could fix it (channels have no
    -- key_path): pub/sub is one namespace for all tenants.  Two tenants'
    -- Redisson RLock("lock:orders") (two keys, /t/alice/... and
    -- /t/bob/...) share the channel redisson_lock__channel:{lock:orders},
    -- so alice's unlock wakes bob's waiters, and a PSUBSCRIBE * sees every
    -- tenant's unlock events and lock names.  Kept as a record of it.
    it("pub/sub channels are shared: alice's unlock message reaches bob's subscriber", function()
        local W, a, b = tenants_world()
        b:call_as(BOB, "SUBSCRIBE", "redisson_lock__channel:{lock:orders}")
        b:call_as(ADMIN + 1, "PSUBSCRIBE", "*")
        assert.same(OK, a:call_as(ALICE, "SET", "lock:orders", "t"))
        local unlock = "redis.call('DEL', KEYS[1]); redis.call('PUBLISH', KEYS[2], ARGV[1]); return 1"
        assert.equal(1, a:call_as(ALICE, "EVAL", unlock, "2", "lock:orders",
                                  "redisson_lock__channel:{lock:orders}", "0"))
        W:run_until(function() return b.pushed[BOB] and #b.pushed[BOB] >= 1 and b.pushed[ADMIN + 1] end)
        assert.same({ { "message", "redisson_lock__channel:{lock:orders}", "0" } }, frames(b.pushed[BOB]))
        assert.same({ { "pmessage", "*", "redisson_lock__channel:{lock:orders}", "0" } },
                    frames(b.pushed[ADMIN + 1]))
    end)
end)
