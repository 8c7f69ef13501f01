-- keyspace.lua — Redis keys as znodes.
--
--   key --policy.key_path or encode--> <root>/k/<name> --zk.get--> rec
--   rec --put/delete (always conditional)--> zk.set / zk.create / zk.multi
--
-- One key is one znode; its data is a codec value (type, TTL, write nonce,
-- payload).  This module reads keys (deciding whether they are alive),
-- writes them with the lifetime rule, resolves writes whose outcome was
-- lost, and expires the keys this sidecar owns.
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
-- new node never starts at the old one's version (replace_ops).  Otherwise
-- it is a versioned set; an absent key is a create.  Never an
-- unconditional write.
--
-- Writes of keys are sent grouped (the trailing `true` of zk.create,
-- zk.set, zk.delete and zk.multi): the bridge may send the writes of many
-- commands in one multi (group commit, sidecar/zk.c).  The key queues
-- already order the writes of one key, so a grouped write only has to land
-- between its submission and its answer.  A grouped create may answer no
-- stat; the code below then knows the new node's version (0) and leaves
-- its czxid unknown (a create whose stat is wanted is not grouped:
-- stat_wanted).  A script's commit that publishes is not grouped, so that
-- messages keep their order.
--
-- Time: the owner of a key with a TTL counts its deadline on host.now()
-- from the acknowledgment of its write and deletes the node itself when it
-- passes (a versioned delete with a check of the session guard, or, when
-- the guard no longer vouches for the node, a read to check the nonce
-- first).  Other sidecars map the node's mtime (the ZooKeeper leader's
-- clock) onto host.now() with an offset learned from their own writes; the
-- offset errs by the write's reply latency, in the direction that makes
-- their deadline later, never earlier, than the real one (clock drift
-- aside).  host.wall() is never used for expiry.
--
-- Failures inside a command are raised as signals caught by txn.run:
-- K.retry(delay) re-runs the command from its first read; K.abort(reply)
-- ends it with that reply.

local codec = require "codec"
local errors = require "errors"
local queue = require "queue"
local H = require "hooks"
local U = require "util"

local K = {}

-- How often the leader clock offset is refreshed by a write to <root>.
K.CLOCK_REFRESH_MS = 30000
-- Values up to this size are kept in the owned-key cache.
K.CACHE_VALUE_MAX = 1024
-- Tries of one ZooKeeper read when the connection drops under it.
K.READ_TRIES = 10

