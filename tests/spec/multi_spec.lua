-- multi_spec.lua — MULTI, EXEC and DISCARD (cmd_multi.lua) on the model:
-- the queue per client, the checks at queue time, EXEC as one script
-- transaction (re-run whole on a conflict), the caps, a client gone.
-- (The gateway's part, the connection's MULTI state in dispatch order, and
-- the differential checks against redis-server are in
-- tests/integration/test_42_multi.py.)
local S = require "world"
local null, OK, E = S.null, S.OK, S.E

local QUEUED = { ok = "QUEUED" }
local EXECABORT = E("EXECABORT Transaction discarded because of previous errors.")

-- Runs one command of client id as the gateway sends it inside MULTI
-- (mode "queued"), or the MULTI that opens one ("begin").
local function send(sc, id, mode, ...)
    local args = { ... }
    local M = sc.M
    local t = sc.world:spawn(sc, function() return M.dispatch(args, false, 0, mode) end)
    t.client = id
    sc.world:run_until(function() return t.done end)
    return t.result
end

local function begin(sc, id) return send(sc, id, "begin", "MULTI") end
local function queue(sc, id, ...) return send(sc, id, "queued", ...) end

describe("MULTI/EXEC", function()
    it("runs the queued commands in order, each reply its element, errors too", function()
        local _, a, b = S.world(2)
        assert.same(OK, b:call("SET", "s", "text"))
        assert.same(OK, begin(a, 1))
        for _, cmd in ipairs({ { "SET", "k", "1" }, { "INCR", "k" }, { "GET", "k" }, { "GET", "none" },
                               { "INCR", "s" }, { "HSET", "h", "f", "v" }, { "HGETALL", "h" } }) do
            assert.same(QUEUED, queue(a, 1, table.unpack(cmd)))
        end
        local r = queue(a, 1, "EXEC")
        assert.same({ OK, 2, "2", null, S.NOT_INT, 1, { map = { "f", "v" } } }, r)
        assert.equal("2", b:call("GET", "k"))
        assert.equal("v", b:call("HGET", "h", "f"))
        assert.equal(0, a.require("cmd_multi").count())
    end)

    it("keeps one queue per client", function()
        local _, a = S.world(1)
        assert.same(OK, begin(a, 1))
        assert.same(OK, begin(a, 2))
        assert.same(QUEUED, queue(a, 1, "SET", "one", "1"))
        assert.same(QUEUED, queue(a, 2, "SET", "two", "2"))
        assert.same(OK, queue(a, 2, "DISCARD"))
        assert.same({ OK }, queue(a, 1, "EXEC"))
        assert.equal("1", a:call("GET", "one"))
        assert.equal(null, a:call("GET", "two"))
    end)

    it("runs nothing of a transaction with a refused command", function()
        local _, a = S.world({ { config = { max_key_len = 8 } } })
        local refusals = {
            { { "SET", "k" }, E("ERR wrong number of arguments for 'set' command") },
            { { "NOPE", "x" }, E("ERR unknown command 'NOPE', with args beginning with: 'x' ") },
            { { "PING" }, E("ERR 'ping' cannot be queued in MULTI by zkresp") },
            { { "EVAL", "return 1", "0" }, E("ERR 'eval' cannot be queued in MULTI by zkresp") },
            { { "LOCK.INFO", "l" }, E("ERR 'lock.info' cannot be queued in MULTI by zkresp") },
            { { "SUBSCRIBE", "c" }, E("ERR 'subscribe' cannot be queued in MULTI by zkresp") },
            { { "GET", "123456789" }, E("ERR key too long") },
            { { "MULTI", "x" }, E("ERR wrong number of arguments for 'multi' command") },
        }
        for _, case in ipairs(refusals) do
            assert.same(OK, begin(a, 1))
            assert.same(QUEUED, queue(a, 1, "SET", "k", "1"))
            assert.same(case[2], queue(a, 1, table.unpack(case[1])))
            assert.same(QUEUED, queue(a, 1, "SET", "k", "2"))
            assert.same(EXECABORT, queue(a, 1, "EXEC"))
            assert.equal(null, a:call("GET", "k"))
        end
        -- nested MULTI: an error, the transaction stays clean
        assert.same(OK, begin(a, 1))
        assert.same(E("ERR MULTI calls can not be nested"), queue(a, 1, "MULTI"))
        assert.same(QUEUED, queue(a, 1, "SET", "k", "3"))
        assert.same({ OK }, queue(a, 1, "EXEC"))
        -- an EXEC of the wrong arity ends it (Redis's execCommandAbort)
        assert.same(OK, begin(a, 1))
        assert.same(QUEUED, queue(a, 1, "SET", "k", "4"))
        assert.same(E("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"),
                    queue(a, 1, "EXEC", "x"))
        assert.equal("3", a:call("GET", "k"))
        assert.equal(0, a.require("cmd_multi").count())
    end)

    it("asks the policy's authorize at queue time", function()
        local file = S.policy_file([[
            return { authorize = function(_, cmd) if cmd == "del" then return "no deletes" end end }
        ]])
        local _, a = S.world({ { config = { policy = file } } })
        assert.same(OK, begin(a, 1))
        assert.same(QUEUED, queue(a, 1, "SET", "k", "1"))
        assert.same(E("NOPERM no deletes"), queue(a, 1, "DEL", "k"))
        assert.same(EXECABORT, queue(a, 1, "EXEC"))
        os.remove(file)
    end)

    it("answers an empty array for an empty transaction, and errors outside one", function()
        local _, a = S.world(1)
        assert.same(OK, begin(a, 1))
        assert.same({}, queue(a, 1, "EXEC"))
        assert.same(E("ERR EXEC without MULTI"), a:call("EXEC"))
        assert.same(E("ERR DISCARD without MULTI"), a:call("DISCARD"))
    end)

    it("runs again whole when another sidecar wrote a key it read", function()
        local W, a, b = S.world(2)
        assert.same(OK, a:call("SET", "x", "1"))
        assert.same(OK, begin(a, 1))
        assert.same(QUEUED, queue(a, 1, "INCR", "x"))
        assert.same(QUEUED, queue(a, 1, "SET", "y", "after"))
        -- b's SET lands after a's EXEC read x, before its commit
        a:fail_next({ op = "get", path = a:path("x"), pass = true,
                      hook = function() b:start("SET", "x", "100") end })
        local t = W:spawn(a, function() return a.M.dispatch({ "EXEC" }, false, 0, "queued") end)
        W:run_until(function() return t.done end)
        assert.same({ 101, OK }, t.result)
        assert.equal("101", b:call("GET", "x"))
        assert.equal("after", b:call("GET", "y"))
    end)

    it("caps the queued commands and their bytes", function()
        local _, a = S.world(1)
        local X = a.require("cmd_multi")
        X.MAX_COMMANDS = 3
        assert.same(OK, begin(a, 1))
        for _ = 1, 3 do assert.same(QUEUED, queue(a, 1, "INCR", "n")) end
        assert.same(E("ERR too many commands queued in MULTI (the limit is 3)"), queue(a, 1, "INCR", "n"))
        assert.same(EXECABORT, queue(a, 1, "EXEC"))
        X.MAX_BYTES = 200
        assert.same(OK, begin(a, 1))
        assert.same(QUEUED, queue(a, 1, "SET", "n", string.rep("v", 50)))
        assert.same(E("ERR the commands queued in MULTI are too large (the limit is 200 bytes)"),
                    queue(a, 1, "SET", "n", string.rep("v", 50)))
        assert.same(EXECABORT, queue(a, 1, "EXEC"))
        assert.equal(null, a:call("GET", "n"))
    end)

    it("drops the queue of a client gone (closed or RESET)", function()
        local _, a = S.world(1)
        local X = a.require("cmd_multi")
        assert.same(OK, begin(a, 7))
        assert.same(QUEUED, queue(a, 7, "SET", "k", "1"))
        assert.equal(1, X.count())
        a:run(function() a.M.on_client_gone(7) end)
        assert.equal(0, X.count())
        assert.equal(null, a:call("GET", "k"))
    end)
end)
