-- script_cache.lua: one script cache for every sidecar, over the model
-- ensemble (the real server: tests/integration/test_41_shared_script_cache.py).

local S = require "world"
local OK, E = S.OK, S.E

local NOSCRIPT = E("NOSCRIPT No matching script. Please use EVAL.")
local BODY = "return 'one'"
local OTHER = "return 'two'"

local function sha(sc, body) return sc.require("sha1").hex(body) end

describe("the shared script cache", function()
    local W, a, b
    before_each(function()
        W, a, b = S.world(2)
    end)

    local function dir() return a.require("zkio").root_dir("s") end

    it("runs through one sidecar what was loaded through the other", function()
        assert.equal(sha(a, BODY), a:call("SCRIPT", "LOAD", BODY))
        assert.equal(BODY, W:node(dir() .. "/" .. sha(a, BODY)).data)
        assert.equal("one", b:call("EVALSHA", sha(a, BODY), "0"))
        assert.equal("one", b:call("EVALSHA", sha(a, BODY):upper(), "0"))
        assert.same({ 1, 0 }, b:call("SCRIPT", "EXISTS", sha(a, BODY), sha(a, OTHER)))
        assert.same(NOSCRIPT, b:call("EVALSHA", "../k/" .. string.rep("0", 35), "0"))
    end)

    it("makes an EVALed script known everywhere, once, in the background", function()
        assert.equal("two", a:call("EVAL", OTHER, "0"))
        W:advance(50)
        assert.equal("two", b:call("EVALSHA", sha(a, OTHER), "0"))
        local v = W:node(dir() .. "/" .. sha(a, OTHER)).stat.mzxid
        assert.equal("two", a:call("EVAL", OTHER, "0"))
        W:advance(50)
        assert.equal(v, W:node(dir() .. "/" .. sha(a, OTHER)).stat.mzxid)
    end)

    it("publishes an EVAL that came before its sidecar knew the generation", function()
        a:run(function() a.require("script_cache").on_session("lost") end)
        assert.equal("two", a:call("EVAL", OTHER, "0"))
        W:advance(50)
        assert.equal("two", b:call("EVALSHA", sha(a, OTHER), "0"))
    end)

    it("forgets everywhere on SCRIPT FLUSH, local caches included", function()
        a:call("SCRIPT", "LOAD", BODY)
        assert.equal("one", b:call("EVALSHA", sha(a, BODY), "0"))
        assert.equal("one", a:call("EVALSHA", sha(a, BODY), "0"))
        assert.same(OK, b:call("SCRIPT", "FLUSH"))
        assert.same({}, W:children(dir()))
        assert.same(NOSCRIPT, a:call("EVALSHA", sha(a, BODY), "0"))
        assert.same(NOSCRIPT, b:call("EVALSHA", sha(a, BODY), "0"))
        -- EVAL afterwards publishes it again
        assert.equal("one", a:call("EVAL", BODY, "0"))
        W:advance(50)
        assert.equal("one", b:call("EVALSHA", sha(a, BODY), "0"))
    end)

    it("never lets an EVAL answered before a FLUSH outlive it", function()
        assert.equal("two", a:call("EVAL", OTHER, "0"))
        -- the background create has not landed yet
        assert.is_nil(W:node(dir() .. "/" .. sha(a, OTHER)))
        assert.same(OK, b:call("SCRIPT", "FLUSH"))
        W:advance(100)
        assert.same({}, W:children(dir()))
        assert.same(NOSCRIPT, b:call("EVALSHA", sha(a, OTHER), "0"))
    end)

    it("drops what a sidecar read while a FLUSH deleted", function()
        a:call("SCRIPT", "LOAD", BODY)
        local flush = a:start("SCRIPT", "FLUSH")
        local reader = b:start("EVALSHA", sha(a, BODY), "0")
        W:run_until(function() return flush.done and reader.done end)
        assert.same(OK, flush.result)
        assert.same(NOSCRIPT, b:call("EVALSHA", sha(a, BODY), "0"))
    end)

    it("answers NOSCRIPT when a FLUSH lands while EVALSHA reads the key it presumed absent", function()
        -- the key was never seen, so the script runs on the presumption and
        -- reads the key only before answering: the FLUSH's watch event comes
        -- before that read's answer, and the script must not answer from the
        -- flushed body
        local RO = "return redis.call('exists', KEYS[1])"
        a:call("SCRIPT", "LOAD", RO)
        assert.equal(0, b:call("EVALSHA", sha(a, RO), "1", "never"))
        b:fail_next({ pass = true, latency = 50 })
        local reader = b:start("EVALSHA", sha(a, RO), "1", "never")
        local flush = a:start("SCRIPT", "FLUSH")
        W:run_until(function() return flush.done and reader.done end)
        assert.same(OK, flush.result)
        assert.same(NOSCRIPT, reader.result)
    end)

    it("refuses SCRIPT LOAD while ZooKeeper is away; a cached script still runs", function()
        a:call("SCRIPT", "LOAD", BODY)
        a:disconnect()
        assert.equal("one", a:call("EVALSHA", sha(a, BODY), "0"))
        assert.same(S.UNAVAILABLE, a:call("SCRIPT", "LOAD", OTHER))
        a:reconnect()
        assert.equal(sha(a, OTHER), a:call("SCRIPT", "LOAD", OTHER))
    end)
end)

