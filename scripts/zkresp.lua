-- zkresp.lua — the system layer's entry point (see sidecar/lua_host.h).
--
--   M.dispatch(args, subscribed, db, multi)  one Redis command -> its
--                                reply value, run in database db (zkio.lua's
--                                Z.use_db); multi: "begin" for the MULTI
--                                that opens a transaction, "queued" for a
--                                command of a connection in MULTI
--                                (cmd_multi.lua), else nil
--   M.on_session(event, id)      ZooKeeper session events
--   M.on_reload()                SIGHUP: load the policy again; if it
--                                fails the old policy stays
--   M.commands                   the command registry (registry.lua): the
--                                built-in commands (cmd_*.lua, eval.lua,
--                                cmd_pubsub.lua, those answered in C) and the
--                                policy's own `commands`; the host lists it
--                                for COMMAND
--
-- dispatch refuses what Redis refuses before a command body runs (the
-- registry: an unknown name, a wrong arity or subcommand, a command not
-- allowed in subscribed mode), then checks the key lengths and the
-- policy's authorize, then calls fn.  So fn may read every argument its
-- arity guarantees.
local K = require "keyspace"
local U = require "util"
local SB = require "sandbox"
local R = require "registry"
local queue = require "queue"
local X = require "expiry"

local M = {}

local PS = require "pubsub"
local LK = require "locks"
local SC = require "script_cache"

local watch_events = 0  -- ZooKeeper watch events received (for /metrics)

local builtin = {}
for _, mod in ipairs({ "cmd_string", "cmd_keys", "cmd_hash", "cmd_list", "cmd_set", "cmd_zset", "cmd_pubsub", "eval",
                       "cmd_policy", "cmd_lock", "cmd_server" }) do
    for name, spec in pairs(require(mod)) do builtin[name] = spec end
end
local MX = require "cmd_multi"
for name, spec in pairs(MX.commands) do builtin[name] = spec end
M.builtin = builtin

-- The registry: built-in commands and the policy's (registry.lua).
M.commands = R.commands

---------------------------------------------------------------------------
-- Policy

local function policy_file()
    local p = host.config and host.config.policy
    if p and p ~= "" then return p end
    local found = package.searchpath("policy", package.path)
    if found then return found end
    if debug and debug.getinfo then
        local src = debug.getinfo(1, "S").source
        local dir = src:match("^@(.*)/[^/]*$")
        if dir then return dir .. "/policy.lua" end
    end
    return "scripts/policy.lua"
end

local H = require "hooks"
M.hooks = H

