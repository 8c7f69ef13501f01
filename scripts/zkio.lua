-- zkio.lua — ZooKeeper as the key layer calls it: what a result code
-- means, reads asked again when the connection drops under them, the root
-- and its key directory, the leader clock, and write nonces.
--
--   code --unknown / denied / fail / first_error--> what the caller does
--   get, exists, sync, children, ensure_path    READ_TRIES, then UNAVAILABLE
--   refresh_clock / ensure_clock / local_time   leader ms <-> host.now()
--
-- Nothing here knows keys or records: keyspace.lua and the modules below it
-- (guard, owned, expiry, resolve) build on these.

local errors = require "errors"
local S = require "signal"
local U = require "util"

local Z = {}

-- How often the leader clock offset is refreshed by a write to <root>.
Z.CLOCK_REFRESH_MS = 30000
-- Tries of one ZooKeeper read when the connection drops under it.
Z.READ_TRIES = 10

-- Shared by the key layer (keyspace.lua exports it as K.state).
Z.state = {
    offset = nil,   -- leader ms - host.now() ms, learned from our writes
    epoch = nil,    -- the leader epoch it was learned in
    offsets = {},   -- epoch -> the offset learned in it (the last few)
    sid = nil,      -- the session the last session event named
    counter = 0,    -- write nonce counter
    timer = nil,    -- expiry timer (owned.lua)
    clock = nil,    -- clock refresh timer
}
local state = Z.state

---------------------------------------------------------------------------
-- Result codes

-- A write whose outcome is unknown (the reply was lost with the
-- connection, or the session went away under it).
function Z.unknown(rc)
    return rc == zk.CONNECTIONLOSS or rc == zk.OPERATIONTIMEOUT or
           rc == zk.SESSIONMOVED or rc == zk.SESSIONEXPIRED
end
local unknown = Z.unknown

-- ZooKeeper refuses us the node (see errors.zookeeper_denied).
function Z.denied(rc)
    return rc == zk.NOAUTH or rc == zk.INVALIDACL or rc == zk.AUTHFAILED
end

