-- cmd_pubsub.lua — PUBLISH and SPUBLISH, before pub/sub exists.
-- Same table shape as cmd_string.lua.
--
-- Until pub/sub lands (issue 4) no connection of any sidecar can subscribe,
-- so there is never a subscriber to reach: PUBLISH answers :0, exactly what
-- Redis answers when nobody listens, without touching ZooKeeper.  Lock
-- clients need it anyway: Redisson's unlock scripts call
-- `redis.call('publish', KEYS[2], ARGV[1])` after deleting the lock, and the
-- script must not fail there.
--
-- Issue 4 replaces this module with cross-sidecar delivery (DESIGN.md,
-- "Pub/Sub"): the reply becomes the number of subscribers reached, and a
-- publish made from a script must then be part of that script's commit — a
-- message queued in the script's transaction, written in the same multi when
-- another sidecar is interested, and never delivered if the script aborts or
-- is re-run.

local SB = require "sandbox"
local counters = require "counters"

local C = {}

-- Redis counts PUBLISH as may-replicate, which a read-only script may not
-- call (script.c: "Write commands are not allowed from read-only scripts.").
-- eval.lua refuses only "write" commands, so the check is made here.
local function publish(args)
    local _ = args
    local c = SB.context()
    if c and c.ro then return { err = "ERR Write commands are not allowed from read-only scripts." } end
    counters.published = counters.published + 1
    return 0
end

C.publish = { fn = publish, arity = 3, flags = "pubsub loading stale fast may-replicate",
              first_key = 0, last_key = 0, step = 0 }
-- SPUBLISH's channel is a key for cluster routing (COMMAND shows 1 1 1).
C.spublish = { fn = publish, arity = 3, flags = "pubsub loading stale fast may-replicate",
               first_key = 1, last_key = 1, step = 1 }

return C
