-- lockgrant.lua — how a request of ours comes to be granted (locks.lua's
-- acquisitions and conversions): the grant rule asked of our own request,
-- the wait for a grant (LG.settle) and the views a hold takes with it (the
-- queue its release grants from).  Nothing here records a hold.

local Q = require "lockq"
local LS = require "lockstore"
local LW = require "lockwait"
local Z = require "zkio"

local LG = {}


function LG.grants_me(queue, me, grants)
    for _, g in ipairs(grants or Q.grantable(queue)) do
        if g.entry == me then return Q.fits_held(queue, me, g.mode) and g or nil end
    end
end

-- Whether our request `seq` is granted in table t (a conversion to
-- `converting`: granted once no conversion is pending and it holds that).
function LG.granted_in(t, seq, converting)
    local line = t.lines[seq]
    if not line then return false end
    if converting then return not line.convert and line.mode == converting end
    return true
end

-- Whether view lists a waiting request but `path`'s (its release may grant it).
function LG.next_waiter(path, view)
    for _, e in ipairs(view.queue) do
        if e.path ~= path and not e.granted then return true end
    end
end

-- This sidecar's newest listing as the view of the request at `path`, granted
-- in table t, when it lists a waiter after it (LS.newer_view); else nil.
function LG.newer_view(lock, t, path)
    local view = t and LS.newer_view(lock, t, LS.seq_of(path))
    if view and LG.next_waiter(path, view) then return view end
end

-- A listing of a lock made in the background: {names, pzxid, stat, done};
-- a hold's next view (its release grants the requests that came after it),
-- or a new request's first listing, sent right after its create.
function LG.start_listing(lock)
    local l = { done = false }
    host.spawn(function()
        local ok, names, pzxid, stat = pcall(LS.read_children, lock)
        if ok then l.names, l.pzxid, l.stat = names, pzxid, stat end
        l.done = true
        LW.finish(l)
    end)
    return l
end

