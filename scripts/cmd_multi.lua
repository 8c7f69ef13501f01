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
--                dirty, or of the wrong arity (Redis's execCommandAbort);
--                else every queued command runs, in order, inside
--                ONE txn.script over the union of their keys, as a script
--                runs its redis.call's: every sidecar sees all of their
--                writes or none (one ZooKeeper multi at the commit).  A
--                command's error reply is its element of the array; the
--                others still apply, as in Redis (no roll back)
--   DISCARD      (queued) drops the queue, +OK
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

local X = {}

X.MAX_COMMANDS = 10000
X.MAX_BYTES = 4 * 1024 * 1024
X.ARG_COST = 32

X.stats = { execs = 0, aborted = 0, discarded = 0 }

-- client id -> { cmds = {{spec, args}, ...}, bytes = n, dirty = bool }
local queues = {}
local nqueues = 0

local OK = { ok = "OK" }
local QUEUED = { ok = "QUEUED" }

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

-- Clients in MULTI (for /metrics: a queue that outlives its client shows).
function X.count() return nqueues end

-- Client id closed or RESET: its queue goes.
function X.client_gone(id) drop(id) end

-- Why args cannot be queued (the error text), or nil and its spec.
local function check(args)
    local bad, spec = R.check(args)
    if bad then return bad.err end
    if spec.in_c or R.has_flag(spec, "noscript") then
        return E.not_queueable(spec.name)
    end
    local e = R.each_key(spec, args, K.key_error)
    if e then return e end
    e = H.authorize(spec.name, spec, args)
    if e then return e end
    return nil, spec
end

-- Runs queue q's commands as one transaction; the array of their replies.
local function exec(q)
    if q.dirty then
        X.stats.aborted = X.stats.aborted + 1
        return err(E.EXECABORT)
    end
    local cmds = q.cmds
    if #cmds == 0 then return {} end
    -- Another client's script paused between slices: -BUSY, as any keyed
    -- command gets, and the transaction is gone (Redis's execCommandAbort).
    local busy = SB.busy_reply("exec", { "exec" })
    if busy then return err(E.exec_abort(busy.err)) end
    local keys, seen, writes = {}, {}, false
    for _, c in ipairs(cmds) do
        R.each_key(c.spec, c.args, function(key)
            if not seen[key] then
                seen[key] = true
                keys[#keys + 1] = key
            end
        end)
        writes = writes or R.has_flag(c.spec, "write")
    end
    if writes then K.may_write() end
    X.stats.execs = X.stats.execs + 1
    return T.script(keys, function()
        local out = {}
        for i, c in ipairs(cmds) do
            -- A fresh copy on every attempt: a command may change its args.
            -- Its retry and abort signals, and bugs, go on up (txn.lua).
            local r = c.spec.fn(table.move(c.args, 1, #c.args, 1, {}))
            if r == nil then r = host.null end
            out[i] = r
        end
        return out
    end, true)
end

local function no_turn() return false end

-- A command of client id, arriving while the connection is in MULTI
-- (mode "queued"), or the MULTI that opens one ("begin").  EXEC takes its
-- connection's turn (zkresp.lua: turn(), to be closed; nil: the client
-- left meanwhile) once its queue is taken.
function X.dispatch(args, id, mode, turn)
    if mode == "begin" then
        open(id)
        return OK
    end
    local q = queues[id] or open(id)
    local name = args[1]:lower()
    if #args == 1 then
        if name == "multi" then return err(E.MULTI_NESTED) end
        if name == "discard" then
            drop(id)
            X.stats.discarded = X.stats.discarded + 1
            return OK
        end
        if name == "exec" then
            drop(id)
            local t <close> = (turn or no_turn)()
            if t == nil then return nil end
            return exec(q)
        end
    elseif name == "exec" then
        drop(id)
        X.stats.aborted = X.stats.aborted + 1
        return err(E.exec_abort(E.wrong_arity("exec")))
    end
    local e, spec = check(args)
    if not e and #q.cmds >= X.MAX_COMMANDS then e = E.multi_too_many(X.MAX_COMMANDS) end
    local bytes = 0
    if not e then
        for i = 1, #args do bytes = bytes + #args[i] + X.ARG_COST end
        if q.bytes + bytes > X.MAX_BYTES then e = E.multi_too_large(X.MAX_BYTES) end
    end
    if e then
        q.dirty = true
        return err(e)
    end
    q.cmds[#q.cmds + 1] = { spec = spec, args = args }
    q.bytes = q.bytes + bytes
    return QUEUED
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
}

return X
