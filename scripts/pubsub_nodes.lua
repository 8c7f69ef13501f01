-- pubsub_nodes.lua — where pub/sub keeps its nodes in ZooKeeper, and the
-- collection of the ones left behind (empty channel nodes, the inboxes and
-- doorbells of sidecars that died).  Also pub/sub's settings and counters,
-- shared by the modules above it (pubsub.lua lists them).
--
-- Under <root>/ps (DESIGN.md, "Pub/Sub"):
--
--   c/<channel>/<instance>   this sidecar has subscribers on <channel>:
--   p/<pattern>/<instance>   EPHEMERAL, data = how many (for PUBLISH's
--   s/<channel>/<instance>   reply); s is for shard channels
--   l/<instance>             EPHEMERAL: this process is alive
--   i/<instance>             its inbox (persistent)
--   i/<instance>/m...        one message, PERSISTENT_SEQUENTIAL (it outlives
--                            its publisher's session); the receiver deletes
--                            it once delivered, in batches (pubsub_inbox.lua)
--   b/<instance>/<channel>.<payload>
--                            a doorbell: publishers set it to announce that
--                            message (pubsub_inbox.lua, "Doorbells")
--
-- <instance> is the process's random id in hex; channels and patterns are
-- encoded like keys (sidecar/keyenc.h).

local K = require "keyspace"
local U = require "util"
local errors = require "errors"

local PN = {}

-- A setting from host.config (sidecar/config.c), or its default.
function PN.cfg(name, default)
    return (host.config and host.config[name]) or default
end

PN.GC_DELAY_MS = PN.cfg("pubsub_gc_delay", 30000) -- an empty channel node is removed after this

-- Counters for /metrics (zkresp.lua's M.stats reads them as pubsub.stats).
PN.stats = { published = 0, messages_sent = 0, messages_received = 0, made_up = 0, rung = 0 }

---------------------------------------------------------------------------
-- Paths

local function hex(s)
    return (s:gsub(".", function(ch) return string.format("%02x", ch:byte()) end))
end

local INST
function PN.inst()
    INST = INST or hex(host.instance)
    return INST
end
local inst = PN.inst

function PN.ps() return K.root() .. "/ps" end
local ps = PN.ps
function PN.dir(kind) return ps() .. "/" .. kind end
local dir = PN.dir
function PN.node(kind, name) return dir(kind) .. "/" .. host.key_encode(name) end
function PN.inbox(who) return ps() .. "/i/" .. (who or inst()) end
local inbox = PN.inbox
function PN.presence(who) return ps() .. "/l/" .. (who or inst()) end
local presence = PN.presence
function PN.bells(who) return ps() .. "/b/" .. (who or inst()) end
local bells = PN.bells
function PN.bell(who, channel, payload)
    return bells(who) .. "/" .. host.key_encode(channel) .. "." .. host.key_encode(payload)
end

-- A read of ours that did not complete: ZooKeeper unavailable, as K.fail
-- says for the rest.
function PN.fail(rc, what)
    if K.unknown(rc) then K.abort({ err = errors.UNAVAILABLE }) end
    K.fail(rc, what)
end

---------------------------------------------------------------------------
-- Garbage: channel nodes left empty, and what dead sidecars left

local gc_queue = {}                          -- path -> due (host.now())

-- Queues the channel node X for removal once it is empty GC_DELAY_MS from
-- now; `keep` leaves an earlier due time as it is.
function PN.gc_later(X, keep)
    if keep and gc_queue[X] then return end
    gc_queue[X] = host.now() + PN.GC_DELAY_MS
end

-- Removes the queued channel nodes that are due and still empty (the
-- version check spares one that someone subscribed to meanwhile).
function PN.collect_due()
    local now = host.now()
    local due_now = {}
    for X, due in pairs(gc_queue) do
        if due <= now then due_now[#due_now + 1] = X end
    end
    for _, X in ipairs(due_now) do
        gc_queue[X] = nil
        local rc, stat = zk.exists(X)
        if rc == zk.OK and stat.numChildren == 0 then zk.delete(X, stat.version) end
    end
end

-- How many channel nodes wait for collection (pubsub.sizes).
function PN.gc_count()
    return U.count(gc_queue)
end

-- See pubsub.lua's compact.
function PN.compact()
    if next(gc_queue) == nil then gc_queue = {} end
end

-- Channel and pattern nodes left without interest: queued for gc.  Run
-- when a sidecar is found dead (its interest nodes went with its session,
-- the channel nodes above them stay): one walk of c/, p/ and s/ then, so
-- that PUBSUB CHANNELS and everyone else never walk a dead sidecar's
-- channels.
local function collect()
    local due = host.now() + PN.GC_DELAY_MS
    for _, kind in ipairs({ "c", "p", "s" }) do
        local D = dir(kind)
        local rc, names = zk.children(D)
        if rc == zk.OK then
            for _, enc in ipairs(names) do
                local X = D .. "/" .. enc
                local erc, stat = zk.exists(X)
                if erc == zk.OK and stat.numChildren == 0 then gc_queue[X] = gc_queue[X] or due end
            end
        end
    end
end

-- Appends the deletes of dir and its children to ops; false when dir could
-- not be listed.
local function delete_dir_ops(ops, dir)
    local rc, kids = zk.children(dir)
    if rc ~= zk.OK then return false end
    for _, k in ipairs(kids) do ops[#ops + 1] = { "delete", dir .. "/" .. k, -1 } end
    ops[#ops + 1] = { "delete", dir, -1 }
    return true
end

-- Inboxes (and doorbells) of processes that are gone (no l/<instance>),
-- with what is left in them, all or nothing.  Returns how many it found.
local function sweep()
    local rc, names = zk.children(ps() .. "/i")
    if rc ~= zk.OK then return 0 end
    local dead = 0
    for _, who in ipairs(names) do
        if who ~= inst() then
            local erc = zk.exists(presence(who))
            if erc == zk.NONODE then
                dead = dead + 1
                local ops = { { "create", presence(who), "", zk.EPHEMERAL }, { "delete", presence(who), -1 } }
                if delete_dir_ops(ops, inbox(who)) then
                    delete_dir_ops(ops, bells(who))
                    zk.multi(ops)
                end
            end
        end
    end
    return dead
end

-- Once per process, at its first session: what processes gone before it
-- started left behind.
function PN.sweep_once()
    if PN.swept then return end
    PN.swept = true
    local ok, dead = pcall(sweep)
    if ok and dead > 0 then pcall(collect) end
end

-- The sidecars alive (l/, watched), so that one of them notices when
-- another dies: the first of them in name order sweeps what the dead one
-- left (its inbox, doorbells, and the channel nodes only it was
-- interested in).  A sidecar that started meanwhile sweeps too (PN.swept).
local live = nil       -- instance -> true, as last listed
local sweeping = false
-- Returns true once the watch is set.
function PN.watch_live()
    local rc, names = zk.children(ps() .. "/l", true)
    if rc ~= zk.OK then return false end
    local now, gone = {}, false
    for _, who in ipairs(names) do now[who] = true end
    for who in pairs(live or {}) do
        if not now[who] then gone = true end
    end
    live = now
    table.sort(names)
    if gone and names[1] == inst() and not sweeping then
        -- not at once: a sidecar whose session merely expired makes its
        -- presence again in its new session, and keeps its inbox
        sweeping = true
        host.spawn(function()
            host.sleep(PN.GC_DELAY_MS)
            local ok, e = pcall(function()
                if sweep() > 0 then collect() end
            end)
            sweeping = false
            if not ok then host.log("warn", "pubsub: sweeping after a sidecar died: " .. tostring(e)) end
        end)
    end
    return true
end

return PN
