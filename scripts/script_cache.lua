-- script_cache.lua — the script cache of EVAL, EVALSHA and SCRIPT, one for
-- every sidecar: each script is a persistent node <root>/s/<sha1> holding
-- its body, and each sidecar keeps what it has compiled in a local cache
-- that it trusts only while a watch on <root>/s says nothing was flushed.
--
--   SCRIPT LOAD   create <root>/s/<sha>  (NODEEXISTS: known already)
--   EVAL          local; the first time this sidecar sees the sha, a
--                 background multi {check <root>/s at the version known
--                 when the EVAL ran (read first if unknown), create
--                 <root>/s/<sha>}
--   EVALSHA       local hit, else one read of <root>/s/<sha>
--   SCRIPT FLUSH  set <root>/s, delete every child, set <root>/s: each set
--                 bumps the generation (the node's version) and fires the
--                 watch every sidecar keeps on <root>/s, which drops its
--                 local cache
--
-- Why a FLUSH is complete: an EVAL's background create checks a version
-- read before the EVAL answered, so a create that lands after the FLUSH's
-- first set fails, and one that landed before is listed and deleted; a
-- sidecar that read a child before it was deleted tagged it with a version
-- older than the FLUSH's last set, so it drops it when it learns that one
-- (the watch, or a read of <root>/s after a new session).  A lost
-- background create costs a later NOSCRIPT, which clients answer with EVAL.
--
-- Bounds: at most --script-cache-max scripts in <root>/s (a LOAD or EVAL
-- finding it full keeps its script in this sidecar only), no script larger
-- than ZooKeeper's request limit there (the same), and at most
-- EVAL_LOCAL_MAX scripts that came from EVAL kept locally, the least
-- recently used dropped first (Redis 7.4 evicts EVAL scripts the same way
-- and never SCRIPT LOADed ones).

local Z = require "zkio"
local S = require "signal"
local sha1 = require "sha1"
local errors = require "errors"

local C = {}

C.EVAL_LOCAL_MAX = 500
C.NODE_OVERHEAD = 1024 -- room for the request around a script's body

local entries = {}          -- sha -> { body, fn, kind = "load"|"eval"|"shared", used }
local by_body = {}          -- body -> its entry, once its sha was computed
                            -- from that body here (C.lookup_body)
local nevals, tick = 0, 0   -- entries of kind "eval"; the LRU clock
local published = {}        -- sha -> true: its node exists in this generation
local pending = {}          -- sha -> true: a background create in flight
local version = nil         -- <root>/s's version as last read (nil: unknown)
local gen = nil             -- "<czxid>:<version>" of that read
local verified = false      -- a watch on <root>/s is set and has not fired
local epoch = 0             -- bumped whenever the local cache is dropped

function C.dir() return Z.root_dir("s") end

function C.max_scripts()
    local n = host.config and tonumber(host.config.script_cache_max)
    return (n and n > 0) and n or 1000
end

-- The largest body kept in ZooKeeper.
function C.max_size()
    local limit = zk.max_request and zk.max_request() or 1048576
    return limit - C.NODE_OVERHEAD
end

-- Forgets every local script (a FLUSH here or elsewhere).
function C.drop_all()
    entries, by_body, published, nevals = {}, {}, {}, 0
    epoch = epoch + 1
end

---------------------------------------------------------------------------
-- The local cache

function C.get(sha)
    local e = entries[sha]
    if e then
        tick = tick + 1
        e.used = tick
    end
    return e
end

-- The entry of the script `body` (as C.get), or nil; and its sha.  A body
-- hashed here before is found without its SHA-1 again (computed in Lua:
-- 11,700 VM instructions for a 90-byte script, on every EVAL); a body read
-- from ZooKeeper is indexed once its SHA-1 was computed and matched.
function C.lookup_body(body)
    local e = by_body[body]
    if e then return C.get(e.sha), e.sha end
    local sha = sha1.hex(body)
    e = C.get(sha)
    if e and e.body == body then by_body[body] = e end
    return e, sha
end

local function evict_eval()
    local oldest
    for _, e in pairs(entries) do
        if e.kind == "eval" and (not oldest or e.used < oldest.used) then oldest = e end
    end
    if oldest then
        entries[oldest.sha] = nil
        by_body[oldest.body] = nil
        nevals = nevals - 1
    end
end

-- Keeps sha's compiled script; kind "load" (SCRIPT LOAD), "eval" (EVAL:
-- evicted least recently used first) or "shared" (read from <root>/s).
-- token: C.fetch's, when the body was read from ZooKeeper: nothing is kept
-- when the cache was dropped meanwhile.  Returns the entry.
function C.put(sha, body, fn, kind, token)
    local e = entries[sha]
    if token and token ~= epoch then return { sha = sha, body = body, fn = fn, kind = kind } end
    tick = tick + 1
    if e then
        if e.kind == "eval" and kind ~= "eval" then
            e.kind = kind
            nevals = nevals - 1
        end
        e.used = tick
        return e
    end
    e = { sha = sha, body = body, fn = fn, kind = kind, used = tick }
    entries[sha] = e
    if kind ~= "shared" then by_body[body] = e end -- (hashed here: C.lookup_body)
    if kind == "eval" then
        nevals = nevals + 1
        if nevals > C.EVAL_LOCAL_MAX then evict_eval() end
    end
    return e
