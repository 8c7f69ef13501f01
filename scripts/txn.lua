-- txn.lua — runs one command as a transaction over its keys.
--
--   txn.run(keys, function(t) ... return reply end)
--
-- takes the keys' local queues (queue.lua), then runs the function with a
-- fresh transaction `t` until it returns.  Inside, t:read(key) reads a key
-- (once per attempt), t:put and t:delete write through keyspace.lua, which
-- are always conditional on what was read.  When a write finds the key
-- changed since the read, or a write of unknown outcome turns out not to
-- have applied, the whole function runs again from its first read (after a
-- short jittered sleep), at most MAX_ATTEMPTS times.  So a command either
-- answers as if it ran alone at one instant, or answers TRYAGAIN.
--
-- A function that has nothing to write simply returns its reply; nothing is
-- sent to ZooKeeper beyond its reads.
--
--   txn.script(keys, function(t) ... return reply [, false] end)
--
-- runs a client script (eval.lua) as ONE transaction in buffered mode:
-- t:read records what it read (version, or absence) and serves the
-- script's own earlier writes; t:put and t:delete only buffer; when the
-- function returns, K.commit sends one multi (checks of every key read,
-- then the writes) and only then is the reply released.  A second return
-- value false means "do not commit" (a script that failed).  A failed
-- check re-runs the whole function.  While it runs, txn.run called from
-- the same coroutine (a command reached through redis.call) reuses this
-- transaction, so every command works unchanged in both contexts.

local K = require "keyspace"
local queue = require "queue"
local errors = require "errors"
local U = require "util"

local T = {}

T.MAX_ATTEMPTS = 50  -- the deadline (zk-request-timeout) bounds it first under a herd

local Txn = {}
Txn.__index = Txn

-- The record of `key` as memo (one table per attempt) has it, read first
-- if missing.  With cache_ok, the first attempt may use the owned-key
-- cache; with presume, it may presume the key absent (K.presumed).
local function memo_read(memo, attempt, key, cache_ok, presume)
    local rec = memo[key]
    if rec then return rec end
    if attempt == 1 then
        rec = cache_ok and K.cached(key) or nil
        if not rec and presume then rec = K.presumed(key) end
    end
    rec = rec or K.read(key)
    memo[key] = rec
    return rec
end

-- The record of `key` (see keyspace.lua).  With cache_ok, the first
-- attempt may use the owned-key cache; a command that does must call
-- t:confirm(rec) before any answer that relies on the cached value not
-- matching.
function Txn:read(key, cache_ok)
    return memo_read(self.recs, self.attempt, key, cache_ok)
end

-- On the first attempt only, the record of a key presumed absent (no
-- read): for a write that only makes sense on a missing key (SET NX), so
-- that it costs one create.  If the key exists the create fails and the
-- command runs again with real reads.
function Txn:presume_absent(key)
    if self.attempt ~= 1 or self.recs[key] then return self:read(key) end
    local rec = K.absent(key)
    self.recs[key] = rec
    return rec
end

