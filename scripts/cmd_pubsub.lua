-- cmd_pubsub.lua — the pub/sub commands: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE,
-- their UNSUBSCRIBEs, PUBLISH, SPUBLISH and PUBSUB's subcommands, with
-- Redis 7.0's replies and errors.  Same table shape as cmd_string.lua.
--
-- What they stand on is pubsub.lua's (publishing, subscriptions across
-- sidecars) and the modules it names.

local K = require "keyspace"
local T = require "txn"
local SB = require "sandbox"
local U = require "util"
local errors = require "errors"
local PS = require "pubsub"
local PL = require "pubsub_local"
local PI = require "pubsub_interest"
local PR = require "pubsub_routes"
local PN = require "pubsub_nodes"

local cfg, dir = PN.cfg, PN.dir
local count, reply_count = PL.count, PL.reply_count

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
local function check_caps(c, kind, args)
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

-- A name whose interest could never be registered (PI.too_large: past
-- ZooKeeper's request limit) is refused before anything is subscribed, as
-- Redis would accept it.  (A name under a 16th of the limit always fits:
-- each of the multi's three paths holds it encoded, at most 3 bytes a
-- byte.)
local function check_sizes(kind, args)
    local limit = zk.max_request()
    for i = 2, #args do
        if #args[i] * 16 > limit and PI.too_large(kind, args[i]) then
            return { err = errors.request_too_large(limit) }
        end
    end
end

-- A (un)subscribe command's verb (lower case), its kind, and the id of the
-- client asking (nil when none is: a script, say).
local function request(args)
    local verb = args[1]:lower()
    local me = host.client()
    return verb, KIND_OF[verb], me and me.id
end

-- SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE
-- Their confirmations, as UNSUBSCRIBE's, do not rest on the session: a
-- subscription is this sidecar's, its interest registered again under a
-- new session.
local function subscribe(args)
    local verb, kind, id = request(args)
    if not id then return { err = "ERR no client" } end
    host.outlives_session()
    local refused = check_caps(PL.client(id), kind, args) or check_sizes(kind, args)
    if refused then return refused end
    local c = PL.ensure_client(id)
    local frames, waits = {}, {}
    for i = 2, #args do
        local name = args[i]
        waits[#waits + 1] = PS.add(id, c, kind, name)
        frames[#frames + 1] = { push = { verb, name, reply_count(c, kind) } }
    end
    PL.tell_gateway(id, c)
    for _, st in ipairs(waits) do PI.await(st) end
    return { frames = frames }
end

-- UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE
local function unsubscribe(args)
    local verb, kind, id = request(args)
    if not id then return { err = "ERR no client" } end
    host.outlives_session()
    local c = PL.ensure_client(id)
    local names = {}
    if #args == 1 then
        for i, name in ipairs(c[kind].list) do names[i] = name end
    else
        for i = 2, #args do names[#names + 1] = args[i] end
    end
    local frames = {}
    for _, name in ipairs(names) do
        PS.drop(id, c, kind, name)
        frames[#frames + 1] = { push = { verb, name, reply_count(c, kind) } }
    end
    if #names == 0 then frames[1] = { push = { verb, host.null, reply_count(c, kind) } } end
    PL.tell_gateway(id, c)
    return { frames = frames }
end

local function publish_cmd(kind)
    return function(args)
        local c = SB.context()
        if c and c.ro then return { err = "ERR Write commands are not allowed from read-only scripts." } end
        local t = T.current[coroutine.running()]
        if t then return PS.publish_buffered(t, kind, args[2], args[3]) end
        return PS.publish(kind, args[2], args[3])
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
    for ch in pairs(PL.by_name(kind)) do add(ch) end
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
        local e = PL.by_name(kind)[ch]
        local n = e and e.n or 0
        local ok, en = pcall(PR.entry, kind, ch)
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

local function precheck(args)
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
    local e = precheck(args)
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
        for pat in pairs(PL.by_name("p")) do seen_p[pat] = true n = n + 1 end
        local ok, pv = pcall(PR.patterns)
        if ok then
            for pat in pairs(pv.pats) do
                if not seen_p[pat] then n = n + 1 end
            end
        end
        return n
    elseif sub == "help" then
        return errors.help("pubsub", {
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
        })
    end
    return { err = string.format("ERR unknown subcommand '%s'. Try PUBSUB HELP.", args[2]:sub(1, 128)) }
end

-- The (un)subscribe commands are the ones allowed in RESP2 subscribed mode
-- (with PING, QUIT and RESET, answered in C): subscribed_ok.
local SUBFLAGS = "pubsub noscript loading stale"
local C = {
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

return C
