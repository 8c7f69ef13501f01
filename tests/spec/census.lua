-- census: every table reachable from a sidecar's modules (their fields and
-- their functions' upvalues), by a stable name, with its entry count.
local C = {}

local function count(t) local n = 0 for _ in next, t do n = n + 1 end return n end
C.count = count

-- The first upvalue named `name` reachable from module `mod`'s functions
-- (through nested functions, up to depth 3).
function C.upvalue(sc, mod, name)
    local seen = {}
    local function search(f, depth)
        if seen[f] or depth == 0 then return nil end
        seen[f] = true
        for i = 1, 255 do
            local n, v = debug.getupvalue(f, i)
            if not n then break end
            if n == name then return v end
        end
        for i = 1, 255 do
            local n, v = debug.getupvalue(f, i)
            if not n then break end
            if type(v) == "function" then
                local r = search(v, depth - 1)
                if r ~= nil then return r end
            end
        end
    end
    for _, f in pairs(sc.require(mod)) do
        if type(f) == "function" then
            local r = search(f, 3)
            if r ~= nil then return r end
        end
    end
    error("no upvalue " .. name .. " in " .. mod)
end

-- The entry counts of the tables in list ({module, upvalue name [, a
-- function of sc answering the table]}), by "module.name", after a
-- collection.
function C.sizes(sc, list)
    collectgarbage()
    local out = {}
    for _, e in ipairs(list) do
        local t = e[3] and e[3](sc) or C.upvalue(sc, e[1], e[2])
        out[e[1] .. "." .. e[2]] = count(t)
    end
    return out
end

