-- long_life_spec: what a sidecar keeps in its Lua state over a long life.
-- An application may lock a new key per order id: after thousands of
-- distinct keys, clients and events, once everything is released or
-- expired and the clock has passed every deadline, each per-key table of
-- the scripts is back to its starting size, and each cache stays at its
-- cap.  The tables are reached through the modules' functions' upvalues
-- (census.lua: a generic walk used to find them, kept for new cases).

local S = require "world"
local C = require "census"

local N = 600 -- distinct keys per case (a few hundred ms each)

local upv = C.upvalue

-- Every per-key table of every sidecar is back to (at most a few entries
-- over) its size before `fn` ran, once the clock passed every deadline.
local function settles(W, scs, fn, slack)
    local before = {}
    for i, sc in ipairs(scs) do before[i] = C.per_key(sc) end
    fn()
    W:advance(120000)
    local grown = {}
    for i, sc in ipairs(scs) do
        for name, n in pairs(C.per_key(sc)) do
            if n > (before[i][name] or 0) + (slack or 2) then
                grown[#grown + 1] = string.format("sidecar %d %s: %d -> %d", i, name, before[i][name] or 0, n)
            end
        end
    end
    table.sort(grown)
    assert.same({}, grown)
end

-- A command of client id as the gateway sends it inside MULTI (multi_spec's).
local function in_multi(sc, id, mode, ...)
    local args = { ... }
    local M = sc.M
    local t = sc.world:spawn(sc, function() return M.dispatch(args, false, 0, mode) end)
    t.client = id
    sc.world:run_until(function() return t.done end)
    return t.result
end

local function world(n)
    local W, a, b, c = S.world(n)
    S.warm(W, a, b, c)
    return W, a, b, c
end

describe("long life: native locks", function()
    -- FAILS (lockwait.lua's `own`, fed by LW.created, emptied by our own
    -- deletes and by a session change only).  An application behind a
    -- load balancer acquires through one sidecar and releases through
    -- another: the holder's sidecar finds the node gone at its lease timer
    -- (locks.lua lease_due: NONODE) and forgets the hold, but keeps the
    -- request's path in `own` for as long as its session lasts (months):
    -- about 130 bytes per lock key (the path, ~100 bytes, and its slot),
    -- so ~130 MB per million order ids, never given back (the idle trim
    -- cannot: it is live).  Nothing a client sees, but unbounded memory.
    it("forgets its own request of a hold released through another sidecar", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N do
                local k = "order:" .. i
                assert.is_number(a:call("LOCK.ACQUIRE", k, "o" .. i, "PX", "5000"))
                assert.equal(1, b:call("LOCK.RELEASE", k, "o" .. i))
            end
        end)
    end)

    -- FAILS for the same reason: a waiter on a granted by a release
    -- through b (the hold's own request stays in a's `own`).
    it("forgets its own requests when a release through another sidecar hands the lock over", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N // 2 do
                local k = "order:" .. i
                assert.is_number(a:call("LOCK.ACQUIRE", k, "o", "PX", "1000"))
                local t = a:start("LOCK.ACQUIRE", k, "w", "PX", "100", "WAIT", "5000")
                W:advance(20)
                assert.equal(1, b:call("LOCK.RELEASE", k, "o"))
                W:run_until(function() return t.done end)
                assert.is_number(t.result)
            end
        end)
    end)

    it("keeps nothing per key after acquire/release, leases ending and WAITs running out", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N do
                local k = "order:" .. i
                assert.is_number(a:call("LOCK.ACQUIRE", k, "o", "PX", i % 2 == 0 and "1000" or "100"))
                assert.equal(S.null, b:call("LOCK.ACQUIRE", k, "x", "WAIT", "10"))
                assert.equal(S.null, a:call("LOCK.ACQUIRE", k, "y", "WAIT", "10"))
                if i % 2 == 0 then assert.equal(1, a:call("LOCK.RELEASE", k, "o")) end
            end
        end)
    end)

    it("keeps nothing of waiters whose client went or was unblocked", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N // 2 do
                local k = "order:" .. i
                assert.is_number(a:call("LOCK.ACQUIRE", k, "o", "PX", "1000"))
                local sc = i % 2 == 0 and a or b
                local t = sc:start("LOCK.ACQUIRE", k, "w", "WAIT", "5000")
                W:advance(20)
                if i % 3 == 0 then sc:abandon(t) else assert.equal(1, sc:unblock(t, i % 3 == 1 and "error" or "timeout")) end
                W:run_until(function() return t.done end)
                assert.equal(1, a:call("LOCK.RELEASE", k, "o"))
            end
        end)
    end)

    it("keeps nothing per key after lost replies of creates, writes and deletes", function()
        local W, a, b = world(2)
        local ops = { "create", "multi", "set", "delete" }
        settles(W, { a, b }, function()
            for i = 1, N // 2 do
                local k = "order:" .. i
                a:fail_next({ op = ops[i % 4 + 1], when = "after" })
                a:call("LOCK.ACQUIRE", k, "o", "PX", "1000")
                a:fail_next({ op = ops[(i + 1) % 4 + 1], when = "after" })
                a:call("LOCK.ACQUIRE", k, "o", "PX", "1000")
                a:fail_next({ op = ops[(i + 2) % 4 + 1], when = "after" })
                a:call("LOCK.RELEASE", k, "o")
                a.faults = {}
                W:advance(10)
            end
        end)
    end)

    it("keeps nothing of holds and waiters whose session was given up", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for r = 1, 3 do
                local ts = {}
                for i = 1, N // 6 do
                    local k = "order:" .. r .. ":" .. i
                    assert.is_number(a:call("LOCK.ACQUIRE", k, "o", "PX", "60000"))
                    ts[#ts + 1] = a:start("LOCK.ACQUIRE", k, "w", "WAIT", "60000")
                    ts[#ts + 1] = b:start("LOCK.ACQUIRE", k, "x", "WAIT", "60000")
                    assert.is_number(b:call("LOCK.ACQUIRE", "b" .. k, "o", "PX", "60000"))
                    ts[#ts + 1] = a:start("LOCK.ACQUIRE", "b" .. k, "w", "WAIT", "60000")
                end
                W:advance(50)
                if r == 1 then a:expire()
                elseif r == 2 then a:lose({ expire_old = true })
                else a:disconnect(); W:advance(100000); a:reconnect() end
                W:advance(200000)
                for _, t in ipairs(ts) do if not t.done then t.sc:abandon(t) end end
                W:advance(70000)
            end
        end)
    end)

    it("keeps its lock caches at their caps", function()
        local W, a = world(1)
        for i = 1, 1500 do
            assert.is_number(a:call("LOCK.ACQUIRE", "order:" .. i, "o" .. i, "PX", "1000"))
            assert.equal(1, a:call("LOCK.RELEASE", "order:" .. i, "o" .. i))
        end
        assert.is_true(C.count(upv(a, "lockstore", "tables")) <= 1024)
        assert.is_true(C.count(upv(a, "lockstore", "listings")) <= 1024)
        assert.is_true(C.count(upv(a, "lockstore", "parsed").t) <= 4096)
        assert.is_true(C.count(upv(a, "lockstore", "hashed").t) <= 1024)
        assert.is_true(C.count(upv(a, "lockstore", "seqs").t) <= 1024)
    end)
end)

describe("long life: string keys, transactions, scripts", function()
    it("keeps nothing per key after keys set, deleted elsewhere, expired, and after lost replies", function()
        local W, a, b = world(2)
        local ops = { "create", "multi", "set", "delete", "get" }
        settles(W, { a, b }, function()
            for i = 1, N // 2 do
                local k = "k:" .. i
                a:call("SET", k, "v", "PX", "500")
                a:call("SET", "p" .. k, "v")
                b:call("DEL", k)
                b:call("SET", "p" .. k, "w", "PX", "100")
                a:fail_next({ op = ops[i % 5 + 1], when = i % 2 == 0 and "after" or "before" })
                a:call("SET", "q" .. k, "v", "PX", "300")
                a:fail_next({ op = ops[(i + 1) % 5 + 1], when = "after" })
                a:call("INCR", "n" .. k)
                a:call("DEL", "n" .. k)
                a.faults = {}
                W:advance(10)
            end
            W:advance(5000)
            for i = 1, N // 2 do a:call("GET", "pk:" .. i); a:call("GET", "qk:" .. i) end
        end)
        assert.equal(2, a:call("DBSIZE")) -- the warm keys
        assert.is_true(C.count(upv(a, "shared", "shared")) <= a.require("shared").SHARED_MAX)
        assert.is_true(C.count(upv(a, "guard", "pmarks")) <= a.require("guard").PMARKS)
    end)

    it("keeps nothing of WATCH and MULTI of clients gone mid-transaction", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N do
                local id = 100 + i
                local k = "k:" .. i
                a:call_as(id, "WATCH", k, "w2:" .. i)
                if i % 2 == 0 then
                    assert.same(S.OK, in_multi(a, id, "begin", "MULTI"))
                    assert.same({ ok = "QUEUED" }, in_multi(a, id, "queued", "SET", k, "v"))
                end
                if i % 3 == 0 then b:call("SET", k, "x", "PX", "100") end
                a:run(function() a.M.on_client_gone(id) end)
            end
        end)
    end)

    it("keeps nothing of channels and patterns subscribed then left, or of clients gone subscribed", function()
        local W, a, b = world(2)
        settles(W, { a, b }, function()
            for i = 1, N // 2 do
                local id = 100 + i
                a:call_as(id, "SUBSCRIBE", "ch:" .. i)
                a:call_as(id, "PSUBSCRIBE", "p:" .. i .. ":*")
                b:call("PUBLISH", "ch:" .. i, "m")
                b:call("PUBLISH", "p:" .. i .. ":x", "m")
                if i % 2 == 0 then
                    a:call_as(id, "UNSUBSCRIBE", "ch:" .. i)
                    a:call_as(id, "PUNSUBSCRIBE", "p:" .. i .. ":*")
                end
                a:run(function() a.M.on_client_gone(id) end)
                W:advance(50)
            end
            W:advance(600000)
        end)
    end)

    it("keeps EVAL's scripts at EVAL_LOCAL_MAX and the published ones at --script-cache-max", function()
        local W, a, b = world(2)
        local SC = a.require("script_cache")
        for i = 1, 1200 do
            a:call("EVAL", "return " .. i, "0")
            b:call("EVALSHA", string.format("%040x", i), "0") -- unknown: nothing kept
        end
        W:advance(10000)
        assert.equal(SC.EVAL_LOCAL_MAX, C.count(upv(a, "script_cache", "entries")))
        assert.equal(SC.EVAL_LOCAL_MAX, C.count(upv(a, "script_cache", "by_body")))
        assert.equal(SC.max_scripts(), C.count(upv(a, "script_cache", "published")))
        assert.equal(0, C.count(upv(b, "script_cache", "entries")))
    end)
end)
