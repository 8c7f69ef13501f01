-- clock_keys_fuzz_spec: string keys and the lock scripts clients run on
-- them (redis-py's Lock, Redisson's RLock) when clocks misbehave: leader
-- changes to servers whose clocks are off (W:new_leader), wall clocks
-- stepped (a sidecar's wall_base), lost replies (applied) and sessions
-- expired.  The native-lock version is clock_fuzz_spec.
--
-- A key's TTL is a deadline another sidecar maps from its node's mtime, by
-- the clock of the leader that stamped it (keyspace.lua's K.record,
-- zkio.lua's Z.local_time); a leader it never learned is read "late, never
-- early" (README: as if the node was written when read).
local S = require "world"
local RS = require "redisson_scripts"
local null, OK = S.null, S.OK

local SKEW = 60000

-- redis-py's Lock scripts (redis/lock.py)
local PY_RELEASE = "local token = redis.call('get', KEYS[1]) " ..
    "if not token or token ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1"
local PY_EXTEND = "local token = redis.call('get', KEYS[1]) " ..
    "if not token or token ~= ARGV[1] then return 0 end " ..
    "local expiration = redis.call('pttl', KEYS[1]) if not expiration then expiration = 0 end " ..
    "if expiration < 0 then return 0 end " ..
    "local newttl = ARGV[2] if ARGV[3] == '0' then newttl = ARGV[2] + expiration end " ..
    "redis.call('pexpire', KEYS[1], newttl) return 1"

-- The leader changes twice while sidecar b writes nothing: a's write of
-- the key under the first new leader (E1, same clock) teaches a that
-- leader's clock, b never learns it; the second new leader (E2) is `skew`
-- off.  b's read of the key (mzxid in E1) makes b learn E2's clock only.
local function two_unseen_changes(skew, px)
    local W, a, b = S.warm_world(2)
    W:new_leader(0)
    W:advance(1000)
    assert.same(OK, a:call("SET", "k", "t1", "NX", "PX", tostring(px or 20000)))
    W:new_leader(skew)
    W:advance(1000)
    return W, a, b
end

describe("a key written under a leader another sidecar never learned", function()
    -- Before (keyspace.lua's K.record mapped the mtime by Z.local_time
    -- without the node's mtime): b mapped E1's mtime by E2's offset, the
    -- deadline `skew` early or late:
    --   * E2 60 s ahead: PTTL through b answered 0 for a key 19 s from its
    --     TTL (a client of redis-py extends by PTTL + n: it writes n);
    --   * E2 60 s behind: b's deadline 60 s late, which SET KEEPTTL keeps.
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("answers a PTTL within its TTL, not short of it, E2 %+d s"):format(skew // 1000), function()
            local W, a, b = two_unseen_changes(skew)
            local left = b:call("PTTL", "k")
            assert.is_true(left >= 18900 and left <= 20000, "PTTL " .. S.show(left))
            assert.is_true(b:call("TTL", "k") >= 19, "TTL")
        end)
    end

    -- Before: with E2 60 s ahead, SET KEEPTTL through b answered OK and
    -- wrote the key with a deadline already past: b (its new owner)
    -- deleted it at once, 18 s before its TTL (GET nil, a lock key freed
    -- under its holder: SET NX of another client succeeds).  With E2 60 s
    -- behind it kept the key 60 s past its TTL (three TTLs late).
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("SET KEEPTTL through it keeps the key to its TTL, E2 %+d s"):format(skew // 1000), function()
            local W, a, b = two_unseen_changes(skew)
            assert.same(OK, b:call("SET", "k", "t1", "XX", "KEEPTTL"))
            W:advance(1000)
            assert.equal("t1", a:call("GET", "k"))
            assert.equal(null, a:call("SET", "k", "t2", "NX", "PX", "1000"))
            W:advance(16500) -- 19.5 s after the SET PX
            assert.equal("t1", a:call("GET", "k"))
            assert.equal("t1", b:call("GET", "k"))
            W:advance(3000) -- late by the time since the write (1 s), and a reply
            assert.equal(null, a:call("GET", "k"))
            assert.same(OK, a:call("SET", "k", "t2", "NX", "PX", "1000"))
        end)
    end

    -- Before (E2 60 s ahead): redis-py's extend through b read PTTL 0 and
    -- wrote PEXPIRE 0 + 5000: the lock, extended to 24 s after its SET
    -- for its holder, ended at 7 s, and another client's SET NX succeeded
    -- at 8 s (two holders).
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("redis-py's extend through it adds to the TTL left, E2 %+d s"):format(skew // 1000), function()
            local W, a, b = two_unseen_changes(skew)
            assert.equal(1, b:call("EVAL", PY_EXTEND, "1", "k", "t1", "5000", "0"))
            W:advance(6000) -- 7 s after the SET PX
            assert.equal(null, a:call("SET", "k", "t2", "NX", "PX", "1000"))
            assert.equal("t1", a:call("GET", "k"))
            local left = a:call("PTTL", "k")
            assert.is_true(left >= 17000 and left <= 25000, "PTTL " .. S.show(left))
        end)
    end

    -- Before (found by seed 18's sweep): Redisson's RLock hash renewed
    -- through another sidecar than its holder's is re-created persistent
    -- with its TTL (README: a collection written by two sidecars), and a
    -- persistent node lives for a reader until its deadline on the
    -- reader's clock.  c, which never learned E1, mapped the hash's mtime
    -- by E2's clock (60 s ahead): the lock, 29 s from its TTL, was over
    -- for c, and another client's lock script through c answered nil
    -- (acquired) while the first held: two holders.
    it("Redisson's lock renewed through a second sidecar is not taken through a third, E2 60 s ahead", function()
        local W, a, b, c = S.warm_world(3)
        W:new_leader(0)
        W:advance(1000)
        assert.equal(null, a:call("EVAL", RS.LOCK, "1", "r", "30000", "id:1"))
        assert.equal(1, b:call("EVAL", RS.RENEW, "1", "r", "30000", "id:1"))
        W:new_leader(SKEW)
        W:advance(1000)
        local left = c:call("EVAL", RS.LOCK, "1", "r", "30000", "id:2")
        assert.is_true(math.type(left) == "integer" and left >= 28000 and left <= 30000, S.show(left))
        W:advance(28500)
        assert.is_true(math.type(c:call("EVAL", RS.LOCK, "1", "r", "30000", "id:2")) == "integer")
        W:advance(3000) -- late by the time since b's write (1 s), and a reply
        assert.equal(null, c:call("EVAL", RS.LOCK, "1", "r", "30000", "id:2"))
    end)

    -- The same for OBJECT IDLETIME: seconds since the last write, not the
    -- leaders' difference (before: 61 with E2 60 s ahead).
    it("answers OBJECT IDLETIME as the time since the write, E2 60 s ahead", function()
        local W, a, b = two_unseen_changes(SKEW)
        local idle = b:call("OBJECT", "IDLETIME", "k")
        assert.is_true(idle >= 0 and idle <= 2, "IDLETIME " .. S.show(idle))
    end)
end)

describe("a lock key across one leader change and a stepped wall clock", function()
    -- Passing cases: each sidecar learns a new leader at once from the
    -- node's mzxid; a wall step moves no relative TTL.
    for _, skew in ipairs({ SKEW, -SKEW }) do
        it(("a PEXPIRE through another sidecar ends at its own TTL, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            assert.same(OK, a:call("SET", "k", "t1", "NX", "PX", "10000"))
            W:new_leader(skew)
            W:advance(1000)
            assert.equal(1, b:call("PEXPIRE", "k", "20000"))
            W:advance(19500)
            assert.equal(null, c:call("SET", "k", "t2", "NX", "PX", "1000"))
            assert.equal("t1", c:call("GET", "k"))
            W:advance(1000)
            assert.same(OK, c:call("SET", "k", "t2", "NX", "PX", "1000"))
        end)
        it(("Redisson's watchdog renewal through another sidecar, new leader %+d s"):format(skew // 1000), function()
            local W, a, b, c = S.warm_world(3)
            assert.equal(null, a:call("EVAL", RS.LOCK, "1", "r", "30000", "id:1"))
            W:new_leader(skew)
            W:advance(10000)
            assert.equal(1, b:call("EVAL", RS.RENEW, "1", "r", "30000", "id:1"))
            W:advance(29500)
            local left = c:call("EVAL", RS.LOCK, "1", "r", "30000", "id:2")
            assert.is_true(math.type(left) == "integer" and left >= 0 and left <= 30000, S.show(left))
            W:advance(1000)
            assert.equal(null, c:call("EVAL", RS.LOCK, "1", "r", "30000", "id:2"))
        end)
    end
    it("GETEX PX and SET PX keep their relative TTL when the wall clock steps back an hour", function()
        local W, a, b = S.warm_world(2)
        assert.same(OK, a:call("SET", "k", "t1", "PX", "10000"))
        a.wall_base = a.wall_base - 3600000
        b.wall_base = b.wall_base + 3600000
        assert.equal("t1", b:call("GETEX", "k", "PX", "20000"))
        W:advance(19500)
        assert.equal("t1", a:call("GET", "k"))
        local left = a:call("PTTL", "k")
        assert.is_true(left >= 0 and left <= 600, S.show(left))
        W:advance(1000)
        assert.equal(null, a:call("GET", "k"))
    end)
end)

---------------------------------------------------------------------------
-- Seeded fuzz: lock keys over three sidecars and six clients.  L1, L2:
-- redis-py style (SET NX PX token; extend by script, adding or replacing;
-- PEXPIRE, GETEX PX, SET XX KEEPTTL; release by script); R1: Redisson's
-- RLock (lock, watchdog renewal, unlock scripts).  Clients send through
-- their home sidecar or any other.  Steps: leader changes (clocks off by
-- seconds to a minute, both ways), wall clocks stepped an hour, sessions
-- expired, lost replies (applied), time passing.
--
-- A client holds from its acquire's OK until the earliest of: the TTL of
-- its last acquire or extension counted from that request's sending (an
-- additive extend: the old end plus n), its release's sending, an answer
-- it cannot read (-TRYAGAIN, an error: outcome unknown) to a request on
-- it, the end of the session owning the key's node.  Checked after each
-- reply: no two holders; a holder's GET answers its token; a holder's
-- PTTL is neither negative nor above the TTL it last set, nor short of
-- its hold; a token read through any sidecar is not older than its last
-- possible end plus one TTL (never kept more than one TTL late); at the
-- end, every client released and every TTL passed, no key is left.

local PY_KEYS = { "L1", "L2" }
local RS_KEY = "R1"
local SKEWS = { 60000, -60000, 2000, -2000, 20000, -20000 }
local PXS = { 1000, 3000, 8000, 20000 }

local function fuzz(seed, steps)
    local R = S.prng(seed)
    local W, a, b, c = S.world(3)
    S.warm(W, a, b, c)
    local scs = { a, b, c }
    local log, failure = {}, nil
    local function note(s) log[#log + 1] = string.format("%7d %s", W.now, s) end
    local function fail(m) failure = failure or (("at %d: %s"):format(W.now, m)) end
    local clients = {}
    for i = 1, 6 do clients[i] = { id = i, home = (i - 1) % 3 + 1, n = 0 } end
    local holds = {}   -- key -> the current hold {cl, key, token, to, maxttl} or nil
    local tokens = {}  -- token -> {ends = latest possible end, ttl = longest TTL}
    local function may_end(tok, t, ttl)
        local e = tokens[tok]
        if not e then e = { ends = t, ttl = ttl }; tokens[tok] = e end
        if t > e.ends then e.ends = t end
        if ttl > e.ttl then e.ttl = ttl end
    end
    local function drop(cl)
        local h = cl.hold
        if h and holds[h.key] == h then holds[h.key] = nil end
        cl.hold = nil
    end
    local function held(cl) return cl.hold and cl.hold.to > W.now and cl.hold or nil end
    local function acquired(cl, key, tok, t0, px)
        local o = holds[key]
        if o and o.cl ~= cl and o.to > W.now then
            fail(("two holders of %s: c%d to %d, c%d from %d"):format(key, o.cl.id, o.to, cl.id, W.now))
        end
        cl.hold = { cl = cl, key = key, token = tok, to = t0 + px, maxttl = px }
        holds[key] = cl.hold
    end
    local function path(key) return "/zkresp/k/" .. key end
    local function step_client(cl)
        local via = R.chance(0.5) and R.int(1, 3) or cl.home
        local sc = scs[via]
        local px = R.pick(PXS)
        if R.chance(0.1) then
            sc:fail_next({ op = R.pick({ "set", "multi", "create", "delete" }), when = "after" })
        end
        local t0 = W.now
        local h = held(cl)
        if h and h.key == RS_KEY then
            local kind = R.int(1, 3)
            local r, what
            if kind == 1 then
                what = "RENEW " .. px
                r = sc:call_as(cl.id, "EVAL", RS.RENEW, "1", RS_KEY, tostring(px), h.token)
                if r == 1 then h.to, h.maxttl = t0 + px, px else drop(cl) end
            elseif kind == 2 then
                what = "PTTL"
                r = sc:call_as(cl.id, "PTTL", RS_KEY)
                if r == -2 or math.type(r) ~= "integer" or r < 0 or r > h.maxttl or r < h.to - W.now - 5 then
                    fail(("c%d: PTTL %s of its %s (hold to %d, TTL %d)"):format(cl.id, S.show(r), RS_KEY, h.to, h.maxttl))
                end
            else
                what = "UNLOCK"
                drop(cl)
                r = sc:call_as(cl.id, "EVAL", RS.UNLOCK, "2", RS_KEY, "ch", "0", "30000", h.token)
            end
            return ("c%d@%d R1 %s -> %s"):format(cl.id, via, what, S.show(r)), r
        elseif h then
            local key, tok = h.key, h.token
            local kind = R.int(1, 8)
            local r, what
            if kind == 1 then
                what = "EXTEND +" .. px
                r = sc:call_as(cl.id, "EVAL", PY_EXTEND, "1", key, tok, tostring(px), "0")
                may_end(tok, h.to + px, h.maxttl + px)
                if r == 1 then h.to, h.maxttl = h.to + px, h.maxttl + px else drop(cl) end
            elseif kind == 2 then
                what = "EXTEND =" .. px
                r = sc:call_as(cl.id, "EVAL", PY_EXTEND, "1", key, tok, tostring(px), "1")
                may_end(tok, t0 + px, px)
                if r == 1 then h.to, h.maxttl = t0 + px, px else drop(cl) end
            elseif kind == 3 then
                what = "PEXPIRE " .. px
                r = sc:call_as(cl.id, "PEXPIRE", key, tostring(px))
                may_end(tok, t0 + px, px)
                if r == 1 then h.to, h.maxttl = t0 + px, px else drop(cl) end
            elseif kind == 4 then
                what = "GETEX PX " .. px
                r = sc:call_as(cl.id, "GETEX", key, "PX", tostring(px))
                may_end(tok, t0 + px, px)
                if r == tok then h.to, h.maxttl = t0 + px, px
                elseif r == null then fail(("c%d: GETEX of its %s answered nil"):format(cl.id, key))
                else drop(cl) end
            elseif kind == 5 then
                what = "SET XX KEEPTTL"
                r = sc:call_as(cl.id, "SET", key, tok, "XX", "KEEPTTL")
                if r == null then fail(("c%d: SET XX KEEPTTL of its %s answered nil"):format(cl.id, key))
                elseif r ~= OK then drop(cl) end
            elseif kind == 6 then
                what = "PTTL"
                r = sc:call_as(cl.id, "PTTL", key)
                if math.type(r) ~= "integer" or r < 0 or r > h.maxttl or r < h.to - W.now - 5 then
                    fail(("c%d: PTTL %s of its %s (hold to %d, TTL %d)"):format(cl.id, S.show(r), key, h.to, h.maxttl))
                end
            elseif kind == 7 then
                what = "GET"
                r = sc:call_as(cl.id, "GET", key)
                if r ~= tok and not S.tryagain(r) then
                    fail(("c%d: GET of its %s answered %s, hold to %d"):format(cl.id, key, S.show(r), h.to))
                end
            else
                what = "RELEASE"
                drop(cl)
                r = sc:call_as(cl.id, "EVAL", PY_RELEASE, "1", key, tok)
                if r == 1 then tokens[tok].released = W.now end
            end
            return ("c%d@%d %s %s -> %s"):format(cl.id, via, key, what, S.show(r)), r
        else
            drop(cl)
            if R.chance(0.3) then
                cl.n = cl.n + 1
                local tok = ("c%d:%d"):format(cl.id, cl.n)
                local r = sc:call_as(cl.id, "EVAL", RS.LOCK, "1", RS_KEY, tostring(px), tok)
                if r == null then acquired(cl, RS_KEY, tok, t0, px) end
                return ("c%d@%d R1 LOCK %s %d -> %s"):format(cl.id, via, tok, px, S.show(r)), r
            end
            local key = R.pick(PY_KEYS)
            if R.chance(0.3) then -- a reader: whose token is there
                local r = sc:call_as(cl.id, "GET", key)
                local e = type(r) == "string" and tokens[r]
                if e and e.released then fail(("GET %s answered %s, released at %d"):format(key, r, e.released)) end
                if e and W.now > e.ends + e.ttl + 1000 then
                    fail(("GET %s answered %s, more than a TTL (%d) past its end %d"):format(key, r, e.ttl, e.ends))
                end
                return ("c%d@%d %s GET -> %s"):format(cl.id, via, key, S.show(r)), r
            end
            cl.n = cl.n + 1
            local tok = ("c%d:%d"):format(cl.id, cl.n)
            local r = sc:call_as(cl.id, "SET", key, tok, "NX", "PX", tostring(px))
            may_end(tok, t0 + px, px)
            if r == OK then acquired(cl, key, tok, t0, px) end
            return ("c%d@%d %s SET NX %s PX %d -> %s"):format(cl.id, via, key, tok, px, S.show(r)), r
        end
    end
    for _ = 1, steps do
        if failure then break end
        local roll = R.int(1, 100)
        if roll <= 7 then
            local d = R.pick(SKEWS)
            W:new_leader(d)
            note("new leader, clock " .. d)
        elseif roll <= 10 then
            local sc = R.pick(scs)
            local d = R.pick({ 3600000, -3600000 })
            sc.wall_base = sc.wall_base + d
            note("wall of " .. sc.id .. " " .. d)
        elseif roll <= 12 then
            local i = R.int(1, 3)
            local old = scs[i].sid
            for _, cl in ipairs(clients) do
                local h = cl.hold
                local n = h and W:node(path(h.key))
                if n and n.stat.ephemeralOwner == old then drop(cl) end
            end
            scs[i]:expire()
            note("expire " .. i)
        elseif roll <= 30 then
            local ms = R.pick({ 100, 500, 1000, 3000, 6000, 12000 })
            W:advance(ms)
            note("advance " .. ms)
        else
            local line, r = step_client(R.pick(clients))
            note(line)
            if type(r) == "table" and r.err and not S.tryagain(r) then fail("unexpected reply " .. S.show(r)) end
        end
    end
    for _, cl in ipairs(clients) do
        local h = cl.hold
        if h and h.key == RS_KEY then
            scs[cl.home]:call_as(cl.id, "EVAL", RS.UNLOCK, "2", RS_KEY, "ch", "0", "30000", h.token)
        elseif h then
            scs[cl.home]:call_as(cl.id, "EVAL", PY_RELEASE, "1", h.key, h.token)
        end
    end
    W:advance(60000)
    W:advance(60000)
    for _, name in ipairs(W:children("/zkresp/k") or {}) do
        if name:match("^[LR]%d$") then fail("left behind: " .. name) end
    end
    if failure then
        return ("seed %d: %s\n%s"):format(seed, failure, table.concat(log, "\n"))
    end
end

local SEEDS = {}
local env = os.getenv("CLOCK_KEYS_FUZZ_SEEDS")
if env then for s in env:gmatch("%d+") do SEEDS[#SEEDS + 1] = tonumber(s) end
elseif os.getenv("CLOCK_KEYS_FUZZ_N") then
    for s = 1, tonumber(os.getenv("CLOCK_KEYS_FUZZ_N")) do SEEDS[#SEEDS + 1] = s end
else
    -- 1-24: before the fix in keyspace.lua (K.record: an mtime of a leader
    -- never learned read as if written when read), seeds 2, 6, 11, 20 and
    -- 21 saw a holder's PTTL 0 for Redisson's lock, 3 and 18 two holders
    -- of it (the case above).
    for s = 1, 24 do SEEDS[#SEEDS + 1] = s end
end

describe("lock keys under clock faults, seeded fuzz", function()
    for _, seed in ipairs(SEEDS) do
        it("seed " .. seed, function()
            local msg = fuzz(seed, 150)
            if msg then error(msg, 0) end
        end)
    end
end)
