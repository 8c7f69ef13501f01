-- resolve.lua — writes whose outcome was lost: the reply went with the
-- connection, or the session went away under the request.  L.resolve is
-- the one place that decides whether such a write applied and records the
-- outcome; K.put, K.delete, txn.lua's commit and expiry.lua's delete all
-- call it.
--
--   lost write --sync + get: does a node carry our nonce?--> applied: go on
--                                                       --> not: K.retry
--              --could not look--> settle_later (look again in the
--                                  background), and the command fails

local codec = require "codec"
local errors = require "errors"
local queue = require "queue"
local S = require "signal"
local Z = require "zkio"
local U = require "util"
local G = require "guard"
local O = require "owned"
local shared = require "shared"

local L = {}

-- After a create or set carrying `nonce` came back with an unknown result:
-- true and the node's stat when the node carries it, false when not.  An
-- ephemeral node that landed under a session given up since is the
-- caller's to judge (K.put and txn.lua's commit run again rather than
-- claim it).
local function resolve_write(path, nonce)
    Z.sync(path)
    local rc, data, stat = Z.get(path)
    if rc == zk.NONODE then return false end
    local found = codec.decode(data).nonce
    if found ~= nonce then return false, stat, found end
    return true, stat
end

-- Whether a persistent node at p's path was removed since p, a write of
-- ours, was sent: whoever removes one bumps its persistent mark, so the
-- mark moved past the version p's multi checked it at (a write to a node
-- read) or else the one known as p was planned (p.pmark_v).  None known:
-- the mark written after the newest zxid this sidecar had seen as p was
-- planned (p.seen_zxid; p, if it applied, came after it) may have been
-- bumped by a removal of p's node, and one written before was not.
local function persistent_removed(p)
    return G.pmark_moved(p.rec.path, p.rec.pmark_checked or p.pmark_v, p.seen_zxid)
end

