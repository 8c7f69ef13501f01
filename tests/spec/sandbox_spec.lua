-- The client-script sandbox (RELIABILITY.md case 24): what scripts can and
-- cannot reach, the Lua 5.1 behaviours they rely on, and the caps.

local zkmodel = require "zkmodel"
local null = zkmodel.null

local function errtext(r)
    assert.is_table(r)
    assert.is_string(r.err)
    return r.err
end

describe("sandbox", function()
    local W, a
    before_each(function()
        W = zkmodel.world()
        a = W:sidecar()
    end)

    local function eval(body, ...)
        return a:call("EVAL", body, ...)
    end

    it("has no os.execute (os has clock only)", function()
        assert.truthy(errtext(eval("return os.execute('true')", "0")):find("attempt to call a nil value", 1, true))
        assert.equal("number", eval("return type(os.clock())", "0"))
        assert.equal(null, eval("return os.getenv", "0"))
    end)

    it("has no io", function()
        assert.truthy(errtext(eval("return io.open('/etc/passwd')", "0")):find(
            "Script attempted to access nonexistent global variable 'io'", 1, true))
    end)

    it("has no require, package, dofile or loadfile", function()
        for _, name in ipairs({ "require", "package", "dofile", "loadfile" }) do
            assert.truthy(errtext(eval("return " .. name, "0")):find(
                "nonexistent global variable '" .. name .. "'", 1, true), name)
        end
    end)

    it("refuses to load bytecode", function()
        local bytecode = string.dump(function() return 1 end)
        local r = eval("local f, e = load(ARGV[1], 'x', 'b') return {tostring(f), e}", "0", bytecode)
        assert.equal("nil", r[1])
        assert.truthy(r[2]:find("binary chunk", 1, true))
        assert.equal(7, eval("return load('return 7')()", "0"))
    end)

    it("has no string.dump", function()
        assert.truthy(errtext(eval("return string.dump(function() end)", "0")):find("attempt to call a nil value", 1, true))
        assert.truthy(errtext(eval("return ('x').dump(function() end)", "0")):find("attempt to call a nil value", 1, true))
    end)

    it("has no debug and no coroutine", function()
        assert.truthy(errtext(eval("return debug.getinfo(1)", "0")):find("nonexistent global variable 'debug'", 1, true))
        assert.truthy(errtext(eval("return coroutine.yield()", "0")):find("nonexistent global variable 'coroutine'", 1, true))
        assert.equal("pong", a:call("EVAL", "return 'pong'", "0"))
    end)

    it("refuses to create globals", function()
        local r = errtext(eval("x = 1", "0"))
        assert.truthy(r:find("^ERR user_script:1: Attempt to modify a readonly table script: "))
        assert.truthy(errtext(eval("rawset(_G, 'x', 1)", "0")):find("^ERR Attempt to modify a readonly table script: "))
        assert.truthy(errtext(eval("return nope", "0")):find("nonexistent global variable 'nope'", 1, true))
    end)

    it("protects the shared tables and the string metatable", function()
        assert.truthy(errtext(eval("getmetatable('').__index = {}", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("getmetatable('').__index.upper = nil", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("string.rep = nil", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("rawset(string, 'rep', nil)", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("setmetatable(_G, nil)", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("redis.call = function() end", "0")):find("readonly table", 1, true))
        assert.truthy(errtext(eval("math.max = nil", "0")):find("readonly table", 1, true))
        -- Everything still works afterwards, for scripts and the system.
        assert.equal("XX", eval("return ('xx'):upper()", "0"))
        assert.same({ ok = "OK" }, a:call("SET", "k", "v"))
        assert.equal("v", eval("return redis.call('get', KEYS[1])", "1", "k"))
    end)

    it("keeps the Lua 5.1 behaviours scripts rely on", function()
        assert.equal(10, eval("return math.max('10', 3)", "0"))
        assert.equal(3, eval("return math.min('5', '3')", "0"))
        assert.equal(1, eval("return unpack({1,2})", "0"))
        assert.equal(3, eval("return bit.band(7,3)", "0"))
        assert.equal("000000ff", eval("return bit.tohex(255)", "0"))
        assert.equal(-1, eval("return bit.bnot(0)", "0"))
        assert.equal("[1,2,\"a\"]", eval("return cjson.encode({1,2,'a'})", "0"))
        assert.same({ 1, 2, "x", null, 1 }, eval("return cjson.decode('[1,2.5,\"x\",null,true]')", "0"))
        assert.equal("3", eval("return tostring(3.0)", "0"))
        assert.equal(11, eval("return '10' + 1", "0"))
        assert.equal(3, eval("return redis.LOG_WARNING", "0"))
        assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", eval("return redis.sha1hex('abc')", "0"))
    end)

    it("aborts an infinite loop at the time cap, with no write committed", function()
        a.config.script_time_limit = 200
        local fake = a.host.now
        local t0 = os.clock()
        a.host.now = function() return fake() + (os.clock() - t0) * 1000 end
        local r = errtext(eval("redis.call('set', KEYS[1], 'v') while true do end", "1", "loop"))
        a.host.now = fake
        assert.truthy(r:find("^ERR Script ran past the time limit of 200 ms and was aborted, nothing was written script: "))
        assert.is_nil(W:node(a:path("loop")))
        assert.equal(null, a:call("GET", "loop"))
        -- pcall inside the script cannot catch the abort.
        t0 = os.clock()
        a.host.now = function() return fake() + (os.clock() - t0) * 1000 end
        r = errtext(eval("while true do pcall(function() while true do end end) end", "0"))
        a.host.now = fake
        assert.truthy(r:find("time limit", 1, true))
        -- Nor a loop of redis.call (a cached GET does not even yield).
        a:call("SET", "k", "v", "PX", "100000")
        t0 = os.clock()
        a.host.now = function() return fake() + (os.clock() - t0) * 1000 end
        r = errtext(eval("while true do redis.call('get', KEYS[1]) end", "1", "k"))
        a.host.now = fake
        assert.truthy(r:find("time limit", 1, true))
        assert.equal("ok", eval("return 'ok'", "0"))
    end)

    it("aborts a memory bomb at the memory cap", function()
        a.config.script_memory_limit = 8 * 1024 * 1024
        local r = errtext(eval("redis.call('set', KEYS[1], 'v') local t = {} local s = 'x' " ..
                               "while true do s = s .. s t[#t + 1] = s end", "1", "bomb"))
        assert.truthy(r:find("^ERR Script exceeded the memory limit of 8192 KB and was aborted, nothing was written script: "))
        assert.is_nil(W:node(a:path("bomb")))
        r = errtext(eval("return string.rep('x', 1e12)", "0"))
        assert.truthy(r:find("memory limit", 1, true))
        r = errtext(eval("return ('x'):rep(1e12)", "0"))
        assert.truthy(r:find("memory limit", 1, true))
        assert.equal("ok", eval("return 'ok'", "0"))
    end)
end)
