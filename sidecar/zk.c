/*
 * zk.c — the zookeeper_mt <-> libuv bridge; the only file that takes a lock.
 *
 *   loop thread                       zookeeper_mt completion thread
 *   zk_submit ──► zoo_a*(req) ──────► completion: copy result into req,
 *                                     lock; append req to queue; unlock;
 *   on_async ◄─── uv_async_send ◄──── (coalesces: drain everything queued)
 *     └─► req->cb(&req->res) on the loop thread; free req
 *
 * Session events arrive through the same queue as records with
 * type ZK_EV_SESSION, tagged with the generation of the handle that produced
 * them, so events of a closed handle are ignored.  Everything except the
 * queue is touched only by the loop thread.
 */
#include "zk.h"

#include "config.h"
#include "errors.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>
#include <zookeeper/zookeeper.h>

#define ZK_EV_SESSION (-1) /* a queued session event, not an operation */
#define ZK_EV_WATCH (-2)   /* a queued watch event */
#define ZK_GROUP (-3)      /* a group: several requests sent as one multi */
#define ZK_EV_AUTH (-4)    /* a queued answer to our credentials */
#define AUTH_RETRY_MS 5000 /* a new session after the server refused them */
#define TICK_MS 20
#define RESOLVE_DELAY_MS 10000

struct zk_req {
    struct zk_req *next; /* in the completion queue or the parked list */
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
    int flags;             /* enum zk_submit_flags */
    int abandoned;         /* answered at its deadline; the reply is dropped */
    uint64_t gen;          /* handle generation the request went to */
    int ev_state;          /* ZK_EV_SESSION: the state; ZK_EV_WATCH: the type */
    struct zk_req *member; /* ZK_GROUP: its first member; a member: the next */
    int offset;            /* a member: where its ops start in the group */
    int unsent;            /* ZK_GROUP: zoo_amulti refused it */
    size_t bytes;          /* zk_request_size of it (a group: of the multi) */
    uint64_t conn;         /* z->connects when it was sent */
};

/* The context a handle's watcher sees. */
struct zk_handle_ctx {
    struct zk *z;
    uint64_t gen;
};

struct zk {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t tick;
    int handles_open;

    pthread_mutex_t mu; /* guards qhead/qtail only */
    struct zk_req *qhead, *qtail;

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
    size_t suspect_bytes;  /* a large request lost with its connection */
    uint64_t suspect_conn; /* on which connection (z->connects) */
    double suspect_at;
    uint64_t connects, disconnects, too_large;

    double last_contact;   /* send time of the newest answered request */
    double lease_deadline; /* while disconnected */
    int lease_lost;
    double last_heartbeat;

    char *hosts;
    char *root;
    char *auth;             /* digest user:password, or NULL */
    struct ACL_vector *acl; /* of every node we create */
    int auth_failed;        /* the server refused the credentials */
    double auth_retry_at;   /* when to try a new session then */
    int denied;             /* a write answered NOAUTH / INVALIDACL (its rc) */
    char denied_path[256];  /* that write's first path */
    int session_timeout;
    zk_event_cb on_event;
    void *event_arg;
    zk_watch_cb on_watch;
    void *watch_arg;
};

double zk_now(void)
{
    return (double)uv_hrtime() / 1e6;
}

/* The local lease: the session may have expired in the ensemble once the
 * session timeout has passed since the send time of the last request the
 * server answered; a margin covers the clocks' drift. */
static double lease_margin(const struct zk *z)
{
    double margin = z->negotiated / 10.0;
    return margin < 100 ? 100 : margin;
}

/* --- completion side (ZooKeeper's completion thread) -------------------- */

static void enqueue(struct zk_req *r)
{
    struct zk *z = r->z;
    r->next = NULL;
    pthread_mutex_lock(&z->mu);
    if (z->qtail)
        z->qtail->next = r;
    else
        z->qhead = r;
    z->qtail = r;
    pthread_mutex_unlock(&z->mu);
    uv_async_send(&z->async);
}

static void copy_stat(struct zk_stat *out, const struct Stat *s)
{
    out->czxid = s->czxid;
    out->mzxid = s->mzxid;
    out->ctime = s->ctime;
    out->mtime = s->mtime;
    out->version = s->version;
    out->cversion = s->cversion;
    out->aversion = s->aversion;
    out->ephemeral_owner = s->ephemeralOwner;
    out->data_length = s->dataLength;
    out->num_children = s->numChildren;
    out->pzxid = s->pzxid;
}

static void set_stat(struct zk_result *res, const struct Stat *s)
{
    if (s) {
        copy_stat(&res->stat, s);
        res->has_stat = 1;
    }
}

static void on_void(int rc, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    enqueue(r);
}

static void on_stat(int rc, const struct Stat *stat, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK)
        set_stat(&r->res, stat);
    enqueue(r);
}

static void on_data(int rc, const char *value, int len, const struct Stat *stat,
                    const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK) {
        set_stat(&r->res, stat);
        if (value && len >= 0) {
            r->res.data = malloc((size_t)len + 1);
            if (r->res.data) {
                memcpy(r->res.data, value, (size_t)len);
                r->res.data[len] = 0;
                r->res.datalen = len;
            } else {
                r->res.rc = ZSYSTEMERROR;
            }
        }
    }
    enqueue(r);
}

static void on_strings(int rc, const struct String_vector *sv,
                       const struct Stat *stat, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK && stat) {
        copy_stat(&r->res.stat, stat);
        r->res.has_stat = 1;
    }
    if (rc == ZOK && sv && sv->count > 0) {
        r->res.children = calloc((size_t)sv->count, sizeof(char *));
        if (r->res.children) {
            for (int i = 0; i < sv->count; i++)
                r->res.children[i] = strdup(sv->data[i]);
            r->res.nchildren = sv->count;
        } else {
            r->res.rc = ZSYSTEMERROR;
        }
    }
    enqueue(r);
}

static void on_acl(int rc, struct ACL_vector *acl, struct Stat *stat,
                   const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK && acl && acl->count > 0) {
        r->res.acl = calloc((size_t)acl->count, sizeof(struct zk_acl));
        if (r->res.acl) {
            for (int i = 0; i < acl->count; i++) {
                r->res.acl[i].perms = acl->data[i].perms;
                r->res.acl[i].scheme = strdup(acl->data[i].id.scheme);
                r->res.acl[i].id = strdup(acl->data[i].id.id);
            }
            r->res.nacl = acl->count;
        } else {
            r->res.rc = ZSYSTEMERROR;
        }
    }
    if (rc == ZOK)
        set_stat(&r->res, stat);
    enqueue(r);
}

static void on_string(int rc, const char *value, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    enqueue(r);
}

