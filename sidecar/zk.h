/*
 * zk.h — the bridge between zookeeper_mt and the libuv loop.
 *
 *   loop thread                     zookeeper_mt threads
 *   -----------                     --------------------
 *   zk_submit() --zoo_a*()--------> IO thread -> ensemble
 *                                   completion thread: deep copy result,
 *   drain <---- eventfd <---------- lock, append to queue, unlock
 *   cb(result) on the loop thread   (zk_queue.h)
 *
 * Every function here is for the loop thread; everything but the queue
 * belongs to it.  While the session is not connected, submitted operations
 * are parked and sent when it connects, or completed with ZK_TIMEOUT at
 * their deadline.  The bridge owns the session lifecycle (zk_session.c):
 * reconnects, a new session after expiry, the local lease clock (own
 * ephemeral nodes count as lost once `last contact + session timeout -
 * margin` passes while disconnected, and the session is then replaced so
 * that they are never re-adopted), and the close on shutdown.
 *
 * Codes: functions that can fail return 0 or a ZR_* code (errors.h).
 * ZooKeeper's result codes (ZOK, ZNONODE, ZCONNECTIONLOSS...) and ours
 * below travel only in struct zk_result's rc, never as a return value.
 *
 * Files: zk.c (requests, completions, delivery), zk_queue.c (the queue,
 * the one lock), zk_group.c (request sizes, group commit), zk_session.c
 * (the session), zk_log.c (the client's log lines); zk_impl.h is theirs.
 */
#ifndef ZKRESP_ZK_H
#define ZKRESP_ZK_H

#include <stddef.h>
#include <stdint.h>

struct uv_loop_s;
struct config;

/* Our result codes, next to ZooKeeper's (which are > -1000). */
#define ZK_TIMEOUT (-1000) /* deadline passed while disconnected */
#define ZK_CLOSING (-1001) /* the bridge is shutting down */
#define ZK_TOOBIG                                                              \
    (-1002) /* over the request limit (zk_max_request): never sent */

/* The most operations one multi of the Lua host may carry (zk.MAX_OPS). */
#define ZK_MULTI_MAX_OPS 10000

enum zk_op_type {
    ZK_OP_GET,
    ZK_OP_EXISTS,
    ZK_OP_CHILDREN,
    ZK_OP_CREATE,
    ZK_OP_SET,
    ZK_OP_DELETE,
    ZK_OP_CHECK, /* only inside a multi */
    ZK_OP_SYNC,
    ZK_OP_MULTI,
    ZK_OP_GET_ACL,
};
#define ZK_OP_TYPES (ZK_OP_GET_ACL + 1)

/* The operation's name in metrics and INFO ("get", "children", ...). */
const char *zk_op_name(enum zk_op_type type);

/* One operation.  zk_submit() copies path and data. */
struct zk_op {
    enum zk_op_type type;
    const char *path;
    const char *data;
    size_t datalen;
    int version; /* set, delete, check; -1: any */
    int flags;   /* create: ZOO_EPHEMERAL | ZOO_SEQUENCE */
    int watch;   /* get, exists, children: leave a one-shot watch */
};

/* One entry of a node's ACL (ZK_OP_GET_ACL). */
struct zk_acl {
    int perms; /* ZOO_PERM_* bits */
    char *scheme;
    char *id;
};

struct zk_stat {
    int64_t czxid, mzxid, ctime, mtime;
    int32_t version, cversion, aversion;
    int64_t ephemeral_owner;
    int32_t data_length, num_children;
    int64_t pzxid;
};

/* A completed operation.  Borrowed by the callback: valid only during it.
 *
 * rc is ZooKeeper's code (ZOK, ZNONODE, ZCONNECTIONLOSS...) or one of ours
 * (ZK_TIMEOUT, ZK_CLOSING, ZK_TOOBIG); never ZCLOSING or ZINVALIDSTATE
 * (they arrive as ZK_CLOSING once the bridge is closing, else as
 * ZCONNECTIONLOSS).  ZOPERATIONTIMEOUT: a ZK_BOUNDED request answered at
 * its deadline, its outcome unknown.  ZBADARGUMENTS: a path the client
 * library would refuse; never sent.  The fields after rc are set only
 * when rc is ZOK (multi: see there). */