-- Waits for, and records, the grant of our request at `path` (a new
-- request, or our hold's conversion asked in the table).  Returns the
-- token, the lock as last read (the hold's view) and, when that view may
-- lack the requests its release will grant (it lists none after ours, or
-- it is our listing from before the wait: the table carried no queue), a
-- listing begun for the next view; or nil, why ("timeout", "gone",
-- "closing": the sidecar is shutting down, "unblocked": CLIENT UNBLOCK,
-- "deadlock", "lost": the node
-- went, the conversion was given up, or the
-- session `sid` that created it is no longer ours).  After a wake-up the
-- table alone is read: a release that granted us wrote it (one round trip,
-- as the recipe's getChildren), and with it the queue that release decided
-- on, which becomes our view; none when that release was this sidecar's
-- (its write is waited for: its reply follows the event).  Views pass down
-- the queue from release to release and learn of no new request: the last
-- request of one takes this sidecar's newest listing when that lists a
-- request after it (LS.newer_view: one that came since, listed at its
-- arrival here), else lists the lock after its grant, so that its release
-- grants those that came since.  Not granted, the lock is listed.
-- first(snap, me), when given, sees the first listing: a truthy answer
-- ends the wait (nil, answer).  A new request's first listing is
-- `listing`, begun beside its create, when it lists the request; there
-- the table this sidecar knows may do though the lock moved on since
-- (LS.snapshot's `seq, mode`): the request waits for the one ahead of it,
-- watched with LW.wait's `since`, and grants itself only on a newer read.
-- held_back(snap, me), when given, is asked before a request that waited
-- grants itself: a reason keeps it waiting (looked at again every
-- LW.POLL_MS) until its WAIT runs out.  A grant written by a release is
-- not asked about.
local function settle(lock, path, sid, until_ms, converting, px, first, mode, listing, held_back)
    local seq = LS.seq_of(path)
    local t, names, pzxid, czxid, event, looked_path, looked_mzxid, waited
    -- ours lost: reads retry on a new session, our node gone, its line left
    -- (another sidecar's request, a conversion asked here, ends with its node)
    local own = zk.session() == sid
    local function lost() return own and zk.session() ~= sid end
    while true do
        if lost() then return nil, "lost" end
        if names then
            -- woken: a release may have granted us (a conversion reads)
            LW.await_write(lock)
            t = not converting and LS.cached_grant(lock, seq, czxid) or LS.read_table(lock, event)
            -- (a lock node made again since, its numbers begun again: the
            -- line of our number is another's)
            if not t or lost() or (czxid and t.czxid ~= czxid) then return nil, "lost" end
            if LG.granted_in(t, seq, converting) then
                -- the view: the queue the table carries, else our listing
                -- from before the wait; when it is the latter, or we are
                -- the last of the former, this sidecar's newest listing if
                -- it lists a request after ours, else the lock listed again
                local view = t.names and LS.build(lock, t, t.names, 0, seq)
                local carried = view and view.by_seq[seq]
                if not carried then view = LS.build(lock, t, names, pzxid, seq) end
                local relist = not converting and not (carried and LG.next_waiter(path, view))
                local newer = relist and LG.newer_view(lock, t, path)
                if newer then view, relist = newer, false end
                return t.lines[seq].token, view, relist and LG.start_listing(lock) or nil
            end
            if converting and not t.lines[seq] then return nil, "lost" end
            names = nil
        end
        local older
        if not (names and t) then
            if listing then
                LW.await(listing)
                if not LS.lists(listing.names, path) then listing = nil end
            end
            t, names, pzxid, czxid, older = LS.snapshot(lock, listing, not converting and seq or nil, mode)
            listing = nil
        end
        if not t or lost() then return nil, "lost" end
        local snap = LS.build(lock, t, names, pzxid)
        local me = snap.by_seq[seq]
        if not me or me.path ~= path then return nil, "lost" end
        local stop = first and first(snap, me)
        if stop then return nil, stop end
        first = nil
        if LG.granted_in(t, seq, converting) then return me.token, snap end
        if converting and not me.convert then return nil, "lost" end
        local grants = Q.grantable(snap.queue) -- (for the watch target too)
        local g = not older and LG.grants_me(snap.queue, me, grants)
        local held = g and waited and held_back and held_back(snap, me)
        -- (a CLIENT UNBLOCK that came meanwhile answered 1: no grant after it)
        if g and not held and host.unblocked() then return nil, "unblocked" end
        if g and not held then
            -- its wait is over: CLIENT UNBLOCK answers 0 while the grant's
            -- write is out (a write that fails waits again, blocked again)
            host.block(false)
            me.granted, me.convert, me.token = g.mode, nil, snap.token
            local epoch -- (the clock the lease end is estimated on: LS.settle_grants)
            if not converting then me.lease_end, epoch = LS.end_after(LS.leader_now(), px), Z.state.epoch end
            local how, zxid, version = LW.write_table(snap, converting and me or nil, epoch and { me }, epoch)
            if how == "ok" then
                snap.version, snap.token = version or Z.next_version(snap.version), zxid
                return me.token, snap
            end
        else
            local stuck = converting and Q.deadlocked(snap.queue)
            if stuck and stuck[me] then
                local latest = true
                for c in pairs(stuck) do
                    if Q.before(me.convert_at, c.convert_at) then latest = false end
                end
                if latest then return nil, "deadlock" end
            end
            local target, poll = LW.target(snap.queue, me, grants)
            poll = poll or held
            local wait_until = poll and math.min(until_ms, host.now() + LW.POLL_MS) or until_ms
            -- the target written after the table we chose on: look again, once per write
            local since = t.mzxid
            if target and target.path == looked_path then since = math.max(since, looked_mzxid) end
            local how, seen
            how, event, seen = LW.wait(target and target.path, lock, wait_until, since, older,
                                       converting and path)
            waited = true
            if seen then looked_path, looked_mzxid = target.path, seen end
            if how == "gone" or how == "closing" or how == "unblocked" or
               (how == "timeout" and host.now() >= until_ms) then
                return nil, how
            end
            how = LW.reachable(until_ms)
            if how then return nil, how end
        end
    end
end

-- Its wait is over however settle ends (a return, an error): CLIENT
-- UNBLOCK answers 0 from here (LW.wait marked the command blocked).
local function wait_over(ok, ...)
    host.block(false)
    if not ok then error((...), 0) end
    return ...
end

function LG.settle(...) return wait_over(pcall(settle, ...)) end

return LG
