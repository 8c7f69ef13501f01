-- queue.lua — per-key FIFO queues inside one sidecar.
--
-- A command that touches keys holds every key's queue from before its first
-- read until it is done, so the commands of this sidecar on one key run one
-- after another in arrival order and never race each other; commands on
-- different keys run concurrently.
--
-- A command enqueues a ticket on all of its keys at once (no yield in
-- between) and runs when its ticket is first in every one of those queues.
-- Since every queue is ordered by the same arrival order, the earliest
-- waiting ticket is first everywhere it waits: no deadlock, whatever the key
-- order.
--
-- Use it with a to-be-closed variable, so that the queues are released on
-- every exit: a return, an error, or the host closing the coroutine:
--
--   local held <close> = queue.hold(paths)
--
-- Queues are keyed by znode path, so two keys the policy maps to one node
-- share a queue.

local Q = {}

local queues = {}   -- path -> array of tickets, the holder first

local function release(ticket)
    if ticket.released then return end
    ticket.released = true
    local paths = ticket.paths
    for j = 1, #paths do
        local path = paths[j]
        local q = queues[path]
        if q then
            for i = 1, #q do
                if q[i] == ticket then
                    table.remove(q, i)
                    if i == 1 and q[1] then
                        local nxt = q[1]
                        nxt.need = nxt.need - 1
                        if nxt.need == 0 then host.wake(nxt.co) end
                    end
                    break
                end
            end
            if #q == 0 then queues[path] = nil end
        end
    end
end

local Ticket = { __close = function(t) release(t) end }
Ticket.__index = Ticket
Ticket.release = release

-- paths without its duplicates (paths itself when it has one).
local function unique(paths)
    if #paths <= 1 then return paths end
    local seen, list = {}, {}
    for i = 1, #paths do
        local p = paths[i]
        if not seen[p] then
            seen[p] = true
            list[#list + 1] = p
        end
    end
    return list
end

-- Takes the queues of `paths` (a list; duplicates allowed; kept by the
-- ticket, not to be changed) for the running coroutine, waiting for earlier
-- holders.  Returns the ticket, to be held in a <close> variable (or
-- released with ticket:release()).
function Q.hold(paths)
    local list = unique(paths)
    local ticket = setmetatable({ co = coroutine.running(), paths = list, need = 0 }, Ticket)
    for i = 1, #list do
        local p = list[i]
        local q = queues[p]
        if not q then
            q = {}
            queues[p] = q
        end
        q[#q + 1] = ticket
        if #q > 1 then ticket.need = ticket.need + 1 end
    end
    -- If the coroutine is closed while it waits here, the caller's <close>
    -- variable does not exist yet, so the wait guards itself: the ticket
    -- leaves the queues and the keys it already heads pass to the next.
    if ticket.need > 0 then
        local waiter <close> = setmetatable({}, { __close = function()
            if ticket.need > 0 then release(ticket) end
        end })
        while ticket.need > 0 do host.suspend() end
    end
    return ticket
end

-- Takes the queues of paths now when nobody holds or waits for any of
-- them; nil otherwise (nothing taken, no wait).
function Q.try_hold(paths)
    for i = 1, #paths do
        if queues[paths[i]] then return nil end
    end
    return Q.hold(paths)
end

-- Number of keys with a queue (for INFO and the specs).
function Q.busy()
    local n = 0
    for _ in pairs(queues) do n = n + 1 end
    return n
end

-- Length of one key's queue, the holder included.
function Q.length(path)
    local q = queues[path]
    return q and #q or 0
end

return Q
