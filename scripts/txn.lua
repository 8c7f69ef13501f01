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
--   txn.atomic(keys, function(t) ... return reply end)
--
-- runs a client script (eval.lua) as ONE transaction in buffered mode:
-- t:read records what it read (version, or absence) and serves the
-- script's own earlier writes; t:put and t:delete only buffer; when the
-- function returns, the commit (below) sends one multi (checks of every
-- key read, then the writes, then its participants' ops) and only then is
-- the reply released.  A second return
-- value false means "do not commit" (a script that failed).  A failed
-- check re-runs the whole function.  While it runs, txn.run called from
-- the same coroutine (a command reached through redis.call) reuses this
-- transaction, so every command works unchanged in both contexts.

local codec = require "codec"
local K = require "keyspace"
local queue = require "queue"
local errors = require "errors"
local U = require "util"
local H = require "hooks"
local Z = require "zkio"
local G = require "guard"
local O = require "owned"
local L = require "resolve"
local shared = require "shared"

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

-- deadline: the key's deadline to keep (P.kept_ttl), when ttl is its rest.
function Txn:put(rec, vtype, payload, ttl, deadline)
    K.put(rec, vtype, payload, ttl, deadline)
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
local function hold_paths(paths, script)
    if script and K.owns(paths) then host.lease_wait() end
    return queue.hold(paths)
end

-- (more: paths to hold beside the keys', none of them a key's)
local function hold_keys(keys, script, more)
    local paths = {}
    for i = 1, #keys do paths[i] = K.path(keys[i]) end
    if more then table.move(more, 1, #more, #paths + 1, paths) end
    return hold_paths(paths, script)
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

function Buf:put(rec, vtype, payload, ttl, deadline)
    local key = rec.key
    local base = self.base[key] or rec
    self.base[key] = base
    local asked = ttl or 0
    ttl = K.effective_ttl(key, asked)
    if ttl ~= asked or ttl == 0 then deadline = nil end -- (the policy moved it)
    self.writes[key] = { kind = "put", vtype = vtype, payload = payload, ttl = ttl, deadline = deadline }
    self.view[key] = {
        key = key, path = rec.path, live = true, buffered = true,
        node = base.node, vtype = vtype, value = payload, ttl = ttl,
        deadline = deadline or (ttl > 0 and host.now() + ttl or nil),
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

-- Registers a commit participant (once per transaction, however often it
-- is called): a table p whose p.plan(t, ops) appends its ops to the
-- commit's multi after the key writes and returns how many it added (a
-- commit with any is not grouped), and whose p.done(t, ok, ops, results)
-- runs after the commit was tried: ok when it committed, ops and results
-- the multi sent and its answer (nil when none was sent).  pubsub.lua's
-- publishes inside a script are one.
function Buf:on_commit(p)
    local list = self.participants
    if not list then
        list = {}
        self.participants = list
    end
    for _, q in ipairs(list) do
        if q == p then return end
    end
    list[#list + 1] = p
end

-- Records read that no key of the run names (EXEC's watched keys of
-- another database or user): the commit checks them as keys read.
function Buf:check_also(recs) self.also = recs end

-- A command run inside the script: its retries are the script's.
function Buf:nested(fn)
    local ok, res = xpcall(fn, handler, self)
    if ok then return res end
    if K.is_abort(res) and not res.whole then return res.reply end
    error(res, 0)
end

---------------------------------------------------------------------------
-- Committing a script's transaction (buffered mode)
--
-- t.base: key -> the record read from ZooKeeper (or the cache, or presumed
-- absent); t.writes: key -> {kind = "put", vtype, payload, ttl} or
-- {kind = "delete"}, the last write of each key.  One multi, keys in
-- sorted order:
--   a key read, not written     check(version), or, when it had no node,
--                               create+delete (asserts it is still absent)
--   a key deleted               delete(version); absent: asserted absent
--   a key put                   K.plan_write's ops, as K.put writes
-- Each write is itself conditional on the version read, so a written key
-- needs no check of its own.  A script that wrote nothing and read fewer
-- than two keys from ZooKeeper sends nothing (its one read was current
-- when made); with two or more keys read, or any read served by the
-- owned-key cache, the checks alone are sent, so that what it answers is
-- one current snapshot.  So does a script that failed after reading two
-- or more keys (confirm_failed).
--
-- Then the participants' ops (t:on_commit).  Returns true when committed
-- (or nothing to commit); raises K.retry when a check or write failed or a
-- write of unknown outcome did not apply (resolve.lua).

-- Before a script answers without a commit (it wrote nothing and read one
-- key, not from the cache, or it failed): the keys it presumed absent are
-- read, and it runs again if one of them exists.  A failure that may rest
-- on the owned-key cache (a WRONGTYPE from a cached type) runs again, reading.
local function confirm_presumed(t)
    local keys = {}
    for key, rec in pairs(t.base) do
        if rec.cached then K.retry(0) end
        if rec.presumed then keys[#keys + 1] = key end
    end
    if #keys == 0 then return true end
    local recs = K.read_many(keys)
    for _, rec in pairs(recs) do
        if rec.live then K.retry(0, recs) end
    end
    -- t.still: what the script itself relied on, which these reads' answers
    -- may have shown changed (eval.lua: its cached body, gone by a FLUSH
    -- elsewhere whose watch event comes before them)
    if t.still and not t.still() then K.retry(0, recs) end
    return true
end

-- Asserts that path has no node: a create and a delete.
local function absent_ops(ops, path, presumed)
    ops[#ops + 1] = { "create", path, "", 0, presumed = presumed }
    ops[#ops + 1] = { "delete", path, 0 }
end

-- Asserts that a record read is still what it read.
local function check_ops(ops, rec)
    if rec.node then
        ops[#ops + 1] = { "check", rec.path, rec.node.version }
    else
        absent_ops(ops, rec.path, rec.presumed)
    end
end

-- A failed script read two or more keys: its reads one at a time may not
-- be a snapshot (another sidecar's commit landed between two of them, so
-- the script met a state that never was, e.g. a fair lock's queue head
-- without its timeout, and raised).  Its reads are checked as a commit
-- would; it runs again when one changed.
local function confirm_failed(t)
    confirm_presumed(t)
    local recs = {}
    for _, rec in pairs(t.base) do recs[#recs + 1] = rec end
    for _, rec in ipairs(t.also or {}) do recs[#recs + 1] = rec end
    if #recs < 2 then return true end
    local parentless = {} -- absent keys whose parent is missing: still absent
    for _ = 1, #recs do
        local ops, of = {}, {}
        for _, rec in ipairs(recs) do
            if not parentless[rec] then
                check_ops(ops, rec)
                for i = #of + 1, #ops do of[i] = rec end
            end
        end
        G.ops(ops, recs, {})
        local rc, results = zk.multi(ops)
        local frc = Z.first_error(rc, results)
        if frc == zk.OK then return true end
        local missing
        for i, r in ipairs(type(results) == "table" and results or {}) do
            if r.rc == zk.NONODE and ops[i][1] == "create" and of[i] then missing = of[i] end
        end
        if not missing then
            if frc == zk.NONODE or frc == zk.NODEEXISTS or frc == zk.BADVERSION then K.retry(0) end
            if Z.unknown(frc) then K.retry() end
            Z.fail(frc, "multi")
        end
        parentless[missing] = true
    end
    return true
end

local function commit_buffered(t)
    local keys = {}
    for k in pairs(t.base) do keys[#keys + 1] = k end
    table.sort(keys)
    -- The policy's before_acquire may wait on ZooKeeper: asked first, so
    -- that the session and guards the commit is planned on are the ones it
    -- goes out under (a session replaced during the hook is then seen).
    for _, key in ipairs(keys) do
        local w = t.writes[key]
        if w and w.kind ~= "delete" then K.check_acquire(t.base[key]) end
    end
    local sid = zk.session()
    local ops, puts, dels = {}, {}, {}
    for _, key in ipairs(keys) do
        local rec, w = t.base[key], t.writes[key]
        if w or rec.sid ~= sid then K.writable(rec) end
        if not w then
            check_ops(ops, rec)
        elseif w.kind == "delete" then
            if rec.node then
                ops[#ops + 1] = { "delete", rec.path, rec.node.version }
                dels[#dels + 1] = rec
            else
                absent_ops(ops, rec.path, rec.presumed)
            end
        else
            local p = K.plan_write(rec, w.vtype, w.payload, w.ttl, sid, true) -- (clamped by Buf:put)
            if p.lifetime == "ephemeral" then G.await() end -- (its mark first)
            if w.deadline and p.ttl == w.ttl then p.deadline = w.deadline end
            for _, o in ipairs(p.ops) do ops[#ops + 1] = o end
            p.replaced = p.kind == "replace"
            p.op = #ops
            puts[#puts + 1] = p
        end
    end
    -- records read that no key of the run names (Buf:check_also)
    local also = t.also or {}
    for _, rec in ipairs(also) do
        if rec.sid ~= sid then K.writable(rec) end
        check_ops(ops, rec)
    end
    local cached, removed = {}, {}
    for _, key in ipairs(keys) do
        if t.base[key].cached then cached[#cached + 1] = t.base[key] end
    end
    for _, rec in ipairs(dels) do removed[#removed + 1] = rec end
    for _, p in ipairs(puts) do
        if p.replaced then removed[#removed + 1] = p.rec end
    end
    local from_cache = #cached > 0
    -- the participants' ops (a script's publishes: checks of its routes and
    -- one message per interested sidecar, in this multi)
    local messages, before = 0, #ops
    for _, p in ipairs(t.participants or {}) do messages = messages + p.plan(t, ops) end
    -- (a participant's checks, a publish's route, need the commit even
    -- when nothing is written: a route that moved runs the script again)
    if #puts == 0 and #dels == 0 and #keys + #also < 2 and not from_cache and #ops == before then
        return confirm_presumed(t)
    end
    -- (after that answer: the guards of another session's key read by a
    -- script that writes nothing cost nothing)
    local all = {}
    for i, key in ipairs(keys) do all[i] = t.base[key] end
    table.move(also, 1, #also, #all + 1, all)
    G.ops(ops, all, removed)
    if #ops > zk.MAX_OPS then K.abort({ err = errors.too_many_ops(zk.MAX_OPS) }, true) end
    local sent
    for _, op in ipairs(ops) do sent = shared.touched(op[2]) end
    local gv, gcz = G.now()
    local rc, results
    if #ops == 1 and ops[1][1] == "create" and not ops[1].ps then
        -- One create alone (a lock's acquire script): a plain create, which
        -- answers the node's stat when it is not grouped.
        local op = ops[1]
        local crc, _, cstat = zk.create(op[2], op[3], op[4], not K.stat_wanted(op[2]))
        rc, results = crc, { { rc = crc, stat = cstat } }
    else
        rc, results = zk.multi(ops, messages == 0)
    end
    t.commit_ops, t.commit_results = ops, results -- for the participants' done
    if rc ~= zk.OK then G.note(ops, results) else G.applied(ops, results, sid) end
    local frc = Z.first_error(rc, results)
    local stats = {}
    if frc == zk.OK then
        for i, p in ipairs(puts) do
            stats[i] = results and results[p.op] and results[p.op].stat or nil
            if stats[i] then Z.learn_offset(stats[i]) end
        end
    elseif frc == zk.NONODE or frc == zk.NODEEXISTS or frc == zk.BADVERSION then
        local presumed_wrong = false
        for i, r in ipairs(type(results) == "table" and results or {}) do
            if r.rc == zk.NONODE and ops[i][1] == "create" and not ops[i].ps then
                -- A missing parent (a fresh ensemble, or a policy path).
                Z.ensure_path(K.parent(ops[i][2]))
                K.retry(0)
            elseif r.rc == zk.NODEEXISTS and ops[i][1] == "create" then
                shared.saw(ops[i][2], true)
                presumed_wrong = presumed_wrong or ops[i].presumed == true
            end
        end
        -- a wrong presumption runs again at once, reading
        K.retry(presumed_wrong and 0 or nil)
    elseif Z.unknown(frc) then
        stats[1] = L.resolve(puts, dels, sid, gv, gcz, #dels > 0 or messages > 0)
    else
        Z.fail(frc, "multi")
    end
    local owner_sid = zk.session()
    if owner_sid ~= sid then
        -- The commit applied under a session given up meanwhile: its
        -- ephemeral nodes die with it.  A script that wrote only such keys
        -- (a renewal, an acquisition) runs again, reading, rather than
        -- answer that it holds them.  One that wrote others too, or
        -- published (its messages outlive the session), cannot run again
        -- (they would apply twice) nor answer what it returned (a fenced
        -- lock's "acquired, token n" for a node about to go): it answers
        -- TRYAGAIN once its bookkeeping is done (T.script).
        -- (a change of a live key too: another's write before the
        -- session's end may carry it on, as K.put says)
        local lasting, passing = #dels > 0 or messages > 0, false
        for _, p in ipairs(puts) do
            if p.lifetime == "ephemeral" then
                O.forget(p.rec.path)
                passing, lasting = true, lasting or p.rec.live == true
            else
                lasting = true
            end
        end
        if not lasting then K.retry(0, nil, errors.UNAVAILABLE) end
        t.lost_ephemeral = passing
    end
    for i, p in ipairs(puts) do
        local st = stats[i]
        if frc == zk.OK then shared.wrote(p.rec.path, sent, p.data, st, gv, gcz) end
        -- (an ephemeral key of a session given up is nobody's: not counted,
        -- not told to the policy as acquired)
        local ours = owner_sid == sid or p.lifetime ~= "ephemeral"
        -- A create inside a multi answers no stat: on_acquire's fencing
        -- token (czxid) is read while the key is still held, from the node
        -- when it is still ours as written (else unknown: nil).
        if ours and not st and H.has("on_acquire") and (not p.rec.live or p.replaced) then
            local rc, data, nst = zk.get(p.rec.path)
            if rc == zk.OK and nst.version == p.new_version and codec.decode(data).nonce == p.nonce then st = nst end
        end
        if ours then O.remember(p.rec.path, {
            key = p.rec.key,
            nonce = p.nonce, sid = owner_sid, lifetime = p.lifetime, vtype = p.vtype,
            payload = p.payload, ttl = p.ttl, deadline = p.deadline,
            version = st and st.version or p.new_version,
            czxid = st and st.czxid or nil,
            gv = gv, gcz = gcz,
        }) end
        if ours then O.wrote(p.rec, p, st) end
    end
    for _, p in ipairs(puts) do shared.saw(p.rec.path, true) end
    for _, rec in ipairs(dels) do O.deleted(rec.path) end
    if H.has("on_release") then
        for _, rec in ipairs(dels) do K.notify_release(rec) end
    end
    return true
end

local function after_commit(t, ok)
    for _, p in ipairs(t.participants or {}) do p.done(t, ok, t.commit_ops, t.commit_results) end
end

-- The paths of the keys a script's run t writes, nil when none.  Redis
-- lets a script name keys it did not declare (outside a cluster); its
-- write of one commits only once no other command of this sidecar holds
-- the key, as any command's (resolve.lua's judgement of a lost write rests
-- on it).
local function written_paths(t)
    if next(t.writes) == nil then return nil end
    local paths = {}
    for key in pairs(t.writes) do paths[#paths + 1] = t.base[key].path end
    return paths
end

-- (`uncounted`: a command's transaction, not a script's, for T.stats;
-- `more`: paths it reads that none of its keys names, held too: EXEC's
-- watched keys of another database or user.)
function T.script(keys, fn, uncounted, more)
    local co = coroutine.running()
    local ticket = hold_keys(keys, true, more)
    local held <close> = setmetatable({}, { __close = function() ticket:release() end })
    -- The commit of run t, after the queues of the keys it writes (its
    -- undeclared ones added, kept to the script's end): after a wait for
    -- them (another command of this sidecar on one came first), or when
    -- waiting could never end (one waits for ours: every queue given up
    -- and all taken again), the script runs again instead.
    local function commit_run(t)
        local paths = written_paths(t)
        if paths then
            local added, waited = queue.extend(ticket, paths)
            if not added then
                local all = table.move(ticket.paths, 1, #ticket.paths, 1, {})
                table.move(paths, 1, #paths, #all + 1, all)
                ticket:release()
                ticket = hold_paths(all, true)
            end
            if waited or not added then K.retry(0) end
        end
        return commit_buffered(t)
    end
    local attempt = 0
    local guard <close> = setmetatable({}, { __close = function() current[co] = nil end })
    local seed -- records read by the failed attempt for the next one
    local doubt = false -- an earlier attempt's commit may have applied
    while true do
        attempt = attempt + 1
        local t = setmetatable({ attempt = attempt, base = seed or {}, view = {}, writes = {},
                                 doubt = doubt }, Buf)
        seed = nil
        current[co] = t
        local ok, res, commit = xpcall(fn, handler, t)
        current[co] = nil
        if ok and commit == false then
            -- a failed script commits nothing, but may have failed on a
            -- key presumed absent
            local cok, cres = xpcall(confirm_failed, handler, t)
            if cok then return res end
            res = cres
        elseif ok then
            local cok, cres = xpcall(commit_run, handler, t)
            after_commit(t, cok)
            if cok then
                if not uncounted then T.stats.committed = T.stats.committed + 1 end
                if t.lost_ephemeral then return { err = errors.UNAVAILABLE } end
                return res
            end
            res = cres
            -- (a commit sent whose outcome was lost and judged not applied,
            -- or applied under a session given up: it may stand)
            if t.commit_ops and K.is_retry(res) and res.why == errors.UNAVAILABLE then doubt = true end
        end
        if K.is_retry(res) then
            if not uncounted then T.stats.retries = T.stats.retries + 1 end
            seed = res.recs
        end
        local done, reply = after_failure(res, attempt)
        if done then return reply end
    end
end

-- Whether the running script's (or EXEC's) transaction holds a write not
-- committed yet: what lists the keyspace (KEYS, SCAN, RANDOMKEY, DBSIZE)
-- reads ZooKeeper's listing, which does not show it.
function T.has_writes()
    local t = current[coroutine.running()]
    return t ~= nil and t.writes ~= nil and next(t.writes) ~= nil
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

-- Deletes keys (DEL, UNLINK, FLUSHDB's batches): one multi of versioned
-- deletes (several beyond keyspace.MULTI_MAX keys); returns how many
-- distinct keys existed.
function T.delete_keys(keys)
    local gone, ngone = {}, 0 -- deleted by an earlier attempt's multi
    return T.run(keys, function(t)
        local recs = t:read_all(keys)
        local live, seen = {}, {}
        for _, k in ipairs(keys) do
            local rec = recs[k]
            if rec.live and not seen[k] and not gone[k] then
                seen[k] = true
                live[#live + 1] = rec
            end
        end
        if #live > 0 then
            t:delete(live, function(recs_done)
                for _, rec in ipairs(recs_done) do
                    gone[rec.key] = true
                    ngone = ngone + 1
                end
            end)
        end
        return ngone
    end)
end

-- A command that writes several keys (MSET, RENAME, SMOVE...): one
-- transaction committed as one multi, the way a script's is (buffered
-- mode), so that every sidecar sees all of its writes or none.  Inside a
-- script it is part of the script's transaction.  A reply that is an
-- error commits nothing.
function T.atomic(keys, fn)
    local outer = current[coroutine.running()]
    if outer then return outer:nested(fn) end
    return T.script(keys, function(t)
        local reply = fn(t)
        return reply, not (type(reply) == "table" and reply.err ~= nil)
    end, true)
end

return T
