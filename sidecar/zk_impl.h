/*
 * zk_impl.h — what the bridge's files share; nothing outside them includes
 * it (they use zk.h).
 *
 *   zk.c          requests: copies, completions (ZooKeeper's completion
 *                 thread), sending or parking, delivery, the drain of the
 *                 completion queue
 *   zk_queue.c    the completion queue: the bridge's one lock
 *   zk_group.c    request sizes (the limit, requests too large) and group
 *                 commit
 *   zk_session.c  the session lifecycle: handles, reconnects, the lease,
 *                 credentials, the tick, create/close/free, the getters
 *   zk_log.c      the C client's own log lines, routed into ours
 *   zk_ahead.c    read-ahead: the read a watch event's waiter makes, sent
 *                 from the completion thread as the event comes
 *
 * Everything but the queue and the read-ahead's registrations belongs to
 * the loop thread.
 */
#ifndef ZKRESP_ZK_IMPL_H
#define ZKRESP_ZK_IMPL_H

#include "metrics.h"
#include "zk.h"
#include "zk_queue.h"

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>
#include <zookeeper/zookeeper.h>

#define ZK_EV_SESSION (-1) /* a queued session event, not an operation */
#define ZK_EV_WATCH (-2)   /* a queued watch event */
#define ZK_GROUP (-3)      /* a group: several requests sent as one multi */
#define ZK_EV_AUTH (-4)    /* a queued answer to our credentials */
#define ZK_EV_AHEAD (-5)   /* a read-ahead's answer (zk_ahead.c) */
#define ZK_AHEAD_MAX 32
#define AUTH_RETRY_MS 5000 /* a new session after the server refused them */
#define TICK_MS 20
#define RESOLVE_DELAY_MS 10000

struct zk_req {
    struct zk_qnode qnode; /* in the completion queue (zk_queue.h) */
    struct zk_req *next;   /* in the parked list */
    struct zk_req *all_prev, *all_next; /* in z->all (or z->groups_out) */
    struct zk *z;
    int kind; /* enum zk_op_type, or ZK_EV_SESSION */
    int nops;
    struct zk_op *ops;     /* deep copies */
    zoo_op_t *zops;        /* multi */
    zoo_op_result_t *zres; /* multi */
    struct Stat *zstats;   /* multi: one per op */
    char **pathbufs;       /* multi creates */
    struct zk_result res;
    zk_done_cb cb;
    void *arg;
    double deadline;
    double sent_at;
    double answered_at;    /* on the completion thread (zk_enqueue) */
    int flags;             /* enum zk_submit_flags */
    int abandoned;         /* answered at its deadline; the reply is dropped */
    uint64_t gen;          /* handle generation the request went to */
    int ev_state;          /* ZK_EV_SESSION: the state; ZK_EV_WATCH: the type */
    struct zk_req *member; /* ZK_GROUP: its first member; a member: the next */
    int offset;            /* a member: where its ops start in the group */
    int unsent;            /* ZK_GROUP: zoo_amulti refused it */
    size_t bytes;          /* zk_request_size of it (a group: of the multi) */
    uint64_t conn;         /* z->connects when it was sent */
    char *ahead;           /* ZK_EV_AHEAD: the path it reads */
    struct zk_req *ahead_req; /* ZK_EV_WATCH: that read (zk_ahead.c) */
    unsigned char *extra;     /* per op: added by wrap_sets (zk.c), or NULL */
};

/* A read-ahead asked for (zk_ahead.c): under ahead_mu. */
struct zk_ahead_reg {
    char *watch, *read;
};

/* A read-ahead begun by an event: the loop's. */
struct zk_ahead_got {
    char *path;
    struct zk_req *inflight; /* the read, until its answer is drained */
    struct zk_req *req;      /* its answer, once drained */
    double at;               /* when */
    uint64_t seq;            /* newer events' reads have greater */
    zk_done_cb cb;           /* its taker, waiting, and until when */
    void *arg;
    double deadline;
};

/* The context a handle's watcher sees. */
struct zk_handle_ctx {
    struct zk *z;
    uint64_t gen;
};

struct zk {
    uv_loop_t *loop;
    struct zk_queue
        queue; /* completions and events, from ZooKeeper's threads */
    uv_timer_t tick;
    int handles_open;

    zhandle_t *zh;
    struct zk_handle_ctx *hctx;
    uint64_t gen;
    int connected;
    int closed;
    int64_t session_id;
    int negotiated;
    uint64_t sessions;
    char server[128];

    struct zk_req *parked_head, *parked_tail;
    struct zk_req *all; /* outstanding operations, loop thread only */
    size_t inflight;

    /* Group commit (see "group commit" below). */
    struct zk_req *group_head, *group_tail;
    int group_ops;
    size_t group_bytes;
    int group_max; /* most operations in one group; < 2: no grouping */
    uv_prepare_t group_prepare;
    uv_check_t group_check;
    int group_armed;
    struct zk_req *groups_out; /* groups sent and not answered */
    struct zk_group_stats gstats;

    /* Requests too large (see "requests too large" below). */
    size_t max_request;    /* --zk-max-request */
    size_t learned_max;    /* 0, or less: what ZooKeeper turned out to take */
    double learned_until;  /* ... for so long (zk_now() ms) */
    size_t suspect_bytes;  /* a large request lost with its connection */
    uint64_t suspect_conn; /* on which connection (z->connects) */
    double suspect_at;
    uint64_t connects, disconnects, too_large;
    uint64_t sent[ZK_OP_TYPES];             /* requests sent, by type */
    struct metrics_histo took[ZK_OP_TYPES]; /* sent to answered, by type */
    struct metrics_histo waited; /* answered to taken by the loop thread */

