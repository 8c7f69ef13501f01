-- watch_spec.lua — WATCH and UNWATCH (cmd_multi.lua) on the model: EXEC
-- answers a null array and runs nothing when a watched key is not what
-- WATCH saw (written through any sidecar, by the same client too, made,
-- deleted, expired), even when the write lands between EXEC's read and its
-- commit; the watches go with EXEC, DISCARD, UNWATCH and the client; a key
-- watched in another database.  (The gateway's part and the differential
-- checks against redis-server are in tests/integration/test_48_watch.py.)
local S = require "world"
local null, OK, E = S.null, S.OK, S.E

local QUEUED = { ok = "QUEUED" }
local ABORTED = { null_array = true }

-- Starts commands cmds of client id in database db, one after another, as
-- the gateway sends them: mode "begin" (MULTI), "queued" (inside MULTI) or
-- nil.  The task's result is the last one's reply.
local function start(sc, id, db, mode, cmds)
    local t = sc.world:spawn(sc, function()
        local r
        for _, args in ipairs(cmds) do r = sc.M.dispatch(args, false, db, mode) end
        return r
    end)
    t.client = id
    return t
end

-- Runs one command of client id in database db; its reply.
local function send(sc, id, db, mode, ...)
    local t = start(sc, id, db, mode, { { ... } })
    sc.world:run_until(function() return t.done end)
    return t.result
end

local function cmd(sc, id, ...) return send(sc, id, 0, nil, ...) end

-- MULTI, the commands given, EXEC: EXEC's reply.
local function transaction(sc, id, cmds, db)
    assert.same(OK, send(sc, id, db or 0, "begin", "MULTI"))
    for _, c in ipairs(cmds) do assert.same(QUEUED, send(sc, id, db or 0, "queued", table.unpack(c))) end
    return send(sc, id, db or 0, "queued", "EXEC")
end