static void on_string_stat(int rc, const char *value, const struct Stat *stat,
                           const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK) {
        if (value)
            r->res.path = strdup(value);
        set_stat(&r->res, stat);
    }
    enqueue(r);
}

static int is_connection_rc(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
           rc == ZSESSIONMOVED || rc == ZCLOSING || rc == ZINVALIDSTATE ||
           rc == ZSESSIONEXPIRED;
}

/* The per-operation results of a multi, from r->zres and the buffers the
 * client filled (r->res.rc set).  Only a server's answer has them: after a
 * connection failure, or a request never sent, r->zres may hold anything
 * and the caller gets none.  A multi that failed applied nothing: its
 * operations' codes say which one failed (those before it answer ZOK, but
 * the client filled no path or stat for them). */
static void fill_multi(struct zk_req *r)
{
    int rc = r->res.rc;
    if (rc != ZOK &&
        (rc >= ZAPIERROR || rc <= ZK_TIMEOUT || is_connection_rc(rc)))
        return;
    r->res.multi = calloc((size_t)r->nops, sizeof(struct zk_result));
    if (!r->res.multi)
        return;
    r->res.nmulti = r->nops;
    for (int i = 0; i < r->nops; i++) {
        struct zk_result *m = &r->res.multi[i];
        m->type = r->ops[i].type;
        m->rc = r->zres[i].err;
        if (rc != ZOK)
            continue;
        if (r->ops[i].type == ZK_OP_CREATE && r->pathbufs[i])
            m->path = strdup(r->pathbufs[i]);
        if (r->ops[i].type == ZK_OP_SET)
            set_stat(m, &r->zstats[i]);
    }
}

static void on_multi(int rc, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    fill_multi(r);
    enqueue(r);
}

/* A group's answer; split on the loop thread (group_done). */
static void on_group(int rc, const void *data)
{
    struct zk_req *g = (struct zk_req *)data;
    g->res.rc = rc;
    enqueue(g);
}

/* The watcher of every handle; runs on the completion thread. */
static void on_watch(zhandle_t *zh, int type, int state, const char *path,
                     void *ctx)
{
    struct zk_handle_ctx *hc = ctx;
    if (hc == NULL)
        return;
    struct zk_req *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->z = hc->z;
    r->gen = hc->gen;
    if (type == ZOO_SESSION_EVENT) {
        r->kind = ZK_EV_SESSION;
        r->ev_state = state;
    } else {
        r->kind = ZK_EV_WATCH;
        r->ev_state = type;
        r->res.path = strdup(path ? path : "");
    }
    enqueue(r);
}

/* The answer to the credentials a handle sent (zoo_add_auth). */
static void on_auth(int rc, const void *data)
{
    const struct zk_handle_ctx *hc = data;
    if (rc == ZCLOSING)
        return; /* the handle is being closed: hc may go with it */
    struct zk_req *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->z = hc->z;
    r->gen = hc->gen;
    r->kind = ZK_EV_AUTH;
    r->ev_state = rc;
    enqueue(r);
}

/* --- loop side ----------------------------------------------------------- */

static void req_free(struct zk_req *r)
{
    for (int i = 0; i < r->nops; i++) {
        free((char *)r->ops[i].path);
        free((char *)r->ops[i].data);
        if (r->pathbufs)
            free(r->pathbufs[i]);
    }
    free(r->ops);
    free(r->zops);
    free(r->zres);
    free(r->zstats);
    free(r->pathbufs);
    free(r->res.data);
    free(r->res.path);
    for (int i = 0; i < r->res.nchildren; i++)
        free(r->res.children[i]);
    free(r->res.children);
    for (int i = 0; i < r->res.nmulti; i++)
        free(r->res.multi[i].path);
    free(r->res.multi);
    for (int i = 0; i < r->res.nacl; i++) {
        free(r->res.acl[i].scheme);
        free(r->res.acl[i].id);
    }
    free(r->res.acl);
    free(r);
}

/* The outstanding lists (z->all, z->groups_out), through all_prev/all_next. */
static void list_add(struct zk_req **head, struct zk_req *r)
{
    r->all_prev = NULL;
    r->all_next = *head;
    if (*head)
        (*head)->all_prev = r;
    *head = r;
}

static void list_remove(struct zk_req **head, struct zk_req *r)
{
    if (r->all_prev)
        r->all_prev->all_next = r->all_next;
    else
        *head = r->all_next;
    if (r->all_next)
        r->all_next->all_prev = r->all_prev;
}

/* Whether path lies in the directory of refused (the parent of the node
 * ZooKeeper refused us): the area a refusal says something about. */
static int in_refused_area(const char *path, const char *refused)
{
    const char *slash = strrchr(refused, '/');
    size_t n = slash ? (size_t)(slash - refused) : 0;
    return path && strncmp(path, refused, n) == 0 &&
           (path[n] == '/' || path[n] == 0);
}

/* Keeps zk_denied's state: a write answered NOAUTH (or INVALIDACL: our
 * credentials are not those of the ACL we ask for) means ZooKeeper refuses
 * this sidecar there; a later write that succeeds in the same directory,
 * that it no longer does (writes elsewhere, e.g. a guard's, say nothing of
 * it). */
static void note_access(struct zk *z, const struct zk_req *r)
{
    int write = r->kind == ZK_OP_CREATE || r->kind == ZK_OP_SET ||
                r->kind == ZK_OP_DELETE || r->kind == ZK_OP_MULTI;
    if (r->res.rc == ZNOAUTH || r->res.rc == ZINVALIDACL) {
        z->denied = r->res.rc;
        snprintf(z->denied_path, sizeof z->denied_path, "%s",
                 r->nops > 0 ? r->ops[0].path : "");
    } else if (z->denied && write && r->res.rc == ZOK) {
        for (int i = 0; i < r->nops; i++)
            if (in_refused_area(r->ops[i].path, z->denied_path)) {
                z->denied = 0;
                break;
            }
    }
}

static void note_loss(struct zk *z, const struct zk_req *r);

static void deliver(struct zk *z, struct zk_req *r)
{
    list_remove(&z->all, r);
    z->inflight--;
    if (r->res.rc == ZCLOSING || r->res.rc == ZINVALIDSTATE)
        r->res.rc = z->closed ? ZK_CLOSING : ZCONNECTIONLOSS;
    note_loss(z, r);
    if (r->sent_at > 0 && !is_connection_rc(r->res.rc) &&
        r->res.rc != ZK_TIMEOUT && r->sent_at > z->last_contact)
        z->last_contact = r->sent_at;
    note_access(z, r);
    if (r->cb && !r->abandoned)
        r->cb(&r->res, r->arg);
    req_free(r);
}

/* Answers r, sent and still unanswered, now: its deadline passed.  Its
 * outcome is unknown (ZOPERATIONTIMEOUT); the library still owns it, and
 * its real completion, when it comes, only frees it. */
