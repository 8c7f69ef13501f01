-- Native locks (LOCK.*) over the ZooKeeper model: the commands on the
-- nodes they write, with sidecars sharing one model ensemble.  lockq_spec
-- checks the grant rule alone; this checks that locks.lua keeps it with
-- real writes, watches, leases, cancellations and lost replies.

local S = require "world"
local null = S.null

local MODES = { "NL", "CR", "CW", "PR", "PW", "EX" }
local MATRIX = {
    NL = "YYYYYY", CR = "YYYYYN", CW = "YYYNNN",
    PR = "YYNYNN", PW = "YYNNNN", EX = "YNNNNN",
}

describe("native locks", function()
    local W, a, b, c
    before_each(function()
        W, a, b, c = S.world(3)
    end)

    local function integer(x, what)
        assert.equal("integer", math.type(x), what)
    end

    -- Lets the world run a little (the model's requests take time).
    local function run() W:advance(50) end

    -- Starts a waiting command and runs the world until it waits.
    local function start(sc, ...)
        local t = sc:start(...)
        run()
        return t
    end

    local function waiters(sc, key)
        local r = sc:call("LOCK.INFO", key).map
        return r[4]
    end

    local function field(entry, name)
        local m = entry.map
        for i = 1, #m, 2 do
            if m[i] == name then return m[i + 1] end
        end
    end

    it("grants together exactly the modes the matrix allows, on two sidecars (36 cells)", function()
        for _, held in ipairs(MODES) do
            for j, asked in ipairs(MODES) do
                local key = "m" .. held .. asked
                integer(a:call("LOCK.ACQUIRE", key, "h", "MODE", held))
                local r = b:call("LOCK.ACQUIRE", key, "r", "MODE", asked)
                if MATRIX[held]:sub(j, j) == "Y" then
                    integer(r, held .. " then " .. asked)
                    assert.equal(1, b:call("LOCK.RELEASE", key, "r"))
                else
                    assert.equal(null, r, held .. " then " .. asked)
                end
                assert.equal(1, a:call("LOCK.RELEASE", key, "h"))
                assert.equal(0, a:call("LOCK.RELEASE", key, "h"))
            end
        end
    end)

    it("grants waiters on three sidecars in arrival order, tokens growing", function()
        local last = a:call("LOCK.ACQUIRE", "q", "h0")
        local sides, tasks = { a, b, c }, {}
        for i = 1, 9 do
            tasks[i] = start(sides[i % 3 + 1], "LOCK.ACQUIRE", "q", "w" .. i, "WAIT", "60000")
        end
        assert.equal(9, #waiters(a, "q"))
        local holder, holder_side = "h0", a
        for i = 1, 9 do
            assert.equal(1, holder_side:call("LOCK.RELEASE", "q", holder))
            run()
            assert.is_true(tasks[i].done, "waiter " .. i .. " granted next")
            for k = i + 1, 9 do assert.is_falsy(tasks[k].done) end
            assert.is_true(tasks[i].result > last)
            last = tasks[i].result
            holder, holder_side = "w" .. i, sides[i % 3 + 1]
        end
    end)

    it("wakes only the next waiter on a release (herd-free)", function()
        a:call("LOCK.ACQUIRE", "h", "h0")
        local sides = { a, b, c }
        for i = 1, 8 do start(sides[i % 3 + 1], "LOCK.ACQUIRE", "h", "w" .. i, "WAIT", "60000") end
        local before = 0
        for _, sc in ipairs(sides) do before = before + sc.LK.wait_stats.woken end
        a:call("LOCK.RELEASE", "h", "h0")
        run()
        local after = 0
        for _, sc in ipairs(sides) do after = after + sc.LK.wait_stats.woken end
        assert.equal(1, after - before)
    end)

    it("hands the lock on with the holder's multi and the waiter's one read", function()
        a:call("LOCK.ACQUIRE", "ho", "h")
        local w1 = start(b, "LOCK.ACQUIRE", "ho", "w1", "WAIT", "60000")
        local w2 = start(c, "LOCK.ACQUIRE", "ho", "w2", "WAIT", "60000")
        a:call("LOCK.RELEASE", "ho", "h") -- h's view did not have them: w1 grants itself
        run()
        assert.is_true(w1.done)
        W.ops = {}
        b:call("LOCK.RELEASE", "ho", "w1") -- w1's view has w2: its release grants w2
        run()
        assert.is_true(w2.done and w2.result > w1.result)
        local seen = {}
        for _, op in ipairs(W.ops) do seen[#seen + 1] = op.sc .. " " .. op.kind end
        -- the table w2 read carries the queue w1's release decided on;
        -- w2, the last of it, lists the lock after its grant for its own
        -- release
        assert.same({ b.id .. " multi", c.id .. " get", c.id .. " children" }, seen)
        assert.equal(1, b.LK.stats.handed)
    end)

    it("keeps both readers a release granted together when one of them releases", function()
        a:call("LOCK.ACQUIRE", "rr", "h")
        local r = start(b, "LOCK.ACQUIRE", "rr", "r", "WAIT", "60000")
        local c1 = start(a, "LOCK.ACQUIRE", "rr", "c1", "MODE", "PR", "WAIT", "60000")
        local c6 = start(c, "LOCK.ACQUIRE", "rr", "c6", "MODE", "PR", "WAIT", "60000")
        a:call("LOCK.RELEASE", "rr", "h")
        run()
        b:call("LOCK.RELEASE", "rr", "r")
        run()
        assert.is_true(c1.done and c6.done)
        assert.equal(1, a:call("LOCK.RELEASE", "rr", "c1"))
        run()
        local holders = c:call("LOCK.INFO", "rr").map[2]
        assert.equal(1, #holders)
        assert.equal("c6", field(holders[1], "owner"))
        assert.equal(1, c:call("LOCK.RENEW", "rr", "c6", "PX", "1000"))
        assert.equal(null, a:call("LOCK.ACQUIRE", "rr", "x"))
        assert.equal(1, c:call("LOCK.RELEASE", "rr", "c6"))
    end)

    it("keeps a reader behind a queued writer", function()
        a:call("LOCK.ACQUIRE", "rw", "r1", "MODE", "SHARED")
        local w = start(b, "LOCK.ACQUIRE", "rw", "w", "MODE", "EXCLUSIVE", "WAIT", "60000")
        assert.equal(null, c:call("LOCK.ACQUIRE", "rw", "r2", "MODE", "PR", "WAIT", "200"))
        local r3 = start(c, "LOCK.ACQUIRE", "rw", "r3", "MODE", "PR", "WAIT", "60000")
        a:call("LOCK.RELEASE", "rw", "r1")
        run()
        assert.is_true(w.done)
        assert.is_falsy(r3.done)
        b:call("LOCK.RELEASE", "rw", "w")
        run()
        assert.is_true(r3.done and r3.result > w.result)
    end)

    it("converts down at once, up through the conversion queue ahead of new requests", function()
        local t1 = a:call("LOCK.ACQUIRE", "cv", "x", "MODE", "EX")
        assert.equal(t1, a:call("LOCK.CONVERT", "cv", "x", "MODE", "PR"))
        integer(b:call("LOCK.ACQUIRE", "cv", "y", "MODE", "PR"))
        local n = start(c, "LOCK.ACQUIRE", "cv", "n", "MODE", "EX", "WAIT", "60000")
        local up = start(a, "LOCK.CONVERT", "cv", "x", "MODE", "EX", "WAIT", "60000")
        local ws = waiters(a, "cv")
        assert.equal("conversion", field(ws[1], "kind"))
        assert.equal("new", field(ws[2], "kind"))
        b:call("LOCK.RELEASE", "cv", "y")
        run()
        assert.is_true(up.done and up.result > t1)
        assert.is_falsy(n.done)
        a:call("LOCK.RELEASE", "cv", "x")
        run()
        assert.is_true(n.done and n.result > up.result)
    end)

    it("keeps the old mode when a conversion's WAIT passes", function()
        a:call("LOCK.ACQUIRE", "cw", "x", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "cw", "y", "MODE", "PR")
        assert.equal(null, a:call("LOCK.CONVERT", "cw", "x", "MODE", "EX", "WAIT", "300"))
        local holders = a:call("LOCK.INFO", "cw").map[2]
        assert.equal(2, #holders)
        assert.equal("PR", field(holders[1], "mode"))
        assert.equal(0, #waiters(a, "cw"))
    end)

    -- Every try to give the conversion up loses its write: the client must
    -- not hear "old mode kept" (null) while the table still asks for EX
    -- (a release would grant it); -TRYAGAIN, and it is given up later.
    it("answers -TRYAGAIN when a timed-out conversion cannot be given up yet", function()
        a:call("LOCK.ACQUIRE", "cg", "x", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "cg", "y", "MODE", "PR")
        local c = start(a, "LOCK.CONVERT", "cg", "x", "MODE", "EX", "WAIT", "300")
        run()
        assert.is_falsy(c.done)
        for _ = 1, 10 do a:fail_next({ op = "multi", rc = S.codes.BADVERSION }) end
        W:advance(400)
        assert.is_true(c.done)
        assert.matches("^TRYAGAIN", tostring(c.result and c.result.err))
        run()
        assert.equal(0, #waiters(a, "cg"))
        local holders = a:call("LOCK.INFO", "cg").map[2]
        assert.equal("PR", field(holders[1], "mode"))
        assert.equal("PR", field(holders[2], "mode"))
    end)

    it("ends a deadlock of two conversions for the later one", function()
        a:call("LOCK.ACQUIRE", "dl", "x", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "dl", "y", "MODE", "PR")
        local first = start(a, "LOCK.CONVERT", "dl", "x", "MODE", "EX", "WAIT", "60000")
        local t0 = W.now
        -- the later one is answered at once, like a WAIT that ran out
        assert.equal(null, b:call("LOCK.CONVERT", "dl", "y", "MODE", "EX", "WAIT", "60000"))
        assert.is_true(W.now - t0 < 1000)
        b:call("LOCK.RELEASE", "dl", "y")
        run()
        assert.is_true(first.done and math.type(first.result) == "integer")
    end)

    it("is reentrant in the same mode and names LOCK.CONVERT for another", function()
        local t = a:call("LOCK.ACQUIRE", "re", "o")
        assert.equal(t, a:call("LOCK.ACQUIRE", "re", "o"))
        assert.equal(2, field(a:call("LOCK.INFO", "re").map[2][1], "count"))
        -- the owner is the owner through any sidecar
        assert.equal(t, b:call("LOCK.ACQUIRE", "re", "o"))
        assert.equal(1, b:call("LOCK.RELEASE", "re", "o"))
        assert.equal(1, #W:children(a.LK.lock_path("re")))
        assert.matches("LOCK%.CONVERT", a:call("LOCK.ACQUIRE", "re", "o", "MODE", "PR").err)
        assert.equal(1, a:call("LOCK.RELEASE", "re", "o"))
        assert.equal(null, b:call("LOCK.ACQUIRE", "re", "p"))
        assert.equal(1, a:call("LOCK.RELEASE", "re", "o"))
        assert.equal(0, a:call("LOCK.RELEASE", "re", "o"))
        integer(b:call("LOCK.ACQUIRE", "re", "p"))
    end)

    it("ends a lease that is not renewed and hands the lock on at once", function()
        a:call("LOCK.ACQUIRE", "ls", "h", "PX", "1000")
        local w = start(b, "LOCK.ACQUIRE", "ls", "w", "WAIT", "60000")
        W:advance(500)
        assert.equal(1, a:call("LOCK.RENEW", "ls", "h", "PX", "1000"))
        W:advance(900)
        assert.is_falsy(w.done)
        W:advance(200)
        assert.is_true(w.done)
        assert.equal(0, a:call("LOCK.RENEW", "ls", "h", "PX", "1000"))
    end)

    it("ends a lease shortened through another sidecar at its new end", function()
        a:call("LOCK.ACQUIRE", "sr", "h", "PX", "30000")
        local w = start(c, "LOCK.ACQUIRE", "sr", "w", "WAIT", "60000")
        W:advance(100)
        assert.equal(1, b:call("LOCK.RENEW", "sr", "h", "PX", "1000"))
        W:advance(900)
        assert.is_falsy(w.done)
        W:advance(300)
        assert.is_true(w.done)
        integer(w.result)
        assert.equal(0, a:call("LOCK.RENEW", "sr", "h", "PX", "1000"))
        assert.equal(0, b:call("LOCK.RENEW", "sr", "h", "PX", "1000"))
        assert.equal(1, c:call("LOCK.RELEASE", "sr", "w"))
    end)

    for _, case in ipairs({ { "sl", "a third sidecar", function() return c end },
                            { "sm", "the same other sidecar", function() return b end } }) do
        local key, through, second = case[1], case[2], case[3]
        it("ends a shortened lease renewed longer through " .. through .. " at its lease", function()
            a:call("LOCK.ACQUIRE", key, "h", "PX", "30000")
            assert.equal(1, b:call("LOCK.RENEW", key, "h", "PX", "1000"))
            W:advance(500)
            -- the lease in force is now 5500 from the start, earlier than a's timer (30000)
            assert.equal(1, second():call("LOCK.RENEW", key, "h", "PX", "5000"))
            W:advance(6000)
            integer(c:call("LOCK.ACQUIRE", key, "x", "WAIT", "0"))
        end)
    end

    it("ends a shortened lease at its end after a count-down release through the holder's sidecar", function()
        a:call("LOCK.ACQUIRE", "sd", "h", "PX", "30000")
        a:call("LOCK.ACQUIRE", "sd", "h", "PX", "30000")
        assert.equal(1, b:call("LOCK.RENEW", "sd", "h", "PX", "1000"))
        assert.equal(1, a:call("LOCK.RELEASE", "sd", "h")) -- count 2 -> 1, lease untouched
        W:advance(2000)
        integer(c:call("LOCK.ACQUIRE", "sd", "x", "WAIT", "0"))
    end)

    it("ends a shortened lease at its end after a reentrant acquire through a third sidecar", function()
        a:call("LOCK.ACQUIRE", "se", "h", "PX", "30000")
        assert.equal(1, b:call("LOCK.RENEW", "se", "h", "PX", "1000"))
        integer(c:call("LOCK.ACQUIRE", "se", "h", "PX", "500", "WAIT", "0"))
        W:advance(2000)
        integer(c:call("LOCK.ACQUIRE", "se", "x", "WAIT", "0"))
    end)

    it("keeps a shortened lease renewed again through any sidecar", function()
        a:call("LOCK.ACQUIRE", "sk", "h", "PX", "30000")
        assert.equal(1, b:call("LOCK.RENEW", "sk", "h", "PX", "1000"))
        W:advance(500)
        assert.equal(1, c:call("LOCK.RENEW", "sk", "h", "PX", "5000"))
        W:advance(2000)
        assert.equal(null, c:call("LOCK.ACQUIRE", "sk", "x", "WAIT", "0"))
        assert.equal(1, a:call("LOCK.RENEW", "sk", "h", "PX", "5000"))
        W:advance(4000)
        assert.equal(null, b:call("LOCK.ACQUIRE", "sk", "x", "WAIT", "0"))
        assert.equal(1, a:call("LOCK.RELEASE", "sk", "h"))
    end)

    it("a renewal that lands between the lease end's read and its delete keeps the hold", function()
        a:call("LOCK.ACQUIRE", "lr", "h", "PX", "1000")
        -- the lease end's delete is slow: a renewal through another sidecar
        -- comes in between, and answers 1
        a:fail_next({ op = "delete", latency = 300, pass = true })
        W:advance(1010)
        assert.equal(1, b:call("LOCK.RENEW", "lr", "h", "PX", "5000"))
        W:advance(400)
        assert.equal(null, c:call("LOCK.ACQUIRE", "lr", "x", "WAIT", "0"))
        assert.equal(1, b:call("LOCK.RENEW", "lr", "h", "PX", "5000"))
        assert.equal(1, a:call("LOCK.RELEASE", "lr", "h"))
    end)

    it("a waiter whose WAIT ends while ZooKeeper is away leaves the queue once it is back", function()
        a:call("LOCK.ACQUIRE", "lv", "h")
        local w = start(b, "LOCK.ACQUIRE", "lv", "w", "WAIT", "1000")
        b:disconnect()
        W:advance(6000) -- its WAIT ended, and its leave's requests timed out more than once
        assert.is_true(w.done)
        b:reconnect()
        W:advance(1000)
        local info = a:call("LOCK.INFO", "lv")
        assert.same({}, info.map[4], "the request no client waits for is still queued")
        assert.equal(1, a:call("LOCK.RELEASE", "lv", "h"))
    end)

    it("converts a hold through another sidecar, waiting there for the other reader to leave", function()
        a:call("LOCK.ACQUIRE", "cv", "o", "MODE", "PR")
        c:call("LOCK.ACQUIRE", "cv", "r", "MODE", "PR")
        local w = start(b, "LOCK.CONVERT", "cv", "o", "MODE", "EX", "WAIT", "5000")
        W:advance(300)
        assert.is_falsy(w.done)
        assert.equal(1, c:call("LOCK.RELEASE", "cv", "r"))
        W:run_until(function() return w.done end)
        integer(w.result, "the conversion's token")
        local info = a:call("LOCK.INFO", "cv")
        assert.equal("EX", info.map[2][1].map[4])
        assert.equal(1, b:call("LOCK.RELEASE", "cv", "o"))
    end)

    it("never asks the policy's key_path about a lock's name (it names no key)", function()
        local file = S.policy_file([[
            return {
                key_path = function(key)
                    host.log("info", "key_path " .. key)
                end,
            }
        ]])
        local W2 = S.world(0)
        local p = W2:sidecar({ config = { policy = file } })
        integer(p:call("LOCK.ACQUIRE", "lk", "o", "PX", "5000"), "granted")
        assert.equal(1, p:call("LOCK.RENEW", "lk", "o", "PX", "5000"))
        assert.equal(1, p:call("LOCK.RELEASE", "lk", "o"))
        p:call("SET", "k", "v")
        local seen = {}
        for _, l in ipairs(p.logs) do
            local k = l:match("^info key_path (.*)$")
            if k then seen[k] = true end
        end
        assert.is_true(seen.k, "the hook is asked about a key")
        assert.is_nil(seen.lk, "nor about the lock's name")
        os.remove(file)
    end)

    it("holds a lease as long as the policy's largest default, through every path that writes its end", function()
        local file = S.policy_file([[
            return { default_ttl = function() return math.maxinteger end }
        ]])
        local W2 = S.world(0)
        local p = W2:sidecar({ config = { policy = file } })
        local q = W2:sidecar({ config = { policy = file } })
        local t = p:call("LOCK.ACQUIRE", "long", "h")
        integer(t, "granted at once")
        assert.equal(t, p:call("LOCK.ACQUIRE", "long", "h"))
        assert.equal(1, p:call("LOCK.RENEW", "long", "h", "PX", "9223300000000000000"))
        local w = q:start("LOCK.ACQUIRE", "long", "w", "WAIT", "5000")
        W2:advance(50)
        assert.equal(1, p:call("LOCK.RELEASE", "long", "h"))
        assert.equal(1, p:call("LOCK.RELEASE", "long", "h"))
        W2:run_until(function() return w.done end)
        integer(w.result, "the waiter, granted by the release")
        local holder = q:call("LOCK.INFO", "long").map[2][1].map
        local left
        for i = 1, #holder, 2 do if holder[i] == "lease_left_ms" then left = holder[i + 1] end end
        assert.is_true(left > 10 ^ 18, "lease_left_ms " .. tostring(left))
        assert.equal(1, q:call("LOCK.RELEASE", "long", "w"))
        os.remove(file)
    end)

    it("asks the policy's before_acquire, with whether the lock is held, and heeds a refusal", function()
        local file = S.policy_file([[
            return {
                before_acquire = function(key, info)
                    host.log("info", string.format("asked %s exists=%s mode=%s lock=%s", key,
                                                   tostring(info.exists), info.mode, tostring(info.lock)))
                    if key == "refused" then return false, "lock-delay" end
                end,
            }
        ]])
        local W2 = S.world(0)
        local p = W2:sidecar({ config = { policy = file } })
        local q = W2:sidecar({ config = { policy = file } })
        integer(p:call("LOCK.ACQUIRE", "free", "o", "WAIT", "0"), "a free lock")
        assert.equal(null, q:call("LOCK.ACQUIRE", "free", "x", "MODE", "PR", "WAIT", "0"))
        assert.equal(null, p:call("LOCK.ACQUIRE", "refused", "o", "WAIT", "0"))
        assert.same({ err = "TRYAGAIN lock-delay" }, p:call("LOCK.ACQUIRE", "refused", "o", "WAIT", "100"))
        -- a lock node left empty (released, not yet collected): not held
        assert.equal(1, p:call("LOCK.RELEASE", "free", "o"))
        integer(p:call("LOCK.ACQUIRE", "free", "o2", "WAIT", "0"), "free again")
        local function asked(sc)
            local out = {}
            for _, l in ipairs(sc.logs) do
                local m = l:match("^info (asked .*)$")
                if m then out[#out + 1] = m end
            end
            return out
        end
        assert.same({ "asked free exists=false mode=EX lock=true", "asked refused exists=false mode=EX lock=true",
                      "asked refused exists=false mode=EX lock=true", "asked free exists=false mode=EX lock=true" },
                    asked(p))
        -- q's try-once would wait behind p's hold: refused before the hook
        assert.same({}, asked(q))
        assert.same({}, p:call("LOCK.INFO", "refused").map[2])
        os.remove(file)
    end)

    it("asks before_acquire again before a queued request grants itself, not when a release grants it",
       function()
        local file = S.policy_file([[
            _G.__asked = {}
            return {
                before_acquire = function(key, info)
                    if info.queued then
                        _G.__asked[#_G.__asked + 1] = string.format("%s %s exists=%s", key, info.mode,
                                                                    tostring(info.exists))
                        if not _G.__let_through then return false, "not yet" end
                    end
                    return true
                end,
            }
        ]])
        local W2 = S.world(0)
        local p = W2:sidecar({ config = { policy = file } })
        local q = W2:sidecar({ config = { policy = file } })
        -- a release that knows of the waiter (its sidecar listed it on
        -- its arrival) grants it in its multi: not asked
        integer(p:call("LOCK.ACQUIRE", "qa", "h", "PX", "30000"), "held")
        local w = p:start("LOCK.ACQUIRE", "qa", "w", "WAIT", "5000")
        W2:advance(50)
        assert.equal(1, p:call("LOCK.RELEASE", "qa", "h"))
        W2:run_until(function() return w.done end)
        integer(w.result, "granted by the release")
        assert.same({}, p.env.__asked)
        assert.equal(1, p:call("LOCK.RELEASE", "qa", "w"))
        -- the holder's session ends: the waiter asks, is refused, keeps
        -- its place, and is granted once the policy lets it through
        integer(p:call("LOCK.ACQUIRE", "qa", "h2", "PX", "30000"), "held")
        w = q:start("LOCK.ACQUIRE", "qa", "w2", "MODE", "PR", "WAIT", "5000")
        W2:advance(50)
        p:lose({ expire_old = true })
        W2:advance(1000)
        assert.is_falsy(w.done)
        local asked = q.env.__asked
        assert.equal("qa PR exists=false", asked[1])
        assert.is_true(#asked >= 3, "asked again while held back: " .. #asked)
        local waiting = q:call("LOCK.INFO", "qa").map[4]
        assert.equal(1, #waiting)
        q.env.__let_through = true
        local at = W2.now
        W2:run_until(function() return w.done end)
        integer(w.result, "granted once let through")
        assert.is_true(W2.now - at <= 300, "granted " .. (W2.now - at) .. " ms after")
        assert.equal(1, q:call("LOCK.RELEASE", "qa", "w2"))
        os.remove(file)
    end)

    it("tells the policy's on_acquire, on_release, on_expire and on_lost, with the mode and the token", function()
        local file = S.policy_file([[
            local log = {}
            _G.__events = log
            local function rec(ev) return function(key, info) log[#log + 1] = { ev = ev, key = key, info = info } end end
            return { on_acquire = rec("acquire"), on_release = rec("release"),
                     on_expire = rec("expire"), on_lost = rec("lost") }
        ]])
        local W2 = S.world(0)
        local p = W2:sidecar({ config = { policy = file } })
        local q = W2:sidecar() -- no hooks: told nothing, holds as well
        local t1 = p:call("LOCK.ACQUIRE", "n1", "o", "MODE", "PR")
        integer(q:call("LOCK.ACQUIRE", "n1", "x", "MODE", "PR"), "a shared hold beside it")
        assert.equal(1, p:call("LOCK.RELEASE", "n1", "o"))
        local t2 = p:call("LOCK.ACQUIRE", "n2", "o", "PX", "1000")
        W2:advance(2000) -- its lease ends
        local t3 = p:call("LOCK.ACQUIRE", "n3", "o")
        W2:advance(20) -- the hooks run in the background
        p:lose()
        W2:advance(20)
        local got = {}
        for _, e in ipairs(p.env.__events) do
            got[#got + 1] = string.format("%s %s %s %s %s", e.ev, e.key, e.info.mode, tostring(e.info.lock),
                                          tostring(e.info.reason))
        end
        assert.same({ "acquire n1 PR true nil", "release n1 PR true nil", "acquire n2 EX true nil",
                      "expire n2 EX true nil", "acquire n3 EX true nil", "lost n3 EX true session" }, got)
        local ev = p.env.__events
        assert.same({ t1, t1, t2, t2, t3, t3 }, { ev[1].info.token, ev[2].info.token, ev[3].info.token,
                                                 ev[4].info.token, ev[5].info.token, ev[6].info.token })
        assert.equal(1000, ev[3].info.ttl)
        assert.is_nil(q.env.__events)
        os.remove(file)
    end)

    it("wakes a waiter watching another sidecar's request when its own session ends", function()
        a:call("LOCK.ACQUIRE", "wl", "h")
        local w = start(b, "LOCK.ACQUIRE", "wl", "w", "WAIT", "60000")
        b:expire()
        W:advance(3000)
        assert.is_true(w.done, "slept on after its request went with its session")
        assert.is_table(w.result)
        assert.truthy(tostring(w.result.err):find("^TRYAGAIN"), w.result.err)
    end)

    it("starts a waiter's lease at its grant, not at its arrival", function()
        a:call("LOCK.ACQUIRE", "lg", "h", "PX", "60000")
        local w = start(b, "LOCK.ACQUIRE", "lg", "w", "PX", "1000", "WAIT", "60000")
        W:advance(5000)
        a:call("LOCK.RELEASE", "lg", "h")
        run()
        assert.is_true(w.done)
        local left = field(c:call("LOCK.INFO", "lg").map[2][1], "lease_left_ms")
        assert.is_true(left > 800 and left <= 1000, "lease left " .. tostring(left))
        W:advance(800)
        assert.equal(null, c:call("LOCK.ACQUIRE", "lg", "x"))
        W:advance(300)
        integer(c:call("LOCK.ACQUIRE", "lg", "x"))
    end)

    it("takes a waiter out of the queue when its WAIT passes or its client goes", function()
        a:call("LOCK.ACQUIRE", "cx", "h")
        local gone = start(b, "LOCK.ACQUIRE", "cx", "g", "WAIT", "60000")
        local later = start(c, "LOCK.ACQUIRE", "cx", "l", "WAIT", "60000")
        assert.equal(null, b:call("LOCK.ACQUIRE", "cx", "t", "WAIT", "100"))
        assert.equal(2, #waiters(a, "cx"))
        b:abandon(gone)
        run()
        assert.equal(1, #waiters(a, "cx"))
        a:call("LOCK.RELEASE", "cx", "h")
        run()
        assert.is_true(later.done and math.type(later.result) == "integer")
    end)

    it("releases the holds of a lost session and answers renewals 0", function()
        a:call("LOCK.ACQUIRE", "ss", "h")
        local w = start(b, "LOCK.ACQUIRE", "ss", "w", "WAIT", "60000")
        local old = a:lose()
        run()
        -- the old session lives on in the server: its hold stays, but this
        -- sidecar counts it lost and never renews it
        assert.equal(0, a:call("LOCK.RENEW", "ss", "h", "PX", "1000"))
        assert.is_falsy(w.done)
        W:expire_session(old)
        run()
        assert.is_true(w.done and math.type(w.result) == "integer")
        assert.equal(0, a:call("LOCK.RENEW", "ss", "h", "PX", "1000"))
    end)

    it("answers 0 a release of a hold counted lost with its session, and frees the lock", function()
        a:call("LOCK.ACQUIRE", "sr", "h")
        local w = start(b, "LOCK.ACQUIRE", "sr", "w", "WAIT", "60000")
        a:lose()
        run()
        assert.equal(0, a:call("LOCK.RELEASE", "sr", "h"))
        W:run_until(function() return w.done end)
        integer(w.result, "the waiter's token")
    end)

    it("answers 0, not 1, a release whose delete's reply is lost as its session ends", function()
        -- the session's end removes the hold's node too, maybe before the
        -- release was asked: a node gone is its delete only while the
        -- session lasts
        a:call("LOCK.ACQUIRE", "se", "h")
        a:fail_next({ op = "delete", when = "before", hook = function() a:expire() end })
        assert.equal(0, a:call("LOCK.RELEASE", "se", "h"))
        -- the same on the slow way (a hold counted down to one has no view)
        a:call("LOCK.ACQUIRE", "se", "h")
        a:call("LOCK.ACQUIRE", "se", "h")
        assert.equal(1, a:call("LOCK.RELEASE", "se", "h"))
        a:fail_next({ op = "delete", when = "before", hook = function() a:expire() end })
        assert.equal(0, a:call("LOCK.RELEASE", "se", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("se")))
        -- while the session lasts, a node gone after a lost reply is ours
        a:call("LOCK.ACQUIRE", "se", "h")
        a:fail_next({ op = "delete", when = "after" })
        assert.equal(1, a:call("LOCK.RELEASE", "se", "h"))
    end)

    it("finds its request by its nonce when the create's reply is lost", function()
        a:call("LOCK.ACQUIRE", "nc", "h")
        b:fail_next({ op = "create", when = "after" })
        local w = start(b, "LOCK.ACQUIRE", "nc", "w", "WAIT", "60000")
        assert.equal(1, #waiters(a, "nc"))
        a:call("LOCK.RELEASE", "nc", "h")
        run()
        assert.is_true(w.done and math.type(w.result) == "integer")
        assert.equal(1, #W:children(a.LK.lock_path("nc")))
    end)

    it("settles a release through another sidecar whose delete's reply is lost: 1, once", function()
        a:call("LOCK.ACQUIRE", "xd", "h")
        b:fail_next({ op = "multi", when = "after" }) -- (the delete, and a bump of the holder's guard)
        assert.equal(1, b:call("LOCK.RELEASE", "xd", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("xd")))
        assert.equal(0, b:call("LOCK.RELEASE", "xd", "h"))
    end)

    it("answers 0 a release through another sidecar whose delete's reply is lost as the holder's session ends", function()
        a:call("LOCK.ACQUIRE", "xe", "h")
        b:fail_next({ op = "multi", when = "before", hook = function() a:expire() end })
        -- the node is gone, but with the holder's session (its guard went
        -- too), maybe before the release was asked
        assert.equal(0, b:call("LOCK.RELEASE", "xe", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("xe")))
    end)

    it("counts a reentrant hold once when its count write's reply is lost", function()
        local t = a:call("LOCK.ACQUIRE", "rc", "h")
        a:fail_next({ op = "set", when = "after" })
        assert.equal(t, a:call("LOCK.ACQUIRE", "rc", "h"))
        a:fail_next({ op = "set", when = "after" })
        assert.equal(1, a:call("LOCK.RELEASE", "rc", "h"))
        assert.equal(1, #W:children(a.LK.lock_path("rc")))
        assert.equal(1, a:call("LOCK.RELEASE", "rc", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("rc")))
        assert.equal(0, a:call("LOCK.RELEASE", "rc", "h"))
    end)

    it("takes back the count of a reentrant acquire that failed unsure, before the owner's next command", function()
        local t = a:call("LOCK.ACQUIRE", "ru", "h")
        local function count() return field(a:call("LOCK.INFO", "ru").map[2][1], "count") end
        -- the count write lands, its reply is lost, and ZooKeeper stays out
        -- of reach past the command's time: -TRYAGAIN, not granted
        a:fail_next({ op = "set", when = "after", hook = function() a:disconnect() end })
        assert.matches("^TRYAGAIN", a:call("LOCK.ACQUIRE", "ru", "h").err)
        W:advance(1000) -- the settling tries again and again meanwhile
        a:reconnect()
        -- asked again at once: it waits for the settling (which reads after
        -- its pause), then counts from the hold as it was
        assert.equal(t, a:call("LOCK.ACQUIRE", "ru", "h"))
        assert.equal(2, count())
        assert.equal(1, a:call("LOCK.RELEASE", "ru", "h"))
        assert.equal(1, count())
        assert.equal(1, a:call("LOCK.RELEASE", "ru", "h"))
        assert.equal(0, a:call("LOCK.RELEASE", "ru", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("ru")))
    end)

    it("takes back the count down of a release that failed unsure, so asking again counts down once", function()
        local t = a:call("LOCK.ACQUIRE", "rr", "h")
        assert.equal(t, a:call("LOCK.ACQUIRE", "rr", "h"))
        local function count() return field(a:call("LOCK.INFO", "rr").map[2][1], "count") end
        a:fail_next({ op = "set", when = "after", hook = function() a:disconnect() end })
        assert.matches("^TRYAGAIN", a:call("LOCK.RELEASE", "rr", "h").err)
        W:advance(1000)
        a:reconnect()
        assert.equal(1, a:call("LOCK.RELEASE", "rr", "h"))
        assert.equal(1, #a:call("LOCK.INFO", "rr").map[2], "the hold is still there")
        assert.equal(1, count())
        assert.equal(1, a:call("LOCK.RELEASE", "rr", "h"))
        assert.equal(0, #W:children(a.LK.lock_path("rr")))
        assert.equal(0, a:call("LOCK.RELEASE", "rr", "h"))
    end)

    it("takes back a count down through another sidecar whose own session changed meanwhile", function()
        local t = a:call("LOCK.ACQUIRE", "rb", "o", "PX", "60000")
        assert.equal(t, a:call("LOCK.ACQUIRE", "rb", "o", "PX", "60000"))
        local function count() return field(c:call("LOCK.INFO", "rb").map[2][1], "count") end
        b:fail_next({ op = "set", when = "after", hook = function() b:disconnect() end })
        assert.matches("^TRYAGAIN", b:call("LOCK.RELEASE", "rb", "o").err)
        W:advance(3000)
        -- b's lease passed: a new session for b; a's, which owns the
        -- request, lasts, and so does the count b's write took off it
        b:lose()
        W:advance(5000)
        assert.equal(2, count())
        assert.equal(1, b:call("LOCK.RELEASE", "rb", "o"))
        assert.equal(1, #c:call("LOCK.INFO", "rb").map[2], "the outer hold is still there")
        assert.equal(null, c:call("LOCK.ACQUIRE", "rb", "x"))
        assert.equal(1, a:call("LOCK.RELEASE", "rb", "o"))
        integer(c:call("LOCK.ACQUIRE", "rb", "x"))
    end)

    -- A request asked while its sidecar is between two sessions (the old
    -- one given up, zk.session() 0) is created under the next one: it is
    -- that session's, lost with it.
    it("grants nothing to a request asked between two sessions once the next one is lost", function()
        integer(b:call("LOCK.ACQUIRE", "ns", "h", "PX", "60000"))
        W:expire_session(a:lose({ gap = true }))
        local w = start(a, "LOCK.ACQUIRE", "ns", "w", "PX", "60000", "WAIT", "60000")
        a:next_session()
        run()
        assert.is_falsy(w.done)
        assert.equal(1, #waiters(b, "ns"))
        local s2 = a:lose() -- given up by a (its lease passed), kept by the server a while
        run()
        assert.is_true(w.done)
        assert.matches("^TRYAGAIN", w.result.err)
        assert.equal(1, b:call("LOCK.RELEASE", "ns", "h"))
        W:expire_session(s2)
        run()
        integer(c:call("LOCK.ACQUIRE", "ns", "x", "PX", "60000"))
    end)

    it("deletes a request asked between two sessions whose create landed unanswered", function()
        integer(b:call("LOCK.ACQUIRE", "na", "h", "PX", "60000"))
        a:lose({ gap = true })
        a:fail_next({ op = "create", when = "after" })
        a:fail_next({ op = "sync", rc = S.codes.TIMEOUT })
        local w = start(a, "LOCK.ACQUIRE", "na", "w", "PX", "60000", "WAIT", "60000")
        a:next_session()
        W:run_until(function() return w.done end)
        assert.matches("^TRYAGAIN", w.result.err)
        W:advance(1000)
        assert.equal(1, #W:children(a.LK.lock_path("na")), "only the holder's request is left")
        assert.equal(1, b:call("LOCK.RELEASE", "na", "h"))
        integer(c:call("LOCK.ACQUIRE", "na", "x"))
    end)

    it("keeps a renewal through another sidecar when the holder's sidecar counts a hold down", function()
        local t = a:call("LOCK.ACQUIRE", "rn", "o", "PX", "1000")
        assert.equal(t, a:call("LOCK.ACQUIRE", "rn", "o", "PX", "1000"))
        W:advance(300)
        assert.equal(1, b:call("LOCK.RENEW", "rn", "o", "PX", "5000"))
        W:advance(100)
        assert.equal(1, a:call("LOCK.RELEASE", "rn", "o")) -- count 1: o holds on
        W:advance(1000) -- past the first lease, well within the renewal
        assert.equal(null, c:call("LOCK.ACQUIRE", "rn", "x"))
        W:advance(4500)
        integer(c:call("LOCK.ACQUIRE", "rn", "x"))
    end)

    it("answers at once, an error, not null, a conversion whose hold's lease ended while it waited", function()
        a:call("LOCK.ACQUIRE", "cl", "o", "MODE", "PR", "PX", "1000")
        c:call("LOCK.ACQUIRE", "cl", "r", "MODE", "PR", "PX", "60000")
        local cv = start(b, "LOCK.CONVERT", "cl", "o", "MODE", "EX", "WAIT", "3000")
        assert.is_falsy(cv.done)
        W:advance(1500) -- o's lease ends on a
        assert.equal(1, #a:call("LOCK.INFO", "cl").map[2])
        run()
        -- before its WAIT (it watched r's hold, which did not move: its
        -- own hold's end woke it); null would say the old mode was kept
        assert.is_true(cv.done)
        assert.equal("ERR owner's hold of this lock ended while its conversion waited", cv.result.err)
    end)

    for _, via in ipairs({ "a", "c" }) do
        it("answers at once a conversion whose hold was released through " ..
           (via == "a" and "its own sidecar" or "another sidecar") .. " while it waited", function()
            local s = { a = a, c = c }
            a:call("LOCK.ACQUIRE", "cr" .. via, "o", "MODE", "PR", "PX", "60000")
            c:call("LOCK.ACQUIRE", "cr" .. via, "r", "MODE", "PR", "PX", "60000")
            local cv = start(a, "LOCK.CONVERT", "cr" .. via, "o", "MODE", "EX", "WAIT", "3000")
            run()
            assert.is_falsy(cv.done)
            assert.equal(1, s[via]:call("LOCK.RELEASE", "cr" .. via, "o"))
            run()
            assert.is_true(cv.done)
            assert.equal("ERR owner's hold of this lock ended while its conversion waited", cv.result.err)
            assert.equal(1, #c:call("LOCK.INFO", "cr" .. via).map[2]) -- r alone
        end)
    end

    it("answers -TRYAGAIN, not null, a conversion through another sidecar whose hold's session ended", function()
        a:call("LOCK.ACQUIRE", "cs", "o", "MODE", "PR")
        c:call("LOCK.ACQUIRE", "cs", "r", "MODE", "PR")
        local cv = start(b, "LOCK.CONVERT", "cs", "o", "MODE", "EX", "WAIT", "3000")
        a:expire()
        run()
        assert.equal(1, #c:call("LOCK.INFO", "cs").map[2])
        W:run_until(function() return cv.done end)
        assert.matches("^TRYAGAIN", cv.result.err)
    end)

    -- A read of the table is retried on a new session, and the table still
    -- has the line of a request whose node went with the old one: that is
    -- no grant (another client may take the lock at once).
    it("answers no grant for a woken request whose session ended during its read", function()
        local lock = a.LK.lock_path("gh")
        integer(b:call("LOCK.ACQUIRE", "gh", "h"))
        local w = start(a, "LOCK.ACQUIRE", "gh", "w", "PX", "60000", "WAIT", "60000")
        b:call("LOCK.INFO", "gh") -- b's listing has w: h's release grants it
        a:fail_next({ op = "get", path = lock, hook = function() a:expire() end })
        assert.equal(1, b:call("LOCK.RELEASE", "gh", "h"))
        run()
        assert.is_true(w.done)
        assert.not_equal("integer", math.type(w.result))
        integer(c:call("LOCK.ACQUIRE", "gh", "x"))
    end)

    it("grants nothing to a new request whose session ended during its first read", function()
        local lock = a.LK.lock_path("g2")
        integer(b:call("LOCK.ACQUIRE", "g2", "p"))
        assert.equal(1, b:call("LOCK.RELEASE", "g2", "p"))
        a:fail_next({ op = "get", path = lock, hook = function() a:expire() end })
        local r = a:call("LOCK.ACQUIRE", "g2", "w", "PX", "60000", "WAIT", "5000")
        assert.not_equal("integer", math.type(r))
        integer(c:call("LOCK.ACQUIRE", "g2", "x"))
        assert.equal(0, a:call("LOCK.RENEW", "g2", "w", "PX", "1000"))
    end)

    -- The release's delete is lost (not applied) at the lease end, and the
    -- node goes meanwhile by the lease end's delete (through another
    -- sidecar: the holder's, unseen; here: the lease timer's, its delete
    -- sent while the release's was out): gone, but maybe not by the
    -- release, which must not answer 1 (the next holder may hold).
    for _, how in ipairs({ "here", "through another sidecar" }) do
        it("answers 0 to a release whose lost delete met the lease end, " .. how, function()
            local lock = a.LK.lock_path("lr")
            local t0 = W.now
            integer(a:call("LOCK.ACQUIRE", "lr", "h", "PX", "1000"))
            local hpath = lock .. "/" .. W:children(lock)[1]
            if how == "here" then
                a:fail_next({ op = "delete", latency = 50 })
            else
                c:fail_next({ op = "multi", hook = function() W:raw_delete(hpath) end })
            end
            W:advance(t0 + 995 - W.now)
            assert.equal(0, (how == "here" and a or c):call("LOCK.RELEASE", "lr", "h"))
            assert.same({}, W:children(lock))
        end)
    end

    -- Here, the release's own delete landed at the lease end, its reply
    -- lost: gone by that delete (the lease timer, which alone ends it, sent
    -- none), so 1, and the hold is told released, not expired.
    it("answers 1 to a release whose delete landed unanswered at the lease end, here", function()
        local lock = a.LK.lock_path("lr")
        local t0 = W.now
        integer(a:call("LOCK.ACQUIRE", "lr", "h", "PX", "1000"))
        a:fail_next({ op = "delete", when = "after" })
        W:advance(t0 + 995 - W.now)
        assert.equal(1, a:call("LOCK.RELEASE", "lr", "h"))
        assert.same({}, W:children(lock))
        assert.equal(0, a.LK.stats.expired)
    end)

    local function lag(sc, prefix, catch_up) S.lag(W, sc, prefix, catch_up) end

    it("does not answer a CONVERT to the mode a lagging server still shows", function()
        local t1 = b:call("LOCK.ACQUIRE", "sc", "X", "MODE", "EX")
        integer(t1)
        lag(a, a.LK.lock_path("sc"))
        assert.equal(t1, b:call("LOCK.CONVERT", "sc", "X", "MODE", "PR"))
        integer(c:call("LOCK.ACQUIRE", "sc", "Y", "MODE", "PR"))
        -- a's read shows X holding EX still; Y holds PR, granted after it
        local r = a:call("LOCK.CONVERT", "sc", "X", "MODE", "EX", "WAIT", "5000")
        assert.same(S.UNAVAILABLE, r)
    end)

    -- The hold count's write lands, its reply lost; the sidecar's server
    -- (after a reconnect) has not applied it yet when it looks: counted
    -- once all the same, so two releases free the lock.
    it("counts a reentrant acquire whose reply was lost once, on a lagging server", function()
        local t = a:call("LOCK.ACQUIRE", "rl", "o")
        integer(t)
        lag(a, a.LK.lock_path("rl"), true)
        a:fail_next({ op = "set", when = "after" })
        assert.equal(t, a:call("LOCK.ACQUIRE", "rl", "o"))
        assert.equal(1, a:call("LOCK.RELEASE", "rl", "o"))
        assert.equal(1, a:call("LOCK.RELEASE", "rl", "o"))
        assert.equal(0, #a:call("LOCK.INFO", "rl").map[2])
    end)

    it("waits for a conversion whose request's reply was lost, on a lagging server", function()
        a:call("LOCK.ACQUIRE", "cs", "h", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "cs", "r", "MODE", "PR")
        lag(a, a.LK.lock_path("cs"), true)
        a:fail_next({ op = "multi", when = "after" })
        local cv = start(a, "LOCK.CONVERT", "cs", "h", "MODE", "EX", "WAIT", "60000")
        run()
        assert.is_falsy(cv.done, tostring(cv.result and cv.result.err))
        b:call("LOCK.RELEASE", "cs", "r")
        run()
        assert.is_true(cv.done and math.type(cv.result) == "integer", tostring(cv.result))
    end)

    it("waits for a conversion whose request's reply was lost", function()
        a:call("LOCK.ACQUIRE", "cl", "h", "MODE", "PR")
        b:call("LOCK.ACQUIRE", "cl", "r", "MODE", "PR")
        a:fail_next({ op = "multi", when = "after" })
        local c = start(a, "LOCK.CONVERT", "cl", "h", "MODE", "EX", "WAIT", "60000")
        run()
        assert.is_falsy(c.done)
        b:call("LOCK.RELEASE", "cl", "r")
        run()
        assert.is_true(c.done and math.type(c.result) == "integer", tostring(c.result))
    end)

    -- The requests sidecar sc made on the lock's nodes since W.ops[from]:
    -- {kind, when it was sent, path} each; lock_ops: their kinds.
    local function timed_ops(sc, key, from)
        local lock, out = sc.LK.lock_path(key), {}
        for i = from + 1, #W.ops do
            local op = W.ops[i]
            if op.sc == sc.id and (op.path or ""):find(lock, 1, true) then
                out[#out + 1] = { op.kind, W.op_times[i], op.path }
            end
        end
        return out
    end

    local function lock_ops(sc, key, from)
        local kinds = {}
        for i, op in ipairs(timed_ops(sc, key, from)) do kinds[i] = op[1] end
        return kinds
    end

    -- The first holder here was granted at once: its view lists no waiter,
    -- but the sidecar listed the lock since, at each waiter's arrival, and
    -- its release grants from the newest of those listings.  From then on
    -- each release grants the next in its own multi.
    it("hands on within one sidecar with the release's multi alone", function()
        local t0 = a:call("LOCK.ACQUIRE", "ho", "h")
        local w = {}
        for i = 1, 3 do w[i] = start(a, "LOCK.ACQUIRE", "ho", "w" .. i, "WAIT", "60000") end
        local from = #W.ops
        -- the waiter it grants is answered before the release itself
        local rel = a:start("LOCK.RELEASE", "ho", "h")
        W:run_until(function() return rel.done end)
        assert.equal(1, rel.result)
        assert.is_true(w[1].done and w[1].result > t0)
        assert.is_true(w[1].finished < rel.finished)
        assert.same({ "multi" }, lock_ops(a, "ho", from))
        for i = 2, 3 do
            from = #W.ops
            assert.equal(1, a:call("LOCK.RELEASE", "ho", "w" .. i - 1))
            run()
            assert.is_true(w[i].done and w[i].result > w[i - 1].result)
            if w[i + 1] then assert.is_falsy(w[i + 1].done) end
            -- the waiter learnt its grant and its view from the release;
            -- the last of that view lists the lock for its own release
            assert.same(w[i + 1] and { "multi" } or { "multi", "children" }, lock_ops(a, "ho", from))
        end
    end)

    it("hands on across sidecars: the woken waiter reads the table alone, and its release grants the next", function()
        local last = a:call("LOCK.ACQUIRE", "hx", "h")
        local sides = { b, a, b }
        local w = {}
        for i = 1, 3 do w[i] = start(sides[i], "LOCK.ACQUIRE", "hx", "w" .. i, "WAIT", "60000") end
        -- h's release grants from a's listing at w2's arrival, [w1, w2];
        -- w2, the last of that queue, lists the lock after its grant for
        -- its own release, and so does w3, the last of w2's listing
        local lists = { false, true, true }
        local holder, releaser = "h", a
        for i = 1, 3 do
            local from = #W.ops
            assert.equal(1, releaser:call("LOCK.RELEASE", "hx", holder))
            run()
            assert.is_true(w[i].done and w[i].result > last)
            if w[i + 1] then assert.is_falsy(w[i + 1].done) end
            -- granted by the release's multi: the waiter read the table,
            -- which carries the queue the release decided on (its own
            -- release grants from it), and wrote no grant
            assert.same({ "multi" }, lock_ops(releaser, "hx", from))
            local kinds = lock_ops(sides[i], "hx", from)
            table.sort(kinds)
            assert.same(lists[i] and { "children", "get" } or { "get" }, kinds)
            holder, releaser, last = "w" .. i, sides[i], w[i].result
        end
    end)

    -- h holds on a, w1 waits on b and w2 on a; h's release grants w1 from
    -- a's listing at w2's arrival, so the queue the views carry is [w1, w2];
    -- then w3 comes, on `side`, after that queue.  w1's release grants w2
    -- and writes [w2].
    local function newcomer_after_the_views(key, side)
        a:call("LOCK.ACQUIRE", key, "h")
        local w1 = start(b, "LOCK.ACQUIRE", key, "w1", "WAIT", "60000")
        local w2 = start(a, "LOCK.ACQUIRE", key, "w2", "WAIT", "60000")
        assert.equal(1, a:call("LOCK.RELEASE", key, "h"))
        run()
        assert.is_true(w1.done)
        return w1, w2, start(side, "LOCK.ACQUIRE", key, "w3", "WAIT", "60000")
    end

    -- A view passes from release to release and learns of no new request:
    -- the last request of it lists the lock after its grant, so that its
    -- release grants one that came since in its multi, instead of a plain
    -- delete after which that request would grant itself.
    it("hands on to a request that came after the queue the views carry", function()
        local w1, w2, w3 = newcomer_after_the_views("hn", c)
        run()
        assert.equal(1, b:call("LOCK.RELEASE", "hn", "w1"))
        run()
        assert.is_true(w2.done and w2.result > w1.result)
        assert.is_falsy(w3.done)
        local from = #W.ops
        assert.equal(1, a:call("LOCK.RELEASE", "hn", "w2"))
        run()
        assert.is_true(w3.done and w3.result > w2.result)
        -- granted by w2's multi: w3 read the table, wrote no grant (and,
        -- the last of the queue again, listed the lock)
        assert.same({ "multi" }, lock_ops(a, "hn", from))
        local kinds = lock_ops(c, "hn", from)
        table.sort(kinds)
        assert.same({ "children", "get" }, kinds)
    end)

    -- The last request of the queue its view carries takes, rather than a
    -- listing of its own, its sidecar's newest listing when that lists a
    -- request after it: one that came since, on that sidecar.
    it("hands on to a later request from its sidecar's newest listing, without listing again", function()
        local w1, w2, w3 = newcomer_after_the_views("hl", a)
        local from = #W.ops
        assert.equal(1, b:call("LOCK.RELEASE", "hl", "w1"))
        run()
        assert.is_true(w2.done and w2.result > w1.result)
        assert.is_falsy(w3.done)
        -- w2, the last of [w2], read the table alone: a's listing at w3's
        -- arrival is its view
        assert.same({ "get" }, lock_ops(a, "hl", from))
        from = #W.ops
        assert.equal(1, a:call("LOCK.RELEASE", "hl", "w2"))
        run()
        assert.is_true(w3.done and w3.result > w2.result)
        -- granted by w2's multi (no read: a wrote it); w3, the last of
        -- that view with nothing listed after it, lists the lock
        local kinds = lock_ops(a, "hl", from)
        table.sort(kinds)
        assert.same({ "children", "multi" }, kinds)
    end)

    it("sends an arriving request's create and its listing together", function()
        a:call("LOCK.ACQUIRE", "pl", "h")
        local from = #W.ops
        local w = start(b, "LOCK.ACQUIRE", "pl", "w", "WAIT", "60000")
        local ops = timed_ops(b, "pl", from)
        -- create and listing in one round trip, then the table (b has not
        -- seen it) and the watch
        assert.equal("create", ops[1][1])
        assert.equal("children", ops[2][1])
        assert.equal(ops[1][2], ops[2][2])
        assert.is_true(ops[3][2] > ops[1][2])
        -- a free lock this sidecar knows: the create and the listing, then
        -- the grant's write
        c:call("LOCK.ACQUIRE", "pf", "x")
        c:call("LOCK.RELEASE", "pf", "x")
        from = #W.ops
        local t0 = W.now
        integer(c:call("LOCK.ACQUIRE", "pf", "x", "WAIT", "1000"))
        ops = timed_ops(c, "pf", from)
        assert.equal(2 * W.latency, W.now - t0)
        assert.same({ "create", "children", "set" }, { ops[1][1], ops[2][1], ops[3][1] })
        a:call("LOCK.RELEASE", "pl", "h")
        run()
        assert.is_true(w.done)
    end)

    -- h on a; w1 on b (b reads the table); a's release grants w1; w2 comes
    -- on c; b's release of w1 grants w2.  a last saw the table of its own
    -- release, two versions back, when w3 comes on a.
    it("waits behind the request ahead of it without reading a table that moved on", function()
        a:call("LOCK.ACQUIRE", "st", "h")
        local w1 = start(b, "LOCK.ACQUIRE", "st", "w1", "WAIT", "60000")
        a:call("LOCK.RELEASE", "st", "h")
        run()
        assert.is_true(w1.done)
        local w2 = start(c, "LOCK.ACQUIRE", "st", "w2", "WAIT", "60000")
        b:call("LOCK.RELEASE", "st", "w1")
        run()
        assert.is_true(w2.done)
        local from = #W.ops
        local w3 = start(a, "LOCK.ACQUIRE", "st", "w3", "WAIT", "60000")
        local kinds, watched = {}, nil
        for _, op in ipairs(timed_ops(a, "st", from)) do
            kinds[#kinds + 1] = op[1]
            if op[1] == "get" then watched = op[3] end
        end
        -- no read of the lock node: the get is the watch on w2's request
        assert.same({ "create", "children", "get" }, kinds)
        assert.is_not.equal(a.LK.lock_path("st"), watched)
        assert.is_falsy(w3.done)
        c:call("LOCK.RELEASE", "st", "w2")
        run()
        assert.is_true(w3.done and w3.result > w2.result)
    end)

    -- A waiter behind a request of its own sidecar sets no watch: that
    -- sidecar's release (its multi), lease end and leaving waiter wake it;
    -- what another sidecar did to that request it finds by looking again.
    it("waits behind a request of its own sidecar with no watch: that sidecar's writes wake it", function()
        a:call("LOCK.ACQUIRE", "ow", "h")
        local from = #W.ops
        local w1 = start(a, "LOCK.ACQUIRE", "ow", "w1", "PX", "1000", "WAIT", "60000")
        assert.same({ "create", "children" }, lock_ops(a, "ow", from))
        local w2 = start(a, "LOCK.ACQUIRE", "ow", "w2", "WAIT", "60000")
        assert.equal(1, a:call("LOCK.RELEASE", "ow", "h"))
        run()
        assert.is_true(w1.done and not w2.done)
        -- w1's lease ends: a's delete wakes w2 at once
        W:advance(1000)
        run()
        assert.is_true(w2.done and w2.result > w1.result)
        local w3 = start(a, "LOCK.ACQUIRE", "ow", "w3", "WAIT", "60000")
        local w4 = start(a, "LOCK.ACQUIRE", "ow", "w4", "WAIT", "60000")
        a:abandon(w3)
        run()
        assert.equal(1, a:call("LOCK.RELEASE", "ow", "w2"))
        run()
        assert.is_true(w4.done and w4.result > w2.result)
        -- w4 released through b: a's waiter behind it looks again once
        -- its grace is over
        local w5 = start(a, "LOCK.ACQUIRE", "ow", "w5", "WAIT", "60000")
        assert.equal(1, b:call("LOCK.RELEASE", "ow", "w4"))
        run()
        assert.is_falsy(w5.done)
        W:advance(a.LK.wait_own_grace_ms)
        assert.is_true(w5.done and w5.result > w4.result)
        assert.is_true(a.LK.wait_stats.own_waits >= 5)
        -- a wait that outlasts the grace watches from then on: a release
        -- through b wakes w7 at once
        local w6 = start(a, "LOCK.ACQUIRE", "ow", "w6", "WAIT", "60000")
        assert.equal(1, a:call("LOCK.RELEASE", "ow", "w5"))
        run()
        assert.is_true(w6.done)
        local w7 = start(a, "LOCK.ACQUIRE", "ow", "w7", "WAIT", "60000")
        W:advance(a.LK.wait_own_grace_ms + 50)
        assert.is_falsy(w7.done)
        assert.equal(1, b:call("LOCK.RELEASE", "ow", "w6"))
        run()
        assert.is_true(w7.done and w7.result > w6.result)
    end)

    -- b last read the table while x held EX; x converts down to PR (a write
    -- b does not see); w (PR) comes on b: the table b knows says x holds EX
    -- and b saves the read, but x's node was written since that table, so
    -- w looks again rather than waiting for x's release.
    it("looks again when the request it waits for changed after the table it chose on", function()
        a:call("LOCK.ACQUIRE", "dc", "x", "MODE", "EX")
        assert.equal(0, #waiters(b, "dc")) -- b reads the lock: the table of x's grant
        integer(a:call("LOCK.CONVERT", "dc", "x", "MODE", "PR"))
        local w = start(b, "LOCK.ACQUIRE", "dc", "w", "MODE", "PR", "WAIT", "60000")
        run()
        assert.is_true(w.done and math.type(w.result) == "integer")
        assert.equal(2, #c:call("LOCK.INFO", "dc").map[2])
    end)

    -- The lock node of `key` and the path of its request named `prefix`...
    local function lock_nodes(key, prefix)
        for path in pairs(W.nodes) do
            if path:match("/l/" .. key .. "$") then
                for _, name in ipairs(W:children(path)) do
                    if name:sub(1, #prefix) == prefix then return path, path .. "/" .. name end
                end
            end
        end
    end

    -- w (PR, on b) reads the table while x holds EX and chooses x's node to
    -- watch; x converts down to PR before that watch is set (the model's
    -- write of x's conversion lands between b's read and b's watch), so no
    -- event will come: w sees x's node written after the table it chose on
    -- and looks again, rather than sleeping until x's release or its WAIT.
    -- Then a renewal of x (its node written, the table not) costs w one
    -- more look, not a loop of them.
    it("looks again when the request it watches was converted down between its read and its watch", function()
        integer(a:call("LOCK.ACQUIRE", "dr", "x", "MODE", "EX"))
        local lock, xpath = lock_nodes("dr", "EX.")
        local get, converted, gets = b.zk.get, false, 0
        b.zk.get = function(path, watch)
            if path == xpath and watch then
                gets = gets + 1
                if not converted then
                    converted = true
                    local t = W:node(lock)
                    local pr = t.data:gsub("^(%d+) EX ", "%1 PR ")
                    assert.not_equal(t.data, pr)
                    W:raw_set(lock, pr)
                    W:raw_set(xpath, W:node(xpath).data)
                end
            end
            return get(path, watch)
        end
        local w = start(b, "LOCK.ACQUIRE", "dr", "w", "MODE", "PR", "WAIT", "60000")
        run()
        assert.is_true(converted)
        assert.is_true(w.done and math.type(w.result) == "integer", "w granted beside x's PR")
        b.zk.get = get
        -- a waiter behind x's renewed node looks once more, then sleeps
        integer(a:call("LOCK.ACQUIRE", "rn", "y", "MODE", "EX"))
        local lock2, ypath = lock_nodes("rn", "EX.")
        local looks = 0
        b.zk.get = function(path, watch)
            if path == ypath and watch then
                looks = looks + 1
                if looks == 1 then W:raw_set(ypath, W:node(ypath).data) end
            end
            return get(path, watch)
        end
        local v = start(b, "LOCK.ACQUIRE", "rn", "v", "MODE", "EX", "WAIT", "60000")
        W:advance(1000)
        assert.is_falsy(v.done)
        assert.equal(2, looks)
        assert.truthy(lock2)
        assert.equal(1, a:call("LOCK.RELEASE", "rn", "y"))
        run()
        assert.is_true(v.done and math.type(v.result) == "integer")
        assert.equal(2, looks)
    end)

    it("answers bad options with Redis's errors", function()
        assert.same(S.E("ERR wrong number of arguments for 'lock.acquire' command"), a:call("LOCK.ACQUIRE", "k"))
        assert.same(S.SYNTAX, a:call("LOCK.ACQUIRE", "k", "o", "PX"))
        assert.same(S.NOT_INT, a:call("LOCK.ACQUIRE", "k", "o", "PX", "1.5"))
        assert.same(S.E("ERR invalid expire time in 'lock.acquire' command"), a:call("LOCK.ACQUIRE", "k", "o", "PX", "0"))
        assert.same(S.E("ERR timeout is negative"), a:call("LOCK.ACQUIRE", "k", "o", "WAIT", "-1"))
        assert.matches("unknown lock mode", a:call("LOCK.ACQUIRE", "k", "o", "MODE", "XX").err)
        assert.same(S.SYNTAX, a:call("LOCK.CONVERT", "k", "o", "WAIT", "10"))
    end)

    it("keeps its own namespace beside the keys", function()
        a:call("LOCK.ACQUIRE", "ns", "o")
        assert.equal(0, a:call("EXISTS", "ns"))
        assert.same(S.OK, a:call("SET", "ns", "v"))
        assert.equal(null, b:call("LOCK.ACQUIRE", "ns", "p"))
    end)
end)
