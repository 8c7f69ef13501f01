/*
 * lua_host.h — the Lua 5.4 VM that runs every keyed command.
 *
 * One VM on the loop thread.  Each command runs in its own coroutine,
 * anchored in the registry while it runs, its task record in
 * lua_getextraspace().  A zk.* call starts an asynchronous ZooKeeper
 * operation through the bridge and yields; the completion resumes the
 * coroutine on the loop thread with the results as the call's return values.
 *
 * The Lua-facing API (the contract between this file and scripts/):
 *
 *   System entry: scripts/zkresp.lua, run once at start with `zk` and `host`
 *   as globals and package.path set to the scripts directory.  It returns a
 *   table M with:
 *     M.dispatch(args, subscribed, db, multi)
 *                           runs in a fresh coroutine per command; args[1] is
 *                           the command name as sent, args[2..] its arguments
 *                           (Lua strings); subscribed: the client is in RESP2
 *                           subscribed mode; db: the database selected
 *                           when the command arrived (SELECT); multi:
 *                           "begin" (LUA_TASK_MULTI_BEGIN), "queued"
 *                           (LUA_TASK_MULTI) or nil.  Returns the reply
 *                           value.
 *     M.on_session(event, session_id)
 *                           runs in a fresh coroutine on every session event:
 *                           "connected" (first connection, or back after a
 *                           disconnect within the same session), "new" (a new
 *                           session after expiry or loss; all ephemeral nodes
 *                           of earlier sessions are foreign), "disconnected",
 *                           "lost" (the local lease deadline passed while
 *                           disconnected: every owned ephemeral key is lost;
 *                           the bridge then opens a new session).
 *     M.on_reload()         SIGHUP: reload the policy (a fresh coroutine).
 *     M.on_client_gone(id)  a client that had subscriptions or was in
 *                           MULTI closed or was RESET (see
 *                           lua_host_client_gone)
 *     M.on_watch(event, path)
 *                           runs in a fresh coroutine when a watch fires:
 *                           "created", "deleted", "changed", "child".
 *     M.authenticate(user, password, addr), M.policy_info()
 *                           called on the main state, outside any command
 *                           (lua_host_authenticate, lua_host_policy_info)
 *     M.on_idle()           called on the main state when the sidecar is
 *                           idle after work, before full collections
 *                           (lua_host_collect): tables grown for a burst
 *                           are to give their room back; must not yield
 *
 *   Reply values (what M.dispatch returns):
 *     nil or host.null  -> null bulk ($-1 / _)     false -> null bulk
 *     integer           -> :n         float -> :n (truncated, like EVAL)
 *     true              -> :1         string -> bulk
 *     {ok = "OK"}       -> +OK        {err = "ERR x"} -> -ERR x
 *     {double = x}      -> ,x in RESP3, bulk in RESP2
 *     {map = {k1, v1, ...}} -> map in RESP3, flat array in RESP2
 *     {set = {...}}     -> set in RESP3, array in RESP2
 *     {pairs = {a1, b1, a2, b2, ...}} -> [[a1, b1], [a2, b2], ...] in RESP3,
 *                          the flat array in RESP2 (ZRANGE ... WITHSCORES)
 *     {bool = b}        -> #t/#f in RESP3, :1/:0 in RESP2
 *     {null_array = true} -> *-1 in RESP2, _ in RESP3
 *     {push = {...}}    -> a push frame (>n) in RESP3, an array in RESP2
 *     {frames = {v1, v2, ...}} -> each value as its own top-level reply
 *                          (SUBSCRIBE a b: one confirmation per channel)
 *     {a, b, c}         -> array (ends at the first nil; use host.null inside)
 *   A Lua error raised by a command answers "-ERR internal error: <msg>"
 *   and is logged.
 *
 *   zk (every call but zk.session, zk.request_size and zk.max_request
 *   yields; they must be called from a coroutine of the host, else they
 *   raise; rc is a ZooKeeper code, as the constants below, or one of ours):
 *     zk.get(path [, watch])         -> rc, data, stat
 *         data: the node's bytes ("" for none) when rc is zk.OK, else nil
 *     zk.exists(path [, watch])      -> rc, stat (nil unless zk.OK)
 *     zk.children(path [, watch])    -> rc, {name, ...}, stat (of path)
 *         the names are unordered; nil, nil unless zk.OK
 *         watch = true leaves a one-shot watch (see M.on_watch); watches
 *         survive reconnects within a session, not a new session.
 *     zk.get_acl(path)               -> rc, {{perms = n, scheme = s,
 *                                        id = s}, ...} (nil unless zk.OK)
 *     zk.create(path, data, flags [, grouped])
 *                                    -> rc, created_path, stat
 *         data may be nil (no bytes); flags: 0, zk.EPHEMERAL, zk.SEQUENCE or
 *         their sum; created_path and stat are nil unless zk.OK
 *     zk.set(path, data, version [, grouped])
 *                                    -> rc, stat (nil unless zk.OK)
 *     zk.delete(path, version [, grouped]) -> rc
 *         version -1 (or nil): any
 *     zk.sync(path)                  -> rc
 *     zk.multi(ops [, grouped])      -> rc, results
 *         ops: {{"create", path, data, flags}, {"delete", path, version},
 *               {"set", path, data, version}, {"check", path, version}, ...}
 *               (1 to 10000; a malformed list raises)
 *         results: when ZooKeeper answered the multi (rc zk.OK, or the code
 *         of the operation that failed: nothing was applied), one table per
 *         operation, {rc = n, path = p|nil, stat = s|nil}: path for a
 *         create and stat for a set, only when rc is zk.OK; before the
 *         failed operation rc is zk.OK, after it zk.RUNTIMEINCONSISTENCY.
 *         Otherwise -- a connection loss or timeout (zk.CONNECTIONLOSS,
 *         zk.OPERATIONTIMEOUT, zk.SESSIONEXPIRED, zk.SESSIONMOVED),
 *         zk.TIMEOUT, zk.CLOSING, zk.TOOBIG, zk.BADARGUMENTS -- results is
 *         an empty table: nothing is known of the operations.
 *     grouped (create, set, delete, multi): true lets the write go out with
 *         the other grouped writes of the same loop turn, as one multi
 *         (group commit, zk.h ZK_GROUPED).  Its answer is the one it would
 *         have had alone, except that it lands somewhere between its
 *         submission and its answer (not in submission order with others'
 *         requests) and a grouped create answers no stat (rc, path, nil).
 *     zk.session()                   -> session_id, connected   (no yield)
 *         session_id 0: no session (connecting, or being replaced)
 *     zk.seen_zxid()                 -> the newest zxid of any stat answered
 *         so far, 0 before the first (no yield): every write sent after
 *         it was answered commits at a larger zxid
 *     zk.request_size(ops)           -> bytes ZooKeeper reads for
 *                                       zk.multi(ops)            (no yield)
 *     zk.max_request()               -> the largest request sent (no yield)
 *   stat: {czxid, mzxid, ctime, mtime, version, cversion, aversion,
 *          ephemeralOwner, dataLength, numChildren, pzxid}, all integers.
 *   Constants: result codes zk.OK, zk.NONODE, zk.NODEEXISTS, zk.BADVERSION,
 *   zk.NOTEMPTY, zk.NOCHILDRENFOREPHEMERALS, zk.NOAUTH, zk.INVALIDACL,
 *   zk.AUTHFAILED, zk.CONNECTIONLOSS, zk.OPERATIONTIMEOUT,
 *   zk.SESSIONEXPIRED, zk.SESSIONMOVED, zk.RUNTIMEINCONSISTENCY,
 *   zk.BADARGUMENTS (a path ZooKeeper would refuse: never sent), and ours:
 *   zk.TIMEOUT (the request's deadline passed while disconnected: never
 *   sent), zk.CLOSING (the sidecar is shutting down), zk.TOOBIG (the request
 *   is larger than zk.max_request(): never sent); create flags
 *   zk.EPHEMERAL, zk.SEQUENCE, zk.CONTAINER (alone: a node the server
 *   deletes some time after its last child goes); ACL bits zk.PERM_WRITE,
 *   zk.PERM_CREATE, zk.PERM_DELETE, zk.PERM_ADMIN.
 *   An operation still waiting when the session is replaced returns
 *   zk.SESSIONEXPIRED: it is never sent under a later session.
 *   While the session is not connected an operation waits, at most until the
 *   command's deadline (its start plus zk-request-timeout, not counting the
 *   time the command spent running; see host.deadline, host.lease_wait),
 *   then returns zk.TIMEOUT.  An operation in flight when the connection
 *   drops returns zk.CONNECTIONLOSS: its outcome is unknown and the caller
 *   resolves it.  A command's operation is answered by its deadline even
 *   once sent: zk.OPERATIONTIMEOUT, its outcome unknown (zk.h ZK_BOUNDED);
 *   background coroutines (hooks, timers, host.spawn) wait for the answer.
 *
 *   host:
 *     host.now()             monotonic clock, milliseconds (float)  no yield
 *     host.wall()            wall clock, milliseconds since the epoch (float)
 *     host.sleep(ms)         yields for ms milliseconds
 *     host.suspend([queued]) yields until host.wake(co) is called for this
 *                            coroutine; returns wake's extra arguments.
 *                            queued = true: a command waiting its turn
 *                            (LOCK.ACQUIRE WAIT): it also ends, returning
 *                            nothing, when the command's client goes away
 *                            (host.client() is nil from then on), and the
 *                            time suspended does not count against the
 *                            command's deadline (host.deadline).
 *                            queued = "blocked": as true, and it also ends,
 *                            returning nothing, at a CLIENT UNBLOCK of the
 *                            command (host.unblocked() says how)
 *     host.block([false])    the running command is blocked (a blocking
 *                            wait, as BLPOP's): until host.block(false) or
 *                            its end, CLIENT LIST shows flag b, INFO counts
 *                            it in blocked_clients, CLIENT UNBLOCK may end
 *                            it; not after it was unblocked once
 *     host.unblocked()       nil, or "timeout" / "error": how a CLIENT
 *                            UNBLOCK of the running command asked it to end
 *     host.wake(co, ...)     schedules a suspended coroutine to resume (on the
 *                            loop, after the caller yields or returns)
 *     host.pass()            yields to the coroutines already scheduled to
 *                            resume (host.wake, host.spawn), then resumes
 *                            (a release answers after the waiter it woke)
 *     host.spawn(fn, ...)    runs fn(...) in a new background coroutine
 *     host.timer(fn)         a timer object: t:start(ms) (re)arms it,
 *                            t:stop() disarms; fn() runs in a new coroutine
 *     host.deadline()        the running command's deadline (host.now() units)
 *     host.lease_wait()      the running command writes a key of this
 *                            session's: its requests may wait for a
 *                            reconnect as long as the session may be alive
 *                            (zk_lease_end, at most one session timeout from
 *                            its start), not only zk-request-timeout
 *     host.outlives_session()  the running command's reply does not rest
 *                            on the session (a subscription's
 *                            confirmations: the sidecar registers it again
 *                            under a new one); lua_host_reply_deadline
 *                            never holds it back
 *     host.fatal(reason)     a start-up check cannot pass: the process stops
 *                            with exit status 2 (lua_host_set_fatal)
 *     host.log(level, msg)   level: "debug", "info", "warn", "error"
 *     host.key_encode(key)   Redis key -> node name (sidecar/keyenc.h)
 *     host.key_decode(name)  node name -> key, or nil
 *     host.null              the null sentinel for replies
 *     host.client()          the running command's connection: {id, addr,
 *                            laddr, name, user, lib_name, resp}, or nil
 *     host.client_id()       its id alone, or nil
 *     host.push(id, value)   encodes value (a reply value, usually {push =
 *                            {...}}) for client id and queues it after the
 *                            replies it is still owed; false if it is gone
 *     host.subscriptions(id, channels, patterns, shard)
 *                            tells the gateway client id's subscription
 *                            counts (RESP2 subscribed mode, CLIENT LIST)
 *     host.busy()            host.now() less the time the running command
 *                            spent yielded (waiting for ZooKeeper, sleeping,
 *                            paused between slices): its own running time
 *     host.caps(deadline, mem0_kb, limit_kb, kill, count, time_every,
 *               slice_ms, client_source) / host.caps()
 *                            watch / stop watching the running command's
 *                            client script code (lua_caps.c: time cap,
 *                            memory cap in the allocator, 5 ms slices,
 *                            sticky kills; kill(why) raises)
 *     host.killed()          why the running script was killed ("time",
 *                            "memory", "killed"), or nil
 *     host.kill(why)         kills the running script (sticky) and raises
 *     host.busy_scripts()    the coroutines of other clients' scripts paused
 *                            between slices (none: no values)
 *     host.kill_scripts()    SCRIPT KILL: kills every paused script; how many
 *     host.patterns          {find, match, gmatch, gsub}: Lua 5.1's, bounded
 *                            for client code, stock otherwise (lua_pattern.h)
 *     host.instance          16 random bytes identifying this process
 *     host.config            {root, databases, bind, port, maxclients,
 *                             timeout, max_bulk_len, max_key_len,
 *                             max_value_len,
 *                             zk_max_request, request_timeout,
 *                             session_timeout, policy, zk_acl ("open" or
 *                             "creator"), scripts, script_time_limit,
 *                             script_memory_limit,
 *                             max_subscriptions_per_command,
 *                             max_subscriptions_per_client,
 *                             pubsub_gc_delay} (config.h)
 *   Command code must never call coroutine.yield itself.
 */
