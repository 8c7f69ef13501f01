-- lockwait.lua — how a native lock's waiter waits (locks.lua): the one
-- node it watches, the watch, its WAIT, its client going.
--
--   LW.target(queue, me, grants) -> entry|nil, poll
--                                              what to watch (grants:
--                                              Q.grantable(queue), if known)
--   LW.wait(path, lock, until_ms, since, older, mine)
--                                           -> "changed" | "timeout" | "gone" | "closing"
--                                              | "unblocked",
--                                              and whether a watch event woke it
--   LW.on_watch(path)                          a watch of ours fired
--   LW.created(path) / LW.wrote(path, gone) / LW.forget(path)
--                                              our session's request nodes
--   LW.delete(path, version) / LW.write_table(snap, touch)
--                                              writes that wake waiters here
--   LW.create(lock, prefix, d)                 a request into the queue
--   LW.leave(path) / LW.abandon(lock, prefix)
--                                              a request out of the queue
--   LW.take_back(lock, owner, sent, before, done) / LW.await_settled(lock, owner)
--                                              a hold count write taken back
--   LW.session_changed()                       they are ours no more
--   LW.close()                                 shutting down: no more waits
--   LW.reachable(until_ms) / LW.connected()    wait for / tell ZooKeeper's
--                                              connection, before a look
--   LW.begin_write(lock) / LW.end_write(lock)  a grant of ours in flight
--   LW.await_write(lock)                       wait for it to be answered
--   LW.await(p) / LW.finish(p)                 wait for / end p in flight

local Q = require "lockq"
local LS = require "lockstore"
local G = require "guard"
local Z = require "zkio"
local S = require "signal"
local E = require "errors"

local LW = {}

