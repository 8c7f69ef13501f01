-- The grant rule of native locks (issue 18), before any ZooKeeper: the
-- matrix, strict FIFO, conversions, cancellation, the herd-free watch and
-- the fencing token, over a small event-driven model of one lock's queue.
-- Reentrancy is not here: a second acquire by the same owner in the same
-- mode is a hold count in the node's data, not an entry of the queue.

local S = require "world"

local Q = S.module("lockq")

local MODES = { "NL", "CR", "CW", "PR", "PW", "EX" }

-- The issue's matrix, written out again: held in rows, requested in
-- columns, in the order of MODES.
local ISSUE = {
    NL = "YYYYYY", CR = "YYYYYN", CW = "YYYNNN",
    PR = "YYNYNN", PW = "YYNNNN", EX = "YNNNNN",
}

-- One lock as ZooKeeper would hold it, driven like the layer will drive
-- it: every change is a write with the next zxid; a waiter watches one
-- node (Q.watch_target) and asks again only when that node changes or
-- goes; a waiter that finds itself first among the grants records its
-- grant (a setData, waking its own watchers).
local function lock()
    local L = { queue = {}, zxid = 0, pzxid = 0, seq = 0, log = {}, wakes = {} }

    function L.write()
        L.zxid = L.zxid + 1
        return L.zxid
    end

    local function hold(e, mode, token, kind)
        e.token = token
        L.log[#L.log + 1] = { entry = e, mode = mode, token = token, kind = kind }
    end

    local function watchers(x)
        local out = {}
        for _, e in ipairs(L.queue) do
            if e.watch == x then out[#out + 1] = e end
        end
        L.wakes[#L.wakes + 1] = #out
        return out
    end

    local function order(a, b)
        local ca, cb = a.granted ~= nil, b.granted ~= nil
        if ca ~= cb then return ca end
        if ca then return (a.convert_at or 0) < (b.convert_at or 0) end
        return a.seq < b.seq
    end

    local function present(e)
        for _, x in ipairs(L.queue) do
            if x == e then return true end
        end
        return false
    end

    -- Woken entries ask again, conversions first, then in queue order.
    local function settle(woken)
        local pending = {}
        for _, e in ipairs(woken) do pending[#pending + 1] = e end
        while #pending > 0 do
            table.sort(pending, order)
            local e = table.remove(pending, 1)
            if present(e) and Q.waits(e) then
                e.watch = nil
                local g = Q.grantable(L.queue)[1]
                if g and g.entry == e then
                    if g.kind == "new" then
                        for _, x in ipairs(L.queue) do
                            if x == e then break end
                            assert(x.granted, "strict FIFO: granted past a waiter")
                        end
                    end
                    local token = Q.token(e, Q.observed(L.queue, L.pzxid))
                    Q.apply({ g })
                    e.mzxid = L.write()
                    hold(e, g.mode, token, g.kind)
                    for _, w in ipairs(watchers(e)) do pending[#pending + 1] = w end
                else
                    e.watch = Q.watch_target(L.queue, e)
                    assert(e.watch, "a waiter with nothing to watch")
                end
            end
        end
    end

    function L.request(owner, mode)
        local z = L.write()
        L.seq = L.seq + 1
        local e = { seq = L.seq, owner = owner, mode = mode, czxid = z, mzxid = z }
        L.queue[#L.queue + 1] = e
        L.pzxid = z
        settle({ e })
        return e
    end

    -- A release, a lease ending, a session lost, or a waiter leaving.
    function L.release(e)
        local z = L.write()
        for i, x in ipairs(L.queue) do
            if x == e then table.remove(L.queue, i) break end
        end
        L.pzxid = z
        e.left = true
        settle(watchers(e))
    end

    function L.convert(e, mode)
        assert(e.granted and not e.convert)
        local z = L.write()
        e.mzxid = z
        if Q.is_down(e.granted, mode) then
            e.granted = mode
            hold(e, mode, e.token, "down")
        else
            e.convert, e.convert_at = mode, z
        end
        local woken = watchers(e)
        woken[#woken + 1] = e
        settle(woken)
    end

    -- A conversion's WAIT lapsed: the old mode is kept.
    function L.give_up(e)
        assert(e.convert)
        e.mzxid = L.write()
        e.convert, e.convert_at = nil, nil
        settle(watchers(e))
    end

    return L
end

local function granted(...)
    local out = {}
    for _, e in ipairs({ ... }) do out[#out + 1] = e.granted or false end
    return out
end

-- Every invariant of the rule, over the lock as it stands.
local function check(L)
    local q = L.queue
    for i = 1, #q do
        for j = i + 1, #q do
            if q[i].granted and q[j].granted then
                assert(Q.compatible(q[i].granted, q[j].granted), "incompatible holds")
            end
        end
    end
    assert.same({}, Q.grantable(q), "a waiter is grantable: a wake-up was lost")
    local waiting = false
    for _, e in ipairs(q) do
        if not e.granted then waiting = true end
        if e.granted then assert(not waiting, "granted entries are not a prefix") end
    end
    local dead = Q.deadlocked(q)
    for _, e in ipairs(q) do
        if Q.waits(e) then
            local t = Q.watch_target(q, e)
            assert(t and t ~= e, "no watch target")
            local found = false
            for _, x in ipairs(q) do found = found or x == t end
            assert(found, "the target is not in the queue")
            assert(e.watch and not e.watch.left, "watching a node that left")
            if not e.granted then
                assert(t.seq < e.seq, "target is not earlier")
                local clash = not Q.compatible(t.granted or t.mode, e.mode)
                    or (t.convert and not Q.compatible(t.convert, e.mode))
                assert(clash or Q.waits(t), "target neither conflicts nor waits")
            else
                assert(t.granted)
                assert(not Q.compatible(t.granted, e.convert) or t.convert, "target of a conversion")
            end
        else
            assert(not dead[e])
        end
    end
    -- Tokens of conflicting holds increase in grant order.
    local log = L.log
    for i = 1, #log do
        for j = i + 1, #log do
            local a, b = log[i], log[j]
            local same_hold = a.entry == b.entry and b.kind == "down"
            if not same_hold and not Q.compatible(a.mode, b.mode) then
                assert(a.token < b.token, ("token %d then %d"):format(a.token, b.token))
            end
        end
    end
end

describe("lockq", function()
    describe("modes", function()
        it("is the issue's matrix, symmetric", function()
            for _, held in ipairs(MODES) do
                for c, req in ipairs(MODES) do
                    assert.equal(ISSUE[held]:sub(c, c) == "Y", Q.compatible(held, req), held .. "/" .. req)
                    assert.equal(Q.compatible(held, req), Q.compatible(req, held))
                end
            end
            assert.same(MODES, Q.MODES)
        end)

        it("parses modes case-insensitively, with SHARED and EXCLUSIVE", function()
            for _, m in ipairs(MODES) do
                assert.equal(m, Q.parse_mode(m))
                assert.equal(m, Q.parse_mode(m:lower()))
            end
            assert.equal("PR", Q.parse_mode("shared"))
            assert.equal("PR", Q.parse_mode("Shared"))
            assert.equal("EX", Q.parse_mode("EXCLUSIVE"))
            assert.equal("EX", Q.parse_mode("exclusive"))
            for _, bad in ipairs({ "", "XX", "EXC", " EX", "read", "PR " }) do
                local m, err = Q.parse_mode(bad)
                assert.is_nil(m)
                assert.matches("unknown lock mode", err)
            end
            assert.is_nil(Q.parse_mode(nil))
        end)

        it("calls a conversion down exactly as the Linux DLM does", function()
            -- The DLM: down when the new mode ranks below the old, except
            -- the middle conversion PR <-> CW; converting to itself is a no-op.
            local rank = {}
            for i, m in ipairs(MODES) do rank[m] = i end
            local downs = 0
            for _, from in ipairs(MODES) do
                for _, to in ipairs(MODES) do
                    local middle = (from == "PR" and to == "CW") or (from == "CW" and to == "PR")
                    local dlm = from == to or (rank[to] < rank[from] and not middle)
                    assert.equal(dlm, Q.is_down(from, to), from .. "->" .. to)
                    if dlm and from ~= to then downs = downs + 1 end
                end
            end
            assert.equal(14, downs)
        end)
    end)

    describe("grants", function()
        for _, first in ipairs(MODES) do
            for c, second in ipairs(MODES) do
                local yes = ISSUE[first]:sub(c, c) == "Y"
                it(("grants %s after %s %s"):format(second, first, yes and "at once" or "only after it"), function()
                    local L = lock()
                    local a = L.request("a", first)
                    local b = L.request("b", second)
                    assert.equal(first, a.granted)
                    assert.equal(yes and second or nil, b.granted)
                    if not yes then
                        assert.equal(a, b.watch)
                        L.release(a)
                        assert.equal(second, b.granted)
                    end
                    check(L)
                end)
            end
        end

        it("does not let a reader pass a queued writer", function()
            local L = lock()
            local r1 = L.request("r1", "PR")
            local w = L.request("w", "EX")
            local r2 = L.request("r2", "PR")
            assert.same({ "PR", false, false }, granted(r1, w, r2))
            assert.equal(w, r2.watch)
            check(L)
            L.release(r1)
            assert.same({ "EX", false }, granted(w, r2))
            L.release(w)
            assert.equal("PR", r2.granted)
            check(L)
        end)

        it("never starves a writer behind a stream of readers", function()
            local L = lock()
            local readers = { L.request("r0", "PR") }
            local w = L.request("w", "EX")
            for i = 1, 20 do
                readers[#readers + 1] = L.request("r" .. i, "PR")
                check(L)
            end
            L.release(readers[1])
            assert.equal("EX", w.granted)
            for i = 2, #readers do assert.is_nil(readers[i].granted) end
            L.release(w)
            for i = 2, #readers do assert.equal("PR", readers[i].granted) end
            check(L)
        end)

        it("grants 12 waiters of mixed modes in arrival order", function()
            local L = lock()
            local h = L.request("h", "EX")
            local modes = { "PR", "EX", "CR", "PW", "CW", "NL", "EX", "PR", "PR", "CW", "PW", "CR" }
            local waiters = {}
            for i, m in ipairs(modes) do waiters[i] = L.request("w" .. i, m) end
            L.release(h)
            local seen, order = {}, {}
            while #L.queue > 0 do
                check(L)
                for _, g in ipairs(L.log) do
                    if not seen[g.entry] then
                        seen[g.entry] = true
                        order[#order + 1] = g.entry.owner
                    end
                end
                L.release(L.queue[1])
            end
            assert.same({ "h", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10", "w11", "w12" }, order)
        end)

        it("lets a cancelled waiter's successors through, and only those it blocked", function()
            local L = lock()
            local h = L.request("h", "PR")
            local w1 = L.request("w1", "EX")
            local w2 = L.request("w2", "PR")
            local w3 = L.request("w3", "CR")
            local w4 = L.request("w4", "PW")
            local w5 = L.request("w5", "PR")
            check(L)
            L.release(w1)
            assert.same({ "PR", "PR", "CR", false, false }, granted(h, w2, w3, w4, w5))
            check(L)
            L.release(w4)
            assert.equal("PR", w5.granted)
            check(L)
        end)
    end)

    describe("conversions", function()
        it("grants a down-conversion at once, keeping the token", function()
            local L = lock()
            local a = L.request("a", "EX")
            local b = L.request("b", "PR")
            local token = a.token
            L.convert(a, "PR")
            assert.same({ "PR", "PR" }, granted(a, b))
            assert.equal(token, a.token)
            check(L)
        end)

        it("grants an up-conversion after the other holders, before new requests queued earlier", function()
            local L = lock()
            local a = L.request("a", "PR")
            local b = L.request("b", "PR")
            local c = L.request("c", "EX")
            L.convert(a, "EX")
            assert.same({ "PR", "PR", false }, granted(a, b, c))
            assert.equal("EX", a.convert)
            assert.equal(b, Q.watch_target(L.queue, a))
            check(L)
            L.release(b)
            assert.same({ "EX", false }, granted(a, c))
            assert.is_nil(a.convert)
            check(L)
            L.release(a)
            assert.equal("EX", c.granted)
            check(L)
        end)

        it("keeps new requests behind a waiting conversion, even compatible ones", function()
            local L = lock()
            local a = L.request("a", "CR")
            local b = L.request("b", "PR")
            L.convert(a, "PW")
            local n = L.request("n", "NL")
            assert.is_nil(n.granted)
            assert.equal(a, n.watch)
            check(L)
            L.release(b)
            assert.same({ "PW", "NL" }, granted(a, n))
            check(L)
        end)

        it("grants conversions in the order they were asked, not by queue position", function()
            local L = lock()
            local a = L.request("a", "NL")
            local b = L.request("b", "NL")
            local c = L.request("c", "PR")
            L.convert(b, "PW")
            L.convert(a, "EX")
            assert.same({ b, a }, Q.conversions(L.queue))
            check(L)
            L.release(c)
            assert.same({ "NL", "PW" }, granted(a, b))
            assert.equal(b, a.watch)
            check(L)
            L.convert(b, "NL")
            assert.same({ "EX", "NL" }, granted(a, b))
            check(L)
        end)

        it("treats PR <-> CW as conversions that queue", function()
            local L = lock()
            local a = L.request("a", "PR")
            local b = L.request("b", "PR")
            L.convert(a, "CW")
            assert.equal("PR", a.granted)
            L.release(b)
            assert.equal("CW", a.granted)
            check(L)
        end)

        it("finds conversion deadlocks and ends them when one gives up", function()
            local L = lock()
            local a = L.request("a", "PR")
            local b = L.request("b", "PR")
            L.convert(a, "EX")
            L.convert(b, "EX")
            local dead = Q.deadlocked(L.queue)
            assert.is_true(dead[a] and dead[b])
            assert.equal(b, a.watch)
            assert.equal(a, b.watch)
            L.give_up(b)
            assert.same({}, Q.deadlocked(L.queue))
            L.release(b)
            assert.equal("EX", a.granted)
            check(L)
        end)

        it("finds a deadlock through the conversion queue", function()
            local L = lock()
            local a = L.request("a", "CR")
            local b = L.request("b", "CR")
            L.convert(a, "EX")  -- waits for b's CR
            L.convert(b, "CW")  -- compatible with a's CR, but behind a
            local dead = Q.deadlocked(L.queue)
            assert.is_true(dead[a] and dead[b])
            check(L)
        end)
    end)

    describe("watches", function()
        for _, n in ipairs({ 2, 8, 32 }) do
            it(("gives %d EX waiters their predecessor each, and wakes one per release"):format(n), function()
                local L = lock()
                local all = { L.request("h", "EX") }
                for i = 1, n do all[#all + 1] = L.request("w" .. i, "EX") end
                for i = 2, #all do
                    assert.equal(all[i - 1], Q.watch_target(L.queue, all[i]))
                    assert.equal(all[i - 1], all[i].watch)
                end
                check(L)
                for i = 1, n do
                    L.wakes = {}
                    L.release(all[i])
                    assert.equal(1, L.wakes[1])
                    assert.equal("EX", all[i + 1].granted)
                end
                check(L)
            end)
        end

        it("has a run of readers watch the writer they wait for, not each other", function()
            local L = lock()
            local w = L.request("w", "EX")
            local rs = {}
            for i = 1, 8 do rs[i] = L.request("r" .. i, "PR") end
            for i = 1, 8 do assert.equal(w, Q.watch_target(L.queue, rs[i])) end
            L.wakes = {}
            L.release(w)
            assert.equal(8, L.wakes[1])
            for i = 1, 8 do assert.equal("PR", rs[i].granted) end
            check(L)
        end)

        it("gives no target to a waiter that is grantable now", function()
            local q = {
                { seq = 1, mode = "EX", czxid = 1 },
                { seq = 2, mode = "PR", czxid = 2 },
                { seq = 3, mode = "PR", czxid = 3 },
            }
            assert.is_nil(Q.watch_target(q, q[1]))
            assert.equal(q[1], Q.watch_target(q, q[2]))
            q[1].granted = "EX"
            assert.is_nil(Q.watch_target(q, q[1]))
            table.remove(q, 1)
            assert.is_nil(Q.watch_target(q, q[1]))
            assert.is_nil(Q.watch_target(q, q[2]))
            assert.same({ q[1], q[2] }, { Q.grantable(q)[1].entry, Q.grantable(q)[2].entry })
        end)

        it("has a waiter with no conflict ahead watch the waiter before it", function()
            local L = lock()
            local h = L.request("h", "PR")
            local x = L.request("x", "CW")
            local y = L.request("y", "CR")
            assert.equal(h, x.watch)
            assert.equal(x, y.watch)
            L.release(x)
            assert.equal("CR", y.granted)
            check(L)
        end)
    end)

    describe("tokens", function()
        it("is the czxid of a request granted at once", function()
            local L = lock()
            local a = L.request("a", "EX")
            assert.equal(a.czxid, a.token)
        end)

        it("outgrows a conversion granted ahead of an older request", function()
            local L = lock()
            local a = L.request("a", "PR")
            local b = L.request("b", "EX")
            L.convert(a, "EX")
            assert.equal("EX", a.granted)
            L.release(a)
            assert.equal("EX", b.granted)
            assert.is_true(b.czxid < a.token)   -- the czxid alone would go back
            assert.is_true(b.token > a.token)
            check(L)
        end)

        it("is above a down-converted hold's token", function()
            local L = lock()
            local a = L.request("a", "PR")
            local b = L.request("b", "PW")
            L.convert(a, "EX")
            L.convert(a, "NL")
            assert.equal("PW", b.granted)
            assert.is_true(b.token > a.token)
            check(L)
        end)
    end)

    it("keeps every invariant over random requests, releases and conversions", function()
        local rng_state = 20261125
        local function rand(n)
            rng_state = (rng_state * 1103515245 + 12345) % 2147483648
            return rng_state % n + 1
        end
        for run = 1, 40 do
            local L = lock()
            for step = 1, 120 do
                local q, r = L.queue, rand(10)
                if #q == 0 or r <= 4 then
                    L.request("o" .. run .. "." .. step, MODES[rand(6)])
                elseif r <= 7 then
                    L.release(q[rand(#q)])
                else
                    local e = q[rand(#q)]
                    if e.convert then
                        L.give_up(e)
                    elseif e.granted then
                        local m = MODES[rand(6)]
                        if m ~= e.granted then L.convert(e, m) end
                    end
                end
                check(L)
                -- The fixed point from other states: the same queue with the
                -- later half of its holds not granted yet, their conversions
                -- pending or gone; one round of grants leaves none.
                local copy = {}
                for i, e in ipairs(L.queue) do
                    local c = { seq = e.seq, mode = e.granted or e.mode, czxid = e.czxid }
                    if e.granted and i <= #L.queue // 2 then
                        c.granted, c.convert, c.convert_at = e.granted, e.convert, e.convert_at
                    end
                    copy[i] = c
                end
                Q.apply(Q.grantable(copy))
                assert.same({}, Q.grantable(copy))
                for i = 1, #copy do
                    for j = i + 1, #copy do
                        if copy[i].granted and copy[j].granted then
                            assert(Q.compatible(copy[i].granted, copy[j].granted))
                        end
                    end
                end
            end
        end
    end)
end)