#ifndef ZKRESP_LUA_HOST_H
#define ZKRESP_LUA_HOST_H

#include <stddef.h>
#include <stdint.h>

struct zk;
struct config;
struct buf;
struct lua_State;

/* The record a running command hangs on to.  The gateway owns it; when the
 * connection goes away first it clears `done` (a tombstone) and the command
 * finishes without a reply. */
struct lua_task {
    void *priv; /* the host's: the running coroutine's record */
    /* Called once with the encoded reply appended to `out`; NULL after the
     * requester went away. */
    void (*done)(struct lua_task *t);
    void *data;      /* the requester's, passed back untouched */
    struct buf *out; /* where the reply goes; owned by the requester */
    int proto;       /* 2 or 3 */
    int flags;       /* LUA_TASK_* */
    int db;          /* the database the connection had selected */
    /* Set with the reply: the generation of the ZooKeeper session whose
     * answers it rests on (0: none); see lua_host_reply_deadline. */
    uint64_t zk_gen;
    /* A blocking command (LOCK.ACQUIRE / LOCK.CONVERT with WAIT) waiting
     * in its queue: set by host.block(), for CLIENT LIST's flag b, INFO's
     * blocked_clients and CLIENT UNBLOCK (lua_host_unblock), which clears
     * it and sets unblock to how the wait is to end. */
    int blocked;
    int unblock; /* 0, or LUA_UNBLOCK_TIMEOUT / LUA_UNBLOCK_ERROR */
};

