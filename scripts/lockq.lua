-- lockq.lua — the grant rule of native locks (issue 18), as pure functions.
--
-- A lock is a queue of request nodes, EPHEMERAL_SEQUENTIAL children of the
-- lock's znode, in sequence order.  This module owns the rule over that
-- queue and nothing else: the six DLM modes and their compatibility, which
-- conversions are immediate, which waiting requests are granted now, the
-- one node each waiter watches, and the fencing token of a grant.  It never
-- calls zk.* or host.*; it reads plain tables and returns plain tables.
--
-- Left to the ZooKeeper layer: building the queue from the children's names
-- and data, recording what is granted (see "Granted is state" below),
-- setting the watches, leases and their expiry, hold counts (reentrancy:
-- LOCK.ACQUIRE by the same owner in the same mode is a count in the node's
-- data, not a second entry, so it never reaches this module), sessions,
-- the policy hooks and the replies.
--
-- An entry of the queue (the layer builds it; extra fields are ignored):
--
--   seq          the node's sequence number; the queue is sorted by it
--   owner        the client's opaque owner string
--   mode         the mode the request asked for ("NL" .. "EX")
--   granted      the mode held now, or nil while the request waits
--   convert      a pending conversion of a granted hold, or nil
--   convert_at   when that conversion was asked: any number that grows
--                with each ask and stays put while the conversion waits
--                (locks.lua: the lock node's version the ask wrote, an
--                int that wraps: ordered modulo 2^32, as Q.before);
--                orders the conversion queue
--   czxid        the node's creation zxid (for the token)
--   mzxid        the node's last modification zxid (for the token)
--
-- Granted is state: once conversions exist, who holds a lock cannot be
-- recomputed from the queue alone (queue [A PR converting to EX, B PR]: B
-- may have been granted before A asked, or may be a new request that waits
-- behind A's conversion), so the layer keeps `granted` in the node's data
-- and applies the grants this module returns.  Two sidecars deciding on
-- different reads can race (a conversion asked while a new request is
-- found grantable: each saw the other not granted), so the writes that
-- change who holds or wants what (a grant recorded, a conversion asked or
-- given up) must be conditional on one version, e.g. a multi that checks
-- and bumps the lock node's version, retried on BadVersion.
--
--   queue --grantable--> { {entry, mode, kind} } --apply--> queue' (fixed point)
--         --watch_target(entry)--> the one node that entry watches
--         --token(entry, observed)--> the fencing token of a grant

local U = require "util"

local Q = {}

Q.MODES = { "NL", "CR", "CW", "PR", "PW", "EX" }

local RANK = {}
for i, m in ipairs(Q.MODES) do RANK[m] = i end

-- The compatibility matrix of the issue: held mode in rows, requested mode
-- in columns, in the order of Q.MODES; Y = the two are granted together.
local ROWS = {
    NL = "YYYYYY",
    CR = "YYYYYN",
    CW = "YYYNNN",
    PR = "YYNYNN",
    PW = "YYNNNN",
    EX = "YNNNNN",
}
Q.MATRIX = ROWS

-- True when a hold in mode `held` and a hold in mode `requested` may be
-- granted at the same time.  The matrix is symmetric.  (Asked a few times
-- per request and waiter of each grant decision: a table of booleans.)
local COMPAT = {}
for held, row in pairs(ROWS) do
    COMPAT[held] = {}
    for requested, i in pairs(RANK) do COMPAT[held][requested] = row:sub(i, i) == "Y" end
end

function Q.compatible(held, requested)
    local c = COMPAT[held][requested]
    if c == nil then error("unknown lock mode " .. tostring(requested), 2) end
    return c
end

local ALIASES = { SHARED = "PR", EXCLUSIVE = "EX" }

-- The mode named by a client's MODE argument, case-insensitive as Redis
-- options are, with SHARED = PR and EXCLUSIVE = EX; nil, message when it
-- names none.
function Q.parse_mode(s)
    if type(s) ~= "string" then return nil, "mode must be a string" end
    local up = s:upper()
    local m = ALIASES[up] or up
    if RANK[m] then return m end
    return nil, "unknown lock mode '" .. s .. "' (NL CR CW PR PW EX SHARED EXCLUSIVE)"
end

-- A down-conversion (granted at once, never queued) is one to a mode whose
-- row admits at least every mode the old row admits: whatever could be held
-- beside the old mode can be held beside the new one, so granting it can
-- never conflict with a hold.  This is the DLM's rule: the Linux DLM treats
-- a conversion as "down" when the requested mode ranks below the granted
-- one, except for PR <-> CW (its "middle conversion"), which go through the
-- conversion queue in both directions; the superset definition gives
-- exactly that set.  Converting to the same mode counts as down (a no-op).
function Q.is_down(from, to)
    local old, new = ROWS[from], ROWS[to]
    for i = 1, #old do
        if old:sub(i, i) == "Y" and new:sub(i, i) ~= "Y" then return false end
    end
    return true
end

-- Whether request sequence a comes before b in the queue (past the
-- counter's wrap on a lock never left empty: util.lua's seq_before).
Q.before = U.seq_before

local function by_ask(a, b)
    if a.convert_at ~= b.convert_at then return Q.before(a.convert_at, b.convert_at) end
    return Q.before(a.seq, b.seq)
end

-- The conversion queue: every granted entry with a pending up-conversion,
-- ordered by when the conversion was asked (convert_at, then seq).
local function conversions(queue)
    local out = {}
    for _, e in ipairs(queue) do
        if e.granted and e.convert and not Q.is_down(e.granted, e.convert) then
            out[#out + 1] = e
        end
    end
    if #out > 1 then table.sort(out, by_ask) end
    return out
end
Q.conversions = conversions

-- True when `mode` is compatible with the held mode of every entry of
-- `held` (entry -> mode) but `except`.
local function fits(held, mode, except)
    for e, m in pairs(held) do
        if e ~= except and not Q.compatible(m, mode) then return false end
    end
    return true
end

-- The grants to apply now, in order: a list of { entry = e, mode = m,
-- kind = "down" | "convert" | "new" }.  The rule, from the issue and the
-- DLM:
--
--   1. A pending down-conversion is granted at once.
--   2. The conversion queue, in the order the conversions were asked: its
--      head is granted when its mode is compatible with every OTHER granted
--      hold; the first one that is not stops the queue (no overtaking).
--   3. Only when no conversion waits, the waiting new requests in sequence
--      order: each is granted when compatible with every granted hold
--      (those granted by steps 1-3 included); the first one that is not
--      stops the queue (strict FIFO: a stream of readers never passes a
--      queued writer).
--
-- One pass reaches the fixed point: step 1 only weakens holds and runs
-- first, and steps 2 and 3 only add or strengthen holds, which can unblock
-- nothing that was stopped.  `Q.apply` and asking again returns {}.
function Q.grantable(queue)
    local out, held = {}, {}
    for _, e in ipairs(queue) do
        if e.granted then held[e] = e.granted end
    end
    for _, e in ipairs(queue) do
        if e.granted and e.convert and Q.is_down(e.granted, e.convert) then
            held[e] = e.convert
            out[#out + 1] = { entry = e, mode = e.convert, kind = "down" }
        end
    end
    local convs = conversions(queue)
    for _, e in ipairs(convs) do
        if not fits(held, e.convert, e) then return out end
        held[e] = e.convert
        out[#out + 1] = { entry = e, mode = e.convert, kind = "convert" }
    end
    for _, e in ipairs(queue) do
        if not e.granted then
            if not fits(held, e.mode) then break end
            held[e] = e.mode
            out[#out + 1] = { entry = e, mode = e.mode, kind = "new" }
        end
    end
    return out
end

-- Applies grants from Q.grantable to their entries (what the layer records
-- in the nodes' data): the entry holds the mode, its conversion is done.
function Q.apply(grants)
    for _, g in ipairs(grants) do
        g.entry.granted = g.mode
        g.entry.convert, g.entry.convert_at = nil, nil
    end
end

-- True when `e` waits: a new request not granted yet, or a granted hold
-- with a pending up-conversion.
function Q.waits(e)
    if not e.granted then return true end
    return e.convert ~= nil and not Q.is_down(e.granted, e.convert)
end

-- True when `mode` is compatible with the mode every granted entry but
-- `me` holds as recorded now.  Q.grantable counts a conversion it grants
-- ahead of `me` at its new mode; a layer that records only `me`'s grant
-- must also ask this, since that conversion still holds its old mode
-- until recorded, and a middle conversion (PR <-> CW: neither mode is
-- stronger) lets through modes that clash with the old one.
function Q.fits_held(queue, me, mode)
    for _, e in ipairs(queue) do
        if e ~= me and e.granted and not Q.compatible(e.granted, mode) then return false end
    end
    return true
end

-- Whether queue has a granted entry other than me.
function Q.others_granted(queue, me)
    for _, e in ipairs(queue) do
        if e ~= me and e.granted then return true end
    end
    return false
end

-- True when entry `e` (its held mode, its pending conversion, or the mode
-- it waits for) conflicts with `mode`.
local function clashes(e, mode)
    if e.granted then
        if not Q.compatible(e.granted, mode) then return true end
        return e.convert ~= nil and not Q.compatible(e.convert, mode)
    end
    return not Q.compatible(e.mode, mode)
end

local function index_of(queue, entry)
    for i, e in ipairs(queue) do
        if e == entry then return i end
    end
    error("lockq: entry is not in the queue")
end

-- The herd-free watch: the ONE node that waiting entry `entry` watches, or
-- nil when nothing blocks it: it does not wait, or Q.grantable grants it
-- now.
--
-- A new request W watches the nearest earlier entry that conflicts with it:
-- with its held mode, its pending conversion, or the mode it waits for.
-- When none does, W is compatible with everything ahead and waits only for
-- its turn: it watches the nearest earlier waiter (a new request, or a
-- pending conversion), whose grant the layer records with a setData.
--
-- Why one node is enough (strict FIFO): while W's target T is there and
-- unchanged, W cannot be granted.  If T conflicts with W, T is ahead of W,
-- so either T holds a conflicting mode, or T waits and must be granted
-- before W and then holds a conflicting mode; only T's release or
-- down-conversion ends that.  If T is the nearest earlier waiter, W is not
-- granted before T is (FIFO, or the conversion queue before new requests),
-- and every waiter ahead of T is granted before T is.  So every event that
-- may let W through happens on T; when it fires, W asks again and is either
-- grantable or finds a new target, further ahead: the entries between the
-- old target and W did not block W and still do not.  A release wakes only
-- the waiters that watch it, which are those it may unblock.
--
-- A conversion C (a granted hold asking a stronger mode) watches the first
-- other granted hold whose mode conflicts with the mode asked — it may be
-- later in the queue than C — or, when none does, the conversion just
-- ahead of it in the conversion queue.  Two conversions can end up
-- watching each other: see Q.deadlocked.
--
-- What the ZooKeeper layer watches: a release is the node's deletion, but a
-- conversion asked, a conversion granted or given up, a grant recorded and
-- a down-conversion are setData on a node that stays.  So watch the target
-- with getData (a data watch), which fires on NodeDataChanged and on
-- NodeDeleted and returns the data needed to ask again (an exists watch
-- fires on both too; a child watch on the lock's node would fire on every
-- arrival: the herd).  If getData answers NoNode, the target left before
-- the watch was set: ask again at once.  grants: Q.grantable(queue), when
-- the caller has it.
function Q.watch_target(queue, entry, grants)
    if not Q.waits(entry) then return nil end
    for _, g in ipairs(grants or Q.grantable(queue)) do
        if g.entry == entry then return nil end
    end
    if entry.granted then
        for _, h in ipairs(queue) do
            if h ~= entry and h.granted and not Q.compatible(h.granted, entry.convert) then
                return h
            end
        end
        local prev
        for _, c in ipairs(conversions(queue)) do
            if c == entry then return prev end
            prev = c
        end
        return nil
    end
    local i = index_of(queue, entry)
    for j = i - 1, 1, -1 do
        if clashes(queue[j], entry.mode) then return queue[j] end
    end
    for j = i - 1, 1, -1 do
        if Q.waits(queue[j]) then return queue[j] end
    end
    return nil
end

-- The conversions caught in a deadlock: a cycle of waits among conversion
-- waiters (A PR -> EX waits for B's PR while B PR -> EX waits for A's PR,
-- or B waits behind A in the conversion queue while A waits for B's hold).
-- The DLM answers such a conversion with EDEADLK; the layer should end the
-- wait of the latest one of a cycle (its WAIT lapses, or an error), which
-- keeps its old mode.  Returns the set entry -> true.
function Q.deadlocked(queue)
    local convs = conversions(queue)
    local waits_for = {}
    for k, c in ipairs(convs) do
        local out = {}
        for _, h in ipairs(queue) do
            if h ~= c and h.granted and not Q.compatible(h.granted, c.convert) then
                out[#out + 1] = h
            end
        end
        if k > 1 then out[#out + 1] = convs[k - 1] end
        waits_for[c] = out
    end
    local stuck, state = {}, {}
    local function walk(c, path)
        state[c] = "open"
        path[#path + 1] = c
        for _, h in ipairs(waits_for[c] or {}) do
            if state[h] == "open" then
                for j = #path, 1, -1 do
                    stuck[path[j]] = true
                    if path[j] == h then break end
                end
            elseif state[h] == nil and waits_for[h] then
                walk(h, path)
            end
        end
        path[#path] = nil
        state[c] = "done"
    end
    for _, c in ipairs(convs) do
        if not state[c] then walk(c, {}) end
    end
    return stuck
end

-- The largest zxid a grant decision has seen: the lock node's pzxid from
-- the getChildren that listed the queue (the zxid of the last arrival or
-- departure), the lock node's own mzxid when it was read (locks.lua writes
-- it with every grant, conversion asked or given up, and down-conversion),
-- and the czxid and mzxid of every child whose stat was read.
function Q.observed(queue, pzxid, lock_mzxid)
    local z = math.max(pzxid or 0, lock_mzxid or 0)
    for _, e in ipairs(queue) do
        if e.mzxid and e.mzxid > z then z = e.mzxid end
        if e.czxid and e.czxid > z then z = e.czxid end
    end
    return z
end

-- The fencing token of a grant of `entry`, decided on a read that saw
-- `observed` (Q.observed).  The contract: a hold's token is greater than
-- the token of every hold that conflicts with it and was granted before it.
--
--   token = max(czxid, observed)
--
-- Why not the czxid alone: a conversion is granted ahead of new requests
-- that were queued before it was asked.  A holds PR; B queues for EX (czxid
-- 10); A converts to EX (a write, zxid 11) and is granted; A releases; B is
-- granted.  B's czxid 10 is below A's EX hold's token, so a store fenced by
-- A's writes would refuse B's.  The conversion's own token needs its ask
-- for the same reason (its czxid is older than holds granted since): the
-- ask is a write the decision observes.
--
-- Why the rule holds: let H be granted before G, conflicting with it.  The
-- two are never held together, so before G's grant H's conflicting hold
-- ended by a write E: the deletion of H's node (release, lease expiry by
-- its owner, session loss), which raises the lock node's pzxid to E, or a
-- down-conversion, a write the decision observes too.  G's decision saw
-- that write (it found H gone or weaker), so observed >= E.  H's token was
-- fixed before H's grant from zxids that had already happened, so it is
-- below E, a later write.  Hence token(H) < E <= token(G).  This needs
-- every decision to see the write that ended a conflicting hold, which is
-- why no sidecar may treat another's hold as ended by its own clock.
--
-- A down-conversion keeps its token (the hold continues, weaker); so does a
-- reentrant acquire.
function Q.token(entry, observed)
    return math.max(entry.czxid or 0, observed or 0)
end

return Q