-- Reads several keys concurrently; returns key -> rec.
function Txn:read_all(keys)
    local missing = {}
    for _, k in ipairs(keys) do
        if not self.recs[k] then missing[#missing + 1] = k end
    end
    if #missing > 0 then
        for k, rec in pairs(K.read_many(missing)) do self.recs[k] = rec end
    end
    return self.recs
end

-- A cached record cannot prove a negative: re-run with fresh reads.
function Txn:confirm(rec)
    if rec.cached then K.retry(0) end
end

function Txn:put(rec, vtype, payload, ttl)
    K.put(rec, vtype, payload, ttl)
    self.recs[rec.key] = nil
end

function Txn:delete(recs, done)
    K.delete(recs, done)
    for _, rec in ipairs(recs) do self.recs[rec.key] = nil end
end

local function jitter(attempt)
    return math.random(1, 1 << math.min(attempt, 5))
end

-- Takes the keys' local queues; the caller holds the ticket in a <close>
-- variable.  A script on a key this session owns (a renewal, a release)
-- may wait for a reconnect as long as the session may still be alive
-- (write commands: zkresp.lua's dispatch).
local function hold_keys(keys, script)
    local paths = {}
    for i = 1, #keys do paths[i] = K.path(keys[i]) end
    if script and K.owns(paths) then host.lease_wait() end
    return queue.hold(paths)
end

-- After attempt number `attempt` failed with `res` (from handler): true and
-- the final reply when the command ends here (an abort, too many attempts,
-- no time left), or false once it has waited to run again.  Anything but an
-- abort or a retry is raised.
local function after_failure(res, attempt)
    if K.is_abort(res) then return true, res.reply end
    if not K.is_retry(res) then error(res, 0) end
    -- Out of attempts or time: the reason the last attempt gave, else
    -- contention, unless ZooKeeper is away (then that is why).
    local _, connected = zk.session()
    local why = res.why or (connected and errors.CONTENDED or errors.UNAVAILABLE)
    if attempt >= T.MAX_ATTEMPTS then return true, { err = why } end
    local delay = res.delay or jitter(attempt)
    if host.deadline and host.now() + delay >= host.deadline() then
        return true, { err = why }
    end
    if delay > 0 then host.sleep(delay) end
    K.arrived() -- the re-run reads afresh
    return false
end

local function handler(e)
    if K.is_retry(e) or K.is_abort(e) then return e end
    return debug and debug.traceback and debug.traceback(tostring(e), 2) or tostring(e)
end

---------------------------------------------------------------------------
-- Buffered mode (scripts)

local Buf = {}
Buf.__index = Buf

-- coroutine -> the script transaction running in it
local current = U.per_command()
T.current = current

-- Inside a script every read may come from the owned-key cache: the commit
-- checks the version of every key read, so a stale entry costs a re-run,
-- never a wrong answer.  For the same reason the first attempt presumes a
-- key absent when it was not seen to exist lately (keyspace.lua, "Presumed
-- absence").
function Buf:read(key)
    return self.view[key] or memo_read(self.base, self.attempt, key, true, true)
end

function Buf:presume_absent(key)
    if self.view[key] or self.base[key] or self.attempt ~= 1 then return self:read(key) end
    local rec = K.absent(key)
    self.base[key] = rec
    return rec
end

function Buf:read_all(keys)
    local missing, seen = {}, {}
    for _, k in ipairs(keys) do
        if not self.view[k] and not self.base[k] and not seen[k] then
            seen[k] = true
            local rec = self.attempt == 1 and K.presumed(k)
            if rec then
                self.base[k] = rec
            else
                missing[#missing + 1] = k
            end
        end
    end
    if #missing > 0 then
        for k, rec in pairs(K.read_many(missing)) do self.base[k] = rec end
    end
    local out = {}
    for _, k in ipairs(keys) do out[k] = self.view[k] or self.base[k] end
    return out
end

Buf.confirm = Txn.confirm

function Buf:put(rec, vtype, payload, ttl)
    local key = rec.key
    local base = self.base[key] or rec
    self.base[key] = base
    ttl = K.effective_ttl(key, ttl or 0)
    self.writes[key] = { kind = "put", vtype = vtype, payload = payload, ttl = ttl }
    self.view[key] = {
        key = key, path = rec.path, live = true, buffered = true,
        node = base.node, vtype = vtype, value = payload, ttl = ttl,
        deadline = ttl > 0 and host.now() + ttl or nil,
    }
end

function Buf:delete(recs, done)
    for _, rec in ipairs(recs) do
        local key = rec.key
        self.base[key] = self.base[key] or rec
        self.writes[key] = { kind = "delete" }
        self.view[key] = { key = key, path = rec.path, live = false, buffered = true }
    end
    if done then done(recs) end
end

-- A command run inside the script: its retries are the script's.
function Buf:nested(fn)
    local ok, res = xpcall(fn, handler, self)
    if ok then return res end
    if K.is_abort(res) then return res.reply end
    error(res, 0)
end

function T.script(keys, fn)
    local co = coroutine.running()
    local held <close> = hold_keys(keys, true)
    local attempt = 0
    local guard <close> = setmetatable({}, { __close = function() current[co] = nil end })
    local seed -- records read by the failed attempt for the next one
    while true do
        attempt = attempt + 1
        local t = setmetatable({ attempt = attempt, base = seed or {}, view = {}, writes = {} }, Buf)
        seed = nil
        current[co] = t
        local ok, res, commit = xpcall(fn, handler, t)
        current[co] = nil
        if ok and commit == false then
            -- a failed script commits nothing, but may have failed on a
            -- key presumed absent
            local cok, cres = xpcall(K.confirm_presumed, handler, t)
            if cok then return res end
            res = cres
        elseif ok then
            local cok, cres = xpcall(K.commit, handler, t)
            if t.publishes then require("pubsub").committed(t, cok) end
            if cok then
                T.stats.committed = T.stats.committed + 1
                return res
            end
            res = cres
        end
        if K.is_retry(res) then
            T.stats.retries = T.stats.retries + 1
            seed = res.recs
        end
        local done, reply = after_failure(res, attempt)
        if done then return reply end
    end
end

-- Scripts committed and re-run (for INFO and the bench).
T.stats = { committed = 0, retries = 0 }

---------------------------------------------------------------------------

function T.run(keys, fn)
    local outer = current[coroutine.running()]
    if outer then return outer:nested(fn) end
    local held <close> = hold_keys(keys)
    local attempt = 0
    while true do
        attempt = attempt + 1
        local t = setmetatable({ attempt = attempt, recs = {} }, Txn)
        local ok, res = xpcall(fn, handler, t)
        if ok then return res end
        local done, reply = after_failure(res, attempt)
        if done then return reply end
    end
end

return T
