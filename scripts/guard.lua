-- guard.lua — the session guard: one EPHEMERAL node per session,
-- <root>/g/<session id>, that makes a write from the owned-key cache safe.
--
--   our write from the cache  + check(our guard, the version known before)
--   a delete/replace of a node another live session owns
--                             + set(that session's guard): its checks fail
--
-- A version does not identify a node: when another sidecar deletes our key
-- and someone creates it again, the new node starts at version 0 and may
-- carry the version we cached, so a versioned delete from a stale cache
-- would remove someone else's lock (ZooKeeper has no czxid condition).
-- Each session therefore has a guard node, EPHEMERAL: whoever deletes or
-- replaces a node that another live session owns bumps that session's
-- guard in the same multi (G.ops), and every write made from the cache
-- carries a check of our guard at the version we knew before the entry's
-- node was written.  So an entry stands in for a read until anyone else
-- removes one of our nodes; then the check fails and the command reads
-- ZooKeeper.  A watch on the guard keeps the version we know current; a
-- stale one only makes a check fail.  Normal use never bumps a guard: a
-- lock pair is a create and one multi {delete, check guard}, two requests,
-- and no watch per key.
--
-- Also here: our earlier sessions (G.dead), whose nodes are foreign, and
-- G.writable, which holds back a write planned in another session.

local S = require "signal"
local Z = require "zkio"
local U = require "util"
local errors = require "errors"

local G = {}

-- Our guard: its session, path and the version and czxid we know.
local guard = { sid = nil, path = nil, version = nil, czxid = nil }
G.guard = guard

-- session id -> true for our earlier sessions
G.dead = {}
local dead = G.dead

function G.path(sid)
    return Z.root() .. "/g/" .. string.format("%016x", sid)
end

-- The guard's version and czxid as we know them now, for an entry about to
-- be written in our current session, or nil while no guard is known.
function G.now()
    if guard.version and guard.sid == zk.session() then return guard.version, guard.czxid end
end
local guard_now = G.now

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
function G.ops(ops, recs, removed)
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
                S.retry(0)
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
                ops[#ops + 1] = { "set", G.path(owner), "", -1, guard_of = owner }
            end
        end
    end
end

-- After a multi with guard ops failed: a bump that found no guard is left
-- out of the command's next attempt.
function G.note(ops, results)
    if type(results) ~= "table" then return end
    for i, op in ipairs(ops) do
        local r = results[i]
        if op.guard_of and r and r.rc == zk.NONODE then
            local co = coroutine.running()
            unguarded[co] = unguarded[co] or {}
            unguarded[co][op.guard_of] = true
        elseif op.guard_check and r and r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then
            -- Our guard moved: learn its version (its watch may be late).
            host.spawn(G.refresh)
        end
    end
end

-- Creates our session's guard if needed and learns its version, leaving a
-- watch on it (expiry.lua's on_watch comes back here when it fires).
local function refresh()
    local sid = zk.session()
    if sid == 0 then return end
    if guard.sid ~= sid then
        guard.sid, guard.path, guard.version, guard.czxid = sid, G.path(sid), nil, nil
    end
    local path = guard.path
    for _ = 1, 3 do
        local rc, stat = zk.exists(path, true)
        -- (a session given up meanwhile: the create below would go out
        -- under the next one, and make the old one look alive)
        if guard.sid ~= sid or zk.session() ~= sid then return end
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
        if crc == zk.NONODE then Z.ensure_path(Z.root() .. "/g") end
    end
end

function G.refresh()
    local ok, err = pcall(refresh)
    if not ok then
        host.log("warn", "session guard: " .. tostring(S.is_abort(err) and err.reply.err or err))
    end
end

-- Whether the session `sid` that owned a node still lasts, as far as this
-- sidecar can tell: it is ours now, or another's (another sidecar's, not
-- one of our earlier ones) whose guard is still there.  A node gone after
-- a delete whose reply was lost went with its session, maybe before the
-- delete was asked, unless that session lasts (resolve.lua, lockstore.lua).
-- The same for a node's own end, its TTL or lease (`deadline`, host.now()):
-- one that ran out, or was within ENDED_MARGIN_MS of it (its owner's clock
-- may count ahead), may have gone by its owner's expiry.
G.ENDED_MARGIN_MS = 1000
function G.ending(deadline) return deadline ~= nil and deadline <= host.now() + G.ENDED_MARGIN_MS end

function G.lasts(sid)
    if sid == zk.session() then return true end
    if not sid or sid == 0 or dead[sid] then return false end
    return Z.exists(G.path(sid)) == zk.OK
end

---------------------------------------------------------------------------
-- Our sessions

-- How often a write to a node of one of our lost sessions looks again.
G.LOST_RETRY_MS = 200

-- Before any write planned on rec: a record read in an earlier session is
-- read again (its node may have gone with that session and another been
-- made since: a versioned write cannot tell), and a node that one of our
-- lost sessions still owns is waited for.  Such a node is a lock this
-- sidecar has already counted as lost (the local lease): it reads as held,
-- by nobody alive, and is never written, so a renewal or a release by its
-- old holder cannot answer 1; it vanishes when ZooKeeper ends that session.
function G.writable(rec)
    if rec.sid == 0 or rec.sid ~= zk.session() then
        -- Between two sessions (the lease ran out): wait for the next one
        -- (a sync is parked until it connects), then plan again.
        if zk.session() == 0 then Z.sync(Z.root()) end
        S.retry(0)
    end
    if rec.dead_owner then S.retry(G.LOST_RETRY_MS, nil, errors.LOST_SESSION) end
end

return G