static void abandon(struct zk_req *r)
{
    struct zk_result res = {.type = r->res.type, .rc = ZOPERATIONTIMEOUT};
    r->abandoned = 1;
    if (r->cb)
        r->cb(&res, r->arg);
}

/* Answers the ZK_BOUNDED requests in flight whose deadline has passed. */
static void abandon_late(struct zk *z, double now)
{
    for (struct zk_req *r = z->all, *next; r; r = next) {
        next = r->all_next; /* a callback may submit: new ones go in front */
        if ((r->flags & ZK_BOUNDED) && !r->abandoned && r->sent_at > 0 &&
            now >= r->deadline)
            abandon(r);
    }
}

/* Completes r with rc from the loop thread, still asynchronously (through
 * the queue), so a callback never runs inside zk_submit. */
static void fail_later(struct zk_req *r, int rc)
{
    r->res.rc = rc;
    r->sent_at = 0;
    enqueue(r);
}

static void send_req(struct zk *z, struct zk_req *r)
{
    zhandle_t *zh = z->zh;
    struct zk_op *op = &r->ops[0];
    int rc;
    r->sent_at = zk_now();
    r->conn = z->connects;
    switch (r->kind) {
    case ZK_OP_GET:
        rc = zoo_aget(zh, op->path, op->watch, on_data, r);
        break;
    case ZK_OP_EXISTS:
        rc = zoo_aexists(zh, op->path, op->watch, on_stat, r);
        break;
    case ZK_OP_CHILDREN:
        rc = zoo_aget_children2(zh, op->path, op->watch, on_strings, r);
        break;
    case ZK_OP_CREATE:
        rc = zoo_acreate2(zh, op->path, op->data, (int)op->datalen, z->acl,
                          op->flags, on_string_stat, r);
        break;
    case ZK_OP_GET_ACL:
        rc = zoo_aget_acl(zh, op->path, on_acl, r);
        break;
    case ZK_OP_SET:
        rc = zoo_aset(zh, op->path, op->data, (int)op->datalen, op->version,
                      on_stat, r);
        break;
    case ZK_OP_DELETE:
        rc = zoo_adelete(zh, op->path, op->version, on_void, r);
        break;
    case ZK_OP_SYNC:
        rc = zoo_async(zh, op->path, on_string, r);
        break;
    case ZK_OP_MULTI:
        rc = zoo_amulti(zh, r->nops, r->zops, r->zres, on_multi, r);
        break;
    default:
        rc = ZBADARGUMENTS;
        break;
    }
    if (rc != ZOK)
        fail_later(r, rc);
}

static void park(struct zk *z, struct zk_req *r)
{
    r->next = NULL;
    if (z->parked_tail)
        z->parked_tail->next = r;
    else
        z->parked_head = r;
    z->parked_tail = r;
}

static void send_or_park(struct zk *z, struct zk_req *r);

static void flush_parked(struct zk *z)
{
    struct zk_req *r = z->parked_head;
    z->parked_head = z->parked_tail = NULL;
    while (r) {
        struct zk_req *next = r->next;
        send_or_park(z, r);
        r = next;
    }
}

/* Fails parked requests whose deadline passed (all of them if `all`). */
static void expire_parked(struct zk *z, double now, int all, int rc)
{
    struct zk_req **pp = &z->parked_head, *r;
    z->parked_tail = NULL;
    while ((r = *pp) != NULL) {
        if (all || now >= r->deadline) {
            *pp = r->next;
            fail_later(r, rc);
        } else {
            z->parked_tail = r;
            pp = &r->next;
        }
    }
}

static int build_multi(struct zk_req *r)
{
    int n = r->nops;
    r->zops = calloc((size_t)n, sizeof(zoo_op_t));
    r->zres = calloc((size_t)n, sizeof(zoo_op_result_t));
    r->zstats = calloc((size_t)n, sizeof(struct Stat));
    r->pathbufs = calloc((size_t)n, sizeof(char *));
    if (!r->zops || !r->zres || !r->zstats || !r->pathbufs)
        return ZR_ENOMEM;
    for (int i = 0; i < n; i++) {
        struct zk_op *op = &r->ops[i];
        switch (op->type) {
        case ZK_OP_CREATE: {
            size_t cap = strlen(op->path) + 32;
            r->pathbufs[i] = malloc(cap);
            if (!r->pathbufs[i])
                return ZR_ENOMEM;
            r->pathbufs[i][0] = '\0';
            zoo_create_op_init(&r->zops[i], op->path, op->data,
                               (int)op->datalen, r->z->acl, op->flags,
                               r->pathbufs[i], (int)cap);
            break;
        }
        case ZK_OP_DELETE:
            zoo_delete_op_init(&r->zops[i], op->path, op->version);
            break;
        case ZK_OP_SET:
            zoo_set_op_init(&r->zops[i], op->path, op->data, (int)op->datalen,
                            op->version, &r->zstats[i]);
            break;
        case ZK_OP_CHECK:
            zoo_check_op_init(&r->zops[i], op->path, op->version);
            break;
        default:
            return ZR_EINVAL;
        }
    }
    return 0;
}

/* Whether the handle may be given a request now: our session is connected
 * and the client library agrees.  The library's state runs ahead of ours
 * (its events reach the loop through the queue), and a request must never
 * reach it in an unrecoverable state: zoo_amulti then frees memory it does
 * not own (it frees an uninitialised path for every operation after the
 * first that fails to initialise, seen as a double free after a session
 * expiry).  From CONNECTED the library reaches such a state only through a
 * reconnection and a server's answer, never within one call. */
static int handle_usable(const struct zk *z)
{
    return z->connected && z->zh && zoo_state(z->zh) == ZOO_CONNECTED_STATE;
}

/* Sends r now, or parks it until the session connects. */
static void send_or_park(struct zk *z, struct zk_req *r)
{
    if (z->closed)
        fail_later(r, ZK_CLOSING);
    else if (r->gen != z->gen)
        fail_later(r, ZSESSIONEXPIRED);
    else if ((r->flags & ZK_BOUNDED) && zk_now() >= r->deadline)
        fail_later(r, ZK_TIMEOUT);
    else if (handle_usable(z))
        send_req(z, r);
    else if (zk_now() >= r->deadline)
        fail_later(r, ZK_TIMEOUT);
    else
        park(z, r);
}

