-- pubsub_interest.lua — this sidecar's interest in ZooKeeper: for every
-- (kind, name) with local subscribers, its node c|p|s/<name>/<instance>
-- (pubsub_nodes.lua) holding the subscriber count, written, updated and
-- deleted by a few workers towards what the local subscriptions want, and
-- written again after a new session.
--
-- So that a publish made by a script's commit can never miss a subscriber
-- whose SUBSCRIBE had already been answered, registering interest bumps a
-- data version that the commit checks (pubsub_routes.lua):
--
--   * a new interest in a channel sets c/<channel> (and c/ itself when it
--     creates c/<channel>), and the commit checks the version of
--     c/<channel> it routed by, or of c/ when the channel had no node;
--   * a new pattern interest sets p/, which every commit checks.
--
-- SUBSCRIBE answers once its interest is registered (PI.await), or at the
-- command's deadline when ZooKeeper is away (then it registers as soon as
-- it is back).

local K = require "keyspace"
local U = require "util"
local Z = require "zkio"
local PN = require "pubsub_nodes"
local PB = require "pubsub_inbox"

local PI = {}

PI.RETRY_MS = 200          -- registering interest again after a failure

local dir, node, inst = PN.dir, PN.node, PN.inst
local bell_payload = PB.bell_payload

-- What an interest node holds: the subscriber count, and the encoded
-- payload of its doorbell if it has one.
local function interest_data(kind, name, n)
    local pl = bell_payload(kind, name)
    if pl then return n .. " " .. host.key_encode(pl) end
    return tostring(n)
end

local function connected()
    local _, c = zk.session()
    return c
end

---------------------------------------------------------------------------
-- Interest: this sidecar's registration per (kind, name), reconciled by one
-- worker at a time towards `want`.

-- A state: want (local subscribers), have (our node is written), count
-- and written (the subscriber count wanted, and in the node), made and
-- bell (our node, our doorbell, may exist: both go before it is settled
-- unwanted), busy (a worker has it), waiters.
local interest = { c = {}, p = {}, s = {} }  -- kind -> name -> state

local function wake_all(st)
    local w = st.waiters
    st.waiters = {}
    for _, co in ipairs(w) do host.wake(co) end
end

