-- lock_delay.lua — an example policy: lock-delay, as in Chubby and Consul.
--
-- A lock whose holder vanished without releasing it (its sidecar died, or
-- lost ZooKeeper, and the ephemeral node went with the session) cannot be
-- taken again for DELAY_MS: a holder that was merely cut off gets time to
-- notice it lost the lock before somebody else acts under it.  A lock that
-- was released (DEL, DELIFEQ, ...) or expired by its TTL is free at once.
--
-- How: every ephemeral key acquired gets a persistent marker node,
-- <root>/ld/<encoded znode path>, holding the lock's fencing token (a
-- native lock's request name: an up-conversion changes its token, and
-- holds a release grants together share one); a release or an expiry
-- deletes it.  A marker without its
-- lock therefore means the holder vanished.  The first acquire that finds
-- one stamps it (its mtime, the ZooKeeper leader's clock, is when the loss
-- was noticed; it first waits GRACE_MS for a release's marker deletion,
-- which runs in the background right after the release's reply)
-- and from then on acquires are refused until DELAY_MS have passed: SET ...
-- NX answers nil, as on a held lock; other writes that would create the key
-- answer -TRYAGAIN with the time left.
--
-- Native locks (LOCK.*) too, with one marker per lock node: a new request
-- (LOCK.ACQUIRE after the holder vanished) is held back as above, WAIT 0
-- answered null and a waiting one -TRYAGAIN.  A request already queued when
-- the holder vanished is asked about again before it grants itself
-- (info.queued): it keeps its place and waits out the delay, or is
-- answered null when its WAIT runs out first.  Of shared holders the
-- marker carries the token of the one that acquired last, and only that
-- one's release clears it: its vanishing delays the next request, an
-- earlier shared holder's does not once that last one has released.
--
-- Approximations, fine for an example: the delay counts from the first
-- attempt to take the lock after it vanished (so with nobody waiting it
-- can come later than needed, never earlier than the vanishing); a holder
-- that dies between its acquire and the marker's create (one ZooKeeper
-- round trip) gets no delay; the markers of keys written by scripts carry
-- no token.  ZKRESP_LOCK_DELAY_MS in the environment overrides DELAY_MS.

local K = require "keyspace"

local policy = {}

local DELAY_MS = tonumber(os.getenv("ZKRESP_LOCK_DELAY_MS") or "") or 10000
-- How long a marker without its lock may take to be cleared by a release.
local GRACE_MS = 250

local function marker(path)
    return host.config.root .. "/ld/" .. host.key_encode(path)
end

-- The lock a hook's info is about: the key's znode, or a native lock's
-- node (info.path names the request in it, LOCK.*: info.lock).
local function lock_of(info)
    return info.lock and info.path:match("^(.*)/[^/]+$") or info.path
end

local function token(info)
    -- a native lock's request names its hold: its token changes with an
    -- up-conversion, and holds granted together share one
    if info.lock then return info.path:match("[^/]+$") end
    return info.czxid and tostring(info.czxid) or "?"
end

-- Paths whose marker an on_acquire is still writing: a release right
-- after the acquire waits for it (the first marker also creates <root>/ld,
-- a few round trips).
local writing = {}

local function write_marker(p, info)
    local m = marker(p)
    for _ = 1, 3 do
        local rc = zk.create(m, token(info), 0)
        if rc == zk.OK then return end
        if rc == zk.NODEEXISTS then
            -- A stale marker (an earlier holder's): ours now.
            if zk.set(m, token(info), -1) == zk.OK then return end
        elseif rc == zk.NONODE then
            zk.create(host.config.root .. "/ld", "", 0)
        end
    end
    host.log("warn", "lock_delay: no marker for " .. p)
end

-- Released or expired: no delay.  Only our own marker is deleted (the
-- token matches), never the next holder's.
local function clear(key, info)
    local p = lock_of(info)
    for _ = 1, 200 do
        if not writing[p] then break end
        host.sleep(5)
    end
    local m = marker(p)
    local rc, data, stat = zk.get(m)
    if rc == zk.OK and (data == token(info) or data == "gone " .. token(info) or
                        not info.czxid or data == "?") then
        zk.delete(m, stat.version)
    end
end

function policy.on_acquire(key, info)
    local p = lock_of(info)
    if info.lifetime ~= "ephemeral" then
        -- made persistent (PERSIST, SET without a TTL): it cannot vanish
        -- with a session; the marker of the node it replaced goes
        if info.replaced then
            local rc, _, stat = zk.get(marker(p))
            if rc == zk.OK then zk.delete(marker(p), stat.version) end
        end
        return
    end
    local sid = zk.session()
    writing[p] = (writing[p] or 0) + 1
    local ok, err = pcall(write_marker, p, info)
    writing[p] = writing[p] > 1 and writing[p] - 1 or nil
    if not ok then error(err, 0) end
    -- Released (or expired) before the marker landed, through another
    -- sidecar whose release found no marker to clear: our session lasts,
    -- so the node did not vanish with it.
    if zk.session() == sid then
        local rc, st = zk.exists(info.path)
        if rc == zk.NONODE or (rc == zk.OK and not info.lock and info.czxid and st.czxid ~= info.czxid) then
            clear(key, info)
        end
    end
end

policy.on_release = clear
policy.on_expire = clear

-- before_acquire(key, info) -> true, or false and why.
function policy.before_acquire(key, info)
    if info.exists then return true end -- still there but expired: an expiry
    local m = marker(info.path)
    local rc, data, stat = zk.get(m)
    if rc == zk.NONODE then
        -- our server may lag (a session moved to a follower): no marker
        -- there is no news until it has what the leader has
        if zk.sync(m) ~= zk.OK then return false, "lock-delay: ZooKeeper unavailable, try again" end
        rc, data, stat = zk.get(m)
    end
    if rc ~= zk.OK then return true end
    -- A holder that released a moment ago clears its marker in the
    -- background, right after its reply: give it that moment before
    -- calling the lock vanished.
    for _ = 1, GRACE_MS // 25 do
        if data:sub(1, 5) == "gone " then break end
        host.sleep(25)
        rc, data, stat = zk.get(m)
        if rc ~= zk.OK then return true end
    end
    if data:sub(1, 5) ~= "gone " then
        -- First to notice: stamp the time, on the leader's clock.
        local src, st = zk.set(m, "gone " .. data, stat.version)
        if src ~= zk.OK then return false, "lock-delay: the holder vanished, try again" end
        stat = st
    end
    K.ensure_clock()
    local left = K.local_time(stat.mtime) + DELAY_MS - host.now()
    if left > 0 then
        return false, string.format("lock-delay: the holder vanished without releasing; free in %d ms",
                                    math.ceil(left))
    end
    zk.delete(m, stat.version)
    return true
end

return policy