#define LUA_UNBLOCK_TIMEOUT 1
#define LUA_UNBLOCK_ERROR 2

/* What goes instead of a reply whose answers may speak for a session over
 * since (scripts/errors.lua's E.STALLED). */
#define LUA_HOST_STALLED                                                       \
    "TRYAGAIN zkresp stalled past its ZooKeeper session, outcome unknown"

/* The requester is a RESP2 client in subscribed mode: M.dispatch gets
 * `true` as its second argument and refuses all but the subscribe family. */
#define LUA_TASK_SUBSCRIBED 1
/* The requester's connection is in MULTI (the gateway's conn.multi, set and
 * cleared in dispatch order): M.dispatch gets "queued" as its fourth
 * argument and queues the command, or runs EXEC / DISCARD on the queue
 * (scripts/cmd_multi.lua). */
#define LUA_TASK_MULTI 2
/* The MULTI that puts the connection in MULTI: M.dispatch gets "begin". */
#define LUA_TASK_MULTI_BEGIN 4

/* What host.client() tells a command about its connection. */
struct lua_client {
    unsigned long long id;
    const char *addr, *laddr, *name, *user, *lib_name;
    int resp;
};

/* The requester's side (the gateway's connections): how replies are
 * encoded, and host.client(), host.push() and host.subscriptions().  Set
 * before the first lua_host_run. */