-- The multi that registers our interest in name: our node with a bump
-- (of the channel node, or of the pattern directory), after the channel
-- node and its directory's bump unless the channel node is known to exist
-- (see the top).
local function register_ops(kind, name, n, exists_known)
    local X = node(kind, name)
    local bump = kind == "p" and dir("p") or X
    local ops = { { "create", X .. "/" .. inst(), interest_data(kind, name, n), zk.EPHEMERAL }, { "set", bump, "", -1 } }
    if exists_known then return ops end
    local full = { { "create", X, "", 0 } }
    if kind ~= "p" then full[#full + 1] = { "set", dir(kind), "", -1 } end
    for _, o in ipairs(ops) do full[#full + 1] = o end
    return full
end

-- Whether an interest in name could never be registered: its multi would
-- pass ZooKeeper's request limit (each of its paths holds the name,
-- encoded), so every retry would be refused and its worker, and a new
-- session's PI.await_all, would never be done.
function PI.too_large(kind, name)
    return zk.request_size(register_ops(kind, name, math.maxinteger, false)) > zk.max_request()
end

-- One step towards st.want; returns true when it made progress or there is
-- nothing to do, false after a failure.
local function reconcile_step(kind, name, st)
    local X = node(kind, name)
    local me = X .. "/" .. inst()
    local n = st.count  -- may change while this step waits
    if st.want and not st.have then
        -- messages for this interest need our inbox
        if not PB.inbox_ready then
            if not pcall(PB.ensure_inbox) then return false end
        end
        -- the doorbell, before anyone can see it announced; from here on
        -- it may exist, whatever ZooKeeper answers
        local pl = bell_payload(kind, name)
        if pl then
            st.bell = true
            if not PB.ring_ready(name, pl) then return false end
        end
        local ops = register_ops(kind, name, n, st.exists_known)
        -- our node may exist from here on until ZooKeeper says otherwise
        -- (an answer lost: the create may have applied)
        st.made = true
        local rc, results = zk.multi(ops)
        if rc == zk.OK then
            st.have, st.written, st.exists_known = true, n, true
            return true
        end
        if not Z.unknown(rc) then st.made = nil end
        local first = rc
        for _, r in ipairs(type(results) == "table" and results or {}) do
            if r.rc ~= zk.OK and r.rc ~= zk.RUNTIMEINCONSISTENCY then first = r.rc break end
        end
        if first == zk.NODEEXISTS then
            if not st.exists_known then
                st.exists_known = true          -- the channel node exists
                return true
            end
            -- ours from an attempt whose answer was lost, or left by our
            -- previous session until the server expires it
            local erc, stat = zk.exists(me)
            if erc == zk.OK and stat.ephemeralOwner == zk.session() then
                st.have, st.written = true, nil
            elseif erc == zk.OK then
                zk.delete(me, -1)
            end
            return true
        elseif first == zk.NONODE then
            if st.exists_known then
                st.exists_known = false
                return true
            end
            local ok = pcall(K.ensure_path, dir(kind))
            return ok
        end
        return false
    elseif st.want and st.have and st.written ~= st.count then
        local rc = zk.set(me, interest_data(kind, name, n), -1)
        if rc == zk.OK then st.written = n return true end
        if rc == zk.NONODE then st.have = false return true end
        return false
    elseif not st.want and (st.have or st.made) then
        -- while it is on its way a SUBSCRIBE must not take `have` for
        -- registered (PI.await): the node is about to go
        st.leaving = true
        local rc = zk.delete(me, -1)
        st.leaving = nil
        if rc == zk.OK or rc == zk.NONODE then
            st.have, st.made = false, nil
            PN.gc_later(X)
            return true
        end
        return false
    elseif not st.want and st.bell then
        -- the doorbell goes after the interest, also when that went
        -- without our delete: with a session, or never written (its multi
        -- failed and the subscriber left before the next try)
        if not PB.unring(name, bell_payload(kind, name)) then return false end
        st.bell = false
        return true
    end
    return true
end

local function settled(st)
    if st.want then return st.have and st.written == st.count end
    return not st.have and not st.made and not st.bell
end

-- Interests to reconcile, in order, taken by at most PI.WORKERS coroutines:
-- a SUBSCRIBE of a thousand channels costs a few workers, not a thousand
-- coroutines (the VM's allocator keeps its small blocks at their peak).
PI.WORKERS = 16
local todo, todo_head, todo_tail = {}, 1, 0
local workers = 0

local function settle(kind, name, st)
    while not settled(st) do
        if not connected() then
            host.sleep(PI.RETRY_MS)
        else
            local ok, progressed = pcall(reconcile_step, kind, name, st)
            st.leaving = nil
            if st.have and st.want then
                wake_all(st)
                if st.late then
                    -- a SUBSCRIBE answered before this registration may
                    -- have missed a message meanwhile (PI.on_late)
                    st.late = nil
                    if PI.on_late then host.spawn(PI.on_late, kind, name) end
                end
            end
            if not ok then
                host.log("warn", "pubsub: registering interest in " .. name .. ": " .. tostring(progressed))
                host.sleep(PI.RETRY_MS)
            elseif not progressed then
                host.sleep(PI.RETRY_MS)
            end
        end
    end
    st.busy = false
    wake_all(st)
    if not st.want then st.late = nil end
    if not st.want and not st.have then interest[kind][name] = nil end
end

local function worker()
    while todo_head <= todo_tail do
        local item = todo[todo_head]
        todo[todo_head] = nil
        todo_head = todo_head + 1
        if todo_head > todo_tail then todo, todo_head, todo_tail = {}, 1, 0 end
        settle(item[1], item[2], item[3])
    end
    workers = workers - 1
end

local function reconcile(kind, name)
    local st = interest[kind][name]
    if not st or st.busy then return end
    st.busy = true
    todo_tail = todo_tail + 1
    todo[todo_tail] = { kind, name, st }
    if workers < PI.WORKERS then
        workers = workers + 1
        host.spawn(worker)
    end
end

-- The local subscriber count of (kind, name) changed to n.
function PI.set(kind, name, n)
    local st = interest[kind][name]
    if not st then
        if n == 0 then return end
        st = { want = false, have = false, count = 0, waiters = {} }
        interest[kind][name] = st
    end
    st.want = n > 0
    st.count = n
    reconcile(kind, name)
    return st
end

-- Waits until the interest of st is registered, at most until the
-- command's deadline.  A SUBSCRIBE answered at its deadline, before the
-- registration, marks st late: once registered, PI.on_late(kind, name)
-- (pubsub.lua) makes up what its subscribers may have missed meanwhile.
PI.on_late = nil
function PI.await(st)
    if not st or (st.have and st.want and not st.leaving) or not st.want then return end
    local co = coroutine.running()
    st.waiters[#st.waiters + 1] = co
    local timer = host.timer(function()
        for i = 1, #st.waiters do
            if st.waiters[i] == co then table.remove(st.waiters, i) break end
        end
        st.late = true
        host.wake(co)
    end)
    timer:start(math.max(0, host.deadline() - host.now()))
    host.suspend()
    timer:stop()
end

-- A new session: the old one's interest nodes are gone; each is written
-- again.
function PI.new_session()
    for _, kind in ipairs({ "c", "p", "s" }) do
        for name, st in pairs(interest[kind]) do
            -- (what a late one missed is made up with the rest: make_up)
            st.have, st.made, st.late = false, nil, nil
            reconcile(kind, name)
        end
    end
end

-- Waits until every interest wanted is registered.
function PI.await_all()
    for _, kind in ipairs({ "c", "p", "s" }) do
        -- (a snapshot: the table changes while this waits)
        local states = {}
        for _, st in pairs(interest[kind]) do states[#states + 1] = st end
        for _, st in ipairs(states) do
            if st.want and not st.have then
                local co = coroutine.running()
                st.waiters[#st.waiters + 1] = co
                host.suspend()
            end
        end
    end
end

-- How many interests are being registered or held (pubsub.sizes).
function PI.size()
    local n = 0
    for _, kind in ipairs({ "c", "p", "s" }) do
        n = n + U.count(interest[kind])
    end
    return n
end

-- See pubsub.lua's compact.
function PI.compact()
    for _, kind in ipairs({ "c", "p", "s" }) do
        if next(interest[kind]) == nil then interest[kind] = {} end
    end
end

return PI
