-- pubsub.lua — Redis pub/sub across every sidecar of one ensemble.
--
-- Local side: which client is subscribed to what, the frames Redis sends,
-- delivery to this sidecar's subscribers through host.push.
--
-- Across sidecars, through ZooKeeper (DESIGN.md, "Pub/Sub"), under
-- <root>/ps:
--
--   c/<channel>/<instance>   this sidecar has subscribers on <channel>:
--   p/<pattern>/<instance>   EPHEMERAL, data = how many (for PUBLISH's
--   s/<channel>/<instance>   reply); s is for shard channels
--   l/<instance>             EPHEMERAL: this process is alive
--   i/<instance>             its inbox (persistent)
--   i/<instance>/m...        one message, EPHEMERAL_SEQUENTIAL, made by the
--                            publisher's session; the receiver deletes it
--                            once delivered, in batches (delete_delivered)
--   b/<instance>/<channel>.<payload>
--                            a doorbell: publishers set it to announce that
--                            message (see "Doorbells")
--
-- <instance> is the process's random id in hex; channels and patterns are
-- encoded like keys (sidecar/keyenc.h).
--
-- A publisher writes only when another sidecar is interested, one message
-- node per interested sidecar, never per subscriber.  It knows who is
-- interested from a cache kept current by watches: per channel, the
-- children of c/<channel> and their counts; for patterns, the whole of p/.
-- So that a publish made by a script's commit can never miss a subscriber
-- whose SUBSCRIBE had already been answered, registering interest bumps a
-- data version that the commit checks:
--
--   * a new interest in a channel sets c/<channel> (and c/ itself when it
--     creates c/<channel>), and the commit checks the version of
--     c/<channel> it routed by, or of c/ when the channel had no node;
--   * a new pattern interest sets p/, which every commit checks.
--
-- A failed check re-runs the script with fresh routes.  Plain PUBLISH goes
-- by the cache alone (Redis's at-most-once).  SUBSCRIBE answers once its
-- interest is registered, or at the command's deadline when ZooKeeper is
-- away (then it registers as soon as it is back).  After a new session the
-- interest is registered again, and a waiter on a lock channel whose lock
-- is free is sent the unlock message it may have missed (lock_channel).
--
-- Message node names carry the message: "<kind><channel>.<payload>."
-- (encoded) then the sequence number, so the receiver needs no read beyond
-- listing its inbox; a payload too long for a name goes in the node's data
-- ("D" instead of the kind letter's upper case... see msg_name).

local K = require "keyspace"
local U = require "util"
local errors = require "errors"
local queue = require "queue"

local P = {}

-- A setting from host.config (sidecar/config.c), or its default.
local function cfg(name, default)
    return (host.config and host.config[name]) or default
end

P.NAME_PAYLOAD_MAX = 384  -- encoded payload bytes kept in a node name
P.GC_DELAY_MS = cfg("pubsub_gc_delay", 30000) -- an empty channel node is removed after this
P.RETRY_MS = 200          -- registering interest again after a failure

---------------------------------------------------------------------------
-- Local subscriptions

-- kind: "c" channel, "p" pattern, "s" shard channel
local clients = {}                 -- id -> {c = {list, set}, p = ..., s = ...}
local subs = { c = {}, p = {}, s = {} }   -- kind -> name -> {ids = {id = true}, n}
local pattern_order = {}           -- patterns in first-subscription order

local function hex(s)
    return (s:gsub(".", function(ch) return string.format("%02x", ch:byte()) end))
end

local INST
local function inst()
    INST = INST or hex(host.instance)
    return INST
end

local function client(id)
    local c = clients[id]
    if not c then
        c = { c = { list = {}, set = {} }, p = { list = {}, set = {} }, s = { list = {}, set = {} } }
        clients[id] = c
    end
    return c
end

local function count(c, kind)
    return #c[kind].list
end

-- Redis's count in (un)subscribe replies: channels + patterns, or shard
-- channels alone.
local function reply_count(c, kind)
    if kind == "s" then return count(c, "s") end
    return count(c, "c") + count(c, "p")
end

local function tell_gateway(id, c)
    host.subscriptions(id, count(c, "c"), count(c, "p"), count(c, "s"))
    if count(c, "c") + count(c, "p") + count(c, "s") == 0 then clients[id] = nil end
end

local function list_remove(list, v)
    for i = 1, #list do
        if list[i] == v then table.remove(list, i) return end
    end
end

---------------------------------------------------------------------------
-- Paths

local function ps() return K.root() .. "/ps" end
local function dir(kind) return ps() .. "/" .. kind end
local function node(kind, name) return dir(kind) .. "/" .. host.key_encode(name) end
local function inbox(who) return ps() .. "/i/" .. (who or inst()) end
local function presence(who) return ps() .. "/l/" .. (who or inst()) end
local function bells(who) return ps() .. "/b/" .. (who or inst()) end
local function bell(who, channel, payload)
    return bells(who) .. "/" .. host.key_encode(channel) .. "." .. host.key_encode(payload)
end

-- The payload a doorbell is kept for on `channel`, or nil: Redisson's
-- unlock message on a lock channel (P.lock_channel, at the end).
local function bell_payload(kind, channel)
    if kind == "c" and P.lock_channel(channel) then return "0" end
end

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

local interest = { c = {}, p = {}, s = {} }  -- kind -> name -> state
local gc_queue = {}                          -- path -> due (host.now())
P.stats = { published = 0, messages_sent = 0, messages_received = 0, made_up = 0, rung = 0 }

local function wake_all(st)
    local w = st.waiters
    st.waiters = {}
    for _, co in ipairs(w) do host.wake(co) end
end

-- One step towards st.want; returns true when it made progress or there is
-- nothing to do, false after a failure.
local function reconcile_step(kind, name, st)
    local X = node(kind, name)
    local me = X .. "/" .. inst()
    local n = st.count  -- may change while this step waits
    if st.want and not st.have then
        -- messages for this interest need our inbox
        if not P.inbox_ready then
            if not pcall(P.ensure_inbox) then return false end
        end
        -- the doorbell, before anyone can see it announced
        local pl = bell_payload(kind, name)
        if pl and not P.ring_ready(name, pl) then return false end
        local bump = kind == "p" and dir("p") or X
        local ops = { { "create", me, interest_data(kind, name, n), zk.EPHEMERAL }, { "set", bump, "", -1 } }
        if not st.exists_known then
            -- a new channel node also bumps its directory (see the top)
            local full = { { "create", X, "", 0 } }
            if kind ~= "p" then full[#full + 1] = { "set", dir(kind), "", -1 } end
            for _, o in ipairs(ops) do full[#full + 1] = o end
            ops = full
        end
        local rc, results = zk.multi(ops)
        if rc == zk.OK then
            st.have, st.written, st.exists_known = true, n, true
            return true
        end
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
    elseif not st.want and st.have then
        local rc = zk.delete(me, -1)
        if rc == zk.OK or rc == zk.NONODE then
            st.have = false
            gc_queue[X] = host.now() + P.GC_DELAY_MS
            local pl = bell_payload(kind, name)
            if pl then P.unring(name, pl) end
            return true
        end
        return false
    end
    return true
end

local function settled(st)
    return st.want == st.have and (not st.want or st.written == st.count)
end

-- Interests to reconcile, in order, taken by at most P.WORKERS coroutines:
-- a SUBSCRIBE of a thousand channels costs a few workers, not a thousand
-- coroutines (the VM's allocator keeps its small blocks at their peak).
P.WORKERS = 16
local todo, todo_head, todo_tail = {}, 1, 0
local workers = 0

local function settle(kind, name, st)
    while not settled(st) do
        if not connected() then
            host.sleep(P.RETRY_MS)
        else
            local ok, progressed = pcall(reconcile_step, kind, name, st)
            if st.have and st.want then wake_all(st) end
            if not ok then
                host.log("warn", "pubsub: registering interest in " .. name .. ": " .. tostring(progressed))
                host.sleep(P.RETRY_MS)
            elseif not progressed then
                host.sleep(P.RETRY_MS)
            end
        end
    end
    st.busy = false
    wake_all(st)
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
    if workers < P.WORKERS then
        workers = workers + 1
        host.spawn(worker)
    end
end

-- The local subscriber count of (kind, name) changed to n.
local function set_interest(kind, name, n)
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
-- command's deadline.
local function await_interest(st)
    if not st or (st.have and st.want) or not st.want then return end
    local co = coroutine.running()
    st.waiters[#st.waiters + 1] = co
    local timer = host.timer(function()
        list_remove(st.waiters, co)
        host.wake(co)
    end)
    timer:start(math.max(0, host.deadline() - host.now()))
    host.suspend()
    timer:stop()
end

---------------------------------------------------------------------------
-- Local delivery

local function push_all(ids, frame)
    local n = 0
    for id in pairs(ids) do
        if host.push(id, frame) then n = n + 1 end
    end
    return n
end

-- Delivers one message to this sidecar's subscribers; returns how many.
local function deliver_local(kind, channel, payload)
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

local function local_count(kind, channel)
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

---------------------------------------------------------------------------
-- Routes: who else is interested, from a watched cache

-- kind -> {new = {channel -> entry}, old = {...}, n = #new}: a cache of
-- at most 2 * P.ROUTE_CACHE_MAX channels per kind, in two generations.  A
-- hit in old moves the entry to new; when new is full, it becomes old and
-- the old old is dropped whole, so the channels a publisher stopped using
-- cost nothing after two generations (a publish to a thousand channels
-- nobody listens to must not be remembered for ever).  A dropped entry of
-- a channel that exists leaves its watches set; their events find nothing
-- to invalidate, and the next publish reads the channel again.
P.ROUTE_CACHE_MAX = 1024
local function new_cache()
    return { c = { new = {}, old = {}, n = 0 }, s = { new = {}, old = {}, n = 0 } }
end
local cache = new_cache()

local function cache_get(kind, channel)
    local g = cache[kind]
    local e = g.new[channel]
    if e then return e end
    e = g.old[channel]
    if e then
        g.old[channel] = nil
        if g.n >= P.ROUTE_CACHE_MAX then g.old, g.new, g.n = g.new, {}, 0 end
        g.new[channel] = e
        g.n = g.n + 1
    end
    return e
end

local function cache_put(kind, channel, e)
    local g = cache[kind]
    if g.new[channel] then g.new[channel] = e return end
    g.old[channel] = nil
    if g.n >= P.ROUTE_CACHE_MAX then g.old, g.new, g.n = g.new, {}, 0 end
    g.new[channel] = e
    g.n = g.n + 1
end

local function cache_del(kind, channel)
    local g = cache[kind]
    g.old[channel] = nil
    if g.new[channel] then
        -- n counts insertions into new; a removal leaves it (new is
        -- replaced once n reaches the cap, whatever it still holds)
        g.new[channel] = nil
    end
end

-- How many channels the route cache holds (tests, P.sizes).
local function cache_size(kind)
    local n = 0
    for _ in pairs(cache[kind].new) do n = n + 1 end
    for _ in pairs(cache[kind].old) do n = n + 1 end
    return n
end
local dirv = {}                    -- kind -> data version of dir(kind)
local patview                      -- {version, pats = {pattern -> {inst -> n}}}
-- Bumped by every watch event under <root>/ps: what was read over several
-- calls is cached only if no event came in between (an event for a node
-- read early would otherwise be lost, its one-shot watch spent).
local gen = 0

-- A read of ours that did not complete: ZooKeeper unavailable, as K.fail
-- says for the rest.
local function fail(rc, what)
    if K.unknown(rc) then K.abort({ err = errors.UNAVAILABLE }) end
    K.fail(rc, what)
end

-- The counts of the children of X (other sidecars), watched, and the
-- payloads of their doorbells (see interest_data).
local function remote_counts(X, names)
    local remote, rings = {}, {}
    for _, who in ipairs(names) do
        if who ~= inst() then
            local rc, data = zk.get(X .. "/" .. who, true)
            if rc == zk.OK then
                local n, pl = data:match("^(%d+) (.+)$")
                remote[who] = math.tointeger(tonumber(n or data)) or 1
                rings[who] = pl and host.key_decode(pl)
            elseif rc ~= zk.NONODE then
                fail(rc, "get " .. X)
            end
        end
    end
    return remote, rings
end

local function dir_version(kind)
    if dirv[kind] then return dirv[kind] end
    for _ = 1, 3 do
        local rc, _, stat = zk.get(dir(kind), true)
        if rc == zk.OK then
            dirv[kind] = stat.version
            return stat.version
        elseif rc == zk.NONODE then
            K.ensure_path(dir(kind))
        else
            fail(rc, "get " .. dir(kind))
        end
    end
    K.abort({ err = errors.UNAVAILABLE })
end

local function entry(kind, channel)
    local e = cache_get(kind, channel)
    if e and (e.present or e.dirv == dirv[kind]) then return e end
    local d = dir_version(kind)
    local g = gen
    local X = node(kind, channel)
    local rc, names, stat = zk.children(X, true)
    if rc == zk.NONODE then
        e = { absent = true, dirv = d }
    elseif rc == zk.OK then
        local remote, rings = remote_counts(X, names)
        e = { present = true, version = stat.version, remote = remote, rings = rings }
        -- left empty by sidecars that died: removed after the grace period
        -- (the version check spares it if someone subscribes meanwhile)
        if #names == 0 then gc_queue[X] = gc_queue[X] or host.now() + P.GC_DELAY_MS end
    else
        fail(rc, "children " .. X)
    end
    if gen == g and d == dirv[kind] then cache_put(kind, channel, e) end
    return e
end

local function patterns()
    if patview then return patview end
    local D = dir("p")
    local g = gen
    local rc, _, stat = zk.get(D, true)
    if rc == zk.NONODE then
        K.ensure_path(D)
        rc, _, stat = zk.get(D, true)
    end
    if rc ~= zk.OK then fail(rc, "get " .. D) end
    local v = { version = stat.version, pats = {} }
    local rc2, names = zk.children(D, true)
    if rc2 ~= zk.OK then fail(rc2, "children " .. D) end
    for _, enc in ipairs(names) do
        local pat = host.key_decode(enc)
        local X = D .. "/" .. enc
        local rc3, kids = zk.children(X, true)
        if rc3 == zk.OK and pat then
            local remote = remote_counts(X, kids)
            if next(remote) then v.pats[pat] = remote end
        elseif rc3 ~= zk.NONODE and rc3 ~= zk.OK then
            fail(rc3, "children " .. X)
        end
    end
    if gen == g then patview = v end
    return v
end

-- Who else must get a message published on (kind, channel): a set of
-- instances, their subscriber count, the checks that make a commit fail if
-- this was not current, and the instances' doorbell payloads on channel.
local function route(kind, channel)
    local e = entry(kind, channel)
    local targets, n, checks = {}, 0, {}
    if e.present then
        for who, k in pairs(e.remote) do targets[who] = (targets[who] or 0) + k n = n + k end
        checks[#checks + 1] = { "check", node(kind, channel), e.version, ps = true }
    else
        checks[#checks + 1] = { "check", dir(kind), e.dirv, ps = true }
    end
    if kind == "c" then
        local pv = patterns()
        for pat, remote in pairs(pv.pats) do
            if U.glob(pat, channel) then
                for who, k in pairs(remote) do targets[who] = (targets[who] or 0) + k n = n + k end
            end
        end
        checks[#checks + 1] = { "check", dir("p"), pv.version, ps = true }
    end
    return targets, n, checks, e.rings
end

-- "<instance> <channel>" -> true: that sidecar announces a doorbell on
-- channel that a multi of ours found missing (removed by someone else):
-- not rung until its interest node changes.
local noring = {}

local function msg_name(kind, channel, payload)
    local ch = host.key_encode(channel)
    local pl = host.key_encode(payload)
    if #pl <= P.NAME_PAYLOAD_MAX then
        return kind .. ch .. "." .. pl .. ".", ""
    end
    return kind:upper() .. ch .. "..", payload
end

-- Appends one message create per target sidecar, after a set of its
-- doorbell when it keeps one for this payload (the message's kind letter
-- is then "b"); each create remembers how many subscribers it reaches
-- (op.reach).  Returns the number of messages.
local function message_ops(ops, kind, channel, payload, targets, rings)
    local name, data = msg_name(kind, channel, payload)
    local n = 0
    for who, reach in pairs(targets) do
        local this = name
        if rings and rings[who] == payload and kind == "c" and data == "" and not noring[who .. " " .. channel] then
            ops[#ops + 1] = { "set", bell(who, channel, payload), "", -1, ps = true, bell = who .. " " .. channel }
            this = "b" .. name:sub(2)
        end
        ops[#ops + 1] = { "create", inbox(who) .. "/" .. this, data, zk.EPHEMERAL | zk.SEQUENCE,
                          ps = true, reach = reach }
        n = n + 1
    end
    return n
end

-- After a multi with message ops failed: a doorbell it found missing is
-- not rung again (see noring).
function P.note_failed(ops, results)
    if type(results) ~= "table" then return end
    for i, op in ipairs(ops) do
        if op.bell and results[i] and results[i].rc == zk.NONODE then noring[op.bell] = true end
    end
end

local function invalidate(kind, channel)
    if channel then cache_del(kind, channel) end
    dirv[kind] = nil
    patview = nil
end

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

function P.publish(kind, channel, payload)
    local held <close> = queue.hold({ PUBLISH_QUEUE })
    P.stats.published = P.stats.published + 1
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
        P.stats.messages_sent = P.stats.messages_sent + sent
        return n + remote
    end
    P.note_failed(ops, results)
    -- One inbox or doorbell gone (its sidecar died, or left the channel),
    -- or the message too large for ZooKeeper: each message on its own,
    -- without doorbells, counting only the subscribers reached.
    invalidate(kind, channel)
    for _, op in ipairs(ops) do
        if op[1] == "create" then
            local crc = zk.create(op[2], op[3], op[4])
            if crc == zk.OK then
                P.stats.messages_sent = P.stats.messages_sent + 1
                n = n + op.reach
            else
                host.log("warn", string.format("pubsub: a message on %q was not delivered to %s: rc %d",
                                               channel, op[2]:match("/i/([^/]+)/") or "?", crc))
            end
        end
    end
    return n
end

-- Inside a script: the message waits for the script's commit.  Returns the
-- count PUBLISH answers.
function P.publish_buffered(t, kind, channel, payload)
    local targets, remote, checks, rings = {}, 0, {}, nil
    if not too_large(channel, payload) then targets, remote, checks, rings = route(kind, channel) end
    t.publishes = t.publishes or {}
    t:on_commit(P.participant)
    t.publishes[#t.publishes + 1] = { kind = kind, channel = channel, payload = payload,
                                      targets = targets, checks = checks, rings = rings }
    return local_count(kind, channel) + remote
end

-- For the commit: appends the checks and message creates of t's publishes to
-- ops; returns how many messages that is.
function P.commit_ops(t, ops)
    local n = 0
    for _, p in ipairs(t.publishes or {}) do
        if next(p.targets) then
            for _, c in ipairs(p.checks) do ops[#ops + 1] = c end
            n = n + message_ops(ops, p.kind, p.channel, p.payload, p.targets, p.rings)
        end
    end
    return n
end

-- After the commit: deliver locally (committed) or forget routes (failed).
function P.committed(t, ok)
    for _, p in ipairs(t.publishes or {}) do
        if ok then
            P.stats.published = P.stats.published + 1
            for _ in pairs(p.targets) do P.stats.messages_sent = P.stats.messages_sent + 1 end
            deliver_local(p.kind, p.channel, p.payload)
        else
            invalidate(p.kind, p.channel)
        end
    end
end

-- A script's publishes take part in its commit (txn.lua's t:on_commit).
P.participant = {
    plan = P.commit_ops,
    done = function(t, ok, ops, results)
        if not ok and ops then P.note_failed(ops, results) end
        P.committed(t, ok)
    end,
}

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

local function parse(name)
    local kind = name:sub(1, 1)
    local body = name:sub(2, -11)
    local ch, pl = body:match("^([^.]*)%.([^.]*)%.$")
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
function P.ensure_inbox()
    for _, d in ipairs({ "c", "p", "s", "l" }) do
        local rc = zk.exists(dir(d))
        if rc == zk.NONODE then K.ensure_path(dir(d)) end
    end
    local rc = zk.create(presence(), "", zk.EPHEMERAL)
    if rc ~= zk.OK and rc ~= zk.NODEEXISTS then fail(rc, "create " .. presence()) end
    K.ensure_path(inbox())
    P.inbox_ready = true
end
local ensure_inbox = P.ensure_inbox

-- Delivered messages are deleted together, in one multi, once there are
-- INBOX_GC_COUNT of them (or INBOX_GC_MS after the first): each delete
-- fires our inbox's watch, so a delete per message would cost a second
-- listing per message as well; a batch costs one listing.
P.INBOX_GC_COUNT = 32
P.INBOX_GC_MS = 100

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
    delivered_timer:start(P.INBOX_GC_MS)
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
    if rc == zk.NONODE then
        -- one is gone with its publisher's session: one at a time, while
        -- the inbox is the one these names are from
        for _, name in ipairs(names) do
            if not inbox_confirmed or inbox_czxid ~= czxid then return end
            local drc = zk.delete(box .. "/" .. name, -1)
            if drc == zk.OK or drc == zk.NONODE then done(name) end
        end
    elseif rc == zk.OK then
        for _, name in ipairs(names) do done(name) end
    elseif inbox_czxid == czxid then
        -- ZooKeeper is away: a later batch takes them
        table.move(names, 1, #names, #delivered + 1, delivered)
        arm_delivered()
    end
end

local function note_delivered(name)
    delivered[#delivered + 1] = name
    if #delivered >= P.INBOX_GC_COUNT then
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
    local listing = listings
    local rc, names, stat = zk.children(box, true)
    if rc == zk.NONODE then
        ensure_inbox()
        rc, names, stat = zk.children(box, true)
    end
    if rc ~= zk.OK then return end
    if stat.czxid ~= inbox_czxid then
        -- a new inbox (ours was swept while our session was gone): its
        -- sequence numbers start again, so names seen in the old one say
        -- nothing, and deleting them could delete new messages
        inbox_czxid = stat.czxid
        seen, delivered = {}, {}
    end
    inbox_confirmed = true
    local new = {}
    for _, name in ipairs(names) do
        if not seen[name] then new[#new + 1] = name end
    end
    table.sort(new, function(a, b) return a:sub(-10) < b:sub(-10) end)
    for _, name in ipairs(new) do
        seen[name] = true
        local kind, channel, payload, rung = parse(name)
        if kind and not payload then
            local grc, data = zk.get(box .. "/" .. name)
            if grc == zk.OK then payload = data end
        end
        if kind and payload then
            P.stats.messages_received = P.stats.messages_received + 1
            if not (rung and spend_credit(channel, payload, listing)) then
                deliver_local(kind, channel, payload)
            end
        end
        note_delivered(name)
    end
    drop_credits(listing)
end

local function drain()
    if draining then drain_again = true return end
    draining = true
    repeat
        drain_again = false
        local ok, e = pcall(drain_once)
        if not ok then host.log("warn", "pubsub: reading the inbox: " .. tostring(K.is_abort(e) and e.reply.err or e)) end
    until not drain_again
    draining = false
end

---------------------------------------------------------------------------
-- Doorbells
--
-- A waiter on another sidecar learns of a message one listing of its
-- inbox after the watch event: ZooKeeper's events carry no data.  For a
-- lock channel's unlock message (bell_payload: Redisson's "0" on
-- P.lock_channel's channels) the event itself carries it.  A sidecar with
-- subscribers on such a channel keeps a doorbell node for it, with a data
-- watch, and says so in its interest node (interest_data).  A publisher
-- sets the doorbell in the same multi as the message, just before creating
-- it (kind letter "b").  The doorbell's event names channel and payload:
-- the receiver delivers at once, with no read, when no listing of its inbox
-- is in flight (so every message with an earlier zxid has been delivered:
-- its event came first), and keeps a credit; the next listing finds the
-- message itself and spends the credit instead of delivering it again.  A
-- credit that listing does not spend is dropped (the message vanished with
-- its publisher's session).  A receiver that is listing, or re-arming the
-- doorbell's watch, delivers the message from the listing as any other.

local rings = {}      -- channel -> the payload of our doorbell on it

-- Our doorbell for (channel, payload) exists and is watched; false when
-- ZooKeeper said otherwise.
function P.ring_ready(channel, payload)
    local D = bell(nil, channel, payload)
    local rc = zk.create(D, "", 0)
    if rc == zk.NONODE then
        K.ensure_path(bells())
        rc = zk.create(D, "", 0)
    end
    if rc ~= zk.OK and rc ~= zk.NODEEXISTS then return false end
    if zk.get(D, true) ~= zk.OK then return false end
    rings[channel] = payload
    return true
end

-- Our interest in channel is gone: so is its doorbell (a publisher that
-- still rings it fails its multi and routes again).
function P.unring(channel, payload)
    rings[channel] = nil
    zk.delete(bell(nil, channel, payload), -1)
end

-- A watch on our doorbell at path fired.
local function rang(event, path)
    local ch, pl = path:sub(#bells() + 2):match("^([^.]*)%.([^.]*)$")
    local channel, payload = ch and host.key_decode(ch), pl and host.key_decode(pl)
    if not channel or rings[channel] ~= payload then return end
    if event == "changed" and not draining then
        P.stats.rung = P.stats.rung + 1
        deliver_local("c", channel, payload)
        credits[#credits + 1] = { channel = channel, payload = payload, gen = listings }
    end
    if event ~= "deleted" then zk.get(path, true) end
end

---------------------------------------------------------------------------
-- Commands

local KIND_OF = {
    subscribe = "c", unsubscribe = "c",
    psubscribe = "p", punsubscribe = "p",
    ssubscribe = "s", sunsubscribe = "s",
}

-- The caps of one (P|S)SUBSCRIBE (--max-subscriptions-per-command) and of
-- one client's subscriptions (--max-subscriptions-per-client): an error
-- reply when args (the command, its channels) would pass one, checked
-- before anything is subscribed, so that a refused command subscribes to
-- none of its channels.  c: the client's record, or nil.
function P.check_caps(c, kind, args)
    local n = #args - 1
    local per_command = cfg("max_subscriptions_per_command", 1024)
    if n > per_command then
        return { err = string.format("ERR too many channels in one '%s' command (%d, the limit is %d)",
                                     args[1]:lower(), n, per_command) }
    end
    local per_client = cfg("max_subscriptions_per_client", 4096)
    local have = c and count(c, "c") + count(c, "p") + count(c, "s") or 0
    if have + n <= per_client then return nil end
    -- only the names this client is not subscribed to yet count
    local new, seen = 0, {}
    for i = 2, #args do
        local name = args[i]
        if not seen[name] and not (c and c[kind].set[name]) then
            seen[name] = true
            new = new + 1
        end
    end
    if have + new > per_client then
        return { err = string.format("ERR max number of subscriptions per client reached (%d)", per_client) }
    end
end

-- SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE
local function subscribe(args)
    local verb = args[1]:lower()
    local kind = KIND_OF[verb]
    local me = host.client()
    if not me then return { err = "ERR no client" } end
    local id = me.id
    local refused = P.check_caps(clients[id], kind, args)
    if refused then return refused end
    local c = client(id)
    local frames, waits = {}, {}
    for i = 2, #args do
        local name = args[i]
        local mine = c[kind]
        if not mine.set[name] then
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
            waits[#waits + 1] = set_interest(kind, name, e.n)
        end
        frames[#frames + 1] = { push = { verb, name, reply_count(c, kind) } }
    end
    tell_gateway(id, c)
    for _, st in ipairs(waits) do await_interest(st) end
    return { frames = frames }
end

local function drop(id, c, kind, name)
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
        set_interest(kind, name, math.max(e.n, 0))
    end
    return true
end

-- UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE
local function unsubscribe(args)
    local verb = args[1]:lower()
    local kind = KIND_OF[verb]
    local me = host.client()
    if not me then return { err = "ERR no client" } end
    local id = me.id
    local c = clients[id] or client(id)
    local names = {}
    if #args == 1 then
        for i, name in ipairs(c[kind].list) do names[i] = name end
    else
        for i = 2, #args do names[#names + 1] = args[i] end
    end
    local frames = {}
    for _, name in ipairs(names) do
        drop(id, c, kind, name)
        frames[#frames + 1] = { push = { verb, name, reply_count(c, kind) } }
    end
    if #names == 0 then frames[1] = { push = { verb, host.null, reply_count(c, kind) } } end
    tell_gateway(id, c)
    return { frames = frames }
end

-- What the module holds, for M.stats (gauges): local subscriptions,
-- interests being registered or held, channels in the route cache, empty
-- channel nodes waiting for gc.
function P.sizes()
    local n_subs, n_interest, n_gc = 0, 0, 0
    for _, kind in ipairs({ "c", "p", "s" }) do
        for _, e in pairs(subs[kind]) do n_subs = n_subs + e.n end
        for _ in pairs(interest[kind]) do n_interest = n_interest + 1 end
    end
    for _ in pairs(gc_queue) do n_gc = n_gc + 1 end
    return { subscriptions = n_subs, interests = n_interest,
             route_cache = cache_size("c") + cache_size("s"), gc_queue = n_gc }
end

-- A client closed or was RESET: its subscriptions go.
function P.client_gone(id)
    local c = clients[id]
    if not c then return end
    for _, kind in ipairs({ "c", "p", "s" }) do
        local names = {}
        for i, name in ipairs(c[kind].list) do names[i] = name end
        for _, name in ipairs(names) do drop(id, c, kind, name) end
    end
    clients[id] = nil
end

local function publish_cmd(kind)
    return function(args)
        local SB = require "sandbox"
        local c = SB.context()
        if c and c.ro then return { err = "ERR Write commands are not allowed from read-only scripts." } end
        local T = require "txn"
        local t = T.current[coroutine.running()]
        if t then return P.publish_buffered(t, kind, args[2], args[3]) end
        return P.publish(kind, args[2], args[3])
    end
end

-- PUBSUB CHANNELS|NUMSUB|NUMPAT|SHARDCHANNELS|SHARDNUMSUB, over every
-- sidecar.
local function all_channels(kind, pattern)
    local found, out = {}, {}
    local function add(ch)
        if not found[ch] and (not pattern or U.glob(pattern, ch)) then
            found[ch] = true
            out[#out + 1] = ch
        end
    end
    for ch in pairs(subs[kind]) do add(ch) end
    local names = K.children(dir(kind))
    for i, enc in ipairs(names) do
        -- a request whose client has gone stops here (host.client() is
        -- nil once the requester left): nobody reads its answer
        if i % 64 == 0 and not host.client() then return nil end
        local ch = host.key_decode(enc)
        if ch and not found[ch] and (not pattern or U.glob(pattern, ch)) then
            local rc, stat = zk.exists(dir(kind) .. "/" .. enc)
            if rc == zk.OK and stat.numChildren > 0 then add(ch) end
        end
    end
    return out
end

local function numsub(kind, args)
    local out = {}
    for i = 3, #args do
        local ch = args[i]
        local e = subs[kind][ch]
        local n = e and e.n or 0
        local ok, en = pcall(entry, kind, ch)
        if ok and en.present then
            for _, k in pairs(en.remote) do n = n + k end
        end
        out[#out + 1] = ch
        out[#out + 1] = n
    end
    return out
end

-- PUBSUB's subcommands and their arities, checked (like a command's) before
-- anything else.
local PUBSUB_ARITY = { channels = -2, numpat = 2, numsub = -2, shardchannels = -2, shardnumsub = -2, help = 2 }

function P.pubsub_precheck(args)
    local sub = args[2] and args[2]:lower()
    local arity = sub and PUBSUB_ARITY[sub]
    if not arity then
        return { err = string.format("ERR unknown subcommand '%s'. Try PUBSUB HELP.", (args[2] or ""):sub(1, 128)) }
    end
    if (arity > 0 and #args ~= arity) or (arity < 0 and #args < -arity) then
        return { err = errors.wrong_arity("pubsub|" .. sub) }
    end
end

local function pubsub(args)
    local e = P.pubsub_precheck(args)
    if e then return e end
    local sub = args[2]:lower()
    local function arity()
        return { err = string.format("ERR unknown subcommand or wrong number of arguments for '%s'. " ..
                                     "Try PUBSUB HELP.", args[2]:sub(1, 128)) }
    end
    if sub == "channels" or sub == "shardchannels" then
        if #args > 3 then return arity() end
        return all_channels(sub == "channels" and "c" or "s", args[3])
    elseif sub == "numsub" or sub == "shardnumsub" then
        return numsub(sub == "numsub" and "c" or "s", args)
    elseif sub == "numpat" then
        if #args ~= 2 then return arity() end
        local seen_p, n = {}, 0
        for pat in pairs(subs.p) do seen_p[pat] = true n = n + 1 end
        local ok, pv = pcall(patterns)
        if ok then
            for pat in pairs(pv.pats) do
                if not seen_p[pat] then n = n + 1 end
            end
        end
        return n
    elseif sub == "help" then
        return {
            "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            "HELP",
            "    Prints this help.",
        }
    end
    return { err = string.format("ERR unknown subcommand '%s'. Try PUBSUB HELP.", args[2]:sub(1, 128)) }
end

-- The (un)subscribe commands are the ones allowed in RESP2 subscribed mode
-- (with PING, QUIT and RESET, answered in C): subscribed_ok.
local SUBFLAGS = "pubsub noscript loading stale"
P.commands = {
    subscribe = { fn = subscribe, arity = -2, flags = SUBFLAGS, first_key = 0, last_key = 0, step = 0,
                  subscribed_ok = true },
    psubscribe = { fn = subscribe, arity = -2, flags = SUBFLAGS, first_key = 0, last_key = 0, step = 0,
                   subscribed_ok = true },
    ssubscribe = { fn = subscribe, arity = -2, flags = SUBFLAGS, first_key = 1, last_key = -1, step = 1,
                   subscribed_ok = true },
    unsubscribe = { fn = unsubscribe, arity = -1, flags = SUBFLAGS, first_key = 0, last_key = 0, step = 0,
                    subscribed_ok = true },
    punsubscribe = { fn = unsubscribe, arity = -1, flags = SUBFLAGS, first_key = 0, last_key = 0, step = 0,
                     subscribed_ok = true },
    sunsubscribe = { fn = unsubscribe, arity = -1, flags = SUBFLAGS, first_key = 1, last_key = -1, step = 1,
                     subscribed_ok = true },
    publish = { fn = publish_cmd("c"), arity = 3, flags = "pubsub loading stale fast may-replicate",
                first_key = 0, last_key = 0, step = 0 },
    -- SPUBLISH's channel is a key for cluster routing (COMMAND shows 1 1 1).
    spublish = { fn = publish_cmd("s"), arity = 3, flags = "pubsub loading stale fast may-replicate",
                 first_key = 1, last_key = 1, step = 1 },
    pubsub = { fn = pubsub, arity = -2, flags = "pubsub loading stale", first_key = 0, last_key = 0, step = 0,
               subcommands = PUBSUB_ARITY },
}

---------------------------------------------------------------------------
-- Lock channels: a message that may have been missed is made up

-- The keys one of which is the lock whose release is announced on
-- `channel`, or nil.  Redisson names the channel of lock `name`
-- "redisson_lock__channel:{name}" ("redisson_rwlock:{name}" for its
-- read-write lock), and of a lock `{tag}...` (one with a hash tag already)
-- "redisson_lock__channel:{tag}...".
function P.lock_channel(channel)
    local rest = channel:match("^redisson_lock__channel:(.+)$") or channel:match("^redisson_rwlock:(.+)$")
    if not rest then return nil end
    local inner = rest:match("^{(.*)}$")
    if inner then return { inner, rest } end
    return { rest }
end

-- After a new session: a waiter on a lock channel whose lock is free may
-- have missed the unlock; it is sent Redisson's unlock message.
local function make_up()
    for ch in pairs(subs.c) do
        local keys = P.lock_channel(ch)
        if keys then
            local free = true
            for _, key in ipairs(keys) do
                local ok, rec = pcall(K.read, key)
                if not ok or rec.live then free = false break end
            end
            if free and subs.c[ch] then
                P.stats.made_up = P.stats.made_up + 1
                deliver_local("c", ch, "0")
            end
        end
    end
end

---------------------------------------------------------------------------
-- Watches, sessions, garbage

local watch_live  -- below, with the sweep

-- A watch under <root>/ps fired.  Returns true when it was ours.
function P.on_watch(event, path)
    local base = ps()
    if path:sub(1, #base + 1) ~= base .. "/" then return false end
    if path == inbox() then
        drain()
        return true
    end
    local bb = bells()
    if path:sub(1, #bb + 1) == bb .. "/" then
        rang(event, path)
        return true
    end
    if path == base .. "/l" then
        local ok, e = pcall(watch_live)
        if not ok then host.log("warn", "pubsub: listing live sidecars: " .. tostring(e)) end
        return true
    end
    gen = gen + 1
    local kind, rest = path:sub(#base + 2):match("^([cps])(.*)$")
    if not kind then return true end
    if rest == "" then
        if kind == "p" then patview = nil else dirv[kind] = nil end
        return true
    end
    local enc = rest:match("^/([^/]+)")
    if kind == "p" then
        patview = nil
    elseif enc then
        local ch = host.key_decode(enc)
        if ch then cache_del(kind, ch) end
        local who = rest:match("^/[^/]+/([^/]+)$")
        if who and ch then noring[who .. " " .. ch] = nil end
    end
    return true
end

-- A table emptied by deletes keeps the size it grew to (Lua shrinks a table
-- only when it inserts into a full one): after a client with thousands of
-- channels has gone, the big empty tables are replaced by new ones, so
-- that the heap returns to where it was.
local function compact()
    for _, kind in ipairs({ "c", "p", "s" }) do
        if next(subs[kind]) == nil then subs[kind] = {} end
        if next(interest[kind]) == nil then interest[kind] = {} end
    end
    if next(clients) == nil then clients = {} end
    if next(gc_queue) == nil then gc_queue = {} end
    if next(noring) == nil then noring = {} end
    if next(seen) == nil then seen = {} end
end

local gc_timer
local function gc()
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
    -- the route cache ages: a channel not published to for two periods
    -- is forgotten
    for _, kind in ipairs({ "c", "s" }) do
        local g = cache[kind]
        g.old, g.new, g.n = g.new, {}, 0
    end
    compact()
end

-- Channel and pattern nodes left without interest: queued for gc.  Run
-- when a sidecar is found dead (its interest nodes went with its session,
-- the channel nodes above them stay): one walk of c/, p/ and s/ then, so
-- that PUBSUB CHANNELS and everyone else never walk a dead sidecar's
-- channels.
local function collect()
    local due = host.now() + P.GC_DELAY_MS
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

-- The sidecars alive (l/, watched), so that one of them notices when
-- another dies: the first of them in name order sweeps what the dead one
-- left (its inbox, doorbells, and the channel nodes only it was
-- interested in).  A sidecar that started meanwhile sweeps too (P.swept).
local live = nil       -- instance -> true, as last listed
local sweeping = false
function watch_live()
    local rc, names = zk.children(ps() .. "/l", true)
    if rc ~= zk.OK then return end
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
            host.sleep(P.GC_DELAY_MS)
            local ok, e = pcall(function()
                if sweep() > 0 then collect() end
            end)
            sweeping = false
            if not ok then host.log("warn", "pubsub: sweeping after a sidecar died: " .. tostring(e)) end
        end)
    end
end

function P.on_session(event)
    if event == "new" then
        -- the old session's interest, presence and watches are gone (and
        -- maybe our inbox, see drain_once)
        P.inbox_ready = false
        inbox_confirmed = false
        for _, kind in ipairs({ "c", "p", "s" }) do
            for name, st in pairs(interest[kind]) do
                st.have = false
                reconcile(kind, name)
            end
        end
        cache = new_cache()
        dirv, patview = {}, nil
    elseif event == "lost" or event == "disconnected" then
        return
    end
    if event ~= "connected" and event ~= "new" then return end
    local ok, e = pcall(function()
        ensure_inbox()
        drain()
    end)
    if not ok then host.log("warn", "pubsub: inbox: " .. tostring(K.is_abort(e) and e.reply.err or e)) end
    if not P.swept then
        P.swept = true
        local ok, dead = pcall(sweep)
        if ok and dead > 0 then pcall(collect) end
    end
    pcall(watch_live)
    if not gc_timer then
        gc_timer = host.timer(function()
            pcall(gc)
            gc_timer:start(P.GC_DELAY_MS)
        end)
        gc_timer:start(P.GC_DELAY_MS)
    end
    if event == "new" then
        -- wait for the registrations, then make up for lost unlocks
        for _, kind in ipairs({ "c", "p", "s" }) do
            for _, st in pairs(interest[kind]) do
                if st.want and not st.have then
                    local co = coroutine.running()
                    st.waiters[#st.waiters + 1] = co
                    host.suspend()
                end
            end
        end
        pcall(make_up)
    end
end

return P