end

-- sha's entry, without counting a use.
function C.peek(sha) return entries[sha] end

function C.count() local n = 0 for _ in pairs(entries) do n = n + 1 end return n end

---------------------------------------------------------------------------
-- The generation

-- Makes the local cache trustworthy: unless the watch on <root>/s is set
-- and has not fired, reads <root>/s (setting the watch) and drops the
-- local cache if its generation changed.  Without a connection it trusts
-- the local cache, as EVAL trusts its own body (a FLUSH made elsewhere
-- meanwhile reaches this sidecar when it reconnects).
function C.verify()
    if verified then return end
    local _, connected = zk.session()
    if not connected then return end
    local start = epoch
    local d = C.dir()
    local now, v
    for _ = 1, Z.READ_TRIES do
        local rc, _, stat = zk.get(d, true)
        if rc == zk.OK then
            now, v = stat.czxid .. ":" .. stat.version, stat.version
            break
        elseif rc == zk.NONODE then
            Z.ensure_path(d)
        elseif not Z.unknown(rc) then
            Z.fail(rc, "get " .. d)
        end
    end
    if not now then S.abort({ err = errors.UNAVAILABLE }) end
    if epoch ~= start then return end -- the watch fired meanwhile: ask again next time
    if gen and now ~= gen then C.drop_all() end
    gen, version, verified = now, v, true
end

-- Makes sure every FLUSH that ended before the running command arrived has
-- reached the local cache (SCRIPT EXISTS, which runs no script whose
-- ZooKeeper traffic would tell): one read of <root>/s, whose answer comes
-- after the watch event of any change made before it.
function C.catch_up()
    local _, connected = zk.session()
    if verified and connected then Z.exists(C.dir()) end
    C.verify()
end

-- In the background (outside any command).
local function verify_later()
    host.spawn(function() pcall(C.verify) end)
end

-- A watch event; true when it was ours.
function C.on_watch(_, path)
    if path ~= C.dir() then return false end
    verified, version = false, nil
    C.drop_all()
    verify_later()
    return true
end

