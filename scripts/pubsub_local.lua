-- pubsub_local.lua — this sidecar's subscriptions: which client is
-- subscribed to what, the counts Redis's replies carry, what the gateway is
-- told, and delivery of a message to the local subscribers (host.push).
-- Nothing here talks to ZooKeeper; registering this sidecar's interest is
-- pubsub_interest.lua's, and pubsub.lua ties the two together.
--
-- kind: "c" channel, "p" pattern, "s" shard channel.

local U = require "util"

local PL = {}

local clients = {}                 -- id -> {c = {list, set}, p = ..., s = ...}
local subs = { c = {}, p = {}, s = {} }   -- kind -> name -> {ids = {id = true}, n}
local pattern_order = {}           -- patterns in first-subscription order

-- The record of client id, or nil when it has no subscriptions.
function PL.client(id)
    return clients[id]
end

-- The record of client id, made when it has none.
function PL.ensure_client(id)
    local c = clients[id]
    if not c then
        c = { c = { list = {}, set = {} }, p = { list = {}, set = {} }, s = { list = {}, set = {} } }
        clients[id] = c
    end
    return c
end

-- A client's record goes (it closed or was RESET).
function PL.forget(id)
    clients[id] = nil
end

local function count(c, kind)
    return #c[kind].list
end
PL.count = count

-- Redis's count in (un)subscribe replies: channels + patterns, or shard
-- channels alone.
function PL.reply_count(c, kind)
    if kind == "s" then return count(c, "s") end
    return count(c, "c") + count(c, "p")
end

function PL.tell_gateway(id, c)
    host.subscriptions(id, count(c, "c"), count(c, "p"), count(c, "s"))
    if count(c, "c") + count(c, "p") + count(c, "s") == 0 then clients[id] = nil end
end

local function list_remove(list, v)
    for i = 1, #list do
        if list[i] == v then table.remove(list, i) return end
    end
end

-- Subscribes client id (record c) to (kind, name).  Returns the number of
-- local subscribers of (kind, name) now, or nil when c already was one.
function PL.add(id, c, kind, name)
    local mine = c[kind]
    if mine.set[name] then return nil end
    mine.set[name] = true
    mine.list[#mine.list + 1] = name
    local e = subs[kind][name]
    if not e then
        e = { ids = {}, n = 0 }
        subs[kind][name] = e
        if kind == "p" then pattern_order[#pattern_order + 1] = name end
    end
    e.ids[id] = true
    e.n = e.n + 1
    return e.n
end

-- Unsubscribes client id (record c) from (kind, name).  Returns false when
-- it was not subscribed; else true and the number of local subscribers
-- left (nil if (kind, name) had no entry).
function PL.remove(id, c, kind, name)
    local mine = c[kind]
    if not mine.set[name] then return false end
    mine.set[name] = nil
    list_remove(mine.list, name)
    local e = subs[kind][name]
    if e then
        e.ids[id] = nil
        e.n = e.n - 1
        if e.n <= 0 then
            subs[kind][name] = nil
            if kind == "p" then list_remove(pattern_order, name) end
        end
        return true, math.max(e.n, 0)
    end
    return true
end

-- The local subscriptions of a kind: name -> {ids, n}.  The live table (it
-- is replaced by PL.compact, so fetch it again after a yield).
function PL.by_name(kind)
    return subs[kind]
end

local function push_all(ids, frame)
    local n = 0
    for id in pairs(ids) do
        if host.push(id, frame) then n = n + 1 end
    end
    return n
end

-- Delivers one message to this sidecar's subscribers; returns how many.
function PL.deliver(kind, channel, payload)
    local n = 0
    if kind == "s" then
        local e = subs.s[channel]
        if e then n = n + push_all(e.ids, { push = { "smessage", channel, payload } }) end
        return n
    end
    local e = subs.c[channel]
    if e then n = n + push_all(e.ids, { push = { "message", channel, payload } }) end
    for _, pat in ipairs(pattern_order) do
        local pe = subs.p[pat]
        if pe and U.glob(pat, channel) then
            n = n + push_all(pe.ids, { push = { "pmessage", pat, channel, payload } })
        end
    end
    return n
end

-- How many local subscribers a message on (kind, channel) reaches.
function PL.local_count(kind, channel)
    if kind == "s" then
        local e = subs.s[channel]
        return e and e.n or 0
    end
    local e = subs.c[channel]
    local n = e and e.n or 0
    for _, pat in ipairs(pattern_order) do
        local pe = subs.p[pat]
        if pe and U.glob(pat, channel) then n = n + pe.n end
    end
    return n
end

-- How many subscriptions this sidecar's clients hold (pubsub.sizes).
function PL.size()
    local n = 0
    for _, kind in ipairs({ "c", "p", "s" }) do
        for _, e in pairs(subs[kind]) do n = n + e.n end
    end
    return n
end

-- See pubsub.lua's compact.
function PL.compact()
    for _, kind in ipairs({ "c", "p", "s" }) do
        if next(subs[kind]) == nil then subs[kind] = {} end
    end
    if next(clients) == nil then clients = {} end
end

return PL
