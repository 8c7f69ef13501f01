-- locks.lua — native locks (LOCK.*) on ZooKeeper: the queue of a lock as
-- znodes, the grants, the waits, the leases.  lockq.lua decides who may
-- hold what; this file reads and writes the nodes it decides on.
--
-- The nodes (a namespace of their own, beside <root>/k):
--
--   <root>/l/<encoded key>     the lock node, a CONTAINER (the server
--                              deletes it some time after its last child):
--                              its data is the grant table, one line per
--                              granted request: "<seq> <mode> <token>
--                              [<converting to> <convert_at> <asked ms>]"
--   .../<MODE>.<owner hash>.<nonce>-<seq>
--                              a request: EPHEMERAL_SEQUENTIAL, created by
--                              the sidecar that took it; its name says the
--                              mode asked and whose it is (a hash), its data
--                              the owner, hold count, lease end (leader
--                              clock), when it was asked, sidecar, client
--
-- Granted is state (lockq.lua): a grant, a conversion asked, given up or
-- granted, a down-conversion are each one write of the grant table
-- conditional on its version; a request's own sidecar is the only one that
-- grants it.  So a grant decided on a stale read fails (BADVERSION) and is
-- decided again, and a write whose reply was lost is settled by reading
-- the table.  A request leaves by deleting its node (release, lease end,
-- WAIT over, client gone, session lost); a table line without a node is a
-- leftover, dropped by the next write.
--
-- Herd-free waits: a waiter watches one node (lockq's watch target) with a
-- data watch, so a release wakes the waiters it may unblock.  A grant of a
-- new request writes only the table: the waiter behind an exclusive
-- waiter, watching that waiter's node, is not woken by its grant, only by
-- its release.  A change of a granted hold that may unblock others (a
-- down-conversion, a conversion asked, granted or given up) also touches
-- its own node in the same multi, which wakes those watching it.  A waiter
-- that must wait for its turn behind a compatible waiter watches what that
-- waiter watches.
--
-- Tokens: max(lock node mzxid, pzxid) of the read that decided the grant
-- (lockq's Q.token): every grant, conversion and down-conversion writes the
-- lock node and every arrival and departure moves its pzxid, so the read
-- saw the write that ended any conflicting hold, and tokens grow per key in
-- grant order, across sidecars, restarts and leader changes (zxids).
--
-- Leases: the sidecar whose session created a hold ends it at its lease end
-- (a timer; it reads the node first, a renewal through another sidecar may
-- have moved it); no other sidecar ends a hold by its clock.  A hold whose
-- sidecar dies goes with its session.

local Q = require "lockq"
local Z = require "zkio"
local S = require "signal"
local E = require "errors"
local H = require "hooks"

local L = {}

L.DEFAULT_PX = 30000
-- How often a waiter that sees through a compatible waiter looks again.
L.POLL_MS = 250

-- The holds this sidecar's session created: child path -> {key, lock,
-- owner, mode, token, sid, deadline (host.now()), timer}.
L.holds = {}
-- Waiting commands by the node they watch: path -> {record = true}.
local watching = {}

L.stats = { granted = 0, expired = 0, waits = 0, woken = 0 }

---------------------------------------------------------------------------
-- Names and data

function L.dir() return Z.root() .. "/l" end

function L.lock_path(key) return L.dir() .. "/" .. host.key_encode(key) end

-- FNV-1a, 64 bits, in hex: which requests may be an owner's (the data says).
local function owner_hash(owner)
    local h = -3750763034362895579
    for i = 1, #owner do
        h = (h ~ owner:byte(i)) * 1099511628211
    end
    return string.format("%016x", h)
end

local function hex(s)
    return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- "<MODE>.<hash>.<nonce>-<seq>" -> mode, hash, seq
local function parse_name(name)
    local mode, hash, seq = name:match("^(%u%u)%.(%x+)%.%x+%-(%d+)$")
    if not mode then return nil end
    return mode, hash, tonumber(seq)
end

local DATA_FMT = ">s4 I4 i8 i8 s2 s2"

-- A request's data: owner, hold count, lease end (leader ms), asked at
-- (wall ms), sidecar (instance, hex), client ("id addr").
local function encode_req(r)
    return string.pack(DATA_FMT, r.owner, r.count, math.floor(r.lease_end), math.floor(r.asked),
                       r.sidecar, r.client)
end

local function decode_req(data)
    local ok, owner, count, lease_end, asked, sidecar, client = pcall(string.unpack, DATA_FMT, data)
    if not ok then return nil end
    return { owner = owner, count = count, lease_end = lease_end, asked = asked,
             sidecar = sidecar, client = client }
end

-- The grant table: seq -> {mode, token, convert, convert_at, asked}
local function decode_table(data)
    local t = {}
    for line in (data or ""):gmatch("[^\n]+") do
        local seq, mode, token, rest = line:match("^(%d+) (%u%u) (%d+)(.*)$")
        if seq then
            local g = { mode = mode, token = tonumber(token) }
            local conv, at, asked = rest:match("^ (%u%u) (%d+) (%d+)$")
            if conv then g.convert, g.convert_at, g.asked = conv, tonumber(at), tonumber(asked) end
            t[tonumber(seq)] = g
        end
    end
    return t
end

-- The table of `queue`'s granted entries (leftovers dropped).
local function encode_table(queue)
    local out = {}
    for _, e in ipairs(queue) do
        if e.granted then
            local line = string.format("%d %s %d", e.seq, e.granted, e.token)
            if e.convert then
                line = line .. string.format(" %s %d %d", e.convert, e.convert_at, e.asked_convert)
            end
            out[#out + 1] = line
        end
    end
    return table.concat(out, "\n")
end

---------------------------------------------------------------------------
-- Reading a lock

-- The lock's queue as lockq reads it, from a read of the table and then
-- of the children (so a grant after the table's read fails the write that
-- is conditional on its version).  nil when the lock node is absent.
local function read_lock(lock)
    local rc, data, lstat = Z.get(lock)
    if rc == zk.NONODE then return nil end
    local rc2, names, cstat = Z.list(lock)
    if rc2 == zk.NONODE then return nil end
    local table_ = decode_table(data)
    local snap = { path = lock, version = lstat.version, queue = {}, by_seq = {},
                   token = math.max(lstat.mzxid, cstat.pzxid) }
    for _, name in ipairs(names) do
        local mode, hash, seq = parse_name(name)
        if mode then
            local g = table_[seq]
            local e = { seq = seq, name = name, path = lock .. "/" .. name, mode = mode, hash = hash }
            if g then
                e.granted, e.token = g.mode, g.token
                e.convert, e.convert_at, e.asked_convert = g.convert, g.convert_at, g.asked
            end
            snap.queue[#snap.queue + 1] = e
            snap.by_seq[seq] = e
        end
    end
    table.sort(snap.queue, function(a, b) return a.seq < b.seq end)
    return snap
end

-- The request data of entry e (read once per snapshot), or nil when gone.
local function entry_data(e)
    if e.data == nil then
        local rc, data, stat = Z.get(e.path)
        e.data = rc == zk.OK and decode_req(data) or false
        e.version, e.owner_sid = stat and stat.version, stat and stat.ephemeralOwner
    end
    return e.data or nil
end

-- The owner's entry in snap, or nil.
local function find_owner(snap, owner)
    if not snap then return nil end
    local h = owner_hash(owner)
    for _, e in ipairs(snap.queue) do
        if e.hash == h then
            local d = entry_data(e)
            if d and d.owner == owner then return e, d end
        end
    end
end

---------------------------------------------------------------------------
-- Writes

-- Writes snap's table (after the caller changed its entries) conditional
-- on the version read, with `touch` (an entry whose node is rewritten in the
-- same multi to wake its watchers).  Returns "ok", "stale" (changed since:
-- read again), or "unknown" (the reply was lost: read again to learn).
local function write_table(snap, touch)
    local data = encode_table(snap.queue)
    local rc, results
    if touch then
        local d = entry_data(touch)
        if not d then return "stale" end
        rc, results = zk.multi({ { "set", snap.path, data, snap.version },
                                 { "set", touch.path, encode_req(d), touch.version } })
        rc = Z.first_error(rc, results)
    else
        local stat
        rc, stat = zk.set(snap.path, data, snap.version)
        Z.learn_offset(stat)
    end
    if rc == zk.OK then return "ok" end
    if rc == zk.BADVERSION or rc == zk.NONODE then return "stale" end
    if Z.unknown(rc) then return "unknown" end
    Z.fail(rc, "set " .. snap.path)
end

local function leader_now()
    Z.ensure_clock()
    return host.now() + Z.state.offset
end

local function client_desc()
    local c = H.client()
    if not c then return "" end
    return tostring(c.id) .. " " .. (c.addr or "")
end

-- Creates our request node; returns its entry path and seq.  The lock node
-- is created (a container) when missing.  A create whose reply was lost is
-- found again by its nonce.
local function create_request(lock, owner, mode, px)
    local nonce = hex(Z.nonce())
    local prefix = mode .. "." .. owner_hash(owner) .. "." .. nonce .. "-"
    local data = encode_req({ owner = owner, count = 1, lease_end = leader_now() + px,
                              asked = host.wall(), sidecar = hex(host.instance or ""),
                              client = client_desc() })
    for _ = 1, Z.READ_TRIES do
        local rc, created = zk.create(lock .. "/" .. prefix, data, zk.EPHEMERAL | zk.SEQUENCE)
        if rc == zk.OK then return created end
        if rc == zk.NONODE then
            local crc = zk.create(lock, "", zk.CONTAINER)
            if crc == zk.NONODE then Z.ensure_path(L.dir()) end
        elseif Z.unknown(rc) then
            Z.sync(lock)
            for _, name in ipairs(Z.children(lock)) do
                if name:sub(1, #prefix) == prefix then return lock .. "/" .. name end
            end
        else
            Z.fail(rc, "create " .. lock)
        end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- Deletes a request node (whatever its version); true once it is gone.
local function delete_node(path)
    for _ = 1, Z.READ_TRIES do
        local rc = zk.delete(path, -1)
        if rc == zk.OK or rc == zk.NONODE then return true end
        if not Z.unknown(rc) then Z.fail(rc, "delete " .. path) end
    end
    return false
end

-- Leaves the queue from a command that may have lost its client: in the
-- background when the command's own deadline may be spent.
local function leave(path)
    if not pcall(delete_node, path) then
        host.spawn(function() while not delete_node(path) do host.sleep(200) end end)
    end
end

---------------------------------------------------------------------------
-- Holds of this sidecar: leases

local function notify(name, hold, extra)
    local info = { path = hold.path, lock = true, mode = hold.mode, token = hold.token,
                   czxid = hold.token, owner = hold.owner, ttl = hold.px, lifetime = "ephemeral" }
    for k, v in pairs(extra or {}) do info[k] = v end
    H.notify(name, hold.key, info)
end

local function forget(path)
    local h = L.holds[path]
    if h then
        if h.timer then h.timer:stop() end
        L.holds[path] = nil
    end
    return h
end

-- The lease timer of hold h fired: end it when the lease written in its
-- node has passed, else wait for that.
local function lease_due(path)
    local h = L.holds[path]
    if not h then return end
    local sid = zk.session()
    if h.sid ~= sid then return end
    local rc, data = zk.get(path)
    if rc == zk.NONODE then forget(path) return end
    if rc ~= zk.OK then h.timer:start(200) return end
    local d = decode_req(data)
    local left = d and (Z.local_time(d.lease_end) - host.now()) or 0
    if left > 0 then
        h.deadline = host.now() + left
        h.timer:start(left)
        return
    end
    local drc = zk.delete(path, -1)
    if drc == zk.OK or drc == zk.NONODE then
        forget(path)
        L.stats.expired = L.stats.expired + 1
        if drc == zk.OK then notify("on_expire", h) end
    else
        h.timer:start(200)
    end
end

local function remember(path, key, lock, owner, mode, token, px)
    local h = L.holds[path]
    if not h then
        h = { path = path, key = key, lock = lock, owner = owner }
        h.timer = host.timer(function() lease_due(path) end)
        L.holds[path] = h
    end
    h.mode, h.token, h.px, h.sid = mode, token, px, zk.session()
    h.deadline = host.now() + px
    h.timer:start(px)
    return h
end

---------------------------------------------------------------------------
-- Waiting

-- The node whose change may let `me` through, and whether to look again
-- after L.POLL_MS as well: lockq's watch target, but a compatible new
-- request waited on only for its turn is seen through (its grant writes
-- only the table, not its node): watch what it waits for, and look again
-- now and then, since it may leave (WAIT over) without that changing.
-- nil: nothing to watch but the table (the waiter ahead is being granted).
local function target_of(queue, me)
    local t = Q.watch_target(queue, me)
    local seen, poll = {}, false
    while t and not t.granted and not seen[t] do
        if not Q.compatible(t.mode, me.granted and me.convert or me.mode) then return t, poll end
        seen[t], poll = true, true
        t = Q.watch_target(queue, t)
    end
    return t, poll or t == nil
end

-- Waits until the node at `path` changes (or the lock node's table, when
-- path is nil), `until_ms` (host.now()) passes, or the client goes.
-- Returns "changed", "timeout" or "gone".
local function wait_change(path, lock, until_ms)
    local watch = path or lock
    local rec = { co = coroutine.running() }
    local set = watching[watch]
    if not set then set = {} watching[watch] = set end
    set[rec] = true
    local rc = zk.get(watch, true)
    if rc ~= zk.OK or rec.fired then
        set[rec] = nil
        return "changed"
    end
    local left = until_ms - host.now()
    if left <= 0 then set[rec] = nil return "timeout" end
    local timer = host.timer(function()
        rec.timed_out = true
        host.wake(rec.co, "timeout")
    end)
    timer:start(left)
    rec.waiting = true
    L.stats.waits = L.stats.waits + 1
    host.suspend(true)
    rec.waiting = false
    timer:stop()
    set[rec] = nil
    if not next(set) and watching[watch] == set then watching[watch] = nil end
    if host.client() == nil and not rec.fired then return "gone" end
    if rec.fired then return "changed" end
    return "timeout"
end

-- A watch fired on a path of ours: wake every waiter watching it.
function L.on_watch(path)
    local set = watching[path]
    if not set then return false end
    watching[path] = nil
    for rec in pairs(set) do
        rec.fired = true
        if rec.waiting then
            L.stats.woken = L.stats.woken + 1
            host.wake(rec.co, "changed")
        end
    end
    return true
end

function L.owns_path(path)
    return path:sub(1, #L.dir() + 1) == L.dir() .. "/"
end

---------------------------------------------------------------------------
-- The commands' work

local function grants_me(queue, me)
    for _, g in ipairs(Q.grantable(queue)) do
        if g.entry == me then return g end
    end
end

-- Waits for, and records, the grant of our request at `path` (a new
-- request, or our hold's conversion asked in the table).  Returns the
-- token, or nil, why ("timeout", "gone", "deadlock", "lost").
local function settle(lock, path, until_ms, converting)
    local seq = tonumber(path:match("%-(%d+)$"))
    while true do
        local snap = read_lock(lock)
        local me = snap and snap.by_seq[seq]
        if not me then return nil, "lost" end
        if converting then
            if not me.convert then
                if me.granted == converting then return me.token end
                return nil, "lost"
            end
        elseif me.granted then
            return me.token
        end
        local g = grants_me(snap.queue, me)
        if g then
            me.granted, me.convert, me.token = g.mode, nil, snap.token
            local how = write_table(snap, converting and me or nil)
            if how == "ok" then return snap.token end
        else
            local stuck = converting and Q.deadlocked(snap.queue)
            if stuck and stuck[me] then
                local latest = true
                for c in pairs(stuck) do
                    if c.convert_at > me.convert_at then latest = false end
                end
                if latest then return nil, "deadlock" end
            end
            local t, poll = target_of(snap.queue, me)
            local how = wait_change(t and t.path, lock, poll and math.min(until_ms, host.now() + L.POLL_MS) or until_ms)
            if how == "gone" or (how == "timeout" and host.now() >= until_ms) then return nil, how end
        end
    end
end

-- The reply of LOCK.ACQUIRE: a token, nil (not granted within wait_ms),
-- or an error reply table.  before_acquire: the policy's hook, or nil.
function L.acquire(key, owner, mode, px, wait_ms, before_acquire)
    local lock = L.lock_path(key)
    local snap = read_lock(lock)
    local mine, d = find_owner(snap, owner)
    if mine then
        if not mine.granted then
            return { err = "ERR owner '" .. owner .. "' already waits for this lock" }
        end
        if mine.granted ~= mode then
            return { err = "ERR owner holds this lock in mode " .. mine.granted ..
                           "; use LOCK.CONVERT to change its mode" }
        end
        d.count = d.count + 1
        d.lease_end = leader_now() + px
        local rc = zk.set(mine.path, encode_req(d), mine.version)
        if rc == zk.BADVERSION or rc == zk.NONODE then
            return L.acquire(key, owner, mode, px, wait_ms, before_acquire)
        end
        if rc ~= zk.OK then Z.fail(rc, "set " .. mine.path) end
        local h = L.holds[mine.path]
        if h then remember(mine.path, key, lock, owner, mode, mine.token, px) end
        return mine.token
    end
    -- Try-once without a queue entry when the read says it would wait.
    if wait_ms == 0 and snap then
        local probe = { seq = math.huge, mode = mode }
        snap.queue[#snap.queue + 1] = probe
        local g = grants_me(snap.queue, probe)
        if not g then return nil end
    end
    if before_acquire then
        local ok, why = before_acquire(key, { exists = snap ~= nil and #snap.queue > 0, path = lock,
                                    mode = mode, lock = true })
        if ok == false or type(ok) == "string" then
            if wait_ms == 0 then return nil end
            return { err = "TRYAGAIN " .. (type(ok) == "string" and ok or why or
                                           "the policy refuses the lock now"):gsub("[\r\n]+", " ") }
        end
    end
    local until_ms = host.now() + wait_ms
    local path = create_request(lock, owner, mode, px)
    local token, why = settle(lock, path, until_ms)
    if not token then
        leave(path)
        if why == "gone" then return nil end
        return nil
    end
    remember(path, key, lock, owner, mode, token, px)
    L.stats.granted = L.stats.granted + 1
    notify("on_acquire", L.holds[path])
    return token
end

-- LOCK.RELEASE: 1 or 0.
function L.release(key, owner)
    local lock = L.lock_path(key)
    for _ = 1, Z.READ_TRIES do
        local snap = read_lock(lock)
        local mine, d = find_owner(snap, owner)
        if not mine or not mine.granted then return 0 end
        local rc
        if d.count > 1 then
            d.count = d.count - 1
            rc = zk.set(mine.path, encode_req(d), mine.version)
        else
            rc = zk.delete(mine.path, mine.version)
            mine.deleted = true
        end
        if rc == zk.OK then
            if mine.deleted then
                local h = forget(mine.path)
                if h then notify("on_release", h) end
            end
            return 1
        end
        if rc ~= zk.BADVERSION and rc ~= zk.NONODE and not Z.unknown(rc) then
            Z.fail(rc, "release " .. mine.path)
        end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- LOCK.RENEW: 1 or 0.  A hold of a session of ours that is over is not
-- renewed, whatever ZooKeeper still shows.
function L.renew(key, owner, px)
    local lock = L.lock_path(key)
    host.lease_wait()
    for _ = 1, Z.READ_TRIES do
        local snap = read_lock(lock)
        local mine, d = find_owner(snap, owner)
        if not mine or not mine.granted then return 0 end
        local h = L.holds[mine.path]
        local sid = zk.session()
        if h and (h.sid ~= sid or host.now() > h.deadline) then return 0 end
        d.lease_end = leader_now() + px
        local rc = zk.set(mine.path, encode_req(d), mine.version)
        if rc == zk.OK then
            if h then
                h.px, h.deadline = px, host.now() + px
                h.timer:start(px)
            end
            return 1
        end
        if rc == zk.NONODE then return 0 end
        if rc ~= zk.BADVERSION and not Z.unknown(rc) then Z.fail(rc, "renew " .. mine.path) end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- LOCK.CONVERT: a token, nil (WAIT over, old mode kept) or an error reply.
function L.convert(key, owner, mode, wait_ms)
    local lock = L.lock_path(key)
    local until_ms = host.now() + wait_ms
    local asked
    while true do
        local snap = read_lock(lock)
        local mine = find_owner(snap, owner)
        if not mine or not mine.granted then
            return { err = "ERR owner holds no lock on this key (LOCK.ACQUIRE first)" }
        end
        if mine.convert then
            return { err = "ERR owner's conversion of this lock is already waiting" }
        end
        if mine.granted == mode then return mine.token end
        if Q.is_down(mine.granted, mode) then
            mine.granted = mode
            local how = write_table(snap, mine)
            if how == "ok" then
                local h = L.holds[mine.path]
                if h then h.mode = mode end
                return mine.token
            end
        else
            mine.convert, mine.convert_at, mine.asked_convert = mode, snap.version + 1, math.floor(host.wall())
            local g = grants_me(snap.queue, mine)
            if g then
                mine.granted, mine.convert, mine.token = mode, nil, snap.token
                if write_table(snap, mine) == "ok" then
                    local h = L.holds[mine.path]
                    if h then h.mode, h.token = mode, snap.token end
                    return snap.token
                end
            elseif wait_ms == 0 then
                return nil
            elseif write_table(snap, mine) == "ok" then
                asked = mine.path
                break
            end
        end
    end
    local token, why = settle(lock, asked, until_ms, mode)
    if token then
        local h = L.holds[asked]
        if h then h.mode, h.token = mode, token end
        return token
    end
    -- Give the conversion up: the old mode stays.
    for _ = 1, Z.READ_TRIES do
        local snap = read_lock(lock)
        local me = snap and snap.by_seq[tonumber(asked:match("%-(%d+)$"))]
        if not me or not me.convert then break end
        if me.granted == mode and not me.convert then return me.token end
        me.convert = nil
        if write_table(snap, me) == "ok" then break end
    end
    if why == "deadlock" then
        return { err = "EDEADLK this conversion waits for a conversion that waits for it; " ..
                       "the old mode is kept" }
    end
    return nil
end

-- LOCK.INFO: {holders = {...}, waiters = {...}} as reply maps.
function L.info(key)
    local snap = read_lock(L.lock_path(key))
    local holders, waiters = {}, {}
    if not snap then return { map = { "holders", holders, "waiters", waiters } } end
    local now_wall, leader = host.wall(), leader_now()
    for _, e in ipairs(snap.queue) do
        local d = entry_data(e)
        if d and e.granted then
            local left = math.max(0, math.floor(d.lease_end - leader))
            holders[#holders + 1] = { map = { "owner", d.owner, "mode", e.granted, "token", e.token,
                                              "count", d.count, "lease_left_ms", left,
                                              "sidecar", d.sidecar, "client", d.client } }
        end
    end
    local function waiter(e, mode, kind, since)
        local d = entry_data(e)
        if d then
            waiters[#waiters + 1] = { map = { "owner", d.owner, "mode", mode,
                                              "waited_ms", math.max(0, math.floor(now_wall - since)),
                                              "kind", kind } }
        end
    end
    for _, c in ipairs(Q.conversions(snap.queue)) do waiter(c, c.convert, "conversion", c.asked_convert) end
    for _, e in ipairs(snap.queue) do
        if not e.granted then
            local d = entry_data(e)
            if d then waiter(e, e.mode, "new", d.asked) end
        end
    end
    return { map = { "holders", holders, "waiters", waiters } }
end

-- Session events: holds of an ended session are lost.
function L.on_session(event)
    if event ~= "lost" and event ~= "new" then return end
    local sid = zk.session()
    for path, h in pairs(L.holds) do
        if h.sid ~= sid or event == "lost" then
            forget(path)
            notify("on_lost", h, { reason = "session" })
        end
    end
end

function L.count()
    local n = 0
    for _ in pairs(L.holds) do n = n + 1 end
    return n
end

return L
