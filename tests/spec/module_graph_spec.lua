-- The Lua layer is a one-way graph (issue 17): no module of scripts/
-- requires one that, directly or through others, requires it back.  Read
-- from the source: every literal require "x" / require("x") / require 'x'
-- outside comments, lazy ones inside functions included.

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "tests/spec"
local root = here:gsub("/?tests/spec$", "")
if root == "" then root = "." end
local SCRIPTS = root .. "/scripts"

-- Edges allowed to close a cycle, "from -> to".  Empty: add one only with
-- the issue that removes it.
local ALLOWED = {}

-- The source without comments (long comments, then line comments; a "--"
-- inside a string is rare enough in scripts/ to cut a line short, which
-- can only hide a require, and the requires below stay on their own lines).
local function strip_comments(src)
    src = src:gsub("%-%-%[(=*)%[.-%]%1%]", "")
    return (src:gsub("%-%-[^\n]*", ""))
end

local function requires_of(src)
    local out, seen = {}, {}
    src = strip_comments(src)
    for _, pat in ipairs({ "require%s*%(?%s*\"([%w_%.]+)\"", "require%s*%(?%s*'([%w_%.]+)'" }) do
        for name in src:gmatch(pat) do
            if not seen[name] then
                seen[name] = true
                out[#out + 1] = name
            end
        end
    end
    table.sort(out)
    return out
end

local function modules()
    local mods = {}
    local p = assert(io.popen('ls "' .. SCRIPTS .. '"'))
    for f in p:lines() do
        local name = f:match("^(.+)%.lua$")
        if name then
            local fh = assert(io.open(SCRIPTS .. "/" .. f))
            mods[name] = requires_of(fh:read("a"))
            fh:close()
        end
    end
    p:close()
    return mods
end

-- Every cycle found by a depth-first walk, each as "a -> b -> ... -> a".
local function cycles(graph)
    local found, state, stack = {}, {}, {}
    local function walk(m)
        state[m] = "open"
        stack[#stack + 1] = m
        for _, dep in ipairs(graph[m] or {}) do
            if graph[dep] and not ALLOWED[m .. " -> " .. dep] then
                if state[dep] == "open" then
                    local path, on = {}, false
                    for _, s in ipairs(stack) do
                        if s == dep then on = true end
                        if on then path[#path + 1] = s end
                    end
                    path[#path + 1] = dep
                    found[#found + 1] = table.concat(path, " -> ")
                elseif not state[dep] then
                    walk(dep)
                end
            end
        end
        stack[#stack] = nil
        state[m] = "done"
    end
    local names = {}
    for m in pairs(graph) do names[#names + 1] = m end
    table.sort(names)
    for _, m in ipairs(names) do
        if not state[m] then walk(m) end
    end
    return found
end

describe("the Lua module graph", function()
    it("reads the requires of scripts/", function()
        local mods = modules()
        assert.is_not_nil(mods.keyspace)
        assert.same({ "codec", "errors", "expiry", "guard", "hooks", "owned", "queue", "resolve",
                      "shared", "signal", "zkio" }, mods.keyspace)
        assert.same({ "a", "b" }, requires_of('local a = require "a"\n-- require "c"\n' ..
                                              '--[[ require "d" ]]\nlocal b = require("b")'))
    end)

    it("has no cycle", function()
        local found = cycles(modules())
        assert.same({}, found, "require cycles:\n" .. table.concat(found, "\n"))
    end)

    it("finds a cycle when there is one", function()
        assert.same({ "a -> b -> c -> a" }, cycles({ a = { "b" }, b = { "c" }, c = { "a" } }))
    end)
end)
