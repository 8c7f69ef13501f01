-- shared.lua — what this sidecar knows of nodes without asking again:
-- shared reads (one read serving every command that arrived before it was
-- sent) and presumed absence (which paths were seen to exist lately).
--
--   K.arrived() --stamp--> a command      K.touched(path) --stamp--> a write
--   a read sent after a command's stamp, with no write of ours since, may
--   answer that command (serving); a path not seen to exist lately may be
--   presumed absent (seen)
--
-- Shared reads.  Commands on one key run one after another (queue.lua), so
-- a herd on one key (Redisson's waiters all retrying when an unlock is
-- published, many clients GETting one lock) would read the node once per
-- command.  But a read sent after a command arrived answers that command
-- as well as a read of its own: it happens between the command's arrival
-- and its reply, which is all linearizability asks.  So K.read gives a
-- command the node's latest read when that read was sent after the command
-- arrived (arrived, stamped when the command is dispatched and again
-- before each re-run) and this sidecar has sent no write to the node since
-- the read was sent (touched): a later command of the same connection must
-- see the writes of the earlier ones.  What another sidecar writes
-- meanwhile is concurrent with the command, and a write based on a read is
-- conditional anyway.
--
-- Presumed absence.  A script's first attempt presumes absent a key it
-- reads that is neither in the owned-key cache nor seen to exist lately,
-- and sends no read for it (txn.lua's Buf:read).  Its commit proves the
-- presumption as it proves every read: the key's create fails if the node
-- exists, a key only read is asserted absent, and a script whose commit
-- would send nothing reads such keys before it answers (txn.lua,
-- confirm_presumed).  A wrong guess costs one failed request and a re-run
-- with real reads, at once.  So a script that reads a key before creating
-- it (Redisson's unlock latch, a lock's first acquisition) costs one
-- request, not two.  A key is seen to exist when a read finds its node or
-- a create of ours succeeds or fails on it, and seen absent again when a
-- read misses it or we delete it; two generations of LIVE_MAX paths bound
-- the memory.

local U = require "util"

local R = {}

R.SHARED_MAX = 4096
R.LIVE_MAX = 4096

local stamp = 0                                     -- arrivals, reads and writes, in order
local arrival = U.per_command()                     -- coroutine -> its stamp
local shared, nshared = {}, 0                       -- path -> the latest read
local pending = {}                                  -- path -> the read in flight

-- Stamps the running command's arrival (co: its coroutine, if the caller
-- has it at hand): only reads sent from now on serve it.
function R.arrived(co)
    stamp = stamp + 1
    arrival[co or coroutine.running()] = stamp
end

-- A stamp now: every read sent from here on carries a later one (guard.lua
-- orders the reads of a node after those of its owner's guard with it).
function R.stamp()
    stamp = stamp + 1
    return stamp
end

-- This sidecar is sending a write to path: no read sent before serves later
-- commands.  Returns the write's stamp (see wrote).
function R.touched(path)
    shared[path] = nil
    local p = pending[path]
    if p then p.stale = true end
    stamp = stamp + 1
    return stamp
end

function R.copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end
local copy = R.copy

-- A node's stat (the fields sidecar/lua_zk.c pushes), copied: made at its
-- size at once (a copy field by field grows the table four times, and
-- every read a command makes copies one or two).
function R.copy_stat(s)
    return { czxid = s.czxid, mzxid = s.mzxid, pzxid = s.pzxid, ctime = s.ctime, mtime = s.mtime,
             version = s.version, cversion = s.cversion, aversion = s.aversion,
             ephemeralOwner = s.ephemeralOwner, dataLength = s.dataLength, numChildren = s.numChildren }
end
local copy_stat = R.copy_stat

-- gv, gcz: our guard as known when the read was sent (see K.read).
local function share(path, sent, data, stat, gv, gcz)
    if not shared[path] then nshared = nshared + 1 end
    if nshared > R.SHARED_MAX then shared, nshared = {}, 1 end
    shared[path] = { sent = sent, data = data, stat = stat and copy_stat(stat), gv = gv, gcz = gcz }
end

-- Our write stamped `sent` left the node at path holding data, with stat (a
-- create's or set's answer): that is the node's state at a moment after
-- the write was sent, so it serves the commands that arrived before, as a
-- read sent then would (the writer holds the key's queue, so no other write
-- of ours comes in between; the next one forgets it).  A herd of scripts on
-- a lock reads nothing once one of them has taken it.
function R.wrote(path, sent, data, stat, gv, gcz)
    if stat then share(path, sent, data, stat, gv, gcz) end
end

-- The latest read of path when it serves the running command, or nil.
function R.serving(path)
    local s = shared[path]
    local a = arrival[coroutine.running()]
    if s and a and s.sent > a then return s end
end

-- A read of path is about to be sent: its ticket for R.read_done, and
-- R.read_end when the reading coroutine ends, however it ends.
function R.read_start(path)
    stamp = stamp + 1
    local mine = { sent = stamp }
    pending[path] = mine
    return mine
end

function R.read_end(path, mine)
    if pending[path] == mine then pending[path] = nil end
end

-- The read `mine` answered: it serves later commands unless a write of
-- ours was sent meanwhile.
function R.read_done(path, mine, data, stat, gv, gcz)
    if pending[path] == mine and not mine.stale then share(path, mine.sent, data, stat, gv, gcz) end
end

---------------------------------------------------------------------------
-- Presumed absence

local live_new, live_old, nlive = {}, {}, 0

function R.saw(path, exists)
    if not exists then
        live_new[path], live_old[path] = nil, nil
    elseif not live_new[path] then
        nlive = nlive + 1
        if nlive > R.LIVE_MAX then live_old, live_new, nlive = live_new, {}, 1 end
        live_new[path] = true
    end
end

-- Whether path was seen to exist lately.
function R.seen(path)
    return live_new[path] or live_old[path] or false
end

---------------------------------------------------------------------------
-- Watched absence: keys a client watched (WATCH) while they did not exist,
-- path -> set of cmd_multi.lua's watch entries.  A read that finds such a
-- key live (K.record, K.cached) marks each entry `made`: the key was made
-- since, and EXEC aborts even if it was deleted again (ZooKeeper shows
-- the same absence; Redis counts the touch).  A client whose GET saw the
-- key made would otherwise write on a value since deleted.

R.watched_absent = {}

function R.saw_live(path)
    local w = R.watched_absent[path]
    if w then for x in pairs(w) do x.made = true end end
end

-- See keyspace.lua's K.compact.
function R.compact()
    shared = copy(shared)
    pending = copy(pending)
    live_new, live_old = copy(live_new), copy(live_old)
end

return R
