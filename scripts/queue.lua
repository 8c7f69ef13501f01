-- queue.lua — per-key FIFO queues inside one sidecar, and a connection's
-- order (Q.turn, at the end: a command without keys runs alone in its
-- connection's pipeline).
--
-- A command that touches keys holds every key's queue from before its first
-- read until it is done, so the commands of this sidecar on one key run one
-- after another in arrival order and never race each other; commands on
-- different keys run concurrently.
--
-- A command enqueues a ticket on all of its keys at once (no yield in
-- between) and runs when its ticket is first in every one of those queues.
-- A new ticket waits only for tickets that were there before it, so no
-- ticket waits, even through others, for itself: no deadlock, whatever
-- the key order.  A script adds the keys it did not declare once it ran
-- (Q.extend); it joins their queues only where that keeps no ticket
-- waiting for itself, and otherwise gives up its queues and takes them
-- all again.
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

-- paths without its duplicates (paths itself when it has one), nor, with
-- `seen` (path -> true), those in it, which it gains.
local function unique(paths, seen)
    if #paths <= 1 and not seen then return paths end
    local list = {}
    seen = seen or {}
    for i = 1, #paths do
        local p = paths[i]
        if not seen[p] then
            seen[p] = true
            list[#list + 1] = p
        end
    end
    return list
end

-- Puts ticket at the tail of path's queue (it needs one more release
-- when someone is ahead).
local function join(ticket, path)
    local q = queues[path]
    if not q then
        q = {}
        queues[path] = q
    end
    q[#q + 1] = ticket
    if #q > 1 then ticket.need = ticket.need + 1 end
end

-- Takes the queues of `paths` (a list; duplicates allowed; kept by the
-- ticket, not to be changed) for the running coroutine, waiting for earlier
-- holders.  Returns the ticket, to be held in a <close> variable (or
-- released with ticket:release()).
function Q.hold(paths)
    local list = unique(paths)
    local ticket = setmetatable({ co = coroutine.running(), paths = list, need = 0 }, Ticket)
    for i = 1, #list do join(ticket, list[i]) end
    -- If the coroutine is closed while it waits here (or once woken, before
    -- it runs), the caller's <close> variable does not exist yet, so the
    -- wait guards itself: the ticket leaves the queues and the keys it
    -- already heads pass to the next.
    if ticket.need > 0 then
        local taken = false
        local waiter <close> = setmetatable({}, { __close = function()
            if not taken then release(ticket) end
        end })
        while ticket.need > 0 do host.suspend() end
        taken = true
    end
    return ticket
end

-- How many steps the look for a cycle takes before it answers yes.
local CYCLE_LOOK_MAX = 10000

-- Whether a ticket joining the tails of paths would wait, even through
-- others, for ticket (or the look went past CYCLE_LOOK_MAX steps: yes).
-- A ticket waits for the one just ahead of it in each of its queues, and
-- through it for all those further ahead, so the look follows those only;
-- each entry carries where its ticket stands in the queue it came by.
local function would_wait_for(paths, ticket)
    local seen, stack, steps = {}, {}, 0
    for _, path in ipairs(paths) do
        local q = queues[path]
        if q then stack[#stack + 1] = { q[#q], path, #q } end
    end
    while #stack > 0 do
        local e = table.remove(stack)
        local t = e[1]
        if t == ticket then return true end
        if not seen[t] then
            seen[t] = true
            for _, path in ipairs(t.paths) do
                local q = queues[path] or {}
                local i = e[3]
                if path ~= e[2] then
                    i = #q
                    while i > 0 and q[i] ~= t do
                        i = i - 1
                        steps = steps + 1
                    end
                end
                if i > 1 then stack[#stack + 1] = { q[i - 1], path, i - 1 } end
            end
            steps = steps + 1
            if steps > CYCLE_LOOK_MAX then return true end
        end
    end
    return false
end

-- Adds paths to the queues a held ticket holds (a script's undeclared
-- keys, known only once it ran), at their tails, and waits until it holds
-- them too (those it holds already: nothing to do).  Returns false, adding nothing, when a ticket already there
-- waits, directly or through others, for this one, or may (waiting would
-- never end: the caller gives its queues up and takes them all again), else
-- true and whether it waited.  A ticket added at a tail waits for those
-- ahead of it there, as a new one does; nobody waits for it there, so no
-- cycle can form unless one already leads back to it.  If the coroutine
-- is closed while it waits, the caller's <close> variable releases the
-- whole ticket.
function Q.extend(ticket, paths)
    local have = {}
    for _, p in ipairs(ticket.paths) do have[p] = true end
    local new = unique(paths, have)
    if #new == 0 then return true, false end
    if would_wait_for(new, ticket) then return false end
    local list = table.move(ticket.paths, 1, #ticket.paths, 1, {})
    for _, p in ipairs(new) do
        list[#list + 1] = p
        join(ticket, p)
    end
    ticket.paths = list
    local waited = ticket.need > 0
    while ticket.need > 0 do host.suspend() end
    return true, waited
end

---------------------------------------------------------------------------
-- A connection's order
--
-- A connection's pipelined commands run side by side, in arrival order on
-- each key (the queues above).  A command without keys (KEYS, SCAN,
-- DBSIZE, FLUSHDB, PUBLISH, SCRIPT, a script with no KEYS, EXEC) runs
-- alone: once every earlier command of its connection is done, and before
-- any later one starts, as Redis runs a pipeline one command after
-- another.  A command waits for its turn only behind commands of its own
-- connection, which never wait for a later one: no deadlock.
--
--   local turn <close> = Q.turn(id, alone, before_wait)
--
-- nil when the connection went while the command waited (it does not run).

local conns = {}   -- client id -> {running, alone, starting, w (waiting turns), h, t}

-- Starts the waiting turns at c's head that may run: one alone once
-- nothing runs, else every other up to the next alone one.  A started
-- turn counts as starting until its command resumes: meanwhile no later
-- command may start (it would join its keys' queues first).
local function advance(c, id)
    while c.h <= c.t do
        local t = c.w[c.h]
        if t.state == "wait" then
            if c.alone or (t.alone and c.running > 0) then break end
            t.state, t.starting = "run", true
            c.running, c.alone, c.starting = c.running + 1, t.alone, c.starting + 1
            host.wake(t.co)
        end
        c.w[c.h], c.h = nil, c.h + 1
    end
    if c.running == 0 and c.h > c.t then conns[id] = nil end
end

local function started(t)
    if t.starting then
        t.starting = false
        t.c.starting = t.c.starting - 1
    end
end

local function finish(t)
    if t.state == "done" then return end
    local c = t.c
    started(t)
    if t.state == "run" then
        c.running = c.running - 1
        if t.alone then c.alone = false end
    end
    t.state = "done" -- (a waiting one: advance passes over it)
    advance(c, t.id)
end

local Turn = { __close = finish }

-- before_wait(), when given, is called once the command is to wait (what
-- it must read of its connection as it is now: hooks.lua's H.client).
function Q.turn(id, alone, before_wait)
    local c = conns[id]
    if not c then
        c = { running = 0, alone = false, starting = 0, w = {}, h = 1, t = 0 }
        conns[id] = c
    end
    local t = setmetatable({ c = c, id = id, alone = alone, state = "run" }, Turn)
    if c.h > c.t and c.starting == 0 and not c.alone and not (alone and c.running > 0) then
        c.running, c.alone = c.running + 1, alone
        return t
    end
    t.state, t.co, t.waited = "wait", coroutine.running(), true
    c.t = c.t + 1
    c.w[c.t] = t
    -- closed while it waits (or once started, before it runs): the caller's
    -- <close> variable does not exist yet, so the wait gives the turn back
    local taken = false
    local waiter <close> = setmetatable({}, { __close = function()
        if not taken then finish(t) end
    end })
    if before_wait then before_wait() end
    -- (suspend(true): its time waiting is not ZooKeeper's, and the
    -- connection's close ends it)
    while t.state == "wait" and host.client_id() do host.suspend(true) end
    taken = true
    if t.starting then
        started(t)
        advance(c, id) -- (the later ones, after this one: in arrival order)
    end
    if host.client_id() then return t end
    finish(t)
    return nil
end

-- Number of connections with commands in Q.turn (for the specs).
function Q.connections()
    local n = 0
    for _ in pairs(conns) do n = n + 1 end
    return n
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
