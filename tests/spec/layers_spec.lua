-- layers_spec.lua — the layout rules of the README's Layout section:
-- gateway/ (client connections, RESP, dispatch) sits on top of sidecar/ (Lua
-- host, ZooKeeper bridge, config, log, http, metrics), so no file in
-- sidecar/ includes a header of gateway/; no C file in either is over
-- 1,200 lines, and no Lua file of scripts/ over 700 (module_graph_spec.lua
-- checks the Lua requires).

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "tests/spec"
local root = here:gsub("/?tests/spec$", "")
if root == "" then root = "." end

local MAX_LINES = 1200
local MAX_LUA_LINES = 700

-- The files of dir (relative to the repo root) whose names match pattern,
-- sorted.
local function files(dir, pattern)
    local out = {}
    local p = assert(io.popen("ls '" .. root .. "/" .. dir .. "'"))
    for name in p:lines() do
        if name:match(pattern) then out[#out + 1] = name end
    end
    p:close()
    table.sort(out)
    return out
end

-- The C sources and headers of dir.
local function c_files(dir) return files(dir, "%.[ch]$") end

local function lines_of(path)
    local f = assert(io.open(path, "r"))
    local t = {}
    for line in f:lines() do t[#t + 1] = line end
    f:close()
    return t
end

describe("the C layers", function()
    it("finds the C files of both layers", function()
        assert.is_true(#c_files("sidecar") > 10)
        assert.is_true(#c_files("gateway") > 5)
    end)

    it("sidecar/ never includes a gateway/ header", function()
        local gateway = {}
        for _, h in ipairs(c_files("gateway")) do
            if h:match("%.h$") then gateway[h] = true end
        end
        local bad = {}
        for _, name in ipairs(c_files("sidecar")) do
            assert.is_nil(gateway[name], "sidecar/" .. name .. " shadows gateway/" .. name)
            for n, line in ipairs(lines_of(root .. "/sidecar/" .. name)) do
                local inc = line:match('^%s*#%s*include%s*"([^"]+)"')
                if inc and (gateway[inc] or inc:match("^gateway/") or inc:match("%.%./")) then
                    bad[#bad + 1] = ("sidecar/%s:%d includes %s"):format(name, n, inc)
                end
            end
        end
        assert.are.same({}, bad)
    end)

    it("keeps every C file of sidecar/ and gateway/ at most 1,200 lines", function()
        local long = {}
        for _, dir in ipairs({ "sidecar", "gateway" }) do
            for _, name in ipairs(c_files(dir)) do
                local n = #lines_of(root .. "/" .. dir .. "/" .. name)
                if n > MAX_LINES then
                    long[#long + 1] = ("%s/%s: %d lines"):format(dir, name, n)
                end
            end
        end
        assert.are.same({}, long)
    end)

    it("keeps every Lua file of scripts/ at most 700 lines", function()
        local names = files("scripts", "%.lua$")
        assert.is_true(#names > 20)
        local long = {}
        for _, name in ipairs(names) do
            local n = #lines_of(root .. "/scripts/" .. name)
            if n > MAX_LUA_LINES then long[#long + 1] = ("scripts/%s: %d lines"):format(name, n) end
        end
        assert.are.same({}, long)
    end)
end)
