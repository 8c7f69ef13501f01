-- clock_modes_fuzz_spec: native locks in shared modes and conversions when
-- the ZooKeeper leader changes to a server whose clock is off (W:new_leader).
-- clock_fuzz_spec covers EX holds whose lease is in their own node; here the
-- leader ms that a later write CARRIES unchanged: a grant's lease end and a
-- conversion's asked time in the lock's table (rewritten by every grant,
-- conversion or release of any holder), and a renewal's lease end in a
-- holder's node (rewritten by a conversion's touch or a hold count).  Such a
-- value must keep being read by the clock of the leader that wrote it; read
-- by the epoch of the new write's mzxid it is off by the clocks' skew.
local S = require "world"
local null = S.null

local SKEW = 300000
local integer, field, holder, learn = S.integer, S.map_field, S.lock_holder, S.learn_clock

-- o1 holds r in PR (PX px) granted through a under a leader off by skew;
-- the leader changes back (-skew) and o2's PR grant through b rewrites the
-- table under it, carrying o1's line.
local function carried_world(skew, px)
    local W, a, b, c = S.warm_world(3)
    W:new_leader(skew)
    learn(a, "a")
    local t1 = a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", tostring(px))
    integer(t1)
    W:new_leader(-skew)
    learn(b, "b")
    integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "10000"))
    return W, a, b, c, t1
end

