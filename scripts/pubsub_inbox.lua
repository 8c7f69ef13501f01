-- pubsub_inbox.lua — receiving messages from other sidecars: this
-- sidecar's presence and inbox (<root>/ps/l and i, see pubsub_nodes.lua),
-- reading it when its watch fires, deleting what was delivered, and the
-- doorbells that announce a lock channel's unlock without a read.
--
-- Message node names carry the message: "<kind><channel>.<payload>."
-- (encoded) then the sequence number, so the receiver needs no read beyond
-- listing its inbox; a payload too long for a name goes in the node's data
-- (the kind letter in upper case, see pubsub_routes.lua's msg_name).

local K = require "keyspace"
local U = require "util"
local PN = require "pubsub_nodes"
local PL = require "pubsub_local"

local PB = {}

local dir, inbox, presence, bells, bell = PN.dir, PN.inbox, PN.presence, PN.bells, PN.bell
local fail = PN.fail
local deliver_local = PL.deliver

---------------------------------------------------------------------------
-- Lock channels

-- The keys one of which is the lock whose release is announced on
-- `channel`, or nil.  Redisson names the channel of lock `name`
-- "redisson_lock__channel:{name}" ("redisson_rwlock:{name}" for its
-- read-write lock), and of a lock `{tag}...` (one with a hash tag already)
-- "redisson_lock__channel:{tag}...".
function PB.lock_channel(channel)
    local rest = channel:match("^redisson_lock__channel:(.+)$") or channel:match("^redisson_rwlock:(.+)$")
    if not rest then return nil end
    local inner = rest:match("^{(.*)}$")
    if inner then return { inner, rest } end
    return { rest }
end

-- The payload a doorbell is kept for on `channel`, or nil: Redisson's
-- unlock message on a lock channel (PB.lock_channel).
function PB.bell_payload(kind, channel)
    if kind == "c" and PB.lock_channel(channel) then return "0" end
end

---------------------------------------------------------------------------
-- Receiving: drain the inbox

local draining, drain_again = false, false
local seen = {}       -- message node name -> true until deleted
local delivered = {}  -- names delivered and not deleted yet, in order
local inbox_czxid     -- the inbox node those names are in...
local inbox_confirmed = false -- ...listed in our current session
local delivered_timer, delivered_armed = nil, false
local listings = 0    -- inbox listings started
local credits = {}    -- messages delivered when their doorbell rang:
                      -- {channel, payload, listing number then}
local listed = false  -- the last listing set the inbox's watch and went
                      -- through what it found, connected all along
local cuts = 0        -- disconnections and new sessions seen

-- A message's sequence number (ZooKeeper prints the parent's counter as a
-- signed int: "-2147483648" follows "2147483647").
local function seq_of(name)
    return tonumber(name:match("(%-?%d+)$")) or 0
end

local function parse(name)
    local kind, ch, pl = name:match("^(.)([^.]*)%.([^.]*)%.%-?%d+$")
    if not ch then return nil end
    local channel = host.key_decode(ch)
    if not channel then return nil end
    if kind == "c" or kind == "s" then
        return kind, channel, host.key_decode(pl)
    elseif kind == "b" then
        return "c", channel, host.key_decode(pl), true  -- its doorbell rang
    elseif kind == "C" or kind == "S" then
        return kind:lower(), channel, nil  -- payload in the data
    end
end

