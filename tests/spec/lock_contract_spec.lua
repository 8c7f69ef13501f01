-- The external contract of LOCK.* to the letter (the issue's, with what
-- the README's "Native locks" section fixes): option parsing and its
-- errors, owners and keys of any bytes, reentrancy and conversions by
-- owners in each state, LOCK.INFO's shape and types, tokens, and the
-- grants a down-conversion or a waiter's leaving lets through.  What
-- locks_spec, lock_edges_spec and lockq_spec already check is not
-- repeated here.

local S = require "world"
local null = S.null

local function field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do
        if m[i] == name then return m[i + 1] end
    end
end

local function info(sc, key)
    local r = sc:call("LOCK.INFO", key)
    return r.map
end

local function holder(sc, key, owner)
    for _, e in ipairs(info(sc, key)[2]) do
        if field(e, "owner") == owner then return e end
    end
end

local function integer(x, what)
    assert.equal("integer", math.type(x), what)
end

local function invalid_expire(cmd) return S.E("ERR invalid expire time in '" .. cmd .. "' command") end
local TIMEOUT_NOT_INT = S.E("ERR timeout is not an integer or out of range")
local NO_HOLD = S.E("ERR owner holds no lock on this key (LOCK.ACQUIRE first)")
local CONV_WAITS = S.E("ERR owner's conversion of this lock is already waiting")
local function arity(cmd) return S.E("ERR wrong number of arguments for '" .. cmd .. "' command") end

describe("LOCK.* options", function()
    local W, a
    before_each(function() W, a = S.world(1) end)

    it("takes options in any order and any case, modes too", function()
        integer(a:call("lock.acquire", "o1", "o", "wait", "0", "px", "1000", "mode", "shared"))
        assert.equal("PR", field(info(a, "o1")[2][1], "mode"))
        integer(a:call("Lock.Acquire", "o2", "o", "Px", "1000", "Mode", "eXcLuSiVe", "Wait", "10"))
        assert.equal("EX", field(info(a, "o2")[2][1], "mode"))
        assert.equal(1, a:call("lock.renew", "o2", "o", "px", "5000"))
        integer(a:call("lock.convert", "o2", "o", "wait", "0", "mode", "cr"))
        assert.equal("CR", field(info(a, "o2")[2][1], "mode"))
    end)

    it("lets the last of a repeated option win, as SET's PX does", function()
        integer(a:call("LOCK.ACQUIRE", "o3", "o", "MODE", "PR", "PX", "1000", "MODE", "EX", "PX", "600000"))
        local h = info(a, "o3")[2][1]
        assert.equal("EX", field(h, "mode"))
        assert.is_true(field(h, "lease_left_ms") > 590000)
    end)

    it("answers an option without its value or an unknown one ERR syntax error", function()
        assert.same(S.SYNTAX, a:call("LOCK.ACQUIRE", "o4", "o", "MODE"))
        assert.same(S.SYNTAX, a:call("LOCK.ACQUIRE", "o4", "o", "PX", "10", "WAIT"))
        assert.same(S.SYNTAX, a:call("LOCK.ACQUIRE", "o4", "o", "NX"))
        assert.same(S.SYNTAX, a:call("LOCK.RENEW", "o4", "o", "WAIT", "10"))
        assert.same(S.SYNTAX, a:call("LOCK.CONVERT", "o4", "o", "MODE", "EX", "PX", "10"))
        -- a value that is an option name is that option's value
        assert.matches("^ERR unknown lock mode 'PX'", a:call("LOCK.ACQUIRE", "o4", "o", "MODE", "PX", "10").err)
        assert.matches("^ERR unknown lock mode 'zz'", a:call("LOCK.CONVERT", "o4", "o", "MODE", "zz").err)
        assert.same({ holders = 0, waiters = 0 }, { holders = #info(a, "o4")[2], waiters = #info(a, "o4")[4] })
    end)

    it("answers PX outside SET's range with SET's errors", function()
        assert.same(invalid_expire("lock.acquire"), a:call("LOCK.ACQUIRE", "o5", "o", "PX", "-5"))
        assert.same(invalid_expire("lock.acquire"), a:call("LOCK.ACQUIRE", "o5", "o", "PX", "9223372036854775807"))
        assert.same(S.NOT_INT, a:call("LOCK.ACQUIRE", "o5", "o", "PX", "9223372036854775808"))
        assert.same(S.NOT_INT, a:call("LOCK.ACQUIRE", "o5", "o", "PX", "+5"))
        assert.same(S.NOT_INT, a:call("LOCK.ACQUIRE", "o5", "o", "PX", "010"))
        assert.same(invalid_expire("lock.renew"), a:call("LOCK.RENEW", "o5", "o", "PX", "0"))
        assert.same(S.NOT_INT, a:call("LOCK.RENEW", "o5", "o", "PX", "abc"))
        -- a huge lease within the range is granted
        integer(a:call("LOCK.ACQUIRE", "o5", "o", "PX", "9000000000000000000"))
        assert.is_true(field(info(a, "o5")[2][1], "lease_left_ms") > 10^15)
    end)

    it("answers WAIT outside its range with BLPOP's errors", function()
        assert.same(TIMEOUT_NOT_INT, a:call("LOCK.ACQUIRE", "o6", "o", "WAIT", "1.5"))
        assert.same(TIMEOUT_NOT_INT, a:call("LOCK.ACQUIRE", "o6", "o", "WAIT", "-0"))
        assert.same(TIMEOUT_NOT_INT, a:call("LOCK.ACQUIRE", "o6", "o", "WAIT", "9223372036854775808"))
        assert.same(TIMEOUT_NOT_INT, a:call("LOCK.CONVERT", "o6", "o", "MODE", "EX", "WAIT", "x"))
        assert.same(S.E("ERR timeout is negative"), a:call("LOCK.CONVERT", "o6", "o", "MODE", "EX", "WAIT", "-1"))
    end)

    it("answers Redis's arity text, lowercase, for every command", function()
        assert.same(arity("lock.renew"), a:call("LOCK.RENEW", "k", "o"))
        assert.same(arity("lock.renew"), a:call("LOCK.RENEW", "k", "o", "PX"))
        assert.same(arity("lock.renew"), a:call("LOCK.RENEW", "k", "o", "PX", "1", "X"))
        assert.same(arity("lock.convert"), a:call("LOCK.CONVERT", "k", "o", "MODE"))
        assert.same(arity("lock.release"), a:call("Lock.Release", "k"))
        assert.same(arity("lock.release"), a:call("LOCK.RELEASE", "k", "o", "x"))
        assert.same(arity("lock.info"), a:call("LOCK.INFO"))
        assert.same(arity("lock.info"), a:call("LOCK.INFO", "a", "b"))
    end)

    it("waits as long as a WAIT of the largest integer says, and is granted", function()
        a:call("LOCK.ACQUIRE", "o7", "h")
        local w = a:start("LOCK.ACQUIRE", "o7", "w", "WAIT", "9223372036854775807")
        W:advance(5000)
        assert.is_falsy(w.done)
        assert.equal(1, a:call("LOCK.RELEASE", "o7", "h"))
        W:advance(50)
        integer(w.result)
    end)
end)

describe("LOCK.* owners and keys of any bytes", function()
    local W, a, b
    before_each(function() W, a, b = S.world(2) end)

    it("takes an empty owner", function()
        local t = a:call("LOCK.ACQUIRE", "e1", "")
        integer(t)
        assert.equal(t, b:call("LOCK.ACQUIRE", "e1", ""))
        assert.equal("", field(info(b, "e1")[2][1], "owner"))
        assert.equal(2, field(info(b, "e1")[2][1], "count"))
        assert.equal(1, b:call("LOCK.RELEASE", "e1", ""))
        assert.equal(1, a:call("LOCK.RELEASE", "e1", ""))
        assert.equal(0, a:call("LOCK.RELEASE", "e1", ""))
    end)

    it("takes an owner with NUL, CRLF, slashes and dots, and tells it from its prefix", function()
        local bin = "a\0b\r\nc/.."
        local t = a:call("LOCK.ACQUIRE", "e2", bin)
        assert.equal(bin, field(info(b, "e2")[2][1], "owner"))
        assert.equal(t, b:call("LOCK.ACQUIRE", "e2", bin))
        assert.equal(null, b:call("LOCK.ACQUIRE", "e2", "a"))
        assert.equal(0, b:call("LOCK.RELEASE", "e2", "a"))
        assert.equal(1, b:call("LOCK.RELEASE", "e2", bin))
        assert.equal(1, a:call("LOCK.RELEASE", "e2", bin))
        assert.same({}, info(a, "e2")[2])
    end)

    it("takes an owner up to --max-key-len bytes, and refuses a longer one", function()
        integer(a:call("LOCK.ACQUIRE", "e3", string.rep("x", 1024)))
        assert.same(S.E("ERR owner too long"), a:call("LOCK.ACQUIRE", "e4", string.rep("x", 1025)))
        assert.same({}, info(a, "e4")[2])
        -- the other commands: nobody can hold it
        assert.equal(0, a:call("LOCK.RELEASE", "e4", string.rep("x", 1025)))
        assert.equal(0, a:call("LOCK.RENEW", "e4", string.rep("x", 1025), "PX", "10"))
    end)

    it("takes an empty key and one with odd bytes, and refuses one past --max-key-len", function()
        for _, key in ipairs({ "", "a/b\0\r\n..", string.rep("k", 1024) }) do
            local t = a:call("LOCK.ACQUIRE", key, "o")
            integer(t)
            assert.equal(t, field(info(b, key)[2][1], "token"))
            assert.equal(null, b:call("LOCK.ACQUIRE", key, "p"))
        end
        assert.same(S.E("ERR key too long"), a:call("LOCK.ACQUIRE", string.rep("k", 1025), "o"))
        assert.same(S.E("ERR key too long"), a:call("LOCK.INFO", string.rep("k", 1025)))
    end)
end)

describe("LOCK.* by an owner in each state", function()
    local W, a, b, c
    before_each(function() W, a, b, c = S.world(3) end)

    it("is reentrant for a mode given by its alias, with WAIT or without", function()
        local t = a:call("LOCK.ACQUIRE", "r1", "o", "MODE", "SHARED")
        assert.equal(t, a:call("LOCK.ACQUIRE", "r1", "o", "MODE", "pr"))
        assert.equal(t, b:call("LOCK.ACQUIRE", "r1", "o", "MODE", "PR", "WAIT", "1000"))
        assert.equal(3, field(holder(c, "r1", "o"), "count"))
        assert.matches("^ERR owner holds this lock in mode PR; use LOCK%.CONVERT to change its mode$",
                       c:call("LOCK.ACQUIRE", "r1", "o", "MODE", "EXCLUSIVE", "WAIT", "1000").err)
        -- (the request that WAIT made leaves again)
        assert.equal(1, #W:children(a.LK.lock_path("r1")))
        assert.equal(1, b:call("LOCK.RELEASE", "r1", "o"))
        assert.equal(2, field(holder(c, "r1", "o"), "count"))
    end)

    it("names LOCK.CONVERT to an NL holder asking EX with WAIT, though the modes go together", function()
        local t = a:call("LOCK.ACQUIRE", "r2", "n", "MODE", "NL")
        assert.matches("LOCK%.CONVERT", b:call("LOCK.ACQUIRE", "r2", "n", "MODE", "EX", "WAIT", "1000").err)
        assert.equal(1, #W:children(a.LK.lock_path("r2")))
        assert.equal(t, field(holder(c, "r2", "n"), "token"))
    end)

    it("starts the lease again at a reentrant acquire's PX through the holder's sidecar", function()
        -- (through another sidecar the lease is never made earlier:
        -- lockstore.lua's LS.renewed_end)
        a:call("LOCK.ACQUIRE", "r3", "o", "PX", "600000")
        b:call("LOCK.ACQUIRE", "r3", "o", "PX", "100")
        W:advance(1000)
        assert.equal(2, field(holder(c, "r3", "o"), "count"))
        assert.is_true(field(holder(c, "r3", "o"), "lease_left_ms") > 590000)
        a:call("LOCK.ACQUIRE", "r3", "o", "PX", "500")
        W:advance(700)
        assert.same({}, info(c, "r3")[2])
    end)

    it("answers a waiting owner: an error to ACQUIRE and CONVERT, 0 to RELEASE and RENEW", function()
        a:call("LOCK.ACQUIRE", "r4", "h")
        local w = b:start("LOCK.ACQUIRE", "r4", "w", "WAIT", "60000")
        W:advance(50)
        assert.same(S.E("ERR owner 'w' already waits for this lock"), c:call("LOCK.ACQUIRE", "r4", "w"))
        assert.same(S.E("ERR owner 'w' already waits for this lock"), c:call("LOCK.ACQUIRE", "r4", "w", "WAIT", "100"))
        assert.equal(0, c:call("LOCK.RELEASE", "r4", "w"))
        assert.equal(0, c:call("LOCK.RENEW", "r4", "w", "PX", "100"))
        assert.same(NO_HOLD, c:call("LOCK.CONVERT", "r4", "w", "MODE", "NL"))
        assert.same(NO_HOLD, c:call("LOCK.CONVERT", "r4", "nobody", "MODE", "NL"))
        assert.same(NO_HOLD, c:call("LOCK.CONVERT", "never", "nobody", "MODE", "EX"))
        assert.equal(0, c:call("LOCK.RENEW", "never", "nobody", "PX", "10"))
        -- the waiter is still there, once, and the holder's count went up alone
        local m = info(a, "r4")
        assert.equal(1, #m[4])
        assert.equal("w", field(m[4][1], "owner"))
        assert.is_falsy(w.done)
        assert.equal(1, a:call("LOCK.RELEASE", "r4", "h"))
        W:advance(50)
        integer(w.result)
    end)

    it("answers an owner whose conversion waits: reentrant in the old mode, an error for another conversion", function()
        a:call("LOCK.ACQUIRE", "r5", "h", "MODE", "PR", "PX", "600000")
        local t = b:call("LOCK.ACQUIRE", "r5", "o", "MODE", "PR", "PX", "600000")
        local cv = b:start("LOCK.CONVERT", "r5", "o", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        assert.equal(1, c:call("LOCK.RENEW", "r5", "o", "PX", "600000"))
        assert.equal(t, c:call("LOCK.ACQUIRE", "r5", "o", "MODE", "PR"))
        assert.matches("mode PR; use LOCK%.CONVERT", c:call("LOCK.ACQUIRE", "r5", "o", "MODE", "EX").err)
        assert.same(CONV_WAITS, c:call("LOCK.CONVERT", "r5", "o", "MODE", "PW"))
        assert.same(CONV_WAITS, c:call("LOCK.CONVERT", "r5", "o", "MODE", "NL"))
        local m = info(a, "r5")
        assert.equal(2, field(holder(a, "r5", "o"), "count"))
        assert.equal("PR", field(holder(a, "r5", "o"), "mode"))
        assert.equal("conversion", field(m[4][1], "kind"))
        assert.equal(1, c:call("LOCK.RELEASE", "r5", "o")) -- a count down keeps the conversion
        assert.equal(1, a:call("LOCK.RELEASE", "r5", "h"))
        W:advance(50)
        assert.is_true(cv.done and cv.result > t)
        assert.equal(1, field(holder(a, "r5", "o"), "count"))
    end)

    it("answers a conversion to the held mode with the token, writing nothing", function()
        local t = a:call("LOCK.ACQUIRE", "r6", "o")
        local v = W:node(a.LK.lock_path("r6")).stat.version
        integer(v)
        assert.equal(t, b:call("LOCK.CONVERT", "r6", "o", "MODE", "exclusive"))
        assert.equal(v, W:node(a.LK.lock_path("r6")).stat.version)
    end)
end)

describe("LOCK.INFO's shape", function()
    local W, a, b, c
    before_each(function() W, a, b, c = S.world(3) end)

    it("answers a lock that never existed with empty holders and waiters, same shape", function()
        assert.same({ map = { "holders", {}, "waiters", {} } }, a:call("LOCK.INFO", "never"))
    end)

    it("names the fields in the README's order, integers as integers", function()
        a:call("LOCK.ACQUIRE", "i1", "h", "MODE", "PR", "PX", "600000")
        b:call("LOCK.ACQUIRE", "i1", "o", "MODE", "PR")
        local cv = b:start("LOCK.CONVERT", "i1", "o", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        local nw = c:start("LOCK.ACQUIRE", "i1", "n", "MODE", "CR", "WAIT", "60000")
        W:advance(50)
        local m = c:call("LOCK.INFO", "i1").map
        assert.equal("holders", m[1])
        assert.equal("waiters", m[3])
        local names = {}
        for i = 1, #m[2][1].map, 2 do names[#names + 1] = m[2][1].map[i] end
        assert.same({ "owner", "mode", "token", "count", "lease_left_ms", "sidecar", "client" }, names)
        local h = m[2][1].map
        assert.equal("string", type(h[2]))
        assert.equal("string", type(h[4]))
        integer(h[6], "token"); integer(h[8], "count"); integer(h[10], "lease_left_ms")
        assert.equal("string", type(h[12]))
        assert.matches("^1 127%.0%.0%.1:%d+$", h[14])
        names = {}
        for i = 1, #m[4][1].map, 2 do names[#names + 1] = m[4][1].map[i] end
        assert.same({ "owner", "mode", "waited_ms", "kind" }, names)
        -- conversions first, then new requests, in queue order
        assert.same({ "o", "EX", "conversion" }, { field(m[4][1], "owner"), field(m[4][1], "mode"), field(m[4][1], "kind") })
        assert.same({ "n", "CR", "new" }, { field(m[4][2], "owner"), field(m[4][2], "mode"), field(m[4][2], "kind") })
        integer(field(m[4][1], "waited_ms")); integer(field(m[4][2], "waited_ms"))
        -- the converting owner is a holder too, in its old mode
        assert.equal("PR", field(holder(c, "i1", "o"), "mode"))
        assert.is_falsy(cv.done or nw.done)
    end)
end)

describe("tokens and grants after a change of a hold", function()
    it("keeps the token across reentrancy and a down-conversion, and outgrows the holds an up-conversion waited for", function()
        local W, a, b, c = S.world(3)
        local t1 = a:call("LOCK.ACQUIRE", "t1", "o")
        assert.equal(t1, b:call("LOCK.ACQUIRE", "t1", "o"))
        assert.equal(t1, a:call("LOCK.CONVERT", "t1", "o", "MODE", "NL"))
        local t2 = b:call("LOCK.ACQUIRE", "t1", "p")
        assert.is_true(t2 > t1)
        local cv = c:start("LOCK.CONVERT", "t1", "o", "MODE", "EX", "WAIT", "60000")
        W:advance(50)
        assert.equal(1, b:call("LOCK.RELEASE", "t1", "p"))
        W:run_until(function() return cv.done end)
        assert.is_true(cv.result > t2)
    end)

    -- holder, waiters, converting sidecar: the waiters on the holder's
    -- sidecar behind its own request, converted through another, are
    -- reached within LW.OWN_GRACE_MS (README: "within 250 ms, then at once")
    for _, combo in ipairs({ "aaa", "aab", "aba", "abb", "abc" }) do
        it("grants the waiters a down-conversion lets through at once (" .. combo .. ")", function()
            local W, a, b, c = S.world(3)
            local sc = { a = a, b = b, c = c }
            local hold, waiter, conv = sc[combo:sub(1, 1)], sc[combo:sub(2, 2)], sc[combo:sub(3, 3)]
            local t = hold:call("LOCK.ACQUIRE", "d1", "o", "PX", "600000")
            local w1 = waiter:start("LOCK.ACQUIRE", "d1", "w1", "MODE", "PR", "WAIT", "600000")
            W:advance(50)
            local w2 = waiter:start("LOCK.ACQUIRE", "d1", "w2", "MODE", "CR", "WAIT", "600000")
            local w3 = waiter:start("LOCK.ACQUIRE", "d1", "w3", "MODE", "PW", "WAIT", "600000")
            W:advance(50)
            local t0 = W.now
            assert.equal(t, conv:call_as(9, "LOCK.CONVERT", "d1", "o", "MODE", "PR"))
            W:run_until(function() return w1.done and w2.done end)
            local bound = (hold == waiter and conv ~= hold) and 250 + 50 or 50
            assert.is_true(W.now - t0 < bound, combo .. ": " .. (W.now - t0) .. " ms")
            assert.is_true(w1.result > t and w2.result > t)
            W:advance(1000)
            assert.is_falsy(w3.done) -- PW conflicts with both PRs
        end)
    end

    it("lets a compatible waiter through as the conflicting waiter ahead of it reaches its WAIT", function()
        local W, a, b, c = S.world(3)
        a:call("LOCK.ACQUIRE", "t2", "h", "MODE", "PR")
        local w = b:start("LOCK.ACQUIRE", "t2", "w", "MODE", "EX", "WAIT", "1000")
        W:advance(50)
        -- strict FIFO: even NL waits behind a queued request
        assert.equal(null, c:call("LOCK.ACQUIRE", "t2", "n", "MODE", "NL"))
        local r = c:start("LOCK.ACQUIRE", "t2", "r", "MODE", "PR", "WAIT", "60000")
        local t0 = W.now
        W:run_until(function() return r.done end)
        assert.equal(null, w.result)
        integer(r.result)
        assert.is_true(W.now - t0 < 1000 + 100, (W.now - t0) .. " ms")
    end)
end)
