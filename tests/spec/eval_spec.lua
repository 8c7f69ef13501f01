-- EVAL, EVALSHA, SCRIPT: replies, conversions and errors as redis-server
-- 7.0 answers them (checked against it by hand and in test_22_eval.py).

local S = require "world"
local null, E = S.null, S.E

describe("EVAL", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    it("converts Lua values to replies", function()
        assert.equal(1, a:call("EVAL", "return 1", "0"))
        assert.equal(3, a:call("EVAL", "return 3.99", "0"))
        assert.equal(-3, a:call("EVAL", "return -3.99", "0"))
        assert.equal("x", a:call("EVAL", "return 'x'", "0"))
        assert.equal(1, a:call("EVAL", "return true", "0"))
        assert.equal(null, a:call("EVAL", "return false", "0"))
        assert.equal(null, a:call("EVAL", "return nil", "0"))
        assert.same({ 1, 2 }, a:call("EVAL", "return {1,2,nil,3}", "0"))
        assert.same({ 1, { 1, null }, "a" }, a:call("EVAL", "return {1,{true,false},'a'}", "0"))
        assert.same(E("My err"), a:call("EVAL", "return {err='My err'}", "0"))
        assert.same({ ok = "fine" }, a:call("EVAL", "return {ok='fine'}", "0"))
        assert.same(E("ERR bad"), a:call("EVAL", "return redis.error_reply('bad')", "0"))
        assert.same(E("FOO bar"), a:call("EVAL", "return redis.error_reply('FOO bar')", "0"))
        assert.same({ ok = "st" }, a:call("EVAL", "return redis.status_reply('st')", "0"))
        assert.same({ "k1", "a1" }, a:call("EVAL", "return {KEYS[1], ARGV[1]}", "1", "k1", "a1"))
    end)

    it("converts replies to Lua values", function()
        assert.equal("boolean", a:call("EVAL", "return type(redis.call('get', KEYS[1]))", "1", "nokey"))
        assert.equal("tableOK", a:call("EVAL", "local r = redis.call('set', KEYS[1], 'y') return type(r) .. r.ok", "1", "k"))
        assert.equal("yx", a:call("EVAL", "return redis.call('get', KEYS[1]) .. 'x'", "1", "k"))
        assert.equal(2, a:call("EVAL", "return redis.call('exists', KEYS[1], KEYS[1])", "1", "k"))
        assert.same({ "table", "ERR value is not an integer or out of range" },
                    a:call("EVAL", "local r = redis.pcall('incr', KEYS[1]) return {type(r), r.err}", "1", "k"))
    end)

    it("converts under redis.setresp(3)", function()
        a:call("HSET", "h", "f", "v")
        assert.same({ "table", "v" }, a:call("EVAL", "redis.setresp(3) local r = redis.call('hgetall', KEYS[1]) " ..
                                                     "return {type(r.map), r.map.f}", "1", "h"))
        assert.same({ "f", "v" }, a:call("EVAL", "redis.setresp(2) return redis.call('hgetall', KEYS[1])", "1", "h"))
        assert.same({ bool = true }, a:call("EVAL", "redis.setresp(3) return redis.call('get', KEYS[1]) == nil", "1", "nokey"))
        assert.same({ bool = false }, a:call("EVAL", "redis.setresp(3) return false", "0"))
        assert.same({ map = { "a", 1 } }, a:call("EVAL", "return {map={a=1}}", "0"))
        assert.same({ double = 3.5 }, a:call("EVAL", "return {double=3.5}", "0"))
        local r = a:call("EVAL", "return redis.setresp(5)", "0")
        assert.truthy(r.err:find("^ERR RESP version must be 2 or 3%. script: "))
    end)

    it("formats numbers passed to redis.call as Redis does", function()
        a:call("EVAL", "redis.call('set', KEYS[1], 30000.0)", "1", "f")
        assert.equal("30000", a:call("GET", "f"))
        a:call("EVAL", "redis.call('set', KEYS[1], 1/3)", "1", "f")
        assert.equal("0.33333333333333331", a:call("GET", "f"))
        a:call("EVAL", "redis.call('set', KEYS[1], 7)", "1", "f")
        assert.equal("7", a:call("GET", "f"))
        assert.same(1, a:call("EVAL", "return redis.call('pexpire', KEYS[1], 30000.0)", "1", "f"))
    end)

    it("answers the Redisson cluster probe with nil", function()
        assert.equal(null, a:call("EVAL", "redis.call('get', KEYS[1]) redis.call('get', KEYS[2])", "2", "test1", "test2"))
    end)

    it("checks numkeys", function()
        assert.same(E("ERR Number of keys can't be greater than number of args"), a:call("EVAL", "return 1", "2", "a"))
        assert.same(E("ERR Number of keys can't be negative"), a:call("EVAL", "return 1", "-1"))
        assert.same(E("ERR value is not an integer or out of range"), a:call("EVAL", "return 1", "abc"))
        assert.same(E("ERR wrong number of arguments for 'eval' command"), a:call("EVAL", "return 1"))
    end)

    it("formats script errors as Redis 7.0", function()
        local sha = a:call("SCRIPT", "LOAD", "return x")
        assert.same(E("ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: " ..
                      sha .. ", on @user_script:1."), a:call("EVAL", "return x", "0"))
        local body = "local x = 1\nreturn error('boom')"
        assert.same(E("ERR user_script:2: boom script: " .. a:call("SCRIPT", "LOAD", body) .. ", on @user_script:2."),
                    a:call("EVAL", body, "0"))
        -- (Not `return redis.call(...)`: a tail call leaves no frame to take the
        -- line from under Lua 5.4; such errors name line 1.)
        body = "local x = 1\nlocal r = redis.call('incr', KEYS[1]) return r"
        a:call("SET", "s", "v")
        assert.same(E("ERR value is not an integer or out of range script: " .. a:call("SCRIPT", "LOAD", body) ..
                      ", on @user_script:2."), a:call("EVAL", body, "1", "s"))
        body = "return error({err='X boom'})"
        assert.same(E("X boom script: " .. a:call("SCRIPT", "LOAD", body) .. ", on @user_script:1."),
                    a:call("EVAL", body, "0"))
        body = "return redis.call('nosuch')"
        assert.same(E("ERR Unknown Redis command called from script script: " .. a:call("SCRIPT", "LOAD", body) ..
                      ", on @user_script:1."), a:call("EVAL", body, "0"))
        -- (Lua 5.4's parser words its messages its own way.)
        assert.truthy(a:call("EVAL", "syntax error here", "0").err:find(
            "^ERR Error compiling script %(new function%): user_script:1: "))
        body = "local ok, e = pcall(redis.call, 'nosuch') return e"
        assert.equal("ERR Unknown Redis command called from script", a:call("EVAL", body, "0"))
    end)

    it("refuses writes in read-only scripts", function()
        local body = "return redis.call('set', KEYS[1], 'b')"
        local r = a:call("EVAL_RO", body, "1", "a")
        assert.same(E("ERR Write commands are not allowed from read-only scripts. script: " ..
                      a:call("SCRIPT", "LOAD", body) .. ", on @user_script:1."), r)
        assert.equal(null, a:call("GET", "a"))
        a:call("SET", "a", "v")
        assert.equal("v", a:call("EVAL_RO", "return redis.call('get', KEYS[1])", "1", "a"))
    end)

    it("caches scripts for EVALSHA and SCRIPT EXISTS, shared, flushed by SCRIPT FLUSH", function()
        local sha = a:call("SCRIPT", "LOAD", "return 1")
        assert.equal("e0e1f9fabfc9d4800c877a703b823ac0578ff8db", sha)
        assert.same({ 1, 0 }, a:call("SCRIPT", "EXISTS", sha:upper(), string.rep("f", 40)))
        assert.equal(1, a:call("EVALSHA", sha, "0"))
        assert.equal(1, a:call("EVALSHA_RO", sha, "0"))
        assert.same(E("NOSCRIPT No matching script. Please use EVAL."), a:call("EVALSHA", string.rep("f", 40), "0"))
        a:call("EVAL", "return 2", "0")
        assert.equal(2, a:call("EVALSHA", a:call("SCRIPT", "LOAD", "return 2"), "0"))
        assert.same({ ok = "OK" }, a:call("SCRIPT", "FLUSH"))
        assert.same({ 0 }, a:call("SCRIPT", "EXISTS", sha))
        assert.same(E("NOSCRIPT No matching script. Please use EVAL."), a:call("EVALSHA", sha, "0"))
        assert.same(E("ERR unknown subcommand 'foo'. Try SCRIPT HELP."), a:call("SCRIPT", "foo"))
    end)

    it("runs the redis-py lock scripts", function()
        local release = "local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1"
        local extend = "local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end " ..
                       "local expiration = redis.call('pttl', KEYS[1]) if not expiration then expiration = 0 end " ..
                       "if expiration < 0 then return 0 end redis.call('pexpire', KEYS[1], expiration + ARGV[2]) return 1"
        a:call("SET", "lock", "tok", "PX", "10000")
        assert.equal(0, a:call("EVAL", release, "1", "lock", "other"))
        assert.equal(1, a:call("EVAL", extend, "1", "lock", "tok", "5000"))
        assert.is_true(a:call("PTTL", "lock") > 10000)
        assert.equal(1, a:call("EVAL", release, "1", "lock", "tok"))
        assert.equal(null, a:call("GET", "lock"))
    end)
end)

describe("script transactions", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    it("buffers writes, visible to later reads of the same script", function()
        local body = "redis.call('set', KEYS[1], 'v1') local x = redis.call('get', KEYS[1]) " ..
                     "redis.call('del', KEYS[1]) local y = redis.call('get', KEYS[1]) " ..
                     "redis.call('set', KEYS[2], '5') redis.call('incrby', KEYS[2], 3) " ..
                     "return {x, y, redis.call('get', KEYS[2]), redis.call('exists', KEYS[1], KEYS[2])}"
        assert.same({ "v1", null, "8", 1 }, a:call("EVAL", body, "2", "k1", "k2"))
        assert.equal(null, a:call("GET", "k1"))
        assert.equal("8", b:call("GET", "k2"))
    end)

    it("commits all the writes in one multi, nothing before the end", function()
        W.ops = {}
        a:call("EVAL", "redis.call('set', KEYS[1], 'a') redis.call('set', KEYS[2], 'b') return 1", "2", "x", "y")
        local writes, multis = 0, 0
        for _, op in ipairs(W.ops) do
            if op.kind == "multi" then multis = multis + 1 end
            if op.kind == "create" or op.kind == "set" or op.kind == "delete" then writes = writes + 1 end
        end
        assert.equal(1, multis)
        assert.equal(0, writes)
        assert.equal("a", b:call("GET", "x"))
        assert.equal("b", b:call("GET", "y"))
    end)

    it("a failing script writes nothing", function()
        local r = a:call("EVAL", "redis.call('set', KEYS[1], 'a') error('stop')", "1", "x")
        assert.truthy(r.err:find("stop", 1, true))
        assert.equal(null, b:call("GET", "x"))
        assert.is_nil(W:node(a:path("x")))
    end)

    it("re-runs the whole script when a key read changed before the commit", function()
        a:call("SET", "c", "0")
        local body = "local v = tonumber(redis.call('get', KEYS[1])) redis.call('set', KEYS[1], v + 1) return v + 1"
        -- b's write lands between a's read and a's commit (a multi with the
        -- check of c's persistent mark).
        local commit = "set " .. a:path("c") .. ", check " .. a.require("guard").pmark_path(a:path("c"))
        a:fail_next({ op = "multi", path = commit, pass = true, latency = 50 })
        local ta = a:start("EVAL", body, "1", "c")
        W:advance(5)
        local tb = b:start("SET", "c", "10")
        W:run_until(function() return ta.done and tb.done end)
        assert.same({ ok = "OK" }, tb.result)
        assert.equal(11, ta.result)
        assert.equal("11", b:call("GET", "c"))
    end)

    it("asserts that keys read as absent are still absent", function()
        local body = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[2], tostring(v)) return 1"
        a:fail_next({ op = "multi", pass = true, latency = 50 })
        local ta = a:start("EVAL", body, "2", "src", "dst")
        W:advance(5)
        local tb = b:start("SET", "src", "here")
        W:run_until(function() return ta.done and tb.done end)
        assert.equal(1, ta.result)
        assert.equal("here", b:call("GET", "dst"))
    end)

    it("keeps a counter exact under concurrent scripts on two sidecars", function()
        local body = "local v = tonumber(redis.call('get', KEYS[1]) or '0') redis.call('set', KEYS[1], v + 1) return v + 1"
        local tasks = {}
        for i = 1, 20 do
            tasks[#tasks + 1] = (i % 2 == 0 and a or b):start("EVAL", body, "1", "n")
        end
        W:run_until(function()
            for _, t in ipairs(tasks) do if not t.done then return false end end
            return true
        end)
        local ok = 0
        for _, t in ipairs(tasks) do if math.type(t.result) == "integer" then ok = ok + 1 end end
        assert.equal(tostring(ok), a:call("GET", "n"))
        assert.is_true(ok >= 10)
    end)

    it("resolves a commit whose outcome was lost", function()
        a:fail_next({ op = "multi", when = "after" })
        assert.equal(1, a:call("EVAL", "redis.call('set', KEYS[1], 'v') return 1", "1", "u"))
        assert.equal("v", b:call("GET", "u"))
        a:fail_next({ op = "multi", when = "before" })
        assert.equal(1, a:call("EVAL", "redis.call('set', KEYS[1], 'w') redis.call('set', KEYS[2], 'w') return 1", "2", "u", "u2"))
        assert.equal("w", b:call("GET", "u"))
        assert.equal("w", b:call("GET", "u2"))
    end)

    it("releases a lock a script took in one ZooKeeper request (the owned-key cache)", function()
        local acquire = "if redis.call('exists', KEYS[1]) == 1 then return 0 end " ..
                        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1"
        local release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
        assert.equal(1, a:call("EVAL", acquire, "1", "L", "tok", "10000"))
        W:advance(10) -- the background watch is armed
        W.ops = {}
        assert.equal(1, a:call("EVAL", release, "1", "L", "tok"))
        assert.same({ "multi" }, (function()
            local kinds = {}
            for _, op in ipairs(W.ops) do
                if not S.script_cache_op(op) then kinds[#kinds + 1] = op.kind end
            end
            return kinds
        end)())
        assert.is_nil(W:node(a:path("L")))
        -- A stale cache is never trusted for a write: b takes the key over,
        -- a's compare-and-delete reads again and fails.
        assert.equal(1, a:call("EVAL", acquire, "1", "L", "tok", "10000"))
        W:advance(10)
        assert.same({ ok = "OK" }, b:call("SET", "L", "other"))
        assert.equal(0, a:call("EVAL", release, "1", "L", "tok"))
        assert.equal("other", b:call("GET", "L"))
    end)

    it("validates a read-only script's cached read with a check", function()
        a:call("SET", "C", "mine", "PX", "10000")
        W:advance(10)
        W.ops = {}
        assert.equal("mine", a:call("EVAL", "return redis.call('get', KEYS[1])", "1", "C"))
        assert.same({ "multi" }, (function()
            local kinds = {}
            for _, op in ipairs(W.ops) do
                if not S.script_cache_op(op) then kinds[#kinds + 1] = op.kind end
            end
            return kinds
        end)())
        -- A key read from ZooKeeper needs nothing more.
        b:call("SET", "P", "x")
        W.ops = {}
        assert.equal("x", a:call("EVAL", "return redis.call('get', KEYS[1])", "1", "P"))
        assert.equal(1, #W.ops)
        assert.equal("get", W.ops[1].kind)
    end)

    describe("presumed absence", function()
        -- The kinds of a's operations since W.ops was emptied.
        local function kinds()
            local list = {}
            for _, op in ipairs(W.ops) do
                if op.sc == a.id and not S.script_cache_op(op) then list[#list + 1] = op.kind end
            end
            return list
        end
        local acquire = "if redis.call('exists', KEYS[1]) == 0 then " ..
                        "redis.call('hincrby', KEYS[1], ARGV[1], 1) " ..
                        "redis.call('pexpire', KEYS[1], 30000) return nil end " ..
                        "return redis.call('pttl', KEYS[1])"
        -- Redisson's unlock: a per-call latch key read first, then written
        -- (without its publish, whose routes are read once).
        local unlock = "local val = redis.call('get', KEYS[3]) " ..
                       "if val ~= false then return tonumber(val) end " ..
                       "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end " ..
                       "redis.call('del', KEYS[1]) " ..
                       "redis.call('set', KEYS[3], 1, 'px', 5000) return 1"

        it("sends no read for a key not seen to exist: the commit proves it absent", function()
            W.ops = {}
            assert.equal(a.null, a:call("EVAL", acquire, "1", "L", "id:1"))
            assert.same({ "create" }, kinds())
            W:advance(10)
            W.ops = {}
            assert.equal(1, a:call("EVAL", unlock, "3", "L", "ch", "latch:1", "id:1"))
            assert.same({ "multi" }, kinds())
            assert.is_nil(W:node(a:path("L")))
            assert.equal("1", b:call("GET", "latch:1"))
            -- the latch is there now: the same call again answers from it
            assert.equal(1, a:call("EVAL", unlock, "3", "L", "ch", "latch:1", "id:1"))
        end)

        it("runs again at once, reading, when a presumed key exists", function()
            b:call("SET", "n", "41")
            b:call("SET", "c", "10")
            b:call("SET", "x", "1")
            b:call("SET", "y", "2")
            -- a failed script: it must not fail on a key it only guessed absent
            assert.equal(42, a:call("EVAL", "return redis.call('get', KEYS[1]) + 1", "1", "n"))
            -- a write: the create fails, the re-run reads and sets
            W.ops = {}
            local t1 = W.now
            local incr = "local v = tonumber(redis.call('get', KEYS[1]) or '0') " ..
                         "redis.call('set', KEYS[1], v + 1) return v + 1"
            assert.equal(11, a:call("EVAL", incr, "1", "c"))
            -- (a write of a persistent key read checks its mark: read
            -- once, then known; made first, as the first use of a mark on
            -- a root does)
            assert.same({ "create", "get", "exists", "create", "exists", "get", "multi" }, kinds())
            -- seven round trips, no jittered sleep before the re-runs
            assert.equal(7, W.now - t1)
            assert.equal("11", b:call("GET", "c"))
            -- a read-only script of two keys: its commit's assertions fail
            assert.same({ "1", "2" }, a:call("EVAL", "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}",
                                             "2", "x", "y"))
            -- keys seen to exist, written or read, are read from then on
            W.ops = {}
            assert.equal(12, a:call("EVAL", incr, "1", "c"))
            assert.same({ "get", "multi" }, kinds())
            b:call("SET", "z", "5")
            assert.equal("5", a:call("GET", "z"))
            W.ops = {}
            assert.equal(6, a:call("EVAL", incr, "1", "z"))
            -- (z's mark not known to a yet, nor made)
            assert.same({ "get", "exists", "create", "exists", "get", "multi" }, kinds())
            W.ops = {}
            assert.equal(7, a:call("EVAL", incr, "1", "z"))
            assert.same({ "get", "multi" }, kinds())
        end)

        it("presumes again a key it saw deleted", function()
            b:call("SET", "k", "v")
            assert.equal("v", a:call("GET", "k"))
            assert.equal(1, a:call("DEL", "k"))
            W.ops = {}
            assert.equal(a.null, a:call("EVAL", acquire, "1", "k", "id:1"))
            assert.same({ "create" }, kinds())
        end)
    end)

    it("keeps the lifetime rule: a key with a TTL is ephemeral", function()
        a:call("EVAL", "redis.call('set', KEYS[1], 'v', 'PX', 10000) redis.call('set', KEYS[2], 'p') return 1", "2", "e", "p")
        assert.is_true(W:node(a:path("e")).stat.ephemeralOwner ~= 0)
        assert.equal(0, W:node(a:path("p")).stat.ephemeralOwner)
        assert.is_true(a:call("PTTL", "e") > 9000)
    end)
end)
