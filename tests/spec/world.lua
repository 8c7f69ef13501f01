-- world.lua — what the specs share: the replies they expect and the world
-- they run in (helper.lua makes it requirable).
--
--   local S = require "world"
--   local null, OK, E = S.null, S.OK, S.E
--   local W, a, b = S.world(2)        -- a fresh model ensemble, two sidecars
--   assert.same(OK, a:call("SET", "k", "v"))
--
-- The world is tests/spec/zkmodel.lua's: one in-memory ZooKeeper whose
-- defaults answer as the real bridge does (a grouped create answers no
-- stat; a multi's results are a table, empty when it answered none), a
-- fake clock, and sidecars each loading scripts/ as the C host would.

local zkmodel = require "zkmodel"

local S = {}

S.model = zkmodel
S.codes = zkmodel.codes

---------------------------------------------------------------------------
-- Replies, as the scripts return them to the gateway (sidecar/lua_host.h):
-- a null, a status, an error, a double.

S.null = zkmodel.null
S.OK = { ok = "OK" }
function S.E(text) return { err = text } end
function S.D(x) return { double = x } end

-- Redis's texts for the errors many commands share.
S.WRONGTYPE = S.E("WRONGTYPE Operation against a key holding the wrong kind of value")
S.SYNTAX = S.E("ERR syntax error")
S.NOT_INT = S.E("ERR value is not an integer or out of range")
S.NOT_FLOAT = S.E("ERR value is not a valid float")
S.POSITIVE = S.E("ERR value is out of range, must be positive")
S.RANGE = S.E("ERR min or max is not a float")
S.UNAVAILABLE = S.E("TRYAGAIN ZooKeeper unavailable")

-- Whether reply r is a -TRYAGAIN (an outcome unknown, or try again).
function S.tryagain(r) return type(r) == "table" and type(r.err) == "string" and r.err:find("^TRYAGAIN") ~= nil end

-- Reply r as text, for a message: NULL, an error's or a status's text, an
-- array's elements.
function S.show(r)
    if r == S.null then return "NULL" end
    if type(r) == "table" then
        if r.err or r.ok then return r.err or r.ok end
        local t = {}
        for i, v in ipairs(r) do t[i] = S.show(v) end
        return "{" .. table.concat(t, ",") .. "}"
    end
    return tostring(r)
end

-- What a renewal's answer r (just now) must mean for a competitor, in a
-- sweep of renewals around a lease's end: o.yes (held) keeps it out for
-- the next o.keep_ms (o.taken(i) tried every o.step ms: true when it got
-- in), o.no lets it in within two seconds (o.got(i), every 100 ms), and
-- anything else is a -TRYAGAIN.  What went wrong goes into bad, tagged.
function S.renewal_told(W, bad, tag, r, o)
    local t1 = W.now
    if r == o.yes then
        for i = 1, o.keep_ms // o.step do
            W:advance(o.step)
            if o.taken(i) then bad[#bad + 1] = tag .. ": renewed, taken at +" .. (W.now - t1) return end
        end
    elseif r == o.no then
        for i = 1, 20 do
            W:advance(100)
            if o.got(i) then return end
        end
        bad[#bad + 1] = tag .. ": not renewed, never free"
    elseif not S.tryagain(r) then
        bad[#bad + 1] = tag .. ": " .. S.show(r)
    end
end

---------------------------------------------------------------------------
-- The world

-- A fresh model ensemble with its sidecars: returns the world, then each
-- sidecar in order.  sidecars: how many, with the default options, or a
-- list of each one's options (World:sidecar's: config, mono_base,
-- wall_base, connect, grouped_create_stat).  world_opts: zkmodel.world's
-- (latency, leader_offset).
--
--   S.world(0)                                  -- no sidecar yet
--   S.world({ { config = { max_key_len = 8 } } })
--   S.world({ {}, { mono_base = 987654321 } })
function S.world(sidecars, world_opts)
    local W = zkmodel.world(world_opts)
    local list = sidecars
    if type(sidecars) == "number" then
        list = {}
        for i = 1, sidecars do list[i] = {} end
    end
    local out = {}
    for i, opts in ipairs(list) do out[i] = W:sidecar(opts) end
    return W, table.unpack(out, 1, #list)
end

-- How many operations of `kind` (W.ops: "multi", "sync", ...) the world
-- saw after the first `from`.
function S.count_ops(W, kind, from)
    local n = 0
    for i = (from or 0) + 1, #W.ops do if W.ops[i].kind == kind then n = n + 1 end end
    return n
end

-- Each sidecar writes a key of its own (its guard and the leader clock
-- known), then 100 ms pass (the background upkeep that follows is done).
function S.warm(W, ...)
    for i, sc in ipairs({ ... }) do sc:call("SET", "warm" .. i, "x") end
    W:advance(100)
end

-- A world of n sidecars (default 2), each having run every script of
-- `bodies` once by EVAL with `...` (numkeys, keys, args): the shared
-- script cache's background upkeep is done before a test arms a fault.
-- Answers W and the sidecars.
function S.scripts_warmed(n, bodies, ...)
    local out = table.pack(S.world(n or 2))
    for _, body in ipairs(bodies) do
        for i = 2, out.n do out[i]:call("EVAL", body, ...) end
    end
    return table.unpack(out, 1, out.n)
end

-- How many pub/sub messages on channel ch sidecar sc pushed to client.
function S.messages(sc, client, ch)
    local n = 0
    for _, f in ipairs(sc.pushed[client] or {}) do
        if f.push[1] == "message" and f.push[2] == ch then n = n + 1 end
    end
    return n
end

-- A world of n sidecars, each warmed (S.warm).  Answers W and the sidecars.
function S.warm_world(n)
    local out = table.pack(S.world(n))
    S.warm(table.unpack(out, 1, out.n))
    return table.unpack(out, 1, out.n)
end

-- A seeded PRNG of the fuzz specs' own (xorshift32): never math.random,
-- which the sidecars' sandbox shares.  r.int(lo, hi), r.pick(list),
-- r.chance(p).  start: added to the seed's hash (1 unless given; a spec
-- whose seeds were found with another keeps it: lock_fuzz's 12345).
function S.prng(seed, start)
    local x = (seed * 2654435761 + (start or 1)) & 0xffffffff
    if x == 0 then x = 1 end
    local r = {}
    function r.next()
        x = x ~ ((x << 13) & 0xffffffff)
        x = x ~ (x >> 17)
        x = x ~ ((x << 5) & 0xffffffff)
        return x
    end
    function r.int(lo, hi) return lo + r.next() % (hi - lo + 1) end
    function r.pick(t) return t[r.int(1, #t)] end
    function r.chance(p) return r.next() % 1000 < p * 1000 end
    return r
end

-- Whether an operation recorded in W.ops is the shared script cache's own
-- upkeep (script_cache.lua: an EVAL makes its script known to the other
-- sidecars in the background, the first time), not a command's.
function S.script_cache_op(op)
    local p = op.path or ""
    if op.kind == "multi" then p = p:match("^%a+ ([^,]*)") or p end -- its first op's
    return p == "/zkresp/s" or p:sub(1, 10) == "/zkresp/s/"
end

-- A module of scripts/ as a sidecar loads it, for specs of plain functions
-- (codec, util): the sidecar never connects, so nothing runs.
function S.module(name)
    return zkmodel.world():sidecar({ connect = false }).require(name)
end

-- A key holding a hash, written into the tree as another sidecar with hash
-- support would.
function S.make_hash(W, sc, key)
    local codec = sc.require("codec")
    W:raw_create(sc:path(key), codec.encode({ type = codec.HASH, nonce = string.rep("h", 16),
                                              payload = "field" }))
end

-- A policy file holding text, for a sidecar's config.policy; S.rewrite
-- changes it (then Sidecar:reload()).
function S.rewrite(file, text)
    local f = assert(io.open(file, "w"))
    f:write(text)
    f:close()
end

function S.policy_file(text)
    local file = os.tmpname()
    S.rewrite(file, text)
    return file
end

-- A policy that records every lock notification in its sidecar's
-- env.__events: {ev = "acquire" | "release" | "expire" | "lost", key, and
-- info's fields, its client as the client's id}.
S.RECORDER = [[
    local log = {}
    _G.__events = log
    local function rec(ev)
        return function(key, info)
            local e = { ev = ev, key = key }
            for k, v in pairs(info) do if k ~= "client" then e[k] = v end end
            e.client = info.client and info.client.id
            log[#log + 1] = e
        end
    end
    return { on_acquire = rec("acquire"), on_release = rec("release"),
             on_expire = rec("expire"), on_lost = rec("lost") }
]]

-- A world of n sidecars whose policy is S.RECORDER (or the policy source
-- `policy`, a recorder of another shape): W and the sidecars.
function S.recording_world(n, policy)
    local file = S.policy_file(policy or S.RECORDER)
    local specs = {}
    for i = 1, n do specs[i] = { config = { policy = file } } end
    local got = table.pack(S.world(specs))
    os.remove(file)
    return table.unpack(got, 1, got.n)
end

-- The path of an example policy of scripts/examples/.
function S.example(name)
    return zkmodel.SCRIPTS .. "/examples/" .. name .. ".lua"
end

-- Sidecar sc's server (in world W) lags: its reads under `prefix` answer
-- the tree as it was now (a follower behind the leader); its writes go
-- through.  A read still goes to the server (it waits for the connection
-- as the bridge's does) and only its answer is the old tree's.  With
-- catch_up, a sync or a write the server answered ends the lag (it has
-- applied what came before it); a lost one (a connection loss, a time out,
-- an expired session: never sent, or never answered) does not.
function S.lag(W, sc, prefix, catch_up)
    local frozen = {}
    local unanswered = { [S.codes.CONNECTIONLOSS] = true, [S.codes.TIMEOUT] = true,
                         [S.codes.SESSIONEXPIRED] = true }
    if catch_up then
        for _, op in ipairs({ "sync", "set", "multi", "delete", "create" }) do
            local f = sc.zk[op]
            sc.zk[op] = function(...)
                local r = table.pack(f(...))
                if not unanswered[r[1]] then frozen = {} end
                return table.unpack(r, 1, r.n)
            end
        end
    end
    for path, n in pairs(W.nodes) do
        if path:sub(1, #prefix) == prefix then
            local kids, st = {}, {}
            for name in pairs(n.children) do kids[#kids + 1] = name end
            table.sort(kids)
            for k, v in pairs(n.stat) do st[k] = v end
            frozen[path] = { data = n.data, stat = st, kids = kids }
        end
    end
    local answered = { [S.codes.OK] = true, [S.codes.NONODE] = true }
    -- read, its answer from the old tree (as(f): a node's, NONODE: none)
    local function lagging(read, as)
        return function(path, watch)
            local r = table.pack(read(path, watch))
            if path:sub(1, #prefix) ~= prefix or not next(frozen) or not answered[r[1]] then
                return table.unpack(r, 1, r.n)
            end
            local f = frozen[path]
            if not f then return S.codes.NONODE end
            return as(f)
        end
    end
    sc.zk.get = lagging(sc.zk.get, function(f) return S.codes.OK, f.data, f.stat end)
    sc.zk.exists = lagging(sc.zk.exists, function(f) return S.codes.OK, f.stat end)
    local children = sc.zk.children
    sc.zk.children = function(path, watch)
        local r = table.pack(children(path, watch))
        local f = frozen[path]
        if f and answered[r[1]] then return S.codes.OK, f.kids, f.stat end
        return table.unpack(r, 1, r.n)
    end
end

-- Lock and clock helpers the leader-clock specs share (clock_fuzz,
-- clock_modes_fuzz, review_clocks): an integer reply (a fencing token), a
-- field of a reply map (LOCK.INFO's entries), the LOCK.INFO holder entry
-- of `owner`, and a sidecar that learns the current leader's clock (a
-- write of its own, with a stat).
local luassert = require "luassert"

function S.integer(x, what) luassert.equal("integer", math.type(x), what or S.show(x)) end

function S.map_field(entry, name)
    local m = entry.map
    for i = 1, #m, 2 do if m[i] == name then return m[i + 1] end end
end

function S.lock_holder(sc, key, owner)
    for _, h in ipairs(sc:call("LOCK.INFO", key).map[2]) do
        if S.map_field(h, "owner") == owner then return h end
    end
end

function S.learn_clock(sc, tag)
    luassert.same(S.OK, sc:call("SET", "learn:" .. tag, "1"))
    luassert.same(S.OK, sc:call("SET", "learn:" .. tag, "2"))
end

return S