struct zk_result {
    enum zk_op_type type;
    int rc;
    char *data; /* get: the node's bytes, NUL-terminated; NULL for none */
    int datalen;
    char *path; /* create: the created path */
    int has_stat;
    struct zk_stat stat; /* get, exists, children, get_acl, set, create (not
                            a grouped create: a multi answers a create's path
                            only) */
    char **children;     /* children */
    int nchildren;
    /* multi: one per op when ZooKeeper answered it (rc ZOK, or the code of
     * the operation that failed, nothing applied): each with its rc (ZOK
     * before the failed one, ZRUNTIMEINCONSISTENCY after it) and, when the
     * multi succeeded, a create's path and a set's stat.  After a
     * connection failure, a timeout or a refusal before sending (any other
     * rc) none: nmulti is 0. */
    struct zk_result *multi;
    int nmulti;
    struct zk_acl *acl; /* get_acl */
    int nacl;
};

typedef void (*zk_done_cb)(const struct zk_result *res, void *arg);

/* Session events: "connected", "new", "disconnected", "lost". */
typedef void (*zk_event_cb)(const char *event, int64_t session_id, void *arg);

/* Watch events: "created", "deleted", "changed", "child" for a path on
 * which a watch was left (zk_op.watch).  A watch fires once. */
typedef void (*zk_watch_cb)(const char *event, const char *path, void *arg);

struct zk;

struct zk *zk_create(struct uv_loop_s *loop, const struct config *cfg,
                     zk_event_cb on_event, void *arg, char *err, size_t errlen);

/* Starts connecting (and keeps retrying until the ensemble answers).
 * Returns 0, or ZR_EZK with the reason in err when the client cannot even
 * start (an unusable connect string), ZR_ENOMEM. */
int zk_start(struct zk *z, char *err, size_t errlen);

void zk_set_watch_cb(struct zk *z, zk_watch_cb cb, void *arg);

/* How a request is sent and answered (zk_submit's flags). */
enum zk_submit_flags {
    /* A write (create, set, delete or multi) that may go out with the other
     * grouped writes of this loop turn as one multi (group commit, see
     * zk_group.c).  It lands somewhere between its submission and its answer,
     * not necessarily in submission order with requests of others; a
     * grouped create's answer may carry no stat. */
    ZK_GROUPED = 1,
    /* Answered by its deadline even once sent: with ZOPERATIONTIMEOUT (its
     * outcome unknown; a late answer from the server is dropped).  Submitted
     * after its deadline, it is not sent and answers ZK_TIMEOUT. */
    ZK_BOUNDED = 2,
};

/* Read-ahead (zk_ahead.c): when the watch on `watch` fires, `read` is read
 * at once; a waiter the event woke takes that read with zk_take_ahead: 0
 * none (read it yourself); 1 come, *now is its answer (then
 * zk_ahead_taken(*slot) ends it); 2 on its way: cb(res, arg) gets it, or an
 * error by `deadline`.  zk_ahead_counts: reads sent, taken. */
void zk_read_ahead(struct zk *z, const char *watch, const char *read);
int zk_take_ahead(struct zk *z, const char *path, double deadline,
                  zk_done_cb cb, void *arg, const struct zk_result **now,
                  int *slot);
void zk_ahead_taken(struct zk *z, int slot);
void zk_ahead_counts(const struct zk *z, uint64_t *sent, uint64_t *taken);

/* Starts an operation; for ZK_OP_MULTI, ops[0..nops) are the multi's parts,
 * otherwise nops is 1.  `deadline` (ms, zk_now() clock) bounds how long it
 * may wait for a connection (then ZK_TIMEOUT: not sent); with ZK_BOUNDED
 * also how long it waits for its answer.  cb (NULL: no answer wanted) is
 * always called exactly once, on the loop thread, and never before
 * zk_submit returns; it may submit again.  An operation
 * parked while the session was being replaced (expiry, lost lease) is never
 * sent under the new session: it completes with ZSESSIONEXPIRED when the
 * old session is given up. */