describe("WATCH", function()
    it("lets EXEC run when no watched key changed, and aborts it when one did", function()
        local _, a, b = S.world(2)
        assert.same(OK, a:call("SET", "k", "1"))
        assert.same(OK, cmd(a, 1, "WATCH", "k", "other"))
        assert.same({ OK }, transaction(a, 1, { { "SET", "k", "2" } }))
        assert.equal("2", b:call("GET", "k"))
        -- a write through another sidecar: EXEC runs nothing
        assert.same(OK, cmd(a, 1, "WATCH", "k"))
        assert.same(OK, b:call("SET", "k", "3"))
        assert.same(ABORTED, transaction(a, 1, { { "SET", "k", "4" }, { "SET", "x", "1" } }))
        assert.equal("3", b:call("GET", "k"))
        assert.equal(null, b:call("GET", "x"))
        -- EXEC forgot the watch: the next transaction runs
        assert.same({ OK }, transaction(a, 1, { { "SET", "k", "5" } }))
        local X = a.require("cmd_multi")
        assert.equal(0, X.watching())
        assert.equal(1, X.stats.watch_aborted)
    end)

    it("aborts for a key made, deleted, expired or rewritten with the same value, by anyone", function()
        local W, a, b = S.world(2)
        local cases = {
            { "made", function() b:call("SET", "w", "v") end },
            { "deleted", function() b:call("DEL", "w") end, function() a:call("SET", "w", "v") end },
            { "same value", function() b:call("SET", "w", "v") end, function() a:call("SET", "w", "v") end },
            { "own write", function() cmd(a, 1, "SET", "w", "v") end, function() a:call("SET", "w", "v") end },
            { "expired", function() W:advance(200) end,
              function() b:call("SET", "w", "v", "PX", "100") end },
            { "ttl changed", function() b:call("PEXPIRE", "w", "100000") end,
              function() a:call("SET", "w", "v") end },
        }
        for _, c in ipairs(cases) do
            a:call("DEL", "w")
            if c[3] then c[3]() end
            assert.same(OK, cmd(a, 1, "WATCH", "w"))
            c[2]()
            assert.same(ABORTED, transaction(a, 1, { { "INCR", "n" } }), c[1])
        end
        assert.equal(null, a:call("GET", "n"))
    end)

    it("aborts when the write lands between EXEC's read and its commit", function()
        local W, a, b = S.world(2)
        assert.same(OK, a:call("SET", "k", "1"))
        assert.same(OK, cmd(a, 1, "WATCH", "k", "j"))
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "SET", "j", "mine"))
        -- k is written again (the same value: a new version) after EXEC read
        -- it, before its commit, which checks it
        local path = a:path("k")
        a:fail_next({ op = "get", path = path, pass = true,
                      hook = function() W:raw_set(path, W:node(path).data) end })
        local t = W:spawn(a, function() return a.M.dispatch({ "EXEC" }, false, 0, "queued") end)
        t.client = 1
        W:run_until(function() return t.done end)
        assert.same(ABORTED, t.result)
        assert.equal("1", b:call("GET", "k"))
        assert.equal(null, b:call("GET", "j"))
    end)

    it("answers an empty array or a null for a transaction with no commands", function()
        local _, a, b = S.world(2)
        assert.same(OK, cmd(a, 1, "WATCH", "k"))
        assert.same({}, transaction(a, 1, {}))
        assert.same(OK, cmd(a, 1, "WATCH", "k"))
        b:call("SET", "k", "1")
        assert.same(ABORTED, transaction(a, 1, {}))
    end)

    it("is forgotten by UNWATCH, DISCARD, an EXECABORT and a client gone", function()
        local _, a, b = S.world(2)
        local X = a.require("cmd_multi")
        local function changed_after(id, forget)
            assert.same(OK, cmd(a, id, "WATCH", "k"))
            b:call("INCR", "k")
            forget()
            assert.same({ 1 }, transaction(a, id, { { "INCR", "other" .. id } }))
        end
        changed_after(1, function() assert.same(OK, cmd(a, 1, "UNWATCH")) end)
        changed_after(2, function()
            assert.same(OK, send(a, 2, 0, "begin", "MULTI"))
            assert.same(OK, send(a, 2, 0, "queued", "DISCARD"))
        end)
        changed_after(3, function()
            assert.same(OK, send(a, 3, 0, "begin", "MULTI"))
            send(a, 3, 0, "queued", "NOPE")
            assert.same(E("EXECABORT Transaction discarded because of previous errors."),
                        send(a, 3, 0, "queued", "EXEC"))
        end)
        changed_after(4, function() a:run(function() a.M.on_client_gone(4) end) end)
        assert.equal(0, X.watching())
        -- UNWATCH queued in MULTI runs as a no-op; EXEC already took the watch
        assert.same(OK, cmd(a, 5, "WATCH", "k"))
        assert.same({ OK, 1 }, transaction(a, 5, { { "UNWATCH" }, { "INCR", "other5" } }))
    end)

    it("refuses WATCH inside MULTI without spoiling the transaction", function()
        local _, a = S.world(1)
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(E("ERR WATCH inside MULTI is not allowed"), send(a, 1, 0, "queued", "WATCH", "k"))
        assert.same(E("ERR wrong number of arguments for 'watch' command"), send(a, 1, 0, "queued", "WATCH"))
        assert.same(E("EXECABORT Transaction discarded because of previous errors."),
                    send(a, 1, 0, "queued", "EXEC"))
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(E("ERR WATCH inside MULTI is not allowed"), send(a, 1, 0, "queued", "WATCH", "k"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "SET", "k", "v"))
        assert.same({ OK }, send(a, 1, 0, "queued", "EXEC"))
        assert.equal(0, a.require("cmd_multi").watching())
        assert.same(E("ERR This Redis command is not allowed from script"),
                    a:call("EVAL", "return redis.pcall('watch', 'k')", "0"))
    end)

    it("keeps the first look at a key watched twice, and caps the keys and their bytes", function()
        local _, a, b = S.world({ { config = { max_key_len = 65536 } }, {} })
        local X = a.require("cmd_multi")
        assert.same(OK, cmd(a, 1, "WATCH", "k"))
        b:call("SET", "k", "1")
        assert.same(OK, cmd(a, 1, "WATCH", "k", "k"))
        assert.same(ABORTED, transaction(a, 1, {}))
        X.MAX_WATCHED = 3
        assert.same(OK, cmd(a, 1, "WATCH", "a", "b", "a"))
        assert.same(E("ERR too many keys watched (the limit is 3)"), cmd(a, 1, "WATCH", "c", "d"))
        assert.same(OK, cmd(a, 1, "WATCH", "c", "b"))
        b:call("SET", "c", "1")
        assert.same(ABORTED, transaction(a, 1, {}))
        -- a quarter of the request limit (983040 bytes in the model)
        X.MAX_WATCHED = 1000
        local long = string.rep("x", 60000)
        assert.same(OK, cmd(a, 1, "WATCH", long .. "1", long .. "2", long .. "3"))
        assert.same(E("ERR the keys watched are too large (the limit is 245760 bytes)"),
                    cmd(a, 1, "WATCH", long .. "4", long .. "5"))
        assert.same({ 1 }, transaction(a, 1, { { "INCR", "n" } }))
    end)

    it("answers a commit of more operations than a multi takes with an error, nothing written", function()
        local _, a = S.world(1)
        a.zk.MAX_OPS = 4
        assert.same(OK, cmd(a, 1, "WATCH", "w1", "w2"))
        assert.same(E("ERR this command's ZooKeeper request would have more than 4 operations; " ..
                      "nothing was written"), transaction(a, 1, { { "SET", "x", "1" } }))
        assert.equal(null, a:call("GET", "x"))
        assert.same({ OK }, transaction(a, 1, { { "SET", "x", "1" } }))
    end)

    it("watches a key of the database it was watched in, checked at the commit", function()
        local W, a, b = S.world(2)
        assert.same(OK, send(a, 1, 1, nil, "SET", "k", "db1"))
        assert.same(OK, send(a, 1, 1, nil, "WATCH", "k"))
        -- the same name in database 0 is another key
        b:call("SET", "k", "db0")
        assert.same({ OK }, transaction(a, 1, { { "SET", "x", "1" } }, 0))
        assert.same(OK, send(a, 1, 1, nil, "WATCH", "k"))
        assert.same(OK, send(b, 9, 1, nil, "SET", "k", "changed"))
        assert.same(ABORTED, transaction(a, 1, { { "SET", "x", "2" } }, 0))
        assert.equal("1", a:call("GET", "x"))
        -- a write of it between EXEC's read and its commit
        assert.same(OK, send(a, 1, 1, nil, "WATCH", "k"))
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "SET", "y", "3"))
        local path1 = a:run(function()
            local K = a.require("keyspace")
            K.use_db(1)
            return K.path("k")
        end)
        a:fail_next({ op = "get", path = path1, pass = true,
                      hook = function() W:raw_set(path1, W:node(path1).data) end })
        local t = W:spawn(a, function() return a.M.dispatch({ "EXEC" }, false, 0, "queued") end)
        t.client = 1
        W:run_until(function() return t.done end)
        assert.same(ABORTED, t.result)
        assert.equal(null, a:call("GET", "y"))
    end)

    -- EXEC runs while a key watched in database 1 is deleted and made again
    -- (at version 0, as it was) by this sidecar's own commands or its
    -- expiry and another sidecar: the commit's check of the version would
    -- pass, so EXEC holds that key's queue too.
    local function exec_races(change, setup, latency)
        local W, a, b = S.warm_world(2)
        assert.same(OK, b:call("SET", "slow", "s"))
        assert.equal("s", a:call("GET", "slow"))
        -- (a first such transaction, so that the one timed below costs no
        -- first-use round trips)
        assert.same({ "s", OK }, transaction(a, 1, { { "GET", "slow" }, { "SET", "x", "warm" } }))
        assert.equal(1, a:call("DEL", "x"))
        setup(a)
        assert.same(OK, send(a, 1, 1, nil, "WATCH", "k"))
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "GET", "slow"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "SET", "x", "mine"))
        a:fail_next({ op = "get", path = a:path("slow"), latency = latency, pass = true })
        local t = start(a, 1, 0, "queued", { { "EXEC" } })
        W:advance(10)
        assert.is_nil(t.done)
        local d = change(W, a, b)
        W:run_until(function() return d.done or t.done end)
        if not t.done then -- k changed before EXEC took effect: it aborts
            assert.equal(null, b:call("GET", "x"))
            W:run_until(function() return t.done end)
            assert.same(ABORTED, t.result)
            assert.equal(null, a:call("GET", "x"))
        elseif t.result.null_array then -- EXEC answered first, the change before its commit
            assert.equal(null, a:call("GET", "x"))
        else -- EXEC went first (a change through this sidecar waits for it)
            assert.same({ "s", OK }, t.result)
        end
        W:run_until(function() return d.done end)
    end

    it("holds a key watched in another database, deleted and made again through this sidecar", function()
        exec_races(function(W, a)
            return start(a, 2, 1, nil, { { "DEL", "k" }, { "SET", "k", "v2", "PX", "100000" } })
        end, function(a) assert.same(OK, send(a, 1, 1, nil, "SET", "k", "v1", "PX", "100000")) end, 50)
    end)

    it("holds a key watched in another database that expires and another sidecar makes again", function()
        exec_races(function(W, _, b)
            W:advance(30)
            return start(b, 7, 1, nil, { { "SET", "k", "theirs", "PX", "100000" } })
        end, function(a) assert.same(OK, send(a, 1, 1, nil, "SET", "k", "v1", "PX", "30")) end, 80)
    end)

    -- EXEC's commit may have applied though its attempt failed (its reply
    -- lost and judged not applied; applied under a session given up): the
    -- next attempt sees its own writes as a change, and must not answer
    -- the null, which says nothing ran.
    for _, moved in ipairs({ false, true }) do
        it(moved and "answers TRYAGAIN, not null, when its lost commit of deletes applied and cannot be told"
                  or "answers what its lost commit of deletes did, told by the mark it bumped", function()
            local W, a, b = S.warm_world(2)
            assert.same(OK, a:call("SET", "lease", "1", "PX", "5000"))
            assert.same(OK, a:call("SET", "j", "job"))
            W:advance(4200) -- the lease has 800 ms left: its end may remove it too
            assert.same(OK, cmd(a, 1, "WATCH", "lease", "j"))
            a:fail_next({ op = "multi", when = "after", hook = moved and function()
                -- another removal of ours bumps the same marks before the look
                W:raw_set(a.K.mark_path(a.sid, a:path("lease")), "")
                W:raw_set(a.K.mark_path(a.sid, a:path("j")), "")
                -- (j has no TTL: its persistent mark, which the commit
                -- bumped with its nonce, would tell it applied)
                W:raw_set(a.require("guard").pmark_path(a:path("j")), "")
            end or nil })
            local r = transaction(a, 1, { { "DEL", "lease" }, { "DEL", "j" } })
            assert.equal(null, b:call("GET", "j"))
            assert.same(moved and E("TRYAGAIN ZooKeeper unavailable") or { 1, 1 }, r)
        end)
    end

    it("answers TRYAGAIN, not null, when its commit landed under a session given up", function()
        local W, a, b = S.warm_world(2)
        assert.same(OK, cmd(a, 1, "WATCH", "k"))
        assert.same(OK, send(a, 1, 0, "begin", "MULTI"))
        assert.same(QUEUED, send(a, 1, 0, "queued", "SET", "k", "mine", "PX", "30000"))
        a:fail_next({ op = "create", path = a:path("k"), pass = true, latency = 50 })
        local t = start(a, 1, 0, "queued", { { "EXEC" } })
        W:advance(10)
        a:lose() -- the server keeps the old session: its node lives on a while
        W:run_until(function() return t.done end)
        assert.equal("mine", b:call("GET", "k"))
        assert.same(E("TRYAGAIN ZooKeeper unavailable"), t.result)
    end)

    -- A key absent at WATCH, made and deleted again before EXEC, shows the
    -- same absence.  Before: a client whose GET saw it made (through its
    -- own sidecar) wrote on a value since deleted: EXEC applied SET c 2
    -- after DEL c, which no serial order gives (Redis aborts: the key was
    -- touched).  A helper's serializability fuzz found it.
    it("aborts when a read through its sidecar saw the absent key made, even if deleted again", function()
        local _, a, b = S.warm_world(2)
        assert.same(OK, cmd(a, 1, "WATCH", "c"))
        assert.same(OK, b:call("SET", "c", "1"))
        assert.equal("1", cmd(a, 1, "GET", "c"))
        assert.equal(1, b:call("DEL", "c"))
        assert.same(ABORTED, transaction(a, 1, { { "SET", "c", "2" } }))
        assert.equal(null, b:call("GET", "c"))
        -- another client's read marks it as well (the key was touched)
        assert.same(OK, cmd(a, 1, "WATCH", "c"))
        assert.same(OK, b:call("SET", "c", "1"))
        assert.equal("1", cmd(a, 2, "GET", "c"))
        assert.equal(1, b:call("DEL", "c"))
        assert.same(ABORTED, transaction(a, 1, { { "SET", "c", "2" } }))
        -- unseen by any read here, it aborts nothing (README)
        assert.same(OK, cmd(a, 1, "WATCH", "c"))
        assert.same(OK, b:call("SET", "c", "1"))
        assert.equal(1, b:call("DEL", "c"))
        assert.same({ OK }, transaction(a, 1, { { "SET", "c", "2" } }))
        assert.equal("2", b:call("GET", "c"))
    end)

    it("forgets a watched absence with EXEC, UNWATCH, DISCARD and the client", function()
        local _, a = S.warm_world(1)
        local absent = a.require("shared").watched_absent
        assert.same(OK, cmd(a, 1, "WATCH", "x", "y"))
        assert.same(OK, cmd(a, 2, "WATCH", "x"))
        assert.same(OK, a:call("SET", "y", "1")) -- (an existing key is not listed)
        assert.same(OK, cmd(a, 3, "WATCH", "y"))
        assert.is_truthy(absent[a:path("x")])
        assert.same({ OK }, transaction(a, 2, { { "SET", "z", "1" } }))
        assert.same(OK, cmd(a, 1, "UNWATCH"))
        assert.same(OK, cmd(a, 3, "UNWATCH"))
        assert.same({}, absent)
        assert.same(OK, cmd(a, 4, "WATCH", "q"))
        assert.same(OK, send(a, 4, 0, "begin", "MULTI"))
        assert.same(OK, send(a, 4, 0, "queued", "DISCARD"))
        assert.same(OK, cmd(a, 5, "WATCH", "q"))
        a:run(function() a.M.on_client_gone(5) end)
        assert.same({}, absent)
    end)
end)
