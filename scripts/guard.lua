-- guard.lua — what makes a versioned write land on the node it was planned
-- on.  Each session has a guard, <root>/g/<session id>, and G.MARKS marks,
-- <root>/m/<session id>.<n>, all EPHEMERAL:
--
--   our write from the cache  + check(our guard, the version known before)
--   a removal of a node       + set(the node's mark: n = hash(path) % MARKS)
--                               (ours: unconditional, a token; another session's:
--                               at the version read before the node was)
--   a removal of another session's node
--                             + set(its guard), for its cache's sake
--   a check of another session's node (a script's read)
--                             + check(the node's mark, as read before)
--   a versioned write or check of a persistent node
--                             + check(its persistent mark, as known before)
--   a removal of a persistent node
--                             + set(its persistent mark), after that check
--
-- A version does not identify a node: when a node is deleted and someone
-- creates it again, the new node starts at version 0 and may carry the
-- version a writer read or cached, so a versioned write would land on
-- someone else's lock (ZooKeeper has no czxid condition).  Two counters
-- tell.  A session's guard counts removals of its nodes by others: every
-- write made from our cache carries a check of our guard at the version we
-- knew before the entry's node was written, so an entry stands in for a
-- read until anyone else removes one of our nodes; then the check fails
-- and the command reads ZooKeeper.  A watch on the guard keeps the version
-- we know current; a stale one only makes a check fail.  The marks count
-- every removal of a session's nodes, each node's by the mark its path
-- hashes to: its own removals (its expiry, a release through its sidecar)
-- bump it unconditionally, so they never conflict with each other or with
-- its cache's checks; another sidecar's write to one of its nodes reads
-- the node's mark first, then the node (one more attempt of the command,
-- G.ops), and bumps (or checks) the mark at the version read in the same
-- multi: the node read after it is still the node the write lands on,
-- since nobody removed it in between, and the session's end takes the
-- marks with it.  A session makes its marks before its guard, and no node
-- before its guard is known (G.await).  Normal use never bumps a guard: a
-- lock pair is a create and one multi {delete, check guard, set mark},
-- two requests, and no watch per key.
--
-- Also here: our earlier sessions (G.dead), whose nodes are foreign, and
-- G.writable, which holds back a write planned in another session.

local S = require "signal"
local Z = require "zkio"
local U = require "util"
local errors = require "errors"
local shared = require "shared"

local G = {}

-- Our guard: its session, path and the version and czxid we know, and our
-- marks' paths (mark n's at [n + 1]).  A guard of ours is never there without its
-- marks (refresh makes them first), so a known guard vouches for both.
local guard = { sid = nil, path = nil, version = nil, czxid = nil, mark_paths = nil }
G.guard = guard

-- session id -> true for our earlier sessions
G.dead = {}
local dead = G.dead

function G.path(sid)
    return Z.root() .. "/g/" .. string.format("%016x", sid)
end

-- A session's marks: MARKS nodes, <root>/m/<session id>.<n>, a node at
-- path bumping mark n = host.hash(path) % MARKS, so that a busy session's
-- removals seldom move the mark a write to one of its nodes checks.  (Every
-- sidecar on a root must count them alike: changing MARKS or the hash is a
-- change of protocol.)
G.MARKS = 64

local function marks_prefix(sid) return Z.root() .. "/m/" .. string.format("%016x", sid) .. "." end

local function mark_of(path) return host.hash(path) % G.MARKS end

-- The mark of session sid that a removal of the node at path bumps.
function G.mark_path(sid, path)
    if sid == guard.sid then return guard.mark_paths[mark_of(path) + 1] end
    return marks_prefix(sid) .. mark_of(path)
end

