-- audit.lua — an example policy: an audit log of acquisitions and
-- releases.
--
-- One logfmt line per event: a key created (acquire), deleted by a client
-- (release), expired by its TTL (expire), or lost (the session ended, or
-- another client deleted or overwrote it), with who did it (the client's
-- address, AUTH user and name), the value (the lock token) and the fencing
-- token (the znode's czxid).  Lines go to zkresp's log (stderr); when the
-- environment variable ZKRESP_AUDIT_FILE names a file, they are appended to
-- it; when ZKRESP_AUDIT_CHANNEL names a pub/sub channel, each line is
-- PUBLISHed there (subscribers on any sidecar receive it).
--
-- The hooks run after the event, in the background: they never delay a
-- reply, and a failure here (a full disk) only shows in the log.

local policy = {}

local FILE = os.getenv("ZKRESP_AUDIT_FILE")
local CHANNEL = os.getenv("ZKRESP_AUDIT_CHANNEL")

local function quote(s)
    s = tostring(s)
    if s:find("^[%w%-_.:/@]+$") then return s end
    return '"' .. s:gsub("[%c\"\\]", function(c)
        if c == '"' then return '\\"' end
        if c == "\\" then return "\\\\" end
        return string.format("\\x%02x", c:byte())
    end) .. '"'
end

local function record(event, key, info)
    local c = info.client or {}
    local parts = {
        "audit", "event=" .. event, "key=" .. quote(key),
        "user=" .. quote(c.user or "-"), "addr=" .. quote(c.addr or "-"),
        "name=" .. quote(c.name or "-"),
    }
    if info.value then parts[#parts + 1] = "token=" .. quote(info.value) end
    -- a native lock (LOCK.*): its owner, the lock token of that API
    if info.owner then parts[#parts + 1] = "owner=" .. quote(info.owner) end
    if info.mode then parts[#parts + 1] = "mode=" .. info.mode end
    if info.czxid then parts[#parts + 1] = "fence=" .. info.czxid end
    if info.ttl then parts[#parts + 1] = "ttl_ms=" .. info.ttl end
    if info.reason then parts[#parts + 1] = "reason=" .. info.reason end
    local line = table.concat(parts, " ")
    host.log("info", line)
    if FILE then
        local f = io.open(FILE, "a")
        if f then
            f:write(string.format("ts=%.3f ", host.wall() / 1000), line, "\n")
            f:close()
        end
    end
    if CHANNEL then
        require("pubsub").publish("c", CHANNEL, line)
    end
end

function policy.on_acquire(key, info) record("acquire", key, info) end
function policy.on_release(key, info) record("release", key, info) end
function policy.on_expire(key, info) record("expire", key, info) end
function policy.on_lost(key, info) record("lost", key, info) end

return policy
