-- expiry.lua — keys leaving: the owned keys whose deadline passed
-- (deleted by us, their owner), watches on our nodes (lost to another
-- client), our session lost (every owned key with it), and commands that
-- wait for another session's expired lock to go.
--
--   owned.lua's heap --timer--> expire_due --> expire_one: delete + check
--                                              guard, or look, then delete
--   watch event --> on_watch: our guard (guard.lua), a waiter, check_lost
--   session lost --> forget_session: on_lost hooks, the cache emptied but
--                    for persistent keys with a TTL (still ours to delete)
--
-- Time: the owner of a key with a TTL counts its deadline on host.now()
-- from the acknowledgment of its write and deletes the node itself when it
-- passes (a versioned delete with a check of the session guard, or, when
-- the guard no longer vouches for the node, a read to check the nonce
-- first).  See keyspace.lua for how other sidecars read the deadline.

local codec = require "codec"
local queue = require "queue"
local H = require "hooks"
local U = require "util"
local S = require "signal"
local Z = require "zkio"
local G = require "guard"
local O = require "owned"
local L = require "resolve"
local shared = require "shared"

local X = {}

-- Commands waiting for another session's expired lock to go
-- (await_expiry): path -> list of their coroutines.
local expiry_waiters = {}
X.EXPIRY_WAIT_MS = 250

-- Commands that may write (write commands, scripts): coroutine -> true.
local writer = U.per_command()
function X.may_write(co) writer[co or coroutine.running()] = true end

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
    local wait = math.max(0, -late) + X.EXPIRY_WAIT_MS
    timer:start(math.max(0, math.min(wait, host.deadline() - host.now())))
    return host.suspend() == true
end

local function foreign_expiring(rec)
    local owner = rec.node and rec.node.ephemeralOwner or 0
    return owner ~= 0 and not rec.mine and not rec.dead_owner and rec.deadline ~= nil and
           rec.deadline <= host.now() + X.EXPIRY_WAIT_MS and writer[coroutine.running()]
end

-- For K.read: whether the running command met such a node in rec, waited,
-- and saw it go or change (then it reads again).
function X.awaited(rec)
    return foreign_expiring(rec) and await_expiry(rec) or false
end

-- After a watch fired on an owned node: once our own work on the key is
-- done (its queue), an entry still standing for a node that is gone or
-- carries another nonce was taken from us by another client: lost.
local function check_lost(path, e)
    local held <close> = queue.hold({ path })
    if O.owned[path] ~= e or e.sid ~= zk.session() then return end
    local rc, data = zk.get(path)
    local how
    if rc == zk.NONODE then
        how = "deleted"
    elseif rc == zk.OK and codec.decode(data).nonce ~= e.nonce then
        how = "overwritten"
    end
    if not how or O.owned[path] ~= e then return end
    X.taken(path, e, how)
end

-- Entry e's node was taken from us (how: "deleted", "overwritten"): the
-- entry goes, and the policy hears of it (on_lost) whoever saw it first,
-- the watch's check_lost or our expiry's look.
function X.taken(path, e, how)
    O.forget(path)
    if e.key and H.has("on_lost") then H.notify("on_lost", e.key, O.entry_info(path, e, { reason = how })) end
end

-- A watch fired: on our guard (learn its version again), or on an owned
-- node (with an on_lost hook: was it taken from us?).
function X.on_watch(event, path)
    if path == G.guard.path then
        host.spawn(G.refresh)
        return
    end
    G.on_watch(path)
    local waiting = expiry_waiters[path]
    if waiting then
        expiry_waiters[path] = nil
        for _, co in ipairs(waiting) do host.wake(co, true) end
    end
    local e = O.owned[path]
    if e and (event == "deleted" or event == "changed") and H.has("on_lost") and e.key then
        host.spawn(function() pcall(check_lost, path, e) end)
    end
end

