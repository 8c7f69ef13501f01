-- errors.lua — every error reply the system layer sends, with Redis's exact
-- texts (Redis 7 / 8.4, Valkey 9 where noted).
--
-- An error reply is the table {err = "<CODE> <message>"}; the C host writes
-- it as "-<CODE> <message>\r\n".  Constants below hold the full text, code
-- prefix included; the functions build the texts that carry arguments.

local E = {}

E.WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
E.SYNTAX = "ERR syntax error"
E.NO_SUCH_KEY = "ERR no such key"
E.NOT_INTEGER = "ERR value is not an integer or out of range"
-- getPositiveLongFromObjectOrReply's default (a count: LPOP, ZPOPMIN).
E.NOT_POSITIVE = "ERR value is out of range, must be positive"
-- getRangeLongFromObjectOrReply over -LONG_MAX..LONG_MAX (ZRANDMEMBER's
-- count, LPOS's RANK).
E.LONG_RANGE = "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
E.INCR_OVERFLOW = "ERR increment or decrement would overflow"
E.DECR_OVERFLOW = "ERR decrement would overflow"
E.EXPIRE_NX_COMBO = "ERR NX and XX, GT or LT options at the same time are not compatible"
E.EXPIRE_GT_LT = "ERR GT and LT options at the same time are not compatible"
E.NOT_FLOAT = "ERR value is not a valid float"
E.HASH_NOT_FLOAT = "ERR hash value is not a float"
E.HASH_NOT_INTEGER = "ERR hash value is not an integer"
E.NAN_OR_INFINITY = "ERR increment would produce NaN or Infinity"
E.NAN_OR_INFINITY_VALUE = "ERR value is NaN or Infinity"
E.OFFSET_RANGE = "ERR offset is out of range"
E.STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
E.OUT_OF_RANGE = "ERR value is out of range"
E.NOT_POSITIVE = "ERR value is out of range, must be positive"
E.NO_SUCH_KEY = "ERR no such key"
E.SAME_OBJECT = "ERR source and destination objects are the same"
E.DB_RANGE = "ERR DB index is out of range"
E.INVALID_CURSOR = "ERR invalid cursor"
E.NUMKEYS_ZERO = "ERR numkeys should be greater than 0"
E.NUMKEYS_ARGS = "ERR Number of keys can't be greater than number of args"
E.LIMIT_NEGATIVE = "ERR LIMIT can't be negative"
E.NO_LFU = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. " ..
           "Please note that when switching between policies at runtime LRU and LFU " ..
           "data will take some time to adjust."

-- zkresp's own limits (DESIGN.md "Keyspace model").
E.KEY_TOO_LONG = "ERR key too long"
E.VALUE_TOO_LARGE = "ERR value too large"
E.DIGEST_UNSUPPORTED = "ERR IFDEQ and IFDNE are not supported by zkresp"
E.TOO_MANY_KEYS = "ERR too many keys to scan with KEYS"
-- ZRANDMEMBER with a negative count builds its reply in memory: at most
-- this many members drawn with repetition.
E.RANDOM_MAX = 1000000
E.RANDOM_TOO_MANY = "ERR count is out of range for zkresp: at most " .. E.RANDOM_MAX ..
                    " members with repetition"

-- Databases (SELECT, MOVE, SWAPDB) and the server commands of
-- cmd_server.lua: Redis's texts, and zkresp's where it answers no.
E.DB_RANGE = "ERR DB index is out of range"
E.MOVE_UNSUPPORTED = "ERR MOVE is not supported by zkresp: a key cannot change database " ..
                     "atomically with its lease (copy it and delete it in one script instead)"
E.SWAPDB_UNSUPPORTED = "ERR SWAPDB is not supported by zkresp: ZooKeeper cannot rename two " ..
                       "directories of znodes atomically"
E.SELECT_IN_SCRIPT = "ERR SELECT is not supported in scripts by zkresp: a script runs in its caller's database"
E.CONFIG_READONLY = "ERR zkresp's settings are its command-line flags (zkresp --help): " ..
                    "CONFIG SET, REWRITE and RESETSTAT are not supported"
E.OTHER_DB = "ERR zkresp copies keys only within the selected database"
-- KEYS, SCAN, RANDOMKEY or DBSIZE after a write of the same script or MULTI
-- (cmd_keys.lua): they read the committed keyspace, which lacks that write.
E.LISTING_AFTER_WRITE = "ERR zkresp lists committed keys only: KEYS, SCAN, RANDOMKEY and DBSIZE " ..
                        "cannot follow a write in the same script or MULTI"

-- MULTI/EXEC/DISCARD (cmd_multi.lua): Redis's texts, and zkresp's for
-- what it cannot queue and for its caps.
E.MULTI_NESTED = "ERR MULTI calls can not be nested"
E.EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
E.DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
E.EXECABORT = "EXECABORT Transaction discarded because of previous errors."
-- (Redis's execCommand, for a command its ACLs refuse at EXEC; the reason follows)
E.ACL_CHANGED = "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. " ..
                "This command is no longer allowed for the following reason: "
-- redis.call from a callback of a C function (eval.lua's call)
E.CALL_IN_C_CALLBACK = "ERR redis.call and redis.pcall cannot run inside a callback of a C function " ..
                       "(string.gsub, table.sort, a metamethod): zkresp waits for ZooKeeper there, call them outside"
E.WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"

-- EXEC itself refused (its arity, -BUSY): Redis's execCommandAbort, with
-- the refusal's text (an ERR code left out).
function E.exec_abort(text)
    return "EXECABORT Transaction discarded because of: " .. text:gsub("^ERR ", "")
end

-- A command that cannot run inside a transaction: one the gateway
-- answers, one flagged noscript in the registry (EVAL, the subscribe
-- family, LOCK.*, SCRIPT, POLICY, FLUSHDB...).
function E.not_queueable(name)
    return "ERR '" .. name .. "' cannot be queued in MULTI by zkresp"
end

function E.multi_too_many(max)
    return "ERR too many commands queued in MULTI (the limit is " .. max .. ")"
end

function E.watch_too_many(max)
    return "ERR too many keys watched (the limit is " .. max .. ")"
end

function E.watch_too_large(max)
    return "ERR the keys watched are too large (the limit is " .. max .. " bytes)"
end

function E.multi_too_large(max)
    return "ERR the commands queued in MULTI are too large (the limit is " .. max .. " bytes)"
end

-- Failures a client should retry (Redis clients treat TRYAGAIN as
-- retryable).
E.UNAVAILABLE = "TRYAGAIN ZooKeeper unavailable"
E.CLOSING = "TRYAGAIN zkresp is shutting down"
E.CONTENDED = "TRYAGAIN too many conflicting writes, try again"
-- A write to a key whose node a session this sidecar has lost still owns
-- (keyspace.lua, writable): it is free once ZooKeeper ends that session.
E.LOST_SESSION = "TRYAGAIN the key is held by a ZooKeeper session that is ending, try again"
-- LOCK.CONVERT whose hold was released or whose lease ended while it waited
E.HOLD_ENDED = "ERR owner's hold of this lock ended while its conversion waited"
-- CLIENT UNBLOCK id ERROR of a waiting LOCK.ACQUIRE / LOCK.CONVERT (Redis's)
E.UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
-- A reply that rests on ZooKeeper's answers, held back because the session
-- they came from was given up or its local lease ran out before the reply
-- was written (the process stalled, or the reply waited behind an earlier
-- one): sent by the gateway (conn.c, check_reply; lua_host.h's
-- LUA_HOST_STALLED), written here with the others.
E.STALLED = "TRYAGAIN zkresp stalled past its ZooKeeper session, outcome unknown"

-- Redis's processCommand: the name and each argument are copied as C
-- strings (so they stop at a NUL byte), the name cut at 128 bytes, every
-- argument as "'%.*s' " with the precision that keeps the list near 128
-- bytes, arguments added while the list is shorter than 128 bytes; CR and
-- LF become spaces.
local function cstr(s)
    local nul = s:find("\0", 1, true)
    if nul then return s:sub(1, nul - 1) end
    return s
end

function E.unknown_command(args)
    local list = ""
    local i = 2
    while i <= #args and #list < 128 do
        list = list .. "'" .. cstr(args[i]):sub(1, 128 - #list) .. "' "
        i = i + 1
    end
    local msg = "ERR unknown command '" .. cstr(args[1]):sub(1, 128) ..
                "', with args beginning with: " .. list
    return (msg:gsub("[\r\n]", " "))
end

-- Redis's commandCheckExistence for a container command: the subcommand
-- as a C string cut at 128 bytes, the command's name in upper case.
function E.unknown_subcommand(name, sub)
    local msg = "ERR unknown subcommand '" .. cstr(sub):sub(1, 128) .. "'. Try " ..
                name:upper() .. " HELP."
    return (msg:gsub("[\r\n]", " "))
end

-- `name` is the command's declared (lower-case) name.
function E.wrong_arity(name)
    return "ERR wrong number of arguments for '" .. name .. "' command"
end

-- Redis's refusal in RESP2 subscribed mode, with the command's full name
-- ("pubsub|numsub" for a subcommand).
function E.not_while_subscribed(full)
    return "ERR Can't execute '" .. full .. "': only (P|S)SUBSCRIBE / " ..
           "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
end

-- Redis's getRangeLongFromObjectOrReply without a message of its own.
function E.value_between(lo, hi)
    return "ERR value is out of range, value must between " .. lo .. " and " .. hi
end

function E.invalid_expire(name)
    return "ERR invalid expire time in '" .. name .. "' command"
end

-- EXPIRE's options: the argument as sent, cut at a NUL like Redis's %s.
function E.unsupported_option(opt)
    return ("ERR Unsupported option " .. cstr(opt)):gsub("[\r\n]", " ")
end

-- A ZooKeeper result no command expects (ZNOAUTH, ZINVALIDACL...).
-- ZooKeeper refuses this sidecar a node (NOAUTH: its credentials are not
-- those of the node's ACL; INVALIDACL: it has none for the ACL it asks).
function E.zookeeper_denied(what)
    return "ERR ZooKeeper denies zkresp access" .. (what and (" (" .. what .. ")") or "") ..
           ": check --zk-auth-file and the ACL of --root"
end

-- A command whose ZooKeeper request (one multi: a script's commit, a
-- write and its checks) would be larger than ZooKeeper takes (jute.maxbuffer;
-- zkresp's --zk-max-request, `limit` bytes): refused before sending, so
-- nothing of it was written.
function E.request_too_large(limit)
    return "ERR this command's ZooKeeper request exceeds ZooKeeper's request limit of " ..
           tostring(limit) .. " bytes (jute.maxbuffer, --zk-max-request); nothing was written"
end

-- The same for the number of operations in that multi (zk.MAX_OPS).
function E.too_many_ops(max)
    return "ERR this command's ZooKeeper request would have more than " .. tostring(max) ..
           " operations; nothing was written"
end

function E.zookeeper(rc, what)
    return "ERR ZooKeeper error " .. tostring(rc) .. (what and (" on " .. what) or "")
end

-- DEBUG's subcommands other than SLEEP.
function E.debug_unsupported(sub)
    local msg = "ERR DEBUG " .. cstr(sub):sub(1, 128):upper() .. " is not supported by zkresp (only DEBUG SLEEP)"
    return (msg:gsub("[\r\n]", " "))
end

-- Reply helpers: command code returns these tables as replies.
function E.reply(text) return { err = text } end

-- <NAME> HELP, Redis's way (addReplyHelp): status lines, a header naming
-- the command, `lines` (each subcommand, then its description indented),
-- and HELP itself last.
function E.help(name, lines)
    local out = { { ok = name:upper() .. " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:" } }
    for _, l in ipairs(lines) do out[#out + 1] = { ok = l } end
    out[#out + 1] = { ok = "HELP" }
    out[#out + 1] = { ok = "    Prints this help." }
    return out
end

return E
