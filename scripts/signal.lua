-- signal.lua — the two signals that end one attempt of a command.
--
-- Failures inside a command are raised as signals caught by txn.run (and
-- by M.dispatch): S.retry(delay) re-runs the command from its first read;
-- S.abort(reply) ends it with that reply.  keyspace.lua re-exports them as
-- K.retry, K.abort, K.is_retry, K.is_abort; hooks.lua raises an abort when
-- a policy hook fails and lets both signals through its guard.  This
-- module requires nothing, so every layer may raise them.

local S = {}

local Retry = {}
local Abort = {}

-- (S.abort's `whole`: the reply ends the whole script a command ran in,
-- not only that command: a policy hook's failure, which redis.pcall must
-- not turn into an error the script goes on from)
-- recs: key -> record, reads the re-run may use (made after the command
-- arrived); why: the error to answer when no attempt is left (default
-- errors.CONTENDED)
function S.retry(delay, recs, why)
    error(setmetatable({ delay = delay, recs = recs, why = why }, Retry), 0)
end
function S.abort(reply, whole) error(setmetatable({ reply = reply, whole = whole }, Abort), 0) end
function S.is_retry(e) return getmetatable(e) == Retry end
function S.is_abort(e) return getmetatable(e) == Abort end

return S
