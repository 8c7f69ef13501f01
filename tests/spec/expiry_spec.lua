-- Expiry: the owner deletes its keys at the deadline on its monotonic
-- clock; every sidecar reads an expired key as absent even before the
-- delete lands; others compute PTTL from the node's mtime and the leader
-- clock offset; wall-clock jumps change nothing.

local S = require "world"
local null, OK = S.null, S.OK

describe("expiry", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world({ {}, { mono_base = 987654321, wall_base = 1500000000000 } })
    end)

    it("the owner deletes the node at the deadline, with a versioned delete and its guard", function()
        a:call("SET", "k", "v", "PX", "1000")
        local set_at = W.now
        W:advance(990)
        assert.is_not_nil(W:node(a:path("k")))
        W.ops = {}
        W:advance(20)
        assert.is_nil(W:node(a:path("k")))
        -- no look first: the guard vouches that the node is still ours
        assert.equal(1, #W.ops)
        assert.equal("multi", W.ops[1].kind)
        -- (and the bump of its mark: a removal of its own)
        assert.equal("delete " .. a:path("k") .. ", check " .. a.K.guard.path .. ", set " .. a.K.mark_path(a.sid, a:path("k")),
                     W.ops[1].path)
        assert.is_true(W.now - set_at >= 1000)
        assert.is_nil(next(a.K.owned))
    end)

    it("keeps its keys and their deadlines through an idle compaction", function()
        for i = 1, 20 do a:call("SET", "k" .. i, "v", "PX", tostring(100 * i)) end
        for i = 1, 10 do a:call("DEL", "k" .. i) end
        a.M.on_idle() -- U.compact_per_command and K.compact
        for i = 11, 20 do assert.is_not_nil(a.K.owned[a:path("k" .. i)]) end
        assert.same("v", a:call("GET", "k15"))
        W:advance(1600)
        for i = 11, 16 do assert.is_nil(W:node(a:path("k" .. i))) end
        for i = 17, 20 do assert.is_not_nil(W:node(a:path("k" .. i))) end
        W:advance(500)
        assert.is_nil(next(a.K.owned))
    end)

    it("one timer serves many keys, earliest first", function()
        local deadline = {}
        for i = 1, 50 do
            a:call("SET", "k" .. i, "v", "PX", tostring(100 * (51 - i)))
            deadline[i] = W.now + 100 * (51 - i)
        end
        local gets = 0
        for _, op in ipairs(W.ops) do if op.kind == "get" then gets = gets + 1 end end
        W:advance(2600)
        for i = 1, 50 do
            if deadline[i] <= W.now - 5 then
                assert.is_nil(W:node(a:path("k" .. i)), "k" .. i)
            elseif deadline[i] > W.now then
                assert.is_not_nil(W:node(a:path("k" .. i)), "k" .. i)
            end
        end
        assert.is_not_nil(W:node(a:path("k1")))
        assert.is_nil(W:node(a:path("k50")))
        W:advance(2500)
        assert.same({}, W:children("/zkresp/k"))
    end)

    it("a slow expiry does not hold back the next key's", function()
        -- k2 expires while the owner still looks at k1 (a slow read): its
        -- deadline needs the timer too, not the end of k1's expiry.
        a:call("SET", "k1", "v", "PX", "100")
        a:call("SET", "k2", "v", "PX", "150")
        a:fail_next({ op = "multi", pass = true, latency = 500 })
        W:advance(100 + 50 + 2 * W.latency + 5)
        assert.is_nil(W:node(a:path("k2")))
        assert.is_not_nil(W:node(a:path("k1")))
        W:advance(500)
        assert.is_nil(W:node(a:path("k1")))
    end)

    it("a slow expiry does not hold back a key due at the same moment", function()
        -- one commit, one deadline: both keys fall due in the same batch
        local both = "redis.call('set', KEYS[1], 'v', 'PX', 100) redis.call('set', KEYS[2], 'v', 'PX', 100)"
        a:call("EVAL", both, "2", "t1", "t2")
        W:advance(1000) -- (the script's body is stored, those keys gone)
        a:call("EVAL", both, "2", "s1", "s2")
        a:fail_next({ op = "multi", pass = true, latency = 500 })
        W:advance(100 + 2 * W.latency + 5)
        local gone = (W:node(a:path("s1")) == nil and 1 or 0) + (W:node(a:path("s2")) == nil and 1 or 0)
        assert.equal(1, gone, "the other key waited for the slow one")
        W:advance(500)
        assert.is_nil(W:node(a:path("s1")))
        assert.is_nil(W:node(a:path("s2")))
    end)

    it("writes that keep a TTL keep its deadline (INCR after EXPIRE NX: the window ends)", function()
        a:call("SET", "ctr", "0", "PX", "1000")
        local t0 = W.now
        -- one INCR after the other, without pause, for 1.5 s: each keeps
        -- the TTL, and counting it again from each answer never ended it
        for _ = 1, 3000 do
            if W.now >= t0 + 1500 then break end
            a:call("INCR", "ctr")
            W:advance(1)
        end
        assert.is_true(W.now >= t0 + 1500)
        assert.equal(-1, a:call("PTTL", "ctr"))   -- expired at t0 + 1 s; counted since
        assert.is_true(tonumber(a:call("GET", "ctr")) < 1000)
        for _, cmd in ipairs({ { "APPEND", "s", "x" }, { "SETRANGE", "s", "0", "x" } }) do
            a:call("SET", "s", "v", "PX", "1000")
            local t1 = W.now
            for _ = 1, 3000 do
                if W.now >= t1 + 1500 then break end
                a:call(table.unpack(cmd))
                W:advance(1)
            end
            assert.equal(-1, a:call("PTTL", "s"), cmd[1])
        end
    end)

    it("a renewed key expires at its new deadline", function()
        a:call("SET", "k", "v", "PX", "1000")
        W:advance(800)
        assert.equal(1, a:call("PEXPIRE", "k", "1000"))
        W:advance(500)
        assert.equal("v", b:call("GET", "k"))
        W:advance(600)
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a stalled owner's expired key still reads as held elsewhere until its delete lands", function()
        b:call("SET", "warmup", "x")
        a:call("SET", "k", "v", "PX", "1000")
        a:disconnect() -- the owner cannot delete
        W:advance(1100)
        assert.is_not_nil(W:node(a:path("k")))
        -- Another sidecar never decides from its clock that a live
        -- session's node is over: reads and writes agree that it is held.
        assert.equal("v", b:call("GET", "k"))
        assert.equal(1, b:call("EXISTS", "k"))
        assert.equal(0, b:call("PTTL", "k"))
        assert.same({ ok = "string" }, b:call("TYPE", "k"))
        assert.equal(null, b:call("SET", "k", "x", "NX", "PX", "1000"))
        assert.equal(a.sid, W:node(a:path("k")).stat.ephemeralOwner)
        a:reconnect()
        W:advance(10)
        assert.is_nil(W:node(a:path("k")))
        assert.equal(null, a:call("GET", "k"))
        assert.equal(null, b:call("GET", "k"))
        assert.same(OK, b:call("SET", "k", "x", "NX", "PX", "1000"))
    end)

    it("the owner's own reads see it absent right at its deadline", function()
        a:call("SET", "k", "v", "PX", "1000")
        a.K.expire_due = function() end -- the timer does nothing
        -- GET reads ZooKeeper (one model millisecond): read so that it
        -- completes just before the deadline, then just at it.
        local deadline = a.K.owned[a:path("k")].deadline
        W:advance(deadline - a.host.now() - 2)
        assert.equal("v", a:call("GET", "k"))
        W:advance(1)
        assert.equal(null, a:call("GET", "k"))
        assert.equal(-2, a:call("PTTL", "k"))
    end)

    it("another sidecar computes PTTL from mtime, never shorter than the owner's", function()
        b:call("SET", "warmup", "x") -- b learns the leader clock from its writes
        a:call("SET", "k", "v", "PX", "10000")
        W:advance(3000)
        local mine = a:call("PTTL", "k")
        local theirs = b:call("PTTL", "k")
        assert.is_true(mine >= 6990 and mine <= 7000, tostring(mine))
        assert.is_true(theirs >= mine - 1 and theirs <= mine + 5,
                       ("owner %d, other %d"):format(mine, theirs))
        assert.equal(7, b:call("TTL", "k"))
    end)

    it("does not move when a wall clock jumps", function()
        a:call("SET", "k", "v", "PX", "10000")
        b:call("SET", "warmup", "x")
        a.wall_base = a.wall_base + 3600 * 1000
        b.wall_base = b.wall_base - 3600 * 1000
        W:advance(5000)
        local mine, theirs = a:call("PTTL", "k"), b:call("PTTL", "k")
        assert.is_true(mine > 4900 and mine <= 5000)
        assert.is_true(theirs > 4900 and theirs <= 5010)
        W:advance(5100)
        assert.is_nil(W:node(a:path("k")))
    end)

    it("a leader clock far from every machine's clock changes nothing", function()
        local W2 = S.world(0, { leader_offset = 42 })
        local c = W2:sidecar()
        local d = W2:sidecar({ mono_base = 5e12 })
        c:call("SET", "k", "v", "PX", "2000")
        W2:advance(1000)
        local left = d:call("PTTL", "k")
        assert.is_true(left > 990 and left <= 1005, tostring(left))
    end)

    it("a stalled owner's lock is not taken over at its deadline: it frees with the owner's session", function()
        b:call("SET", "warmup", "x")
        a:call("SET", "lock", "ta", "NX", "PX", "1000")
        a:disconnect() -- a stalls: its delete cannot be sent
        W:advance(1500)
        assert.equal(null, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        W:expire_session(a.sid) -- the server ends the stalled session
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("nobody takes a lock while the owner's guarded delete is in flight", function()
        b:call("SET", "warmup", "x")
        a:call("SET", "lock", "ta", "NX", "PX", "1000")
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        W:advance(1005)
        -- b meets a's node past its TTL: it waits for a's delete, then
        -- takes the lock (its create could not succeed before)
        local t = b:start("SET", "lock", "tb", "NX", "PX", "5000")
        W:advance(20)
        assert.is_nil(t.done)
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        assert.equal("tb", b:call("GET", "lock"))
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("the owner's look before its delete sees its own node; nobody else takes it meanwhile", function()
        b:call("SET", "warmup", "x")
        a:call("SET", "lock", "ta", "NX", "PX", "1000")
        -- b removes another key of a's: a's guard moves, so a's entries
        -- written before no longer vouch for their nodes, and the expiry
        -- looks first.
        a:call("SET", "other", "v", "PX", "10000")
        assert.equal(1, b:call("DEL", "other"))
        W:advance(5)
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        W:advance(1005)
        local gets = 0
        for _, op in ipairs(W.ops) do
            if op.sc == a.id and op.kind == "get" and op.path == a:path("lock") then gets = gets + 1 end
        end
        assert.equal(1, gets) -- the expiry's look (SET NX only created)
        local t = b:start("SET", "lock", "tb", "NX", "PX", "5000")
        W:advance(20)
        assert.is_nil(t.done)
        assert.equal(a.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
    end)

    it("a command on another sidecar's lock past its TTL waits a moment for the owner's delete", function()
        b:call("SET", "warmup", "x")
        a:call("SET", "lock", "ta", "NX", "PX", "1000")
        local expire_due = a.K.expire_due
        a.K.expire_due = function() end -- the owner is late to delete
        W:advance(1010)
        -- Not deleted within the wait: held.
        local t0 = W.now
        assert.equal(null, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
        assert.is_true(W.now - t0 >= b.K.EXPIRY_WAIT_MS, tostring(W.now - t0))
        -- Deleted while b waits: b takes it.
        local t = b:start("SET", "lock", "tb", "NX", "PX", "1000")
        W:advance(50)
        assert.is_nil(t.done)
        a.K.expire_due = expire_due
        a:run(function() a.K.expire_due(true) end)
        W:run_until(function() return t.done end)
        assert.same(OK, t.result)
        assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        -- Long past its deadline (its owner cannot reach ZooKeeper), a
        -- foreign lock is answered at once.
        a:call("SET", "lock2", "ta", "NX", "PX", "1000")
        a:disconnect()
        W:advance(b.config.session_timeout + 2000)
        t0 = W.now
        assert.equal(null, b:call("SET", "lock2", "tc", "NX", "PX", "1000"))
        assert.is_true(W.now - t0 < b.K.EXPIRY_WAIT_MS, tostring(W.now - t0))
    end)

    -- a's guarded expiry delete applies, its answer is lost with the
    -- connection, and a cannot look before its expiry gives up (2.5 s
    -- away); or a looks after 200 ms, its server lagging behind that
    -- delete (nor anything after: a sync makes it catch up)
    for _, lagging in ipairs({ false, true }) do
        it("an expiry whose delete had an unknown outcome never deletes the next holder's node" ..
           (lagging and ", a's server lagging" or ""), function()
            b:call("SET", "warmup", "x")
            a:call("SET", "lock", "ta", "NX", "PX", "1000")
            if lagging then S.lag(W, a, a:path("lock"), true) end
            a:fail_next({ op = "multi", when = "after", hook = function() a.connected = false end })
            W:advance(1005)
            assert.is_nil(W:node(a:path("lock")))
            assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "10000"))
            W:advance(lagging and 200 or 2500)
            a:reconnect()
            W:advance(2000)
            assert.equal("tb", b:call("GET", "lock"))
            assert.equal(b.sid, W:node(a:path("lock")).stat.ephemeralOwner)
        end)
    end

    it("a lock is free for others as soon as its owner deletes it", function()
        a:call("SET", "lock", "ta", "NX", "PX", "1000")
        W:advance(1003)
        local t0 = W.now
        assert.same(OK, b:call("SET", "lock", "tb", "NX", "PX", "1000"))
        assert.is_true(W.now - t0 < 10)
    end)

    it("another sidecar never reports more than the TTL, whatever its clock offset", function()
        b:call("SET", "other", "x") -- b learns the leader clock
        -- b's offset errs late by 40 ms (a slow reply when it learned it)
        b.K.state.offset = b.K.state.offset - 40
        a:call("SET", "k", "v", "PX", "30000")
        local pttl = b:call("PTTL", "k")
        assert.is_true(pttl <= 30000 and pttl > 29900, tostring(pttl))
        assert.equal(30, b:call("TTL", "k"))
    end)
end)

-- A node of a session given up is left to that session's end, also by an
-- expiry that was under way when it was given up: its delete, by version
-- alone, could hit a node another client made since at that version.
describe("expiry across a session change", function()
    it("leaves the node of a session given up during its expiry to that session's end", function()
        local W, a, c, d = S.world(3)
        assert.same(OK, a:call("SET", "k", "v1", "NX", "PX", "1000"))
        local s1 = a.sid
        local path = a:path("k")
        -- the deadline's guarded delete: its answer is lost as a gives S1 up
        a:fail_next({ op = "multi", hook = function() a:lose({ gap = true }) end })
        W:advance(1001)
        assert.equal(0, a.sid)
        W:advance(50)
        a:next_session()
        -- the server ends S1 (its node goes) and c takes the key
        W:expire_session(s1)
        assert.same(OK, c:call("SET", "k", "v2", "NX", "PX", "60000"))
        W:advance(1500) -- (whatever a's expiry still tried has run)
        assert.is_not_nil(W:node(path), "c's lock is still there")
        assert.equal("v2", d:call("GET", "k"))
        assert.equal(null, d:call("SET", "k", "v3", "NX", "PX", "60000"))
    end)
end)

-- redis-py's Lock.extend(additional) (replace_ttl=False: the new TTL is
-- PTTL + additional) through a sidecar that does not own the lock, around
-- a ZooKeeper leader change to a server whose clock is off the old one's.
describe("a leader change to a server with another clock", function()
    local EXTEND = "local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end " ..
                   "local expiration = redis.call('pttl', KEYS[1]) if not expiration then expiration = 0 end " ..
                   "if expiration < 0 then return 0 end redis.call('pexpire', KEYS[1], expiration + ARGV[2]) return 1"

    it("maps a node the new leader stamped by the new leader's clock (3 s behind)", function()
        local W, a, b = S.world(2)
        b:call("SET", "warmup", "x") -- b learns the old leader's clock
        W:advance(1000)
        W:new_leader(-3000)
        local t0 = W.now
        assert.same(OK, a:call("SET", "lock", "X", "NX", "PX", "10000"))
        W:advance(2000)
        local left = b:call("PTTL", "lock")
        assert.is_true(left > 7900 and left <= 8000, "PTTL " .. left)
        assert.equal(1, b:call("EVAL", EXTEND, "1", "lock", "X", "10000"))
        W:advance(t0 + 20000 - 500 - W.now)
        assert.equal(null, a:call("SET", "lock", "Y", "NX", "PX", "10000"))
    end)

    it("maps a node the old leader stamped by the old leader's clock (the new one 3 s ahead)", function()
        local W, a, b = S.world(2)
        b:call("SET", "warmup", "x") -- b learns the old leader's clock
        assert.same(OK, a:call("SET", "lock", "X", "NX", "PX", "10000"))
        W:advance(1000)
        W:new_leader(3000)
        b:call("SET", "warmup", "y") -- and the new one's
        W:advance(1000)
        local left = b:call("PTTL", "lock")
        assert.is_true(left > 7900 and left <= 8000, "PTTL " .. left)
    end)
end)