describe("a grant's lease end carried by another holder's grant under a new leader", function()
    for _, skew in ipairs({ SKEW, -SKEW }) do
        -- Before (lockstore.lua: LS.encode_table wrote the carried line's
        -- leader ms as they were, LS.lease_local reads them by the table's
        -- new mzxid): every sidecar answered o1's lease_left_ms 319 s for a
        -- 20 s hold (first leader ahead) or 0 for a live hold (behind).
        it(("LOCK.INFO answers the lease left, through every sidecar, first leader %+d s"):format(skew // 1000),
           function()
            local W, a, b, c = carried_world(skew, 20000)
            for i, sc in ipairs({ a, b, c }) do
                local left = field(holder(sc, "r", "o1"), "lease_left_ms")
                assert.is_true(left > 19000 and left <= 20000, "sidecar " .. i .. ": lease_left_ms " .. left)
            end
        end)
        -- Before: c read the lease in force 5 min late (first leader ahead)
        -- and wrote it on as the reentrant acquire's lease: o1 held r 5
        -- min past its lease (x waited 5 min).
        it(("a reentrant ACQUIRE through a third sidecar ends at the lease in force, first leader %+d s")
           :format(skew // 1000), function()
            local W, a, b, c, t1 = carried_world(skew, 10000)
            assert.equal(t1, c:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "1000"))
            assert.equal(1, b:call("LOCK.RELEASE", "r", "o2"))
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
        -- Before: c read the lease in force 5 min early (first leader
        -- behind), took its PX 2 s for no shortening and left the hold to
        -- a's timer: o1 held r to 20 s although RENEW set 2 s.
        it(("a RENEW through a third sidecar that shortens the lease ends the hold, first leader %+d s")
           :format(skew // 1000), function()
            local W, a, b, c = carried_world(skew, 20000)
            assert.equal(1, b:call("LOCK.RELEASE", "r", "o2"))
            assert.equal(1, c:call("LOCK.RENEW", "r", "o1", "PX", "2000"))
            W:advance(1500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("a renewal's lease end carried by a conversion under a new leader", function()
    -- o1 holds r PR through a; b renews it (its lease end now in o1's node,
    -- on the first leader's clock); the leader changes (-skew); c converts
    -- o1 to EX, which rewrites o1's node (the touch that wakes watchers)
    -- under the new leader, its lease end carried.
    local function converted_world(skew)
        local W, a, b, c = S.warm_world(3)
        W:new_leader(skew)
        learn(a, "a"); learn(b, "b")
        integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "10000"))
        assert.equal(1, b:call("LOCK.RENEW", "r", "o1", "PX", "10000"))
        W:new_leader(-skew)
        learn(c, "c"); learn(a, "a2")
        integer(c:call("LOCK.CONVERT", "r", "o1", "MODE", "EX"))
        return W, a, b, c
    end
    for _, skew in ipairs({ SKEW, -SKEW }) do
        -- Before (lockstore.lua: LS.write_table's touch wrote the node's
        -- lease end as read): first leader ahead, a's timer read it 5 min
        -- late and o1 held r (EX) 5 min past its lease.
        it(("the holder's timer ends the hold at its lease, first leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = converted_world(skew)
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
        -- Before: first leader behind, the holder's own RENEW 1 s after
        -- the conversion answered 0 for its live hold (a's LS.hold_end read
        -- the carried lease 5 min early): the client is told it lost r.
        it(("the holder's RENEW through its own sidecar answers 1, first leader %+d s"):format(skew // 1000),
           function()
            local W, a, b, c = converted_world(skew)
            W:advance(1000)
            assert.equal(1, a:call("LOCK.RENEW", "r", "o1", "PX", "10000"))
            W:advance(9500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("LOCK.INFO's waited_ms of a queued conversion across a leader change", function()
    -- Before (LOCK.INFO, lockinfo.lua today: took a conversion's asked
    -- time, leader ms in the table, from the current leader's clock): 5 s of waiting
    -- answered 305 s (new leader ahead) or 0 (behind).  And, the leader
    -- changed before the conversion was asked through a sidecar that had
    -- not learned it (review_reference_spec's review): its table write
    -- committed under the new leader and LS.settle_grants rewrote it, the
    -- asked time unchanged (old clock) beside a reference of the new one;
    -- every sidecar answered the same 305 s or 0 as long as it waited (now
    -- a conversion asked by the write is asked at its commit).
    for _, skew in ipairs({ SKEW, -SKEW }) do
        for _, first in ipairs({ false, true }) do
            it(("answers the time waited, new leader %+d s %s the conversion is asked")
               :format(skew // 1000, first and "before" or "after"), function()
                local W, a, b, c = S.warm_world(3)
                integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "600000"))
                integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "PR", "PX", "600000"))
                if first then W:new_leader(skew) end
                local w = b:start("LOCK.CONVERT", "r", "o2", "MODE", "EX", "WAIT", "600000")
                W:advance(5000)
                if not first then W:new_leader(skew) end
                learn(c, "c")
                for i, sc in ipairs({ a, b, c }) do
                    local v = field(sc:call("LOCK.INFO", "r").map[4][1], "waited_ms")
                    assert.is_true(v >= 4900 and v <= 5200, ("sidecar %d: waited_ms %d"):format(i, v))
                end
                -- and after a table write under the new leader carries it
                integer(c:call("LOCK.CONVERT", "r", "o1", "MODE", "CR")) -- (a down-conversion: EX still waits)
                W:advance(1000)
                local v = field(c:call("LOCK.INFO", "r").map[4][1], "waited_ms")
                assert.is_true(v >= 5900 and v <= 6200, "waited_ms after a carry " .. v)
                assert.is_falsy(w.done)
                assert.equal(1, a:call("LOCK.RELEASE", "r", "o1"))
                W:advance(100)
                assert.is_true(w.done)
                integer(w.result)
            end)
        end
    end
end)

describe("a hold count written as the leader changes, unseen by its writer (answered, or its reply lost)", function()
    -- Before (lockstore.lua: LS.settle_carried): c, which has not learned
    -- the new leader, counts o's hold down; its write carries the node's
    -- lease end (b's renewal, on the old leader's clock) as it is, and
    -- commits under the new leader, by whose clock every sidecar then
    -- reads it: that leader 5 min ahead, a's timer ended the hold at 2 s
    -- and x was granted inside the renewal's lease (two holders); 5 min
    -- behind, it ran 5 min long.  Its reply lost (a helper's review;
    -- LS.settle_landed, a count write found landed): the same.
    for _, case in ipairs({ { SKEW }, { -SKEW }, { SKEW, lost = true }, { -SKEW, lost = true } }) do
        local skew = case[1]
        it(("keeps the renewal's lease, new leader %+d s%s"):format(skew // 1000, case.lost and ", its reply lost" or ""),
           function()
            local W, a, b, c = S.warm_world(3)
            local t = a:call("LOCK.ACQUIRE", "r", "o", "PX", "10000")
            integer(t)
            assert.equal(t, a:call("LOCK.ACQUIRE", "r", "o", "PX", "2000")) -- (a's timer at 2 s)
            W:advance(1000)
            assert.equal(1, b:call("LOCK.RENEW", "r", "o", "PX", "10000"))
            W:new_leader(skew)
            if case.lost then c:fail_next{ op = "set", when = "after" } end
            assert.equal(1, c:call("LOCK.RELEASE", "r", "o"))
            W:advance(1500)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(7000) -- 9.5 s: inside the renewal's lease
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(2000) -- late by at most a round trip
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("a grant's table write whose reply was lost, committed under a leader its writer had not learned", function()
    -- Found by the seeded fuzz below (seed 1; fixed in LS.write_table, which
    -- settles a write found landed as if answered).  b has not learned the new
    -- leader's clock; o2's grant (a waiting ACQUIRE, LG.settle) writes its
    -- lease end estimated on the old leader's clock; the write commits
    -- under the new leader and its reply is lost, so LS.settle_grants never
    -- rewrites it by the commit's mtime; b reads the table again, finds o2
    -- granted and answers the token.  Every sidecar then reads the lease by
    -- the new leader's clock: 5 min ahead, LOCK.INFO answers lease_left_ms
    -- 0 and the lease is over at once (x granted EX beside o2's CR: two
    -- holders); 5 min behind, 319 s left for a 20 s hold.
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("keeps the lease asked, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            W:new_leader(skew)
            learn(a, "a")
            integer(a:call("LOCK.ACQUIRE", "r", "o1", "MODE", "PR", "PX", "8000"))
            b:fail_next({ op = "set", path = a.config.root .. "/l/r", when = "after" })
            integer(b:call("LOCK.ACQUIRE", "r", "o2", "MODE", "CR", "PX", "20000", "WAIT", "1000"))
            for i, sc in ipairs({ a, b, c }) do
                local left = field(holder(sc, "r", "o2"), "lease_left_ms")
                assert.is_true(left > 19000 and left <= 20000, "sidecar " .. i .. ": lease_left_ms " .. left)
            end
            assert.equal(1, a:call("LOCK.RELEASE", "r", "o1"))
            W:advance(9000)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(12000)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

describe("a write of a lease whose reply was lost, committed under a leader its writer had not learned", function()
    for _, skew in ipairs({ SKEW, -SKEW }) do
        -- Before (locks.lua: L.renew settled only an answered write): a's
        -- RENEW landed unanswered under the new leader; a read it again, its
        -- lease end (estimated on the old leader's clock) read by the new
        -- one's: 5 min ahead, RENEW answered 0 for the live hold (found by
        -- the seeded fuzz below, seed 30; the other way passes: its retry
        -- writes the lease again).
        it(("RENEW answers 1 and the lease starts again, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r", "o", "PX", "10000"))
            W:advance(1000)
            W:new_leader(skew)
            local lock = a.config.root .. "/l/r"
            a:fail_next({ op = "set", path = lock .. "/" .. W:children(lock)[1], when = "after" })
            assert.equal(1, a:call("LOCK.RENEW", "r", "o", "PX", "10000"))
            W:advance(9500) -- 10.5 s: inside the renewal's lease
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(1500)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
        -- Before (locks.lua: quick_release settled only an answered multi):
        -- a's release granted w, waiting through b, in a multi that landed
        -- unanswered under the new leader; w's lease end stayed estimated
        -- on the old leader's clock: 5 min ahead, every sidecar read it as
        -- over (LOCK.INFO lease_left_ms 0, x granted beside w: two
        -- holders); 5 min behind, w held 5 min long.
        it(("a release's grant keeps the lease asked, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            integer(a:call("LOCK.ACQUIRE", "r", "o", "PX", "20000"))
            local w = a:start("LOCK.ACQUIRE", "r", "w", "PX", "10000", "WAIT", "5000")
            W:advance(100)
            W:new_leader(skew)
            a:fail_next({ op = "multi", when = "after" })
            assert.equal(1, a:call("LOCK.RELEASE", "r", "o"))
            W:advance(100)
            assert.is_true(w.done)
            integer(w.result)
            for i, sc in ipairs({ a, b, c }) do
                local left = field(holder(sc, "r", "w"), "lease_left_ms")
                assert.is_true(left > 9000 and left <= 10000, "sidecar " .. i .. ": lease_left_ms " .. left)
            end
            W:advance(9000)
            assert.equal(null, c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
            W:advance(2000)
            integer(c:call("LOCK.ACQUIRE", "r", "x", "WAIT", "0"))
        end)
    end
end)

---------------------------------------------------------------------------
-- Seeded fuzz: native locks in all six modes, with conversions (up, down,
-- middle) and queued waiters (some ACQUIREs and CONVERTs wait), over three
-- sidecars, six clients and two keys, while the leader changes to clocks
-- off by 2 s, 60 s or 5 min (both ways), a sidecar's wall clock steps an
-- hour, a session expires, and replies are lost (applied).  New requests go
-- through the client's home sidecar, everything else through any.
--
-- The client model (clock_fuzz_spec's, with modes): a hold runs from its
-- token (or RENEW's 1) until the earliest of its RELEASE's sending, the PX
-- of the request that last set its lease counted from that request's
-- sending (a reentrant ACQUIRE through another sidecar never shortens),
-- a -TRYAGAIN or error to a request on it, and the end of the session
-- holding its node; a conversion changes its mode from the reply on.
-- Checked at every reply: no two holds of a key in conflicting modes
-- overlap (H.COMPAT); a new grant's or an up-conversion's token is above
-- that of every conflicting grant of another owner before it; a reentrant
-- ACQUIRE and a down-conversion keep the token; a hold answered again
-- (its token) after the model ended it is late by at most LATE_MS (README:
-- a lease end of a leader never learned is read late, never early); a
-- live hold is not answered as gone (RENEW 0, CONVERT's "holds no lock").
-- LOCK.INFO: no two conflicting holders, every live hold listed in its
-- mode and token, lease_left_ms at most the longest PX asked plus 1 s (or
-- one lease more within 2 leases of a leader change).  At the end, every
-- client released, every lease and session past: no request node, no hold
-- recorded.  Replay: CLOCK_MODES_FUZZ_SEEDS=17,42; sweep:
-- CLOCK_MODES_FUZZ_N=300; CLOCK_MODES_FUZZ_QUIET=1 without the step log.

local H = require "lockfuzz"

local MKEYS = { "k1", "k2" }
local MSKEWS = { 2000, -2000, 60000, -60000, 300000, -300000 }
local PXS = { 1000, 3000, 8000, 20000 }
local MAX_PX = 20000
local LATE_MS = MAX_PX
local MARGIN = 100 -- (a reply's round trips: a live hold checked only this far before its end)

local MF = H.class()

function MF:live(cl) return cl.hold ~= nil and cl.hold.to > self.W.now end

function MF:cut(cl, t)
    local h = cl.hold
    if h and h.to > t then h.to = math.max(h.from, t) end
end

-- A segment of cl's hold of key in mode from now: no other client's live
-- segment of key conflicts with it.
function MF:segment(cl, key, mode, token, to, late_to, sid, via)
    local now = self.W.now
    for _, s in ipairs(self.segs[key]) do
        if s.c ~= cl and s.to > now and H.conflict(s.mode, mode) then
            self:defect("two holders of %s: c%d %s (token %d, [%d,%d)) and c%d %s (token %d) from %d", key,
                s.c.id, s.mode, s.token, s.from, s.to, cl.id, mode, token, now)
        end
    end
    local s = { c = cl, key = key, mode = mode, token = token, from = now, to = math.max(now, to),
                late_to = late_to, sid = sid, via = via }
    self.segs[key][#self.segs[key] + 1] = s
    cl.hold = s
    cl.seen[key] = cl.seen[key] or {}
    cl.seen[key][token] = s
    return s
end

-- A token new to cl: above every conflicting grant of another owner before.
function MF:new_token(cl, key, mode, token)
    for _, g in ipairs(self.tok[key]) do
        if g.c ~= cl and H.conflict(g.mode, mode) and token <= g.token then
            self:defect("token %d for c%d %s of %s is not above %d (c%d %s, granted at %d)", token, cl.id, mode,
                key, g.token, g.c.id, g.mode, g.at)
        end
    end
    self.tok[key][#self.tok[key] + 1] = { c = cl, mode = mode, token = token, at = self.W.now }
end

-- A token cl had before, answered after the model ended its hold: late by
-- at most LATE_MS past the latest its lease could end.
function MF:again(cl, key, token)
    local s = cl.seen[key] and cl.seen[key][token]
    if not s then return false end
    local late = self.W.now - math.max(s.late_to, s.to)
    if late > LATE_MS then
        self:defect("c%d: its hold of %s (token %d) went on %d ms past its lease", cl.id, key, token, late)
    end
    return true
end

function MF:lost(cl, what)
    local h = cl.hold
    if h and h.to > self.W.now + MARGIN and h.sid == self.scs[h.home].sid then
        self:defect("c%d's live hold of %s (%s, token %d, to %d) %s", cl.id, h.key, h.mode, h.token, h.to, what)
    end
end

-- Sends args for cl through sidecar si; on_reply(r, p) at its reply; waits
-- for it unless wait.
function MF:send(cl, si, args, on_reply, wait)
    cl.busy = true
    local p = self:issue({ si = si, client = cl.id, who = "c" .. cl.id }, args, function(r, p)
        cl.busy = false
        on_reply(r, p)
    end)
    if not wait then self.W:run_until(function() return p.task.done end) end
    return p
end

function MF:acquire(cl, key, mode, px, si, wait)
    local W = self.W
    local args = { "LOCK.ACQUIRE", key, cl.owner, "MODE", mode, "PX", tostring(px), "WAIT", tostring(wait) }
    self:send(cl, si, args, function(r, p)
        local h, now = cl.hold, W.now
        if H.is_token(r) then
            if h and h.to > now then -- reentrant
                if r ~= h.token then self:defect("c%d: reentrant token %d, held %d", cl.id, r, h.token) end
                if mode ~= h.mode then self:defect("c%d: reentrant %s granted over %s", cl.id, mode, h.mode) end
                if si == h.home then h.to, h.late_to = p.t0 + px, now + px
                else h.to, h.late_to = math.max(h.to, p.t0 + px), math.max(h.late_to, now + px) end
                return
            end
            local again = self:again(cl, key, r)
            if not again then self:new_token(cl, key, mode, r) end
            local sid = again and h and h.sid or self.scs[si].sid
            local s = self:segment(cl, key, mode, r, p.t0 + px, now + px, sid, si)
            s.home = again and h and h.home or si
        else
            if h then self:cut(cl, p.t0) end
        end
    end, wait > 0)
end

function MF:renew(cl, si, px)
    local W, h = self.W, cl.hold
    local args = { "LOCK.RENEW", h.key, cl.owner, "PX", tostring(px) }
    self:send(cl, si, args, function(r, p)
        local now = W.now
        if r == 1 and h.to > now then
            h.to, h.late_to = p.t0 + px, now + px
        elseif r == 1 then -- (its hold went on after all: a new segment from here)
            self:again(cl, h.key, h.token)
            local s = self:segment(cl, h.key, h.mode, h.token, p.t0 + px, now + px, h.sid, h.via)
            s.home = h.home
        else
            if r == 0 then self:lost(cl, "answered RENEW 0") end
            self:cut(cl, p.t0)
        end
    end)
end

function MF:convert(cl, si, mode, wait)
    local W, h = self.W, cl.hold
    local args = { "LOCK.CONVERT", h.key, cl.owner, "MODE", mode, "WAIT", tostring(wait) }
    local old = h.mode
    if H.weaker(mode, old) and h.to > W.now then
        -- (a down-conversion: from its sending, the client holds only the
        -- weaker mode; it is granted at once, maybe before the reply)
        local to, late_to = h.to, h.late_to
        h.to = W.now
        local s = self:segment(cl, h.key, mode, h.token, to, late_to, h.sid, h.via)
        s.home, s.was, h = h.home, old, s -- (was: the mode LOCK.INFO may list until the reply)
    end
    self:send(cl, si, args, function(r, p)
        local now = W.now
        if H.is_token(r) then
            if cl.hold ~= h or h.to <= now then
                -- (the hold went on after all: told it holds in mode from here; its lease unknown)
                self:again(cl, h.key, r)
                if r ~= h.token then self:new_token(cl, h.key, mode, r) end
                local s = self:segment(cl, h.key, mode, r, now, now, h.sid, h.via)
                s.home = h.home
                return
            end
            if (mode == old or H.weaker(mode, old)) and r ~= h.token then
                self:defect("c%d: conversion %s -> %s changed the token %d -> %d", cl.id, old, mode, h.token, r)
            end
            if r ~= h.token then self:new_token(cl, h.key, mode, r) end
            local to, late_to = h.to, h.late_to
            h.to = now
            local s = self:segment(cl, h.key, mode, r, to, late_to, h.sid, h.via)
            s.home = h.home
        elseif r ~= null then
            if r.err and r.err:find("holds no lock", 1, true) then self:lost(cl, "answered " .. r.err) end
            if r.err and r.err:find("ended while its conversion", 1, true) then
                self:lost(cl, "answered " .. r.err)
            end
            self:cut(cl, p.t0)
        end
    end, wait > 0)
end

function MF:release(cl, si)
    local h = cl.hold
    self:cut(cl, self.W.now)
    self:drain(20, function()
        return self:send(cl, si, { "LOCK.RELEASE", h.key, cl.owner }, function() end)
    end)
    cl.hold = nil
end

local hfield = S.map_field

function MF:info(cl, key, si)
    local W = self.W
    self:send(cl, si, { "LOCK.INFO", key }, function(r, p)
        if type(r) ~= "table" or not r.map then return end
        local now, hs = W.now, r.map[2]
        local bound = MAX_PX + 1000
        if self.changed and now - self.changed < 2 * MAX_PX then bound = 2 * MAX_PX + 1000 end
        local by = {}
        for i, e in ipairs(hs) do
            local o, m, t, left = hfield(e, "owner"), hfield(e, "mode"), hfield(e, "token"), hfield(e, "lease_left_ms")
            by[o] = { mode = m, token = t }
            if left < 0 or left > bound then
                self:defect("LOCK.INFO %s: %s's lease_left_ms %d (bound %d)", key, o, left, bound)
            end
            for j = 1, i - 1 do
                local o2, m2 = hfield(hs[j], "owner"), hfield(hs[j], "mode")
                if H.conflict(m, m2) then self:defect("LOCK.INFO %s: %s %s beside %s %s", key, o2, m2, o, m) end
            end
        end
        for _, c in ipairs(self.clients) do
            local h = c.hold
            -- (a hold told before INFO was sent: one told meanwhile may be newer than its read)
            if h and h.key == key and h.from < p.t0 and h.to > now + MARGIN and h.sid == self.scs[h.home].sid then
                local b = by[c.owner]
                if not b or (b.mode ~= h.mode and b.mode ~= h.was) or b.token ~= h.token then
                    self:defect("LOCK.INFO %s: c%d's live hold (%s, token %d, to %d) listed as %s", key, c.id,
                        h.mode, h.token, h.to, b and (b.mode .. " " .. b.token) or "nothing")
                end
            end
        end
    end)
end

function MF:step()
    local W, R, scs = self.W, self.R, self.scs
    local roll = R.int(1, 100)
    if roll <= 7 then
        local d = R.pick(MSKEWS)
        W:new_leader(d)
        self.changed = W.now
        self:note("new leader, clock %+d", d)
    elseif roll <= 10 then
        local i = R.int(1, 3)
        local d = R.pick({ 3600000, -3600000 })
        scs[i].wall_base = scs[i].wall_base + d
        self:note("wall of sidecar %d %+d", i, d)
    elseif roll <= 12 then
        local i = R.int(1, 3)
        local old = scs[i].sid
        -- (cut first: the expiry runs the world, waiters' replies too; and
        -- after, a grant answered in that run under the old session)
        for pass = 1, 2 do
            for _, cl in ipairs(self.clients) do
                if cl.hold and cl.hold.sid == old then self:cut(cl, W.now) end
            end
            if pass == 1 then self:end_session(i, "expire") end
        end
    elseif roll <= 28 then
        local ms = R.pick({ 100, 500, 1000, 3000, 6000, 12000 })
        self:note("advance %d", ms)
        self:advance(ms)
    elseif roll <= 32 then
        local i = R.int(1, 3)
        local op = R.pick({ "set", "multi", "create", "delete" })
        self:note("sidecar %d: the next %s's reply lost", i, op)
        scs[i]:fail_next({ op = op, when = "after" })
    else
        local cl = R.pick(self.clients)
        if cl.busy then return end
        local held = self:live(cl)
        local key = cl.hold and cl.hold.key or R.pick(MKEYS)
        local any = R.chance(0.4) and R.int(1, 3) or cl.sc
        local kind = R.int(1, 12)
        local wait = R.chance(0.25) and R.pick({ 1000, 5000, 15000 }) or 0
        if not cl.hold then
            if kind <= 10 then self:acquire(cl, key, R.pick(H.MODES), R.pick(PXS), cl.sc, wait)
            else self:info(cl, key, any) end
        elseif kind <= 3 then
            -- (reentrant through any sidecar, a new request through the home one)
            self:acquire(cl, key, held and cl.hold.mode or R.pick(H.MODES), R.pick(PXS), held and any or cl.sc, 0)
        elseif kind <= 5 then
            self:renew(cl, any, R.pick(PXS))
        elseif kind <= 8 then
            self:convert(cl, any, R.pick(H.MODES), wait)
        elseif kind <= 10 then
            self:release(cl, any)
        else
            self:info(cl, key, any)
        end
    end
end

function MF:finish()
    local W = self.W
    self:reconnect_all()
    W:run_until(function()
        for _, cl in ipairs(self.clients) do if cl.busy then return false end end
        return true
    end)
    for _, cl in ipairs(self.clients) do
        if cl.hold then self:release(cl, cl.sc) end
    end
    self:clear_faults()
    self:advance(60000)
    self:advance(60000)
end

function MF:check()
    for _, k in ipairs(MKEYS) do self:check_no_requests(k) end
    self:check_no_holds()
end

local function modes_fuzz(seed, steps)
    local W, a, b, c = S.world(3)
    S.warm(W, a, b, c)
    local F = H.new(MF, seed, W, { a, b, c }, { R = S.prng(seed), clients = {}, segs = {}, tok = {} })
    for i = 1, 6 do F.clients[i] = { id = i, sc = (i - 1) % 3 + 1, owner = "o" .. i, seen = {} } end
    for _, k in ipairs(MKEYS) do F.segs[k], F.tok[k] = {}, {} end
    return F:play(steps):report()
end

-- Seeds 1-300 run.  Found and fixed, each kept: 1 (a grant's table write
-- whose reply was lost: LS.write_table), 30 (a RENEW's: L.renew), 215 and
-- 295 (a release's multi: quick_release), 24 39 46 112 168 (a conversion's
-- table write, a count's: LS.write_table, LS.settle_landed); 106 179 269
-- were errors of this model (a down-conversion is in effect from its
-- sending); 103 and 175 (a settle's own rewrite committed under yet
-- another leader, two changes within a round trip: written again); 65
-- and 262 (LOCK.INFO read a table or node between a write committed under
-- a leader its writer had not learned and the writer's rewrite of it: 60
-- s late, and early the other way; every time now counts from its write's
-- mtime, locktable.lua); 78 (a lease carried from a node of a leader newer
-- than the writer knew, mapped by the writer's older clock: Z.local_time);
-- 641 was an error of this model (a grant answered in the run of the
-- session's expiry, under that session, went on as a hold).
local MSEEDS = H.seeds("CLOCK_MODES_FUZZ", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21,
                                              22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 39, 46, 65, 78, 103,
                                              106, 112, 168, 175, 179, 215, 262, 269, 295, 641 })

describe("native locks in every mode under clock faults, seeded fuzz", function()
    for _, seed in ipairs(MSEEDS) do
        it("seed " .. seed, H.case("CLOCK_MODES_FUZZ", function() return modes_fuzz(seed, 150) end))
    end
end)
