-- locks.lua — native locks (LOCK.*) on ZooKeeper: the queue of a lock as
-- znodes, the grants, the waits, the leases.  lockq.lua decides who may
-- hold what; this file reads and writes the nodes it decides on.
--
-- The nodes, a namespace of their own beside <root>/k (the lock node and
-- its requests): lockstore.lua's header.
--
-- Granted is state (lockq.lua): a grant, a conversion asked, given up or
-- granted, a down-conversion are each one write of the grant table
-- conditional on its version.  A waiter grants itself; a holder that
-- releases grants, in the same multi as its delete, the new requests its
-- release lets through as its last read of the lock saw them (a release
-- that found the table changed since is a plain delete, and the waiters
-- grant themselves).  So a grant decided on a stale read fails
-- (BADVERSION) and is decided again, and a write whose reply was lost is
-- settled by reading the table.  A handoff costs the holder's multi and
-- the waiter's read of the table, as the ZooKeeper recipe's delete and
-- getChildren (no read when the holder was on the waiter's sidecar, which
-- knows the table it wrote: lockstore keeps it; that waiter is answered
-- before the release).  The table carries the queue its writer decided
-- on (its requests' names), which the granted waiter takes as its view:
-- the listing its own release grants from, with no listing of its own
-- (the last of that queue takes its sidecar's newest listing, when it
-- lists a request after it, or lists the lock).  A request leaves by
-- deleting its node (release, lease end, WAIT over, client gone, session
-- lost); a table line without a node is a leftover, dropped by the next
-- write.
--
-- Herd-free waits: a waiter watches one node (lockq's watch target) with a
-- data watch, so a release wakes the waiters it may unblock.  A grant of a
-- new request writes only the table: the waiter behind an exclusive
-- waiter, watching that waiter's node, is not woken by its grant, only by
-- its release.  A change of a granted hold that may unblock others (a
-- down-conversion, a conversion asked, granted or given up) also touches
-- its own node in the same multi, which wakes those watching it
-- (lockwait.lua).  A waiter behind a request of its own sidecar sets no
-- watch at first: that sidecar's own delete or write wakes it (LW.delete,
-- LW.write_table, the release's multi); a wait that outlasts
-- LW.OWN_GRACE_MS looks again and watches from then on.
--
-- Tokens: the largest zxid the granting sidecar saw of the lock node
-- (lockq's Q.token): its mzxid and pzxid, or the zxid of its own grant.
-- Every grant, conversion and down-conversion writes the lock node and
-- every arrival and departure moves its pzxid, so the decision saw the
-- write that ended any conflicting hold, and tokens grow per key in grant
-- order, across sidecars, restarts and leader changes (zxids).
--
-- Leases: the sidecar whose session created a hold ends it at its lease end
-- (a timer; it reads the node first: a renewal through another sidecar may
-- have moved it), and a sidecar that shortened another's hold by a renewal
-- ends it at the lease it wrote (a delete at that version); no sidecar
-- treats a hold as ended by its clock without that write.

local Q = require "lockq"
local LS = require "lockstore"
local LW = require "lockwait"
local LG = require "lockgrant"
local Z = require "zkio"
local G = require "guard"
local S = require "signal"
local E = require "errors"
local H = require "hooks"
local U = require "util"

local L = {}

L.DEFAULT_PX = 30000
L.lock_path = LS.lock_path

-- The holds this sidecar's session created: path -> {path, key, lock, owner,
-- mode, token, px, sid, deadline (host.now()), timer, data and version (as we
-- last wrote it), view (the lock as we last read it, for the release)}.
L.holds = {}
local by_owner = {} -- lock .. "\0" .. owner -> path of a hold in L.holds

L.stats = { granted = 0, expired = 0, handed = 0 }

local function client_desc()
    local c = H.client()
    if not c then return "" end
    return tostring(c.id) .. " " .. (c.addr or "")
end

---------------------------------------------------------------------------
-- Holds of this sidecar: leases

local function notify(name, hold, reason)
    if not H.has(name) then return end -- (no info made for nobody)
    H.notify(name, hold.key, { path = hold.path, lock = true, mode = hold.mode, token = hold.token, czxid = hold.token,
                               owner = hold.owner, ttl = hold.px, lifetime = "ephemeral", reason = reason })
end

local function forget(path)
    local h = L.holds[path]
    if h then
        h.timer:stop()
        L.holds[path] = nil
        LW.forget(path)
        if by_owner[h.lock .. "\0" .. h.owner] == path then by_owner[h.lock .. "\0" .. h.owner] = nil end
    end
    return h
end

-- Whether hold h's node, gone after our lease timer's delete whose reply
-- was lost, went by that delete: no other sidecar removed it since h was
-- recorded (LS.still_ours, but for that delete of the timer's own).
local function guard_stayed(h)
    Z.sync(h.lock)
    return G.unmoved_but(h.sid, h.gv or 0, h.path)
end

-- Hold h's mode and token as the lock's table has them now.
local function relearn(h)
    local e = LS.read(h.lock).by_seq[LS.seq_of(h.path)]
    if e and e.path == h.path and e.granted then h.mode, h.token = e.granted, e.token end
end

-- The lease timer of hold h fired: end it when the lease written in its
-- node has passed, else wait for that.
local function lease_due(path)
    local h = L.holds[path]
    if not h or h.sid ~= zk.session() then return end
    local rc, data, stat = zk.get(path)
    local drc = rc == zk.NONODE and rc or nil
    if rc ~= zk.OK and not drc then h.timer:start(200) return end
    if not drc then
        h.expiring, h.lease_sent = nil, nil -- (there still: no delete of ours landed)
        -- written since by another sidecar (a conversion through it): the
        -- policy hears of the mode and token the lock's table holds
        if stat.version ~= h.version then pcall(relearn, h) end
        -- (its clock learned may take a write: ZooKeeper away, look again)
        local ok, ends = pcall(LS.hold_end, h.deadline, h.version, LS.decode_req(data, stat), stat.version, stat.mzxid,
                                stat.mtime)
        if not ok then h.timer:start(200) return end
        local left = ends - host.now()
        if left > 0 then
            h.deadline = host.now() + left
            h.timer:start(left)
            return
        end
        -- at the version read: a renewal landing in between answered 1
        h.lease_sent = true -- (from here on, a node found gone may be our expiry's)
        drc = LW.delete(path, stat.version)
    end
    if drc == zk.OK or drc == zk.NONODE then
        forget(path)
        -- gone after our delete whose reply was lost: ended by its lease
        -- unless another sidecar's release took it
        if drc == zk.OK or (h.expiring and guard_stayed(h)) then
            L.stats.expired = L.stats.expired + 1
            notify("on_expire", h)
        else
            h.untold = true -- (gone by a release whose answer is still out: it tells)
            if not h.expiring then h.lease_sent = nil end -- (none of the timer's deletes landed)
        end
    elseif drc == zk.BADVERSION then
        h.timer:start(0) -- read it again
    else
        h.expiring = h.expiring or Z.unknown(drc)
        h.timer:start(200)
    end
end

-- Leases of other sidecars' holds shortened by a renewal through this
-- one: path -> {timer, version, holder_end}.  The holder's sidecar ends a
-- hold at the lease it knew (holder_end, on our clock: a renewal elsewhere
-- does not move its timer earlier), so the sidecar that wrote a shorter
-- lease ends the hold at the lease the node holds while that is before
-- holder_end, whoever wrote the node since (a renewal through a third
-- sidecar, a count changed, a reentrant acquire): a delete at the version
-- it read, once that lease has passed, which bumps the holder session's
-- guard (LW.delete).  A write, seen by every decision as the holder's own
-- delete would be: the token rule needs no clock of ours.
local shortened = {}

local function shortened_due(path, hold)
    local s = shortened[path]
    if not s then return end
    local rc, data, stat = zk.get(path)
    if rc ~= zk.OK and rc ~= zk.NONODE then s.timer:start(200) return end
    local d = rc == zk.OK and LS.decode_req(data, stat)
    if d and d.lease_end > 0 and not pcall(Z.ensure_clock, stat.mzxid) then s.timer:start(200) return end
    -- (by the clock of the leader that wrote it, as the holder's reads it)
    local ends = d and d.lease_end > 0 and Z.local_time(d.lease_end, stat.mzxid, stat.mtime)
    if not ends or ends >= s.holder_end then
        shortened[path] = nil -- (gone, or the holder's own timer ends it)
        return
    end
    s.version = stat.version
    local left = ends - host.now()
    if left > 0 then s.timer:start(math.ceil(left)) return end
    local drc = LW.delete(path, s.version, hold.sid)
    if drc == zk.OK or drc == zk.NONODE then
        shortened[path] = nil
        if drc == zk.OK then
            L.stats.expired = L.stats.expired + 1
            notify("on_expire", hold)
        end
    else
        s.timer:start(drc == zk.BADVERSION and 0 or 200) -- (written since: read it again)
    end
end

-- A renewal through this sidecar wrote a lease px from now on hold `hold`
-- of another sidecar's session, before `holder_end` (host.now()'s clock),
-- the lease in force when this sidecar first shortened it.
local function end_shortened(hold, px, holder_end)
    local s = shortened[hold.path]
    if s then s.timer:stop() end
    s = { holder_end = s and s.holder_end or holder_end }
    s.timer = host.timer(function() shortened_due(hold.path, hold) end)
    shortened[hold.path] = s
    s.timer:start(px)
end

-- Records (or updates) a hold of ours: its lease starts now.
local function remember(path, key, lock, owner, mode, token, px, fields)
    local h = L.holds[path]
    if not h then
        h = { path = path, key = key, lock = lock, owner = owner, sid = zk.session() }
        h.timer = host.timer(function() lease_due(path) end)
        L.holds[path] = h
        by_owner[lock .. "\0" .. owner] = path
    end
    h.mode, h.token, h.px, h.gv = mode, token, px, G.now() -- (gv: our guard's version, or nil)
    for k, v in pairs(fields or {}) do h[k] = v end
    h.deadline = host.now() + px
    h.timer:start(px)
    return h
end

-- A request of ours whose command left the queue (WAIT over, client gone,
-- -TRYAGAIN) as it was granted, and which its owner took up (a reentrant
-- LOCK.ACQUIRE that found it: here, or elsewhere and our leave counted it
-- down): that owner's hold now, recorded (and told) so that its lease ends
-- here as every hold of ours does.  In the background, until the lock
-- answers.  (Taken up elsewhere and ended before our leave ran, it is
-- told nothing.)
local function adopt(path)
    local lock = path:match("^(.*)/")
    local function try()
        local snap = LS.read(lock, true)
        local e = snap and snap.by_seq[LS.seq_of(path)]
        local d = e and e.path == path and e.granted and not L.holds[path] and LS.entry_data(e)
        if not d or e.owner_sid ~= zk.session() then return end
        local deadline = LS.lease_local(snap, e, d)
        -- (looked again after the waits: recorded meanwhile by the command
        -- that made it, or another adoption; or our session ended)
        if L.holds[path] or e.owner_sid ~= zk.session() then return end
        local h = remember(path, LS.key_of(lock), lock, d.owner, e.granted, e.token, e.px,
                           { data = d, version = e.version })
        h.deadline = deadline
        h.timer:start(math.max(0, math.ceil(h.deadline - host.now())))
        notify("on_acquire", h)
    end
    host.spawn(function()
        for _ = 1, 600 do -- two minutes of ZooKeeper out of reach at most
            if pcall(try) then return end
            host.sleep(200)
        end
    end)
end
-- Our leave of such a request: it stays, counted down (adopted), or it is
-- gone, and a hold adopted here ends (its owner released its own count).
function LW.left(path, stays)
    if stays then return adopt(path) end
    local h = forget(path)
    if h then notify("on_release", h) end
end

-- Hold h's view from the listing begun at its grant (waited for), or nil
-- when it failed or the view changed since.  Its table stays the one of
-- the grant (the release's multi is conditional on that version); the
-- listing may be the older read (begun beside the table's).
local function adopt_listing(h)
    local l, view = h.listing, h.view
    h.listing = nil
    LW.await(l)
    if not l.names or h.view ~= view then return nil end
    h.view = LS.build(view.path, view.t, l.names, l.pzxid, LS.seq_of(h.path))
    return h.view
end

-- The release of hold h as one multi: the delete of its node (at the
-- version we wrote) and, when its view of the lock is still the table's
-- version, the grants of the new requests the release lets through, with
-- the largest zxid h saw as their token.  A stale view (LS.build), or one
-- with a conversion pending, grants nobody: a plain delete.  A view listed
-- before its table grants from that listing: the requests it lacks came
-- later and wait behind those it lists; one that left since is granted in
-- vain, and the waiter behind it grants itself.  A view that lists no
-- waiter after h takes this sidecar's newest listing when it lists one,
-- else the listing begun at the grant.  true when done (then whether it
-- woke a waiter here); false (or no hold h) to take the slow way (read,
-- then delete), which drops the view if the hold goes on (its marked
-- grants not made).
local function quick_release(h)
    local view = h and h.view
    if not view or h.sid ~= zk.session() or h.data.count ~= 1 then return false end
    if not LG.next_waiter(h.path, view) then
        local newer = LG.newer_view(h.lock, LS.known_table(h.lock, view.t.czxid, view.version), h.path)
        if newer then
            h.view, h.listing, view = newer, nil, newer
        elseif h.listing then
            view = adopt_listing(h) or view
        end
    end
    local queue = {}
    for _, e in ipairs(view.queue) do
        if e.path ~= h.path then queue[#queue + 1] = e end
    end
    local granted, rc, results, epoch = {}, nil, nil, nil
    if not view.stale and Z.state.offset and not next(Q.conversions(queue)) then
        local now = LS.leader_now()
        epoch = Z.state.epoch
        for _, g in ipairs(Q.grantable(queue)) do
            g.entry.granted, g.entry.token = g.mode, view.token
            g.entry.lease_end = LS.end_after(now, g.entry.px)
            granted[#granted + 1] = g.entry
        end
    end
    if #granted > 0 then
        local data, lines, names, ref = LS.encode_table(queue, view.t)
        LW.begin_write(h.lock)
        local ok
        ok, rc, results = pcall(zk.multi, { { "delete", h.path, h.version }, { "set", h.lock, data, view.version } })
        if ok then rc = Z.first_error(rc, results) end
        if ok and rc == zk.OK then
            LS.wrote_table(h.lock, results[2].stat, lines, names, ref)
            pcall(LS.settle_grants, h.lock, queue, granted, results[2].stat, epoch, view.t)
        end
        LW.end_write(h.lock)
        if not ok then error(rc, 0) end
    else
        rc = zk.delete(h.path, h.version)
    end
    -- Gone after a lost reply (looked at once our server has it): ours
    -- while LS.still_ours
    local gone = rc == zk.OK
    if Z.unknown(rc) then
        Z.sync(h.lock)
        gone = Z.exists(h.path) == zk.NONODE and LS.still_ours(h)
        -- (so our multi landed: its grants settled as if answered, when
        -- nobody wrote the table since)
        local grc, _, tstat
        if gone and #granted > 0 then grc, _, tstat = zk.get(h.lock) end
        if grc == zk.OK and tstat.version == Z.next_version(view.version) then
            tstat.read = true -- (Z.learn)
            pcall(LS.settle_grants, h.lock, queue, granted, tstat, epoch, view.t)
        end
    end
    local woke = gone and LW.wrote(h.path, true)
    if rc == zk.OK then L.stats.handed = L.stats.handed + #granted end
    return gone, woke
end

---------------------------------------------------------------------------
-- The commands

-- LW.take_back of our hold count write `sent` (-TRYAGAIN: not counted);
-- our hold's record, whose data is `before` again, learns the version.
local function take_back(lock, owner, sent, before)
    local h = L.holds[sent.path]
    LW.take_back(lock, owner, sent, before, function(v) if h then h.version = v end end)
end

-- The answer of a wait that ended without a grant: null, as WAIT's end,
-- or CLIENT UNBLOCK ... ERROR's error.
function L.unblocked()
    if host.unblocked() == "error" then return { err = E.UNBLOCKED } end
    return nil
end

-- The reply of LOCK.ACQUIRE: a token, nil (not granted within wait_ms),
-- or an error reply table.  before_acquire: the policy's hook, or nil.
-- The lock is read before the create only for a try-once, the hook, or
-- `full`: the owner's request found there (reentrancy) after the create.
function L.acquire(key, owner, mode, px, wait_ms, before_acquire, full)
    local lock = LS.lock_path(key)
    LW.await_settled(lock, owner)
    local snap
    if full or wait_ms == 0 or before_acquire then snap = LS.read(lock) end
    local mine, d = LS.find_owner(snap, owner)
    if mine then
        if LS.from_lost_session(mine, d) then return { err = E.LOST_SESSION } end
        if not mine.granted then return { err = "ERR owner '" .. owner .. "' already waits for this lock" } end
        if mine.granted ~= mode then
            return { err = "ERR owner holds this lock in mode " .. mine.granted ..
                           "; use LOCK.CONVERT to change its mode" }
        end
        local before = LS.encode_req(d)
        -- the lease in force, on our clock: a renewal through another
        -- sidecar keeps it, at least, when settled by a new leader's clock
        -- (mapped by the clock of the leader that wrote it: the node's, or
        -- the table's for the grant's; late, never early, when unknown)
        local was = not L.holds[mine.path] and LS.lease_local(snap, mine, d) or nil
        local sent = LS.count_write(d, d.count + 1, mine.path)
        d.lease_end, d.rl = LS.renewed_end(was, px), nil -- (fresh, on our clock: not carried)
        local epoch = Z.state.epoch
        local rc, stat = zk.set(mine.path, LS.encode_req(d), mine.version)
        if Z.unknown(rc) then
            local read, again, d2 = pcall(function() return LS.find_owner(LS.read(lock, true), owner) end)
            if not read then take_back(lock, owner, sent, before) error(again, 0) end
            if not LS.landed(sent, again, d2) then
                return L.acquire(key, owner, mode, px, wait_ms, before_acquire, true)
            end
            -- (the commit's clock, when nobody wrote the node since)
            local last = again.version == Z.next_version(mine.version)
            rc, stat = zk.OK, { version = again.version, mtime = last and again.mtime, mzxid = again.mzxid, read = true }
        end
        if rc == zk.BADVERSION or rc == zk.NONODE then
            return L.acquire(key, owner, mode, px, wait_ms, before_acquire)
        end
        if rc ~= zk.OK then Z.fail(rc, "set " .. mine.path) end
        -- written by the clock of the leader that committed it (LS.settle_lease)
        stat.version = LS.settle_lease(mine.path, d, px, stat, epoch, was)
        if L.holds[mine.path] then
            remember(mine.path, key, lock, owner, mode, mine.token, px, { data = d, version = stat.version })
        elseif mine.owner_sid == zk.session() then
            adopt(mine.path) -- (a request of ours left as it was granted)
        end
        return mine.token
    end
    -- Try-once without a queue entry when the read says it would wait.
    local exists = snap ~= nil and #snap.queue > 0 -- (before the probe joins)
    if wait_ms == 0 and snap then
        local probe = { seq = math.huge, mode = mode }
        snap.queue[#snap.queue + 1] = probe
        if not LG.grants_me(snap.queue, probe) then return nil end
    end
    local held_back
    if before_acquire then
        local no, why = before_acquire(key, { exists = exists, path = lock, mode = mode, lock = true })
        if no then
            if wait_ms == 0 then return nil end
            return { err = "TRYAGAIN " .. (why or "the policy refuses the lock now"):gsub("[\r\n]+", " ") }
        end
        -- asked again before the request, having waited, grants itself:
        -- nobody's write granted it (the hold ahead ended with its session,
        -- its lease, or a release that did not know of it)
        held_back = function(s, me)
            return (before_acquire(key, { exists = Q.others_granted(s.queue, me), path = lock,
                                          mode = mode, lock = true, queued = true }))
        end
    end
    local until_ms = host.now() + wait_ms
    -- the listing the wait starts from, sent after the create (a session's
    -- requests are answered in order): one round trip for both
    local first_listing = LG.start_listing(lock)
    -- a command that fails (ZooKeeper out past its time) leaves the queue,
    -- in the background if need be: nobody would ever release its request
    local prefix = LS.prefix(mode, owner, px, LS.hex(Z.nonce()))
    local data = { owner = owner, count = 1, lease_end = 0, asked = host.wall(),
                   sidecar = LS.sidecar_id(), client = client_desc() }
    local made, path, sid = pcall(LW.create, lock, prefix, data)
    if not made then LW.abandon(lock, prefix) error(path, 0) end
    local settled, token, view, listing = pcall(LG.settle, lock, path, sid, until_ms, nil, px, not snap and function(s, me)
        return LS.owner_there(s, me, owner)
    end, mode, first_listing, held_back)
    if not settled then
        LW.leave(path)
        -- (CLIENT UNBLOCK answered 1 before ZooKeeper failed the wait's
        -- read: the unblocked reply; the request leaves in the background)
        if host.unblocked() then return L.unblocked() end
        error(token, 0)
    end
    -- granted as our session ended (its node goes with it), or as the
    -- client went (nobody takes the reply): a hold of nobody's, let go
    if token and zk.session() ~= sid then token, view = nil, "lost" end
    if token and not host.client() then token = nil end
    -- granted as a CLIENT UNBLOCK came, which answered 1: let go
    if token and host.unblocked() then token = nil end
    if not token then
        LW.leave(path)
        if view == "owner" then return L.acquire(key, owner, mode, px, wait_ms, before_acquire, true) end
        if host.unblocked() then return L.unblocked() end -- (answered 1: as it said)
        if view == "lost" then return { err = E.LOST_SESSION } end
        if view == "closing" then return { err = E.CLOSING } end
        return nil
    end
    local adopted = L.holds[path] -- (taken up meanwhile by the owner's other connection: told)
    remember(path, key, lock, owner, mode, token, px, { data = data, version = 0, view = view, listing = listing })
    L.stats.granted = L.stats.granted + 1
    if not adopted then notify("on_acquire", L.holds[path]) end
    return token
end

-- LOCK.RELEASE past its quick path: reads the owner's request and counts
-- it down or deletes it; done(path, left, d, version)'s answer, 0, or an
-- error.  unsure.sent: our last write whose reply was lost ({path, version
-- after it, count, sid: the session that owned the node}), unsure.before:
-- the data it replaced.
local function release_read(lock, owner, done, unsure)
    for _ = 1, Z.READ_TRIES do
        local sent = unsure.sent
        local snap = LS.read(lock, sent ~= nil)
        local mine, d = LS.find_owner(snap, owner)
        if sent and LS.landed(sent, mine, d) then
            -- (landed under a leader not learned: its carried lease settled)
            local version = sent.count > 0 and LS.settle_landed(mine.path, unsure.d, mine, unsure.at)
            return done(sent.path, sent.count, d, version or (mine and mine.version), sent)
        end
        if not mine or not mine.granted then return 0 end
        -- a hold counted lost answers 0, as RENEW does; its node goes
        if LS.from_lost_session(mine, d) then pcall(LW.delete_node, mine.path) return 0 end
        local rc, stat, write
        local left = d.count > 1 and d.count - 1 or 0
        if left > 0 then
            unsure.before, unsure.d, unsure.at = LS.encode_req(d), d, mine.version
            write = LS.count_write(d, left, mine.path)
            rc, stat = zk.set(mine.path, LS.encode_req(d), mine.version)
            if rc == zk.OK then stat.version = LS.settle_carried(mine.path, d, stat) end
        else
            local own = L.holds[mine.path]
            write = { path = mine.path, count = 0, sid = mine.owner_sid,
                      deadline = LS.lease_local(snap, mine, d),
                      own = own and own.sid == mine.owner_sid and own or nil,
                      mode = mine.granted, token = mine.token, px = mine.px,
                      here = d.sidecar == LS.sidecar_id() }
            rc = LW.delete(mine.path, mine.version, mine.owner_sid)
        end
        if rc == zk.OK then return done(mine.path, left, d, stat and stat.version, write) end
        unsure.sent = Z.unknown(rc) and write or nil
        if rc ~= zk.BADVERSION and rc ~= zk.NONODE and not Z.unknown(rc) then
            Z.fail(rc, "release " .. mine.path)
        end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- LOCK.RELEASE: 1 or 0.
function L.release(key, owner)
    local lock = LS.lock_path(key)
    LW.await_settled(lock, owner)
    local hp = by_owner[lock .. "\0" .. owner]
    local h = hp and L.holds[hp]
    local gone, woke = quick_release(h)
    if gone then
        -- (told once: not when its session's loss, answered meanwhile,
        -- told on_lost; when our lease timer found it gone first, here)
        if forget(hp) or h.untold then notify("on_release", h) end
        if woke then host.pass() end -- the next holder, when here, is answered first
        return 1
    end
    -- Our write to the owner's request at `path` is done, `left` holds on
    -- (the last one: `e`, the hold as the release read it, tells the policy
    -- of a hold recorded on another sidecar).
    local function done(path, left, d, version, e)
        local mh = L.holds[path]
        if left > 0 then
            if mh then mh.data, mh.version, mh.view = d, version, nil end
        else
            -- (a hold recorded here, told by its record, with the mode
            -- and token read now: a conversion through another sidecar;
            -- none when its session's loss forgot it, told on_lost)
            mh = forget(path) or (e and e.own and e.own.untold and e.own)
            if mh and e then mh.mode, mh.token = e.mode, e.token end
            if not mh and e and not e.here then
                mh = { key = key, path = path, mode = e.mode, token = e.token, owner = owner, px = e.px }
            end
            if mh then notify("on_release", mh) end
        end
        return 1
    end
    local unsure = {}
    local ok, r = pcall(release_read, lock, owner, done, unsure)
    if ok then return r end
    local sent = unsure.sent
    if sent and sent.count > 0 then take_back(lock, owner, sent, unsure.before) end
    error(r, 0)
end

-- LOCK.RENEW: 1 or 0 (0 for a hold of a session of ours that is over).
function L.renew(key, owner, px)
    local lock = LS.lock_path(key)
    LW.await_settled(lock, owner)
    host.lease_wait()
    for _ = 1, Z.READ_TRIES do
        local snap = LS.read(lock)
        local mine, d = LS.find_owner(snap, owner)
        if not mine or not mine.granted or LS.from_lost_session(mine, d) then return 0 end
        local h = L.holds[mine.path]
        if h and host.now() > LS.hold_end(h.deadline, h.version, d, mine.version, mine.mzxid, mine.mtime) then return 0 end
        -- the lease starts again, px from now, shorter too: through the
        -- holder's sidecar its timer moves; through another, that one ends
        -- a shorter lease itself (end_shortened)
        -- (the lease in force on our clock: read by the clock of the
        -- leader that wrote it, which another leader's ms do not compare to)
        local was = LS.lease_local(snap, mine, d)
        d.lease_end, d.rl = LS.end_after(LS.leader_now(), px), nil -- (fresh: not carried)
        local epoch = Z.state.epoch
        local rc, stat = zk.set(mine.path, LS.encode_req(d), mine.version)
        if Z.unknown(rc) then
            -- landed, nothing written since: settled as if answered (read
            -- again unsettled, a lease that committed under a leader we had
            -- not learned is off by its clock: RENEW 0 for a live hold)
            local ok, again, d2 = pcall(function() return LS.find_owner(LS.read(lock, true), owner) end)
            if ok and again and again.path == mine.path and again.version == Z.next_version(mine.version) and
               d2.lv == d.lease_end then
                rc, stat = zk.OK, { version = again.version, mtime = again.mtime, mzxid = again.mzxid, read = true }
            end
        end
        if rc == zk.OK then
            local version = LS.settle_lease(mine.path, d, px, stat, epoch)
            if h then
                -- (the mode and token as read now: a conversion through
                -- another sidecar, which this version no longer tells)
                h.mode, h.token = mine.granted, mine.token
                h.px, h.deadline, h.data, h.version = px, host.now() + px, d, version
                h.timer:start(px)
            elseif host.now() + px < was or shortened[mine.path] then
                end_shortened({ key = key, path = mine.path, sid = mine.owner_sid, owner = owner,
                                mode = mine.granted, token = mine.token, px = px }, px, was)
            end
            return 1
        end
        if rc == zk.NONODE then return 0 end
        if rc ~= zk.BADVERSION and not Z.unknown(rc) then Z.fail(rc, "renew " .. mine.path) end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- Session events: holds of an ended session are lost; waiters held while
-- ZooKeeper was out of reach look again once it is back.
function L.on_session(event)
    if event == "connected" then LW.connected() end
    if event ~= "lost" and event ~= "new" then return end
    LW.session_changed()
    local sid = zk.session()
    for path, h in pairs(L.holds) do
        if h.sid ~= sid or event == "lost" then
            forget(path)
            notify("on_lost", h, "session")
        end
    end
end

-- The sidecar is shutting down: its waiters leave their queues, answered
-- -TRYAGAIN (a grant already written is still answered).
function L.on_shutdown() LW.close() end

function L.count() return U.count(L.holds) end
L.wait_stats, L.wait_own_grace_ms, L.on_watch = LW.stats, LW.OWN_GRACE_MS, LW.on_watch

function L.owns_path(path)
    local dir = LS.dir()
    return path:sub(1, #dir + 1) == dir .. "/"
end

return L
