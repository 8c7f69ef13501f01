-- lockstore.lua — how a native lock lives in ZooKeeper (locks.lua's
-- nodes): the names and data of request nodes, the grant table in the lock
-- node's data, reading a lock into lockq's queue, and the conditional write
-- of the table.  Nothing here waits or decides.
--
-- The nodes (a namespace of their own, beside <root>/k):
--
--   <root>/l/<encoded key>     the lock node, a CONTAINER (the server
--                              deletes it some time after its last child):
--                              its data is the grant table, one line per
--                              granted request: "<seq> <mode> <token>
--                              <lease end at the grant, leader ms>
--                              [<converting to> <convert_at> <asked ms>]",
--                              "r <the writer's leader ms>" (the times
--                              count from the write's mtime: locktable.lua),
--                              then "q <request name>" for each request of
--                              the queue the writer decided on (up to
--                              LS.NAMES_MAX)
--   .../<MODE>.<owner hash>.<lease ms>.<nonce>-<seq>
--                              a request: EPHEMERAL_SEQUENTIAL, created by the
--                              sidecar that took it; its name says the mode
--                              asked, whose it is (a hash) and its lease (so
--                              another sidecar may grant it), its data the owner,
--                              hold count, lease end (leader clock, once
--                              renewed), when asked, sidecar, client, write
--                              id, reference (LS.encode_req)
--
--   LS.lock_path(key)            <root>/l/<encoded key>
--   LS.prefix(mode, owner, px)   a request's name before its sequence
--   LS.read(lock) -> snap        {path, version, queue, by_seq, token}
--   LS.snapshot(lock)            the table and the listing it goes with
--   LS.cached_grant(lock, seq, czxid)   a grant of ours this sidecar knows
--   LS.entry_data(e) / LS.find_owner(snap, owner) / LS.owner_there(snap, me, owner)
--   LS.from_lost_session(e, d)
--   LS.landed(sent, mine, d)     whether a write whose reply was lost went through
--   LS.write_table(snap, touch, granted, epoch) -> "ok" | "stale" | "unknown", mzxid, version
--   LS.leader_now()              the leader's clock, ms

local Q = require "lockq"
local LT = require "locktable"
local Z = require "zkio"
local G = require "guard"
local U = require "util"
local S = require "signal"
local E = require "errors"

local LS = {}

---------------------------------------------------------------------------
-- Names and data

-- <root>/l: the locks (asked for every watch event: zkresp.on_watch)
function LS.dir() return Z.root_dir("l") end

function LS.lock_path(key) return LS.dir() .. "/" .. host.key_encode(key) end
function LS.key_of(lock) return host.key_decode(lock:sub(#LS.dir() + 2)) end

-- A memo of what is derived from a name (an owner, a request's name or
-- path): at most `max` entries, emptied when full, and none whose key or
-- value is longer than CACHED_LEN bytes, so it stays small whatever the
-- keys and owners are.  A miss derives the value again.
local CACHED_LEN = 256

local function memo(max) return { t = {}, n = 0, max = max } end

local function keep(m, k, v)
    if #k > CACHED_LEN or (type(v) == "string" and #v > CACHED_LEN) then return v end
    if m.n >= m.max then m.t, m.n = {}, 0 end
    m.t[k], m.n = v, m.n + 1
    return v
end

-- FNV-1a, 64 bits, in hex: which requests may be an owner's (the data says).
-- Owners come back (each acquire and release names one).
local hashed = memo(1024)

function LS.owner_hash(owner)
    local hex = hashed.t[owner]
    if hex then return hex end
    local h = -3750763034362895579
    for i = 1, #owner do
        h = (h ~ owner:byte(i)) * 1099511628211
    end
    return keep(hashed, owner, string.format("%016x", h))
end

-- This sidecar, as request data names it: host.instance in hex.
local id_of, id
function LS.sidecar_id()
    local inst = host.instance or ""
    if inst ~= id_of then id_of, id = inst, LS.hex(inst) end
    return id
end

LS.hex = U.hex

-- A request's name: "<MODE>.<owner hash>.<lease ms>.<nonce>-<seq>": what
-- another sidecar needs to grant it without reading its node.
function LS.prefix(mode, owner, px, nonce)
    return mode .. "." .. LS.owner_hash(owner) .. "." .. tostring(px) .. "." .. nonce .. "-"
end

-- name -> mode, hash, px, seq (a name never changes: parsed once, while
-- the memo holds it), and with `lock` the request's path in it (the path
-- of the lock last asked for is kept beside them, up to CACHED_LEN bytes)
local parsed = memo(4096)

local function parse_name(name, lock)
    local p = parsed.t[name]
    if not p then
        local mode, hash, px, seq = name:match("^(%u%u)%.(%x+)%.(%d+)%.%x+%-(%-?%d+)$")
        if not mode then return nil end
        p = keep(parsed, name, { mode, hash, tonumber(px), tonumber(seq), false, false })
    end
    if not lock then return p[1], p[2], p[3], p[4] end
    if p[5] == lock then return p[1], p[2], p[3], p[4], p[6] end
    local path = lock .. "/" .. name
    if #path <= CACHED_LEN then p[5], p[6] = lock, path end
    return p[1], p[2], p[3], p[4], path
end

-- The sequence number of a request's path (asked a few times per hold).
local seqs = memo(1024)

function LS.seq_of(path)
    local seq = seqs.t[path]
    if seq then return seq end
    seq = tonumber(path:match("%-(%-?%d+)$", -12)) -- (Q.before: it may be negative)
    return seq and keep(seqs, path, seq)
end

local DATA_FMT = ">s4 I4 i8 i8 s2 s2"

-- A request's data: owner, hold count, lease end (leader ms, 0 until a
-- renewal writes it: see LS.lease_end), asked at (wall ms), sidecar
-- (instance, hex), client ("id addr"), and the id of the write that set
-- the count (LS.count_write; "" until one: renewals and conversions carry
-- it over), so that a sidecar that knows no id reads the rest, then the
-- reference the lease end is written against (the writer's estimate of
-- the leader's clock: read from the write's mtime, as the table's times
-- are, locktable.lua; 0 or absent: read as written).
-- A lease end carried over unchanged from the node as read (LS.decode_req
-- with its stat; a fresh one clears r.rl) goes onto the clock of the
-- leader we know (Z.carry: r.on its epoch, for LS.settle_carried).
function LS.encode_req(r)
    local lease, on = r.lease_end, nil
    if r.rl == lease and lease > 0 then lease, on = Z.carry(lease, r.rz, r.rt), Z.state.epoch end
    r.on = on
    local ref = Z.state.offset and math.floor(host.now() + Z.state.offset) or 0
    return string.pack(DATA_FMT .. " s1 i8", r.owner, r.count, math.floor(lease), math.floor(r.asked),
                       r.sidecar, r.client, r.wid or "", ref)
end

-- Whether hold record h of this sidecar (locks.lua's), its node found
-- gone (read once our server has what the lock's has) after a delete of
-- ours whose reply was lost, went by that delete: its session lasts and
-- no other sidecar removed a node of it since h was recorded (its guard
-- did not move, or moved once for another lock request: G.unmoved_but; a
-- hold recorded before its session's guard was known counts from the
-- guard's creation, version 0), and h's lease timer, which alone ends
-- h's lease, sent no delete (h.lease_sent), however near that lease's end.
function LS.still_ours(h)
    return not h.lease_sent and G.unmoved_but(h.sid, h.gv or 0, h.path)
end

-- Sets d's hold count to `count` for a write whose reply may be lost: a
-- new write id, which LS.landed looks for (a version would not do: a
-- renewal through another sidecar may land after our write).  The `sent`
-- record of that write: {path, count, wid}.
function LS.count_write(d, count, path)
    d.count, d.wid = count, Z.nonce()
    return { path = path, count = count, wid = d.wid }
end

-- The lease end (leader ms) of the granted entry e, its node's data d:
-- the newest renewal's (RENEW, a reentrant ACQUIRE: written in the node,
-- shorter or longer), else the grant's (written in the table).
function LS.lease_end(e, d)
    if d and d.lease_end > 0 then return d.lease_end end
    return e.lease_end or 0
end

-- The lease end of granted entry e of snap (its data d) on host.now()'s
-- clock, read by the clock of the leader that wrote it (the node's write,
-- or for the grant's, the table's): late, never early, when that is a
-- leader this sidecar never learned (Z.local_time).
function LS.lease_local(snap, e, d)
    local w = d.lease_end > 0 and e or snap.t
    Z.ensure_clock(w.mzxid)
    return Z.local_time(LS.lease_end(e, d), w.mzxid, w.mtime)
end

-- When a hold of ours ends (host.now()'s clock): the lease its sidecar
-- gave (`deadline`: the grant's, a renewal's; the node at `version` as it
-- wrote it), unless the node as read (data d, at `now_version`) holds a
-- renewal through another sidecar (it changed since) or a later one a
-- write of ours carried over (a count written over it, or taken back).
-- With `zxid` (the node's mzxid as read), the lease end maps by the clock
-- of the leader that wrote it (a renewal's writer writes it on that one's:
-- LS.settle_lease), not by the one this sidecar knows now.
function LS.hold_end(deadline, version, d, now_version, zxid, mtime)
    if zxid then Z.ensure_clock(zxid) end
    local renewed = d and d.lease_end > 0 and Z.local_time(d.lease_end, zxid, mtime)
    if renewed and (now_version ~= version or renewed > deadline) then return renewed end
    return deadline
end

-- The lease end (leader ms, an integer) px after now: the sum, held at
-- LEASE_END_MAX (2^62 ms, far beyond any lease) where a lease of nearly
-- math.maxinteger ms, which PX accepts as SET's does, would pass what an
-- integer (and the node's i8) can hold.
local LEASE_END_MAX = 1 << 62

function LS.end_after(now, px)
    local e = now + px
    return e >= LEASE_END_MAX and LEASE_END_MAX or math.floor(e)
end

-- The lease end (leader ms) a reentrant ACQUIRE for px writes: px from
-- now; through another sidecar than the hold's, never before the lease in
-- force `was` (host.now()'s clock, mapped by the leader's we know now).
function LS.renewed_end(was, px)
    local now = LS.end_after(LS.leader_now(), px)
    return was and math.max(now, math.floor(was + Z.state.offset)) or now
end

-- px after the commit at `stat` (leader ms) on the clock of the leader we
-- know (a read's stat of a leader never learned: late, never early).
function LS.after_commit(stat, px)
    return LS.end_after(Z.local_time(stat.mtime, stat.mzxid, stat.mtime) + Z.state.offset, px)
end

-- After our write of a lease end (px from now) in a request's node (data
-- d), answered `stat`: committed under a leader other than the one whose
-- clock we estimated (`epoch`: a change not yet learned), written again by
-- the commit's mtime (so read by the epoch of the node's mzxid), and again
-- while a rewrite commits under yet another.  The node's version after.
-- at_least: a lease end (host.now()'s clock) the rewrite keeps to, at least.
function LS.settle_lease(path, d, px, stat, epoch, at_least)
    if not stat or not stat.mtime then return stat and stat.version end
    Z.learn(stat)
    if epoch == nil or (stat.mzxid >> 32) == epoch then return stat.version end
    d.lease_end, d.rl = LS.after_commit(stat, px), nil
    if at_least then d.lease_end = math.max(d.lease_end, math.floor(at_least + Z.state.offset)) end
    local on = Z.state.epoch
    local rc, stat2 = zk.set(path, LS.encode_req(d), stat.version)
    if rc == zk.OK and stat2 then return LS.settle_lease(path, d, px, stat2, on, at_least) end
    return stat.version -- (written since, or unknown: that write stands)
end

-- With `stat`, the node's as read: the lease end counts from its mtime
-- (lv: as written), and is what LS.encode_req carries over.
function LS.decode_req(data, stat)
    local ok, owner, count, lv, asked, sidecar, client, at = pcall(string.unpack, DATA_FMT, data)
    if not ok then return nil end
    local wok, wid, rat, rok, ref = false, nil, nil, false, 0
    if at <= #data then wok, wid, rat = pcall(string.unpack, ">s1", data, at) end
    if wok and rat + 8 <= #data + 1 then rok, ref = pcall(string.unpack, ">i8", data, rat) end
    local lease_end = rok and stat and LT.at(lv, ref, stat.mtime) or lv
    return { owner = owner, count = count, lease_end = lease_end, lv = lv, asked = asked,
             sidecar = sidecar, client = client, wid = wok and wid or "",
             rz = stat and stat.mzxid, rt = stat and stat.mtime, rl = stat and lease_end }
end

-- After our write of request data d (answered stat) that carried a lease
-- end over (LS.encode_req) onto a leader other than the commit's: written
-- again on the commit's clock, as LS.settle_lease does.  The version after.
function LS.settle_carried(path, d, stat)
    if not (d.on and stat and stat.mzxid) or stat.mzxid >> 32 == d.on then return stat and stat.version end
    Z.learn(stat)
    local rc, stat2 = zk.set(path, LS.encode_req(d), stat.version)
    return rc == zk.OK and stat2 and LS.settle_carried(path, d, stat2) or stat.version
end

-- The same for such a write (data d, conditional on version `at`) whose
-- reply was lost, found landed by a read of its node (e: version, mzxid):
-- when nobody wrote it since, on the commit's clock, learned by a write.
function LS.settle_landed(path, d, e, at)
    if not (d and d.on and e and e.mzxid) or e.version ~= Z.next_version(at) or e.mzxid >> 32 == d.on then
        return e and e.version
    end
    return LS.settle_carried(path, d, { version = e.version, mzxid = e.mzxid, read = true })
end

-- The grant table's text (locktable.lua).
LS.NAMES_MAX, LS.encode_table, LS.decode_table = LT.NAMES_MAX, LT.encode, LT.decode

---------------------------------------------------------------------------
-- Reading a lock

-- The newest grant table this sidecar read or wrote, by lock: a listing
-- whose stat shows that version needs no read of the table, and a waiter
-- whose grant this sidecar wrote needs none either (nor a listing: the
-- table carries the queue its writer decided on, LS.encode_table).  A lock
-- node that went and came again starts its sequence anew: czxid tells them
-- apart.
local tables, ntables = {}, 0
local TABLES_MAX = 1024

local function remember_table(lock, t)
    local old = tables[lock]
    if old and old.czxid == t.czxid and not U.seq_before(old.version, t.version) then return end
    if not old then
        if ntables >= TABLES_MAX then tables, ntables = {}, 0 end
        ntables = ntables + 1
    end
    tables[lock] = t
end

local function table_of(stat, data)
    local lines, names, ref = LT.decode(data)
    LT.anchor(lines, ref, stat.mtime)
    return { version = stat.version, mzxid = stat.mzxid, mtime = stat.mtime, czxid = stat.czxid, lines = lines,
             names = names }
end

-- The grant table: {version, mzxid, mtime, czxid, lines = seq -> line, names (the
-- queue its writer decided on, or nil)}, or nil when the lock node is
-- absent.  woken: by a watch event, whose read-ahead of the lock this
-- takes when there is one (zk.get_ahead; else, or failed, it reads).
function LS.read_table(lock, woken)
    local rc, data, stat
    if woken then rc, data, stat = zk.get_ahead(lock) end
    if rc ~= zk.OK and rc ~= zk.NONODE then rc, data, stat = Z.get(lock) end
    if rc == zk.NONODE then return nil end
    local t = table_of(stat, data)
    remember_table(lock, t)
    return t
end

-- The last listing this sidecar read, by lock (of queues up to NAMES_MAX
-- requests): {names, pzxid, czxid}.  Replies come in the order of the
-- requests, so the last is the newest.
local listings, nlistings = {}, 0

local function remember_listing(lock, names, stat)
    if #names > LS.NAMES_MAX then
        listings[lock] = nil -- (counted still: nlistings only bounds the table)
        return
    end
    if not listings[lock] then
        if nlistings >= TABLES_MAX then listings, nlistings = {}, 0 end
        nlistings = nlistings + 1
    end
    listings[lock] = { names = names, pzxid = stat.pzxid, czxid = stat.czxid }
end

-- The request names, the lock node's pzxid and its stat, or nil when it
-- is absent.
function LS.read_children(lock)
    local rc, names, stat = Z.list(lock)
    if rc == zk.NONODE then return nil end
    remember_listing(lock, names, stat)
    return names, stat.pzxid, stat
end

-- The table written at `stat` (a write of ours that succeeded): lines,
-- names and reference as LS.encode_table answered them with its data.
function LS.wrote_table(lock, stat, lines, names, ref)
    if not stat then return end
    LT.anchor(lines, ref, stat.mtime)
    remember_table(lock, { version = stat.version, mzxid = stat.mzxid, mtime = stat.mtime, czxid = stat.czxid,
                           lines = lines, names = names })
end

-- The table this sidecar knows of lock node incarnation `czxid` at
-- `version`, or nil.
function LS.known_table(lock, czxid, version)
    local t = tables[lock]
    if t and t.czxid == czxid and t.version == version then return t end
end

-- The line of request `seq` in the table this sidecar last knew of lock
-- node incarnation `czxid`, when that table grants it: a grant is never
-- taken back but by its holder, so any table that shows it is news enough.
function LS.cached_grant(lock, seq, czxid)
    local t = tables[lock]
    if t and t.czxid == czxid and t.lines[seq] then return t end
end

-- Whether the request just before request `seq` in `names` clashes with
-- `mode` by the mode its name asks, and table t (this sidecar's, maybe
-- older than the listing) shows it waiting or granted in that mode: then
-- `seq` waits for it whatever a newer table says.  It is queued ahead of
-- `seq`, so it must be granted (in that mode) and then leave before `seq`
-- may be, unless it was converted since t, a write that touches its node
-- (LW.wait's `since` sees that).
local function waits_behind(t, names, seq, mode)
    local prev, pmode = nil, nil
    for _, name in ipairs(names) do
        local m, _, _, s = parse_name(name)
        if m and Q.before(s, seq) and (not prev or Q.before(prev, s)) then prev, pmode = s, m end
    end
    if not pmode or Q.compatible(pmode, mode) then return false end
    local line = t.lines[prev]
    return not line or (line.mode == pmode and not line.convert)
end

-- The table and a listing read no earlier than it (what LS.build needs):
-- t, names, pzxid, czxid, or nil when the lock node is absent.  The listing
-- is read first, or is `listing` ({names, pzxid, stat}: one read after our
-- request's create, beside it); a table this sidecar knows at the version
-- its stat shows is the one, else the table is read, and the listing again
-- if the table moved on in between.
--
-- seq, mode: a new request's, looking for what to wait for.  When the table
-- this sidecar knows is older than the listing but the request just ahead
-- of `seq` clashes with `mode` (waits_behind), that table is answered with
-- a fifth value, true: good enough to wait with (the request ahead is the
-- one to watch), not to grant with; the read is saved.
function LS.snapshot(lock, listing, seq, mode)
    local names, pzxid, stat
    if listing then
        names, pzxid, stat = listing.names, listing.pzxid, listing.stat
    else
        names, pzxid, stat = LS.read_children(lock)
    end
    if not names then return nil end
    local t = tables[lock]
    if t and t.czxid == stat.czxid then
        if t.version == stat.version then return t, names, pzxid, stat.czxid end
        if seq and waits_behind(t, names, seq, mode) then return t, names, pzxid, stat.czxid, true end
    end
    -- (the listing again must be of the node the table is: one removed
    -- once empty and made again between the two begins its numbers again,
    -- and the old table's lines would grant the new node's requests)
    for _ = 1, Z.READ_TRIES do
        t = LS.read_table(lock)
        if not t then return nil end
        if t.version == stat.version and t.czxid == stat.czxid then return t, names, pzxid, stat.czxid end
        names, pzxid, stat = LS.read_children(lock)
        if not names then return nil end
        if t.czxid == stat.czxid then return t, names, pzxid, stat.czxid end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- The lock's queue as lockq reads it, from a read of the table and one of
-- the children: {path, version, queue (by seq), by_seq, t (the table read),
-- token (the largest zxid the two reads saw: lockq's Q.token), stale}.
-- Read the table first: a grant after that read fails the write
-- conditional on its version, and a line whose node the later listing
-- lacks is a leftover.  older: the listing is the older read, made by
-- waiter `older` (its sequence) before the wait the table's grant ended.
-- It lacks the requests that came after it, all of them later in the
-- queue than every request it lists (sequence numbers only grow, modulo
-- 2^32: Q.before), and a
-- line for a sequence below its last one is still a leftover; a request
-- ahead of the waiter that the table does not grant has left (the grant
-- passed it), so it is left out.  stale: the table grants a request the
-- listing lacks; such a view decides no grant (its table would drop that
-- line).
local WRAP_NEAR = 1 << 30

function LS.build(lock, t, names, pzxid, older)
    local snap = { path = lock, version = t.version, queue = {}, by_seq = {}, t = t,
                   token = Q.observed({}, pzxid, t.mzxid) }
    local by, order, top, sorted, lo, hi = snap.by_seq, {}, nil, true, 0, 0
    for _, name in ipairs(names) do
        local mode, hash, px, seq, path = parse_name(name, lock)
        if mode and older and Q.before(seq, older) and not t.lines[seq] then mode = nil end
        if mode then
            -- every field in the constructor: the table is made at its size
            -- (a waiter's, without the grant's fields, all nil)
            local g, e = t.lines[seq], nil
            if g then
                e = { seq = seq, name = name, path = path, mode = mode, hash = hash, px = px,
                      granted = g.mode, token = g.token, lease_end = g.lease_end, read_lease = g.lease_end,
                      convert = g.convert, convert_at = g.convert_at, asked_convert = g.asked, read_asked = g.asked }
            else
                e = { seq = seq, name = name, path = path, mode = mode, hash = hash, px = px }
            end
            by[seq] = e
            order[#order + 1] = seq
            if not top or Q.before(top, seq) then top = seq else sorted = false end
            lo, hi = math.min(lo, seq), math.max(hi, seq)
        end
    end
    if older then
        for seq in pairs(t.lines) do
            if not top or Q.before(top, seq) then snap.stale = true end
        end
    end
    -- a request's sequence number is unique in its lock: sorting the
    -- numbers (in C, no comparator) orders the queue, but across the
    -- counter's wrap (from 2^31 - 1 to -2^31), which Q.before orders
    if not sorted then table.sort(order, lo < -WRAP_NEAR and hi > WRAP_NEAR and Q.before or nil) end
    local queue = snap.queue
    for i, seq in ipairs(order) do queue[i] = by[seq] end
    return snap
end

-- The view of granted request `seq` from this sidecar's newest listing of
-- the lock (which may list requests that came after the queue table t
-- carries): the listing is the older read (LS.build's `older`).  nil when
-- there is none, it lacks `seq`, or the view is stale.
function LS.newer_view(lock, t, seq)
    local l = listings[lock]
    if not (l and l.czxid == t.czxid) then return nil end
    local view = LS.build(lock, t, l.names, l.pzxid, seq)
    if view.stale or not view.by_seq[seq] then return nil end
    return view
end

-- The lock's queue (LS.snapshot, LS.build); nil when the node is absent.
-- synced: after a sync (a write whose answer was lost may not be applied
-- yet on a server reached since).
function LS.read(lock, synced)
    if synced then Z.sync(lock) end
    local t, names, pzxid = LS.snapshot(lock)
    if not t then return nil end
    return LS.build(lock, t, names, pzxid)
end

-- The request data of entry e (read once per snapshot), or nil when gone.
function LS.entry_data(e)
    if e.data == nil then
        local rc, data, stat = Z.get(e.path)
        e.data = rc == zk.OK and LS.decode_req(data, stat) or false
        e.version, e.owner_sid, e.ctime = stat and stat.version, stat and stat.ephemeralOwner, stat and stat.ctime
        e.mzxid, e.czxid, e.mtime = stat and stat.mzxid, stat and stat.czxid, stat and stat.mtime
    end
    return e.data or nil
end

-- Whether entry e (its data d read) was created by an earlier session of
-- this sidecar: a hold this sidecar counts lost, whatever ZooKeeper shows
-- until that session expires.  Never renewed, converted or reentered.
function LS.from_lost_session(e, d)
    return d.sidecar == LS.sidecar_id() and e.owner_sid ~= zk.session()
end

-- The owner's entry in snap, or nil.
function LS.find_owner(snap, owner)
    if not snap then return nil end
    local h = LS.owner_hash(owner)
    for _, e in ipairs(snap.queue) do
        if e.hash == h then
            local d = LS.entry_data(e)
            if d and d.owner == owner then return e, d end
        end
    end
end

-- "owner" when another request of `me`'s owner is in snap (the hash in
-- its name, then its data): a reentrant acquire found after our create.
function LS.owner_there(snap, me, owner)
    for _, e in ipairs(snap.queue) do
        if e ~= me and e.hash == me.hash then
            local d = LS.entry_data(e)
            if d and d.owner == owner then return "owner" end
        end
    end
end

-- Whether `names` (a listing's, or nil) has the request at `path`.
function LS.lists(names, path)
    local name = path:match("[^/]+$")
    for _, n in ipairs(names or {}) do
        if n == name then return true end
    end
end

-- Whether the lock is still as snap read it for our entry `mine` (a read
-- alone may be a lagging server's): a multi checking both versions.
function LS.confirmed(snap, mine)
    local rc, results = zk.multi({ { "check", snap.path, snap.version }, { "check", mine.path, mine.version } })
    return Z.first_error(rc, results) == zk.OK
end

-- Whether our write `sent` of the owner's request, whose reply was lost,
-- went through, as the owner's entry `mine` (data d) read since shows: a
-- delete (count 0) when the node is gone, the session that owned it
-- (sent.sid) lasts (its end removes its nodes too, maybe before the delete
-- was asked) and so does its lease (sent.deadline: G.ending; a hold this
-- sidecar records, sent.own, is ended by its lease timer alone: while that
-- timer sent no delete, and no other sidecar removed a node of its session
-- since it was recorded: LS.still_ours), a set of the hold
-- count (LS.count_write) when the node holds our count and our write's
-- id, whatever renewal landed after it.
function LS.landed(sent, mine, d)
    if sent.count == 0 then
        if mine and mine.path == sent.path then return false end
        if sent.own then return LS.still_ours(sent.own) end
        return G.lasts(sent.sid) and not G.ending(sent.deadline)
    end
    return mine ~= nil and mine.path == sent.path and d.count == sent.count and d.wid == sent.wid
end

---------------------------------------------------------------------------
-- Writes

-- A table we wrote at `stat` (new grants `granted` of `queue` estimated on
-- leader epoch `epoch`'s clock, lines carried from table `from`: Z.carry)
-- committed under another leader: written again on its clock, as
-- LS.settle_lease does (a conversion asked by the write, asked at its
-- commit).  The table's stat after (or `stat`: none, failed).
function LS.settle_grants(path, queue, granted, stat, epoch, from)
    if not (stat and stat.mtime and stat.mzxid) or epoch == nil or stat.mzxid >> 32 == epoch then return stat end
    Z.learn(stat)
    for _, e in ipairs(granted) do e.lease_end = LS.after_commit(stat, e.px) end
    for _, e in ipairs(queue) do
        if e.convert and e.asked_convert ~= e.read_asked then e.asked_convert = LS.after_commit(stat, 0) end
    end
    local data, lines, names, ref = LS.encode_table(queue, from)
    local on = Z.state.epoch
    local rc, stat2 = zk.set(path, data, stat.version)
    if rc ~= zk.OK or not stat2 then return stat end
    LS.wrote_table(path, stat2, lines, names, ref)
    return LS.settle_grants(path, queue, granted, stat2, on, from) -- (a rewrite under yet another leader)
end

-- Writes snap's table (after the caller changed its entries) conditional
-- on the version read, with `touch` (an entry whose node is rewritten in the
-- same multi to wake its watchers).  Returns "ok", "stale" (changed since:
-- read again), or "unknown" (the reply was lost: read again to learn);
-- with "ok", the zxid of the write (and touch's version is its node's).
-- granted, epoch: the new grants of this write and the epoch of the clock
-- their lease ends were estimated on (LS.settle_grants); the table's
-- version after it is the third answer.
function LS.write_table(snap, touch, granted, epoch)
    local data, lines, names, ref = LS.encode_table(snap.queue, snap.t)
    local rc, results, stat, est = nil, nil, nil, epoch or Z.state.epoch -- (carried lines too: LS.settle_grants)
    if touch then
        local d = LS.entry_data(touch)
        if not d then return "stale" end
        rc, results = zk.multi({ { "set", snap.path, data, snap.version },
                                 { "set", touch.path, LS.encode_req(d), touch.version } })
        rc = Z.first_error(rc, results)
        stat = rc == zk.OK and results[1].stat
    else
        rc, stat = zk.set(snap.path, data, snap.version)
    end
    if Z.unknown(rc) then
        -- landed as we wrote it, nothing written since: as if answered (its
        -- lease ends settled by the leader that committed it)
        local grc, tdata, tstat = zk.get(snap.path)
        if grc == zk.OK and tdata == data and tstat.version == Z.next_version(snap.version) then
            tstat.read = true -- (its mtime is the write's: Z.learn)
            local nrc, nstat = zk.OK, nil
            if touch then nrc, nstat = zk.exists(touch.path) end
            -- (the node's stat only while it is our write's: LS.settle_carried)
            local mine = nstat and nstat.version == Z.next_version(touch.version) and { version = nstat.version,
                                                                                         mzxid = nstat.mzxid, read = true }
            if nrc == zk.OK then rc, stat, results = zk.OK, tstat, { { stat = tstat }, { stat = mine or nil } } end
        end
    end
    if rc == zk.OK and touch then touch.version = Z.next_version(touch.version) end
    if rc == zk.OK then
        Z.learn(stat)
        LS.wrote_table(snap.path, stat, lines, names, ref)
        local version = stat and stat.version
        local ok, after = pcall(LS.settle_grants, snap.path, snap.queue, granted or {}, stat, est, snap.t)
        if ok and after ~= stat then version = after.version end
        if touch then touch.version = LS.settle_carried(touch.path, touch.data, results[2].stat) or touch.version end
        return "ok", stat and stat.mzxid or snap.token, version
    end
    if rc == zk.BADVERSION or rc == zk.NONODE then return "stale" end
    if Z.unknown(rc) then return "unknown" end
    Z.fail(rc, "set " .. snap.path)
end

function LS.leader_now()
    Z.ensure_clock()
    return host.now() + Z.state.offset
end

return LS