-- Session events (in the hook's coroutine): a new session has lost the
-- watch; on connecting, the generation is learnt before EVALs need it.
-- C.session_changed runs first of all the modules' handling (zkresp.lua),
-- before anything waits: until then an EVALSHA would trust the cache on
-- the word of a watch that went with the old session.
function C.session_changed(event)
    if event == "new" or event == "lost" then verified, version = false, nil end
end
function C.on_session(event)
    C.session_changed(event)
    if event == "new" or event == "connected" then pcall(C.verify) end
end

---------------------------------------------------------------------------
-- Reading and writing <root>/s

-- sha's body from ZooKeeper, or nil; and the token for C.put.
function C.fetch(sha)
    local token = epoch
    local rc, body = Z.get(C.dir() .. "/" .. sha)
    if rc ~= zk.OK then return nil end
    return body, token
end

-- Whether <root>/s has room for one more script (creating <root>/s when
-- missing); its stat.
local function room()
    local d = C.dir()
    local rc, stat = Z.exists(d)
    if rc == zk.NONODE then
        Z.ensure_path(d)
        rc, stat = Z.exists(d)
    end
    return rc == zk.OK and stat.numChildren < C.max_scripts(), stat
end

-- SCRIPT LOAD: makes sha known to every sidecar.  Returns true, or false
-- when it stays in this sidecar (too big, or the shared cache full);
-- aborts with TRYAGAIN when ZooKeeper is away, as every write does.
function C.publish(sha, body)
    if published[sha] then
        -- created in this generation as far as this sidecar knows: a FLUSH
        -- that ended before this LOAD came may not have reached it yet (its
        -- watch event on the way, held while cut off), so look (as SCRIPT
        -- EXISTS); cut off, create it as the first time (-TRYAGAIN)
        C.catch_up()
        local _, connected = zk.session()
        if published[sha] and connected then return true end
    end
    if #body > C.max_size() then return false end
    local path = C.dir() .. "/" .. sha
    local start = epoch
    if not room() then
        -- full: known already counts
        if Z.exists(path) == zk.OK then published[sha] = epoch == start or nil return true end
        return false
    end
    for _ = 1, Z.READ_TRIES do
        local rc = zk.create(path, body, 0)
        if rc == zk.OK or rc == zk.NODEEXISTS then
            if epoch == start then published[sha] = true end
            return true
        end
        if rc == zk.NONODE then
            Z.ensure_path(C.dir())
        elseif not Z.unknown(rc) then
            Z.fail(rc, "create " .. path)
        end
    end
    S.abort({ err = errors.UNAVAILABLE })
end

-- EVAL: makes sha known to every sidecar in the background, once, and only
-- when this sidecar knows the generation the EVAL runs in (see the top):
-- read first when unknown (a new session, a FLUSH seen, the first read of
-- a session not answered yet); without ZooKeeper the script stays here.
function C.publish_later(sha, body)
    if published[sha] or pending[sha] or #body > C.max_size() then return end
    if not version then pcall(C.verify) end
    if not version then
        verify_later()
        return
    end
    local v, start = version, epoch
    pending[sha] = true
    host.spawn(function()
        pcall(function()
            local _, connected = zk.session()
            if not connected or not room() then return end
            local rc, results = zk.multi({ { "check", C.dir(), v }, { "create", C.dir() .. "/" .. sha, body, 0 } })
            local frc = Z.first_error(rc, results)
            if (frc == zk.OK or frc == zk.NODEEXISTS) and epoch == start then published[sha] = true end
        end)
        pending[sha] = nil
    end)
end

-- One write of SCRIPT FLUSH, asked again when the connection drops under it.
local function retried(what, fn, ok_codes)
    for _ = 1, Z.READ_TRIES do
        local rc = fn()
        if ok_codes[rc] then return rc end
        if not Z.unknown(rc) then Z.fail(rc, what) end
    end
    S.abort({ err = errors.UNAVAILABLE })
end

-- SCRIPT FLUSH: every sidecar's cache (see the top).
function C.flush()
    local d = C.dir()
    local function bump()
        local rc = retried("set " .. d, function() return zk.set(d, "", -1) end,
                           { [zk.OK] = true, [zk.NONODE] = true })
        if rc == zk.NONODE then Z.ensure_path(d) end
    end
    bump()
    for _, name in ipairs(Z.children(d)) do
        local path = d .. "/" .. name
        retried("delete " .. path, function() return zk.delete(path, -1) end,
                { [zk.OK] = true, [zk.NONODE] = true })
    end
    bump()
    C.drop_all()
end

return C