-- For /metrics (zkresp.lua's M.stats).
K.stats = { shared_reads = 0 }

local owned = {}    -- path -> entry, see remember()
local heap = {}     -- min-heap of {at, path, entry}: when to expire what
local dead = {}     -- session id -> true for our earlier sessions
local state = {
    offset = nil,   -- leader ms - host.now() ms, learned from our writes
    sid = nil,      -- the session the last session event named
    counter = 0,    -- write nonce counter
    timer = nil,    -- expiry timer
    clock = nil,    -- clock refresh timer
}

K.owned = owned
K.dead = dead
K.state = state

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
-- Signals

local Retry = {}
local Abort = {}

-- recs: key -> record, reads the re-run may use (made after the command
-- arrived); why: the error to answer when no attempt is left (default
-- errors.CONTENDED)
function K.retry(delay, recs, why)
    error(setmetatable({ delay = delay, recs = recs, why = why }, Retry), 0)
end
function K.abort(reply) error(setmetatable({ reply = reply }, Abort), 0) end
function K.is_retry(e) return getmetatable(e) == Retry end
function K.is_abort(e) return getmetatable(e) == Abort end

-- A write whose outcome is unknown (the reply was lost with the
-- connection, or the session went away under it).
local function unknown(rc)
    return rc == zk.CONNECTIONLOSS or rc == zk.OPERATIONTIMEOUT or
           rc == zk.SESSIONMOVED or rc == zk.SESSIONEXPIRED
end
K.unknown = unknown

-- ZooKeeper refuses us the node (see errors.zookeeper_denied).
local function denied(rc)
    return rc == zk.NOAUTH or rc == zk.INVALIDACL or rc == zk.AUTHFAILED
end
K.denied = denied

-- Ends the command for a ZooKeeper result it cannot go on with.
local function fail(rc, what)
    if rc == zk.TIMEOUT then K.abort({ err = errors.UNAVAILABLE }) end
    if rc == zk.CLOSING then K.abort({ err = errors.CLOSING }) end
    if rc == zk.TOOBIG then K.abort({ err = errors.request_too_large(zk.max_request()) }) end
    if denied(rc) then K.abort({ err = errors.zookeeper_denied(what) }) end
    K.abort({ err = errors.zookeeper(rc, what) })
end
K.fail = fail

-- A multi's code: the first failing operation's, else the multi's own.
local function first_error(rc, results)
    if rc ~= zk.OK and type(results) == "table" then
        for _, r in ipairs(results) do
            if r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then return r.rc end
        end
    end
    return rc
end

---------------------------------------------------------------------------
-- Paths and limits

function K.root()
    return (host.config and host.config.root) or "/zkresp"
end

-- <root>/k, remembered per root (host.config does not change while the
-- process runs, but the specs' sidecars each have their own).
local keys_dir_root, keys_dir
function K.keys_dir()
    local root = K.root()
    if root ~= keys_dir_root then keys_dir_root, keys_dir = root, root .. "/k" end
    return keys_dir
end

-- A policy's answer that breaks the contract fails the command like a
-- hook that raised (hooks.lua).
local function policy_error(msg)
    K.abort({ err = "ERR policy: " .. msg })
end

-- The default paths, <root>/k/<encoded key>, are remembered (a command
-- asks for its key's path several times: its queue, its read, its write),
-- up to PATH_MEMO_MAX keys; host.config.root is the VM's for its life.  A
-- policy's key_path may depend on the client, so its answers are not.
K.PATH_MEMO_MAX = 1024
local path_memo, path_memo_n = {}, 0

local function default_path(key)
    local p = path_memo[key]
    if p then return p end
    p = K.keys_dir() .. "/" .. host.key_encode(key)
    if path_memo_n >= K.PATH_MEMO_MAX then path_memo, path_memo_n = {}, 0 end
    path_memo[key], path_memo_n = p, path_memo_n + 1
    return p
end

function K.path(key)
    local key_path = K.policy.key_path
    if key_path == DEFAULT_POLICY.key_path then return path_memo[key] or default_path(key) end
    local p = key_path(key)
    if p ~= nil then
        if type(p) ~= "string" or p:sub(1, 1) ~= "/" or #p < 2 or p:sub(-1) == "/" then
            policy_error("key_path must return an absolute znode path or nil")
        end
        return p
    end
    return default_path(key)
end

local function parent(path)
    return path:match("^(.*)/[^/]*$")
end

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
-- Small ZooKeeper helpers for operations without side effects, asked again
-- when the connection drops under them.

local function zget(path)
    for _ = 1, K.READ_TRIES do
        local rc, data, stat = zk.get(path)
        if rc == zk.OK or rc == zk.NONODE then return rc, data, stat end
        if not unknown(rc) then fail(rc, "get") end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

local function zexists(path)
    for _ = 1, K.READ_TRIES do
        local rc, stat = zk.exists(path)
        if rc == zk.OK or rc == zk.NONODE then return rc, stat end
        if not unknown(rc) then fail(rc, "exists") end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

local function zsync(path)
    for _ = 1, K.READ_TRIES do
        local rc = zk.sync(path)
        if rc == zk.OK or rc == zk.NONODE then return end
        if not unknown(rc) then fail(rc, "sync") end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

function K.children(path)
    for _ = 1, K.READ_TRIES do
        local rc, names = zk.children(path)
        if rc == zk.OK then return names end
        if rc == zk.NONODE then return {} end
        if not unknown(rc) then fail(rc, "children") end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

K.stat = zexists

-- Creates `path` and its missing ancestors as empty persistent nodes.
function K.ensure_path(path)
    local prefix = ""
    for part in path:gmatch("[^/]+") do
        prefix = prefix .. "/" .. part
        local done = false
        for _ = 1, K.READ_TRIES do
            local rc = zk.create(prefix, "", 0)
            if rc == zk.OK or rc == zk.NODEEXISTS then done = true break end
            if not unknown(rc) then fail(rc, "create " .. prefix) end
        end
        if not done then K.abort({ err = errors.UNAVAILABLE }) end
    end
end

---------------------------------------------------------------------------
-- The leader clock

local function learn_offset(stat)
    if stat and stat.mtime then
        state.offset = stat.mtime - host.now()
        state.offset_at = host.now()
    end
end

-- Learns the offset by a write of our own to <root> (its data is unused).
function K.refresh_clock()
    for _ = 1, K.READ_TRIES do
        local rc, stat = zk.set(K.root(), "", -1)
        if rc == zk.OK then
            learn_offset(stat)
            return
        elseif rc == zk.NONODE then
            K.ensure_path(K.keys_dir())
        elseif not unknown(rc) then
            fail(rc, "set " .. K.root())
        end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

-- Learned again when older than CLOCK_REFRESH_MS (the clocks drift apart
-- slowly), on use: an idle sidecar writes nothing.  Every write of ours
-- refreshes it too.
function K.ensure_clock()
    if not state.offset or host.now() - state.offset_at > K.CLOCK_REFRESH_MS then K.refresh_clock() end
end

-- A leader timestamp (ms) on host.now()'s clock.
function K.local_time(leader_ms)
    return leader_ms - state.offset
end

---------------------------------------------------------------------------
-- Sessions

-- zk.session() answers the session's id (0 while there is none) and whether
-- it is connected.

-- The nonce of a new write: our instance id and a counter.
local nonce_inst, nonce_prefix
function K.nonce()
    state.counter = state.counter + 1
    local inst = host.instance or ""
    if inst ~= nonce_inst then
        nonce_inst, nonce_prefix = inst, (inst .. string.rep("\0", 8)):sub(1, 8)
    end
    return nonce_prefix .. string.pack(">I8", state.counter)
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
    local rec = { key = key, path = path, live = false, sid = sid }
    if not stat then return rec end
    local v = codec.decode(data)
    rec.node = stat
    rec.vtype, rec.value, rec.ttl, rec.nonce = v.type, v.payload, v.ttl, v.nonce
    local owner = stat.ephemeralOwner or 0
    rec.mine = owner ~= 0 and owner == sid
    rec.dead_owner = owner ~= 0 and owner ~= sid and dead[owner] == true
    local o = owned[path]
    if o and o.sid == sid and v.nonce and o.nonce == v.nonce and o.version == stat.version then
        rec.owned = o
        o.doubted = nil -- the node is confirmed ours, as the entry says
        rec.deadline = o.deadline
    elseif v.ttl > 0 then
        K.ensure_clock()
        rec.deadline = K.local_time(stat.mtime) + v.ttl
    end
    rec.live = (owner ~= 0 and owner ~= sid) or rec.deadline == nil or rec.deadline > host.now()
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

---------------------------------------------------------------------------
-- The session guard (see "The owned-key cache and the session guard"
-- below): its path and the version we know.

local guard = { sid = nil, path = nil, version = nil, czxid = nil }
K.guard = guard

function K.guard_path(sid)
    return K.root() .. "/g/" .. string.format("%016x", sid)
end

-- The guard's version and czxid as we know them now, for an entry about to
-- be written in our current session, or nil while no guard is known.
local function guard_now()
    if guard.version and guard.sid == zk.session() then return guard.version, guard.czxid end
end

---------------------------------------------------------------------------
-- Shared reads
--
-- Commands on one key run one after another (queue.lua), so a herd on one
-- key (Redisson's waiters all retrying when an unlock is published, many
-- clients GETting one lock) would read the node once per command.  But a
-- read sent after a command arrived answers that command as well as a read
-- of its own: it happens between the command's arrival and its reply, which
-- is all linearizability asks.  So K.read gives a command the node's latest
-- read when that read was sent after the command arrived (K.arrived,
-- stamped when the command is dispatched and again before each re-run) and
-- this sidecar has sent no write to the node since the read was sent
-- (K.touched): a later command of the same connection must see the writes
-- of the earlier ones.  What another sidecar writes meanwhile is concurrent
-- with the command, and a write based on a read is conditional anyway.

local stamp = 0                                     -- arrivals, reads and writes, in order
local arrival = U.per_command()                     -- coroutine -> its stamp
local shared, nshared = {}, 0                       -- path -> the latest read
local pending = {}                                  -- path -> the read in flight
K.SHARED_MAX = 4096

-- Stamps the running command's arrival (co: its coroutine, if the caller
-- has it at hand): only reads sent from now on serve it.
function K.arrived(co)
    stamp = stamp + 1
    arrival[co or coroutine.running()] = stamp
end

-- This sidecar is sending a write to path: no read sent before serves later
-- commands.  Returns the write's stamp (see wrote).
function K.touched(path)
    shared[path] = nil
    local p = pending[path]
    if p then p.stale = true end
    stamp = stamp + 1
    return stamp
end

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

-- gv, gcz: our guard as known when the read was sent (see K.read).
local function share(path, sent, data, stat, gv, gcz)
    if not shared[path] then nshared = nshared + 1 end
    if nshared > K.SHARED_MAX then shared, nshared = {}, 1 end
    shared[path] = { sent = sent, data = data, stat = stat and copy(stat), gv = gv, gcz = gcz }
end

-- Our write stamped `sent` left the node at path holding data, with stat (a
-- create's or set's answer): that is the node's state at a moment after
-- the write was sent, so it serves the commands that arrived before, as a
-- read sent then would (the writer holds the key's queue, so no other write
-- of ours comes in between; the next one forgets it).  A herd of scripts on
-- a lock reads nothing once one of them has taken it.
local function wrote(path, sent, data, stat, gv, gcz)
    if stat then share(path, sent, data, stat, gv, gcz) end
end

-- A record of a node of ours read from ZooKeeper carries our guard as it
-- was known when the read was sent (rgv, rgcz): a write planned on it
-- checks the guard at that version (guard_ops), so that it cannot land on
-- a node that someone else made after removing ours (removing a node of a
-- live session bumps its guard) at the version we read.
local function read_guard(rec, gv, gcz)
    if rec.mine then rec.rgv, rec.rgcz = gv, gcz end
    return rec
end

---------------------------------------------------------------------------
-- Presumed absence
--
-- A script's first attempt presumes absent a key it reads that is neither
-- in the owned-key cache nor seen to exist lately, and sends no read for
-- it (Buf:read).  Its commit proves the presumption as it proves every
-- read: the key's create fails if the node exists, a key only read is
-- asserted absent (absent_ops), and a script whose commit would send
-- nothing reads such keys before it answers (K.confirm_presumed).  A wrong
-- guess costs one failed request and a re-run with real reads, at once.
-- So a script that reads a key before creating it (Redisson's unlock
-- latch, a lock's first acquisition) costs one request, not two.  A key is
-- seen to exist when a read finds its node or a create of ours succeeds or
-- fails on it, and seen absent again when a read misses it or we delete
-- it; two generations of LIVE_MAX paths bound the memory.

local live_new, live_old, nlive = {}, {}, 0
K.LIVE_MAX = 4096

local function saw(path, exists)
    if not exists then
        live_new[path], live_old[path] = nil, nil
    elseif not live_new[path] then
        nlive = nlive + 1
        if nlive > K.LIVE_MAX then live_old, live_new, nlive = live_new, {}, 1 end
        live_new[path] = true
    end
end

-- The record of key presumed absent, or nil when it was seen to exist.
function K.presumed(key)
    local path = K.path(key)
    if live_new[path] or live_old[path] then return nil end
    return K.absent(key)
end

-- Commands waiting for another session's expired lock to go
-- (await_expiry): path -> list of their coroutines.
local expiry_waiters = {}
K.EXPIRY_WAIT_MS = 250

-- Commands that may write (write commands, scripts): coroutine -> true.
local writer = U.per_command()
function K.may_write(co) writer[co or coroutine.running()] = true end

-- A node of another live session whose TTL has passed on our estimate of
-- the leader's clock is its owner's to delete, and the owner does so at
-- its own deadline, which our estimate never precedes (it errs late).  A
-- command that may write and meets one, or one due within EXPIRY_WAIT_MS,
-- waits for that delete, on a watch, rather than answer at once that the
-- key is held: otherwise the owner's own clients, queued on the key there,
-- would take the lock again every time before a client of another sidecar
-- could (the owner's estimate and ours differ by a round trip).  Not when
-- the deadline is long past (the owner cannot reach ZooKeeper: its session
-- will end), and never beyond the command's deadline.  Returns true when
-- the node went or changed meanwhile.
local function await_expiry(rec)
    local now = host.now()
    local late = now - rec.deadline
    local limit = host.config and host.config.session_timeout or 10000
    if late > limit then return false end
    local path = rec.path
    local rc, stat = zk.exists(path, true)
    if rc ~= zk.OK then return rc == zk.NONODE end
    if stat.czxid ~= rec.node.czxid or stat.version ~= rec.node.version then return true end
    local co = coroutine.running()
    local list = expiry_waiters[path] or {}
    expiry_waiters[path] = list
    list[#list + 1] = co
    local function leave()
        for i = #list, 1, -1 do
            if list[i] == co then table.remove(list, i) end
        end
    end
    local timer = host.timer(function()
        leave()
        host.wake(co, false)
    end)
    -- However this coroutine ends, nothing wakes it later.
    local done <close> = setmetatable({}, { __close = function()
        timer:stop()
        leave()
    end })
    local wait = math.max(0, -late) + K.EXPIRY_WAIT_MS
    timer:start(math.max(0, math.min(wait, host.deadline() - host.now())))
    return host.suspend() == true
end

local function foreign_expiring(rec)
    local owner = rec.node and rec.node.ephemeralOwner or 0
    return owner ~= 0 and not rec.mine and not rec.dead_owner and rec.deadline ~= nil and
           rec.deadline <= host.now() + K.EXPIRY_WAIT_MS and writer[coroutine.running()]
end

function K.read(key)
    local rec = K.read_once(key)
    if foreign_expiring(rec) and await_expiry(rec) then
        K.arrived() -- the read below is sent after the wait
        rec = K.read_once(key)
    end
    return rec
end

function K.read_once(key)
    local path = K.path(key)
    local s = shared[path]
    local a = arrival[coroutine.running()]
    if s and a and s.sent > a then
        K.stats.shared_reads = K.stats.shared_reads + 1
        return read_guard(K.record(key, path, s.data, s.stat and copy(s.stat)), s.gv, s.gcz)
    end
    stamp = stamp + 1
    local mine = { sent = stamp }
    pending[path] = mine
    local done <close> = setmetatable({}, { __close = function()
        if pending[path] == mine then pending[path] = nil end
    end })
    local gv, gcz = guard_now()
    local rc, data, stat = zget(path)
    if rc == zk.NONODE then data, stat = nil, nil end
    saw(path, stat ~= nil)
    if pending[path] == mine and not mine.stale then share(path, mine.sent, data, stat, gv, gcz) end
    return read_guard(K.record(key, path, data, stat), gv, gcz)
end

-- Reads several keys at once: the gets run concurrently, READ_BATCH at a
-- time.  Returns a table key -> rec.
K.READ_BATCH = 128

-- zk.get of paths[first..last] in background coroutines; the results go to
-- results[i] = {rc, data, stat}.
local function get_concurrently(paths, first, last, results)
    local pending = last - first + 1
    local me = coroutine.running()
    local waiting = true
    -- Should this coroutine be closed while it waits, the workers must not
    -- wake it.
    local guard <close> = setmetatable({}, { __close = function() waiting = false end })
    for i = first, last do
        host.spawn(function()
            local ok, rc, data, stat = pcall(zk.get, paths[i])
            results[i] = ok and { rc, data, stat } or { false }
            pending = pending - 1
            if pending == 0 and waiting then host.wake(me) end
        end)
    end
    while pending > 0 do host.suspend() end
end

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
    local gv, gcz = guard_now()
    for first = 1, #uniq, K.READ_BATCH do
        get_concurrently(paths, first, math.min(first + K.READ_BATCH - 1, #uniq), results)
    end
    for i, k in ipairs(uniq) do
        local rc, data, stat = table.unpack(results[i], 1, 3)
        if rc == zk.OK then
            saw(paths[i], true)
            out[k] = read_guard(K.record(k, paths[i], data, stat), gv, gcz)
        elseif rc == zk.NONODE then
            saw(paths[i], false)
            out[k] = K.record(k, paths[i])
        elseif rc == false or unknown(rc) then
            out[k] = K.read(k) -- one at a time, with its retries
        else
            fail(rc, "get")
        end
    end
    return out
end

---------------------------------------------------------------------------
-- The owned-key cache and the session guard
--
-- The record of a key this sidecar owns, from the owned-key cache, or nil.
-- Good only to try a versioned write: a failed one must be followed by a
-- fresh read, and so must any answer that depends on a mismatch.
--
-- A version does not identify a node: when another sidecar deletes our key
-- and someone creates it again, the new node starts at version 0 and may
-- carry the version we cached, so a versioned delete from a stale cache
-- would remove someone else's lock (ZooKeeper has no czxid condition).
-- Each session therefore has a guard node, <root>/g/<session id>,
-- EPHEMERAL: whoever deletes or replaces a node that another live session
-- owns bumps that session's guard in the same multi (guard_ops), and every
-- write made from the cache carries a check of our guard at the version we
-- knew before the entry's node was written.  So an entry stands in for a
-- read until anyone else removes one of our nodes; then the check fails and
-- the command reads ZooKeeper.  A watch on the guard keeps the version we
-- know current; a stale one only makes a check fail.  Normal use never
-- bumps a guard: a lock pair is a create and one multi {delete, check
-- guard}, two requests, and no watch per key.
K.CACHE_WRITES = true


function K.cached(key)
    if not K.CACHE_WRITES then return nil end
    local path = K.path(key)
    local o = owned[path]
    if not o or o.value == nil or o.gv == nil or o.doubted or o.sid ~= zk.session() then return nil end
    -- A guard bumped since the entry was written fails its check anyway.
    if o.gv ~= guard.version or o.gcz ~= guard.czxid or o.sid ~= guard.sid then return nil end
    if o.deadline and o.deadline <= host.now() then return nil end
    return {
        key = key, path = path, cached = true, live = true, owned = o, gv = o.gv, sid = o.sid,
        node = { version = o.version, czxid = o.czxid, ephemeralOwner = o.sid },
        vtype = o.vtype, value = o.value, ttl = o.ttl, nonce = o.nonce,
        deadline = o.deadline, mine = true,
    }
end

-- Commands whose write found another session's guard missing: that
-- session is gone (its nodes go with it) or runs a zkresp without guards;
-- the command's next attempt writes without bumping it.
local unguarded = U.per_command()  -- coroutine -> {sid = true}

-- Appends to ops what guards the writes in them: a check of our guard for
-- each record of recs that is ours (from the cache: at the version known
-- before its node was written; read from ZooKeeper: at the version known
-- when it was read), and a bump of the owner's guard for each record whose
-- node another live session owns and that the ops delete or replace
-- (removed: a list of those records).  A record of ours read before our
-- guard was known, or under another guard node, is read again.
local function guard_ops(ops, recs, removed)
    local checked
    for i = 1, #recs do
        local rec = recs[i]
        local gv
        if rec.cached then
            gv = rec.gv
        elseif rec.mine then
            local now_gv, now_gcz = guard_now()
            if rec.rgv and rec.rgcz == now_gcz then
                gv = rec.rgv
            elseif now_gv then
                K.retry(0)
            end
        end
        if gv and not (checked and checked[gv]) then
            checked = checked or {}
            checked[gv] = true
            ops[#ops + 1] = { "check", guard.path, gv, guard_check = true }
        end
    end
    local sid = zk.session()
    local skip, bumped
    for i = 1, #removed do
        local rec = removed[i]
        local owner = rec.node and rec.node.ephemeralOwner or 0
        if owner ~= 0 and owner ~= sid and not dead[owner] then
            skip = skip or unguarded[coroutine.running()] or {}
            bumped = bumped or {}
            if not skip[owner] and not bumped[owner] then
                bumped[owner] = true
                ops[#ops + 1] = { "set", K.guard_path(owner), "", -1, guard_of = owner }
            end
        end
    end
end

-- After a multi with guard ops failed: a bump that found no guard is left
-- out of the command's next attempt.
local function note_guards(ops, results)
    if type(results) ~= "table" then return end
    for i, op in ipairs(ops) do
        local r = results[i]
        if op.guard_of and r and r.rc == zk.NONODE then
            local co = coroutine.running()
            unguarded[co] = unguarded[co] or {}
            unguarded[co][op.guard_of] = true
        elseif op.guard_check and r and r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then
            -- Our guard moved: learn its version (its watch may be late).
            host.spawn(K.refresh_guard)
        end
    end
end

-- Creates our session's guard if needed and learns its version, leaving a
-- watch on it (K.on_watch comes back here when it fires).
local function refresh_guard()
    local sid = zk.session()
    if sid == 0 then return end
    if guard.sid ~= sid then
        guard.sid, guard.path, guard.version, guard.czxid = sid, K.guard_path(sid), nil, nil
    end
    local path = guard.path
    for _ = 1, 3 do
        local rc, stat = zk.exists(path, true)
        if guard.sid ~= sid then return end
        if rc == zk.OK then
            if stat.ephemeralOwner == sid then
                guard.version, guard.czxid = stat.version, stat.czxid
            else
                guard.version, guard.czxid = nil, nil
            end
            return
        elseif rc ~= zk.NONODE then
            return -- the connection: the next session event comes back here
        end
        guard.version, guard.czxid = nil, nil
        local crc = zk.create(path, "", zk.EPHEMERAL)
        if crc == zk.NONODE then K.ensure_path(K.root() .. "/g") end
    end
end

function K.refresh_guard()
    local ok, err = pcall(refresh_guard)
    if not ok then
        host.log("warn", "session guard: " .. tostring(K.is_abort(err) and err.reply.err or err))
    end
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
-- Owned keys and their expiry

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

local function heap_push(item)
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

local function heap_pop()
    local top = heap[1]
    heap_remove(top)
    return top
end

-- Whenever the heap has items, the timer is due at or before the first
-- one's deadline (early is harmless: K.expire_due arms it again).
local function arm()
    if not state.timer then state.timer = host.timer(function() K.expire_due() end) end
    if heap[1] then
        state.timer:start(math.max(0, heap[1].at - host.now()))
    else
        state.timer:stop()
    end
end

local function forget(path)
    local e = owned[path]
    if e and e.item then heap_remove(e.item) end
    owned[path] = nil
end

-- A write or delete of path's node had an unknown outcome: our entry for
-- it no longer stands in for a read (K.cached) nor lets expiry delete
-- without looking, until the node is written again.
local function doubt(path)
    local e = owned[path]
    if e then e.doubted = true end
end

-- Our delete of path's node applied.
local function deleted(path)
    forget(path)
    saw(path, false)
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
        if ok and rc == zk.OK and owned[path] == e and e.czxid == nil and
           stat.version == e.version and codec.decode(data).nonce == e.nonce then
            e.czxid = stat.czxid
        end
    end)
end

-- What the policy's notifications (hooks.lua) say about an owned entry.
local function entry_info(path, e, extra)
    local info = { path = path, type = e.vtype and codec.type_name(e.vtype),
                   ttl = e.ttl > 0 and e.ttl or nil,
                   lifetime = e.lifetime, czxid = e.czxid,
                   value = e.vtype == codec.STRING and e.value or nil }
    for k, v in pairs(extra or {}) do info[k] = v end
    return info
end

-- After a watch fired on an owned node: once our own work on the key is
-- done (its queue), an entry still standing for a node that is gone or
-- carries another nonce was taken from us by another client: lost.
local function check_lost(path, e)
    local held <close> = queue.hold({ path })
    if owned[path] ~= e or e.sid ~= zk.session() then return end
    local rc, data = zk.get(path)
    local how
    if rc == zk.NONODE then
        how = "deleted"
    elseif rc == zk.OK and codec.decode(data).nonce ~= e.nonce then
        how = "overwritten"
    end
    if not how or owned[path] ~= e then return end
    forget(path)
    H.notify("on_lost", e.key, entry_info(path, e, { reason = how }))
end

-- A watch fired: on our guard (learn its version again), or on an owned
-- node (with an on_lost hook: was it taken from us?).
function K.on_watch(event, path)
    if path == guard.path then
        host.spawn(K.refresh_guard)
        return
    end
    local waiting = expiry_waiters[path]
    if waiting then
        expiry_waiters[path] = nil
        for _, co in ipairs(waiting) do host.wake(co, true) end
    end
    local e = owned[path]
    if e and (event == "deleted" or event == "changed") and H.has("on_lost") and e.key then
        host.spawn(function() pcall(check_lost, path, e) end)
    end
end

-- Records the node we just wrote.  Entries exist for the nodes with a TTL
-- and the ephemeral nodes written in our current session.
local function remember(path, w)
    if w.ttl > 0 or w.lifetime == "ephemeral" then
        local e = {
            key = w.key,
            nonce = w.nonce, version = w.version, czxid = w.czxid, sid = w.sid,
            lifetime = w.lifetime, vtype = w.vtype, ttl = w.ttl,
            -- the guard before the write, for an ephemeral node of ours
            gv = w.lifetime == "ephemeral" and w.gcz and w.gv or nil, gcz = w.gcz,
            value = #w.payload <= K.CACHE_VALUE_MAX and w.payload or nil,
            deadline = w.ttl > 0 and host.now() + w.ttl or nil,
        }
        forget(path)
        owned[path] = e
        if e.sid == zk.session() and e.key then follow(path, e) end
        if e.deadline then
            local item = { at = e.deadline, path = path, entry = e }
            heap_push(item)
            -- A later deadline than the first one changes nothing for the
            -- timer (the usual case: locks taken with one TTL).
            if heap[1] == item then arm() end
        end
    else
        forget(path)
    end
end

-- Deletes one owned node whose deadline passed, if it is still the node we
-- wrote.
function K.expire_one(path, e)
    local held <close> = queue.hold({ path })
    if owned[path] ~= e or e.deadline > host.now() then return end
    local sid, connected = zk.session()
    if e.sid ~= sid then return forget(path) end
    if not connected then
        -- Try again later (and at once when the session is back).
        heap_push({ at = host.now() + 1000, path = path, entry = e })
        return
    end
    local function expired(rc)
        if owned[path] == e then forget(path) end
        if rc ~= zk.BADVERSION then saw(path, false) end
        host.log("debug", "expired " .. path)
        if rc == zk.OK and e.key and H.has("on_expire") then
            H.notify("on_expire", e.key, entry_info(path, e))
        end
    end
    -- While the guard vouches for the entry (as for K.cached), nobody else
    -- removed our node: one multi {delete, check guard}, grouped.  Not once
    -- a write or delete of the entry's node has had an unknown outcome: the
    -- node may be gone, and another's made since at our version (the guard
    -- only tells of removals).
    if e.gv and not e.doubted and e.gv == guard.version and e.gcz == guard.czxid and
       e.sid == guard.sid then
        K.touched(path)
        local mrc = zk.multi({ { "delete", path, e.version }, { "check", guard.path, e.gv } }, true)
        if mrc == zk.OK then return expired(mrc) end
        if unknown(mrc) then e.doubted = true end
        -- failed, or its outcome unknown: look
    end
    -- Look before deleting: the node may have been replaced (an overwrite by
    -- another sidecar) or deleted and created again, and only the nonce
    -- proves it is still the one we wrote.  The delete checks our guard as
    -- it was before the look: whoever removes our node between the look and
    -- the delete bumps it, so the delete cannot hit a node made since at
    -- our version.
    local gv = guard_now()
    local rc, data, stat = zk.get(path)
    if rc == zk.NONODE then return forget(path) end
    if rc ~= zk.OK then
        heap_push({ at = host.now() + 1000, path = path, entry = e })
        return
    end
    if codec.decode(data).nonce ~= e.nonce or stat.version ~= e.version then
        return forget(path)
    end
    K.touched(path)
    if gv then
        local results
        rc, results = zk.multi({ { "delete", path, e.version }, { "check", guard.path, gv } })
        rc = first_error(rc, results)
        if rc == zk.BADVERSION and results and results[2] and results[2].rc == zk.BADVERSION then
            -- our guard moved since the look: look again soon
            host.spawn(K.refresh_guard)
            heap_push({ at = host.now() + 50, path = path, entry = e })
            return
        end
    else
        rc = zk.delete(path, e.version)
    end
    if rc == zk.OK or rc == zk.NONODE or rc == zk.BADVERSION then return expired(rc) end
    if unknown(rc) then
        e.doubted = true
        local ok, rc2, data = pcall(function()
            zsync(path)
            return zget(path)
        end)
        if ok and (rc2 == zk.NONODE or codec.decode(data).nonce ~= e.nonce) then
            if owned[path] == e then forget(path) end
            return
        end
    end
    heap_push({ at = host.now() + 1000, path = path, entry = e })
end

-- Runs from the expiry timer: deletes every owned key whose deadline passed
-- and re-arms the timer for the next one.  With `all` (back from a
-- disconnection) it looks at every owned key, not only those due by the
-- heap, whose retries may be scheduled later.
function K.expire_due(all)
    local now = host.now()
    local due, seen = {}, {}
    while heap[1] and heap[1].at <= now do
        local item = heap_pop()
        if owned[item.path] == item.entry and not seen[item.path] then
            seen[item.path] = true
            due[#due + 1] = item
        end
    end
    if all then
        for path, e in pairs(owned) do
            if e.deadline and e.deadline <= now and not seen[path] then
                seen[path] = true
                due[#due + 1] = { at = e.deadline, path = path, entry = e }
            end
        end
    end
    arm() -- for the keys still to come, while these are deleted
    for _, item in ipairs(due) do
        local ok, err = pcall(K.expire_one, item.path, item.entry)
        if not ok then
            host.log("warn", "expiring " .. item.path .. ": " ..
                     tostring(K.is_abort(err) and err.reply.err or err))
            if owned[item.path] == item.entry then
                heap_push({ at = host.now() + 1000, path = item.path, entry = item.entry })
            end
        end
    end
    arm()
end

---------------------------------------------------------------------------
-- Resolving writes of unknown outcome

-- After a create or set carrying `nonce` came back with an unknown result:
-- true and the node's stat when it applied, false when it did not.
local function resolve_write(path, nonce, lifetime)
    zsync(path)
    local rc, data, stat = zget(path)
    if rc == zk.NONODE then return false end
    if codec.decode(data).nonce ~= nonce then return false end
    if lifetime == "ephemeral" and stat.ephemeralOwner ~= zk.session() then
        -- It landed under a session that is gone: not ours to claim.
        return false
    end
    return true, stat
end

-- Same after a delete (or a multi of deletes) of `recs`: applied when no
-- node is still the one we deleted.
local function resolve_delete(recs)
    for _, rec in ipairs(recs) do
        zsync(rec.path)
        local rc, data, stat = zget(rec.path)
        if rc == zk.OK then
            local same
            if rec.node.czxid then
                same = stat.czxid == rec.node.czxid
            else
                same = codec.decode(data).nonce == rec.nonce
            end
            if same then return false end
        end
    end
    return true
end

-- A write we could not confirm before the command answered TRYAGAIN may
-- still have applied.  Look again in the background: a node that carries
-- its nonce is ours.  A key the write made (a lock acquired: absent or
-- expired before) is deleted, so that a client told "failed" holds
-- nothing; a key that lived before (a renewal) is kept and remembered, so
-- that it still expires (counted from now, later than the write: never
-- early).  w is what remember() takes.
function K.settle_later(path, w, keep)
    host.spawn(function()
        for attempt = 1, 8 do
            host.sleep(250 * attempt)
            local ok, done = pcall(function()
                local held <close> = queue.hold({ path })
                zsync(path)
                local gv = guard_now()
                local rc, data, stat = zget(path)
                if rc == zk.NONODE or codec.decode(data).nonce ~= w.nonce then return true end
                if keep then
                    local owner = stat.ephemeralOwner or 0
                    if w.sid == zk.session() and (owner == 0 or owner == w.sid) then
                        w.version, w.czxid = stat.version, stat.czxid
                        remember(path, w)
                    end
                    return true
                end
                K.touched(path)
                -- (checking our guard as before the read, as expiry does)
                local drc
                if gv and stat.ephemeralOwner == zk.session() then
                    local results
                    drc, results = zk.multi({ { "delete", path, stat.version }, { "check", guard.path, gv } })
                    drc = first_error(drc, results)
                else
                    drc = zk.delete(path, stat.version)
                end
                if drc == zk.OK then
                    host.log("info", "deleted unconfirmed write " .. path)
                    if owned[path] and owned[path].nonce == w.nonce then forget(path) end
                end
                return drc == zk.OK or drc == zk.NONODE
            end)
            if ok and done then return end
        end
    end)
end

-- Whether this session owns one of the nodes at paths (its writes may wait
-- for a reconnect as long as the lease runs: host.lease_wait).
function K.owns(paths)
    local sid = zk.session()
    for i = 1, #paths do
        local e = owned[paths[i]]
        if e and e.sid == sid and e.lifetime == "ephemeral" then return true end
    end
    return false
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
local function replace_ops(path, version, data, flags)
    if version == 0 then
        return { { "delete", path, 0 }, { "create", path, "", flags }, { "set", path, data, 0 } }, 1
    end
    return { { "delete", path, version }, { "create", path, data, flags } }, 0
end

-- Writes `payload` of codec type `vtype` to rec's key, to live `ttl` ms
-- (0: no TTL).  Returns when the write is confirmed; raises a retry when
-- the record is stale (someone wrote in between) or the write did not
-- apply.
-- The TTL a write of `ttl` ms (0: none) to `key` gets after the policy's
-- default (for a write without one; vtype given) and clamp.
local function ms_value(t, hook)
    if type(t) ~= "number" or t ~= t or t <= 0 then
        policy_error(hook .. " must return a positive number of milliseconds")
    end
    if math.type(t) ~= "integer" then t = math.tointeger(t) or math.ceil(t) end
    return t
end

function K.effective_ttl(key, ttl, vtype)
    ttl = ttl or 0
    assert(math.type(ttl) == "integer" and ttl >= 0, "ttl must be a non-negative integer")
    if ttl == 0 and vtype then
        local dflt = K.policy.default_ttl
        if dflt then
            local d = dflt(key, codec.type_name(vtype))
            if d ~= nil then ttl = ms_value(d, "default_ttl") end
        end
    end
    local clamp = K.policy.ttl
    if ttl > 0 and clamp ~= DEFAULT_POLICY.ttl then -- the default keeps it
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
    local ok, why = hook(rec.key, { exists = rec.node ~= nil, path = rec.path })
    rec.acquire_checked = true
    if ok == false or type(ok) == "string" then
        rec.acquire_refused = type(ok) == "string" and ok or
                              (type(why) == "string" and why or "the policy refuses to create the key now")
    end
    return rec.acquire_refused
end

-- How often a write to a node of one of our lost sessions looks again.
K.LOST_RETRY_MS = 200

-- Before any write planned on rec: a record read in an earlier session is
-- read again (its node may have gone with that session and another been
-- made since: a versioned write cannot tell), and a node that one of our
-- lost sessions still owns is waited for.  Such a node is a lock this
-- sidecar has already counted as lost (the local lease): it reads as held,
-- by nobody alive, and is never written, so a renewal or a release by its
-- old holder cannot answer 1; it vanishes when ZooKeeper ends that session.
local function writable(rec)
    if rec.sid == 0 or rec.sid ~= zk.session() then
        -- Between two sessions (the lease ran out): wait for the next one
        -- (a sync is parked until it connects), then plan again.
        if zk.session() == 0 then zsync(K.root()) end
        K.retry(0)
    end
    if rec.dead_owner then K.retry(K.LOST_RETRY_MS, nil, errors.LOST_SESSION) end
end
K.writable = writable

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
local function write_plan(rec, vtype, payload, ttl)
    ttl = K.effective_ttl(rec.key, ttl, vtype)
    local lifetime = K.policy.lifetime(rec.key, codec.type_name(vtype), ttl > 0 and ttl or nil)
    if lifetime ~= "ephemeral" and lifetime ~= "persistent" then
        policy_error("lifetime must return \"ephemeral\" or \"persistent\"")
    end
    local nonce = K.nonce()
    return {
        ttl = ttl, lifetime = lifetime, nonce = nonce, vtype = vtype, payload = payload,
        data = codec.encode({ type = vtype, ttl = ttl, nonce = nonce, payload = payload }),
        flags = lifetime == "ephemeral" and zk.EPHEMERAL or 0,
    }
end

-- A write may change the node in place only while the key lives and the
-- node already has the lifetime and owner the write would give it.
local function in_place(rec, lifetime, sid)
    local owner = rec.node.ephemeralOwner or 0
    return rec.live and ((lifetime == "persistent" and owner == 0) or
                         (lifetime == "ephemeral" and owner ~= 0 and owner == sid))
end

-- Tells the policy (hooks.lua) that we created a key: a lock acquired.
local function notify_acquire(rec, w, stat)
    H.notify("on_acquire", rec.key, {
        path = rec.path, type = codec.type_name(w.vtype), ttl = w.ttl > 0 and w.ttl or nil,
        lifetime = w.lifetime, czxid = stat and stat.czxid or nil,
        value = w.vtype == codec.STRING and w.payload or nil,
    })
end

local function notify_release(rec)
    H.notify("on_release", rec.key, {
        path = rec.path, type = rec.vtype and codec.type_name(rec.vtype),
        czxid = rec.node and rec.node.czxid,
        value = rec.vtype == codec.STRING and rec.value or nil,
    })
end

-- Whether a create of path should answer the node's stat, so not be
-- grouped: for the commands queued behind it on the key, which it serves
-- as a read (wrote), or for an on_acquire hook (the fencing token).
local function stat_wanted(path)
    return queue.length(path) > 1 or H.has("on_acquire")
end

function K.put(rec, vtype, payload, ttl)
    local path = rec.path
    -- Only a delete or a script's commit writes from the cache (guard_ops).
    assert(not rec.cached, "K.put of a cached record")
    check_acquire(rec)
    local w = write_plan(rec, vtype, payload, ttl)
    ttl = w.ttl
    local lifetime, nonce, data, flags = w.lifetime, w.nonce, w.data, w.flags
    -- From here nothing yields until the write is sent.
    writable(rec)
    local sid = zk.session()
    local node = rec.node
    local kind, rc, stat, results
    local new_version = 0
    local gv, gcz = guard_now()
    local sent
    if node then
        -- In place only while the key lives: a key that expired is gone for
        -- Redis, and writing it again makes a new node, so that its czxid
        -- (the fencing token) grows with every acquisition.
        if in_place(rec, lifetime, sid) then
            kind = "set"
            local ops = { { "set", path, data, node.version } }
            guard_ops(ops, { rec }, {})
            sent = K.touched(path)
            if #ops == 1 then
                rc, stat = zk.set(path, data, node.version, true)
            else
                rc, results = zk.multi(ops, true)
                if rc ~= zk.OK then note_guards(ops, results) end
                rc = first_error(rc, results)
                if rc == zk.OK and results and results[1] then stat = results[1].stat end
            end
        else
            kind = "replace"
            local ops
            ops, new_version = replace_ops(path, node.version, data, flags)
            local last = #ops -- a set (a version-0 node's replacement) has the stat
            guard_ops(ops, { rec }, { rec })
            sent = K.touched(path)
            rc, results = zk.multi(ops, true)
            if rc ~= zk.OK then note_guards(ops, results) end
            rc = first_error(rc, results)
            if rc == zk.OK and ops[last][1] == "set" and results and results[last] then
                stat = results[last].stat
            end
        end
    else
        kind = "create"
        local _
        sent = K.touched(path)
        rc, _, stat = zk.create(path, data, flags, not stat_wanted(path))
        if rc == zk.NONODE then
            -- The parent is missing (a fresh ensemble, or a policy path).
            K.ensure_path(parent(path))
            K.retry(0)
        end
    end
    local confirmed_by_read = false
    if rc == zk.NODEEXISTS then saw(path, true) end
    if rc == zk.NODEEXISTS or rc == zk.BADVERSION or rc == zk.NONODE then
        -- a wrong presumption runs again at once, reading
        K.retry(rec.presumed and 0 or nil)
    elseif unknown(rc) then
        doubt(path)
        local ok, applied, st = pcall(resolve_write, path, nonce, lifetime)
        if not ok then
            K.settle_later(path, {
                key = rec.key, nonce = nonce, sid = sid, lifetime = lifetime,
                vtype = vtype, payload = payload, ttl = ttl, gv = gv, gcz = gcz,
            }, rec.live)
            error(applied, 0)
        end
        if not applied then K.retry(nil, nil, errors.UNAVAILABLE) end
        stat, confirmed_by_read = st, true
    elseif rc ~= zk.OK then
        fail(rc, kind .. " " .. path)
    end
    saw(path, true)
    if stat and not confirmed_by_read then learn_offset(stat) end
    local owner_sid = zk.session()
    if lifetime == "ephemeral" and
       (owner_sid ~= sid or (stat and stat.ephemeralOwner ~= owner_sid)) then
        -- The write applied under a session given up meanwhile (the lease
        -- ran out while it was on its way): the node dies with that
        -- session, whose keys this sidecar has counted as lost.  Never
        -- answer that the key is held: run again, reading.
        forget(path)
        K.retry(0, nil, errors.UNAVAILABLE)
    elseif not confirmed_by_read then
        wrote(path, sent, data, stat, gv, gcz)
    end
    remember(path, {
        key = rec.key,
        nonce = nonce, sid = owner_sid, lifetime = lifetime, vtype = vtype,
        payload = payload, ttl = ttl,
        version = stat and stat.version or new_version,
        czxid = stat and stat.czxid or nil,
        gv = gv, gcz = gcz,
    })
    if not rec.live and H.has("on_acquire") then notify_acquire(rec, w, stat) end
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
    local rc, results
    local ops = {}
    for i = 1, #recs do writable(recs[i]) end
    for i = 1, #recs do
        local rec = recs[i]
        ops[i] = { "delete", rec.path, rec.node.version }
    end
    guard_ops(ops, recs, recs)
    if #recs > 1 and zk.request_size(ops) > zk.max_request() then
        -- the guard ops took more than the reserve: halves
        local half = #recs // 2
        delete_some(table.move(recs, 1, half, 1, {}), done)
        return delete_some(table.move(recs, half + 1, #recs, 1, {}), done)
    end
    for i = 1, #recs do K.touched(recs[i].path) end
    if #ops == 1 then
        rc = zk.delete(recs[1].path, recs[1].node.version, true)
    else
        rc, results = zk.multi(ops, true)
        if rc ~= zk.OK then note_guards(ops, results) end
        rc = first_error(rc, results)
    end
    if rc == zk.NONODE or rc == zk.BADVERSION then K.retry() end
    if unknown(rc) then
        for i = 1, #recs do doubt(recs[i].path) end
        if not resolve_delete(recs) then K.retry(nil, nil, errors.UNAVAILABLE) end
    elseif rc ~= zk.OK then
        fail(rc, "delete")
    end
    for i = 1, #recs do deleted(recs[i].path) end
    if H.has("on_release") then
        for _, rec in ipairs(recs) do notify_release(rec) end
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
        if one > limit then fail(zk.TOOBIG, "delete") end
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
-- Committing a script's transaction (txn.lua's buffered mode)
--
-- t.base: key -> the record read from ZooKeeper (or the cache, or presumed
-- absent); t.writes: key -> {kind = "put", vtype, payload, ttl} or
-- {kind = "delete"}, the last write of each key.  One multi, keys in
-- sorted order:
--   a key read, not written     check(version), or, when it had no node,
--                               create+delete (asserts it is still absent)
--   a key deleted               delete(version); absent: asserted absent
--   a key put                   set(version) / replace_ops / create, by
--                               the same lifetime rule as K.put
-- Each write is itself conditional on the version read, so a written key
-- needs no check of its own.  A script that wrote nothing and read fewer
-- than two keys from ZooKeeper sends nothing (its one read was current
-- when made); with two or more keys read, or any read served by the
-- owned-key cache, the checks alone are sent, so that what it answers is
-- one current snapshot.
--
-- Returns true when committed (or nothing to commit); raises K.retry when
-- a check or write failed or a write of unknown outcome did not apply.

local function absent_ops(ops, path, presumed)
    ops[#ops + 1] = { "create", path, "", 0, presumed = presumed }
    ops[#ops + 1] = { "delete", path, 0 }
end

function K.commit(t)
    local keys = {}
    for k in pairs(t.base) do keys[#keys + 1] = k end
    table.sort(keys)
    local sid = zk.session()
    local ops, puts, dels = {}, {}, {}
    for _, key in ipairs(keys) do
        local rec, w = t.base[key], t.writes[key]
        if w or rec.sid ~= sid then writable(rec) end
        if not w then
            if rec.node then
                ops[#ops + 1] = { "check", rec.path, rec.node.version }
            else
                absent_ops(ops, rec.path, rec.presumed)
            end
        elseif w.kind == "delete" then
            if rec.node then
                ops[#ops + 1] = { "delete", rec.path, rec.node.version }
                dels[#dels + 1] = rec
            else
                absent_ops(ops, rec.path, rec.presumed)
            end
        else
            check_acquire(rec)
            local p = write_plan(rec, w.vtype, w.payload, w.ttl)
            p.rec = rec
            if not rec.node then
                ops[#ops + 1] = { "create", rec.path, p.data, p.flags, presumed = rec.presumed }
                p.new_version = 0
            elseif in_place(rec, p.lifetime, sid) then
                ops[#ops + 1] = { "set", rec.path, p.data, rec.node.version }
                p.new_version = rec.node.version + 1
            else
                local rops, nv = replace_ops(rec.path, rec.node.version, p.data, p.flags)
                for _, o in ipairs(rops) do ops[#ops + 1] = o end
                p.new_version = nv
                p.replaced = true
            end
            p.op = #ops
            puts[#puts + 1] = p
        end
    end
    local cached, removed = {}, {}
    for _, key in ipairs(keys) do
        if t.base[key].cached then cached[#cached + 1] = t.base[key] end
    end
    for _, rec in ipairs(dels) do removed[#removed + 1] = rec end
    for _, p in ipairs(puts) do
        if p.replaced then removed[#removed + 1] = p.rec end
    end
    local from_cache = #cached > 0
    local all = {}
    for i, key in ipairs(keys) do all[i] = t.base[key] end
    guard_ops(ops, all, removed)
    -- a script's publishes: checks of its routes and one message per
    -- interested sidecar, in this multi (pubsub.lua)
    local messages = t.publishes and require("pubsub").commit_ops(t, ops) or 0
    if #puts == 0 and #dels == 0 and #keys < 2 and not from_cache and messages == 0 then
        return K.confirm_presumed(t)
    end
    local sent
    for _, op in ipairs(ops) do sent = K.touched(op[2]) end
    local gv, gcz = guard_now()
    local rc, results
    if #ops == 1 and ops[1][1] == "create" and not ops[1].ps then
        -- One create alone (a lock's acquire script): a plain create, which
        -- answers the node's stat when it is not grouped.
        local op = ops[1]
        local crc, _, cstat = zk.create(op[2], op[3], op[4], not stat_wanted(op[2]))
        rc, results = crc, { { rc = crc, stat = cstat } }
    else
        rc, results = zk.multi(ops, messages == 0)
    end
    if rc ~= zk.OK then
        note_guards(ops, results)
        if messages > 0 then require("pubsub").note_failed(ops, results) end
    end
    local frc = first_error(rc, results)
    local stats = {}
    if frc == zk.OK then
        for i, p in ipairs(puts) do
            stats[i] = results and results[p.op] and results[p.op].stat or nil
            if stats[i] then learn_offset(stats[i]) end
        end
    elseif frc == zk.NONODE or frc == zk.NODEEXISTS or frc == zk.BADVERSION then
        local presumed_wrong = false
        for i, r in ipairs(type(results) == "table" and results or {}) do
            if r.rc == zk.NONODE and ops[i][1] == "create" and not ops[i].ps then
                -- A missing parent (a fresh ensemble, or a policy path).
                K.ensure_path(parent(ops[i][2]))
                K.retry(0)
            elseif r.rc == zk.NODEEXISTS and ops[i][1] == "create" then
                saw(ops[i][2], true)
                presumed_wrong = presumed_wrong or ops[i].presumed == true
            end
        end
        -- a wrong presumption runs again at once, reading
        K.retry(presumed_wrong and 0 or nil)
    elseif unknown(frc) then
        for _, p in ipairs(puts) do doubt(p.rec.path) end
        for _, rec in ipairs(dels) do doubt(rec.path) end
        if #puts > 0 then
            local p = puts[1]
            local ok, applied, st = pcall(resolve_write, p.rec.path, p.nonce, p.lifetime)
            if not ok then
                for _, q in ipairs(puts) do
                    K.settle_later(q.rec.path, {
                        key = q.rec.key, nonce = q.nonce, sid = sid, lifetime = q.lifetime,
                        vtype = q.vtype, payload = q.payload, ttl = q.ttl, gv = gv, gcz = gcz,
                    }, q.rec.live)
                end
                error(applied, 0)
            end
            if not applied then K.retry(nil, nil, errors.UNAVAILABLE) end
            stats[1] = st
        elseif #dels > 0 then
            if not resolve_delete(dels) then K.retry(nil, nil, errors.UNAVAILABLE) end
        else
            K.retry(nil, nil, errors.UNAVAILABLE)
        end
    else
        fail(frc, "multi")
    end
    local owner_sid = zk.session()
    if owner_sid ~= sid then
        -- The commit applied under a session given up meanwhile: its
        -- ephemeral nodes die with it.  A script that wrote only such keys
        -- (a renewal, an acquisition) runs again, reading, rather than
        -- answer that it holds them; one that wrote others too answers,
        -- and this sidecar does not count the ephemeral ones as its own.
        local lasting = #dels > 0
        for _, p in ipairs(puts) do lasting = lasting or p.lifetime ~= "ephemeral" end
        for _, p in ipairs(puts) do
            if p.lifetime == "ephemeral" then forget(p.rec.path) end
        end
        if not lasting then K.retry(0, nil, errors.UNAVAILABLE) end
    end
    for i, p in ipairs(puts) do
        local st = stats[i]
        if frc == zk.OK then wrote(p.rec.path, sent, p.data, st, gv, gcz) end
        if owner_sid == sid or p.lifetime ~= "ephemeral" then remember(p.rec.path, {
            key = p.rec.key,
            nonce = p.nonce, sid = owner_sid, lifetime = p.lifetime, vtype = p.vtype,
            payload = p.payload, ttl = p.ttl,
            version = st and st.version or p.new_version,
            czxid = st and st.czxid or nil,
            gv = gv, gcz = gcz,
        }) end
        if not p.rec.live and H.has("on_acquire") then notify_acquire(p.rec, p, st) end
    end
    for _, p in ipairs(puts) do saw(p.rec.path, true) end
    for _, rec in ipairs(dels) do deleted(rec.path) end
    if H.has("on_release") then
        for _, rec in ipairs(dels) do notify_release(rec) end
    end
    return true
end

-- Before a script answers without a commit (it wrote nothing and read one
-- key, or it failed): the keys it presumed absent are read, and it runs
-- again if one of them exists.
function K.confirm_presumed(t)
    local keys = {}
    for key, rec in pairs(t.base) do
        if rec.presumed then keys[#keys + 1] = key end
    end
    if #keys == 0 then return true end
    local recs = K.read_many(keys)
    for _, rec in pairs(recs) do
        if rec.live then K.retry(0, recs) end
    end
    return true
end

---------------------------------------------------------------------------
-- Session events and start-up

-- Every owned key is lost with the session; its nodes, if still there, are
-- foreign from now on.
function K.forget_session(sid)
    if sid and sid ~= 0 then dead[sid] = true end
    if H.has("on_lost") then
        for path, e in pairs(owned) do
            if e.lifetime == "ephemeral" and e.key then
                H.notify("on_lost", e.key, entry_info(path, e, { reason = "session" }))
            end
        end
    end
    for p in pairs(owned) do owned[p] = nil end
    for i = #heap, 1, -1 do heap[i] = nil end
    if state.timer then state.timer:stop() end
end

-- Makes sure <root> and <root>/k exist and that this sidecar may write
-- the root (setting it teaches us the leader clock, K.refresh_clock), and,
-- when zkresp keeps its nodes to itself (--zk-acl creator), warns of a root
-- that anyone may write.  Returns true, or nil and the reason when
-- ZooKeeper refuses us (raises on other failures, such as an outage).
function K.init()
    local prefix = ""
    for part in K.keys_dir():gmatch("[^/]+") do
        prefix = prefix .. "/" .. part
        local rc
        for _ = 1, K.READ_TRIES do
            rc = zk.create(prefix, "", 0)
            if not unknown(rc) then break end
        end
        if denied(rc) then
            return nil, "ZooKeeper refuses zkresp the creation of " .. prefix ..
                        (rc == zk.NOAUTH and " (NOAUTH)" or " (" .. tostring(rc) .. ")")
        elseif rc ~= zk.OK and rc ~= zk.NODEEXISTS then
            fail(rc, "create " .. prefix)
        end
    end
    local rc, stat
    for _ = 1, K.READ_TRIES do
        rc, stat = zk.set(K.root(), "", -1)
        if not unknown(rc) then break end
    end
    if denied(rc) then
        return nil, "ZooKeeper refuses zkresp writes to " .. K.root() .. " (NOAUTH)"
    elseif rc ~= zk.OK then
        fail(rc, "set " .. K.root())
    end
    learn_offset(stat)
    if host.config and host.config.zk_acl == "creator" then
        local arc, acl = zk.get_acl(K.root())
        local writes = zk.PERM_WRITE | zk.PERM_CREATE | zk.PERM_DELETE | zk.PERM_ADMIN
        for _, a in ipairs(arc == zk.OK and acl or {}) do
            if a.scheme == "world" and a.id == "anyone" and a.perms & writes ~= 0 then
                host.log("warn", "the root " .. K.root() .. " lets anyone change it " ..
                         "(ACL world:anyone): zkresp's locks there are not private; " ..
                         "give it an ACL of zkresp's credentials only")
                break
            end
        end
    end
    return true
end

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

local function compacted(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

function K.compact()
    owned = compacted(owned)
    K.owned = owned
    local h = {}
    for i = 1, #heap do h[i] = heap[i] end
    heap = h
    shared = compacted(shared)
    pending = compacted(pending)
    live_new, live_old = compacted(live_new), compacted(live_old)
    expiry_waiters = compacted(expiry_waiters)
    path_memo, path_memo_n = {}, 0
end

return K