function C.take(sc, structural_max)
    structural_max = structural_max or 64
    collectgarbage(); collectgarbage()
    local seen = { [sc.env] = true, [_G] = true, [sc.host] = true, [sc.zk] = true, [sc] = true,
                   [sc.env.package] = true }
    local out = {}
    local visit, visit_fn
    function visit(t, name, depth)
        if seen[t] then return end
        seen[t] = true
        local n = count(t)
        out[name] = n
        if depth <= 0 then return end
        for k, v in next, t do
            local tk = type(k)
            if tk == "string" or tk == "number" and n <= structural_max then
                local child = name .. "." .. tostring(k)
                if type(v) == "table" and (n <= structural_max or tk == "string" and k:match("^[%a_][%w_]*$") and not k:match("^/")) then
                    if n <= structural_max then visit(v, child, depth - 1) end
                elseif type(v) == "function" and n <= structural_max then
                    visit_fn(v, child, depth - 1)
                end
            end
        end
        local mt = getmetatable(t)
        if type(mt) == "table" then visit(mt, name .. "<mt>", depth - 1) end
    end
    function visit_fn(f, name, depth)
        if seen[f] then return end
        seen[f] = true
        if depth <= 0 then return end
        for i = 1, 255 do
            local un, v = debug.getupvalue(f, i)
            if not un then break end
            if un ~= "_ENV" then
                if type(v) == "table" then visit(v, name .. "^" .. un, depth - 1)
                elseif type(v) == "function" then visit_fn(v, name .. "^" .. un, depth - 1) end
            end
        end
    end
    local loaded = sc.env.package.loaded
    local names = {}
    for k in pairs(loaded) do names[#names + 1] = k end
    table.sort(names)
    for _, m in ipairs(names) do
        local v = loaded[m]
        if type(v) == "table" then visit(v, m, 6) elseif type(v) == "function" then visit_fn(v, m, 6) end
    end
    return out
end

-- Tables that grew by at least `min` entries between two censuses.
function C.grown(before, after, min)
    local list = {}
    for name, n in pairs(after) do
        local b = before[name] or 0
        if n - b >= (min or 1) then list[#list + 1] = { name = name, before = b, after = n } end
    end
    table.sort(list, function(x, y) return x.after - x.before > y.after - y.before end)
    return list
end

function C.show(list)
    local s = {}
    for _, e in ipairs(list) do s[#s + 1] = string.format("%s: %d -> %d", e.name, e.before, e.after) end
    return table.concat(s, "\n")
end

-- The world's own records (ops, logs) cleared, then a full collection:
-- the Lua heap in KB.
function C.heap(W, ...)
    W.ops, W.op_times = {}, {}
    for _, sc in ipairs({ ... }) do sc.logs = {}; sc.pushed = {} end
    collectgarbage(); collectgarbage()
    return collectgarbage("count")
end


-- Deep size (an estimate in bytes: Lua 5.4's table, node and string
-- sizes) of everything reachable from each module's fields and its
-- functions' upvalues, by the first name that reaches it.
function C.deep(sc, W)
    collectgarbage(); collectgarbage()
    local seen = { [sc.env] = true, [_G] = true, [sc.host] = true, [sc.zk] = true, [sc] = true,
                   [sc.env.package] = true, [W or sc.world] = true }
    for _, m in pairs(package.loaded) do if type(m) == "table" then seen[m] = true end end
    for _, m in pairs(_G) do if type(m) == "table" then seen[m] = true end end
    local sizes = {}
    local function size(v)
        local tv = type(v)
        if tv == "string" then
            if seen[v] then return 0 end
            seen[v] = true
            return 24 + #v
        elseif tv == "table" then
            if seen[v] then return 0 end
            seen[v] = true
            local n = 56
            for k, x in next, v do n = n + 32 + size(k) + size(x) end
            local mt = getmetatable(v)
            if type(mt) == "table" then n = n + size(mt) end
            return n
        elseif tv == "function" then
            if seen[v] then return 0 end
            seen[v] = true
            local n = 40
            for i = 1, 255 do
                local un, x = debug.getupvalue(v, i)
                if not un then break end
                n = n + 16
                if un ~= "_ENV" then n = n + size(x) end
            end
            return n
        elseif tv == "thread" then
            if seen[v] then return 0 end
            seen[v] = true
            return 1024
        end
        return 0
    end
    local loaded = sc.env.package.loaded
    local names = {}
    for k in pairs(loaded) do names[#names + 1] = k end
    table.sort(names)
    local roots = {}
    for _, m in ipairs(names) do
        local v = loaded[m]
        if type(v) == "table" then
            seen[v] = true
            local keys = {}
            for k in pairs(v) do if type(k) == "string" then keys[#keys + 1] = k end end
            table.sort(keys)
            for _, k in ipairs(keys) do
                local x = v[k]
                if type(x) == "table" then roots[#roots + 1] = { m .. "." .. k, x } end
            end
            for _, k in ipairs(keys) do
                local x = v[k]
                if type(x) == "function" then roots[#roots + 1] = { m .. "." .. k .. "()", x } end
            end
        elseif type(v) == "function" then
            roots[#roots + 1] = { m .. "()", v }
        end
    end
    -- module functions' upvalues first, by name, so a local table is named
    -- by its upvalue
    local expanded = {}
    for _, r in ipairs(roots) do
        if type(r[2]) == "function" then
            for i = 1, 255 do
                local un, x = debug.getupvalue(r[2], i)
                if not un then break end
                if un ~= "_ENV" and type(x) == "table" then
                    expanded[#expanded + 1] = { r[1]:match("^([^.]+)") .. "^" .. un, x }
                end
            end
        end
    end
    for _, r in ipairs(expanded) do roots[#roots + 1] = r end
    -- tables first, then functions (which reach them again)
    table.sort(roots, function(x, y)
        local fx, fy = type(x[2]) == "function", type(y[2]) == "function"
        if fx ~= fy then return fy end
        return x[1] < y[1]
    end)
    for _, r in ipairs(roots) do
        local s = size(r[2])
        if s > 0 then sizes[r[1]] = (sizes[r[1]] or 0) + s end
    end
    return sizes
end

function C.deep_grown(before, after, min)
    local list = {}
    for name, n in pairs(after) do
        local b = before[name] or 0
        if n - b >= (min or 1) then list[#list + 1] = { name = name, before = b, after = n } end
    end
    table.sort(list, function(x, y) return x.after - x.before > y.after - y.before end)
    return list
end

-- The native locks' per-key tables (lock_left_fuzz_spec's; lock_fuzz_spec
-- adds the key queues', C.QUEUE_TABLES).
C.LOCK_TABLES = {
    { "locks", "holds", function(sc) return sc.LK.holds end },
    { "locks", "by_owner" }, { "locks", "shortened" },
    { "lockwait", "watching" }, { "lockwait", "own" }, { "lockwait", "settling" },
    { "lockwait", "writing" },
}
C.QUEUE_TABLES = { { "queue", "queues" }, { "queue", "conns" } }

-- The lists given, one after another, in a new list.
function C.concat(...)
    local out = {}
    for _, l in ipairs({ ... }) do for _, e in ipairs(l) do out[#out + 1] = e end end
    return out
end

-- The per-key, per-client and per-channel tables a sidecar keeps, which
-- must come back to their size once the keys, clients and channels are
-- gone (long_life_spec, settle_fuzz_spec, restart_fuzz_spec).
C.PER_KEY = C.concat(C.LOCK_TABLES, C.QUEUE_TABLES, {
    { "owned", "owned", function(sc) return sc.K.owned end }, { "owned", "heap" },
    { "expiry", "expiry_waiters" },
    { "cmd_multi", "queues" }, { "cmd_multi", "watches" },
    { "pubsub_local", "clients" }, { "pubsub_local", "pattern_order" },
    { "pubsub_inbox", "seen" }, { "pubsub_inbox", "delivered" }, { "pubsub_inbox", "credits" },
    { "pubsub_nodes", "gc_queue" },
    { "guard", "dead", function(sc) return sc.require("guard").dead end },
})

-- Their entry counts by name, with pub/sub's subscriptions and interest
-- per kind.
function C.per_key(sc)
    local out = C.sizes(sc, C.PER_KEY)
    for kind, t in pairs(C.upvalue(sc, "pubsub_local", "subs")) do out["pubsub_local.subs." .. kind] = count(t) end
    for kind, t in pairs(C.upvalue(sc, "pubsub_interest", "interest")) do
        out["pubsub_interest.interest." .. kind] = count(t)
    end
    return out
end

return C