-- Loads the policy from `path` (default: host.config.policy, else
-- policy.lua next to this file) and self-checks it (hooks.lua); only then
-- does it replace the running one.  Returns true, or nil and the reason
-- (logged by the caller, shown by INFO's # Policy section).
function M.load_policy(path)
    path = path or policy_file()
    local loaded, e = H.load(path)
    if not loaded then
        H.failed(path, e)
        return nil, e
    end
    local watched = H.has("on_lost")
    K.set_policy(loaded.hooks)
    R.install(builtin, loaded.commands)
    H.installed(path, loaded)
    if not watched then X.follow_owned() end
    M.policy_path = path
    return true
end

function M.reload_policy()
    local ok, e = M.load_policy()
    if ok then
        host.log("info", "policy reloaded from " .. M.policy_path)
    else
        host.log("error", "policy not reloaded, the old one stays: " .. tostring(e))
    end
    return ok, e
end
H.reload = M.reload_policy

-- INFO's # Policy section: {{name, value}, ...} (sidecar/lua_host.h).
function M.policy_info()
    return H.info()
end

-- AUTH / HELLO AUTH of a user other than "default": true or false, or nil
-- when the policy defines no authenticate hook (sidecar/lua_host.h).
function M.authenticate(user, password, addr)
    return H.authenticate(user, password, addr)
end

do
    local ok, e = M.load_policy()
    if not ok then error("loading the policy: " .. tostring(e), 0) end
end

---------------------------------------------------------------------------
-- Dispatch

function M.command(name)
    return M.commands[name]
end

-- A key argument too long (or otherwise refused), as the registry names
-- the command's keys.
local function check_keys(spec, args)
    return R.each_key(spec, args, K.key_error)
end

-- A write command on a key this session owns (a renewal, a release) may
-- wait for a reconnect as long as the session may still be alive, not
-- only --zk-request-timeout: a renewal that fails during a short outage
-- makes a client (Redisson's watchdog) give up a lock it still holds.
-- (Not for LOCK.*: their names are no keys, and locks.lua waits its own.)
local SCRIPTS = { eval = true, evalsha = true }

local function lease_wait(spec, args)
    local writes = R.has_flag(spec, "write")
    if writes or SCRIPTS[spec.name] then K.may_write() end
    local first = spec.first_key or 0
    if not writes or first <= 0 or spec.lock_names then return end
    local last = spec.last_key or first
    if last < 0 then last = #args + last end
    local step = spec.step and spec.step > 0 and spec.step or 1
    local paths = {}
    for i = first, last, step do
        if args[i + 1] then paths[#paths + 1] = K.path(args[i + 1]) end
    end
    if K.owns(paths) then host.lease_wait() end
end

local function policy_abort(e)
    if not K.is_abort(e) and debug and debug.traceback then
        host.log("debug", debug.traceback(tostring(e), 2))
    end
    return e
end

-- The connection's turn (queue.lua's Q.turn) for a command that names
-- keys or not (alone); false: none (no client); nil: the client left
-- while it waited.  A command that waited reads as if it arrived now.
local function take_turn(co, alone)
    local id = host.client_id()
    if not id then return false end
    -- (waiting, it keeps its client as it is now: a RESET or AUTH read
    -- after it changes the connection, not this command)
    local turn = queue.turn(id, alone, H.client)
    if turn and turn.waited then K.arrived(co) end
    return turn
end

-- Every command takes a turn but the subscribe family, which the gateway
-- dispatches once nothing else of its connection runs (it changes the
-- subscriptions, which decide at once how the gateway reads the commands
-- after it), SCRIPT KILL, which must not wait behind what it kills, and
-- DEBUG, whose SLEEP stands in for a blocking LOCK.ACQUIRE in the fault
-- tests (that one takes its turn with its key: what follows runs).
local function takes_turn(spec, args)
    if spec.subscribed_ok or spec.name == "debug" then return false end
    return not (spec.name == "script" and args[2]:lower() == "kill")
end

-- An EXEC refused outside MULTI (its arity, a RESP2 subscriber's, -BUSY):
-- Redis's execCommandAbort (cmd_multi.lua).
local function exec_refused(co, text)
    local client = host.client()
    return MX.exec_refused(client and client.id or 0, text, function() return take_turn(co, true) end)
end

function M.dispatch(args, subscribed, db, multi)
    local co = coroutine.running()
    U.new_command(co)
    K.use_db(db or 0, co)
    if multi then
        K.arrived(co)
        -- (MULTI's queue changes as the gateway reads: no turn; EXEC, which
        -- runs every queued command, keys or not, takes its turn alone)
        local client = host.client()
        return MX.dispatch(args, client and client.id or 0, multi, function() return take_turn(co, true) end)
    end
    local refused, spec = R.refusal(args, subscribed)
    if refused then
        if refused.err and args[1]:lower() == "exec" then return exec_refused(co, refused.err) end
        return refused
    end
    local e = check_keys(spec, args)
    if e then return { err = e } end
    K.arrived(co)
    e = H.authorize(spec.name, spec, args)
    if e then return { err = e } end
    -- Another client's script is running in slices: Redis's -BUSY.
    local busy = not R.has_flag(spec, "allow_busy") and SB.busy_reply(spec.name, args)
    if busy then
        if spec.name == "exec" then return exec_refused(co, busy.err) end
        return busy
    end
    local turn <close> = takes_turn(spec, args) and take_turn(co, not R.names_keys(spec, args))
    if turn == nil then return nil end
    -- A policy hook that fails outside the command's transaction (its
    -- key_path, while the keys' queues are taken) ends it the same way.
    local ok, r = xpcall(lease_wait, policy_abort, spec, args)
    if ok then ok, r = xpcall(spec.fn, policy_abort, args) end
    if ok or not K.is_abort(r) then
        if not ok then error(r, 0) end
        return r
    end
    return r.reply
end

-- Numbers for the metrics endpoint (sidecar/metrics.c), called on every
-- scrape outside any command: cheap, and never a zk.* call.  owned_keys is
-- exported as zkresp_owned_keys; names ending in _total become counters
-- zkresp_lua_<name>, the others gauges.
-- The sidecar is idle after work (lua_host_collect, on the main state, just
-- before a full collection): tables grown for a burst give their room back.
function M.on_idle()
    U.compact_per_command()
    K.compact()
end

function M.stats()
    local T = require "txn"
    local sid = zk.session()
    local owned = 0
    for _, e in pairs(K.owned) do
        if e.lifetime == "ephemeral" and e.sid == sid then owned = owned + 1 end
    end
    local sizes = PS.sizes()
    return {
        owned_keys = owned,
        script_commits_total = T.stats.committed,
        script_retries_total = T.stats.retries,
        shared_reads_total = K.stats.shared_reads,
        pubsub_published_total = PS.stats.published,
        pubsub_messages_sent_total = PS.stats.messages_sent,
        pubsub_messages_received_total = PS.stats.messages_received,
        pubsub_made_up_total = PS.stats.made_up,
        pubsub_rung_total = PS.stats.rung,
        zookeeper_watch_events_total = watch_events,
        pubsub_subscriptions = sizes.subscriptions,
        pubsub_interests = sizes.interests,
        pubsub_route_cache = sizes.route_cache,
        pubsub_gc_queue = sizes.gc_queue,
        lock_holds = LK.count(),
        lock_grants_total = LK.stats.granted,
        lock_expired_total = LK.stats.expired,
        lock_handed_total = LK.stats.handed,
        lock_waits_total = LK.wait_stats.waits,
        lock_wakeups_total = LK.wait_stats.woken,
        multi_queues = MX.count(),
        multi_execs_total = MX.stats.execs,
        multi_execaborts_total = MX.stats.aborted,
        multi_watching_clients = MX.watching(),
        multi_watch_aborts_total = MX.stats.watch_aborted,
    }
end

-- A watch left by keyspace.lua fired (see sidecar/lua_host.h).
function M.on_watch(event, path)
    watch_events = watch_events + 1
    if LK.owns_path(path) then
        LK.on_watch(path)
        return
    end
    if PS.on_watch(event, path) then return end
    if SC.on_watch(event, path) then return end
    K.on_watch(event, path)
end

-- A client with subscriptions, in MULTI or that sent WATCH closed or was
-- RESET.
function M.on_client_gone(id)
    MX.client_gone(id)
    PS.client_gone(id)
end

function M.on_reload()
    M.reload_policy()
end

-- SIGTERM: the grace period lets running commands finish; a native lock's
-- waiter would only wait it out, so it leaves its queue now.
function M.on_shutdown()
    LK.on_shutdown()
end

function M.on_session(event, session_id)
    host.log("info", string.format("session %s 0x%x", tostring(event),
                                   math.tointeger(session_id) or 0))
    -- (each module's handling below may wait for ZooKeeper: the script
    -- cache and pub/sub's routes stop trusting the old session's watches
    -- at once)
    SC.session_changed(event)
    PS.session_changed(event)
    K.on_session(event, session_id)
    -- (before pub/sub's, which waits until every channel is registered
    -- again: an old session's holds and waiters are told at once)
    LK.on_session(event)
    PS.on_session(event)
    SC.on_session(event)
end

return M
