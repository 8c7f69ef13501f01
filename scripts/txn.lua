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

local K = require "keyspace"
local queue = require "queue"
local errors = require "errors"

local T = {}

T.MAX_ATTEMPTS = 10

local Txn = {}
Txn.__index = Txn

-- The record of `key` (see keyspace.lua).  With cache_ok, the first
-- attempt may use the owned-key cache; a command that does must call
-- t:confirm(rec) before any answer that relies on the cached value not
-- matching.
function Txn:read(key, cache_ok)
    local rec = self.recs[key]
    if rec then return rec end
    if cache_ok and self.attempt == 1 then rec = K.cached(key) end
    rec = rec or K.read(key)
    self.recs[key] = rec
    return rec
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

local function handler(e)
    if K.is_retry(e) or K.is_abort(e) then return e end
    return debug and debug.traceback and debug.traceback(tostring(e), 2) or tostring(e)
end

function T.run(keys, fn)
    local paths = {}
    for i, k in ipairs(keys) do paths[i] = K.path(k) end
    local held <close> = queue.hold(paths)
    local attempt = 0
    while true do
        attempt = attempt + 1
        local t = setmetatable({ attempt = attempt, recs = {} }, Txn)
        local ok, res = xpcall(fn, handler, t)
        if ok then return res end
        if K.is_abort(res) then return res.reply end
        if not K.is_retry(res) then error(res, 0) end
        if attempt >= T.MAX_ATTEMPTS then return { err = errors.CONTENDED } end
        local delay = res.delay or jitter(attempt)
        if host.deadline and host.now() + delay >= host.deadline() then
            return { err = errors.CONTENDED }
        end
        if delay > 0 then host.sleep(delay) end
    end
end

return T
