-- cmd_multi.lua — MULTI, EXEC and DISCARD: Redis 7's transactions, run as
-- one script transaction (txn.lua).
--
--   MULTI        the gateway marks the connection (conn.multi) and passes
--                it here as "begin": a fresh queue for the client, +OK
--   <command>    while the connection is in MULTI the gateway passes every
--                command but QUIT and RESET here as "queued", C ones too:
--                checked as dispatch would (known, its shape, its key
--                lengths, the policy's authorize) and that it may run in a
--                transaction, then +QUEUED; a refusal is its own reply and
--                makes the transaction dirty
--   EXEC         (queued, the gateway has left MULTI) EXECABORT when
--                dirty, of the wrong arity, or while another client's
--                script is busy (Redis's execCommandAbort);
--                else every queued command runs, in order, inside
--                ONE txn.script over the union of their keys, as a script
--                runs its redis.call's: every sidecar sees all of their
--                writes or none (one ZooKeeper multi at the commit).  A
--                command's error reply is its element of the array; the
--                others still apply, as in Redis (no roll back)
--   DISCARD      (queued) drops the queue, +OK
--   WATCH key..  (outside MULTI) reads each key and keeps what it saw: its
--                node's path and mzxid, or that the key does not exist (an
--                expired key does not); inside MULTI Redis's error, the
--                transaction still good
--   UNWATCH      forgets them, as EXEC, DISCARD, RESET and a close do
--
-- EXEC with watched keys reads them again inside its transaction: a key
-- that is not what WATCH saw (written since, through any sidecar, by this
-- client too; deleted, expired, or made) makes EXEC answer a null array
-- and run nothing, as Redis's does.  Those reads are the transaction's
-- own, so its commit checks them (their versions, or their absence) with
-- its writes in one multi: a write landing between them and the commit
-- runs EXEC again, which then sees it and answers null (TRYAGAIN when an
-- earlier attempt's commit may have applied: the change may be its own).
-- A key watched elsewhere (another database, another user's node under a
-- policy) is read by its path, its queue held too.  A key that was made
-- and deleted again between WATCH and EXEC reads as it did at WATCH: it
-- aborts when a read through this sidecar saw it made (shared.lua's
-- watched absence: the client's own GET did, if it wrote on what it
-- read), and nothing else (Redis counts every touch; ZooKeeper shows
-- states).
--
-- Outside MULTI, EXEC and DISCARD reach their registry entries below and
-- answer Redis's "without MULTI" errors.  The queue is per client id and
-- changes only in code that does not yield, so that it follows the
-- gateway's dispatch order even for a pipeline whose commands run
-- concurrently; EXEC takes its keys' queues (queue.lua) before its first
-- yield, so a command pipelined after it on the same keys waits for its
-- commit.  A client that closes or RESETs (zkresp.lua's on_client_gone)
-- loses its queue.
--
-- Caps, so that no client can make the sidecar hold more than a few MB:
-- MAX_COMMANDS queued commands and MAX_BYTES of queued arguments, each
-- argument counted as its length plus ARG_COST (what a Lua string and its
-- table slot cost, about).  The commit of EXEC is one ZooKeeper multi,
-- which jute.maxbuffer bounds (--zk-max-request, 960 KiB by default): a
-- transaction cannot write more than that anyway, so 4 MiB of arguments
-- leaves room for commands that read, overwrite the same keys or carry
-- large arguments to small writes, and nothing useful beyond it.

local R = require "registry"
local E = require "errors"
local K = require "keyspace"
local H = require "hooks"
local T = require "txn"
local SB = require "sandbox"
local shared = require "shared"

local X = {}

X.MAX_COMMANDS = 10000
X.MAX_BYTES = 4 * 1024 * 1024
X.ARG_COST = 32

-- Watched keys per client, and their paths' bytes (each plus ARG_COST) as
-- a share of ZooKeeper's request limit: EXEC's commit checks every one in
-- its one multi (a check, or a create and a delete for an absent key),
-- beside the queued writes.
X.MAX_WATCHED = 1000
X.WATCH_SHARE = 0.25

local function watch_bytes_max() return math.floor(zk.max_request() * X.WATCH_SHARE) end

X.stats = { execs = 0, aborted = 0, discarded = 0, watch_aborted = 0 }

-- client id -> { cmds = {{spec, args}, ...}, bytes = n, dirty = bool }
local queues = {}
local nqueues = 0

local OK = { ok = "OK" }
local QUEUED = { ok = "QUEUED" }
local NULL_ARRAY = { null_array = true }

local function err(text) return { err = text } end

local function drop(id)
    if queues[id] then
        queues[id] = nil
        nqueues = nqueues - 1
    end
end

local function open(id)
    drop(id)
    local q = { cmds = {}, bytes = 0, dirty = false }
    queues[id] = q
    nqueues = nqueues + 1
    return q
end

-- client id -> { n = keys, bytes = n, paths = set, [i] = { key, path,
-- seen, made } }: WATCH's keys (in the order watched), their nodes, and
-- what each was, by identity(); a key absent then is in
-- shared.watched_absent until the watch goes, which sets `made` when a
-- read finds it live
local watches = {}
local nwatching = 0
local absent = shared.watched_absent

local function unwatch(id)
    local w = watches[id]
    if not w then return end
    watches[id] = nil
    nwatching = nwatching - 1
    for i = 1, w.n do
        local x = w[i]
        local set = x.seen == false and absent[x.path]
        if set then
            set[x] = nil
            if not next(set) then absent[x.path] = nil end
        end
    end
end

-- What a key is, for WATCH: its node's last change, or false when the key
-- does not exist (no node, or one whose deadline passed).
local function identity(rec)
    return rec.live and rec.node.mzxid or false
end

-- Clients in MULTI (for /metrics: a queue that outlives its client shows).
function X.count() return nqueues end

-- Clients with watched keys (for /metrics).
function X.watching() return nwatching end

-- Client id closed or RESET: its queue and its watches go.
function X.client_gone(id)
    drop(id)
    unwatch(id)
end

-- Why args cannot be queued (the error text; harmless: it leaves the
-- transaction good), or nil and its spec.  Redis runs WATCH at once inside
-- MULTI, to refuse it, and queues UNWATCH (a no-op at EXEC, which has
-- forgotten the watches).
local function check(args)
    local bad, spec = R.check(args)
    if bad then return bad.err end
    if spec.name == "watch" then return E.WATCH_IN_MULTI, nil, true end
    if spec.name ~= "unwatch" and (spec.in_c or R.has_flag(spec, "noscript")) then
        return E.not_queueable(spec.name)
    end
    -- (another client's script paused between slices: -BUSY, as outside)
    local busy = not R.has_flag(spec, "allow_busy") and SB.busy_reply(spec.name, args)
    if busy then return busy.err end
    local e = R.each_key(spec, args, K.key_error)
    if e then return e end
    e = H.authorize(spec.name, spec, args)
    if e then return e end
    return nil, spec
end

-- Whether watched key x names, for the running command, a node other than
-- the one watched (a key of another database; a policy's key_path may map
-- both databases' keys to one node, or map a key by the client's user).
local function elsewhere(x) return x.path ~= K.path(x.key) end

-- The records of the watched keys w (by position) for EXEC's transaction
-- t, read now (not from the cache, not presumed): those of the running
-- command's database go into t.base, so that the commit checks them and
-- the queued commands read them; those elsewhere (another database's,
-- after a SELECT since WATCH) are also returned apart, for the commit to
-- check (t:check_also).
local function watched_now(t, w)
    local recs, others, here = {}, {}, {}
    for i, x in ipairs(w) do
        if elsewhere(x) then
            local rec = K.read(x.key, x.path)
            recs[i] = rec
            others[#others + 1] = rec
        else
            local rec = t.base[x.key]
            if not rec or rec.cached or rec.presumed then here[#here + 1] = x.key end
        end
    end
    if #here > 0 then
        for k, rec in pairs(K.read_many(here)) do t.base[k] = rec end
    end
    for i, x in ipairs(w) do recs[i] = recs[i] or t.base[x.key] end
    return recs, others
end

-- Whether a key of w is not what WATCH saw, read in transaction t.
local function touched(t, w)
    local recs, others = watched_now(t, w)
    for i, x in ipairs(w) do
        if x.made or identity(recs[i]) ~= x.seen then return true end
    end
    if #others > 0 then t:check_also(others) end
    return false
end

-- The policy's authorize asked again at EXEC, as Redis checks its ACLs
-- again (a reload may have taken a permission away since the command was
-- queued): nil, or the error that is the command's reply in EXEC's array,
-- the others still running.
local function refused_now(c)
    local e = H.authorize(c.spec.name, c.spec, c.args)
    if not e or e:sub(1, 7) ~= "NOPERM " then return e end
    local reason = e:sub(1, 12) == "NOPERM User " and "no permission to execute the command or subcommand" or e:sub(8)
    return E.ACL_CHANGED .. reason
end

-- Runs queue q's commands as one transaction; the array of their replies.
-- w: the client's watched keys, or nil.
local function exec(q, w)
    -- Another client's script paused between slices: -BUSY, as any keyed
    -- command gets, and the transaction is gone (Redis's execCommandAbort).
    local busy = SB.busy_reply("exec", { "exec" })
    if busy or q.dirty then
        X.stats.aborted = X.stats.aborted + 1
        return err(busy and E.exec_abort(busy.err) or E.EXECABORT)
    end
    local cmds = q.cmds
    if #cmds == 0 and not w then return {} end
    local keys, seen, writes, denied = {}, {}, false, {}
    for i, c in ipairs(cmds) do
        denied[i] = refused_now(c)
        R.each_key(c.spec, c.args, function(key)
            if not seen[key] then
                seen[key] = true
                keys[#keys + 1] = key
            end
        end)
        writes = writes or R.has_flag(c.spec, "write")
    end
    -- (another database's watched keys are held too: no command of this
    -- sidecar deletes and makes one again, at the version read, before
    -- the commit checks it)
    local more
    for _, x in ipairs(w or {}) do
        if elsewhere(x) then
            more = more or {}
            more[#more + 1] = x.path
        elseif not seen[x.key] then
            seen[x.key] = true
            keys[#keys + 1] = x.key
        end
    end
    if writes then K.may_write() end
    X.stats.execs = X.stats.execs + 1
    return T.script(keys, function(t)
        if w and touched(t, w) then
            -- (an earlier attempt's commit may have applied: what changed
            -- may be its own writes, so no null, which says nothing ran)
            if t.doubt then return err(E.UNAVAILABLE), false end
            X.stats.watch_aborted = X.stats.watch_aborted + 1
            return NULL_ARRAY, false
        end
        local out = {}
        for i, c in ipairs(cmds) do
            -- A fresh copy on every attempt: a command may change its args.
            -- Its retry and abort signals, and bugs, go on up (txn.lua).
            local r = denied[i] and err(denied[i]) or c.spec.fn(table.move(c.args, 1, #c.args, 1, {}))
            if r == nil then r = host.null end
            out[i] = r
        end
        return out
    end, true, more)
end

local function no_turn() return false end

-- The client's watches, taken once its connection's earlier commands (a
-- WATCH pipelined before) are done: t, its turn, nil when it left.
local function take_watches(id, t)
    if t == nil then return nil end
    local w = watches[id]
    unwatch(id)
    return w
end

-- A command of client id, arriving while the connection is in MULTI
-- (mode "queued"), or the MULTI that opens one ("begin").  EXEC takes its
-- connection's turn (zkresp.lua: turn(), to be closed; nil: the client
-- left meanwhile) once its queue is taken, and so does DISCARD before it
-- forgets the watches.
function X.dispatch(args, id, mode, turn)
    if mode == "begin" then
        open(id)
        return OK
    end
    turn = turn or no_turn
    local q = queues[id] or open(id)
    local name = args[1]:lower()
    if #args == 1 then
        if name == "multi" then return err(E.MULTI_NESTED) end
        if name == "discard" then
            drop(id)
            X.stats.discarded = X.stats.discarded + 1
            local t <close> = turn()
            take_watches(id, t)
            return OK
        end
        if name == "exec" then
            drop(id)
            local t <close> = turn()
            if t == nil then return nil end
            return exec(q, take_watches(id, t))
        end
    elseif name == "exec" then
        drop(id)
        return X.exec_refused(id, E.wrong_arity("exec"), turn)
    end
    local e, spec, harmless = check(args)
    if not e and #q.cmds >= X.MAX_COMMANDS then e = E.multi_too_many(X.MAX_COMMANDS) end
    local bytes = 0
    if not e then
        for i = 1, #args do bytes = bytes + #args[i] + X.ARG_COST end
        if q.bytes + bytes > X.MAX_BYTES then e = E.multi_too_large(X.MAX_BYTES) end
    end
    if e then
        q.dirty = q.dirty or not harmless
        return err(e)
    end
    q.cmds[#q.cmds + 1] = { spec = spec, args = args }
    q.bytes = q.bytes + bytes
    return QUEUED
end

-- WATCH key [key ...]: reads the keys (queue.lua orders it with the
-- connection's other commands) and keeps what each is, unless the key is
-- watched already (Redis keeps the first).  Nothing is kept for a client
-- that left while it read.
local function watch(args)
    local id = host.client_id()
    local keys = table.move(args, 2, #args, 1, {})
    return T.run(keys, function(t)
        local recs = t:read_all(keys)
        if id == nil or host.client_id() ~= id then return OK end
        local w = watches[id] or { n = 0, bytes = 0, paths = {} }
        local fresh, seen, bytes = {}, {}, 0
        for _, key in ipairs(keys) do
            local rec = recs[key]
            if not w.paths[rec.path] and not seen[rec.path] then
                seen[rec.path] = true
                fresh[#fresh + 1] = { key = key, path = rec.path, seen = identity(rec) }
                bytes = bytes + #rec.path + X.ARG_COST
            end
        end
        if w.n + #fresh > X.MAX_WATCHED then return err(E.watch_too_many(X.MAX_WATCHED)) end
        if w.bytes + bytes > watch_bytes_max() then return err(E.watch_too_large(watch_bytes_max())) end
        for _, x in ipairs(fresh) do
            w.n = w.n + 1
            w[w.n] = x
            w.paths[x.path] = true
            if x.seen == false then
                absent[x.path] = absent[x.path] or {}
                absent[x.path][x] = true
            end
        end
        w.bytes = w.bytes + bytes
        if not watches[id] then
            watches[id] = w
            nwatching = nwatching + 1
        end
        return OK
    end)
end

-- EXEC refused outside MULTI (its arity, a RESP2 subscriber's):
-- Redis's execCommandAbort, the client's watches forgotten once its
-- earlier commands are done.  `turn` as X.dispatch's.
function X.exec_refused(id, text, turn)
    X.stats.aborted = X.stats.aborted + 1
    local t <close> = turn()
    take_watches(id, t)
    return err(E.exec_abort(text))
end

local function unwatch_cmd()
    local id = host.client_id()
    if id ~= nil then unwatch(id) end
    return OK
end

-- EXEC and DISCARD outside MULTI (inside, the gateway sends them to
-- X.dispatch).  MULTI itself reaches here only from a RESP2 subscriber,
-- whose refusal comes first, and from no script (noscript).
local function without(text) return function() return err(text) end end

local FLAGS = "noscript loading stale fast allow_busy"
X.commands = {
    multi = { fn = function() return err("ERR MULTI is handled by the gateway") end, arity = 1,
              flags = FLAGS, first_key = 0, last_key = 0, step = 0, group = "transactions" },
    exec = { fn = without(E.EXEC_WITHOUT_MULTI), arity = 1, flags = "noscript loading stale skip_slowlog",
             first_key = 0, last_key = 0, step = 0, group = "transactions" },
    discard = { fn = without(E.DISCARD_WITHOUT_MULTI), arity = 1, flags = FLAGS,
                first_key = 0, last_key = 0, step = 0, group = "transactions" },
    watch = { fn = watch, arity = -2, flags = FLAGS, first_key = 1, last_key = -1, step = 1,
              group = "transactions" },
    unwatch = { fn = unwatch_cmd, arity = 1, flags = FLAGS, first_key = 0, last_key = 0, step = 0,
                group = "transactions" },
}

return X
