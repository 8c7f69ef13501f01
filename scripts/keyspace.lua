-- keyspace.lua — Redis keys as znodes.
--
--   key --policy.key_path or encode--> <root>/k/<name> --zk.get--> rec
--                                      (<root>/db/<n>/k/<name> in database n)
--   rec --put/delete (always conditional)--> zk.set / zk.create / zk.multi
--
-- One key is one znode; its data is a codec value (type, TTL, write nonce,
-- payload).  This module holds the policy, key paths and limits, reads
-- keys (deciding whether they are alive), plans writes with the lifetime
-- rule (K.plan_write, for K.put and txn.lua's commit), and puts and
-- deletes keys.  Below it, one module per mechanism:
--
--   signal (retry/abort)  zkio (result codes, retried reads, root, clock)
--   shared (shared reads, presumed absence)  guard (session guards)
--   owned (the owned-key cache, its deadline heap)  resolve (writes of
--   unknown outcome)  expiry (expiry, watches, loss)
--
-- It re-exports their K.* names for commands, policies and specs.
--
-- A read returns a record, `rec`:
--   key, path    the Redis key and its znode
--   node         the znode's stat, or nil when there is no znode
--   vtype, value the codec type and payload; ttl the stored TTL; nonce
--   deadline     when the key expires, on host.now()'s clock, or nil
--   live         the key exists for Redis: a node whose deadline passed
--                reads as absent everywhere, even before its delete lands
--   mine         the node is ephemeral and owned by our current session
--   dead_owner   the node is ephemeral and owned by one of our earlier
--                sessions: foreign, never re-adopted
--   owned        our owned-key entry for this node, when it is one
--   cached       the record came from the owned-key cache, not ZooKeeper
--
-- Lifetime: a key with a TTL is an EPHEMERAL znode owned by the session of
-- the sidecar that last wrote it; a key without TTL is PERSISTENT (the
-- policy may decide otherwise).  Writing a node whose lifetime or owner
-- differs from what we would create, or a node whose key has expired, is
-- one multi {delete(version), create}, so the key's lifetime follows its
-- last writer and every new key gets a new czxid (the fencing token); the
-- new node never starts at the old one's version (replace_ops).  A
-- collection with a TTL written through a second sidecar is shared, and
-- persistent from then on (shared_state).  Otherwise it is a versioned
-- set; an absent key is a create.  Never an unconditional write.
--
-- Writes of keys are sent grouped (the trailing `true` of zk.create,
-- zk.set, zk.delete and zk.multi): the bridge may send the writes of many
-- commands in one multi (group commit, sidecar/zk_group.c).  The key queues
-- already order the writes of one key, so a grouped write only has to land
-- between its submission and its answer.  A grouped create may answer no
-- stat; the code below then knows the new node's version (0) and leaves
-- its czxid unknown (a create whose stat is wanted is not grouped:
-- stat_wanted).  A script's commit with participant ops (its publishes,
-- txn.lua) is not grouped, so that messages keep their order.
--
-- Time: the owner of a key with a TTL counts its deadline on host.now()
-- from the acknowledgment of its write and deletes the node itself when it
-- passes (expiry.lua).  Other sidecars map the node's mtime (the ZooKeeper leader's
-- clock) onto host.now() with an offset learned from their own writes; the
-- offset errs by the write's reply latency, in the direction that makes
-- their deadline later, never earlier, than the real one (clock drift
-- aside).  host.wall() is never used for expiry.
--
-- Failures inside a command are raised as signals (signal.lua) caught by
-- txn.run: K.retry(delay) re-runs the command; K.abort(reply) ends it.

local codec = require "codec"
local errors = require "errors"
local queue = require "queue"
local H = require "hooks"
local S = require "signal"
local Z = require "zkio"
local G = require "guard"
local shared = require "shared"
local O = require "owned"
local L = require "resolve"
local X = require "expiry"

local K = {}
local state = Z.state
local writable = G.writable