/* --- requests too large ---------------------------------------------------
 *
 * A ZooKeeper server drops the connection of a client that sends a request
 * longer than its jute.maxbuffer (1 MiB - 1 by default), without an answer;
 * the client reconnects and the request is lost with the connection, its
 * outcome unknown to the command, which may send it again.  So every
 * request's serialized size is computed before it is sent, and one over the
 * limit (--zk-max-request, under jute.maxbuffer by default) completes with
 * ZK_TOOBIG and is never sent.
 *
 * Should a server take less than that (its jute.maxbuffer set lower than
 * --zk-max-request), the first request over its limit costs a reconnect.
 * When a second connection is lost with a request at least SUSPECT_MIN
 * bytes long in flight, within SUSPECT_WINDOW_MS of the first, the limit in
 * force becomes the smaller of the two sizes less one, for as long as the
 * process runs: a request is then refused rather than sent again into the
 * same drop (never a reconnect loop).  Ordinary connection losses rarely
 * meet two such requests in a row; when they do, only requests that large
 * are refused, with an error that names the limit. */
#define SUSPECT_MIN (64 * 1024)
#define SUSPECT_WINDOW_MS 60000

static size_t jute_string(const char *s)
{
    return 4 + (s ? strlen(s) : 0);
}

/* One operation's record, without the request or multi header. */
static size_t op_size(const struct zk *z, enum zk_op_type type,
                      const struct zk_op *op)
{
    size_t n = jute_string(op->path);
    switch (type) {
    case ZK_OP_GET:
    case ZK_OP_EXISTS:
    case ZK_OP_CHILDREN:
        return n + 1; /* the watch flag */
    case ZK_OP_SYNC:
    case ZK_OP_GET_ACL:
        return n;
    case ZK_OP_CREATE:
        n += 4 + op->datalen + 4 + 4; /* data, ACL count, flags */
        for (int i = 0; z->acl && i < z->acl->count; i++)
            n += 4 + jute_string(z->acl->data[i].id.scheme) +
                 jute_string(z->acl->data[i].id.id);
        return n;
    case ZK_OP_SET:
        return n + 4 + op->datalen + 4; /* data, version */
    case ZK_OP_DELETE:
    case ZK_OP_CHECK:
        return n + 4; /* version */
    default:
        return n;
    }
}

#define REQUEST_HEADER 8 /* xid, type */
#define MULTI_HEADER 9   /* type, done, err: before each op and at the end */

size_t zk_request_size(const struct zk *z, enum zk_op_type type,
                       const struct zk_op *ops, int nops)
{
    if (type != ZK_OP_MULTI)
        return REQUEST_HEADER + op_size(z, type, &ops[0]);
    size_t n = REQUEST_HEADER + MULTI_HEADER;
    for (int i = 0; i < nops; i++)
        n += MULTI_HEADER + op_size(z, ops[i].type, &ops[i]);
    return n;
}

size_t zk_max_request(const struct zk *z)
{
    if (z->learned_max && z->learned_max < z->max_request)
        return z->learned_max;
    return z->max_request;
}

/* r (a request, or a group) completed: when its connection was lost under
 * it and it was large, it may be why (see above). */
static void note_loss(struct zk *z, const struct zk_req *r)
{
    if (r->res.rc != ZCONNECTIONLOSS || r->sent_at <= 0 ||
        r->bytes < SUSPECT_MIN)
        return;
    double now = zk_now();
    if (z->suspect_bytes && r->conn != z->suspect_conn &&
        now - z->suspect_at < SUSPECT_WINDOW_MS) {
        size_t lim =
            (r->bytes < z->suspect_bytes ? r->bytes : z->suspect_bytes) - 1;
        if (lim < zk_max_request(z)) {
            z->learned_max = lim;
            log_warn("zk.request_dropped",
                     "bytes=%zu earlier_bytes=%zu max_request=%zu "
                     "reason=\"ZooKeeper dropped the connection twice with a "
                     "request this large in flight; larger requests are "
                     "refused from now on (check the servers' jute.maxbuffer "
                     "and --zk-max-request)\"",
                     r->bytes, z->suspect_bytes, lim);
        }
        z->suspect_bytes = 0;
        return;
    }
    /* the largest request lost with a connection is its suspect */
    if (!z->suspect_bytes || r->conn != z->suspect_conn ||
        r->bytes > z->suspect_bytes) {
        z->suspect_bytes = r->bytes;
        z->suspect_conn = r->conn;
        z->suspect_at = now;
    }
}

/* --- group commit ---------------------------------------------------------
 *
 * Writes submitted with ZK_GROUPED in one turn of the loop are sent
 * together, as one multi, when the turn's callbacks are done (or sooner,
 * when the group is full): ZooKeeper then handles one request and logs one
 * transaction for many commands, which is most of its cost per write.  Any
 * other request sends the group first, so one session's requests still
 * reach ZooKeeper in the order they were submitted.  A group of one is sent
 * as the request itself.
 *
 * A multi is all or nothing.  When it succeeds, every member did.  When
 * the connection fails, every member's outcome is unknown, as its own
 * request's would be.  When an operation fails, its member gets the answer
 * it would have had alone, unless an operation of an earlier member touched
 * the same node, its parent or a child (which may be why it failed); every
 * other member was not applied and is sent again on its own.  So a grouped
 * write lands somewhere between its submission and its answer, which is all
 * that keyed writes (ordered among themselves by the key queues) need.  A
 * grouped create answers no stat: a multi answers a create's path only. */
#define GROUP_MAX_BYTES (256 * 1024)

static void on_group_turn(uv_handle_t *h);

static void group_arm(struct zk *z, int on)
{
    if (on == z->group_armed)
        return;
    z->group_armed = on;
    if (on) {
        uv_prepare_start(&z->group_prepare, (uv_prepare_cb)on_group_turn);
        uv_check_start(&z->group_check, (uv_check_cb)on_group_turn);
    } else {
        uv_prepare_stop(&z->group_prepare);
        uv_check_stop(&z->group_check);
    }
}

/* r's part of a group's multi: its operations with their headers. */
static size_t member_bytes(const struct zk *z, const struct zk_req *r)
{
    size_t n = 0;
    for (int i = 0; i < r->nops; i++)
        n += MULTI_HEADER + op_size(z, r->ops[i].type, &r->ops[i]);
    return n;
}

/* The most bytes of members a group holds: GROUP_MAX_BYTES, and never a
 * multi over the request limit. */
static size_t group_cap(const struct zk *z)
{
    size_t cap = zk_max_request(z) - REQUEST_HEADER - MULTI_HEADER;
    return cap < GROUP_MAX_BYTES ? cap : GROUP_MAX_BYTES;
}

