-- ttl_fuzz_spec: keys with TTLs over THREE sidecars, a seeded fuzz with
-- faults (lost replies, disconnects, sessions expired or given up, clock
-- advances around deadlines, a leader change to a server whose clock is
-- off), checked against a model of each key's deadline kept from the
-- replies' times:
--   * never early: a key a client was told lives until T (its TTL counted
--     from the request's sending) is live on every sidecar before T, unless
--     an acknowledged command since removed or replaced it, or its writer's
--     session ended (README: a key with a TTL goes with its writer's session);
--   * never late beyond the README's bound: its owner deletes it at its
--     deadline counted from the write's acknowledgment (plus a round trip);
--     while its owner cannot reach ZooKeeper, up to a session timeout more;
--   * PTTL never more than the TTL last set, never below what is left, never
--     negative but -1/-2;
--   * nothing left: once every key is deleted and every deadline passed, no
--     znode under the keyspace and the owned-key tables of every sidecar empty.
-- A -TRYAGAIN answer makes a key unknown (the write may or may not land,
-- and may be settled in the background) until an acknowledged
-- unconditional write or delete.

local S = require "world"
local null = S.null

local NAMES = { "a", "b", "c" }
local STRINGS = { "k1", "k2", "k3" }
local LATE = 300          -- the owner's delete: its deadline counted from the ack, a round trip
local TROUBLE_LATE = 16000 -- owner in trouble: a session timeout (10 s), retries every 2 s
local SESSION = 10000

-- xorshift32: our own PRNG (the sidecars' sandbox shares math.random).
local function prng(seed)
    local x = seed & 0xffffffff
    if x == 0 then x = 0x9e3779b9 end
    local r = {}
    function r.next()
        x = x ~ ((x << 13) & 0xffffffff)
        x = x ~ (x >> 17)
        x = x ~ ((x << 5) & 0xffffffff)
        return x
    end
    function r.int(lo, hi) return lo + r.next() % (hi - lo + 1) end
    function r.chance(p) return r.next() % 10000 < p * 10000 end
    function r.pick(t) return t[r.int(1, #t)] end
    return r
end

local function show(r) return S.show(r) end

-- The fuzz: returns nil, or a failure message with the seed and the log.
local function fuzz(seed, steps, opts)
    opts = opts or {}
    local R = prng(seed)
    local W, a, b, c = S.world(3, { latency = opts.latency or 2 })
    S.warm(W, a, b, c)
    local scs = { a, b, c }
    local log = {}
    local function note(s) log[#log + 1] = string.format("%6d %s", W.now, s) end
    local failure
    local function fail(msg)
        if not failure then failure = msg end
    end

    -- The model: key -> {known, exists, val, ttl, lo, hi, writer, coll, shared}
    local M = {}
    local function reset(k, coll) M[k] = { known = true, exists = false, coll = coll } end
    for _, k in ipairs(STRINGS) do reset(k, nil) end
    reset("l1", "list"); reset("h1", "hash")
    local trouble = { -1e9, -1e9, -1e9 } -- last time each sidecar had a fault or an outage
    local down = {}                      -- sidecar index -> time it went down

    local function unknown(k) M[k] = { known = false, coll = M[k].coll } end
    -- What the model says of key k over [t0, t1]: "live", "gone" or "either".
    local function expect(k, t0, t1)
        local m = M[k]
        if not m.known then return "either" end
        if not m.exists then return "gone" end
        if not m.ttl then return "live" end
        if t1 < m.lo then return "live" end
        local grace = LATE
        if trouble[m.writer] >= m.lo - 2200 or down[m.writer] then grace = TROUBLE_LATE end
        if t0 > m.hi + grace then
            m.exists = false
            return "gone"
        end
        return "either"
    end
    local function set_ttl(m, ttl, t0, t1, sc)
        m.ttl, m.lo, m.hi = ttl, ttl and t0 + ttl, ttl and t1 + ttl
        if m.coll and ttl and m.writer and m.writer ~= sc and m.exists then m.shared = true end
        m.writer = sc
    end
    local function bad_err(r)
        return type(r) == "table" and r.err and not S.tryagain(r)
    end

    -- A command through sidecar i: reply, send time, reply time.
    local function call(i, ...)
        local t0 = W.now
        local r = scs[i]:call(...)
        local t1 = W.now
        local args = { ... }
        note(string.format("%s %s -> %s [%d..%d]", NAMES[i], table.concat(args, " "), show(r), t0, t1))
        if bad_err(r) and r.err ~= "ERR no such key" then fail("unexpected error: " .. r.err) end
        return r, t0, t1
    end

    local function check_read(i, k)
        local m = M[k]
        if m.coll then
            local r, t0, t1 = call(i, "EXISTS", k)
            if S.tryagain(r) then return end
            local e = expect(k, t0, t1)
            if e == "live" and r ~= 1 then fail(k .. " early: EXISTS " .. show(r) .. " on " .. NAMES[i]) end
            if e == "gone" and r ~= 0 then fail(k .. " late: EXISTS " .. show(r) .. " on " .. NAMES[i]) end
            return
        end
        local r, t0, t1 = call(i, "GET", k)
        if S.tryagain(r) then return end
        local e = expect(k, t0, t1)
        if e == "live" and r ~= m.val then fail(k .. " early/wrong: GET " .. show(r) .. " want " .. tostring(m.val) .. " on " .. NAMES[i]) end
        if e == "gone" and r ~= null then fail(k .. " late: GET " .. show(r) .. " on " .. NAMES[i]) end
        if e == "either" and m.known and r ~= null and r ~= m.val then fail(k .. " wrong value " .. show(r)) end
    end

    local function check_pttl(i, k)
        local r, t0, t1 = call(i, "PTTL", k)
        if S.tryagain(r) then return end
        if math.type(r) ~= "integer" then return fail("PTTL not an integer: " .. show(r)) end
        if r < -2 then return fail(k .. " PTTL " .. r) end
        local m = M[k]
        local e = expect(k, t0, t1)
        if e == "gone" and r ~= -2 then fail(k .. " late: PTTL " .. r .. " on " .. NAMES[i]) end
        if e == "live" then
            if r == -2 then return fail(k .. " early: PTTL -2 on " .. NAMES[i]) end
            if m.ttl == nil and r ~= -1 then return fail(k .. " PTTL " .. r .. " without a TTL") end
            if m.ttl then
                if r == -1 then return fail(k .. " PTTL -1 with a TTL") end
                if r > m.ttl then fail(k .. " PTTL " .. r .. " more than the TTL set " .. m.ttl) end
                if r < m.lo - t1 then fail(k .. " PTTL " .. r .. " less than left " .. (m.lo - t1)) end
                if r > m.hi - t0 + 50 then fail(k .. " PTTL " .. r .. " more than left " .. (m.hi - t0)) end
            end
        end
        if m.known and m.ttl and r > m.ttl then fail(k .. " PTTL " .. r .. " > TTL set " .. m.ttl) end
    end

    -- Each string command: fn(i, k) updates the model from the reply.
    local ttl_of = function() return R.pick({ 50, 200, 500, 1000, 3000, 8000 }) end
    local function strcmd(i, k)
        local m = M[k]
        local kind = R.int(1, 16)
        local v = tostring(R.int(1, 999))
        if kind == 1 then -- SET PX [NX|XX]
            local ttl = ttl_of()
            local cond = R.pick({ "", "NX", "XX" })
            local args = { "SET", k, v, "PX", tostring(ttl) }
            if cond ~= "" then args[#args + 1] = cond end
            local r, t0, t1 = call(i, table.unpack(args))
            if S.tryagain(r) then return unknown(k) end
            if r == null then return end
            if r.ok then
                if cond == "" then M[k] = { known = true, coll = nil } ; m = M[k] end
                if m.known then m.exists, m.val = true, v; set_ttl(m, ttl, t0, t1, i) end
            end
        elseif kind == 2 then -- SET (no TTL) or SET GET PX
            local get = R.chance(0.5)
            local ttl = get and ttl_of() or nil
            local args = { "SET", k, v }
            if get then args[#args + 1] = "PX"; args[#args + 1] = tostring(ttl); args[#args + 1] = "GET" end
            local r, t0, t1 = call(i, table.unpack(args))
            if S.tryagain(r) then return unknown(k) end
            if get then
                local e = expect(k, t0, t1)
                if e == "live" and r ~= m.val then fail(k .. " SET GET answered " .. show(r) .. " want " .. m.val) end
                if e == "gone" and r ~= null then fail(k .. " SET GET answered " .. show(r) .. " after its end") end
            end
            M[k] = { known = true, exists = true, val = v }
            set_ttl(M[k], ttl, t0, t1, i)
        elseif kind == 3 then -- SET KEEPTTL
            local r, t0, t1 = call(i, "SET", k, v, "KEEPTTL")
            if S.tryagain(r) then return unknown(k) end
            if m.known then
                local e = expect(k, t0, t1)
                if e == "either" then return unknown(k) end
                if e == "gone" then m.ttl = nil end
                m.exists, m.val, m.writer = true, v, i
            end
        elseif kind == 4 then -- PEXPIRE [NX XX GT LT]
            local ttl = ttl_of()
            local flag = R.pick({ "", "", "NX", "XX", "GT", "LT" })
            local args = { "PEXPIRE", k, tostring(ttl) }
            if flag ~= "" then args[#args + 1] = flag end
            local r, t0, t1 = call(i, table.unpack(args))
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if flag == "" and e == "live" and r ~= 1 then fail(k .. " PEXPIRE on a live key: " .. show(r)) end
            if e == "gone" and r ~= 0 then fail(k .. " PEXPIRE on a gone key: " .. show(r)) end
            if r == 1 and m.known then
                if e == "either" then m.exists = true end
                set_ttl(m, ttl, t0, t1, i)
            end
        elseif kind == 5 then -- PEXPIREAT on the sidecar's own wall clock
            local ttl = ttl_of()
            local at = W.now + scs[i].wall_base + ttl
            local r, t0, t1 = call(i, "PEXPIREAT", k, tostring(math.floor(at)))
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if e == "live" and r ~= 1 then fail(k .. " PEXPIREAT on a live key: " .. show(r)) end
            if r == 1 and m.known then m.exists = true; set_ttl(m, ttl, t0, t1, i); m.lo = t0 + ttl - 1 end
        elseif kind == 6 then -- PERSIST
            local r, t0, t1 = call(i, "PERSIST", k)
            if S.tryagain(r) then return unknown(k) end
            if r == 1 and m.known then m.exists = true; m.ttl, m.lo, m.hi = nil, nil, nil; m.writer = i end
        elseif kind == 7 then -- GETEX PX / PERSIST
            local persist = R.chance(0.3)
            local ttl = ttl_of()
            local r, t0, t1
            if persist then r, t0, t1 = call(i, "GETEX", k, "PERSIST")
            else r, t0, t1 = call(i, "GETEX", k, "PX", tostring(ttl)) end
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if e == "live" and r ~= m.val then fail(k .. " GETEX answered " .. show(r)) end
            if r ~= null and m.known then
                m.exists, m.writer = true, i
                if persist then m.ttl, m.lo, m.hi = nil, nil, nil else set_ttl(m, ttl, t0, t1, i) end
            end
        elseif kind == 8 then -- GETDEL / DEL
            local r, t0, t1 = call(i, R.pick({ "GETDEL", "DEL" }), k)
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if e == "live" and (r == null or r == 0) then fail(k .. " GETDEL/DEL of a live key: " .. show(r)) end
            reset(k, nil)
        elseif kind == 9 then -- INCR keeps the TTL
            local r, t0, t1 = call(i, "INCR", k)
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if math.type(r) ~= "integer" then return fail(k .. " INCR: " .. show(r)) end
            if e == "live" and r ~= tonumber(m.val) + 1 then fail(k .. " INCR answered " .. r .. " over " .. m.val) end
            if e == "gone" and r ~= 1 then fail(k .. " INCR over a gone key answered " .. r) end
            if e == "either" then return unknown(k) end
            if e == "gone" then M[k] = { known = true, exists = true, val = "1", writer = i }
            else m.val, m.writer = tostring(r), i end
        elseif kind == 10 then -- RENAME k -> another string key
            local dst = R.pick(STRINGS)
            if dst == k then return end
            local r, t0, t1 = call(i, "RENAME", k, dst)
            if S.tryagain(r) then unknown(k); unknown(dst) return end
            local e = expect(k, t0, t1)
            if e == "live" and not (type(r) == "table" and r.ok) then fail(k .. " RENAME of a live key: " .. show(r)) end
            if e == "gone" and r ~= nil and type(r) == "table" and r.ok then fail(k .. " RENAME of a gone key: OK") end
            if type(r) == "table" and r.ok then
                if not m.known or e == "either" then unknown(k); unknown(dst) return end
                local d = { known = true, exists = true, val = m.val, ttl = m.ttl, writer = i,
                            lo = m.lo, hi = m.hi and (m.hi + (t1 - t0)) }
                M[dst] = d
                reset(k, nil)
            end
        elseif kind <= 13 then
            check_read(R.int(1, 3), k)
        else
            check_pttl(R.int(1, 3), k)
        end
    end

    local function collcmd(i, k)
        local m = M[k]
        local kind = R.int(1, 8)
        if kind == 1 then -- a write
            local r, t0, t1
            if m.coll == "list" then r, t0, t1 = call(i, "RPUSH", k, "x")
            else r, t0, t1 = call(i, "HSET", k, "f" .. R.int(1, 4), "v") end
            if S.tryagain(r) then return unknown(k) end
            if math.type(r) ~= "integer" then return fail(k .. " write: " .. show(r)) end
            if not m.known then return end
            local e = expect(k, t0, t1)
            if e == "either" then return unknown(k) end
            if e == "gone" then M[k] = { known = true, exists = true, coll = m.coll, writer = i } return end
            if m.ttl and m.writer ~= i then m.shared = true end
            m.writer = i
        elseif kind == 2 or kind == 3 then -- PEXPIRE
            local ttl = ttl_of()
            local r, t0, t1 = call(i, "PEXPIRE", k, tostring(ttl))
            if S.tryagain(r) then return unknown(k) end
            local e = expect(k, t0, t1)
            if e == "live" and r ~= 1 then fail(k .. " PEXPIRE on a live collection: " .. show(r)) end
            if e == "gone" and r ~= 0 then fail(k .. " PEXPIRE on a gone collection: " .. show(r)) end
            if r == 1 and m.known then m.exists = true; set_ttl(m, ttl, t0, t1, i) end
        elseif kind == 4 then
            local r, t0, t1 = call(i, "PERSIST", k)
            if S.tryagain(r) then return unknown(k) end
            if r == 1 and m.known then m.ttl, m.lo, m.hi, m.writer = nil, nil, nil, i end
        elseif kind == 5 then
            local r = call(i, "DEL", k)
            if S.tryagain(r) then return unknown(k) end
            reset(k, m.coll)
        elseif kind <= 7 then
            check_read(R.int(1, 3), k)
        else
            check_pttl(R.int(1, 3), k)
        end
    end

    -- A session of sidecar i ended: its ephemeral keys with a TTL went.
    local function session_ended(i)
        for k, m in pairs(M) do
            if m.known and m.exists and m.writer == i and m.ttl then
                if m.coll and m.shared then unknown(k) else m.exists = false end
            elseif m.known and m.exists and m.writer == i and not m.ttl and m.coll then
                -- (a collection without a TTL is persistent)
            end
        end
    end

    local skewed = false
    for step = 1, steps do
        if failure then break end
        local i = R.int(1, 3)
        local sc = scs[i]
        local what = R.int(1, 100)
        if not opts.faults and what <= 10 then what = 36 end
        if what <= 6 then -- a fault on the next op of this sidecar
            local op = R.pick({ "create", "set", "delete", "multi" })
            local when = R.pick({ "before", "after" })
            note(("%s fail_next %s %s"):format(NAMES[i], op, when))
            sc:fail_next({ op = op, when = when })
            trouble[i] = W.now
        elseif what <= 8 and not down[i] then
            note(NAMES[i] .. " disconnect")
            sc:disconnect()
            down[i] = W.now
            trouble[i] = W.now
        elseif what <= 10 and not down[i] then
            local t = ({ "expire", "lose" })[R.int(1, 2)]
            note(NAMES[i] .. " " .. t)
            if t == "expire" then sc:expire() else
                sc:disconnect(); W:advance(R.int(0, 500)); sc:lose({ expire_old = true }) end
            session_ended(i)
            trouble[i] = W.now
        elseif what <= 17 and not skewed and opts.skew then
            skewed = true
            local d = R.pick({ -opts.skew, opts.skew })
            note("new leader, clock " .. d)
            W:new_leader(d)
        elseif what <= 35 then -- the clock moves: a little, or to a deadline
            local ks = {}
            for k, m in pairs(M) do if m.known and m.exists and m.ttl then ks[#ks + 1] = k end end
            table.sort(ks)
            local dt
            if #ks > 0 and R.chance(0.6) then
                local m = M[R.pick(ks)]
                local target = R.pick({ m.lo - 1, m.lo, m.hi + 1, m.hi + LATE + 1, m.hi + 20 })
                dt = math.max(0, target - W.now)
            else
                dt = R.pick({ 0, 1, 10, 100, 400, 1500, 4000 })
            end
            note("advance " .. dt)
            W:advance(dt)
        else
            local keys = { "k1", "k2", "k3", "k1", "k2", "l1", "h1" }
            local k = R.pick(keys)
            if M[k].coll then collcmd(i, k) else strcmd(i, k) end
        end
        -- clear faults that did not fire (they count as trouble)
        if #sc.faults > 0 and what > 6 then sc.faults = {} end
        -- outages end after a while (less than a session timeout)
        for j = 1, 3 do
            if down[j] and (W.now - down[j] > 3000 or R.chance(0.2)) then
                note(NAMES[j] .. " reconnect")
                scs[j]:reconnect()
                down[j] = nil
                trouble[j] = W.now
            end
        end
        -- after every step: what every sidecar reads of one key
        if not failure and R.chance(0.3) then
            local k = R.pick({ "k1", "k2", "k3", "l1", "h1" })
            for j = 1, 3 do if not down[j] then check_read(j, k) end end
        end
    end

    -- The end: outages over, everything deleted, every deadline passed.
    if not failure then
        for j = 1, 3 do
            scs[j].faults = {}
            if down[j] then scs[j]:reconnect(); down[j] = nil end
        end
        W:advance(30000)
        local all = { "k1", "k2", "k3", "l1", "h1", "warm1", "warm2", "warm3" }
        for _, k in ipairs(all) do
            for _ = 1, 5 do
                local r = call(R.int(1, 3), "DEL", k)
                if not S.tryagain(r) then break end
                W:advance(3000)
            end
        end
        W:advance(120000)
        local left = W:children(a.config.root .. "/k") or {}
        if #left > 0 then fail("znodes left: " .. table.concat(left, ",")) end
        for j, sc in ipairs(scs) do
            local n = 0
            for p in pairs(sc.K.owned) do n = n + 1; note(NAMES[j] .. " owns " .. p) end
            if n > 0 then fail(NAMES[j] .. " owned-key table holds " .. n) end
            if sc.require("owned").first() then fail(NAMES[j] .. " expiry heap not empty") end
        end
    end
    if failure then
        local tail = {}
        for n = math.max(1, #log - 60), #log do tail[#tail + 1] = log[n] end
        return ("seed %d: %s\n%s"):format(seed, failure, table.concat(tail, "\n"))
    end
end

local SEEDS = { 1, 2, 3, 4, 5, 6 }

describe("TTLs over three sidecars: deterministic cases", function()
    -- a's SET PX answered TRYAGAIN (reply lost, connection gone past the
    -- command's time); b's acknowledged SET afterwards must survive a's
    -- background settling, and c reads it until its own deadline.
    it("an acknowledged write through b outlives a's settling of a lost SET PX", function()
        local W, a, b, c = S.warm_world(3)
        a:fail_next({ op = "create", when = "after", hook = function() a.connected = false end })
        local r = a:call("SET", "k", "v1", "PX", "3000")
        assert.is_true(S.tryagain(r) or (type(r) == "table" and r.ok == "OK"))
        local t0 = W.now
        assert.same(S.OK, b:call("SET", "k", "v2", "PX", "4000"))
        a:reconnect()
        W:advance(3900 - (W.now - t0))
        for _, sc in ipairs({ a, b, c }) do assert.equal("v2", sc:call("GET", "k")) end
        W:advance(500)
        for _, sc in ipairs({ a, b, c }) do assert.equal(null, sc:call("GET", "k")) end
        assert.is_nil(W:node(a:path("k")))
    end)

    -- RENAME through c of a's key with a TTL: the new key keeps the TTL
    -- (never longer), lives on every sidecar until it, and goes after.
    it("RENAME through a third sidecar keeps the TTL, never early, never long", function()
        local W, a, b, c = S.warm_world(3)
        local t0 = W.now
        assert.same(S.OK, a:call("SET", "src", "v", "PX", "2000"))
        W:advance(500)
        assert.same(S.OK, c:call("RENAME", "src", "dst"))
        local p = b:call("PTTL", "dst")
        assert.is_true(p <= 2000 - (W.now - t0) + 10 and p >= 2000 - (W.now - t0) - 10, tostring(p))
        W:advance(2000 - (W.now - t0) - 5)
        for _, sc in ipairs({ a, b, c }) do assert.equal("v", sc:call("GET", "dst")) end
        W:advance(LATE + 20)
        for _, sc in ipairs({ a, b, c }) do assert.equal(null, sc:call("GET", "dst")); assert.equal(-2, sc:call("PTTL", "src")) end
        assert.is_nil(W:node(a:path("dst")))
    end)

    -- A list given a TTL through a and pushed to through b (persistent,
    -- shared) outlives a's session; a string of a's goes with it.
    it("a writer's session expiry: its string goes, a shared collection stays to its deadline", function()
        local W, a, b, c = S.warm_world(3)
        assert.same(S.OK, a:call("SET", "s", "v", "PX", "5000"))
        assert.equal(1, a:call("RPUSH", "l", "x"))
        assert.equal(1, a:call("PEXPIRE", "l", "5000"))
        assert.equal(2, b:call("RPUSH", "l", "y"))
        a:expire()
        W:advance(10)
        assert.equal(null, c:call("GET", "s"))
        assert.equal(1, c:call("EXISTS", "l"))
        W:advance(5500)
        for _, sc in ipairs({ a, b, c }) do assert.equal(0, sc:call("EXISTS", "l")) end
        assert.equal(0, a:call("DEL", "l"))
        assert.same({}, W:children(a.config.root .. "/k") and (function()
            local t = {}
            for _, n in ipairs(W:children(a.config.root .. "/k")) do if not n:match("^warm") then t[#t + 1] = n end end
            return t end)())
    end)
end)

describe("TTLs over three sidecars, seeded fuzz", function()
    for _, seed in ipairs(SEEDS) do
        it("seed " .. seed .. ": no fault", function()
            assert.is_nil(fuzz(seed, 250, {}))
        end)
        it("seed " .. seed .. ": faults", function()
            assert.is_nil(fuzz(seed, 250, { faults = true }))
        end)
        it("seed " .. seed .. ": faults, a leader change with a clock 5 min off", function()
            assert.is_nil(fuzz(seed + 100, 250, { faults = true, skew = 300000 }))
        end)
    end
end)

return { fuzz = fuzz }