-- Our presence (l/<instance>) and inbox, before any interest is
-- registered (a sweeping sidecar removes inboxes without a presence).
function PB.ensure_inbox()
    for _, d in ipairs({ "c", "p", "s", "l" }) do
        local rc = zk.exists(dir(d))
        if rc == zk.NONODE then K.ensure_path(dir(d)) end
    end
    local rc = zk.create(presence(), "", zk.EPHEMERAL)
    if rc == zk.NODEEXISTS then
        -- one of a session given up here (the server ends it later, and
        -- the sweep would then take our live inbox): made again, ours
        local erc, stat = zk.exists(presence())
        if erc == zk.OK and stat.ephemeralOwner ~= zk.session() then
            rc = zk.delete(presence(), stat.version)
            if rc == zk.OK or rc == zk.NONODE then rc = zk.create(presence(), "", zk.EPHEMERAL) end
        end
    end
    if rc ~= zk.OK and rc ~= zk.NODEEXISTS then fail(rc, "create " .. presence()) end
    K.ensure_path(inbox())
    PB.inbox_ready = true
end
local ensure_inbox = PB.ensure_inbox

-- Delivered messages are deleted together, in one multi, once there are
-- INBOX_GC_COUNT of them (or INBOX_GC_MS after the first): each delete
-- fires our inbox's watch, so a delete per message would cost a second
-- listing per message as well; a batch costs one listing.
PB.INBOX_GC_COUNT = 32
PB.INBOX_GC_MS = 100

local delete_delivered

local function arm_delivered()
    if delivered_armed then return end
    if not delivered_timer then
        delivered_timer = host.timer(function()
            delivered_armed = false
            delete_delivered()
        end)
    end
    delivered_armed = true
    delivered_timer:start(PB.INBOX_GC_MS)
end