-- Whether a node of our session (sid, guard at gv, gcz as p was sent) at
-- p's path may have been removed by another sidecar since p was sent:
-- whoever removes a node of ours bumps our guard (not our own removals,
-- which wait for p on the key's queue) and the node's mark, so both moved,
-- the mark written after the newest zxid seen as p was planned.
local function removed_by_another(p, sid, gv, gcz)
    return not G.unmoved(sid, gv, gcz) and G.mark_moved(sid, p.rec.path, p.seen_zxid)
end

-- Whether a set of ours (p) that a node now at `stat` does not carry may
-- still have applied, overwritten since: unless that node is the one we
-- wrote on, as we read it or one version on (another's set landed first,
-- so ours failed).  Running it again could apply it twice (an INCR).
--
-- A create or a replace makes a new node, at version p.new_version (0, or
-- 1 or 2 for replace_ops' variants); any later write of it by anyone moves
-- it past that version or makes another node.  So a node now carrying
-- another nonce tells "ours did not apply" only when it is the node the
-- replace would have deleted (its czxid), or, for a create, a node still
-- at version 0 (made by someone else's create, never written since) that
-- did not replace ours: nothing removed a node at its path since (of our
-- session: removed_by_another; persistent: persistent_removed).  Anything
-- else may be ours, overwritten.  A set planned on the owned-key cache
-- (a script's, EXEC's) may not know its node's czxid (a grouped create
-- answers no stat): only the node as read (the nonce and version it was
-- planned on) tells "not applied" then; another sidecar's replacement of
-- our node, before or after ours, looks the same, and ours may have
-- applied (an INCR run again counted twice, an LPOP lost an element).
local function maybe_overwritten(p, stat, found, sid, gv, gcz)
    local n = p.rec.node
    if p.kind == "create" then
        if stat.version ~= 0 then return true end
        if p.lifetime ~= "ephemeral" then return persistent_removed(p) end
        return not (gv and sid == zk.session()) or removed_by_another(p, sid, gv, gcz)
    end
    if p.kind == "replace" then return not (n and n.czxid ~= nil and stat.czxid == n.czxid) end
    if n and n.czxid == nil then
        return not (found ~= nil and found == p.rec.nonce and stat.version == n.version)
    end
    if not n then return true end
    return stat.czxid ~= n.czxid or U.seq_before(Z.next_version(n.version), stat.version)
end

-- Whether a write of ours (p) whose node is gone now may have applied and
-- been removed since: a persistent node's removal bumps its mark
-- (persistent_removed), another sidecar's removal of a node of our
-- session our guard and its mark (removed_by_another).  An ephemeral node
-- of a session given up since may have gone with it: the command runs
-- again, as for one found under that session, unless its request did
-- more that lasts (`lasting`: a delete, a message), which it would do
-- twice: the bridge answers a request in flight as it gives the session
-- up CONNECTIONLOSS (zk.c's fail_unanswered), applied or not.
local function maybe_removed(p, sid, gv, gcz, lasting)
    if p.lifetime ~= "ephemeral" then return persistent_removed(p) end
    if sid ~= zk.session() then return lasting == true end
    return gv ~= nil and removed_by_another(p, sid, gv, gcz)
end

-- The writes of one request (a multi applies whole or not at all): applied
-- when any of their nodes carries its nonce (the first may be gone with a
-- session that ended, or overwritten since), and then the first's stat when
-- that one told; else whether it may have applied all the same.
local function resolve_puts(puts, sid, gv, gcz, lasting)
    local unsure = false
    for i, p in ipairs(puts) do
        local applied, st, found = resolve_write(p.rec.path, p.nonce)
        if applied then return true, i == 1 and st or nil end
        if st then
            unsure = unsure or maybe_overwritten(p, st, found, sid, gv, gcz)
        else
            unsure = unsure or maybe_removed(p, sid, gv, gcz, lasting)
        end
    end
    return false, nil, unsure
end

-- Same after a delete (or a multi of deletes) of `recs`: true when it
-- applied; false when it did not or that is not ours to claim (the
-- command runs again and reads); false, true when the outcome is unknown
-- (the command answers TRYAGAIN).  Applied when no node is still the one
-- we deleted, unless one was an ephemeral node whose session (ours or
-- another sidecar's) has ended since, or one whose TTL ran out (G.ending):
-- that end removes nodes too, maybe before we asked.  Nor when our guard
-- moved since the version the delete checked for a node of ours: another
-- sidecar that writes or deletes one bumps it (our own delete does not),
-- so the removal may be theirs; nor, for a node of another session or a
-- persistent node, when its mark is not as our multi would have left it
-- (guard.lua).  But any one mark our multi bumped that still holds what
-- the bump wrote proves the multi applied, whole, whoever else could have
-- removed the nodes.  One sync first: the server then has whatever
-- applied before it.
local function resolve_delete(recs)
    Z.sync(recs[1].path)
    for _, rec in ipairs(recs) do
        local rc, data, stat = Z.get(rec.path)
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
    -- Our own mark holds the token our bump wrote, another session's mark
    -- our nonce at the version after the one read, a persistent mark our
    -- nonce (only our multi writes them).  Each mark read once: its stat,
    -- false when gone, true when it holds what we wrote.
    local looked = {}
    local function holds(m, wrote, v)
        if not m then return false end
        local got = looked[m.path]
        if got == nil then
            local rc, data, stat = Z.get(m.path)
            got = rc == zk.OK and stat or false
            if got and data == wrote and (v == nil or stat.version == Z.next_version(v)) then got = true end
            looked[m.path] = got
        end
        return got
    end
    local failed, unsure = false, false
    for _, rec in ipairs(recs) do
        local o, m, p = rec.own_bump, rec.mark_bump, rec.pbump
        local mo, mm, mp = holds(o, o and o.token), holds(m, m and m.nonce, m and m.v), holds(p, p and p.nonce)
        if mo == true or mm == true or mp == true then return true end
        -- A persistent mark holding another nonce was bumped since by a
        -- removal not known to be ours.  Another session's mark gone went
        -- with its session; one version on, holding another's bump, it was
        -- moved by a removal not ours that came first (our multi, checking
        -- the version read, failed).  Moved further, removals after ours
        -- may have moved it (the lock taken again since and released or
        -- expired through its owner): while the owner's session lasts, an
        -- outcome unknown (run again, a release that applied answers 0).
        if p or (m and (not mm or mm.version == Z.next_version(m.v))) then
            failed = true
        elseif m then
            local owner = rec.node and rec.node.ephemeralOwner or 0
            if owner == 0 or not G.lasts(owner) then failed = true else unsure = true end
        end
    end
    if failed then return false end
    local guard -- our guard's stat, read once, when a node of ours asks
    for _, rec in ipairs(recs) do
        if G.ending(rec.deadline) then return false end
        local gv, gcz = rec.gv, rec.gcz
        if not rec.cached then gv, gcz = rec.mine and rec.rgv, rec.rgcz end
        if gv and rec.node and rec.node.ephemeralOwner == zk.session() then
            if guard == nil then
                local grc, _, gstat = Z.get(G.guard.path)
                guard = grc == zk.OK and gstat or false
            end
            if not guard or guard.version ~= gv or guard.czxid ~= gcz then return false end
        end
    end
    local asked = {} -- each owner's session once, however many of its nodes
    for _, rec in ipairs(recs) do
        local owner = rec.node and rec.node.ephemeralOwner or 0
        if owner ~= 0 and not asked[owner] then
            if not G.lasts(owner) then return false end
            asked[owner] = true
        end
    end
    if unsure then return false, true end
    return true
end

-- A write we could not confirm before the command answered TRYAGAIN may
-- still have applied.  Look again in the background: a node that carries
-- its nonce is ours.  A key the write made (a lock acquired: absent or
-- expired before) is deleted, so that a client told "failed" holds
-- nothing; a key that lived before (a renewal) is kept and remembered, so
-- that it still expires (counted from now, later than the write: never
-- early; a persistent node also after our session changed, as its old
-- entry's expiry forgot it, seeing another nonce).  w is what remember()
-- takes.
--
-- It looks until it can tell, 250 ms, 500 ms ... then every 2 s, however
-- long ZooKeeper stays away: a lock without a TTL that landed would be
-- held for ever, and an ephemeral one until its session ends (no other
-- sidecar ends it by its TTL).  A node of an earlier session of ours is
-- left to that session's end: deleting it by version could delete a new
-- node made at the same version once that session is gone.
local SETTLE_GAP_MAX_MS = 2000

local function settle_later(path, w, keep)
    host.spawn(function()
        local attempt = 0
        while true do
            attempt = attempt + 1
            host.sleep(math.min(250 * attempt, SETTLE_GAP_MAX_MS))
            local ok, done = pcall(function()
                local held <close> = queue.hold({ path })
                Z.sync(path)
                local gv = G.ready()
                -- (a persistent node's delete checks its mark, as known before the read)
                local pops = w.lifetime == "persistent" and G.pmark_removal(path)
                if w.lifetime == "persistent" and not pops then return false end
                local rc, data, stat = Z.get(path)
                if rc == zk.NONODE or codec.decode(data).nonce ~= w.nonce then return true end
                if keep then
                    local owner = stat.ephemeralOwner or 0
                    -- (a persistent node is ours to end at its deadline
                    -- whatever our session since: expiry.lua)
                    if (w.lifetime == "persistent" and owner == 0) or
                       (w.sid == zk.session() and (owner == 0 or owner == w.sid)) then
                        w.version, w.czxid = stat.version, stat.czxid
                        O.remember(path, w)
                    end
                    return true
                end
                local owner = stat.ephemeralOwner or 0
                if owner ~= 0 and owner ~= zk.session() then return true end
                -- (never a removal of ours unmarked: once our guard is known)
                if owner ~= 0 and not gv then return false end
                shared.touched(path)
                -- (checking our guard as before the read, as expiry does)
                local drc
                if gv and owner == zk.session() then
                    local results
                    drc, results = zk.multi(G.removal(path, stat.version, gv, true))
                    drc = Z.first_error(drc, results)
                elseif pops and owner == 0 then
                    local results
                    drc, results = G.multi({ { "delete", path, stat.version }, pops[1], pops[2] })
                    if G.guard_failed(drc, results) then return false end -- (the mark, not the node: again)
                else
                    drc = zk.delete(path, stat.version)
                end
                if drc == zk.OK then
                    host.log("info", "deleted unconfirmed write " .. path)
                    if O.owned[path] and O.owned[path].nonce == w.nonce then O.forget(path) end
                end
                return drc == zk.OK or drc == zk.NONODE
            end)
            if ok and done then return end
        end
    end)
end

-- Decides and records the outcome of a write that came back with an
-- unknown result (zkio's unknown): `puts`, write plans (keyspace.lua's
-- K.plan_write, with .rec), and `dels`, records whose nodes it deleted.
-- sid, gv, gcz: our session and guard when it was sent; lasting: the
-- request also deleted or published (maybe_removed).  Every node it
-- touched is doubted (owned.lua).  Returns, when it applied, the stat of
-- puts[1]'s node as read now; raises a retry (UNAVAILABLE) when it did
-- not; when ZooKeeper cannot tell us, leaves the puts to settle_later and
-- raises what stopped the look.
function L.resolve(puts, dels, sid, gv, gcz, lasting)
    for _, p in ipairs(puts) do O.doubt(p.rec.path) end
    for _, rec in ipairs(dels) do O.doubt(rec.path) end
    if #puts > 0 then
        local ok, applied, st, unsure = pcall(resolve_puts, puts, sid, gv, gcz, lasting)
        if not ok then
            for _, q in ipairs(puts) do
                settle_later(q.rec.path, {
                    key = q.rec.key, nonce = q.nonce, sid = sid, lifetime = q.lifetime,
                    vtype = q.vtype, payload = q.payload, ttl = q.ttl, gv = gv, gcz = gcz,
                }, q.rec.live)
            end
            error(applied, 0)
        end
        if unsure then S.abort({ err = errors.UNAVAILABLE }) end
        if not applied then S.retry(nil, nil, errors.UNAVAILABLE) end
        return st
    elseif #dels > 0 then
        local applied, unsure = resolve_delete(dels)
        if unsure then S.abort({ err = errors.UNAVAILABLE }) end
        if not applied then S.retry(nil, nil, errors.UNAVAILABLE) end
    else
        S.retry(nil, nil, errors.UNAVAILABLE)
    end
end

return L