struct lua_client_ops {
    /* Appends the reply for the Lua value at index idx of L ("Reply
     * values" above) to out in protocol proto (2 or 3); idx 0: the command
     * returned nothing, a null reply.  Leaves L's stack as it found it.
     * Used for a command's reply (t->out) and host.push's frames. */
    void (*encode)(struct lua_State *L, int idx, struct buf *out, int proto);
    /* Appends the error reply "-msg" (a command's Lua error: msg is
     * "ERR internal error: <message>"). */
    void (*encode_error)(struct buf *out, const char *msg);
    void *arg; /* passed to the functions below */
    /* Describes the requester of t; 0, or -1 when there is none. */
    int (*describe)(void *arg, const struct lua_task *t,
                    struct lua_client *out);
    /* The buffer to encode one out-of-band frame for client id into (its
     * protocol in *proto), or NULL when the client is gone; then push_end.
     * from: the command pushing (NULL if none): a frame it pushes to its
     * own client goes before its reply, as Redis writes it. */
    struct buf *(*push_begin)(void *arg, unsigned long long id,
                              const struct lua_task *from, int *proto);
    void (*push_end)(void *arg, unsigned long long id);
    /* Client id now has this many subscriptions of each kind. */
    void (*subscriptions)(void *arg, unsigned long long id, int channels,
                          int patterns, int shard);
};