-- A reload gave the policy an on_lost hook the one before lacked: the keys
-- this session owns were written without the watch that follow()
-- (owned.lua) leaves with one.  Watch each now; one gone or changed since
-- its write is looked at as a watch event would have it.
function X.follow_owned()
    if not H.has("on_lost") or not next(O.owned) then return end
    local sid = zk.session()
    for path, e in pairs(O.owned) do
        if e.key and e.sid == sid then
            host.spawn(function()
                local ok, rc, stat = pcall(zk.exists, path, true)
                if not ok or (rc ~= zk.OK and rc ~= zk.NONODE) then return end
                if rc == zk.NONODE or stat.version ~= e.version or (e.czxid and stat.czxid ~= e.czxid) then
                    pcall(check_lost, path, e)
                end
            end)
        end
    end
end

-- Deletes one owned node whose deadline passed, if it is still the node we
-- wrote.
function X.expire_one(path, e)
    local held <close> = queue.hold({ path })
    if O.owned[path] ~= e or e.deadline > host.now() then return end
    local sid, connected = zk.session()
    -- (an ephemeral node went with its session; a persistent one stays)
    if e.sid ~= sid and e.lifetime ~= "persistent" then return O.forget(path) end
    if not connected then
        -- Try again later (and at once when the session is back).
        O.heap_push({ at = host.now() + 1000, path = path, entry = e })
        return
    end
    local function expired(rc)
        if O.owned[path] == e then O.forget(path) end
        if rc ~= zk.BADVERSION then shared.saw(path, false) end
        host.log("debug", "expired " .. path)
        if rc == zk.OK and e.key and H.has("on_expire") then
            H.notify("on_expire", e.key, O.entry_info(path, e))
        end
    end
    -- While the guard vouches for the entry (as for K.cached), nobody else
    -- removed our node: one multi {delete, check guard, set mark}, grouped.  Not once
    -- a write or delete of the entry's node has had an unknown outcome: the
    -- node may be gone, and another's made since at our version (the guard
    -- only tells of removals).
    if e.gv and not e.doubted and e.gv == G.guard.version and e.gcz == G.guard.czxid and
       e.sid == G.guard.sid then
        shared.touched(path)
        local mrc = zk.multi(G.removal(path, e.version, e.gv, e.lifetime ~= "persistent"), true)
        if mrc == zk.OK then return expired(mrc) end
        if Z.unknown(mrc) then e.doubted = true end
        -- failed, or its outcome unknown: look
    end
    -- Look before deleting: the node may have been replaced (an overwrite by
    -- another sidecar) or deleted and created again, and only the nonce
    -- proves it is still the one we wrote.  The delete checks our guard (a
    -- persistent node's, its persistent mark) as it was before the look:
    -- whoever removes our node between the look and the delete bumps it,
    -- so the delete cannot hit a node made since at our version.  The look
    -- comes after a sync: a write of ours whose answer was lost (our
    -- delete, which others' removals do not bump the guard for) may not be
    -- applied yet on a server reached since.
    local gv = G.ready()
    if not gv and e.lifetime ~= "persistent" then
        -- never a removal of ours unmarked (guard.lua): look again soon
        O.heap_push({ at = host.now() + G.LOST_RETRY_MS, path = path, entry = e })
        return
    end
    -- (a persistent node's delete checks its mark, as known before the look)
    local pops = e.lifetime == "persistent" and G.pmark_removal(path)
    if e.lifetime == "persistent" and not pops then
        O.heap_push({ at = host.now() + 1000, path = path, entry = e })
        return
    end
    local rc, data, stat = zk.sync(path)
    if rc == zk.OK then rc, data, stat = zk.get(path) end
    -- (the session was given up meanwhile, which forgot the entry: its
    -- node, when still there, is left to that session's end)
    if O.owned[path] ~= e then return end
    if rc == zk.NONODE then
        -- gone after our removal whose reply was lost: ours while our guard
        -- stayed (whoever removes a node of our live session bumps it)
        if e.doubted and e.lifetime ~= "persistent" and e.sid == sid and G.unmoved(sid, e.gv, e.gcz) then
            return expired(zk.OK)
        end
        -- (removed by another client, its watch event not handled yet:
        -- told here, once, as check_lost would)
        return X.taken(path, e, "deleted")
    end
    if rc ~= zk.OK then
        O.heap_push({ at = host.now() + 1000, path = path, entry = e })
        return
    end
    if codec.decode(data).nonce ~= e.nonce then return X.taken(path, e, "overwritten") end
    if stat.version ~= e.version or (e.lifetime ~= "persistent" and stat.ephemeralOwner ~= zk.session()) then
        return O.forget(path)
    end
    shared.touched(path)
    -- (a persistent node: its mark tells of removals, not our guard)
    local ops = G.removal(path, e.version, not pops and gv or nil, not pops)
    for _, op in ipairs(pops or {}) do ops[#ops + 1] = op end
    if #ops > 1 then
        local results
        rc, results = G.multi(ops)
        if G.guard_failed(rc, results) then
            -- our guard or the node's persistent mark moved (or went) since
            -- the look, not the node: look again soon
            if gv and not pops then host.spawn(G.refresh) end
            O.heap_push({ at = host.now() + 50, path = path, entry = e })
            return
        end
    else
        rc = zk.delete(path, e.version)
    end
    if rc == zk.OK or rc == zk.NONODE or rc == zk.BADVERSION then return expired(rc) end
    if Z.unknown(rc) then
        -- applied unless a node still carries our nonce (no czxid: the nonce decides)
        if pcall(L.resolve, {}, { { path = path, node = {}, nonce = e.nonce } }) then return expired(zk.OK) end
    end
    O.heap_push({ at = host.now() + 1000, path = path, entry = e })
end

-- Runs from the expiry timer: deletes every owned key whose deadline passed
-- and re-arms the timer for the next one.  With `all` (back from a
-- disconnection) it looks at every owned key, not only those due by the
-- heap, whose retries may be scheduled later.
X.WORKERS = 8

function X.expire_due(all)
    local now = host.now()
    local due, seen = {}, {}
    while O.first() and O.first().at <= now do
        local item = O.heap_pop()
        if O.owned[item.path] == item.entry and not seen[item.path] then
            seen[item.path] = true
            due[#due + 1] = item
        end
    end
    if all then
        for path, e in pairs(O.owned) do
            if e.deadline and e.deadline <= now and not seen[path] then
                seen[path] = true
                due[#due + 1] = { at = e.deadline, path = path, entry = e }
            end
        end
    end
    O.arm() -- for the keys still to come, while these are deleted
    -- A few workers take the batch, so that one slow key (its queue held
    -- by a long script, a slow answer) does not hold back the keys due
    -- with it (keys taken in one commit share their deadline).
    local taken = 0
    local function worker()
        while taken < #due do
            taken = taken + 1
            local item = due[taken]
            local ok, err = pcall(X.expire_one, item.path, item.entry)
            if not ok then
                host.log("warn", "expiring " .. item.path .. ": " ..
                         tostring(S.is_abort(err) and err.reply.err or err))
                if O.owned[item.path] == item.entry then
                    O.heap_push({ at = host.now() + 1000, path = item.path, entry = item.entry })
                end
            end
        end
        O.arm()
    end
    for _ = 2, math.min(X.WORKERS, #due) do host.spawn(worker) end
    worker()
end

-- Every owned ephemeral key is lost with the session; its nodes, if still
-- there, are foreign from now on.  A persistent key with a TTL is still
-- ours to delete at its deadline (O.drop_session).
function X.forget_session(sid)
    if sid and sid ~= 0 then G.dead[sid] = true end
    if H.has("on_lost") then
        for path, e in pairs(O.owned) do
            if e.lifetime == "ephemeral" and e.key then
                H.notify("on_lost", e.key, O.entry_info(path, e, { reason = "session" }))
            end
        end
    end
    O.drop_session()
end

-- See keyspace.lua's K.compact.
function X.compact()
    expiry_waiters = shared.copy(expiry_waiters)
end

return X