/* Sends the group held so far. */
static void group_send(struct zk *z)
{
    struct zk_req *head = z->group_head, *m;
    if (!head)
        return;
    int total = z->group_ops;
    z->group_head = z->group_tail = NULL;
    z->group_ops = 0;
    z->group_bytes = 0;
    group_arm(z, 0);

    struct zk_req *g = NULL;
    if (head->member && handle_usable(z) && !z->closed) {
        g = calloc(1, sizeof *g);
        if (g) {
            g->zops = calloc((size_t)total, sizeof(zoo_op_t));
            g->zres = calloc((size_t)total, sizeof(zoo_op_result_t));
        }
        for (m = head; g && g->zops && g->zres && m; m = m->member)
            if (!m->zops && build_multi(m) < 0)
                break;
        if (!g || !g->zops || !g->zres || m) {
            if (g) {
                free(g->zops);
                free(g->zres);
                free(g);
            }
            g = NULL;
        }
    }
    if (!g) { /* one member, no connection, or no memory: each alone */
        while (head) {
            m = head;
            head = m->member;
            m->member = NULL;
            send_or_park(z, m);
        }
        return;
    }
    g->z = z;
    g->kind = ZK_GROUP;
    g->gen = z->gen;
    g->nops = total;
    g->member = head;
    g->bytes = REQUEST_HEADER + MULTI_HEADER;
    g->conn = z->connects;
    int off = 0;
    double now = zk_now();
    for (m = head; m; m = m->member) {
        m->offset = off;
        m->sent_at = now;
        m->conn = z->connects;
        g->bytes += member_bytes(z, m);
        memcpy(&g->zops[off], m->zops, (size_t)m->nops * sizeof(zoo_op_t));
        off += m->nops;
        z->gstats.members++;
    }
    z->gstats.groups++;
    list_add(&z->groups_out, g);
    g->sent_at = now;
    int rc = zoo_amulti(z->zh, total, g->zops, g->zres, on_group, g);
    if (rc != ZOK) {
        g->unsent = 1;
        g->res.rc = rc;
        enqueue(g);
    }
}

static void on_group_turn(uv_handle_t *h)
{
    group_send(h->data);
}

/* Holds r, a write that may be grouped, for this turn's group. */
static void group_add(struct zk *z, struct zk_req *r)
{
    size_t bytes = member_bytes(z, r), cap = group_cap(z);
    if (r->nops >= z->group_max || bytes >= cap) {
        group_send(z);
        send_or_park(z, r);
        return;
    }
    if (z->group_ops + r->nops > z->group_max || z->group_bytes + bytes > cap)
        group_send(z);
    r->member = NULL;
    if (z->group_tail)
        z->group_tail->member = r;
    else
        z->group_head = r;
    z->group_tail = r;
    z->group_ops += r->nops;
    z->group_bytes += bytes;
    group_arm(z, 1);
}

/* Whether path a is b, its ancestor or its descendant. */
static int related(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > lb) {
        const char *t = a;
        a = b;
        b = t;
        size_t n = la;
        la = lb;
        lb = n;
    }
    if (strncmp(a, b, la) != 0)
        return 0;
    return la == lb || b[la] == '/' || (la == 1 && a[0] == '/');
}

/* Whether operation f of group g, which belongs to member mf, failed on its
 * own: no operation of an earlier member touched a related node. */
static int own_failure(const struct zk_req *g, const struct zk_req *mf, int f)
{
    const char *path = mf->ops[f - mf->offset].path;
    for (const struct zk_req *m = g->member; m != mf; m = m->member)
        for (int i = 0; i < m->nops; i++)
            if (related(m->ops[i].path, path))
                return 0;
    return 1;
}

/* m's answer as its own request would have had it, from its part of the
 * group's results. */
static void member_answer(struct zk_req *m, int rc)
{
    m->res.rc = rc;
    if (m->kind == ZK_OP_MULTI)
        fill_multi(m);
    else if (rc == ZOK && m->kind == ZK_OP_CREATE && m->pathbufs[0])
        m->res.path = strdup(m->pathbufs[0]);
    else if (rc == ZOK && m->kind == ZK_OP_SET)
        set_stat(&m->res, &m->zstats[0]);
}

static void group_done(struct zk *z, struct zk_req *g)
{
    list_remove(&z->groups_out, g);
    if (!g->unsent)
        note_loss(z, g);

    /* An operation that failed answers the multi's rc; after a connection
     * failure the results may hold anything. */
    int rc = g->res.rc, failed = -1;
    if (rc != ZOK && !g->unsent && !is_connection_rc(rc) && rc != ZK_CLOSING)
        for (int i = 0; i < g->nops && failed < 0; i++)
            if (g->zres[i].err == rc)
                failed = i;
    struct zk_req *m, *owner = NULL; /* the member whose failure is its own */
    for (m = g->member; m && failed >= 0 && !owner; m = m->member)
        if (failed < m->offset + m->nops)
            owner = own_failure(g, m, failed) ? m : g; /* g: nobody's */
    m = g->member;
    while (m) {
        struct zk_req *next = m->member;
        m->member = NULL;
        memcpy(m->zres, &g->zres[m->offset],
               (size_t)m->nops * sizeof(zoo_op_result_t));
        if (!g->unsent && (failed < 0 || m == owner)) {
            member_answer(m, rc); /* a failed multi answers its op's rc */
            deliver(z, m);
        } else if (m->abandoned) { /* answered already: not applied */
            deliver(z, m);
        } else {
            memset(m->zres, 0, (size_t)m->nops * sizeof(zoo_op_result_t));
            z->gstats.resent++;
            send_or_park(z, m);
        }
        m = next;
    }
    free(g->zops);
    free(g->zres);
    free(g);
}

/* Whether the client library accepts path (its own check, which runs in
 * the library only after a multi has started: a path it refuses there makes
 * it free memory it does not own, so every path is checked here first).
 * Absolute, no empty, "." or ".." component, no trailing '/' (unless the
 * node is sequential: the server appends the number), no byte 1-30. */
static int path_ok(const char *path, int flags)
{
    size_t len = strlen(path);
    if (len == 0 || path[0] != '/')
        return 0;
    if (len == 1)
        return 1;
    if (path[len - 1] == '/' && !(flags & ZOO_SEQUENCE))
        return 0;
    const char *c = path + 1, *part = c;
    for (;; c++) {
        if (*c == '/' || *c == '\0') {
            size_t n = (size_t)(c - part);
            int last = *c == '\0';
            if (n == 0 && !(last && (flags & ZOO_SEQUENCE)))
                return 0;
            if ((n == 1 && part[0] == '.') ||
                (n == 2 && part[0] == '.' && part[1] == '.'))
                if (!last || !(flags & ZOO_SEQUENCE))
                    return 0;
            if (last)
                return 1;
            part = c + 1;
        } else if ((unsigned char)*c < 0x1f) {
            return 0;
        }
    }
}

