-- pubsub_routes.lua — who else must get a message: which other sidecars
-- have subscribers on a channel (or a pattern matching it), from a cache
-- kept current by watches (per channel, the children of c/<channel> and
-- their counts; for patterns, the whole of p/), the checks that make a
-- script's commit fail when that was not current (pubsub_interest.lua
-- says what registering interest bumps), and the message ops that reach
-- them: one message node per interested sidecar, never per subscriber.
--
-- A failed check re-runs the script with fresh routes.  Plain PUBLISH goes
-- by the cache alone (Redis's at-most-once).

local K = require "keyspace"
local Z = require "zkio"
local U = require "util"
local errors = require "errors"
local PN = require "pubsub_nodes"

local PR = {}

PR.NAME_PAYLOAD_MAX = 384  -- encoded payload bytes kept in a node name

local ps, dir, node, inst, inbox, bell = PN.ps, PN.dir, PN.node, PN.inst, PN.inbox, PN.bell
local fail = PN.fail

-- kind -> {new = {channel -> entry}, old = {...}, n = #new}: a cache of
-- at most 2 * PR.ROUTE_CACHE_MAX channels per kind, in two generations.  A
-- hit in old moves the entry to new; when new is full, it becomes old and
-- the old old is dropped whole, so the channels a publisher stopped using
-- cost nothing after two generations (a publish to a thousand channels
-- nobody listens to must not be remembered for ever).  A dropped entry of
-- a channel that exists leaves its watches set; their events find nothing
-- to invalidate, and the next publish reads the channel again.
PR.ROUTE_CACHE_MAX = 1024
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
        if g.n >= PR.ROUTE_CACHE_MAX then g.old, g.new, g.n = g.new, {}, 0 end
        g.new[channel] = e
        g.n = g.n + 1
    end
    return e
end

local function cache_put(kind, channel, e)
    local g = cache[kind]
    if g.new[channel] then g.new[channel] = e return end
    g.old[channel] = nil
    if g.n >= PR.ROUTE_CACHE_MAX then g.old, g.new, g.n = g.new, {}, 0 end
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

-- How many channels the route cache holds of a kind.
local function cache_size(kind)
    return U.count(cache[kind].new) + U.count(cache[kind].old)
end
local dirv = {}                    -- kind -> data version of dir(kind)
local patview                      -- {version, pats = {pattern -> {inst -> n}}}
-- Bumped by every watch event under <root>/ps: what was read over several
-- calls is cached only if no event came in between (an event for a node
-- read early would otherwise be lost, its one-shot watch spent).
local gen = 0

-- The counts of the children of X (other sidecars), watched, and the
-- payloads of their doorbells (see pubsub_interest.lua's interest_data).
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
        local rc, _, stat = Z.past_any(zk.get, dir(kind), true) -- (bumped by each channel made)
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

function PR.entry(kind, channel)
    local e = cache_get(kind, channel)
    if e and (e.present or e.dirv == dirv[kind]) then return e end
    local d = dir_version(kind)
    local g = gen
    local X = node(kind, channel)
    local rc, names, stat = Z.past_any(zk.children, X, true) -- (bumped by each subscriber's arrival)
    if rc == zk.NONODE then
        e = { absent = true, dirv = d }
    elseif rc == zk.OK then
        local remote, rings = remote_counts(X, names)
        e = { present = true, version = stat.version, remote = remote, rings = rings }
        -- left empty by sidecars that died: removed after the grace period
        -- (the version check spares it if someone subscribes meanwhile)
        if #names == 0 then PN.gc_later(X, true) end
    else
        fail(rc, "children " .. X)
    end
    if gen == g and d == dirv[kind] then cache_put(kind, channel, e) end
    return e
end

function PR.patterns()
    if patview then return patview end
    local D = dir("p")
    local g = gen
    local rc, _, stat = Z.past_any(zk.get, D, true) -- (bumped by each pattern's subscriber)
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
function PR.route(kind, channel)
    local e = PR.entry(kind, channel)
    local targets, n, checks = {}, 0, {}
    if e.present then
        for who, k in pairs(e.remote) do targets[who] = (targets[who] or 0) + k n = n + k end
        checks[#checks + 1] = { "check", node(kind, channel), e.version, ps = true }
    else
        checks[#checks + 1] = { "check", dir(kind), e.dirv, ps = true }
    end
    if kind == "c" then
        local pv = PR.patterns()
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

-- A message node's name and data: "<kind><channel>.<payload>." (encoded;
-- ZooKeeper appends the sequence number), so the receiver needs no read
-- beyond listing its inbox; a payload too long for a name goes in the data,
-- the kind letter in upper case.
local function msg_name(kind, channel, payload)
    local ch = host.key_encode(channel)
    local pl = host.key_encode(payload)
    if #pl <= PR.NAME_PAYLOAD_MAX then
        return kind .. ch .. "." .. pl .. ".", ""
    end
    return kind:upper() .. ch .. "..", payload
end

-- Appends one message create per target sidecar, after a set of its
-- doorbell when it keeps one for this payload (the message's kind letter
-- is then "b"); each create remembers how many subscribers it reaches
-- (op.reach).  Returns the number of messages.
function PR.message_ops(ops, kind, channel, payload, targets, rings)
    local name, data = msg_name(kind, channel, payload)
    local n = 0
    for who, reach in pairs(targets) do
        local this = name
        if rings and rings[who] == payload and kind == "c" and data == "" and not noring[who .. " " .. channel] then
            ops[#ops + 1] = { "set", bell(who, channel, payload), "", -1, ps = true, bell = who .. " " .. channel }
            this = "b" .. name:sub(2)
        end
        -- persistent: a committed message outlives its publisher's session
        -- (one closed right after its reply); the receiver deletes it
        ops[#ops + 1] = { "create", inbox(who) .. "/" .. this, data, zk.SEQUENCE,
                          ps = true, reach = reach }
        n = n + 1
    end
    return n
end

-- A multi found the doorbell that op.bell names missing: it is not rung
-- again until that sidecar's interest node changes (see noring).
function PR.bell_missing(key)
    noring[key] = true
end

-- A publish found a route stale (a multi failed): read it again.
function PR.invalidate(kind, channel)
    if channel then cache_del(kind, channel) end
    dirv[kind] = nil
    patview = nil
end

-- A watch fired on path, under <root>/ps but not on our inbox, doorbells
-- or l/: the routes it may have changed are read again.
function PR.on_watch(path)
    local base = ps()
    gen = gen + 1
    local kind, rest = path:sub(#base + 2):match("^([cps])(.*)$")
    if not kind then return end
    if rest == "" then
        if kind == "p" then patview = nil else dirv[kind] = nil end
        return
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
end

-- The session ended ("lost") or a new one came ("new"): its watches are
-- gone, so is what they kept current; a read under way now is not cached
-- (its watch may be the old session's).
function PR.new_session()
    cache = new_cache()
    dirv, patview = {}, nil
    gen = gen + 1
end

-- The route cache ages: a channel not published to for two periods is
-- forgotten.
function PR.age()
    for _, kind in ipairs({ "c", "s" }) do
        local g = cache[kind]
        g.old, g.new, g.n = g.new, {}, 0
    end
end

-- How many channels the route cache holds (pubsub.sizes).
function PR.size()
    return cache_size("c") + cache_size("s")
end

-- See pubsub.lua's compact.
function PR.compact()
    if next(noring) == nil then noring = {} end
end

return PR