-- Ends the command for a ZooKeeper result it cannot go on with.  Inside a
-- script these end the whole script (S.abort's `whole`): they are not a
-- command's answer, and a redis.pcall that caught one would let the script
-- go on and commit on a read it never made.
function Z.fail(rc, what)
    if rc == zk.TIMEOUT then S.abort({ err = errors.UNAVAILABLE }, true) end
    if rc == zk.CLOSING then S.abort({ err = errors.CLOSING }, true) end
    if rc == zk.TOOBIG then S.abort({ err = errors.request_too_large(zk.max_request()) }, true) end
    if Z.denied(rc) then S.abort({ err = errors.zookeeper_denied(what) }, true) end
    S.abort({ err = errors.zookeeper(rc, what) }, true)
end
local fail = Z.fail

-- A multi's code: the first failing operation's, else the multi's own.
function Z.first_error(rc, results)
    if rc ~= zk.OK and type(results) == "table" then
        for _, r in ipairs(results) do
            if r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then return r.rc end
        end
    end
    return rc
end

---------------------------------------------------------------------------
-- The root

function Z.root()
    return (host.config and host.config.root) or "/zkresp"
end

-- <root>/<name>, remembered per root (host.config does not change while
-- the process runs, but the specs' sidecars each have their own).
local dirs_root, dirs = nil, {}
function Z.root_dir(name)
    local root = Z.root()
    if root ~= dirs_root then dirs_root, dirs = root, {} end
    local d = dirs[name]
    if not d then
        d = root .. "/" .. name
        dirs[name] = d
    end
    return d
end

---------------------------------------------------------------------------
-- Databases (SELECT): database 0 is <root>/k, as before there were
-- databases; database n is <root>/db/<n>/k, made on its first write.  The
-- running command's database comes with it (M.dispatch, Z.use_db): every
-- key path it asks for is in that database.

local selected = U.per_command() -- coroutine -> database

-- Sets the running command's (or co's) database.
function Z.use_db(db, co) selected[co or coroutine.running()] = db end

-- The running command's database (0 outside a command).
function Z.db() return selected[coroutine.running()] or 0 end

function Z.databases() return (host.config and host.config.databases) or 16 end

-- The keys of database db (default: the running command's).
function Z.keys_dir(db)
    db = db or Z.db()
    if db == 0 then return Z.root_dir("k") end
    return Z.root_dir("db/" .. db .. "/k")
end

-- The keys of database db (default: the running command's), sorted: the
-- names under its directory that a key encodes to (KEYS, FLUSHDB; SCAN and
-- RANDOMKEY list the same way).  Expired keys not yet deleted are listed.
function Z.key_names(db)
    local keys = {}
    for _, name in ipairs(Z.children(Z.keys_dir(db))) do
        local key = host.key_decode(name)
        if key then keys[#keys + 1] = key end
    end
    table.sort(keys)
    return keys
end

-- The default znode of a key, <keys_dir>/<encoded key>, remembered per
-- database (a command asks for its key's path several times: its queue,
-- its read, its write), up to PATH_MEMO_MAX keys each.
Z.PATH_MEMO_MAX = 1024
local memos, memos_root = {}, nil

function Z.key_path(key)
    local db = Z.db()
    if Z.root() ~= memos_root then memos, memos_root = {}, Z.root() end
    local m = memos[db]
    if not m then
        m = { n = 0, paths = {} }
        memos[db] = m
    end
    local p = m.paths[key]
    if p then return p end
    p = Z.keys_dir(db) .. "/" .. host.key_encode(key)
    if m.n >= Z.PATH_MEMO_MAX then m.paths, m.n = {}, 0 end
    m.paths[key], m.n = p, m.n + 1
    return p
end

---------------------------------------------------------------------------
-- Start-up

-- The identities ZooKeeper knows this sidecar by ("digest:user:hash"),
-- as the creator ACL of a node it makes and deletes at once shows them;
-- nil when that failed.
function Z.own_identities()
    local probe = Z.root() .. "/acl-probe-" .. U.hex(host.instance or "")
    local rc = zk.create(probe, "", zk.EPHEMERAL)
    if rc ~= zk.OK and rc ~= zk.NODEEXISTS then return nil end
    local arc, acl = zk.get_acl(probe)
    zk.delete(probe, -1)
    if arc ~= zk.OK or #acl == 0 then return nil end
    local ids = {}
    for _, a in ipairs(acl) do ids[a.scheme .. ":" .. a.id] = true end
    return ids
end

-- Makes sure <root> and <root>/k exist and that this sidecar may write
-- the root (setting it teaches us the leader clock, Z.refresh_clock), and,
-- when zkresp keeps its nodes to itself (--zk-acl creator), warns of a root
-- that anyone may write.  Returns true, or nil and the reason when
-- ZooKeeper refuses us (raises on other failures, such as an outage).
function Z.init()
    local prefix = ""
    for part in Z.keys_dir():gmatch("[^/]+") do
        prefix = prefix .. "/" .. part
        local rc
        for _ = 1, Z.READ_TRIES do
            rc = zk.create(prefix, "", 0)
            if not unknown(rc) then break end
        end
        if Z.denied(rc) then
            return nil, "ZooKeeper refuses zkresp the creation of " .. prefix ..
                        (rc == zk.NOAUTH and " (NOAUTH)" or " (" .. tostring(rc) .. ")")
        elseif rc ~= zk.OK and rc ~= zk.NODEEXISTS then
            fail(rc, "create " .. prefix)
        end
    end
    local rc, stat
    for _ = 1, Z.READ_TRIES do
        rc, stat = zk.set(Z.root(), "", -1)
        if not unknown(rc) then break end
    end
    if Z.denied(rc) then
        return nil, "ZooKeeper refuses zkresp writes to " .. Z.root() .. " (NOAUTH)"
    elseif rc ~= zk.OK then
        fail(rc, "set " .. Z.root())
    end
    Z.learn_offset(stat)
    if host.config and host.config.zk_acl == "creator" then
        -- an entry that lets another identity than ours change the root
        -- (world:anyone, an ip, another digest user...)
        local arc, acl = zk.get_acl(Z.root())
        local writes = zk.PERM_WRITE | zk.PERM_CREATE | zk.PERM_DELETE | zk.PERM_ADMIN
        local mine = Z.own_identities()
        for _, a in ipairs(arc == zk.OK and acl or {}) do
            local ours = mine and mine[a.scheme .. ":" .. a.id]
            if a.perms & writes ~= 0 and not ours and (mine or a.scheme == "world") then
                local who = a.scheme == "world" and a.id == "anyone" and "anyone" or "others"
                host.log("warn", "the root " .. Z.root() .. " lets " .. who .. " change it " ..
                         "(ACL " .. a.scheme .. ":" .. a.id .. "): zkresp's locks there are not private; " ..
                         "give it an ACL of zkresp's credentials only")
                break
            end
        end
    end
    return true
end

---------------------------------------------------------------------------
-- Small ZooKeeper helpers for operations without side effects, asked again
-- when the connection drops under them.

-- fn(path) (zk.get, zk.exists, ...) until it answers OK or NONODE: what it
-- answered; another failure is raised as `what` failed.
local function read(what, fn, path)
    for _ = 1, Z.READ_TRIES do
        local rc, a, b = fn(path)
        if rc == zk.OK or rc == zk.NONODE then return rc, a, b end
        if not unknown(rc) then fail(rc, what) end
    end
    S.abort({ err = errors.UNAVAILABLE }, true)
end

function Z.get(path) return read("get", zk.get, path) end

function Z.exists(path) return read("exists", zk.exists, path) end

function Z.sync(path) read("sync", zk.sync, path) end

-- fn (zk.get, zk.exists) of paths[first..last] at once, in background
-- coroutines; the answers go to results[i] = {rc, a, b} ({false} when fn
-- raised).  Returns when all have answered.
function Z.concurrently(fn, paths, first, last, results)
    local pending = last - first + 1
    local me = coroutine.running()
    local waiting = true
    -- Should this coroutine be closed while it waits, the workers must not
    -- wake it.
    local guard <close> = setmetatable({}, { __close = function() waiting = false end })
    for i = first, last do
        host.spawn(function()
            local ok, rc, a, b = pcall(fn, paths[i])
            results[i] = ok and { rc, a, b } or { false }
            pending = pending - 1
            if pending == 0 and waiting then host.wake(me) end
        end)
    end
    while pending > 0 do host.suspend() end
end

function Z.children(path)
    local rc, names = read("children", zk.children, path)
    if rc == zk.NONODE then return {} end
    return names
end

-- rc (OK or NONODE), the child names and the parent's stat (its pzxid).
function Z.list(path) return read("children", zk.children, path) end

-- Creates `path` and its missing ancestors as empty persistent nodes.
function Z.ensure_path(path)
    local prefix = ""
    for part in path:gmatch("[^/]+") do
        prefix = prefix .. "/" .. part
        local done = false
        for _ = 1, Z.READ_TRIES do
            local rc = zk.create(prefix, "", 0)
            if rc == zk.OK or rc == zk.NODEEXISTS then done = true break end
            if not unknown(rc) then fail(rc, "create " .. prefix) end
        end
        if not done then S.abort({ err = errors.UNAVAILABLE }, true) end
    end
end

---------------------------------------------------------------------------
-- The leader clock

-- The offset is the leader's: a new leader (a new epoch, the high 32 bits
-- of a zxid) stamps mtimes by its own clock.  Each epoch's offset is kept
-- (the last few), so an mtime maps by the clock that stamped it.
local EPOCHS_KEPT = 4

function Z.learn_offset(stat)
    if stat and stat.mtime then
        local epoch = stat.mzxid and stat.mzxid >> 32 or 0
        state.offset = stat.mtime - host.now()
        state.offset_at, state.epoch = host.now(), epoch
        state.offsets[epoch] = state.offset
        state.offsets[epoch - EPOCHS_KEPT] = nil
    end
end

-- The same from the stat of a write of ours: its answer's (its mtime is
-- about now), or a read's of one whose answer was lost (stat.read: that
-- mtime may be long past, which would put the clock behind: only its
-- leader is learned, by a write of our own when newer, Z.ensure_clock).
function Z.learn(stat)
    if stat and stat.read then Z.ensure_clock(stat.mzxid) else Z.learn_offset(stat) end
end

-- Learns the offset by a write of our own to <root> (its data is unused).
function Z.refresh_clock()
    for _ = 1, Z.READ_TRIES do
        local rc, stat = zk.set(Z.root(), "", -1)
        if rc == zk.OK then
            Z.learn_offset(stat)
            return
        elseif rc == zk.NONODE then
            Z.ensure_path(Z.keys_dir())
        elseif not unknown(rc) then
            fail(rc, "set " .. Z.root())
        end
    end
    S.abort({ err = errors.UNAVAILABLE }, true)
end

-- Learned again when older than CLOCK_REFRESH_MS (the clocks drift apart
-- slowly), on use: an idle sidecar writes nothing.  Every write of ours
-- refreshes it too.
-- With `zxid`, a node's mzxid: learned at once when that node was written
-- under a leader newer than the one the offset was learned from.
function Z.ensure_clock(zxid)
    if not state.offset or host.now() - state.offset_at > Z.CLOCK_REFRESH_MS or
       (zxid and zxid >> 32 > state.epoch) then
        Z.refresh_clock()
    end
end

-- A leader timestamp (ms) on host.now()'s clock; with `zxid`, by the
-- offset of the epoch that stamped it, when known (an older leader's).
-- With `mtime` too (that node's, stamped by the same leader): the offset
-- of a leader we never learned (two changes while we wrote nothing, or a
-- newer one than ours, unless Z.ensure_clock learned it first) is taken as
-- if the node was written just now, and kept (one per leader met, until
-- learned): that leader's times map late by the time since, never early
-- by the clocks' difference.
function Z.local_time(leader_ms, zxid, mtime)
    local epoch = zxid and zxid >> 32
    local offset = epoch and state.offsets[epoch]
    if not offset and epoch and mtime and state.epoch then
        offset = mtime - host.now()
        state.offsets[epoch] = offset
    end
    return leader_ms - (offset or state.offset)
end

-- A leader timestamp `ms` read from a node written under the leader of
-- `zxid` (its mtime `mtime`), carried unchanged into a write of ours: on
-- the clock of the leader we write under (the one we know), so that it is
-- read by the epoch of the node's new mzxid as it was by the old one's.
function Z.carry(ms, zxid, mtime)
    if not (ms and ms > 0 and zxid and state.offset) or zxid >> 32 == state.epoch then return ms end
    return math.floor(Z.local_time(ms, zxid, mtime) + state.offset)
end

---------------------------------------------------------------------------
-- Versions

-- The version of a node at version v after one set of ours: ZooKeeper's is
-- a Java int, which goes on from -2^31 past 2^31 - 1, and the bridge takes
-- a node at -2 on to 0 (a second set at -1 in the same multi: zk.c's
-- wrap_sets), since at -1, "any version", the next compare-and-set would
-- apply whatever changed since.  Versions order as sequences do, modulo
-- 2^32 (U.seq_before).
function Z.next_version(v)
    if v == -2 then return 0 end
    if v == 2147483647 then return -2147483648 end
    return v + 1
end

-- read(path, ...)'s answer (zk.get, zk.exists, zk.children, Z.exists: a
-- stat its last value), for a node to be written or checked at the
-- version read, never at -1: only a node bumped at any version (a
-- session's marks and guard, a pub/sub directory or channel) gets there,
-- one bump short of 2^32, and there a conditional op would take any
-- version.  Such a node is moved on to 0 (one bump more only ever fails
-- someone's check) and read again.
function Z.past_any(read, path, ...)
    local r = table.pack(read(path, ...))
    local n = r.n
    while n > 1 and r[n] == nil do n = n - 1 end
    if r[1] ~= zk.OK or r[n].version ~= -1 then return table.unpack(r, 1, r.n) end
    local rc = zk.set(path, "", -1)
    if rc ~= zk.OK and rc ~= zk.NONODE and not Z.unknown(rc) then Z.fail(rc, "set " .. path) end
    return read(path, ...)
end

---------------------------------------------------------------------------
-- Write nonces

-- The nonce of a new write: our instance id and a counter.
local nonce_inst, nonce_prefix
function Z.nonce()
    state.counter = state.counter + 1
    local inst = host.instance or ""
    if inst ~= nonce_inst then
        nonce_inst, nonce_prefix = inst, (inst .. string.rep("\0", 8)):sub(1, 8)
    end
    return nonce_prefix .. string.pack(">I8", state.counter)
end

-- A token unique among this process's writes, shorter than a nonce (whose
-- 16 bytes it never equals): what a bump of one of our own session's marks
-- writes (guard.lua), 64 of which may share one multi.
function Z.own_nonce()
    state.counter = state.counter + 1
    return string.format("%x", state.counter)
end

return Z