struct lua_host;

/* Whether the value at index idx of L is host.null (for the encoder). */
int lua_host_is_null(struct lua_State *L, int idx);

/* Creates the VM and runs scripts/zkresp.lua and the policy.  On failure
 * returns NULL and writes the reason to err. */
struct lua_host *lua_host_create(const struct config *cfg, struct zk *zk,
                                 char *err, size_t errlen);
void lua_host_free(struct lua_host *h);

/* From now on no Lua code runs: completions, timers and wake-ups that
 * arrive are dropped.  For the exit, before the bridge goes. */
void lua_host_stop(struct lua_host *h);

/* host.fatal(reason) from the Lua layer (a start-up check that cannot pass,
 * such as a root zkresp may not write) calls fatal(arg, reason): the
 * process is to stop with exit status 2.  The reason is plain text. */
void lua_host_set_fatal(struct lua_host *h,
                        void (*fatal)(void *arg, const char *reason),
                        void *arg);

/* Connects host.client(), host.push() and host.subscriptions() to the
 * requester's connections (ops copied). */
void lua_host_set_client_ops(struct lua_host *h,
                             const struct lua_client_ops *ops);

/* Client id closed (or was RESET): M.on_client_gone(id) drops what it held,
 * its subscriptions and its MULTI queue.  With deferred, on the next loop turn
 * (a close may happen inside Lua code); else at once. */
void lua_host_client_gone(struct lua_host *h, unsigned long long id,
                          int deferred);

/* Runs one command (argv borrowed for the duration of the call).  The reply
 * is delivered through t->done, possibly before this returns. */
void lua_host_run(struct lua_host *h, struct lua_task *t, int argc,
                  const char *const *argv, const size_t *argvlen);

/* The requester of t went away: the command finishes without a reply (one
 * waiting in host.suspend(true) is resumed at once to leave its queue). */
void lua_host_abandon(struct lua_host *h, struct lua_task *t);

/* CLIENT UNBLOCK of t's command, how: LUA_UNBLOCK_TIMEOUT (it ends as if
 * its WAIT ran out) or LUA_UNBLOCK_ERROR (-UNBLOCKED).  1 when it was
 * blocked (t->blocked), its wait then resumed at once; else 0. */
int lua_host_unblock(struct lua_host *h, struct lua_task *t, int how);

/* Until when t's reply, done, may be sent: the end of the local lease of
 * the session whose answers it rests on (0: it rests on none, or no lease
 * bounds it); -1 when that session was given up since or its lease has run
 * out.  A reply is not sent then (LUA_HOST_STALLED goes instead): the
 * process did not run meanwhile (a SIGSTOP, a paused VM), or the reply
 * waited behind an earlier one, and the lock it grants may be another's by
 * now.  The requester asks just before it writes the reply. */
double lua_host_reply_deadline(const struct lua_host *h,
                               const struct lua_task *t);

/* Session events from the bridge, forwarded to M.on_session. */
void lua_host_session_event(struct lua_host *h, const char *event,
                            long long session_id);

/* SIGHUP: M.on_reload() reloads the policy. */
void lua_host_reload(struct lua_host *h);

/* SIGTERM's grace period begins: M.on_shutdown() ends the waits that
 * would outlast it (native locks' queued requests). */
void lua_host_shutdown(struct lua_host *h);

/* One entry of the command registry (scripts/registry.lua, M.commands) as
 * lua_host_commands shows it.  Its strings live until the callback
 * returns. */