void zk_submit(struct zk *z, enum zk_op_type type, const struct zk_op *ops,
               int nops, double deadline, int flags, zk_done_cb cb, void *arg);

/* The bytes ZooKeeper reads for the request zk_submit(type, ops, nops)
 * would send: its header and the jute serialization of its body (paths,
 * data, the ACL of creates, a multi's per-operation headers), the length
 * that the server compares with its jute.maxbuffer and drops the
 * connection over. */
size_t zk_request_size(const struct zk *z, enum zk_op_type type,
                       const struct zk_op *ops, int nops);

/* The largest request zk_submit sends (--zk-max-request, or less once
 * ZooKeeper dropped the connection twice over requests of a size: see
 * zk_group.c, "requests too large").  A larger one completes with ZK_TOOBIG and
 * is never sent. */
size_t zk_max_request(const struct zk *z);

/* Closes the session (ephemeral nodes vanish at once), fails parked
 * operations with ZK_CLOSING.  Operations in flight still complete. */
void zk_close(struct zk *z);
/* Closes (zk_close), then answers what is still outstanding (ZK_CLOSING
 * for what the client library never completes) and closes the bridge's
 * libuv handles; z's memory goes with the last close callback, so the loop
 * must run once more. */
void zk_free(struct zk *z);

/* Monotonic milliseconds. */
double zk_now(void);

int64_t zk_session_id(const struct zk *z);
/* The newest zxid in any stat answered so far (czxid, mzxid, pzxid), over
 * every session: a transaction ZooKeeper committed, so every write sent
 * after it was answered commits at a larger zxid.  0 before the first. */
int64_t zk_seen_zxid(const struct zk *z);
/* Counts the sessions this bridge has opened (a handle's generation): a
 * request made for one generation is never sent under another. */
uint64_t zk_generation(const struct zk *z);
/* Until when (zk_now() ms) the current session may still be alive as far
 * as this side can tell: connected, the time of the last answered request
 * plus the session timeout less a margin; disconnected, the local lease
 * deadline; 0 once the lease is lost or while there is no session. */
double zk_lease_end(const struct zk *z);
/* Whether the current session is known lost (expired, or its lease ran out
 * while disconnected) and no new one has connected yet. */
int zk_lease_lost(const struct zk *z);
int zk_connected(const struct zk *z);
/* "connected", "connecting", "expired", "closed" */
const char *zk_state_name(const struct zk *z);
int zk_negotiated_timeout(const struct zk *z);
/* The server we are connected to, or "" */
const char *zk_server(const struct zk *z);
/* Whether ZooKeeper refuses this sidecar (its credentials failed, or the
 * last answer to a write was NOAUTH); the reason in why (never the
 * credentials).  Cleared by a write that succeeds. */
int zk_denied(const struct zk *z, char *why, size_t cap);
/* Operations submitted and not completed. */
size_t zk_inflight(const struct zk *z);
uint64_t zk_sessions_started(const struct zk *z);

/* Times the connected session lost its connection (reconnects). */
uint64_t zk_disconnects(const struct zk *z);
/* Requests refused with ZK_TOOBIG. */
uint64_t zk_requests_too_large(const struct zk *z);
/* Requests of `type` sent to ZooKeeper (a group commit's multi counts as
 * one multi; reads ahead are zk_ahead_counts'). */
uint64_t zk_requests_sent(const struct zk *z, enum zk_op_type type);
/* How long the answered ones took, from sending to their answer on the
 * client library's completion thread (connection losses and local
 * timeouts not counted; a group commit is one multi). */
struct metrics_histo;
const struct metrics_histo *zk_request_took(const struct zk *z,
                                            enum zk_op_type type);
/* How long answers and events waited, from the completion thread's handing
 * them over to the loop thread's taking them: the loop's own delay, which
 * every ZooKeeper round trip of a command pays on top of the network's. */
const struct metrics_histo *zk_answer_waited(const struct zk *z);

struct zk_group_stats {
    uint64_t groups;  /* multis sent carrying several requests */
    uint64_t members; /* requests sent in them */
    uint64_t resent;  /* members sent again alone after another's failure */
};
struct zk_group_stats zk_group_stats(const struct zk *z);

#endif