    double last_contact;   /* send time of the newest answered request */
    int64_t seen_zxid;     /* zk_seen_zxid */
    double lease_deadline; /* while disconnected */
    int lease_lost;
    double last_heartbeat;

    char *hosts;
    char *root;
    char *auth;             /* digest user:password, or NULL */
    struct ACL_vector *acl; /* of every node we create */
    int auth_failed;        /* the server refused the credentials */
    int auth_added;         /* the current handle has them to send */
    double auth_retry_at;   /* when to try a new session then */
    double reopen_at; /* no handle (zookeeper_init failed): when to try again */
    int denied;       /* a write answered NOAUTH / INVALIDACL (its rc) */
    char denied_path[256]; /* that write's first path */
    int session_timeout;
    zk_event_cb on_event;
    void *event_arg;
    zk_watch_cb on_watch;
    void *watch_arg;

    /* Read-ahead (zk_ahead.c). */
    pthread_mutex_t ahead_mu; /* ahead_reg, ahead_inflight */
    struct zk_ahead_reg ahead_reg[ZK_AHEAD_MAX];
    struct zk_req *ahead_inflight;
    unsigned ahead_next;
    struct zk_ahead_got ahead_got[ZK_AHEAD_MAX];
    uint64_t ahead_seq, ahead_sent, ahead_taken;
};

void zk_on_data(int rc, const char *value, int len, const struct Stat *stat,
                const void *data);
void zk_req_free(struct zk_req *r);
void zk_ahead_init(struct zk *z);
void zk_ahead_free(struct zk *z);
struct zk_req *zk_ahead_start(struct zk *z, zhandle_t *zh, uint64_t gen,
                              const char *path);
void zk_ahead_event(struct zk *z, struct zk_req *a);
void zk_ahead_done(struct zk *z, struct zk_req *a);
void zk_ahead_tick(struct zk *z, double now);
void zk_ahead_close(struct zk *z);

/* --- zk.c ----------------------------------------------------------------- */

/* Hands r to the loop thread through the completion queue (any thread). */
void zk_enqueue(struct zk_req *r);
/* Copies s into res (has_stat); nothing when s is NULL. */
void zk_set_stat(struct zk_result *res, const struct Stat *s);
/* A multi's per-operation results, from r->zres and the client's buffers. */
void zk_fill_multi(struct zk_req *r);
/* Whether rc says the connection (not the request) failed. */
int zk_is_connection_rc(int rc);
void zk_note_took(struct zk *z, int kind, const struct zk_req *r);
/* The outstanding lists (z->all, z->groups_out). */
void zk_list_add(struct zk_req **head, struct zk_req *r);
void zk_list_remove(struct zk_req **head, struct zk_req *r);
/* Answers r (its callback, unless abandoned) and frees it. */
void zk_deliver(struct zk *z, struct zk_req *r);
/* Answers the ZK_BOUNDED requests in flight whose deadline has passed. */
void zk_abandon_late(struct zk *z, double now);
/* Completes r with rc, through the queue (never inside zk_submit). */
void zk_fail_later(struct zk_req *r, int rc);
/* Sends r now, or parks it until the session connects. */
void zk_send_or_park(struct zk *z, struct zk_req *r);
/* Sends (or parks again) every parked request. */
void zk_flush_parked(struct zk *z);
/* Fails parked requests whose deadline passed (all of them if `all`). */
void zk_expire_parked(struct zk *z, double now, int all, int rc);
/* Prepares r's zoo_op_t array (a multi, or a group member).  0 or ZR_*. */
int zk_build_multi(struct zk_req *r);
/* Whether the handle may be given a request now. */
int zk_handle_usable(const struct zk *z);
/* Whether a multi may be handed to the library now (the lease runs too). */
int zk_multi_usable(const struct zk *z);
/* Handles everything the queue holds, on the loop thread. */
void zk_drain(struct zk *z);

/* --- zk_group.c ----------------------------------------------------------- */

/* r (a request, or a group) completed: a connection lost under a large
 * request may be over its size (see "requests too large"). */
void zk_note_loss(struct zk *z, const struct zk_req *r);
/* Sends the group held so far. */
void zk_group_send(struct zk *z);
/* Holds r, a write that may be grouped, for this turn's group. */
void zk_group_add(struct zk *z, struct zk_req *r);
/* A group's answer: each member's, or sent again alone. */
void zk_group_done(struct zk *z, struct zk_req *g);
/* Starts or stops the end-of-turn watchers that send the group. */
void zk_group_arm(struct zk *z, int on);

/* --- zk_session.c --------------------------------------------------------- */

/* A session event of the current handle (ZOO_*_STATE). */
void zk_session_state(struct zk *z, int state, double at);

/* Whether r's answer, about to be delivered, may speak for a session that
 * is over: it was sent under a handle given up since, or the local lease
 * ran out after the newest answer the process has seen (it did not run:
 * SIGSTOP, a paused VM, and finds answers queued from before). */
int zk_stale_answer(const struct zk *z, const struct zk_req *r, double now);
/* The answer to the current handle's credentials (ZooKeeper's rc). */
void zk_session_auth(struct zk *z, int rc);

/* --- zk_log.c ------------------------------------------------------------- */

/* Routes the C client's log lines into ours (once per process). */
void zk_log_install(void);

#endif