#define LUA_HOST_MAX_SUBS 16
struct lua_host_cmd {
    const char *name;      /* lower case */
    int arity;             /* Redis's: counts the name; -n means at least n */
    int max_args;          /* 0, or the most arguments, the name counted */
    int first, last, step; /* key positions, as COMMAND shows them */
    const char *flags;     /* space separated */
    const char *group;     /* COMMAND DOCS's group */
    int in_c;              /* answered by gateway/dispatch.c (no Lua fn) */
    int subscribed_ok;     /* allowed in RESP2 subscribed mode */
    int nsubs;             /* subcommands, at most LUA_HOST_MAX_SUBS */
    struct {
        const char *name; /* lower case */
        int arity;        /* counted from the command's name */
    } subs[LUA_HOST_MAX_SUBS];
};

/* Visits every registry entry, in no particular order; returns their
 * number (cb may be NULL to count).  For COMMAND, metrics names and
 * dispatch_init. */
typedef void (*lua_host_cmd_cb)(void *arg, const struct lua_host_cmd *cmd);
size_t lua_host_commands(struct lua_host *h, lua_host_cmd_cb cb, void *arg);

/* Visits the registry entry of `name` (lower case), looked up directly
 * (COMMAND INFO/DOCS with names); 1 when there is one, else 0. */
int lua_host_command(struct lua_host *h, const char *name, lua_host_cmd_cb cb,
                     void *arg);

/* A watch fired, forwarded to M.on_watch. */
void lua_host_watch_event(struct lua_host *h, const char *event,
                          const char *path);

/* Number of commands running. */
size_t lua_host_running(const struct lua_host *h);

/* This process's instance id (host.instance: random, new at each start) in
 * hex, as LOCK.INFO's `sidecar` and the pub/sub inbox name it; out has room
 * for LUA_HOST_INSTANCE_HEX bytes. */
#define LUA_HOST_INSTANCE_HEX 33
void lua_host_instance_hex(const struct lua_host *h, char *out);

/* Coroutines of commands still running, those whose requester left
 * included (lua_host_running leaves them out). */
size_t lua_host_commands_alive(const struct lua_host *h);

/* Coroutines started plus coroutines finished so far (commands, hooks,
 * timers, host.spawn): how much Lua work the sidecar has seen, for its idle
 * check.  Finishes count too: a command whose client left still runs, and
 * leaves its garbage when it ends. */
unsigned long long lua_host_activity(const struct lua_host *h);

/* What the VM holds, for INFO memory. */
struct lua_host_memory {
    size_t used;          /* bytes handed out to Lua (live and garbage) */
    size_t pooled;        /* bytes of the small-block pool (lua_alloc.h) */
    size_t spare_threads; /* finished commands' threads kept for reuse */
    unsigned long long collections; /* lua_host_collect runs */
};
void lua_host_memory(const struct lua_host *h, struct lua_host_memory *m);

/* The sidecar went idle after work: lets the spare threads go, runs a full
 * collection and gives the pool's free chunks back to malloc (the caller
 * may then malloc_trim).  Returns the pool bytes given back.  Costs a full
 * mark and sweep of the live heap (a few ms): for idle moments only. */
size_t lua_host_collect(struct lua_host *h);

/* For /metrics: calls M.stats() if the module has it, on the main state
 * under lua_pcall (it cannot yield: zk.* and host.sleep refuse outside a
 * command coroutine), and passes each numeric field of the table it returns
 * to cb (name borrowed; valid only during the call).  Returns the number of
 * fields passed; 0 when there is no M.stats, it fails (logged at debug) or
 * the host is stopped. */
typedef void (*lua_host_stat_cb)(void *arg, const char *name, double value);
size_t lua_host_stats(struct lua_host *h, lua_host_stat_cb cb, void *arg);

/* AUTH / HELLO AUTH of a user other than "default": calls
 * M.authenticate(user, password, addr) (the policy's authenticate hook,
 * under its guard) on the main state.  Returns 1 (accepted), 0 (refused) or
 * -1 (no hook, or it failed: refused too). */
int lua_host_authenticate(struct lua_host *h, const char *user, size_t ulen,
                          const char *pass, size_t plen, const char *addr);

/* For INFO's # Policy section: calls M.policy_info(), which returns
 * {{name, value}, ...}, and passes each pair to cb in order (both borrowed;
 * valid only during the call; numbers as their decimal text).  Returns the
 * number of pairs. */
typedef void (*lua_host_info_cb)(void *arg, const char *name,
                                 const char *value);
size_t lua_host_policy_info(struct lua_host *h, lua_host_info_cb cb, void *arg);

#endif
