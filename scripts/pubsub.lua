-- pubsub.lua — Redis pub/sub across every sidecar of one ensemble:
-- publishing (PUBLISH at once, a script's publishes with its commit), and
-- the events that drive the modules below (watches, sessions, clients that
-- go, the periodic gc).  The commands are cmd_pubsub.lua's.
--
--   pubsub_local.lua     this sidecar's subscriptions; delivery to them
--   pubsub_interest.lua  this sidecar's interest, registered in ZooKeeper
--   pubsub_routes.lua    other sidecars' interest (watched), message ops
--   pubsub_inbox.lua     receiving: the inbox and the doorbells
--   pubsub_nodes.lua     the nodes under <root>/ps; collecting what is left
--
-- A publisher writes only when another sidecar is interested, one message
-- node per interested sidecar, never per subscriber (pubsub_routes.lua).
-- A script's commit checks that the routes it used are current, so a
-- publish made by it can never miss a subscriber whose SUBSCRIBE had
-- already been answered (pubsub_interest.lua).  After a new session the
-- interest is registered again, and a waiter on a lock channel whose lock
-- is free is sent the unlock message it may have missed (make_up).

local K = require "keyspace"
local queue = require "queue"
local PN = require "pubsub_nodes"
local PL = require "pubsub_local"
local PB = require "pubsub_inbox"
local PI = require "pubsub_interest"
local PR = require "pubsub_routes"
local Z = require "zkio"

local PS = {}

PS.stats = PN.stats

local deliver_local, local_count = PL.deliver, PL.local_count
local route, message_ops, invalidate = PR.route, PR.message_ops, PR.invalidate

---------------------------------------------------------------------------
-- Publishing

-- PUBLISH / SPUBLISH outside a script: local subscribers at once, then one
-- message node per interested sidecar.  Publishes of this sidecar leave in
-- arrival order.
local PUBLISH_QUEUE = "\0pubsub"

-- A payload over the value cap (--max-value-len) reaches this sidecar's
-- subscribers only: ZooKeeper would drop the connection over a request
-- larger than its jute.maxbuffer.
local function too_large(channel, payload)
    if #payload + #channel <= K.max_value_len() then return false end
    host.log("warn", string.format("pubsub: a %d-byte message on %q stays on this sidecar (over max-value-len)",
                                   #payload, channel))
    return true
end

-- A failed multi's doorbells that were missing (removed by someone else):
-- not rung again until their interest node changes (PR.bell_missing).
local function note_missing_bells(ops, results)
    if type(results) ~= "table" then return end
    for i, op in ipairs(ops) do
        if op.bell and results[i] and results[i].rc == zk.NONODE then PR.bell_missing(op.bell) end
    end
end

function PS.publish(kind, channel, payload)
    local held <close> = queue.hold({ PUBLISH_QUEUE })
    PS.stats.published = PS.stats.published + 1
    local n = deliver_local(kind, channel, payload)
    if too_large(channel, payload) then return n end
    local ok, targets, remote, _, rings = pcall(route, kind, channel)
    if not ok then
        host.log("debug", "pubsub: no route for " .. channel .. ": " ..
                 tostring(K.is_abort(targets) and targets.reply.err or targets))
        return n
    end
    if not next(targets) then return n end
    local ops = {}
    local sent = message_ops(ops, kind, channel, payload, targets, rings)
    local rc, results = zk.multi(ops)
    if rc == zk.OK then
        PS.stats.messages_sent = PS.stats.messages_sent + sent
        return n + remote
    end
    note_missing_bells(ops, results)
    invalidate(kind, channel)
    -- Its outcome unknown (the connection lost): sent again, it might
    -- arrive twice; PUBLISH is at-most-once, as Redis's, so not again.
    if Z.unknown(rc) then return n end
    -- One inbox or doorbell gone (its sidecar died, or left the channel),
    -- or the message too large for ZooKeeper: each message on its own,
    -- without doorbells, counting only the subscribers reached.
    for _, op in ipairs(ops) do
        if op[1] == "create" then
            local crc = zk.create(op[2], op[3], op[4])
            if crc == zk.OK then
                PS.stats.messages_sent = PS.stats.messages_sent + 1
                n = n + op.reach
            else
                host.log("warn", string.format("pubsub: a message on %q was not delivered to %s: rc %d",
                                               channel, op[2]:match("/i/([^/]+)/") or "?", crc))
            end
        end
    end
    return n
end

-- A script's publishes take part in its commit (txn.lua's t:on_commit):
-- the commit's multi carries their route checks and message creates, and
-- once it is answered they are delivered here (committed) or their routes
-- forgotten (failed).
local participant = {}

-- Appends the checks and message creates of t's publishes to ops; returns
-- how many messages that is.  The checks go in even when the route names
-- nobody: a subscription registered since (its watch event not here yet)
-- then fails the commit, and the script runs again on the new route, so a
-- script's unlock never misses a waiter whose SUBSCRIBE was answered.
function participant.plan(t, ops)
    local n = 0
    for _, p in ipairs(t.publishes) do
        for _, c in ipairs(p.checks) do ops[#ops + 1] = c end
        if next(p.targets) then
            n = n + message_ops(ops, p.kind, p.channel, p.payload, p.targets, p.rings)
        end
    end
    return n
end

function participant.done(t, ok, ops, results)
    if not ok and ops then note_missing_bells(ops, results) end
    for _, p in ipairs(t.publishes) do
        if ok then
            PS.stats.published = PS.stats.published + 1
            for _ in pairs(p.targets) do PS.stats.messages_sent = PS.stats.messages_sent + 1 end
            deliver_local(p.kind, p.channel, p.payload)
        else
            invalidate(p.kind, p.channel)
        end
    end
end

-- Inside a script: the message waits for the script's commit.  Returns the
-- count PUBLISH answers.
function PS.publish_buffered(t, kind, channel, payload)
    local targets, remote, checks, rings = {}, 0, {}, nil
    if not too_large(channel, payload) then targets, remote, checks, rings = route(kind, channel) end
    t.publishes = t.publishes or {}
    t.publishes[#t.publishes + 1] = { kind = kind, channel = channel, payload = payload,
                                      targets = targets, checks = checks, rings = rings }
    t:on_commit(participant)
    return local_count(kind, channel) + remote
end

---------------------------------------------------------------------------
-- Subscriptions: the local record and the interest together

-- Subscribes client id (record c) to (kind, name).  Returns the interest's
-- state, for PI.await, when that added a subscription.
function PS.add(id, c, kind, name)
    local n = PL.add(id, c, kind, name)
    if n then return PI.set(kind, name, n) end
end

-- Unsubscribes client id (record c) from (kind, name); false when it was
-- not subscribed.
function PS.drop(id, c, kind, name)
    local dropped, n = PL.remove(id, c, kind, name)
    if n then PI.set(kind, name, n) end
    return dropped
end

-- A client closed or was RESET: its subscriptions go.
function PS.client_gone(id)
    local c = PL.client(id)
    if not c then return end
    for _, kind in ipairs({ "c", "p", "s" }) do
        local names = {}
        for i, name in ipairs(c[kind].list) do names[i] = name end
        for _, name in ipairs(names) do PS.drop(id, c, kind, name) end
    end
    PL.forget(id)
end

-- What the modules hold, for M.stats (gauges): local subscriptions,
-- interests being registered or held, channels in the route cache, empty
-- channel nodes waiting for gc.
function PS.sizes()
    return { subscriptions = PL.size(), interests = PI.size(),
             route_cache = PR.size(), gc_queue = PN.gc_count() }
end

---------------------------------------------------------------------------
-- Lock channels: a message that may have been missed is made up

-- The subscribers of channel ch, a lock channel whose lock is free, are
-- sent Redisson's unlock message, which they may have missed.
-- A read that fails (ZooKeeper away: a read parked past the task's
-- deadline answers TIMEOUT) is tried again a moment later, in a task of
-- its own, while the channel has subscribers here (a minute at most).
local MAKE_UP_RETRY_MS, MAKE_UP_TRIES = 250, 240
local function make_up_channel(ch, tries)
    local keys = PB.lock_channel(ch)
    if not keys then return end
    for _, key in ipairs(keys) do
        local ok, rec = pcall(K.read, key)
        if not ok then
            tries = (tries or 0) + 1
            if tries < MAKE_UP_TRIES then
                host.spawn(function()
                    host.sleep(MAKE_UP_RETRY_MS)
                    if PL.by_name("c")[ch] then pcall(make_up_channel, ch, tries) end
                end)
            end
            return
        end
        if rec.live then return end
    end
    if PL.by_name("c")[ch] then
        PS.stats.made_up = PS.stats.made_up + 1
        deliver_local("c", ch, "0")
    end
end

-- After a new session: every lock channel's subscribers.
local function make_up()
    -- the channels as they are now: each read below waits, and the table
    -- changes meanwhile (next() on a changed table may raise)
    local channels = {}
    for ch in pairs(PL.by_name("c")) do channels[#channels + 1] = ch end
    for _, ch in ipairs(channels) do make_up_channel(ch) end
end

-- A channel whose SUBSCRIBE was answered before its interest was
-- registered (ZooKeeper away or slow), now registered: an unlock committed
-- in between went without this sidecar.
PI.on_late = function(kind, name)
    if kind == "c" then pcall(make_up_channel, name) end
end

---------------------------------------------------------------------------
-- Watches, sessions, garbage

-- Sets the watch on l/ (PN.watch_live), and while that fails (a reply
-- lost, ZooKeeper slow) tries again a moment later under the same session
-- and connection: the watch is set nowhere else (a reconnection or a new
-- session sets it itself), and without it this sidecar, the sweeper when
-- first in name order, never sees another die (its inbox left for good).
local WATCH_LIVE_RETRY_MS = 250
local function watch_live()
    local ok, set = pcall(PN.watch_live)
    if ok and set then return end
    if not ok then host.log("warn", "pubsub: listing live sidecars: " .. tostring(set)) end
    local sid = zk.session()
    host.spawn(function()
        host.sleep(WATCH_LIVE_RETRY_MS)
        local now, connected = zk.session()
        if now == sid and connected then watch_live() end
    end)
end

-- A watch under <root>/ps fired.  Returns true when it was ours.
function PS.on_watch(event, path)
    local base = PN.ps()
    if path:sub(1, #base + 1) ~= base .. "/" then return false end
    if PB.on_watch(event, path) then return true end
    if path == base .. "/l" then
        watch_live()
        return true
    end
    PR.on_watch(path)
    return true
end

-- A table emptied by deletes keeps the size it grew to (Lua shrinks a table
-- only when it inserts into a full one): after a client with thousands of
-- channels has gone, the big empty tables are replaced by new ones, so
-- that the heap returns to where it was.
local function compact()
    PL.compact()
    PI.compact()
    PN.compact()
    PR.compact()
    PB.compact()
end

local gc_timer
local function gc()
    PN.collect_due()
    PR.age()
    compact()
end

-- Run first of all the modules' handling (zkresp.lua), before anything
-- waits: a plain PUBLISH in between would route by a cache whose watches
-- went with the old session (a subscriber that came meanwhile missed).
function PS.session_changed(event)
    if event == "new" or event == "lost" then PR.new_session() end
end

function PS.on_session(event)
    if event == "new" then
        -- the old session's interest, presence and watches are gone (and
        -- maybe our inbox, see pubsub_inbox.lua's drain_once)
        PB.new_session()
        PI.new_session()
    elseif event == "lost" or event == "disconnected" then
        PB.disconnected()
        return
    end
    if event ~= "connected" and event ~= "new" then return end
    local ok, e = pcall(PB.start)
    if not ok then
        host.log("warn", "pubsub: inbox: " .. tostring(K.is_abort(e) and e.reply.err or e))
        PB.start_later()
    end
    PN.sweep_once()
    watch_live()
    if not gc_timer then
        gc_timer = host.timer(function()
            pcall(gc)
            gc_timer:start(PN.GC_DELAY_MS)
        end)
        gc_timer:start(PN.GC_DELAY_MS)
    end
    if event == "new" then
        -- wait for the registrations, then make up for lost unlocks
        PI.await_all()
        pcall(make_up)
    end
end

return PS
