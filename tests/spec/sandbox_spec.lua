-- The client-script sandbox (RELIABILITY.md case 24): what scripts can and
-- cannot reach, the Lua 5.1 behaviours they rely on, and the caps.

local S = require "world"
local null = S.null

local function errtext(r)
    assert.is_table(r)
    assert.is_string(r.err)
    return r.err
end

describe("sandbox", function()
    local W, a
    before_each(function()
        W, a = S.world(1)
    end)

    local function eval(body, ...)
        return a:call("EVAL", body, ...)
    end

    it("has no os.execute (os has clock only)", function()
        assert.truthy(errtext(eval("return os.execute('true')", "0")):find("attempt to call field 'execute' (a nil value)", 1, true))
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
        assert.truthy(errtext(eval("return string.dump(function() end)", "0")):find("attempt to call field 'dump' (a nil value)", 1, true))
        assert.truthy(errtext(eval("return ('x').dump(function() end)", "0")):find("attempt to call field 'dump' (a nil value)", 1, true))
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
    -- Issue 15 item 2: a finalizer planted by one client's script ran in
    -- another client's script (whichever the collector ran in) and
    -- rewrote its KEYS and ARGV.
    it("never runs one script's finalizer inside another's", function()
        local attacker = "local function mk() setmetatable({}, {__gc=function() pcall(function() " ..
                         "if KEYS and KEYS[1] then KEYS[1]='attacker:'..KEYS[1]; ARGV[1]='pwned' end end) " ..
                         "mk() end}) end mk()"
        local victim = "local j={} for i=1,200000 do j[i]={i} end return redis.call('SET',KEYS[1],ARGV[1])"
        assert.equal(null, a:call_as(1, "EVAL", attacker, "0"))
        for i = 1, 3 do
            local key = "victim:" .. i
            assert.same({ ok = "OK" }, a:call_as(2, "EVAL", victim, "1", key, "secret-token"))
            assert.equal("secret-token", a:call("GET", key))
            assert.equal(0, a:call("EXISTS", "attacker:" .. key))
        end
        -- As in Lua 5.1: the field is there and does nothing.
        assert.equal("function", eval("local t = setmetatable({}, {__gc = function() error('ran') end}) " ..
                                      "collectgarbage() return type(getmetatable(t).__gc)", "0"))
        assert.equal("done", eval("setmetatable({}, {__gc=function() while true do end end}) " ..
                                  "collectgarbage() collectgarbage() return 'done'", "0"))
    end)

    -- Issue 15 item 3: __close handlers ran with the time cap off, during
    -- the unwinding of a kill or of the script's own error.
    it("keeps __close handlers under the time cap", function()
        a.config.script_time_limit = 100
        local fake = a.host.now
        local endless = "setmetatable({}, {__close=function() while true do end end})"
        for _, body in ipairs({
            "local t <close> = " .. endless .. " while true do end",
            "local t <close> = " .. endless .. " error('boom')",
            "local t <close> = " .. endless .. " return 1",
            "pcall(function() local t <close> = " .. endless .. " while true do end end) return 1",
            "pcall(function() local t <close> = " .. endless .. " error('boom') end) return 1",
            "for _ in next, {}, nil, " .. endless .. " do end return 1",
            "local t <close> = setmetatable({}, {__close = error}) while true do end",
        }) do
            local t0 = os.clock()
            a.host.now = function() return fake() + (os.clock() - t0) * 1000 end
            local r = eval(body, "0")
            a.host.now = fake
            assert.truthy(errtext(r):find("time limit of 100 ms", 1, true), body)
        end
        assert.equal("ok", eval("return 'ok'", "0"))
    end)

    it("never runs a script's metamethods outside its caps", function()
        -- The reply and the error object are read raw, after the caps.
        assert.same({}, eval("return setmetatable({}, {__index = function() while true do end end})", "0"))
        local r = errtext(eval("error(setmetatable({}, {__index = function() while true do end end}))", "0"))
        assert.truthy(r:find("^ERR unknown error script: "))
        -- An __eq on the error's metatable is not consulted either.
        r = errtext(eval("local mt = setmetatable({}, {__eq = function() while true do end end}) " ..
                         "error(setmetatable({}, {__metatable = mt}))", "0"))
        assert.truthy(r:find("^ERR unknown error script: "))
        r = eval("return {pcall(error, setmetatable({}, {__metatable = setmetatable({}, " ..
                 "{__eq = function() while true do end end})}))}", "0")
        assert.same({ null }, { r[1] })
    end)

    it("gives a killed script no second chance through pcall", function()
        a.config.script_time_limit = 100
        local fake = a.host.now
        local t0 = os.clock()
        a.host.now = function() return fake() + (os.clock() - t0) * 1000 end
        local r = eval("local n = 0 while true do pcall(function() while true do end end) n = n + 1 " ..
                       "if n > 3 then return 'escaped' end end", "0")
        a.host.now = fake
        assert.truthy(errtext(r):find("time limit", 1, true))
    end)

    -- Issue 15 item 6: while a script runs past a slice (the C host pauses
    -- it; the model is told to), the other clients get Redis's -BUSY and
    -- SCRIPT KILL ends it.
    it("answers -BUSY while another client's script is paused, and SCRIPT KILL kills it", function()
        local BUSY = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
        local b = W:sidecar()
        assert.same({ ok = "OK" }, b:call("SET", "k", "v"))
        assert.same({ err = "NOTBUSY No scripts in execution right now." }, a:call_as(2, "SCRIPT", "KILL"))
        local body = "local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[2], v) return v"
        local t = a:start("EVAL", body, "2", "k", "copy")
        W:run_until(function() return t.yielded ~= nil end)
        a:pause_script(t)
        assert.same({ err = BUSY }, a:call_as(2, "GET", "k"))
        assert.same({ err = BUSY }, a:call_as(2, "EVAL", "return 1", "0"))
        -- The script's own client is served (its pipelined commands).
        assert.equal(1, a:call_as(1, "EVAL", "return 1", "0"))
        assert.same({ ok = "OK" }, a:call_as(2, "SCRIPT", "KILL"))
        W:run_until(function() return t.done end)
        assert.same({ err = "ERR Script killed by user with SCRIPT KILL... script: " ..
                           a.require("sha1").hex(body) .. ", on @user_script:1." }, t.result)
        assert.same({ err = "NOTBUSY No scripts in execution right now." }, a:call_as(2, "SCRIPT", "KILL"))
        assert.is_nil(W:node(a:path("copy")))
        assert.equal("v", a:call_as(2, "GET", "k"))
        assert.equal("v", a:call_as(2, "EVAL", body, "2", "k", "copy"))
        assert.equal("v", a:call("GET", "copy"))
    end)
end)
