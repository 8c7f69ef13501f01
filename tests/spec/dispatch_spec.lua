-- Dispatch: unknown commands, arity, the key and value caps.  Refused
-- requests send nothing to ZooKeeper.

local S = require "world"
local E = S.E

describe("dispatch", function()
    local W, a
    before_each(function()
        W, a = S.world({ { config = { max_key_len = 8, max_value_len = 16 } } })
    end)

    -- Runs a command and returns its reply and how many ZooKeeper operations
    -- it issued.
    local function call(...)
        local before = #W.ops
        local r = a:call(...)
        return r, #W.ops - before
    end

    it("answers an unknown command exactly as Redis does", function()
        local r, n = call("FOO", "a", "b")
        assert.same(E("ERR unknown command 'FOO', with args beginning with: 'a' 'b' "), r)
        assert.equal(0, n)
        assert.same(E("ERR unknown command 'foo', with args beginning with: "), a:call("foo"))
    end)

    it("cuts the unknown command's text like Redis (checked against redis-server 7)", function()
        assert.same(E("ERR unknown command 'FOO', with args beginning with: '" ..
                      string.rep("a", 100) .. "' '" .. string.rep("b", 25) .. "' "),
                    a:call("FOO", string.rep("a", 100), string.rep("b", 50), "c"))
        assert.same(E("ERR unknown command 'FOO', with args beginning with: 'x' 'line  break' "),
                    a:call("FOO", "x\0y", "line\r\nbreak"))
        assert.same(E("ERR unknown command 'F OO" .. string.rep("z", 124) ..
                      "', with args beginning with: 'a' "),
                    a:call("F\nOO" .. string.rep("z", 200), "a"))
    end)

    it("finds commands in any case and checks arity with the declared name", function()
        assert.same({ ok = "OK" }, a:call("sEt", "k", "v"))
        assert.equal("v", a:call("Get", "k"))
        local r, n = call("GET", "a", "b")
        assert.same(E("ERR wrong number of arguments for 'get' command"), r)
        assert.equal(0, n)
        assert.same(E("ERR wrong number of arguments for 'set' command"), a:call("SET", "k"))
        assert.same(E("ERR wrong number of arguments for 'del' command"), a:call("DEL"))
        assert.same(E("ERR wrong number of arguments for 'pexpire' command"), a:call("PEXPIRE", "k"))
        assert.same(E("ERR wrong number of arguments for 'delifeq' command"), a:call("DELIFEQ", "k"))
        assert.same(E("ERR wrong number of arguments for 'dbsize' command"), a:call("DBSIZE", "x"))
    end)

    -- The commands answered in C have their shape in the same registry:
    -- C hands a request it refuses to Lua, which answers with the texts
    -- every other command uses.
    it("refuses a malformed command answered in C with Redis's texts", function()
        local r, n = call("ECHO")
        assert.same(E("ERR wrong number of arguments for 'echo' command"), r)
        assert.equal(0, n)
        assert.same(E("ERR unknown subcommand 'foo'. Try CLIENT HELP."), a:call("CLIENT", "foo"))
        assert.same(E("ERR wrong number of arguments for 'client|setname' command"),
                    a:call("client", "SETNAME"))
        assert.same(E("ERR wrong number of arguments for 'memory|purge' command"),
                    a:call("MEMORY", "PURGE", "x"))
        assert.same(E("ERR Can't execute 'client|id': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / " ..
                      "QUIT / RESET are allowed in this context"),
                    a:run(function() return a.M.dispatch({ "CLIENT", "ID" }, true) end))
        -- a well-formed one never reaches Lua; if it did, it is said plainly
        assert.same(E("ERR echo is answered by zkresp's gateway, not its scripts"), a:call("ECHO", "x"))
    end)

    it("keeps the commands answered in C when a policy names one of them", function()
        local file = os.tmpname()
        local f = assert(io.open(file, "w"))
        f:write([[ return { commands = { ping = { arity = 1, fn = function() return "mine" end } } } ]])
        f:close()
        local b = W:sidecar({ config = { policy = file } })
        assert.is_true(b.M.commands.ping.in_c)
        assert.is_nil(b.M.commands.ping.fn)
        os.remove(file)
    end)

    it("refuses a key over the cap before anything reaches ZooKeeper", function()
        local long = string.rep("k", 9)
        for _, cmd in ipairs({ { "GET", long }, { "SET", long, "v" }, { "DEL", "ok", long },
                               { "EXISTS", long, "ok" }, { "PEXPIRE", long, "10" },
                               { "DELIFEQ", long, "v" }, { "INCR", long } }) do
            local r, n = call(table.unpack(cmd))
            assert.same(E("ERR key too long"), r)
            assert.equal(0, n)
        end
        assert.same({ ok = "OK" }, a:call("SET", string.rep("k", 8), "v"))
    end)

    it("refuses a value over the cap before anything reaches ZooKeeper", function()
        local r, n = call("SET", "k", string.rep("v", 17))
        assert.same(E("ERR value too large"), r)
        assert.equal(0, n)
        assert.same({ ok = "OK" }, a:call("SET", "k", string.rep("v", 16)))
    end)

    it("answers syntax errors before touching ZooKeeper", function()
        local r, n = call("SET", "k", "v", "NX", "XX")
        assert.same(E("ERR syntax error"), r)
        assert.equal(0, n)
        r, n = call("PEXPIRE", "k", "10", "NX", "GT")
        assert.same(E("ERR NX and XX, GT or LT options at the same time are not compatible"), r)
        assert.equal(0, n)
    end)

    it("lets a policy add commands", function()
        local file = S.policy_file([[
            local T = require "txn"
            return { commands = { greet = { arity = 2, first_key = 1, last_key = 1, step = 1,
                fn = function(args)
                    return T.run({ args[2] }, function(t)
                        local rec = t:read(args[2])
                        return rec.live and ("hello " .. rec.value) or "nobody"
                    end)
                end } } }
        ]])
        local b = W:sidecar({ config = { policy = file, max_key_len = 8 } })
        b:call("SET", "n", "world")
        assert.equal("hello world", b:call("GREET", "n"))
        assert.same(E("ERR wrong number of arguments for 'greet' command"), b:call("GREET"))
        assert.same(E("ERR key too long"), b:call("GREET", string.rep("n", 9)))
        os.remove(file)
    end)

    it("lists every command for COMMAND, with Redis's key positions", function()
        local cmds = a.M.commands
        local names = {}
        for name, spec in pairs(cmds) do
            names[#names + 1] = name
            -- those answered in C have their shape here and no fn
            if spec.in_c then assert.is_nil(spec.fn) else assert.is_function(spec.fn) end
            assert.is_number(spec.arity)
            assert.is_string(spec.flags)
        end
        table.sort(names)
        assert.same({ "append", "auth", "client", "command", "config", "copy", "dbsize", "debug", "decr",
                      "decrby", "del", "delex", "delifeq", "discard", "echo", "eval", "eval_ro", "evalsha",
                      "evalsha_ro", "exec", "exists", "expire", "expireat", "expiretime", "flushall", "flushdb",
                      "get", "getdel", "getex", "getrange", "getset", "hdel", "hello", "hexists", "hget",
                      "hgetall", "hincrby", "hincrbyfloat", "hkeys", "hlen", "hmget", "hmset", "hrandfield",
                      "hscan", "hset", "hsetnx", "hstrlen", "hvals", "incr", "incrby", "incrbyfloat", "info",
                      "keys", "lindex", "linsert", "llen", "lmove", "lock.acquire", "lock.convert",
                      "lock.info", "lock.release", "lock.renew", "lpop", "lpos", "lpush", "lrange", "lrem",
                      "lset", "ltrim", "memory", "mget", "move", "mset", "msetnx", "multi", "object", "persist",
                      "pexpire", "pexpireat", "pexpiretime", "ping", "policy", "psetex", "psubscribe",
                      "pttl", "publish", "pubsub", "punsubscribe", "quit", "randomkey", "readonly",
                      "readwrite", "rename", "renamenx", "reset", "rpop", "rpoplpush", "rpush", "sadd",
                      "scan", "scard", "script", "sdiff", "sdiffstore", "select", "set", "setex", "setnx",
                      "setrange", "sinter", "sintercard", "sinterstore", "sismember", "smembers",
                      "smismember", "smove", "spop", "spublish", "srandmember", "srem", "sscan",
                      "ssubscribe", "strlen", "subscribe", "substr", "sunion", "sunionstore", "sunsubscribe",
                      "swapdb", "time", "ttl", "type", "unlink", "unsubscribe", "unwatch", "wait",
                      "waitaof", "watch", "zadd",
                      "zcard", "zcount", "zincrby", "zlexcount", "zmscore", "zpopmax", "zpopmin",
                      "zrandmember", "zrange", "zrangebylex", "zrangebyscore", "zrank", "zrem",
                      "zremrangebylex", "zremrangebyrank", "zremrangebyscore", "zrevrange", "zrevrangebylex",
                      "zrevrangebyscore", "zrevrank", "zscan", "zscore" }, names)
        assert.same({ -3, 1, 1, 1, "write denyoom" },
                    { cmds.set.arity, cmds.set.first_key, cmds.set.last_key, cmds.set.step,
                      cmds.set.flags })
        assert.same({ -2, 1, -1, 1 }, { cmds.del.arity, cmds.del.first_key, cmds.del.last_key,
                                        cmds.del.step })
        assert.same({ 2, 0, 0 }, { cmds.keys.arity, cmds.keys.first_key, cmds.keys.last_key })
        assert.same({ -3, 1, -1, 2 }, { cmds.mset.arity, cmds.mset.first_key, cmds.mset.last_key,
                                        cmds.mset.step })
    end)

    it("reloads the policy on the \"reload\" event, keeping the old one when it fails", function()
        local file = os.tmpname()
        local function write(text) S.rewrite(file, text) end
        local b_call
        local function pttl_after_set()
            b_call("SET", "k", "v", "PX", "100000")
            return b_call("PTTL", "k")
        end
        write("return { ttl = function(key, ms) return math.min(ms, 5000) end }")
        local b = W:sidecar({ config = { policy = file } })
        b_call = function(...) return b:call(...) end
        local left = pttl_after_set()
        assert.is_true(left > 4990 and left <= 5000)
        write("return { ttl = function(key, ms) return math.min(ms, 3000) end }")
        b:reload()
        left = pttl_after_set()
        assert.is_true(left > 2990 and left <= 3000)
        write("return { ttl = 'not a function' }")
        local ok, msg = b.M.reload_policy()
        assert.is_nil(ok)
        assert.matches("policy.ttl must be a function", msg)
        write("syntax error here (")
        b:reload()
        assert.matches("policy not reloaded", b.logs[#b.logs])
        left = pttl_after_set()
        assert.is_true(left > 2990 and left <= 3000)
        os.remove(file)
    end)
end)
