-- owned.lua — the owned-key cache: an entry for each node this sidecar
-- wrote that has a TTL (a persistent node's across our sessions) or is
-- ephemeral in our current session, and the min-heap of their deadlines
-- that expiry.lua works through.
--
--   remember(path, w) --> owned[path] = entry --(deadline)--> heap --> timer
--                                             --> O.on_due (expiry.lua)
--   forget(path) / doubt(path) / deleted(path)
--   cached(key, path) --> a record standing in for a read (guard.lua says
--                         why that is safe)
--
-- An entry: key, nonce, version, czxid, sid, lifetime, vtype, ttl, value
-- (up to CACHE_VALUE_MAX bytes), deadline (host.now()'s clock), gv/gcz (our
-- guard before the write), doubted (a write or delete of the node had an
-- unknown outcome), item (its heap item).

local codec = require "codec"
local H = require "hooks"
local Z = require "zkio"
local G = require "guard"
local shared = require "shared"

local O = {}

-- Values up to this size are kept in the owned-key cache.
O.CACHE_VALUE_MAX = 1024

O.owned = {}    -- path -> entry, see remember()
local heap = {} -- min-heap of {at, path, entry}: when to expire what
local state = Z.state
local guard = G.guard

-- Set by expiry.lua: runs when the expiry timer fires.
function O.on_due() end

-- The entry for path, or nil (O.owned is replaced by compact: look it up
-- through here or O.owned, never keep the table).
function O.get(path) return O.owned[path] end

-- The first heap item, or nil.
function O.first() return heap[1] end

---------------------------------------------------------------------------
-- The deadline heap

-- The heap is indexed (item.idx), so that forgetting a key takes its item
-- out at once: nothing lingers until a deadline that no longer matters.
-- Both move the item at i into its place through a hole, not by swaps.
local function heap_up(i)
    local item = heap[i]
    local at = item.at
    while i > 1 do
        local p = i // 2
        local up = heap[p]
        if up.at <= at then break end
        heap[i], up.idx = up, i
        i = p
    end
    heap[i], item.idx = item, i
end

local function heap_down(i)
    local n = #heap
    local item = heap[i]
    local at = item.at
    while true do
        local c = 2 * i
        if c > n then break end
        local cat = heap[c].at
        if c < n and heap[c + 1].at < cat then
            c = c + 1
            cat = heap[c].at
        end
        if cat >= at then break end
        local down = heap[c]
        heap[i], down.idx = down, i
        i = c
    end
    heap[i], item.idx = item, i
end

function O.heap_push(item)
    heap[#heap + 1] = item
    item.idx = #heap
    heap_up(item.idx)
    if item.entry then item.entry.item = item end
end

local function heap_remove(item)
    local i = item.idx
    if not i or heap[i] ~= item then return end
    local n = #heap
    item.idx = nil
    if i == n then
        heap[n] = nil
        return
    end
    heap[i] = heap[n]
    heap[i].idx = i
    heap[n] = nil
    heap_up(i)
    heap_down(heap[i] and heap[i].idx or i)
end

function O.heap_pop()
    local top = heap[1]
    heap_remove(top)
    return top
end

-- Whenever the heap has items, the timer is due at or before the first
-- one's deadline (early is harmless: expiry.lua's expire_due arms it again).
function O.arm()
    if not state.timer then state.timer = host.timer(function() O.on_due() end) end
    if heap[1] then
        state.timer:start(math.max(0, heap[1].at - host.now()))
    else
        state.timer:stop()
    end
end

function O.forget(path)
    local e = O.owned[path]
    if e and e.item then heap_remove(e.item) end
    O.owned[path] = nil
end

-- A write or delete of path's node had an unknown outcome: our entry for
-- it no longer stands in for a read (cached) nor lets expiry delete
-- without looking, until the node is written again.
function O.doubt(path)
    local e = O.owned[path]
    if e then e.doubted = true end
end

-- Our delete of path's node applied.
function O.deleted(path)
    O.forget(path)
    shared.saw(path, false)
end

-- With notification hooks in the policy, one background read of the node
-- of entry e: its czxid (the fencing token the notifications carry) when
-- the write did not return it (a create inside a multi), and with on_lost
-- a watch, whose event makes check_lost look.  The default policy has
-- neither, and pays nothing.
local function follow(path, e)
    local watch = H.has("on_lost")
    if not watch and (e.czxid or not (H.has("on_release") or H.has("on_expire"))) then return end
    host.spawn(function()
        local ok, rc, data, stat = pcall(zk.get, path, watch)
        if ok and rc == zk.OK and O.owned[path] == e and e.czxid == nil and
           stat.version == e.version and codec.decode(data).nonce == e.nonce then
            e.czxid = stat.czxid
        end
    end)
end

-- What the policy's notifications (hooks.lua) say about an owned entry.
function O.entry_info(path, e, extra)
    local info = { path = path, type = e.vtype and codec.type_name(e.vtype),
                   ttl = e.ttl > 0 and e.ttl or nil,
                   lifetime = e.lifetime, czxid = e.czxid,
                   value = e.vtype == codec.STRING and e.value or nil }
    for k, v in pairs(extra or {}) do info[k] = v end
    return info
end

---------------------------------------------------------------------------
-- What the policy hears of our writes (keyspace.lua's put and delete,
-- txn.lua's commit)

-- We created a key: a lock acquired (info.czxid: its fencing token; with
-- info.replaced, a live key's node made again, so a new token).
function O.notify_acquire(rec, w, stat)
    H.notify("on_acquire", rec.key, {
        path = rec.path, type = codec.type_name(w.vtype), ttl = w.ttl > 0 and w.ttl or nil,
        lifetime = w.lifetime, czxid = stat and stat.czxid or nil,
        value = w.vtype == codec.STRING and w.payload or nil, replaced = rec.live or nil,
    })
end

function O.notify_release(rec)
    H.notify("on_release", rec.key, {
        path = rec.path, type = rec.vtype and codec.type_name(rec.vtype),
        czxid = rec.node and rec.node.czxid,
        value = rec.vtype == codec.STRING and rec.value or nil,
    })
end

-- After our write of rec's key applied (w: keyspace.lua's plan; stat: the
-- node's, when known): a new node (the key absent or expired, or a live
-- key's node made again) is an acquisition; an entry of ours whose key had
-- expired, replaced before our expiry deleted it, ended by its TTL first.
function O.wrote(rec, w, stat)
    if not rec.live and rec.owned and H.has("on_expire") then
        H.notify("on_expire", rec.key, O.entry_info(rec.path, rec.owned))
    end
    if (not rec.live or w.kind == "replace") and H.has("on_acquire") then O.notify_acquire(rec, w, stat) end
end

-- Records the node we just wrote.  Entries exist for the nodes with a TTL
-- (a persistent one's across sessions) and the ephemeral nodes written in
-- our current session.
function O.remember(path, w)
    if w.ttl > 0 or w.lifetime == "ephemeral" then
        local e = {
            key = w.key,
            nonce = w.nonce, version = w.version, czxid = w.czxid, sid = w.sid,
            lifetime = w.lifetime, vtype = w.vtype, ttl = w.ttl,
            -- the guard before the write, for an ephemeral node of ours
            gv = w.lifetime == "ephemeral" and w.gcz and w.gv or nil, gcz = w.gcz,
            value = #w.payload <= O.CACHE_VALUE_MAX and w.payload or nil,
            -- (a kept TTL's own deadline, else counted from now: never early)
            deadline = w.ttl > 0 and (w.deadline or host.now() + w.ttl) or nil,
        }
        O.forget(path)
        O.owned[path] = e
        if e.sid == zk.session() and e.key then follow(path, e) end
        if e.deadline then
            local item = { at = e.deadline, path = path, entry = e }
            O.heap_push(item)
            -- A later deadline than the first one changes nothing for the
            -- timer (the usual case: locks taken with one TTL).
            if heap[1] == item then O.arm() end
        end
    else
        O.forget(path)
    end
end

---------------------------------------------------------------------------
-- Reading from the cache
--
-- The record of a key this sidecar owns, from the owned-key cache, or nil.
-- Good only to try a versioned write: a failed one must be followed by a
-- fresh read, and so must any answer that depends on a mismatch.
function O.cached(key, path)
    local o = O.owned[path]
    if not o or o.value == nil or o.gv == nil or o.doubted or o.sid ~= zk.session() then return nil end
    -- A guard bumped since the entry was written fails its check anyway.
    if o.gv ~= guard.version or o.gcz ~= guard.czxid or o.sid ~= guard.sid then return nil end
    if o.deadline and o.deadline <= host.now() then return nil end
    return {
        key = key, path = path, cached = true, live = true, owned = o, gv = o.gv, gcz = o.gcz, sid = o.sid,
        node = { version = o.version, czxid = o.czxid, ephemeralOwner = o.sid },
        vtype = o.vtype, value = o.value, ttl = o.ttl, nonce = o.nonce,
        deadline = o.deadline, mine = true,
    }
end

-- Whether this session owns one of the nodes at paths (its writes may wait
-- for a reconnect as long as the lease runs: host.lease_wait).
function O.owns(paths)
    local sid = zk.session()
    for i = 1, #paths do
        local e = O.owned[paths[i]]
        if e and e.sid == sid and e.lifetime == "ephemeral" then return true end
    end
    return false
end

-- The session was lost: every entry goes with it but a persistent node's,
-- which outlives the session and is still ours to delete at its deadline
-- (by a look at its nonce first: expiry.lua's expire_one); nobody else
-- ever would, and readers would take it for absent, for good.
function O.drop_session()
    for p, e in pairs(O.owned) do
        if e.lifetime ~= "persistent" then O.forget(p) end
    end
    O.arm()
end

-- See keyspace.lua's K.compact.
function O.compact()
    O.owned = shared.copy(O.owned)
    local h = {}
    for i = 1, #heap do h[i] = heap[i] end
    heap = h
end

return O
