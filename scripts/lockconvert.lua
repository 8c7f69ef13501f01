-- lockconvert.lua — LOCK.CONVERT of a native lock (locks.lua holds the
-- holds): a hold's mode changed by the DLM's rules (lockq.lua).  A
-- down-conversion is one write of the grant table, at once; an
-- up-conversion granted now is one too, else it is asked in the table (the
-- conversion queue, ahead of every new request) and waited for as a grant
-- is (lockgrant.lua's LG.settle), and given up, the old mode kept, when
-- its WAIT ends first.  Each write touches the hold's own node, which wakes
-- whoever watches it (locks.lua's header).

local Q = require "lockq"
local LS = require "lockstore"
local LW = require "lockwait"
local LG = require "lockgrant"
local LK = require "locks"
local G = require "guard"
local Z = require "zkio"
local S = require "signal"
local E = require "errors"

local LC = {}

-- A change of our hold's mode or token, seen in a fresh view (which knows
-- our node's version when it read or wrote it: a conversion rewrites the
-- node, and a release deletes it at that version).
local function converted(path, mode, token, view)
    local h = LK.holds[path]
    if not h then return end
    h.mode, h.token, h.view = mode, token, view
    local e = view and view.by_seq and view.by_seq[LS.seq_of(path)]
    if e and e.path == path and e.version then h.version = e.version end
end

-- Writes snap's table with our hold `mine` changed, touching its node
-- (which wakes whoever watches it); then snap as written is the hold's
-- view.  true when written.
local function write_own(snap, mine)
    local how, zxid, version = LW.write_table(snap, mine)
    if how ~= "ok" then return false end
    snap.version, snap.token = version or Z.next_version(snap.version), zxid -- (LS.settle_grants may write again)
    converted(mine.path, mine.granted, mine.token, snap)
    return true
end

-- Gives our conversion to `mode` of the request at `asked` up (the old mode
-- stays): the token when it was granted meanwhile (by a grant of ours
-- whose reply was lost: the hold's record learns it), else nil; -TRYAGAIN
-- when every try lost its write (the table still asks for it).
local function give_up(lock, asked, mode)
    for _ = 1, Z.READ_TRIES do
        local snap = LS.read(lock, true) -- (our ask may have landed unanswered)
        local me = snap and snap.by_seq[LS.seq_of(asked)]
        -- the hold itself is gone (its number is another's in a lock node
        -- made again since, a container the server removed once empty)
        if not me or me.path ~= asked then return nil, true end
        if not me.convert then
            if me.granted ~= mode then return nil end
            converted(asked, mode, me.token, snap)
            return me.token
        end
        me.convert = nil
        if write_own(snap, me) then return nil end
    end
    S.abort({ err = E.UNAVAILABLE })
end

-- LOCK.CONVERT of lock node `lock`; `pending` learns the request whose
-- conversion it asks for before the write.
local function convert(lock, owner, mode, wait_ms, pending)
    local until_ms = host.now() + wait_ms
    local asked, sid, unsure, confirms = nil, nil, nil, 0
    -- a hold of our session answered only while that session lasts
    local start = zk.session()
    local function held(token, holder_sid)
        if holder_sid == start and zk.session() ~= start then return { err = E.LOST_SESSION } end
        return token
    end
    local ours -- a hold of our session `start` seen by an earlier read
    while true do
        local snap = LS.read(lock)
        local mine, d = LS.find_owner(snap, owner)
        if not mine or not mine.granted then
            -- gone with that session since (our write's reply lost as the
            -- bridge gave it up: zk.c's fail_unanswered)
            if ours and zk.session() ~= start then return { err = E.LOST_SESSION } end
            return { err = "ERR owner holds no lock on this key (LOCK.ACQUIRE first)" }
        end
        ours = ours or (d.sidecar == LS.sidecar_id() and mine.owner_sid == start)
        if LS.from_lost_session(mine, d) then return { err = E.LOST_SESSION } end
        if mine.convert and unsure and mine.convert == mode then
            -- our request of the conversion went through, its reply lost
            asked, sid = mine.path, mine.owner_sid
            break
        end
        if mine.convert then
            return { err = "ERR owner's conversion of this lock is already waiting" }
        end
        if mine.granted == mode then
            if LS.confirmed(snap, mine) then return held(mine.token, mine.owner_sid) end
            confirms = confirms + 1
            if confirms >= Z.READ_TRIES then S.abort({ err = E.UNAVAILABLE }) end
        elseif Q.is_down(mine.granted, mode) then
            mine.granted = mode
            if write_own(snap, mine) then return held(mine.token, mine.owner_sid) end
        else
            mine.convert, mine.convert_at = mode, Z.next_version(snap.version)
            mine.asked_convert = math.floor(LS.leader_now())
            if LG.grants_me(snap.queue, mine) then
                mine.granted, mine.convert, mine.token = mode, nil, snap.token
                if write_own(snap, mine) then return held(mine.token, mine.owner_sid) end
            elseif wait_ms == 0 then
                return nil
            else
                pending.path = mine.path
                local how = LW.write_table(snap, mine)
                if how == "ok" then
                    asked, sid = mine.path, mine.owner_sid
                    break
                end
                unsure = unsure or how == "unknown" -- (then a stale read may write again)
            end
        end
    end
    local token, why = LG.settle(lock, asked, sid, until_ms, mode)
    if token then
        converted(asked, mode, token, why)
        return held(token, sid)
    end
    local granted, gone = give_up(lock, asked, mode)
    if granted then return held(granted, sid) end
    -- the hold ended while it waited: released (through another sidecar)
    -- or its lease, its session lasting; else with its session
    if gone and G.lasts(sid) then return { err = E.HOLD_ENDED } end
    if why == "lost" or gone then return { err = E.LOST_SESSION } end
    if why == "closing" and not host.unblocked() then return { err = E.CLOSING } end
    return LK.unblocked()
end

-- LOCK.CONVERT: a token, nil (WAIT over, old mode kept) or an error reply.  One
-- that fails (-TRYAGAIN) once it may have asked gives it up in the background.
function LC.convert(key, owner, mode, wait_ms)
    local lock, pending = LS.lock_path(key), {}
    LW.await_settled(lock, owner)
    local ok, r = pcall(convert, lock, owner, mode, wait_ms, pending)
    if ok then return r end
    if pending.path then
        host.spawn(function()
            for _ = 1, 600 do -- two minutes of ZooKeeper out of reach at most
                if pcall(give_up, lock, pending.path, mode) then return end
                host.sleep(200)
            end
        end)
    end
    error(r, 0)
end

return LC