void zk_submit(struct zk *z, enum zk_op_type type, const struct zk_op *ops,
               int nops, double deadline, int flags, zk_done_cb cb, void *arg)
{
    struct zk_req *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->z = z;
    r->kind = (int)type;
    r->res.type = type;
    r->cb = cb;
    r->arg = arg;
    r->deadline = deadline;
    r->flags = flags;
    r->nops = type == ZK_OP_MULTI ? nops : 1;
    r->ops = calloc((size_t)r->nops, sizeof(struct zk_op));
    if (!r->ops)
        abort();
    z->inflight++;
    list_add(&z->all, r);
    for (int i = 0; i < r->nops; i++) {
        r->ops[i] = ops[i];
        r->ops[i].path = strdup(ops[i].path ? ops[i].path : "");
        if (ops[i].data) {
            char *d = malloc(ops[i].datalen + 1);
            if (!d)
                abort();
            memcpy(d, ops[i].data, ops[i].datalen);
            d[ops[i].datalen] = 0;
            r->ops[i].data = d;
        }
    }
    int valid = 1;
    for (int i = 0; i < r->nops; i++)
        valid = valid &&
                path_ok(r->ops[i].path,
                        r->ops[i].type == ZK_OP_CREATE ? r->ops[i].flags : 0);
    if (!valid || (type == ZK_OP_MULTI && build_multi(r) < 0)) {
        fail_later(r, ZBADARGUMENTS);
        return;
    }
    r->bytes = zk_request_size(z, type, r->ops, r->nops);
    if (r->bytes > zk_max_request(z)) {
        z->too_large++;
        log_debug("zk.request_too_large", "bytes=%zu max_request=%zu ops=%d",
                  r->bytes, zk_max_request(z), r->nops);
        fail_later(r, ZK_TOOBIG);
        return;
    }
    r->gen = z->gen;
    if ((flags & ZK_GROUPED) && z->group_max > 1 && handle_usable(z) &&
        !((flags & ZK_BOUNDED) && zk_now() >= deadline) &&
        (type == ZK_OP_CREATE || type == ZK_OP_SET || type == ZK_OP_DELETE ||
         type == ZK_OP_MULTI)) {
        group_add(z, r);
    } else {
        group_send(z);      /* what was submitted before goes first */
        send_or_park(z, r); /* which fails it when the bridge is closed */
    }
}

/* --- session lifecycle --------------------------------------------------- */

static int open_handle(struct zk *z, char *err, size_t errlen)
{
    struct zk_handle_ctx *hc = malloc(sizeof *hc);
    if (!hc)
        return ZR_ENOMEM;
    hc->z = z;
    hc->gen = ++z->gen;
    z->hctx = hc;
    z->connected = 0;
    z->zh = zookeeper_init(z->hosts, on_watch, z->session_timeout, NULL, hc, 0);
    if (!z->zh) {
        if (err)
            snprintf(err, errlen,
                     "cannot start a ZooKeeper client for '%s': %s", z->hosts,
                     strerror(errno));
        return ZR_EZK;
    }
    /* By default the client resolves the host list again every time it
     * polls its socket (getaddrinfo per operation); once every few seconds
     * still follows DNS changes of the ensemble, and a connection loss
     * always resolves anew. */
    zoo_set_servers_resolution_delay(z->zh, RESOLVE_DELAY_MS);
    /* The library sends them on every (re)connection, before any request. */
    if (z->auth) {
        int arc = zoo_add_auth(z->zh, "digest", z->auth, (int)strlen(z->auth),
                               on_auth, hc);
        if (arc != ZOK)
            log_error("zk.auth", "rc=%d err=\"%s\"", arc, zerror(arc));
    }
    log_info("zk.connecting", "zk=%s session_timeout=%d credentials=%s acl=%s",
             z->hosts, z->session_timeout, z->auth ? "digest" : "none",
             z->acl == &ZOO_CREATOR_ALL_ACL ? "creator" : "open");
    return 0;
}

/* Closes the current handle.  zookeeper_close completes what was in flight
 * with ZCLOSING; those completions arrive through the queue. */
static void close_handle(struct zk *z)
{
    if (!z->zh)
        return;
    zhandle_t *zh = z->zh;
    z->zh = NULL;
    z->connected = 0;
    int rc = zookeeper_close(zh);
    if (rc != ZOK)
        log_warn("zk.close", "rc=%d err=\"%s\"", rc, zerror(rc));
    /* The watcher may still have queued events of this generation; they
     * are ignored by generation, so the context can go now. */
    free(z->hctx);
    z->hctx = NULL;
}

static void emit(struct zk *z, const char *event)
{
    if (z->on_event)
        z->on_event(event, z->session_id, z->event_arg);
}

/* Replaces the session: the old one's ephemeral nodes become foreign. */
static void restart_session(struct zk *z, const char *why)
{
    log_warn("zk.session_restart", "reason=%s old_session=0x%llx", why,
             (unsigned long long)z->session_id);
    close_handle(z);
    /* No session until the new one connects (a command that read under the
     * old one sees that it changed); what was parked for the old one is
     * answered now, never sent. */
    z->session_id = 0;
    if (!z->closed && open_handle(z, NULL, 0) < 0)
        log_error("zk.init_failed", "zk=%s", z->hosts);
    struct zk_req **pp = &z->parked_head, *r;
    z->parked_tail = NULL;
    while ((r = *pp) != NULL) {
        if (r->gen != z->gen) {
            *pp = r->next;
            fail_later(r, ZSESSIONEXPIRED);
        } else {
            z->parked_tail = r;
            pp = &r->next;
        }
    }
}

static void on_session_state(struct zk *z, int state)
{
    double now = zk_now();
    if (state == ZOO_CONNECTED_STATE) {
        const clientid_t *id = zoo_client_id(z->zh);
        int64_t sid = id ? id->client_id : 0;
        int is_new = sid != z->session_id;
        z->session_id = sid;
        z->negotiated = zoo_recv_timeout(z->zh);
        z->connected = 1;
        z->connects++;
        z->lease_lost = 0;
        z->last_contact = now;
        z->last_heartbeat = now;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        z->server[0] = 0;
        if (zookeeper_get_connected_host(z->zh, (struct sockaddr *)&ss, &sl)) {
            char host[64] = "";
            int port = 0;
            if (ss.ss_family == AF_INET) {
                struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
                uv_ip4_name(sin, host, sizeof host);
                port = ntohs(sin->sin_port);
            } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
                uv_ip6_name(sin6, host, sizeof host);
                port = ntohs(sin6->sin6_port);
            }
            snprintf(z->server, sizeof z->server, "%s:%d", host, port);
        }
        if (is_new)
            z->sessions++;
        log_info("zk.connected",
                 "session=0x%llx timeout=%d server=%s new_session=%s",
                 (unsigned long long)sid, z->negotiated, z->server,
                 is_new ? "yes" : "no");
        flush_parked(z);
        emit(z, is_new && z->sessions > 1 ? "new" : "connected");
    } else if (state == ZOO_CONNECTING_STATE ||
               state == ZOO_ASSOCIATING_STATE) {
        if (z->connected) {
            z->connected = 0;
            z->disconnects++;
            z->lease_deadline =
                z->last_contact + z->negotiated - lease_margin(z);
            log_warn("zk.disconnected", "session=0x%llx lease_left_ms=%.0f",
                     (unsigned long long)z->session_id,
                     z->lease_deadline - now);
            emit(z, "disconnected");
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
        log_warn("zk.session_expired", "session=0x%llx",
                 (unsigned long long)z->session_id);
        if (!z->lease_lost) {
            z->lease_lost = 1;
            emit(z, "lost");
        }
        restart_session(z, "expired");
    } else if (state == ZOO_AUTH_FAILED_STATE) {
        /* The handle is dead: a new session after a while (the credentials
         * may be fixed meanwhile); until then every request fails closed. */
        log_error("zk.auth_failed",
                  "zk=%s reason=\"ZooKeeper refused the credentials of "
                  "--zk-auth-file\"",
                  z->hosts);
        z->connected = 0;
        z->auth_failed = 1;
        z->auth_retry_at = now + AUTH_RETRY_MS;
        if (!z->lease_lost) {
            z->lease_lost = 1;
            emit(z, "lost");
        }
    }
}

