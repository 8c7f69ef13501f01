-- lockinfo.lua — LOCK.INFO of a native lock: its holders and waiters as
-- reply maps, read from the lock's table and request nodes (lockstore.lua)
-- by the clock of the leader that wrote each time in them.

local Q = require "lockq"
local Z = require "zkio"
local LS = require "lockstore"

local I = {}

-- LOCK.INFO of the lock node `lock` (LS.lock_path): {holders = {...}, waiters = {...}}
-- as reply maps, in queue order (conversions first among the waiters).
function I.info(lock)
    local snap = LS.read(lock)
    local holders, waiters = {}, {}
    if not snap then return { map = { "holders", holders, "waiters", waiters } } end
    local leader = LS.leader_now()
    -- (a leader ms read from a node maps by the clock of the leader that
    -- wrote it: a leader change to a server whose clock is off moves no
    -- answer; a lease end in the node by its mzxid, in the table by the
    -- table's)
    local function since_ms(ms, zxid, mtime)
        if zxid then Z.ensure_clock(zxid) end
        return host.now() - Z.local_time(ms, zxid, mtime)
    end
    for _, e in ipairs(snap.queue) do
        local d = LS.entry_data(e)
        if d and e.granted then
            local left = math.max(0, math.floor(LS.lease_local(snap, e, d) - host.now()))
            holders[#holders + 1] = { map = { "owner", d.owner, "mode", e.granted, "token", e.token,
                                              "count", d.count, "lease_left_ms", left,
                                              "sidecar", d.sidecar, "client", d.client } }
        end
    end
    -- (waits on the leader's clock: a request from its node's ctime, a
    -- conversion from when it was asked, so every sidecar answers alike)
    local function waiter(e, mode, kind, since)
        local d = LS.entry_data(e)
        local waited
        if since then waited = since_ms(since, snap.t.mzxid, snap.t.mtime) -- (the table's clock)
        elseif e.ctime then waited = since_ms(e.ctime, e.czxid)
        elseif d then waited = leader - d.asked end
        if d then
            waiters[#waiters + 1] = { map = { "owner", d.owner, "mode", mode,
                                              "waited_ms", math.max(0, math.floor(waited)),
                                              "kind", kind } }
        end
    end
    for _, c in ipairs(Q.conversions(snap.queue)) do waiter(c, c.convert, "conversion", c.asked_convert) end
    for _, e in ipairs(snap.queue) do
        if not e.granted then waiter(e, e.mode, "new") end
    end
    return { map = { "holders", holders, "waiters", waiters } }
end

return I
