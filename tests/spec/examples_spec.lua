-- The example policies in scripts/examples/, each loaded as --policy would
-- load it, against the ZooKeeper model.

local S = require "world"
local null, OK, E = S.null, S.OK, S.E

-- A sidecar's options that load example policy `name`.
local function with_example(name)
    return { config = { policy = S.example(name) } }
end

local function as_client(sc, c)
    c.id = c.id or 1
    c.addr = c.addr or "127.0.0.1:50000"
    c.resp = c.resp or 2
    c.user = c.user or "default"
    sc.host.client = function() return c end
end

local function logged(sc, pattern)
    local out = {}
    for _, l in ipairs(sc.logs) do
        if l:find(pattern) then out[#out + 1] = l end
    end
    return out
end

describe("examples/tenants.lua", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world({ with_example("tenants"), with_example("tenants") })
    end)

    it("authenticates its users; the default user is not its business", function()
        assert.is_true(a.M.authenticate("alice", "alice-secret", "127.0.0.1:1"))
        assert.is_false(a.M.authenticate("alice", "bob-secret", "127.0.0.1:1"))
        assert.is_false(a.M.authenticate("mallory", "", "127.0.0.1:1"))
    end)

    it("keeps each AUTH user's keys in its own namespace", function()
        as_client(a, { user = "alice" })
        as_client(b, { user = "bob" })
        assert.same(OK, a:call("SET", "lock:orders", "alice-tok", "NX", "PX", "30000"))
        assert.same(OK, b:call("SET", "lock:orders", "bob-tok", "NX", "PX", "30000"))
        assert.equal("alice-tok", a:call("GET", "lock:orders"))
        assert.equal("bob-tok", b:call("GET", "lock:orders"))
        assert.truthy(W:node("/zkresp/t/alice/lock:orders"))
        assert.truthy(W:node("/zkresp/t/bob/lock:orders"))
        assert.is_nil(W:node(a:path("lock:orders")))
        -- The default user (and admin) see the default keyspace.
        as_client(b, { user = "default" })
        assert.equal(null, b:call("GET", "lock:orders"))
        as_client(b, { user = "admin" })
        assert.equal(null, b:call("GET", "lock:orders"))
        -- And alice's release is alice's.
        as_client(b, { user = "alice" })
        assert.equal(1, b:call("DELIFEQ", "lock:orders", "alice-tok"))
        as_client(b, { user = "bob" })
        assert.equal("bob-tok", b:call("GET", "lock:orders"))
    end)

    it("uses a client name tenant:<name> when there is no user", function()
        as_client(a, { name = "tenant:acme" })
        assert.same(OK, a:call("SET", "k", "v"))
        assert.truthy(W:node("/zkresp/t/acme/k"))
        as_client(a, { name = "tenant:../etc" }) -- not a tenant name: the default keyspace
        assert.equal(null, a:call("GET", "k"))
    end)

    it("keeps native locks apart by name: a tenant's start with '<tenant>:'", function()
        as_client(a, { user = "alice" })
        local token = a:call("LOCK.ACQUIRE", "alice:orders", "o1")
        assert.is_number(token)
        assert.same(E("NOPERM tenant alice's lock names start with 'alice:' (native locks are one namespace)"),
                    a:call("LOCK.ACQUIRE", "orders", "o1"))
        -- another tenant, and the default keyspace, may not touch alice's
        as_client(b, { user = "bob" })
        assert.same(E("NOPERM tenant bob's lock names start with 'bob:' (native locks are one namespace)"),
                    b:call("LOCK.RELEASE", "alice:orders", "o1"))
        assert.is_number(b:call("LOCK.ACQUIRE", "bob:orders", "o1"))
        as_client(b, { user = "default" })
        assert.same(E("NOPERM lock 'alice:orders' is tenant alice's"), b:call("LOCK.INFO", "alice:orders"))
        assert.is_number(b:call("LOCK.ACQUIRE", "orders", "o1"))
        -- a client-name tenant gets the same rule; admin may look at any
        as_client(b, { name = "tenant:acme" })
        assert.same(E("NOPERM tenant acme's lock names start with 'acme:' (native locks are one namespace)"),
                    b:call("LOCK.ACQUIRE", "orders", "o2"))
        as_client(b, { user = "admin" })
        local info = b:call("LOCK.INFO", "alice:orders").map
        assert.equal("holders", info[1])
        assert.equal(1, #info[2])
        -- alice's hold is still hers
        assert.equal(1, a:call("LOCK.RELEASE", "alice:orders", "o1"))
    end)

    it("keeps KEYS, DBSIZE and POLICY from tenants", function()
        as_client(a, { user = "alice" })
        assert.same(E("NOPERM tenants cannot list keys: 'keys' covers the default keyspace only"),
                    a:call("KEYS", "*"))
        assert.same(E("NOPERM User alice has no permissions to run the 'policy' command"),
                    a:call("POLICY", "RELOAD"))
        as_client(a, { user = "admin" })
        assert.same(OK, a:call("POLICY", "RELOAD"))
        assert.is_table(a:call("KEYS", "*"))
    end)
end)

describe("examples/ttl_caps.lua", function()
    local W, a
    before_each(function()
        W, a = S.world({ with_example("ttl_caps") })
    end)

    it("gives a lock set without a TTL the default one, and makes it ephemeral", function()
        assert.same(OK, a:call("SET", "lock:x", "t", "NX"))
        local left = a:call("PTTL", "lock:x")
        assert.is_true(left > 29900 and left <= 30000)
        assert.equal(a.sid, W:node(a:path("lock:x")).stat.ephemeralOwner)
        W:advance(30001)
        assert.equal(null, a:call("GET", "lock:x"))
    end)

    it("clamps TTLs to the rule's range and every TTL to a day", function()
        a:call("SET", "lock:long", "t", "PX", "999999")
        assert.is_true(a:call("PTTL", "lock:long") <= 60000)
        a:call("SET", "lock:short", "t", "PX", "5")
        assert.is_true(a:call("PTTL", "lock:short") > 90)
        a:call("SET", "lease:l", "t", "EX", "100")
        assert.is_true(a:call("PTTL", "lease:l") <= 30000)
        a:call("SET", "other", "v", "EX", tostring(7 * 86400))
        assert.equal(86400, a:call("TTL", "other"))
        a:call("SET", "plain", "v")
        assert.equal(-1, a:call("PTTL", "plain"))
        assert.equal(1, a:call("PEXPIRE", "lock:x2", "1") + 1) -- missing key: 0
    end)
end)

describe("examples/audit.lua", function()
    it("logs acquisitions, releases, expiries and losses with who and the tokens", function()
        local W, a, b = S.world({ with_example("audit"), {} })
        as_client(a, { user = "alice", addr = "10.1.2.3:4567", name = "worker 7" })
        a:call("SET", "lock:a", "tok-1", "NX", "PX", "30000")
        a:call("DELIFEQ", "lock:a", "tok-1")
        a:call("SET", "lock:b", "tok-2", "NX", "PX", "100")
        a:call("SET", "lock:c", "tok-3", "NX", "PX", "30000")
        W:advance(150)
        b:call("DEL", "lock:c")
        W:advance(10)
        local fence = nil
        local lines = logged(a, "^info audit ")
        assert.equal(6, #lines, table.concat(lines, "\n"))
        assert.matches("^info audit event=acquire key=lock:a user=alice addr=10.1.2.3:4567 " ..
                       "name=\"worker 7\" token=tok%-1 fence=%d+ ttl_ms=30000$", lines[1])
        fence = lines[1]:match("fence=(%d+)")
        assert.matches("event=release key=lock:a .* token=tok%-1 fence=" .. fence, lines[2])
        assert.matches("event=acquire key=lock:b", lines[3])
        assert.matches("event=acquire key=lock:c", lines[4])
        assert.matches("event=expire key=lock:b .*token=tok%-2", lines[5])
        assert.matches("event=lost key=lock:c .*reason=deleted", lines[6])
    end)

    it("logs a native lock's owner and mode with its fencing token", function()
        local W, a = S.world({ with_example("audit") })
        as_client(a, { user = "alice", addr = "10.1.2.3:4567" })
        local token = a:call("LOCK.ACQUIRE", "orders", "owner-1", "MODE", "PR", "PX", "5000")
        assert.equal(1, a:call("LOCK.RELEASE", "orders", "owner-1"))
        W:advance(10)
        local lines = logged(a, "^info audit ")
        assert.equal(2, #lines, table.concat(lines, "\n"))
        assert.matches("^info audit event=acquire key=orders user=alice addr=10.1.2.3:4567 name=%- " ..
                       "owner=owner%-1 mode=PR fence=" .. token .. " ttl_ms=5000$", lines[1])
        assert.matches("^info audit event=release key=orders .* owner=owner%-1 mode=PR fence=" .. token, lines[2])
    end)
end)

describe("examples/lockinfo.lua", function()
    it("LOCKINFO answers the holder, its TTL and its fencing token", function()
        local W, a, b = S.world({ with_example("lockinfo"), with_example("lockinfo") })
        assert.equal(null, a:call("LOCKINFO", "lock"))
        a:call("SET", "lock", "tok-1", "NX", "PX", "30000")
        local node = W:node(a:path("lock"))
        local r = a:call("LOCKINFO", "lock").map
        local m = {}
        for i = 1, #r, 2 do m[r[i]] = r[i + 1] end
        assert.equal("tok-1", m.holder)
        assert.equal("string", m.type)
        assert.is_true(m.pttl > 29000 and m.pttl <= 30000)
        assert.equal(node.stat.czxid, m.fencing_token)
        assert.equal(string.format("0x%x", a.sid), m.owner_session)
        assert.equal("ephemeral", m.lifetime)
        assert.equal(1, m["local"])
        r = b:call("LOCKINFO", "lock").map
        assert.equal(0, r[14])
        -- A new acquisition has a greater token.
        a:call("DEL", "lock")
        b:call("SET", "lock", "tok-2", "NX", "PX", "30000")
        r = a:call("LOCKINFO", "lock").map
        assert.is_true(r[8] > node.stat.czxid)
        -- A Redisson-style hash lock: its first field holds it.
        a:call("HSET", "rlock", "uuid-1:42", "1")
        r = a:call("LOCKINFO", "rlock").map
        assert.equal("uuid-1:42", r[2])
        assert.equal(-1, r[6])
        assert.equal("persistent", r[12])
        assert.is_table(a.M.commands.lockinfo)
        assert.same(E("ERR wrong number of arguments for 'lockinfo' command"), a:call("LOCKINFO"))
    end)
end)

describe("examples/lock_delay.lua", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world({ with_example("lock_delay"), with_example("lock_delay") })
    end)

    it("holds back a lock whose holder vanished for the delay (10 s)", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        W:advance(10)
        a:lose({ expire_old = true }) -- the holder's session ends: the node goes
        assert.is_nil(W:node(a:path("lock")))
        assert.equal(null, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
        W:advance(5000)
        assert.equal(null, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
        local r = b:call("EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "lock")
        assert.matches("lock%-delay: the holder vanished without releasing; free in %d+ ms", r.err)
        W:advance(5100)
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "30000"))
        assert.equal("t2", a:call("GET", "lock"))
    end)

    it("a released lock or an expired one is free at once", function()
        assert.same(OK, a:call("SET", "lock", "t1", "NX", "PX", "30000"))
        W:advance(10)
        assert.equal(1, a:call("DELIFEQ", "lock", "t1"))
        W:advance(10)
        assert.same(OK, b:call("SET", "lock", "t2", "NX", "PX", "100"))
        W:advance(200) -- expired and deleted by b
        assert.same(OK, a:call("SET", "lock", "t3", "NX", "PX", "30000"))
        W:advance(10)
        -- And the markers went with the releases.
        assert.equal(1, W:node("/zkresp/ld").stat.numChildren)
        assert.equal(1, a:call("DEL", "lock"))
        W:advance(10)
        assert.equal(0, W:node("/zkresp/ld").stat.numChildren)
    end)

    it("holds back a native lock whose holder vanished, for new requests", function()
        assert.is_number(a:call("LOCK.ACQUIRE", "nl", "o1", "PX", "30000"))
        W:advance(10)
        a:lose({ expire_old = true }) -- the holder's session ends: its request goes
        assert.equal(null, b:call("LOCK.ACQUIRE", "nl", "o2", "WAIT", "0"))
        W:advance(5000)
        local r = b:call("LOCK.ACQUIRE", "nl", "o2", "WAIT", "100")
        assert.matches("TRYAGAIN lock%-delay: the holder vanished without releasing; free in %d+ ms", r.err)
        W:advance(5100)
        assert.is_number(b:call("LOCK.ACQUIRE", "nl", "o2", "WAIT", "0"))
        assert.equal(1, b:call("LOCK.RELEASE", "nl", "o2"))
        W:advance(10)
        assert.equal(0, W:node("/zkresp/ld").stat.numChildren)
    end)

    it("holds back a native lock whose holder vanished, for requests already queued too", function()
        assert.is_number(a:call("LOCK.ACQUIRE", "nq", "o1", "PX", "30000"))
        W:advance(10)
        local short = b:start("LOCK.ACQUIRE", "nq", "o2", "WAIT", "3000")
        local long = b:start("LOCK.ACQUIRE", "nq", "o3", "WAIT", "20000")
        W:advance(100)
        a:lose({ expire_old = true }) -- the holder's session ends: its request goes
        local lost_at = W.now
        W:advance(2000)
        assert.is_falsy(short.done, "the first waiter, held back, keeps waiting")
        W:run_until(function() return short.done end)
        assert.equal(null, short.result) -- its WAIT ran out during the delay
        W:advance(5000)
        assert.is_falsy(long.done, "held back for the delay")
        W:run_until(function() return long.done end)
        assert.is_number(long.result)
        assert.is_true(W.now - lost_at >= 10000, "granted " .. (W.now - lost_at) .. " ms after the loss")
        assert.equal(1, b:call("LOCK.RELEASE", "nq", "o3"))
        W:advance(10)
        assert.equal(0, W:node("/zkresp/ld").stat.numChildren)
    end)

    it("a queued request is granted at once when the holder releases", function()
        assert.is_number(a:call("LOCK.ACQUIRE", "nq", "o1", "PX", "30000"))
        W:advance(10)
        local w = b:start("LOCK.ACQUIRE", "nq", "o2", "WAIT", "20000")
        W:advance(100)
        local at = W.now
        assert.equal(1, a:call("LOCK.RELEASE", "nq", "o1"))
        W:run_until(function() return w.done end)
        assert.is_number(w.result)
        assert.is_true(W.now - at < 500, "granted " .. (W.now - at) .. " ms after the release")
        assert.equal(1, b:call("LOCK.RELEASE", "nq", "o2"))
    end)

    it("a released native lock is free at once, shared holds too; no marker stays", function()
        assert.is_number(a:call("LOCK.ACQUIRE", "nr", "o1", "MODE", "PR"))
        assert.is_number(b:call("LOCK.ACQUIRE", "nr", "o2", "MODE", "PR"))
        W:advance(10)
        assert.equal(1, a:call("LOCK.RELEASE", "nr", "o1"))
        assert.equal(1, b:call("LOCK.RELEASE", "nr", "o2"))
        W:advance(10)
        assert.is_number(a:call("LOCK.ACQUIRE", "nr", "o3", "WAIT", "0"))
        assert.equal(1, a:call("LOCK.RELEASE", "nr", "o3"))
        W:advance(10)
        assert.equal(0, W:node("/zkresp/ld").stat.numChildren)
    end)

    it("a hold converted up clears its marker at its release (its token changed)", function()
        local t = a:call("LOCK.ACQUIRE", "lc", "o", "MODE", "PR")
        assert.equal("integer", math.type(t))
        local t2 = a:call("LOCK.CONVERT", "lc", "o", "MODE", "EX")
        assert.is_true(math.type(t2) == "integer" and t2 > t)
        assert.equal(1, a:call("LOCK.RELEASE", "lc", "o"))
        W:advance(300)
        assert.equal(0, #W:children("/zkresp/ld"))
        assert.equal("integer", math.type(b:call("LOCK.ACQUIRE", "lc", "x", "WAIT", "0")))
    end)

    -- A release grants shared requests together, with one token: the
    -- marker names the request too, so one holder's release does not
    -- clear another's marker.
    it("a shared holder's release leaves the marker of another that vanished", function()
        local p, q, r = W:sidecar(with_example("lock_delay")), W:sidecar(with_example("lock_delay")),
            W:sidecar(with_example("lock_delay"))
        assert.equal("integer", math.type(p:call("LOCK.ACQUIRE", "ld", "h")))
        W:advance(300)
        local r2 = q:start("LOCK.ACQUIRE", "ld", "R2", "MODE", "PR", "WAIT", "5000")
        W:advance(50)
        local r1 = p:start("LOCK.ACQUIRE", "ld", "R1", "MODE", "PR", "WAIT", "5000")
        W:advance(50)
        assert.equal(1, p:call("LOCK.RELEASE", "ld", "h"))
        W:run_until(function() return r1.done and r2.done end)
        assert.equal("integer", math.type(r1.result))
        assert.equal(r1.result, r2.result) -- granted together by the release
        W:advance(300)
        local m = "/zkresp/ld/" .. W:children("/zkresp/ld")[1]
        local last = W:node(m).data
        -- the holder whose marker was written last (it names its request:
        -- R2 queued first) vanishes without releasing; the other releases
        local gone, other, owner = p, q, "R2"
        if last:match("%-0*1$") then gone, other, owner = q, p, "R1" end
        gone:expire()
        W:advance(50)
        assert.equal(last, W:node(m).data)
        assert.equal(1, other:call("LOCK.RELEASE", "ld", owner))
        W:advance(500)
        assert.is_not_nil(W:node(m), "the vanished holder's marker is still there")
        assert.equal(null, r:call("LOCK.ACQUIRE", "ld", "x", "WAIT", "0"))
    end)
end)