-- How often a waiter that sees through a compatible waiter looks again
-- (and one the policy holds back: locks.lua's settle).
LW.POLL_MS = 250

-- How long a waiter behind a request of its own sidecar waits without a
-- watch (see `own` below).
LW.OWN_GRACE_MS = 250

LW.stats = { waits = 0, woken = 0, own_waits = 0 }

-- Waiting commands by the node they watch: path -> {record = true}.
local watching = {}

-- The node whose change may let `me` through, and whether to look again
-- after LW.POLL_MS as well: lockq's watch target, but a compatible new
-- request waited on only for its turn is seen through (its grant writes
-- only the table, not its node): watch what it waits for, and look again
-- now and then, since it may leave (WAIT over) without that changing.
-- nil: nothing to watch but the table (the waiter ahead is being granted).
function LW.target(queue, me, grants)
    local t = Q.watch_target(queue, me, grants)
    local seen, poll = {}, false
    while t and not t.granted and not seen[t] do
        if not Q.compatible(t.mode, me.granted and me.convert or me.mode) then return t, poll end
        seen[t], poll = true, true
        t = Q.watch_target(queue, t, grants)
    end
    return t, poll or t == nil
end

-- Resumes a waiter once, whichever comes first: its watch, its timer.
local function wake(rec, why)
    if rec.waiting then
        rec.waiting = false
        host.wake(rec.co, why)
    end
end

-- Adds rec to the waiters of `watch`; answers their set, for unwatch.
local function enlist(watch, rec)
    local set = watching[watch] or {}
    watching[watch] = set
    set[rec] = true
    return set
end

local function unwatch(watch, set, rec)
    set[rec] = nil
    if not next(set) and watching[watch] == set then watching[watch] = nil end
end

-- Suspends the command, blocked, until rec is woken: its watch, or
-- `left` ms.
local function block_for(rec, left)
    local timer = host.timer(function() wake(rec, "timeout") end)
    timer:start(left)
    rec.waiting = true
    host.block()
    host.suspend("blocked")
    rec.waiting = false
    timer:stop()
end

-- The node at `path` changed (a watch event, or a write of ours): wake
-- every waiter watching it.
local function fire(path, event)
    local set = watching[path]
    if not set then return false end
    watching[path] = nil
    for rec in pairs(set) do
        rec.fired, rec.event = true, event
        if rec.waiting then LW.stats.woken = LW.stats.woken + 1 end
        wake(rec, "changed")
    end
    return true
end

-- Request nodes this sidecar's session created and has not seen go:
-- path -> true, or "watch" once a wait on it outlasted LW.OWN_GRACE_MS.
-- Their deletes and the writes that may let a waiter through (a release,
-- a lease's end, a conversion, WAIT over, a client gone) are normally
-- this sidecar's own, so a waiter behind one of them sets no ZooKeeper
-- watch at first: the write's reply wakes it (LW.wrote), one request
-- fewer than the recipe's in a quick handoff.  For what this sidecar does
-- not see (a release or conversion of that hold through another sidecar,
-- a node deleted by hand), a wait that outlasts LW.OWN_GRACE_MS looks
-- again, and every later wait on that node sets the watch, as for a
-- request of another sidecar: one look more than the recipe's, once.
local own = {}

function LW.created(path) own[path] = true end

-- Our hold at `path` is forgotten (locks.lua): its node gone, or no longer
-- ours to delete (a release through another sidecar, which this sidecar
-- learns at the lease's end; the session's end).  Whoever waits behind it
-- here sets a watch from now on; the entry would otherwise stay for the
-- session's life, one per lock released elsewhere.
function LW.forget(path) own[path] = nil end

-- A write of ours to a request node was answered: it was deleted (gone)
-- or changed.  Wakes whoever waits on it here: true when someone did.
function LW.wrote(path, gone)
    if gone then own[path] = nil end
    return fire(path, false)
end

-- zk.delete of a request node: zk.delete's answer.  Another session's node
-- (sid: its owner's; a release through a sidecar other than its holder's)
-- goes with a bump of that session's guard in the same multi, so that the
-- holder's sidecar knows its record of the hold may be out of date (see
-- locks.lua's quick_release), writing the path removed into it (which
-- node went: G.unmoved_but); alone when that session has no guard.
function LW.delete(path, version, sid)
    local rc, results
    if sid and sid ~= zk.session() then
        rc, results = zk.multi({ { "delete", path, version }, { "set", G.path(sid), path, -1 } })
        rc = Z.first_error(rc, results)
        local guard = type(results) == "table" and results[2]
        if rc == zk.NONODE and guard and guard.rc == zk.NONODE then sid = nil end
    end
    if not sid or sid == zk.session() then rc = zk.delete(path, version) end
    if rc == zk.OK or rc == zk.NONODE then LW.wrote(path, true) end
    return rc
end

-- Deletes our request node at `path` (gone already counts): true when
-- done, false when ZooKeeper did not answer within the tries.
function LW.delete_node(path)
    for _ = 1, Z.READ_TRIES do
        local rc = LW.delete(path, -1)
        if rc == zk.OK or rc == zk.NONODE then return true end
        if not Z.unknown(rc) then Z.fail(rc, "delete " .. path) end
    end
    return false
end

-- Joins the lock node `lock`'s queue: creates our request node, named
-- `prefix` and a sequence, with request data `d` (lockstore's); returns
-- its path and the session that made it.  The lock node is created (a
-- container) when missing.  A create whose reply was lost is found again
-- by its nonce (in the prefix).  The session is read from the answer's
-- side: a create asked while there was none (zk.session() 0, a new one
-- connecting) is sent under the next, and an OK is only ever delivered
-- under the session it was sent on (the bridge turns an older one's into
-- a connection loss).
function LW.create(lock, prefix, d)
    local data = LS.encode_req(d)
    for _ = 1, Z.READ_TRIES do
        local sid = zk.session()
        local rc, created = zk.create(lock .. "/" .. prefix, data, zk.EPHEMERAL | zk.SEQUENCE)
        if rc == zk.OK then LW.created(created) return created, zk.session() end
        if rc == zk.NONODE then
            local crc = zk.create(lock, "", zk.CONTAINER)
            if crc == zk.NONODE then
                Z.ensure_path(LS.dir())
            elseif crc ~= zk.OK and crc ~= zk.NODEEXISTS and not Z.unknown(crc) then
                Z.fail(crc, "create " .. lock) -- refused (<root>/l's ACL): say so
            end
        elseif Z.unknown(rc) then
            Z.sync(lock)
            for _, name in ipairs(Z.children(lock)) do
                if name:sub(1, #prefix) == prefix then
                    -- made under a session that is over: out of the queue
                    local found = lock .. "/" .. name
                    if zk.session() == sid then LW.created(found) return found, sid end
                    LW.delete_node(found)
                end
            end
        else
            Z.fail(rc, "create " .. lock)
        end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- Takes the request at `path`, made by a command that then failed (count
-- 1 at version 0, as made), out of the queue: true when done.  Its owner
-- may have counted it up since (a reentrant LOCK.ACQUIRE that found it
-- granted, here or through another sidecar): that hold stays, one count
-- less.  LW.left(path, stays) (locks.lua's) is told when it stays, or when
-- our delete took it.  false when ZooKeeper did not answer within the tries.
LW.left = function(_, _) end

local function leave_node(path)
    local version, sent = 0, nil -- (nil: read the node first)
    for _ = 1, Z.READ_TRIES do
        local rc = version and LW.delete(path, version) or zk.BADVERSION
        if rc == zk.OK then LW.left(path, false) end
        if rc == zk.OK or rc == zk.NONODE then return true end
        if rc == zk.BADVERSION then
            version = nil
            local grc, data, stat = zk.get(path)
            if grc == zk.NONODE then return true end
            if grc == zk.OK then
                local d = LS.decode_req(data, stat)
                -- our count-down whose reply was lost went through
                if sent and d and d.count == sent.count and d.wid == sent.wid then
                    pcall(LS.settle_landed, path, sent.d, stat, sent.at) -- (its carried lease)
                    LW.left(path, true)
                    return true
                end
                sent = nil
                if not d or d.count <= 1 then
                    version = stat.version
                else
                    local write = LS.count_write(d, d.count - 1, path)
                    local src, sstat = zk.set(path, LS.encode_req(d), stat.version)
                    if src == zk.OK then pcall(LS.settle_carried, path, d, sstat) LW.left(path, true) end
                    if src == zk.OK or src == zk.NONODE then return true end
                    if Z.unknown(src) then sent, write.d, write.at = write, d, stat.version end
                end
            end
        elseif not Z.unknown(rc) then
            Z.fail(rc, "delete " .. path)
        end
    end
    return false
end

-- Leaves the queue from a command that may have lost its client, or
-- failed: in the background when the command's own time may be spent, at
-- once while ZooKeeper is out of reach (a WAIT that ended then is answered
-- at its end, not a request timeout later).
function LW.leave(path)
    local ok, done = false, false
    if select(2, zk.session()) then ok, done = pcall(leave_node, path) end
    if not (ok and done) then
        -- until it is gone (ours, or with our session): every failure is
        -- caught, or one TIMEOUT while ZooKeeper is away (background
        -- requests are not parked past their deadline) ended the loop and
        -- left a request no client waits for at the head of the queue
        host.spawn(function()
            while true do
                host.sleep(200)
                local ok2, done2 = pcall(leave_node, path)
                if ok2 and done2 then return end
            end
        end)
    end
end

-- A request whose create may have landed, its command ended without
-- knowing (a lost reply it could not settle in time): found by its name's
-- prefix (a nonce) and deleted, in the background, once ZooKeeper
-- answers.  Whichever of our sessions made it: one asked with no session
-- went out under the next, and a create retried after a session change
-- under that one; a node of a session given up since goes sooner so.
function LW.abandon(lock, prefix)
    host.spawn(function()
        while true do
            local ok, names = pcall(Z.children, lock)
            if ok then
                for _, name in ipairs(names) do
                    if name:sub(1, #prefix) == prefix then LW.leave(lock .. "/" .. name) end
                end
                return
            end
            host.sleep(200)
        end
    end)
end

-- A hold count write `sent` (LS.count_write's record) whose reply was
-- lost and whose command failed before it could tell (-TRYAGAIN: a
-- reentrant acquire not counted, a release not counted down): once
-- ZooKeeper answers, the write, when it landed, is taken back (the count
-- of the data `before` it, written over the data as read, at its version;
-- done(version) after), in the background, until the request is gone (its
-- owner's session ended) or ZooKeeper stayed away two minutes.  A count
-- the owner wrote since stays as it is; a renewal since is kept.  This
-- sidecar's own session does not matter: the request may be another
-- sidecar's (a release through this one).
local settling = {} -- lock .. "\0" .. owner -> true while LW.take_back runs

function LW.take_back(lock, owner, sent, before, done)
    local k = lock .. "\0" .. owner
    settling[k] = true
    local function try()
        local mine, d = LS.find_owner(LS.read(lock, true), owner)
        if not LS.landed(sent, mine, d) then return true end
        -- the count back, on the data as it is now (a renewal since stays)
        LS.count_write(d, LS.decode_req(before).count, sent.path)
        local rc, stat = zk.set(sent.path, LS.encode_req(d), mine.version)
        if rc == zk.OK then done(LS.settle_carried(sent.path, d, stat)) end
        return rc ~= zk.BADVERSION and not Z.unknown(rc) and rc ~= zk.TIMEOUT -- (moved, not sent: again)
    end
    host.spawn(function()
        -- whatever happens, the owner's commands stop waiting for it
        local settled <close> = setmetatable({}, { __close = function() settling[k] = nil end })
        for _ = 1, 600 do -- two minutes of ZooKeeper out of reach at most
            local ok, over = pcall(try)
            if ok and over then return end
            host.sleep(200)
        end
    end)
end

-- A command on the owner's hold (a client that asks again after the
-- -TRYAGAIN) waits for LW.take_back to end first, so that it counts from
-- the settled hold; -TRYAGAIN when its own time runs out first.
function LW.await_settled(lock, owner)
    if next(settling) == nil then return end -- every command asks: nothing to build
    local k = lock .. "\0" .. owner
    while settling[k] do
        if host.now() >= host.deadline() then S.abort({ err = E.UNAVAILABLE }) end
        host.sleep(20)
    end
end

-- LS.write_table, touching our request `touch` (a conversion asked,
-- granted or given up, a down-conversion): LS.write_table's answer.
function LW.write_table(snap, touch, granted, epoch)
    local how, zxid, version = LS.write_table(snap, touch, granted, epoch)
    if how == "ok" and touch then LW.wrote(touch.path) end
    return how, zxid, version
end

-- The session changed: the nodes it created are not ours to answer for;
-- their waiters wake and find out, and so does every other waiter (its
-- watch went with the old handle, its own request with the old session:
-- it would sleep to the end of its WAIT and answer null).
local function fire_all()
    local paths = {}
    for path in pairs(watching) do paths[#paths + 1] = path end
    for _, path in ipairs(paths) do fire(path, false) end
end

function LW.session_changed()
    local was = own
    own = {}
    for path in pairs(was) do fire(path, false) end
    fire_all()
end

-- SIGTERM's grace period: every wait ends ("changed": the waiter looks at
-- the lock once more, a grant written meanwhile is still its), and every
-- wait from now on ends at once ("closing").
LW.closing = false

function LW.close()
    LW.closing = true
    fire_all()
end

-- Waits until the node at `path` changes (or the lock node's table, when
-- path is nil), `until_ms` (host.now()) passes, or the client goes.  The
-- watch is a data watch (getData): it fires when the node is deleted and
-- when its data changes.  One watch per node and sidecar (the C client
-- keeps one), however many of this sidecar's waiters watch it; none at
-- first for a node of ours (`own`), whose wait ends by LW.OWN_GRACE_MS
-- ("changed": look again).  A watch on another's request reads `lock`
-- ahead (zk.read_ahead): the event's read is sent by the client's thread
-- as the event comes, and the waiter it wakes takes it (LS.read_table's
-- `woken`).  since: a zxid; a node written after it (and after its
-- creation) counts as changed at once (the waiter chose it on a table
-- from before that write: a down-conversion, which writes the table and
-- touches the node in one multi, may have landed between the waiter's
-- read and its watch, and no event would tell).  older: the waiter's table
-- is older than its listing; a node of ours is watched at once then.
-- Answers how, the watch event, and the node's mzxid as the watch found
-- it (nil when it set none), which the waiter passes as `since` next time
-- once it has read the table again: one look per write, never a loop of
-- them (a renewal writes the node and not the table).  mine: a
-- conversion's own hold, watched as well: its end (a release through
-- another sidecar, its lease) ends the wait, which nothing else of the
-- lock may tell before WAIT runs out.  From its first suspend the
-- command is blocked (host.block: CLIENT LIST, INFO, CLIENT UNBLOCK) until
-- its wait is over (lockgrant.lua, host.block(false)); a CLIENT UNBLOCK ends
-- the wait ("unblocked"), whenever it comes.
function LW.wait(path, lock, until_ms, since, older, mine)
    if LW.closing then return "closing" end
    if host.unblocked() then return "unblocked" end
    local watch = path or lock
    local rec = { co = coroutine.running() }
    local set = enlist(watch, rec)
    if mine == watch then mine = nil end
    local mset = mine and enlist(mine, rec)
    local function done(...)
        unwatch(watch, set, rec)
        if mset then unwatch(mine, mset, rec) end
        return ...
    end
    local rc, stat, grace = zk.OK, nil, nil
    if path and own[path] == true and not older then
        grace = host.now() + LW.OWN_GRACE_MS
        LW.stats.own_waits = LW.stats.own_waits + 1
    else
        local _
        if path then zk.read_ahead(path, lock) end
        rc, _, stat = zk.get(watch, true)
        if rc == zk.NONODE then own[watch] = nil end
    end
    if mine and rc == zk.OK and not rec.fired then
        rc = zk.get(mine, true)
        if rc == zk.NONODE then own[mine] = nil end
    end
    local left = math.min(until_ms, grace or until_ms) - host.now()
    local seen = path and stat and stat.mzxid
    local moved = since and seen and seen > since and seen > stat.czxid
    if rc ~= zk.OK or rec.fired or moved or left <= 0 then
        return done((rc ~= zk.OK or rec.fired or moved) and "changed" or "timeout", nil, seen)
    end
    if host.client() == nil then -- it left while we read: no wait for nobody
        return done("gone")
    end
    if host.unblocked() then return done("unblocked") end -- (came while we read)
    LW.stats.waits = LW.stats.waits + 1
    block_for(rec, left)
    done()
    if host.client() == nil and not rec.fired then return "gone" end
    if host.unblocked() then return "unblocked" end
    if rec.fired then return "changed", rec.event, seen end
    if grace and host.now() >= grace and host.now() < until_ms then
        if own[path] then own[path] = "watch" end
        return "changed"
    end
    return "timeout", nil, seen
end

-- The waiters of ZooKeeper's connection (LW.reachable), among `watching`
-- under a key no path is: a session's change (fire_all), shutdown and the
-- connection's return wake them.
local CONNECTION = {}

-- Waits while ZooKeeper is out of reach before a waiter looks again (after
-- its grace, a poll or a watch event): a look now would sit in a parked
-- request, spending the command's time (--zk-request-timeout), and answer
-- -TRYAGAIN to a WAIT with long to run, taking the request out of its
-- place.  nil once it may look (connected, or the session changed: the
-- caller finds out), else how the wait ended: "timeout" (until_ms),
-- "gone", "unblocked", "closing".
function LW.reachable(until_ms)
    while not select(2, zk.session()) do
        if LW.closing then return "closing" end
        if host.client() == nil then return "gone" end
        if host.unblocked() then return "unblocked" end
        local left = until_ms - host.now()
        if left <= 0 then return "timeout" end
        local rec = { co = coroutine.running() }
        local set = enlist(CONNECTION, rec)
        block_for(rec, left)
        unwatch(CONNECTION, set, rec)
        if rec.fired then return LW.closing and "closing" or nil end
    end
    return nil
end

-- ZooKeeper's connection is back (the session's "connected").
function LW.connected() fire(CONNECTION, false) end

-- Something of this sidecar's in flight that waiters wait for: a record
-- {done, waiters}; LW.await(p) returns once LW.finish(p) ran (or its
-- client went).
function LW.await(p)
    if p.done then return end
    local rec = { co = coroutine.running(), waiting = true }
    p.waiters = p.waiters or {}
    p.waiters[#p.waiters + 1] = rec
    host.suspend(true)
    rec.waiting = false
end

function LW.finish(p)
    p.done = true
    for _, rec in ipairs(p.waiters or {}) do wake(rec, "done") end
    p.waiters = nil
end

-- Grants this sidecar is writing, by lock: {n, waiters}.  The event of
-- the delete that goes with a grant comes just before the write's reply;
-- a waiter it woke waits for that reply (its own grant, already known
-- here) rather than reading the table from ZooKeeper.
local writing = {}

function LW.begin_write(lock)
    local w = writing[lock]
    if not w then w = { n = 0 } writing[lock] = w end
    w.n = w.n + 1
end

function LW.end_write(lock)
    local w = writing[lock]
    w.n = w.n - 1
    if w.n > 0 then return end
    writing[lock] = nil
    LW.finish(w)
end

function LW.await_write(lock)
    local w = writing[lock]
    if w then LW.await(w) end
end

-- A watch fired on a path of ours.
function LW.on_watch(path) return fire(path, true) end

return LW