describe("the local script cache", function()
    it("evicts EVAL scripts least recently used first, never loaded ones", function()
        local C = S.module("script_cache")
        C.EVAL_LOCAL_MAX = 2
        C.put("l", "x", print, "load")
        C.put("e1", "x", print, "eval")
        C.put("e2", "x", print, "eval")
        assert.truthy(C.get("e1")) -- e2 is now the least recently used
        C.put("e3", "x", print, "eval")
        assert.truthy(C.get("l"))
        assert.truthy(C.get("e1"))
        assert.is_nil(C.get("e2"))
        assert.truthy(C.get("e3"))
        C.put("e1", "x", print, "load") -- loaded: out of the LRU
        C.put("e4", "x", print, "eval")
        C.put("e5", "x", print, "eval")
        assert.truthy(C.get("e1"))
        assert.is_nil(C.get("e3"))
        assert.equal(4, C.count()) -- l, e1, e4, e5
    end)

    it("finds a script by its body, except one whose body was read from ZooKeeper", function()
        local _, sc = S.world(1)
        local C, sha1 = sc.require("script_cache"), sc.require("sha1")
        local hex = sha1.hex
        local hashed = 0
        -- the entry looked up by body, and whether that hashed the body
        local function lookup(body)
            local n = hashed
            sha1.hex = function(x) hashed = hashed + 1 return hex(x) end
            local e = C.lookup_body(body)
            sha1.hex = hex
            return e, hashed > n
        end
        C.EVAL_LOCAL_MAX = 1
        local long = "return 1 -- " .. string.rep("x", 60)
        local e = C.put(hex(long), long, print, "eval")
        assert.same({ e, false }, { lookup(long) })
        assert.same({ e, false }, { lookup((long .. " "):sub(1, #long)) }) -- (another string, same body)
        C.put(hex("return 2"), "return 2", print, "eval") -- the first evicted
        assert.same({ nil, true }, { lookup(long) })
        -- a body read from <root>/s/<sha> is indexed once its SHA-1 was
        -- computed here and matched: a node's content is not taken on trust
        local sh = C.put(hex("return 3"), "return 3", print, "shared")
        assert.same({ sh, true }, { lookup("return 3") })
        assert.same({ sh, false }, { lookup("return 3") })
        local odd = C.put(hex("return 5"), "return 4", print, "shared")
        assert.same({ odd, true }, { lookup("return 5") })
        assert.same({ odd, true }, { lookup("return 5") })
        C.drop_all()
        assert.same({ nil, true }, { lookup("return 2") })
        assert.same({ nil, true }, { lookup("return 3") })
    end)

    it("EVAL computes the SHA-1 of a body it has run once, and again after a FLUSH", function()
        local W, a = S.world(1)
        local sha1 = a.require("sha1")
        local hex, n = sha1.hex, 0
        sha1.hex = function(s) n = n + 1 return hex(s) end
        for _ = 1, 3 do assert.equal("one", a:call("EVAL", BODY, "0")) end
        assert.equal(1, n)
        assert.same(OK, a:call("SCRIPT", "FLUSH"))
        W:advance(10)
        assert.same(NOSCRIPT, a:call("EVALSHA", hex(BODY), "0"))
        for _ = 1, 2 do assert.equal("one", a:call("EVAL", BODY, "0")) end
        assert.equal(2, n)
        assert.equal("one", a:call("EVALSHA", hex(BODY), "0"))
        sha1.hex = hex
    end)

    it("keeps nothing read before the cache was dropped", function()
        local C = S.module("script_cache")
        C.put("a", "x", print, "load")
        C.drop_all()
        assert.is_nil(C.get("a"))
        C.put("b", "x", print, "shared", -1)
        assert.is_nil(C.get("b"))
    end)
end)