static const char *watch_name(int type)
{
    if (type == ZOO_CREATED_EVENT)
        return "created";
    if (type == ZOO_DELETED_EVENT)
        return "deleted";
    if (type == ZOO_CHANGED_EVENT)
        return "changed";
    if (type == ZOO_CHILD_EVENT)
        return "child";
    return "notwatching";
}

static void on_async(uv_async_t *h)
{
    struct zk *z = h->data;
    pthread_mutex_lock(&z->mu);
    struct zk_req *r = z->qhead;
    z->qhead = z->qtail = NULL;
    pthread_mutex_unlock(&z->mu);
    while (r) {
        struct zk_req *next = r->next;
        if (r->kind == ZK_EV_SESSION) {
            if (r->gen == z->gen && z->zh && !z->closed)
                on_session_state(z, r->ev_state);
            free(r);
        } else if (r->kind == ZK_EV_WATCH) {
            if (r->gen == z->gen && !z->closed && z->on_watch)
                z->on_watch(watch_name(r->ev_state), r->res.path, z->watch_arg);
            free(r->res.path);
            free(r);
        } else if (r->kind == ZK_EV_AUTH) {
            if (r->gen == z->gen && !z->closed) {
                /* Only the server's refusal is a failure: a connection
                 * lost before the answer (ZCONNECTIONLOSS...) says nothing
                 * of the credentials, and the client sends them again on
                 * its next connection (a refusal then arrives as
                 * ZOO_AUTH_FAILED_STATE). */
                if (r->ev_state == ZOK) {
                    z->auth_failed = 0;
                } else if (r->ev_state == ZAUTHFAILED) {
                    z->auth_failed = 1;
                    log_error("zk.auth_failed", "rc=%d err=\"%s\"", r->ev_state,
                              zerror(r->ev_state));
                } else {
                    log_warn("zk.auth_unanswered", "rc=%d err=\"%s\"",
                             r->ev_state, zerror(r->ev_state));
                }
            }
            free(r);
        } else if (r->kind == ZK_GROUP) {
            group_done(z, r);
        } else {
            deliver(z, r);
        }
        r = next;
    }
}

static void on_tick(uv_timer_t *t)
{
    struct zk *z = t->data;
    double now = zk_now();
    if (z->parked_head)
        expire_parked(z, now, 0, ZK_TIMEOUT);
    if (z->all)
        abandon_late(z, now);
    if (z->closed)
        return;
    if (z->auth_failed && z->auth_retry_at > 0 && now >= z->auth_retry_at) {
        z->auth_retry_at = 0;
        restart_session(z, "auth");
        return;
    }
    if (!z->connected && z->zh && !z->lease_lost && z->session_id != 0 &&
        now >= z->lease_deadline) {
        z->lease_lost = 1;
        log_warn("zk.lease_lost", "session=0x%llx",
                 (unsigned long long)z->session_id);
        emit(z, "lost");
        restart_session(z, "lease");
        return;
    }
    /* Heartbeat: an answered request proves the server heard us, which the
     * lease clock above relies on. */
    if (z->connected && now - z->last_heartbeat >= z->negotiated / 4.0) {
        z->last_heartbeat = now;
        struct zk_op op = {.type = ZK_OP_EXISTS, .path = "/"};
        zk_submit(z, ZK_OP_EXISTS, &op, 1, now + z->negotiated, 0, NULL, NULL);
    }
}

/* While a server is down the C client writes the same line for every
 * connection attempt (about 30 a second).  A line whose text, after the
 * client's timestamp and thread prefix, repeats the one before is written
 * at most once per ZKLOG_REPEAT_MS with the number left out (repeated=N);
 * a run's count left out is written (zk.client_repeated) when another
 * line ends it.  The
 * client writes from its own threads, hence the mutex. */
#define ZKLOG_REPEAT_MS 10000
static struct {
    pthread_mutex_t mu;
    char last[512]; /* the previous line's text, after the prefix */
    size_t last_len;
    struct log_limit limit;
} zklog_runs = {.mu = PTHREAD_MUTEX_INITIALIZER,
                .limit = {.interval_ms = ZKLOG_REPEAT_MS}};

/* Routes the C client's own log lines into ours. */
static ssize_t zklog_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    char q[512];
    size_t len = n;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (!len)
        return (ssize_t)n;
    log_quote(buf, len, q, sizeof q);
    /* "2026-11-24 23:42:51,834:27449(0x7f..):ZOO_ERROR@fn@2985: text" */
    const char *body = memmem(buf, len, "):", 2);
    body = body ? body + 2 : buf;
    size_t blen = len - (size_t)(body - buf);
    uint64_t now_ms = uv_hrtime() / 1000000;
    unsigned long left_out = 0;
    pthread_mutex_lock(&zklog_runs.mu);
    int same =
        blen == zklog_runs.last_len && memcmp(body, zklog_runs.last, blen) == 0;
    if (same) {
        if (log_limit_allow(&zklog_runs.limit, now_ms, &left_out))
            log_warn("zk.client", "msg=%s repeated=%lu", q, left_out);
    } else {
        if (zklog_runs.limit.suppressed)
            log_warn("zk.client_repeated", "count=%lu",
                     zklog_runs.limit.suppressed);
        zklog_runs.last_len = blen < sizeof zklog_runs.last ? blen : 0;
        memcpy(zklog_runs.last, body, zklog_runs.last_len);
        zklog_runs.limit.suppressed = 0;
        zklog_runs.limit.next_ms = now_ms + ZKLOG_REPEAT_MS;
        log_warn("zk.client", "msg=%s", q);
    }
    pthread_mutex_unlock(&zklog_runs.mu);
    return (ssize_t)n;
}

