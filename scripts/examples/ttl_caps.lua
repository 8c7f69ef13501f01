-- ttl_caps.lua — an example policy: TTL caps and default TTLs.
--
-- The classic leak: a client sets a lock with `SET lock:x tok NX` and no
-- PX, then dies.  In Redis that lock stays forever.  Here every key that
-- matches a rule gets the rule's default TTL when it is written without
-- one, and every TTL is clamped to the rule's [min, max].  Keys with a TTL
-- are ephemeral (the default lifetime), so such a lock also goes when its
-- sidecar goes.
--
-- Rules are tried in order; the first whose prefix matches wins.  Keys that
-- match none keep Redis semantics, except that no TTL may exceed MAX_TTL.

local policy = {}

local MAX_TTL = 24 * 3600 * 1000 -- one day, for every key

local RULES = {
    -- prefix        default TTL   min    max (ms)
    { prefix = "lock:", default = 30000, min = 100, max = 60000 },
    { prefix = "lease:", default = 10000, min = 1000, max = 30000 },
    { prefix = "session:", default = 600000, max = 3600000 },
}

local function rule(key)
    for _, r in ipairs(RULES) do
        if key:sub(1, #r.prefix) == r.prefix then return r end
    end
end

-- ttl(key, ttl_ms) -> ttl_ms: the clamp.
function policy.ttl(key, ttl_ms)
    local r = rule(key)
    if r then
        if r.min and ttl_ms < r.min then ttl_ms = r.min end
        if r.max and ttl_ms > r.max then ttl_ms = r.max end
    end
    return math.min(ttl_ms, MAX_TTL)
end

-- default_ttl(key, type) -> ttl_ms or nil: for a write without a TTL.
function policy.default_ttl(key, type)
    local r = rule(key)
    return r and r.default or nil
end

return policy