function delete_delivered()
    if not inbox_confirmed then
        -- after a new session, not before a listing has shown that the
        -- inbox is still the node these names are from
        if #delivered > 0 then arm_delivered() end
        return
    end
    local names, czxid = delivered, inbox_czxid
    delivered = {}
    if #names == 0 then return end
    local box = inbox()
    local ops = {}
    for i, name in ipairs(names) do ops[i] = { "delete", box .. "/" .. name, -1 } end
    local rc = zk.multi(ops)
    local function done(name)
        if inbox_czxid == czxid then seen[name] = nil end
    end
    -- not deleted, while the inbox is the one these names are from: a
    -- later batch takes them (else they stay listed as seen for good)
    local function later(left)
        if inbox_czxid ~= czxid or #left == 0 then return end
        table.move(left, 1, #left, #delivered + 1, delivered)
        arm_delivered()
    end
    if rc == zk.NONODE then
        -- one is gone with its publisher's session: one at a time
        local left = {}
        for _, name in ipairs(names) do
            local drc = inbox_confirmed and inbox_czxid == czxid and zk.delete(box .. "/" .. name, -1)
            if drc == zk.OK or drc == zk.NONODE then done(name) else left[#left + 1] = name end
        end
        later(left)
    elseif rc == zk.OK then
        for _, name in ipairs(names) do done(name) end
    else
        later(names) -- ZooKeeper is away
    end
end

local function note_delivered(name)
    delivered[#delivered + 1] = name
    if #delivered >= PB.INBOX_GC_COUNT then
        host.spawn(delete_delivered)
    else
        arm_delivered()
    end
end

-- A message whose doorbell rang (kind "b"), listed by listing number
-- `listing`: true when it was delivered at the ring (a credit from before
-- that listing), which this spends.
local function spend_credit(channel, payload, listing)
    for i, c in ipairs(credits) do
        if c.gen < listing and c.channel == channel and c.payload == payload then
            table.remove(credits, i)
            return true
        end
    end
    return false
end

-- After listing number `listing`: the credits from before it that it did
-- not spend are stale (their message vanished with its publisher).
local function drop_credits(listing)
    local keep = {}
    for _, c in ipairs(credits) do
        if c.gen >= listing then keep[#keep + 1] = c end
    end
    credits = keep
end

local function drain_once()
    local box = inbox()
    listings = listings + 1
    local listing, cut = listings, cuts
    local rc, names, stat = zk.children(box, true)
    if rc == zk.NONODE then
        ensure_inbox()
        rc, names, stat = zk.children(box, true)
    end
    if rc ~= zk.OK then
        -- no watch set: look again a moment later (a request timeout while
        -- connected; a reconnection's listing may come first)
        listed = false
        PB.drain_later()
        return
    end
    if stat.czxid ~= inbox_czxid then
        -- a new inbox (ours was swept while our session was gone): its
        -- sequence numbers start again, so names seen in the old one say
        -- nothing, and deleting them could delete new messages
        inbox_czxid = stat.czxid
        seen, delivered = {}, {}
    end
    inbox_confirmed = true
    local new, order = {}, {}
    for _, name in ipairs(names) do
        if not seen[name] then
            new[#new + 1] = name
            order[name] = seq_of(name)
        end
    end
    -- in sequence order, past the counter's wrap (U.seq_before)
    table.sort(new, function(a, b) return U.seq_before(order[a], order[b]) end)
    local whole = true
    for _, name in ipairs(new) do
        local kind, channel, payload, rung = parse(name)
        if kind and not payload then
            local grc, data = zk.get(box .. "/" .. name)
            if grc == zk.OK then
                payload = data
            elseif grc ~= zk.NONODE then
                -- not readable now (the connection went): this message and
                -- those after it wait, in order, for the next listing (the
                -- reconnection's, or this one's a moment later)
                PB.drain_later()
                whole = false
                break
            end
        end
        seen[name] = true
        if kind and payload then
            PN.stats.messages_received = PN.stats.messages_received + 1
            if not (rung and spend_credit(channel, payload, listing)) then
                deliver_local(kind, channel, payload)
            end
        end
        note_delivered(name)
    end
    drop_credits(listing)
    listed = whole and cut == cuts
end

local function drain()
    if draining then drain_again = true return end
    draining = true
    repeat
        drain_again = false
        local ok, e = pcall(drain_once)
        if not ok then
            listed = false
            host.log("warn", "pubsub: reading the inbox: " .. tostring(K.is_abort(e) and e.reply.err or e))
            PB.drain_later()
        end
    until not drain_again
    draining = false
end

---------------------------------------------------------------------------
-- Doorbells
--
-- A waiter on another sidecar learns of a message one listing of its
-- inbox after the watch event: ZooKeeper's events carry no data.  For a
-- lock channel's unlock message (bell_payload: Redisson's "0" on
-- PB.lock_channel's channels) the event itself carries it.  A sidecar with
-- subscribers on such a channel keeps a doorbell node for it, with a data
-- watch, and says so in its interest node (pubsub_interest.lua's
-- interest_data).  A publisher sets the doorbell in the same multi as the
-- message, just before creating it (kind letter "b").  The doorbell's event names channel and payload:
-- the receiver delivers at once, with no read, when no listing of its inbox
-- is in flight and the last one set the inbox's watch and went through all
-- it found, connected since (`listed`: so every message with an earlier
-- zxid has been delivered, its event having come first), and keeps a
-- credit; the next listing finds the message itself and spends the credit
-- instead of delivering it again.  A credit that listing does not spend is
-- dropped (the message vanished with its publisher's session).  A receiver
-- that is listing, or re-arming the doorbell's watch, delivers the message
-- from the listing as any other; so does one not `listed`, which lists its
-- inbox a moment later.  That is the case after a reconnect: the server
-- fires the data watches it sets again before the child watches, so an
-- earlier message's event may come after the doorbell's.

local rings = {}      -- channel -> the payload of our doorbell on it
local unarmed = {}    -- channel -> true: its doorbell's watch could not be
                      -- set again after it fired (PB.start retries)

-- Sets the watch on our doorbell on channel again (it fired).
local function rearm(channel)
    local rc = zk.get(bell(nil, channel, rings[channel]), true)
    unarmed[channel] = rc ~= zk.OK and rc ~= zk.NONODE or nil
end

-- Our doorbell for (channel, payload) exists and is watched; false when
-- ZooKeeper said otherwise.
function PB.ring_ready(channel, payload)
    local D = bell(nil, channel, payload)
    local rc = zk.create(D, "", 0)
    if rc == zk.NONODE then
        K.ensure_path(bells())
        rc = zk.create(D, "", 0)
    end
    if rc ~= zk.OK and rc ~= zk.NODEEXISTS then return false end
    if zk.get(D, true) ~= zk.OK then return false end
    rings[channel], unarmed[channel] = payload, nil
    return true
end

-- Our interest in channel is gone: so is its doorbell (a publisher that
-- still rings it fails its multi and routes again).  False when ZooKeeper
-- did not say it is gone; the caller tries again.
function PB.unring(channel, payload)
    rings[channel] = nil
    local rc = zk.delete(bell(nil, channel, payload), -1)
    return rc == zk.OK or rc == zk.NONODE
end

-- A watch on our doorbell at path fired.
local function rang(event, path)
    local ch, pl = path:sub(#bells() + 2):match("^([^.]*)%.([^.]*)$")
    local channel, payload = ch and host.key_decode(ch), pl and host.key_decode(pl)
    if not channel or rings[channel] ~= payload then return end
    if event == "changed" then
        if not listed then
            PB.drain_later() -- the message, in its place among the others
        elseif not draining then
            PN.stats.rung = PN.stats.rung + 1
            deliver_local("c", channel, payload)
            credits[#credits + 1] = { channel = channel, payload = payload, gen = listings }
        end
    end
    if event ~= "deleted" then rearm(channel) end
end

-- A watch fired on path: our inbox's (it is read) or one of our
-- doorbells'.  Returns true when it was one of those.
function PB.on_watch(event, path)
    if path == inbox() then
        drain()
        return true
    end
    local bb = bells()
    if path:sub(1, #bb + 1) == bb .. "/" then
        rang(event, path)
        return true
    end
    return false
end

-- The connection went.  After the reconnect the server fires the watches
-- it sets again, the doorbells' before the inbox's: no doorbell delivers
-- at its event until a listing made after that (not one under way now).
function PB.disconnected()
    listed = false
    cuts = cuts + 1
end

-- A new session: our presence, and maybe our inbox (see drain_once), went
-- with the old one, and the watches with it.
local session_gen = 0 -- bumped by every new session (PB.start_later)
function PB.new_session()
    session_gen = session_gen + 1
    unarmed = {} -- (every doorbell is made and watched again)
    PB.inbox_ready = false
    inbox_confirmed = false
    PB.disconnected()
end

-- Makes presence and inbox, and reads what came meanwhile.
-- A drain RETRY_MS from now (one pending at a time).
local RETRY_MS = 250
local retry_pending = false
function PB.drain_later()
    if retry_pending then return end
    retry_pending = true
    host.spawn(function()
        host.sleep(RETRY_MS)
        retry_pending = false
        drain()
    end)
end

function PB.start()
    ensure_inbox()
    for channel in pairs(unarmed) do
        if rings[channel] then rearm(channel) else unarmed[channel] = nil end
    end
    drain()
end

-- PB.start failed (a reply lost, ZooKeeper slow): tried again every
-- RETRY_MS while connected under the same session.  Until it is done no
-- listing of the inbox has set its watch: the messages routed to us would
-- wait there for the next reconnection, and without our presence another
-- sidecar's sweep may take the inbox.  (A reconnection or a new session
-- runs PB.start itself.)
function PB.start_later()
    local gen = session_gen
    host.spawn(function()
        repeat
            host.sleep(RETRY_MS)
            local _, connected = zk.session()
            if gen ~= session_gen or not connected then return end
            local ok, e = pcall(PB.start)
            if not ok then host.log("warn", "pubsub: inbox: " .. tostring(K.is_abort(e) and e.reply.err or e)) end
        until ok
    end)
end

-- See pubsub.lua's compact.
function PB.compact()
    if next(seen) == nil then seen = {} end
end

return PB