/* The digest credentials in path: one line "user:password" (a trailing
 * newline allowed).  Returns them (malloc'd), or NULL with the reason in err,
 * which never quotes the file's content. */
static char *read_credentials(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--zk-auth-file %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[4097];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int toolong = !feof(f);
    fclose(f);
    buf[n] = 0;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    const char *colon = memchr(buf, ':', n);
    int ok = !toolong && colon && colon > buf && colon[1] != 0 &&
             strlen(buf) == n && !strpbrk(buf, "\r\n");
    char *out = ok ? strdup(buf) : NULL;
    explicit_bzero(buf, sizeof buf);
    if (!ok)
        snprintf(err, errlen,
                 "--zk-auth-file %s: expected one line user:password", path);
    else if (!out)
        snprintf(err, errlen, "out of memory");
    return out;
}

struct zk *zk_create(uv_loop_t *loop, const struct config *cfg,
                     zk_event_cb on_event, void *arg, char *err, size_t errlen)
{
    static FILE *zklog;
    if (!zklog) {
        cookie_io_functions_t io = {.write = zklog_write};
        zklog = fopencookie(NULL, "w", io);
        if (zklog) {
            setvbuf(zklog, NULL, _IOLBF, 0);
            zoo_set_log_stream(zklog);
        }
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);

    struct zk *z = calloc(1, sizeof *z);
    if (!z) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    z->loop = loop;
    z->hosts = strdup(cfg->zk);
    z->root = strdup(cfg->root);
    z->acl = strcmp(cfg->zk_acl ? cfg->zk_acl : "open", "creator") == 0
                 ? &ZOO_CREATOR_ALL_ACL
                 : &ZOO_OPEN_ACL_UNSAFE;
    if (cfg->zk_auth_file &&
        !(z->auth = read_credentials(cfg->zk_auth_file, err, errlen))) {
        free(z->hosts);
        free(z->root);
        free(z);
        return NULL;
    }
    z->session_timeout = cfg->session_timeout;
    z->negotiated = cfg->session_timeout;
    z->on_event = on_event;
    z->event_arg = arg;
    pthread_mutex_init(&z->mu, NULL);
    uv_async_init(loop, &z->async, on_async);
    z->async.data = z;
    uv_timer_init(loop, &z->tick);
    z->tick.data = z;
    uv_prepare_init(loop, &z->group_prepare);
    z->group_prepare.data = z;
    uv_check_init(loop, &z->group_check);
    z->group_check.data = z;
    z->group_max = cfg->zk_group_max;
    z->max_request = (size_t)cfg->zk_max_request;
    z->handles_open = 4;
    return z;
}

int zk_start(struct zk *z, char *err, size_t errlen)
{
    uv_timer_start(&z->tick, on_tick, TICK_MS, TICK_MS);
    return open_handle(z, err, errlen);
}

void zk_close(struct zk *z)
{
    if (z->closed)
        return;
    z->closed = 1;
    group_send(z);
    expire_parked(z, zk_now(), 1, ZK_CLOSING);
    if (z->zh)
        log_info("zk.closing", "session=0x%llx",
                 (unsigned long long)z->session_id);
    close_handle(z);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct zk *z = h->data;
    if (--z->handles_open == 0) {
        pthread_mutex_destroy(&z->mu);
        free(z->hosts);
        free(z->root);
        if (z->auth) {
            explicit_bzero(z->auth, strlen(z->auth));
            free(z->auth);
        }
        free(z);
    }
}

void zk_free(struct zk *z)
{
    if (!z)
        return;
    zk_close(z);
    /* Deliver what the close completed.  zookeeper_close hands the
     * completions of requests still in flight to its completion thread
     * after that thread has stopped, so those never come back: complete
     * them here.  A delivery may resume Lua code that submits again
     * (answered ZK_CLOSING through the queue), hence the loop. */
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&z->mu);
        int empty = z->qhead == NULL;
        pthread_mutex_unlock(&z->mu);
        if (!empty) {
            on_async(&z->async);
        } else if (z->all) {
            z->all->res.rc = ZK_CLOSING;
            deliver(z, z->all);
        } else {
            break;
        }
    }
    /* Groups still out were answered through their members above. */
    while (z->groups_out) {
        struct zk_req *g = z->groups_out;
        z->groups_out = g->all_next;
        free(g->zops);
        free(g->zres);
        free(g);
    }
    uv_timer_stop(&z->tick);
    group_arm(z, 0);
    uv_close((uv_handle_t *)&z->async, on_handle_closed);
    uv_close((uv_handle_t *)&z->tick, on_handle_closed);
    uv_close((uv_handle_t *)&z->group_prepare, on_handle_closed);
    uv_close((uv_handle_t *)&z->group_check, on_handle_closed);
}

void zk_set_watch_cb(struct zk *z, zk_watch_cb cb, void *arg)
{
    z->on_watch = cb;
    z->watch_arg = arg;
}

int64_t zk_session_id(const struct zk *z)
{
    return z->session_id;
}

uint64_t zk_generation(const struct zk *z)
{
    return z->gen;
}

double zk_lease_end(const struct zk *z)
{
    if (z->closed || z->lease_lost || z->session_id == 0)
        return 0;
    if (!z->connected)
        return z->lease_deadline;
    return z->last_contact + z->negotiated - lease_margin(z);
}

int zk_denied(const struct zk *z, char *why, size_t cap)
{
    if (z->auth_failed) {
        snprintf(why, cap,
                 "zookeeper refused the credentials of --zk-auth-file");
        return 1;
    }
    if (z->denied) {
        snprintf(why, cap,
                 "zookeeper denies access (%s on %s): check --zk-auth-file "
                 "and the ACL of --root",
                 z->denied == ZNOAUTH ? "NOAUTH" : "INVALIDACL",
                 z->denied_path);
        return 1;
    }
    return 0;
}

int zk_connected(const struct zk *z)
{
    return z->connected;
}

const char *zk_state_name(const struct zk *z)
{
    if (z->closed)
        return "closed";
    if (z->connected)
        return "connected";
    return "connecting";
}

int zk_negotiated_timeout(const struct zk *z)
{
    return z->negotiated;
}

const char *zk_server(const struct zk *z)
{
    return z->connected ? z->server : "";
}

size_t zk_inflight(const struct zk *z)
{
    return z->inflight;
}

uint64_t zk_sessions_started(const struct zk *z)
{
    return z->sessions;
}

struct zk_group_stats zk_group_stats(const struct zk *z)
{
    return z->gstats;
}

uint64_t zk_disconnects(const struct zk *z)
{
    return z->disconnects;
}

uint64_t zk_requests_too_large(const struct zk *z)
{
    return z->too_large;
}