-- For /metrics (zkresp.lua's M.stats).
K.stats = { shared_reads = 0 }

---------------------------------------------------------------------------
-- The names of the modules below, as commands, policies and specs use them

K.retry, K.abort, K.is_retry, K.is_abort = S.retry, S.abort, S.is_retry, S.is_abort
K.unknown, K.denied, K.fail, K.init, K.state = Z.unknown, Z.denied, Z.fail, Z.init, Z.state
K.root, K.keys_dir, K.ensure_path, K.children, K.stat = Z.root, Z.keys_dir, Z.ensure_path, Z.children, Z.exists
K.db, K.use_db, K.databases, K.key_names = Z.db, Z.use_db, Z.databases, Z.key_names
K.refresh_clock, K.ensure_clock, K.local_time, K.nonce = Z.refresh_clock, Z.ensure_clock, Z.local_time, Z.nonce
K.guard, K.guard_path, K.mark_path, K.refresh_guard, K.dead = G.guard, G.path, G.mark_path, G.refresh, G.dead
K.writable = G.writable
K.MARKS = G.MARKS
K.arrived, K.touched = shared.arrived, shared.touched
K.owned, K.owns = O.owned, O.owns -- (K.owned is replaced by K.compact)
K.may_write, K.on_watch, K.expire_one, K.expire_due, K.forget_session =
    X.may_write, X.on_watch, X.expire_one, X.expire_due, X.forget_session
K.EXPIRY_WAIT_MS = X.EXPIRY_WAIT_MS

-- The expiry timer (owned.lua's) runs K.expire_due, looked up when it
-- fires: the specs stop a sidecar's expiry by replacing it.
O.on_due = function() K.expire_due() end

local DEFAULT_POLICY = H.DEFAULTS
K.policy = DEFAULT_POLICY

-- Installs a policy table (hooks.lua's wrapped hooks); hooks it lacks fall
-- back to the defaults.  One plain table: every command looks hooks up.
function K.set_policy(p)
    local merged = {}
    for k, v in pairs(DEFAULT_POLICY) do merged[k] = v end
    for k, v in pairs(p) do merged[k] = v end
    K.policy = merged
end

---------------------------------------------------------------------------
-- Paths and limits

-- A policy's answer that breaks the contract fails the command like a
-- hook that raised, logged and counted (hooks.lua).
local function policy_error(hook, msg)
    H.bad_answer(hook, msg)
end

-- The default paths, <root>/k/<encoded key> (or the selected database's
-- directory), are remembered by zkio.lua; a policy's key_path may depend on
-- the client, so its answers are not.
local default_path = Z.key_path

function K.path(key)
    local key_path = K.policy.key_path
    if key_path == DEFAULT_POLICY.key_path then return default_path(key) end
    local p = key_path(key)
    if p ~= nil then
        if not H.valid_path(p, Z.root()) then
            policy_error("key_path", "key_path must return an absolute znode path or nil")
        end
        return p
    end
    return default_path(key)
end

-- The parent of a znode path.
function K.parent(path)
    return path:match("^(.*)/[^/]*$")
end
local parent = K.parent

function K.max_key_len()
    return (host.config and host.config.max_key_len) or 1024
end

function K.max_value_len()
    return (host.config and host.config.max_value_len) or 256 * 1024
end

-- The error text for a key over the cap, or nil.
function K.key_error(key)
    if #key > K.max_key_len() then return errors.KEY_TOO_LONG end
end

function K.value_error(value)
    if #value > K.max_value_len() then return errors.VALUE_TOO_LARGE end
end

---------------------------------------------------------------------------
-- Reading

-- Builds the record of `key` from a zk.get result (stat nil: no node).
--
-- Whether the key lives: a node of another session lives until its owner
-- deletes it or the session ends, whatever its TTL says on our clock (the
-- DESIGN's TTL rule): deciding from a clock estimate that another
-- sidecar's lock is over races with that sidecar re-creating it, and a
-- versioned delete cannot tell a node from its re-creation.  Its deadline
-- still answers PTTL.  Our own nodes, and persistent nodes, live until
-- their deadline.
function K.record(key, path, data, stat)
    local sid = zk.session()
    if not stat then return { key = key, path = path, live = false, sid = sid } end
    local v = codec.decode(data)
    local owner = stat.ephemeralOwner or 0
    -- (made at its size: owned and deadline are set below when they apply,
    -- sent by the read that made it)
    local rec = { key = key, path = path, live = false, sid = sid, node = stat,
                  vtype = v.type, value = v.payload, ttl = v.ttl, nonce = v.nonce,
                  mine = owner ~= 0 and owner == sid,
                  dead_owner = owner ~= 0 and owner ~= sid and G.dead[owner] == true,
                  owned = nil, deadline = nil, sent = nil }
    local o = O.owned[path]
    if o and o.sid == sid and v.nonce and o.nonce == v.nonce and o.version == stat.version then
        rec.owned = o
        o.doubted = nil -- the node is confirmed ours, as the entry says
        rec.deadline = o.deadline
    elseif v.ttl > 0 then
        K.ensure_clock(stat.mzxid)
        rec.deadline = K.local_time(stat.mtime, stat.mzxid, stat.mtime) + v.ttl
    end
    rec.live = (owner ~= 0 and owner ~= sid) or rec.deadline == nil or rec.deadline > host.now()
    if rec.live then shared.saw_live(path) end -- (a watch on its absence: shared.lua)
    return rec
end

-- The record of a key presumed absent, without reading it: a write with it
-- is a create, which fails (NODEEXISTS, a retry with a real read) if the
-- node exists.
function K.absent(key)
    local rec = K.record(key, K.path(key))
    rec.presumed = true
    return rec
end

-- The record of key presumed absent, or nil when it was seen to exist.
function K.presumed(key)
    local path = K.path(key)
    if shared.seen(path) then return nil end
    return K.absent(key)
end

-- A record read from ZooKeeper carries the stamp of its read (sent,
-- shared.lua's) and, for a node of ours, our guard as it was known when
-- the read was sent (rgv, rgcz): a write planned on it checks the guard at
-- that version (guard.lua's G.ops), so that it cannot land on a node that
-- someone else made after removing ours (removing a node of a live session
-- bumps its guard) at the version we read; a write to another session's
-- node checks the node's mark of that session as read before the stamp.
local function read_guard(rec, gv, gcz, sent)
    rec.sent = sent
    if rec.mine then rec.rgv, rec.rgcz = gv, gcz end
    return rec
end

-- (path: the key's node when known, else K.path(key))
function K.read(key, path)
    local rec = K.read_once(key, path)
    if X.awaited(rec) then
        K.arrived() -- the read below is sent after the wait
        rec = K.read_once(key, path)
    end
    return rec
end

-- A write of ours to path had an unknown outcome (O.doubt): a server
-- reached since may not have applied it (our removal moves no guard), so
-- reads of path go after a sync.
local function doubted(path) return (O.owned[path] or {}).doubted == true end

function K.read_once(key, path)
    path = path or K.path(key)
    local unsure = doubted(path)
    local s = not unsure and shared.serving(path)
    if s then
        K.stats.shared_reads = K.stats.shared_reads + 1
        return read_guard(K.record(key, path, s.data, s.stat and shared.copy_stat(s.stat)), s.gv, s.gcz, s.sent)
    end
    local mine = shared.read_start(path)
    local done <close> = setmetatable({}, { __close = function() shared.read_end(path, mine) end })
    if unsure then Z.sync(path) end
    local gv, gcz = G.now()
    local rc, data, stat = Z.get(path)
    if rc == zk.NONODE then data, stat = nil, nil end
    shared.saw(path, stat ~= nil)
    shared.read_done(path, mine, data, stat, gv, gcz)
    return read_guard(K.record(key, path, data, stat), gv, gcz, mine.sent)
end

-- Reads several keys at once: the gets run concurrently, READ_BATCH at a
-- time.  Returns a table key -> rec.
K.READ_BATCH = 128

function K.read_many(keys)
    local uniq, seen = {}, {}
    for _, k in ipairs(keys) do
        if not seen[k] then
            seen[k] = true
            uniq[#uniq + 1] = k
        end
    end
    local out = {}
    if #uniq <= 1 then
        for _, k in ipairs(uniq) do out[k] = K.read(k) end
        return out
    end
    local paths, results = {}, {}
    for i, k in ipairs(uniq) do paths[i] = K.path(k) end
    for i = 1, #paths do
        if doubted(paths[i]) then Z.sync(paths[i]) break end -- (one serves all)
    end
    local gv, gcz = G.now()
    local sent = shared.stamp()
    for first = 1, #uniq, K.READ_BATCH do
        Z.concurrently(zk.get, paths, first, math.min(first + K.READ_BATCH - 1, #uniq), results)
    end
    for i, k in ipairs(uniq) do
        local rc, data, stat = table.unpack(results[i], 1, 3)
        if rc == zk.OK then
            shared.saw(paths[i], true)
            out[k] = read_guard(K.record(k, paths[i], data, stat), gv, gcz, sent)
        elseif rc == zk.NONODE then
            shared.saw(paths[i], false)
            out[k] = K.record(k, paths[i])
        elseif rc == false or Z.unknown(rc) then
            out[k] = K.read(k) -- one at a time, with its retries
        else
            Z.fail(rc, "get")
        end
    end
    return out
end

---------------------------------------------------------------------------
-- The owned-key cache (owned.lua; guard.lua says why it is safe)

K.CACHE_WRITES = true

-- The record of a key this sidecar owns, from the owned-key cache, or nil.
-- Good only to try a versioned write: a failed one must be followed by a
-- fresh read, and so must any answer that depends on a mismatch.
function K.cached(key)
    local rec = K.CACHE_WRITES and O.cached(key, K.path(key)) or nil
    if rec then shared.saw_live(rec.path) end
    return rec
end

-- Milliseconds the key has left, or nil when it has no TTL.  Never more
-- than the TTL it was written with: another sidecar's deadline errs late by
-- up to the round trip that taught it the leader's clock.
function K.remaining(rec)
    if not rec.deadline then return nil end
    local left = rec.deadline - host.now()
    if rec.ttl and rec.ttl > 0 and left > rec.ttl then left = rec.ttl end
    return left
end

---------------------------------------------------------------------------
-- Writing

-- The ops that replace the node at `path` (now at `version`) by a new one
-- holding `data`, and the new node's version.
--
-- ZooKeeper restarts versions at 0 in a new node, and versions are all a
-- conditional write can check.  So a new node must never start at the
-- version the old one had, or a writer that read the old node (its owner
-- about to expire it, a compare-and-delete in flight) would hit the new one
-- with a delete meant for the old.  A node at version 0 is therefore
-- replaced by one at version 1: created empty and set, in the same multi.
-- So is any node when the policy wants the new one's czxid (on_acquire: a
-- multi answers a set's stat, not a create's), one at version 1 by one at 2.
local function replace_ops(path, version, data, flags, stat)
    local ops = { { "delete", path, version }, { "create", path, "", flags } }
    if version == 1 and stat then ops[3] = { "set", path, "", 0 } end
    if version == 0 or stat then
        ops[#ops + 1] = { "set", path, data, #ops - 2 }
        return ops, #ops - 2
    end
    ops[2][3] = data
    return ops, 0
end

-- The TTL a write of `ttl` ms (0: none) to `key` gets after the policy's
-- default (for a write without one; vtype given) and clamp.
local function ms_value(t, hook)
    if not H.ms_ok(t) then
        policy_error(hook, hook .. " must return a positive number of milliseconds below 2^63")
    end
    if math.type(t) ~= "integer" then t = math.tointeger(t) or math.ceil(t) end
    return t
end

-- (`clamped`: ttl went through the clamp already, a script's buffered
-- write: it is not clamped twice)
function K.effective_ttl(key, ttl, vtype, clamped)
    ttl = ttl or 0
    assert(math.type(ttl) == "integer" and ttl >= 0, "ttl must be a non-negative integer")
    if ttl == 0 and vtype then
        local dflt = K.policy.default_ttl
        if dflt then
            local d = dflt(key, type(vtype) == "string" and vtype or codec.type_name(vtype))
            if d ~= nil then ttl, clamped = ms_value(d, "default_ttl"), false end
        end
    end
    local clamp = K.policy.ttl
    if ttl > 0 and not clamped and clamp ~= DEFAULT_POLICY.ttl then -- the default keeps it
        ttl = math.max(1, ms_value(clamp(key, ttl), "ttl"))
    end
    return ttl
end

-- Asks the policy's before_acquire whether rec's key, absent or expired,
-- may be created now; nil, or the refusal's reason.  Asked once per
-- record.
function K.acquire_refused(rec)
    local hook = K.policy.before_acquire
    if not hook or rec.acquire_checked then return rec.acquire_refused end
    local no, why = hook(rec.key, { exists = rec.node ~= nil, path = rec.path })
    rec.acquire_checked = true
    if no then rec.acquire_refused = why or "the policy refuses to create the key now" end
    return rec.acquire_refused
end

-- Before a write creates rec's key: a key presumed absent is read first
-- (the hook must see what is there), then the policy may refuse.
local function check_acquire(rec)
    if not K.policy.before_acquire or rec.live then return end
    if rec.presumed then K.retry(0) end
    local why = K.acquire_refused(rec)
    if why then K.abort({ err = "TRYAGAIN " .. why:gsub("[\r\n]+", " ") }) end
end
K.check_acquire = check_acquire

-- What a write of rec's key stores: {ttl, lifetime, nonce, data, flags}.
local function write_plan(rec, vtype, payload, ttl, clamped)
    ttl = K.effective_ttl(rec.key, ttl, vtype, clamped)
    local lifetime = K.policy.lifetime(rec.key, codec.type_name(vtype), ttl > 0 and ttl or nil)
    if lifetime ~= "ephemeral" and lifetime ~= "persistent" then
        policy_error("lifetime", "lifetime must return \"ephemeral\" or \"persistent\"")
    end
    local nonce = Z.nonce()
    return {
        ttl = ttl, lifetime = lifetime, nonce = nonce, vtype = vtype, payload = payload,
        data = codec.encode({ type = vtype, ttl = ttl, nonce = nonce, payload = payload }),
        flags = lifetime == "ephemeral" and zk.EPHEMERAL or 0,
    }
end

-- Whether a write of a collection (hash, list, set, zset: a semaphore's
-- permits, a read lock's readers, a fair lock's queue) to rec's key adds to
-- what clients of another sidecar put there: the node is another live
-- session's, or already shared (persistent with a TTL).  Such a key is
-- written persistent, keeping its TTL, so that one holder's sidecar dying
-- does not take the others' entries with it: it ends by its TTL (deleted by
-- its last writer, read as absent by everyone once it passed) or when
-- emptied.  A string is one holder's value: it follows its last writer.
local function shared_state(rec, vtype, sid)
    local node = rec.node
    if not (node and rec.live) or vtype == codec.STRING or rec.vtype ~= vtype then return false end
    local owner = node.ephemeralOwner or 0
    if owner ~= 0 then return owner ~= sid end
    return (rec.ttl or 0) > 0
end

-- A write may change the node in place only while the key lives and the
-- node already has the lifetime and owner the write would give it.
local function in_place(rec, lifetime, sid)
    local owner = rec.node.ephemeralOwner or 0
    return rec.live and ((lifetime == "persistent" and owner == 0) or
                         (lifetime == "ephemeral" and owner ~= 0 and owner == sid))
end

-- The one planning of a write of a key, for K.put and txn.lua's commit:
-- what a write of `payload` (codec type vtype, ttl ms, 0: none) to rec's
-- key stores (write_plan: ttl, lifetime, nonce, vtype, payload, data,
-- flags) and how it is written:
--   w.rec          rec
--   w.kind         "create" (no node), "set" (in place), "replace"
--   w.ops          the ops that write it: a create, a set(version), or replace_ops
--   w.new_version  the node's version after it, for an answer with no stat
--   w.pmark_v      persistent: its mark's version known as planned
--   w.seen_zxid    the newest zxid seen as planned (resolve.lua)
-- In place only while the key lives: a key that expired is gone for Redis,
-- and writing it again makes a new node, so that its czxid (the fencing
-- token) grows with every acquisition.  sid: the session the write goes in
-- (default: the current one); clamped: K.effective_ttl's.  Guard ops are
-- the caller's (guard.lua).
function K.plan_write(rec, vtype, payload, ttl, sid, clamped)
    local w = write_plan(rec, vtype, payload, ttl, clamped)
    w.rec = rec
    local node = rec.node
    sid = sid or zk.session()
    if w.lifetime == "ephemeral" and shared_state(rec, vtype, sid) then
        w.lifetime, w.flags = "persistent", 0
    end
    if not node then
        w.kind, w.new_version = "create", 0
        w.ops = { { "create", rec.path, w.data, w.flags, presumed = rec.presumed } }
    elseif in_place(rec, w.lifetime, sid) then
        w.kind, w.new_version = "set", Z.next_version(node.version)
        w.ops = { { "set", rec.path, w.data, node.version } }
    else
        w.kind = "replace"
        w.ops, w.new_version = replace_ops(rec.path, node.version, w.data, w.flags, H.has("on_acquire"))
    end
    w.seen_zxid = zk.seen_zxid()
    if w.lifetime == "persistent" then w.pmark_v = G.pmark_known(rec.path) end
    return w
end

K.notify_acquire, K.notify_release = O.notify_acquire, O.notify_release

-- Whether a create of path should answer the node's stat, so not be
-- grouped: for the commands queued behind it on the key, which it serves
-- as a read (shared.lua's wrote), or for an on_acquire hook (the fencing
-- token).
function K.stat_wanted(path)
    return queue.length(path) > 1 or H.has("on_acquire")
end

-- Writes `payload` of codec type `vtype` to rec's key, to live `ttl` ms
-- (0: no TTL).  Returns when the write is confirmed; raises a retry when
-- the record is stale (someone wrote in between) or the write did not
-- apply.
function K.put(rec, vtype, payload, ttl, deadline)
    local path = rec.path
    -- Only a delete or a script's commit writes from the cache (guard.lua).
    assert(not rec.cached, "K.put of a cached record")
    check_acquire(rec)
    local w = K.plan_write(rec, vtype, payload, ttl)
    if w.lifetime == "ephemeral" then G.await() end -- (its mark first)
    -- a kept TTL keeps its deadline, unless the policy moved the TTL
    if deadline and w.ttl == ttl and ttl > 0 then w.deadline = deadline end
    local lifetime, data = w.lifetime, w.data
    -- From here nothing yields until the write is sent.
    writable(rec)
    local sid = zk.session()
    local kind, ops = w.kind, w.ops
    local rc, stat, results
    local gv, gcz = G.now()
    local sent
    if kind == "set" then
        G.ops(ops, { rec }, {})
        sent = shared.touched(path)
        if #ops == 1 then
            rc, stat = zk.set(path, data, rec.node.version, true)
        else
            rc, results = G.multi(ops, true)
            if rc == zk.OK and results[1] then stat = results[1].stat end
        end
    elseif kind == "replace" then
        local last = #ops -- a set (a version-0 node's replacement) has the stat
        G.ops(ops, { rec }, { rec })
        sent = shared.touched(path)
        rc, results = G.multi(ops, true)
        if rc == zk.OK and ops[last][1] == "set" and results[last] then stat = results[last].stat end
    else
        local _
        sent = shared.touched(path)
        rc, _, stat = zk.create(path, data, w.flags, not K.stat_wanted(path))
        if rc == zk.NONODE then
            -- The parent is missing (a fresh ensemble, or a policy path).
            Z.ensure_path(parent(path))
            K.retry(0)
        end
    end
    local confirmed_by_read = false
    if rc == zk.NODEEXISTS then shared.saw(path, true) end
    if rc == zk.NODEEXISTS or rc == zk.BADVERSION or rc == zk.NONODE then
        -- a wrong presumption runs again at once, reading
        K.retry(rec.presumed and 0 or nil)
    elseif Z.unknown(rc) then
        stat, confirmed_by_read = L.resolve({ w }, {}, sid, gv, gcz), true
    elseif rc ~= zk.OK then
        Z.fail(rc, kind .. " " .. path)
    end
    shared.saw(path, true)
    if stat and not confirmed_by_read then Z.learn_offset(stat) end
    local owner_sid = zk.session()
    if lifetime == "ephemeral" and
       (owner_sid ~= sid or (stat and stat.ephemeralOwner ~= owner_sid)) then
        -- The write applied under a session given up meanwhile (the lease
        -- ran out while it was on its way): the node dies with that
        -- session, whose keys this sidecar has counted as lost.  Never
        -- answer that the key is held: a create runs again, reading; a
        -- change of a live key answers TRYAGAIN, as another's write before
        -- the session's end may carry it on (run again: applied twice).
        O.forget(path)
        if rec.live then K.abort({ err = errors.UNAVAILABLE }) end
        K.retry(0, nil, errors.UNAVAILABLE)
    elseif not confirmed_by_read then
        shared.wrote(path, sent, data, stat, gv, gcz)
    end
    O.remember(path, {
        key = rec.key,
        nonce = w.nonce, sid = owner_sid, lifetime = lifetime, vtype = vtype,
        payload = payload, ttl = w.ttl, deadline = w.deadline,
        version = stat and stat.version or w.new_version,
        czxid = stat and stat.czxid or nil,
        gv = gv, gcz = gcz,
    })
    O.wrote(rec, w, stat)
    return true
end

-- Deletes the nodes of `recs` (live keys just read): each multi takes as
-- many as one ZooKeeper request carries (at most MULTI_MAX nodes and
-- zk.max_request() bytes, see "Request size" in the README), so a DEL of
-- many or long keys is atomic per multi, not as a whole; done(part) is
-- called after each multi that applied.  A key whose delete alone does not
-- fit is refused before anything is deleted.
K.MULTI_MAX = 1000
K.DELETE_RESERVE = 4096 -- bytes kept for the guard ops of a multi

local function delete_some(recs, done)
    local rc
    local ops = {}
    for i = 1, #recs do writable(recs[i]) end
    for i = 1, #recs do
        local rec = recs[i]
        ops[i] = { "delete", rec.path, rec.node.version }
    end
    G.ops(ops, recs, recs)
    if #recs > 1 and zk.request_size(ops) > zk.max_request() then
        -- the guard ops took more than the reserve: halves
        local half = #recs // 2
        delete_some(table.move(recs, 1, half, 1, {}), done)
        return delete_some(table.move(recs, half + 1, #recs, 1, {}), done)
    end
    for i = 1, #recs do shared.touched(recs[i].path) end
    if #ops == 1 then
        rc = zk.delete(recs[1].path, recs[1].node.version, true)
    else
        rc = G.multi(ops, true)
    end
    if rc == zk.NONODE or rc == zk.BADVERSION then K.retry() end
    if Z.unknown(rc) then
        L.resolve({}, recs)
    elseif rc ~= zk.OK then
        Z.fail(rc, "delete")
    end
    for i = 1, #recs do O.deleted(recs[i].path) end
    if H.has("on_release") then
        for _, rec in ipairs(recs) do K.notify_release(rec) end
    end
    if done then done(recs) end
end

-- recs cut into runs that each fit one multi (MULTI_MAX nodes, the request
-- limit less DELETE_RESERVE); fails the command, before any write, when
-- one delete alone does not fit.
local function delete_parts(recs)
    local limit = zk.max_request()
    local parts, part, bytes = {}, {}, 0
    for _, rec in ipairs(recs) do
        local op = { "delete", rec.path, rec.node.version }
        local one = zk.request_size({ op })
        local each = zk.request_size({ op, op }) - one -- one more op's bytes
        if one > limit then Z.fail(zk.TOOBIG, "delete") end
        if #part > 0 and (#part >= K.MULTI_MAX or bytes + each > limit - K.DELETE_RESERVE) then
            parts[#parts + 1] = part
            part, bytes = {}, 0
        end
        if #part == 0 then bytes = one - each end -- the multi's own bytes
        part[#part + 1] = rec
        bytes = bytes + each
    end
    if #part > 0 then parts[#parts + 1] = part end
    return parts
end

function K.delete(recs, done)
    for _, part in ipairs(delete_parts(recs)) do delete_some(part, done) end
    return true
end

---------------------------------------------------------------------------
-- Session events

function K.on_session(event, sid)
    if event == "connected" or event == "new" then
        if event == "new" and state.sid and state.sid ~= sid then
            K.forget_session(state.sid)
        end
        state.sid = sid
        local ok, done, why = pcall(K.init)
        if not ok then
            host.log("warn", "init: " .. tostring(K.is_abort(done) and done.reply.err or done))
        elseif not done then
            -- At start a root zkresp may not write ends the process (exit
            -- status 2); later, every command fails closed and /readyz says
            -- why.
            if state.started then host.log("error", why) else host.fatal(why) end
        else
            state.started = true
        end
        K.refresh_guard()
        K.expire_due(true)
    elseif event == "lost" then
        K.forget_session(sid or state.sid)
    end
end

---------------------------------------------------------------------------
-- Idle compaction
--
-- Lua tables keep the room they grew to: after a burst of 10k locks the
-- owned-key cache, the expiry heap and the read caches hold space for the
-- burst's peak though they are nearly empty.  When the sidecar is idle
-- (lua_host_collect, through M.on_idle) each is replaced by a copy of what
-- it holds now, and the memo of key paths, which only saves an encoding, is
-- dropped.  Nothing a command relies on changes: the same entries stay.

function K.compact()
    O.compact()
    K.owned = O.owned
    shared.compact()
    X.compact()
    path_memo, path_memo_n = {}, 0
end

return K