-- The op of our removal of the node at path that bumps its mark, writing a
-- token of its own: the mark holding it proves the multi applied (a lost
-- removal of ours, resolve.lua).  Only this process bumps its session's
-- marks with such tokens (another sidecar's bump writes a whole nonce), so
-- a short one will do: a DEL's multi may bump all 64 (K.DELETE_RESERVE).
local function bump_of(mark) return { "set", mark, Z.own_nonce(), -1 } end
local function mark_bump(path) return bump_of(guard.mark_paths[mark_of(path) + 1]) end

-- The guard's version and czxid as we know them now, for an entry about to
-- be written in our current session, or nil while no guard is known.
function G.now()
    if guard.version and guard.sid == zk.session() then return guard.version, guard.czxid end
end
local guard_now = G.now

-- The ops that remove our own node at path, version: the delete, a check
-- of our guard at gv (nil: none) and the bump of its mark (ephemeral: a
-- node of our session; none while our guard is not known).
function G.removal(path, version, gv, ephemeral)
    local ops = { { "delete", path, version } }
    if gv then ops[#ops + 1] = { "check", guard.path, gv } end
    if ephemeral and guard_now() then ops[#ops + 1] = mark_bump(path) end
    return ops
end

-- What the running command knows of other sessions' nodes:
-- coroutine -> {[path of a mark] = {v = its version (false: no such node),
-- sid = our session when it was read, at = the stamp after the read
-- (shared.lua), nonce = what a bump of it by this command writes},
-- [owner] = true once that owner's guard was found missing}.
local known = U.per_command()

local function command_known()
    local co = coroutine.running()
    local kn = known[co]
    if not kn then
        kn = {}
        known[co] = kn
    end
    return kn
end

---------------------------------------------------------------------------
-- Persistent nodes
--
-- A persistent node is no session's: no guard or session mark counts its
-- removals, and a node made again at its path starts at version 0, maybe
-- at the version a slow writer read (a compare-and-delete of a lock
-- without a TTL would delete the lock taken since).  So G.PMARKS
-- persistent marks, <root>/m/p.<n> (n = the path's hash modulo G.PMARKS;
-- made when first needed, never deleted), count them: every
-- removal of a persistent key's node (a delete, a replacement) bumps its
-- mark at any version in the multi that removes it, and every versioned
-- write, delete or check of a persistent node read from ZooKeeper checks
-- that mark (before the bump) at a version known before the node's read
-- was sent: a node removed since, whatever was made at its path after,
-- has moved it.  The versions are known sidecar-wide: read with a watch,
-- whose event forgets one, or from the answer of a bump of ours.  A
-- command that finds one not known reads it and runs again (one round
-- trip more, as for another session's mark); a conflict in vain (another
-- key's removal on the same mark) runs it again: many marks, so that
-- concurrent releases of different locks seldom share one.

-- path of a mark -> {v = its version, at = a stamp before which it was known,
-- sid, watched: its watch is set (read with one; our own bump spent it)}
local pmarks = {}
-- How many watch events of each persistent mark came: a read whose event
-- came before its entry was written (learn_pmarks reads many at once, or
-- moved a mark past -1 itself) knows a version no watch vouches for.
local pfired = {}

G.PMARKS = 4096
local function pmarks_prefix() return Z.root() .. "/m/p." end
function G.pmark_path(path) return pmarks_prefix() .. host.hash(path) % G.PMARKS end

-- The check of the persistent mark at path at version v, and its bump
-- (writing nonce: resolve.lua tells a lost removal of ours by it).
local function pmark_check(path, v) return { "check", path, v, pmark_of = path } end
local function pmark_bump(path, nonce) return { "set", path, nonce, -1, pmark_bump = path } end

-- Makes the persistent marks at paths (NODEEXISTS: made by another).
local function make_pmarks(paths)
    local results = {}
    local function make(p) return zk.create(p, "", 0) end
    Z.concurrently(make, paths, 1, #paths, results)
    for i = 1, #paths do
        if results[i][1] == zk.NONODE then -- (<root>/m first)
            Z.ensure_path(Z.root() .. "/m")
            return Z.concurrently(make, paths, 1, #paths, results)
        end
    end
end

-- Reads the persistent marks at paths (with a watch) into pmarks, making
-- those not there yet.
local function learn_pmarks(paths)
    table.sort(paths)
    local sid, results, fired = zk.session(), {}, {}
    local function read(p) return zk.exists(p, true) end
    local function read_all() -- (the events of the reads' watches, counted from here)
        for _, p in ipairs(paths) do fired[p] = pfired[p] or 0 end
        Z.concurrently(read, paths, 1, #paths, results)
    end
    read_all()
    local missing = {}
    for i = 1, #paths do
        if results[i][1] == zk.NONODE then missing[#missing + 1] = paths[i] end
    end
    if #missing > 0 then
        make_pmarks(missing) -- (its creates fire the watches just set)
        read_all()
    end
    if zk.session() ~= sid then return end -- (read in a session given up)
    for i, path in ipairs(paths) do
        local rc, stat = results[i][1], results[i][2]
        if rc == zk.OK and stat.version == -1 then rc, stat = Z.past_any(Z.exists, path) end
        local k = pmarks[path]
        if (pfired[path] or 0) ~= fired[path] then
            -- its event came meanwhile (another's bump, or ours past -1): not known
        elseif rc == zk.OK and k and k.sid == sid and k.v == stat.version then
            k.watched = true -- unchanged: still known since the first read of that version
        elseif rc == zk.OK and stat.version ~= -1 then
            pmarks[path] = { v = stat.version, at = shared.stamp(), sid = sid, watched = true }
        elseif rc and rc ~= zk.OK and rc ~= zk.NONODE and not Z.unknown(rc) then
            Z.fail(rc, "exists " .. path)
        end
    end
end

-- The ops that go with a removal of the persistent node at path read
-- after this call, for a removal that does not go through G.ops (an
-- expiry's delete, settling a lost write): the check of its mark at the
-- version known (or read now) and its bump; nil when it cannot be read.
function G.pmark_removal(path)
    local mpath = G.pmark_path(path)
    local k = pmarks[mpath]
    if not (k and k.sid == zk.session()) then
        learn_pmarks({ mpath })
        k = pmarks[mpath]
    end
    if k then return { pmark_check(mpath, k.v), pmark_bump(mpath, Z.nonce()) } end
end

-- A watch fired on path: a persistent mark moved.
function G.on_watch(path)
    pmarks[path] = nil
    if path:find(pmarks_prefix(), 1, true) == 1 then pfired[path] = (pfired[path] or 0) + 1 end
end

-- The version of the persistent mark of path as it is now, as far as this
-- sidecar can tell (read with a watch of this session, whose event has not
-- come), or nil (not read, or known from our own bump only: another's
-- since is not told).
function G.pmark_known(path)
    local k = pmarks[G.pmark_path(path)]
    return k and k.watched and k.sid == zk.session() and k.v or nil
end

-- The stat of the mark at mpath, read now; nil when there is none.
local function mark_stat(mpath)
    local rc, stat = Z.exists(mpath)
    if rc == zk.NONODE then return nil end
    if rc ~= zk.OK then Z.fail(rc, "exists " .. mpath) end
    return stat
end

-- Whether the persistent mark of path moved, read now, since a write of a
-- persistent node at path was sent (a removal of one since bumped it):
-- past version v, as known then; or, v not known, written after zxid, the
-- newest zxid seen then (resolve.lua: a lost write's node may have gone
-- since).  A mark not there: deleted by hand, when a version was known;
-- else never made (a removal makes it first; nothing deletes one), so
-- nothing at path was ever removed.
function G.pmark_moved(path, v, zxid)
    local stat = mark_stat(G.pmark_path(path))
    if not stat then return v ~= nil end
    if v ~= nil then return stat.version ~= v end
    return stat.mzxid > (zxid or 0)
end

-- Our guard and marks, before a write that makes or removes a node of our
-- session: no node of ours is ever there without its mark (a write to it
-- from another sidecar checks it), so the write waits for them, and fails
-- closed (UNAVAILABLE) when they do not come in its time.
function G.await()
    if guard_now() then return end
    -- (between two sessions: the next one first, as G.writable waits)
    if zk.session() == 0 then Z.sync(Z.root()) end
    S.retry(G.ready() and 0 or G.LOST_RETRY_MS, nil, errors.UNAVAILABLE)
end

-- Our guard's version and czxid, learned first when not known (nil: still
-- not known, and no removal of ours may go: expiry and settling look again
-- later).
function G.ready()
    if not guard_now() then G.refresh() end
    return guard_now()
end

-- Reads the marks at paths (sorted) for the running command, LEARN_BATCH
-- at a time, then runs it again: its next reads are sent after these.
local LEARN_BATCH = 128
local function learn(paths)
    table.sort(paths)
    local kn, sid = command_known(), zk.session()
    local results, got = {}, {}
    for first = 1, #paths, LEARN_BATCH do
        Z.concurrently(zk.exists, paths, first, math.min(first + LEARN_BATCH - 1, #paths), results)
    end
    for i, path in ipairs(paths) do
        local rc, stat = results[i][1], results[i][2]
        if rc ~= zk.OK and rc ~= zk.NONODE or rc == zk.OK and stat.version == -1 then
            rc, stat = Z.past_any(Z.exists, path) -- (with its retries)
            if rc == zk.OK and stat.version == -1 then S.retry(0) end
        end
        got[i] = rc == zk.OK and stat.version
    end
    local at = shared.stamp()
    for i, path in ipairs(paths) do kn[path] = { v = got[i], sid = sid, at = at, nonce = Z.nonce() } end
    S.retry(0)
end

-- The persistent marks that the records of recs read from ZooKeeper with a
-- persistent node must be checked at (sorted: path, and [path] = version),
-- nil for none, or false when some were not known before those reads
-- (read now: the command runs again).
local function persistent_checks(recs, sid)
    local checks, need
    for i = 1, #recs do
        local rec = recs[i]
        local node = rec.node
        if node and (node.ephemeralOwner or 0) == 0 and not rec.cached then
            local path = G.pmark_path(rec.path)
            local k = pmarks[path]
            if k and k.sid == sid and (rec.sent or 0) > k.at then
                rec.pmark_checked = k.v -- (resolve.lua: a write that applied found it there)
                checks = checks or {}
                if not checks[path] then checks[#checks + 1] = path end
                checks[path] = k.v
            else
                need = need or {}
                if not need[path] then
                    need[path] = true
                    need[#need + 1] = path
                end
            end
        end
    end
    if need then
        learn_pmarks(need)
        return false
    end
    if checks then table.sort(checks) end
    return checks
end

-- Appends the checks of persistent marks (persistent_checks'), then the
-- bump of the mark of each persistent node of removed (one per mark:
-- checked before it moves), writing a nonce that the rec keeps (pbump)
-- for resolve.lua: a removal whose reply was lost is ours only while the
-- mark holds it.
local function persistent_ops(ops, checks, removed)
    for _, path in ipairs(checks or {}) do ops[#ops + 1] = pmark_check(path, checks[path]) end
    local bumps
    for i = 1, #removed do
        local rec = removed[i]
        if rec.node and (rec.node.ephemeralOwner or 0) == 0 then
            local path = G.pmark_path(rec.path)
            bumps = bumps or {}
            if not bumps[path] then
                bumps[path] = { path = path, nonce = Z.nonce() }
                bumps[#bumps + 1] = path
            end
            rec.pbump = bumps[path]
        end
    end
    if not bumps then return end
    table.sort(bumps)
    for _, path in ipairs(bumps) do ops[#ops + 1] = pmark_bump(path, bumps[path].nonce) end
end

-- Appends to ops what guards the writes in them (recs: every record the
-- ops write or check; removed: those whose nodes they delete or replace):
--   * a check of our guard for each record of recs that is ours (from the
--     cache: at the version known before its node was written; read from
--     ZooKeeper: at the version known when it was read); a record of ours
--     read before our guard was known, or under another guard node, is
--     read again;
--   * a bump of our node's mark for each node of our session they remove;
--   * for a node another session owns (an earlier one of ours too: a
--     script's check of it): a check of the node's mark at the version
--     read before the node was, or its bump at that version (removed: the
--     rec keeps what it wrote, for resolve.lua), and a bump of that
--     session's guard for our cache's sake.  A command that has not read
--     the mark yet, in this session, reads it and runs again (learn); one
--     that removes a node of ours while our guard is not known waits for
--     it (G.await).  An owner with a guard and no marks (a zkresp from before
--     them) gets the guard's bump alone; one with neither (gone, or a
--     zkresp without guards) nothing.
-- Only the first two need no request: the others yield, then retry.
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
    local bumped, foreign
    for i = 1, #removed do
        local rec = removed[i]
        local owner = rec.node and rec.node.ephemeralOwner or 0
        rec.own_bump = nil
        if owner == sid then
            G.await()
            -- (one bump per mark; no set to tell for a single removal)
            local mark = guard.mark_paths[mark_of(rec.path) + 1]
            local op = bumped and bumped[mark]
            if not op then
                op = bump_of(mark)
                if #removed > 1 then
                    bumped = bumped or {}
                    bumped[mark] = op
                end
                ops[#ops + 1] = op
            end
            rec.own_bump = { path = mark, token = op[3] }
        elseif owner ~= 0 then
            foreign = foreign or {}
            foreign[rec] = true
        end
    end
    local kn = known[coroutine.running()]
    local need, marks, owners
    for i = 1, #recs do
        local rec = recs[i]
        local owner = rec.node and rec.node.ephemeralOwner or 0
        if owner ~= 0 and owner ~= sid then
            local path = G.mark_path(owner, rec.path)
            local k = kn and kn[path]
            if not (k and k.sid == sid and (rec.sent or 0) > k.at) then
                need = need or {}
                if not need[path] then
                    need[path] = true
                    need[#need + 1] = path
                end
            else
                local removes = foreign and foreign[rec] or false
                if removes and k.v then rec.mark_bump = { path = path, v = k.v, nonce = k.nonce } end
                marks = marks or {}
                if marks[path] == nil then marks[#marks + 1] = path end
                marks[path] = marks[path] or removes
                if removes and not (owners and owners[owner]) then
                    owners = owners or {}
                    owners[owner] = true
                    owners[#owners + 1] = owner
                end
            end
        end
    end
    local pchecks = persistent_checks(recs, sid)
    if need then learn(need) elseif pchecks == false then S.retry(0) end
    if owners then
        table.sort(owners)
        for _, owner in ipairs(owners) do
            -- (its cache's sake; not once found missing: that session is
            -- gone, or runs a zkresp without guards)
            if not kn[owner] then ops[#ops + 1] = { "set", G.path(owner), "", -1, guard_of = owner } end
        end
    end
    if marks then
        table.sort(marks)
        for _, path in ipairs(marks) do
            local k = kn[path]
            if k.v and marks[path] then
                ops[#ops + 1] = { "set", path, k.nonce, k.v, mark_of = path }
            elseif k.v then
                ops[#ops + 1] = { "check", path, k.v, mark_of = path }
            end
        end
    end
    persistent_ops(ops, pchecks, removed)
end

-- After a multi with guard ops applied: each mark it bumped is one version
-- on, by our own hand (nobody else removed a node on it since the read,
-- or the bump would have failed), with a fresh nonce for the next bump.
-- A persistent mark we bumped is known at the version the multi's answer
-- gives (results; sid: the session it went in), for the reads sent from
-- now on (not from when it was sent: the bridge may hold a grouped write
-- back while a read sent after it is answered).  Its watch is spent (our
-- bump fired it): a later bump by another sidecar is met by a failed
-- check, which forgets the marks of that multi (G.note).
function G.applied(ops, results, sid)
    local kn = known[coroutine.running()]
    for i, op in ipairs(ops) do
        local k = kn and op.mark_of and op[1] == "set" and kn[op.mark_of]
        if k and k.v == op[4] then
            kn[op.mark_of] = { v = Z.next_version(k.v), sid = k.sid, at = k.at, nonce = Z.nonce() }
        end
        local r = op.pmark_bump and results and results[i]
        if r and r.stat and r.stat.version ~= -1 and sid == zk.session() then
            pmarks[op.pmark_bump] = { v = r.stat.version, at = shared.stamp(), sid = sid }
        end
    end
end

-- Sends a multi of writes and their guard ops (grouped: zk.multi's) and
-- notes its outcome: its first error, and results.
function G.multi(ops, grouped)
    local sid = zk.session()
    local rc, results = zk.multi(ops, grouped)
    if rc ~= zk.OK then G.note(ops, results) else G.applied(ops, results, sid) end
    return Z.first_error(rc, results), results
end

-- Whether a multi of a removal (op 1) and its guard ops failed (rc, its
-- first error; results) by a guard op alone: our guard or a persistent
-- mark moved or went (G.note made it again), not the node.
function G.guard_failed(rc, results)
    local r = results and results[1]
    return (rc == zk.BADVERSION or rc == zk.NONODE) and r ~= nil and r.rc ~= zk.BADVERSION and r.rc ~= zk.NONODE
end

-- After a multi with guard ops failed: when a mark failed its op (moved,
-- or gone with its session), every mark of the multi is read again by the
-- command's next attempt, at once (the others may have moved too: an
-- owner's burst of removals); an owner's guard found missing is no longer
-- bumped; our own guard's version is learned again.
function G.note(ops, results)
    if type(results) ~= "table" then return end
    local kn = known[coroutine.running()]
    local moved = false
    for i, op in ipairs(ops) do
        local r = results[i]
        if op.mark_of and r and (r.rc == zk.NONODE or r.rc == zk.BADVERSION) then moved = true end
    end
    -- A persistent mark that failed its op: every mark of the multi is
    -- read again (the others may be as stale: only the first failure
    -- answers), one gone is made again.
    local pmoved, ppaths, missing = false, {}, nil
    for i, op in ipairs(ops) do
        local r, path = results[i], op.pmark_of or op.pmark_bump
        if path then
            ppaths[#ppaths + 1] = path
            if r and (r.rc == zk.NONODE or r.rc == zk.BADVERSION) then
                pmoved = true
                if r.rc == zk.NONODE then
                    missing = missing or {}
                    missing[#missing + 1] = path
                end
            end
        end
    end
    for _, path in ipairs(pmoved and ppaths or {}) do pmarks[path] = nil end
    if missing then make_pmarks(missing) end
    for i, op in ipairs(ops) do
        local r = results[i]
        if op.mark_of and kn and moved then
            kn[op.mark_of] = nil
        elseif op.guard_of and r and r.rc == zk.NONODE then
            command_known()[op.guard_of] = true
        elseif op.guard_check and r and r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then
            -- Our guard moved: learn its version (its watch may be late).
            host.spawn(G.refresh)
        end
    end
end

-- Forgets our earlier sessions whose guard is gone: ended (a session makes
-- no node before its guard, which goes with it).  Asked once our guard is
-- known: a server that has it has every earlier guard's creation.
local sweeping = false
local function forget_ended()
    if sweeping then return end
    sweeping = true
    local olds = {}
    for old in pairs(dead) do olds[#olds + 1] = old end
    for _, old in ipairs(olds) do
        local ok, rc = pcall(zk.exists, G.path(old))
        if ok and rc == zk.NONODE then dead[old] = nil end
    end
    sweeping = false
end

-- Creates our session's marks and guard if needed, the marks first, and
-- learns the guard's version, leaving a watch on it (expiry.lua's on_watch
-- comes back here when it fires).
local function refresh()
    local sid = zk.session()
    if sid == 0 then return end
    if guard.sid ~= sid then
        guard.sid, guard.path, guard.version, guard.czxid = sid, G.path(sid), nil, nil
        guard.mark_paths = {}
        for n = 0, G.MARKS - 1 do guard.mark_paths[n + 1] = marks_prefix(sid) .. n end
    end
    local path = guard.path
    for _ = 1, 3 do
        local rc, stat = Z.past_any(zk.exists, path, true) -- (bumped by others' removals)
        -- (a session given up meanwhile: a create below would go out under
        -- the next one, and make the old one look alive)
        if guard.sid ~= sid or zk.session() ~= sid then return end
        if rc == zk.OK then
            if stat.ephemeralOwner == sid then
                guard.version, guard.czxid = stat.version, stat.czxid
                if next(dead) and not sweeping then host.spawn(forget_ended) end
            else
                guard.version, guard.czxid = nil, nil
            end
            return
        elseif rc ~= zk.NONODE then
            return -- the connection: the next session event comes back here
        end
        guard.version, guard.czxid = nil, nil
        local marks = {}
        for n = 1, G.MARKS do marks[n] = { "create", guard.mark_paths[n], "", zk.EPHEMERAL } end
        local mrc = zk.multi(marks) -- (NODEEXISTS: made by an earlier call, all of them)
        if mrc == zk.NONODE then
            Z.ensure_path(Z.root() .. "/m")
            Z.ensure_path(Z.root() .. "/g")
        elseif (mrc == zk.OK or mrc == zk.NODEEXISTS) and zk.session() == sid then
            if zk.create(path, "", zk.EPHEMERAL) == zk.NONODE then Z.ensure_path(Z.root() .. "/g") end
        end
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

-- Whether session sid's guard is still at version gv (and czxid gcz, when
-- given): no node of that session was removed by anyone but its own
-- sidecar since gv was read.  A node of ours gone after a removal of ours
-- whose reply was lost went by that removal while this holds.
function G.unmoved(sid, gv, gcz)
    local rc, stat = Z.exists(G.path(sid))
    return rc == zk.OK and stat.version == gv and (gcz == nil or stat.czxid == gcz)
end

-- Whether a removal of ours of session sid's node at path, its reply lost,
-- may be what removed it: the guard has not moved since version gv, or
-- moved once, by another sidecar's removal of another lock request
-- (LW.delete writes the path it removes into the guard).
function G.unmoved_but(sid, gv, path)
    local rc, data, stat = Z.get(G.path(sid))
    if rc ~= zk.OK then return false end
    if stat.version == gv then return true end
    return stat.version == Z.next_version(gv) and data ~= "" and data ~= path
end

-- Whether session sid's mark of a node at path was written after zxid,
-- read now: every removal of a node of that session, by anyone, bumps the
-- node's mark in the multi that removes it, so a node of sid at path that
-- a write sent after zxid was seen made or wrote was not removed since
-- while this is false (resolve.lua).  No mark: the session is gone.
function G.mark_moved(sid, path, zxid)
    local stat = mark_stat(G.mark_path(sid, path))
    return not stat or stat.mzxid > (zxid or 0)
end

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
