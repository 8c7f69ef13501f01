/*
 * zk.c — the zookeeper_mt <-> libuv bridge: a request's way there and back.
 *
 *   loop thread                       zookeeper_mt completion thread
 *   zk_submit ──► zoo_a*(req) ──────► completion: copy result into req,
 *     (or park it, or group it:       zk_enqueue (zk_queue.c: lock, append,
 *      zk_group.c)                    unlock, write its eventfd)
 *   zk_drain ◄─── on_wake ◄────────── (coalesces: takes everything queued)
 *     └─► req->cb(&req->res) on the loop thread; free req
 *
 * Session events arrive through the same queue as records with
 * type ZK_EV_SESSION, tagged with the generation of the handle that produced
 * them, so events of a closed handle are ignored (zk_session.c handles
 * them).  Everything except the queue is touched only by the loop thread.
 */
#include "zk_impl.h"

#include "errors.h"
#include "log.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double zk_now(void)
{
    return (double)uv_hrtime() / 1e6;
}

/* --- completion side (ZooKeeper's completion thread) -------------------- */

void zk_enqueue(struct zk_req *r)
{
    r->answered_at = zk_now();
    zk_queue_push(&r->z->queue, &r->qnode);
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

void zk_set_stat(struct zk_result *res, const struct Stat *s)
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
    zk_enqueue(r);
}

static void on_stat(int rc, const struct Stat *stat, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK)
        zk_set_stat(&r->res, stat);
    zk_enqueue(r);
}

void zk_on_data(int rc, const char *value, int len, const struct Stat *stat,
                const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK) {
        zk_set_stat(&r->res, stat);
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
    zk_enqueue(r);
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
    zk_enqueue(r);
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
        zk_set_stat(&r->res, stat);
    zk_enqueue(r);
}

static void on_string(int rc, const char *value, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    zk_enqueue(r);
}

static void on_string_stat(int rc, const char *value, const struct Stat *stat,
                           const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    if (rc == ZOK) {
        if (value)
            r->res.path = strdup(value);
        zk_set_stat(&r->res, stat);
    }
    zk_enqueue(r);
}

int zk_is_connection_rc(int rc)
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
void zk_fill_multi(struct zk_req *r)
{
    int rc = r->res.rc;
    if (rc != ZOK &&
        (rc >= ZAPIERROR || rc <= ZK_TIMEOUT || zk_is_connection_rc(rc)))
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
            zk_set_stat(m, &r->zstats[i]);
    }
}

static void on_multi(int rc, const void *data)
{
    struct zk_req *r = (struct zk_req *)data;
    r->res.rc = rc;
    zk_fill_multi(r);
    zk_enqueue(r);
}

/* --- loop side ----------------------------------------------------------- */

void zk_req_free(struct zk_req *r)
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
    free(r->extra);
    free(r);
}

/* The outstanding lists (z->all, z->groups_out), through all_prev/all_next. */
void zk_list_add(struct zk_req **head, struct zk_req *r)
{
    r->all_prev = NULL;
    r->all_next = *head;
    if (*head)
        (*head)->all_prev = r;
    *head = r;
}

void zk_list_remove(struct zk_req **head, struct zk_req *r)
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
        /* Logged when it starts (then /readyz says it), not per command. */
        if (!z->denied)
            log_warn("zk.access_denied", "rc=%s path=\"%s\"",
                     r->res.rc == ZNOAUTH ? "NOAUTH" : "INVALIDACL",
                     r->nops > 0 ? r->ops[0].path : "");
        z->denied = r->res.rc;
        snprintf(z->denied_path, sizeof z->denied_path, "%s",
                 r->nops > 0 ? r->ops[0].path : "");
    } else if (z->denied && write && r->res.rc == ZOK) {
        for (int i = 0; i < r->nops; i++)
            if (in_refused_area(r->ops[i].path, z->denied_path)) {
                log_info("zk.access_restored", "path=\"%s\"", z->denied_path);
                z->denied = 0;
                break;
            }
    }
}

/* The time r took from its sending to its answer on the completion thread,
 * counted as an operation of `kind` when ZooKeeper answered it. */
void zk_note_took(struct zk *z, int kind, const struct zk_req *r)
{
    int rc = r->res.rc;
    if (kind >= 0 && kind < ZK_OP_TYPES && r->sent_at > 0 &&
        r->answered_at > r->sent_at && !zk_is_connection_rc(rc) &&
        rc != ZK_TIMEOUT && rc != ZK_CLOSING)
        metrics_histo_add(&z->took[kind], (r->answered_at - r->sent_at) / 1e3);
}

/* --- versions that wrap ---------------------------------------------------
 *
 * A node's version is a Java int: 2^31 writes on it goes on from -2^31, and
 * one write short of 2^32 it is -1, which ZooKeeper takes in a set, delete
 * or check for "any version".  A node read there would make the next
 * compare-and-set unconditional, applying over whatever changed since (a
 * native lock's grant table, rewritten at every handoff of a lock whose
 * queue never empties, gets there in weeks).  So no write of ours leaves a
 * node at -1: a set at version -2 goes with a second set of the same data
 * at -1 in one multi (applied together: nobody reads the node between
 * them), which takes the node on to 0, and it answers as the one set it was
 * asked as, with the second set's stat.  zkio.lua's Z.next_version counts
 * versions the same way. */
#define VERSION_BEFORE_ANY (-2)

/* Adds the second set after each set of r at VERSION_BEFORE_ANY (r then
 * goes as a multi, r->res.type still what was asked). */
static void wrap_sets(struct zk_req *r)
{
    int add = 0;
    for (int i = 0; i < r->nops; i++)
        add += r->ops[i].type == ZK_OP_SET &&
               r->ops[i].version == VERSION_BEFORE_ANY;
    if (add == 0)
        return;
    int n = r->nops + add, j = 0;
    struct zk_op *ops = calloc((size_t)n, sizeof *ops);
    r->extra = calloc((size_t)n, 1);
    if (!ops || !r->extra)
        abort();
    for (int i = 0; i < r->nops; i++) {
        const struct zk_op *set = &r->ops[i];
        ops[j++] = *set;
        if (set->type != ZK_OP_SET || set->version != VERSION_BEFORE_ANY)
            continue;
        struct zk_op *again = &ops[j];
        *again = *set;
        again->version = -1;
        again->path = strdup(set->path);
        if (set->data) {
            char *d = malloc(set->datalen + 1);
            if (d)
                memcpy(d, set->data, set->datalen + 1);
            again->data = d;
        }
        if (!again->path || (set->data && !again->data))
            abort();
        r->extra[j++] = 1;
    }
    free(r->ops);
    r->ops = ops;
    r->nops = n;
    r->kind = ZK_OP_MULTI;
}

/* r's answer as asked, before wrap_sets: each added set's result folded
 * into the set before it (its stat, the one after both), and a set asked
 * alone answered as a set. */
static void unwrap_sets(struct zk_req *r)
{
    struct zk_result *res = &r->res;
    if (!r->extra)
        return;
    int j = 0;
    for (int i = 0; i < res->nmulti; i++) {
        struct zk_result *m = &res->multi[i];
        if (r->extra[i] && j > 0) {
            struct zk_result *set = &res->multi[j - 1];
            if (m->has_stat) {
                set->stat = m->stat;
                set->has_stat = 1;
            }
            if (set->rc == ZOK && m->rc != ZOK &&
                m->rc != ZRUNTIMEINCONSISTENCY)
                set->rc = m->rc;
            free(m->path);
            continue;
        }
        res->multi[j++] = *m;
    }
    res->nmulti = j;
    if (res->type == ZK_OP_MULTI)
        return;
    if (res->rc == ZOK && j > 0 && res->multi[0].has_stat) {
        res->stat = res->multi[0].stat;
        res->has_stat = 1;
    }
    free(res->multi);
    res->multi = NULL;
    res->nmulti = 0;
}

static int64_t max_zxid(int64_t seen, const struct zk_stat *s)
{
    int64_t m = s->mzxid > s->czxid ? s->mzxid : s->czxid;
    m = s->pzxid > m ? s->pzxid : m;
    return m > seen ? m : seen;
}

/* The newest zxid in r's answer, for zk_seen_zxid. */
static void note_seen(struct zk *z, const struct zk_result *res)
{
    if (res->has_stat)
        z->seen_zxid = max_zxid(z->seen_zxid, &res->stat);
    for (int i = 0; i < res->nmulti; i++)
        if (res->multi[i].has_stat)
            z->seen_zxid = max_zxid(z->seen_zxid, &res->multi[i].stat);
}

int64_t zk_seen_zxid(const struct zk *z)
{
    return z->seen_zxid;
}

void zk_deliver(struct zk *z, struct zk_req *r)
{
    zk_list_remove(&z->all, r);
    z->inflight--;
    if (r->res.rc == ZCLOSING || r->res.rc == ZINVALIDSTATE)
        r->res.rc = z->closed ? ZK_CLOSING : ZCONNECTIONLOSS;
    zk_note_took(z, r->kind, r);
    zk_note_loss(z, r);
    if (r->sent_at > 0 && !zk_is_connection_rc(r->res.rc) &&
        r->res.rc != ZK_TIMEOUT && r->sent_at > z->last_contact)
        z->last_contact = r->sent_at;
    note_access(z, r);
    if (!zk_is_connection_rc(r->res.rc))
        note_seen(z, &r->res);
    unwrap_sets(r);
    if (r->cb && !r->abandoned)
        r->cb(&r->res, r->arg);
    zk_req_free(r);
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
void zk_abandon_late(struct zk *z, double now)
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
void zk_fail_later(struct zk_req *r, int rc)
{
    r->res.rc = rc;
    r->sent_at = 0;
    zk_enqueue(r);
}

static void send_req(struct zk *z, struct zk_req *r)
{
    zhandle_t *zh = z->zh;
    struct zk_op *op = &r->ops[0];
    int rc;
    r->sent_at = zk_now();
    r->answered_at = 0;
    r->conn = z->connects;
    switch (r->kind) {
    case ZK_OP_GET:
        rc = zoo_aget(zh, op->path, op->watch, zk_on_data, r);
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
    if (rc == ZOK)
        z->sent[r->kind]++;
    else
        zk_fail_later(r, rc);
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

void zk_flush_parked(struct zk *z)
{
    struct zk_req *r = z->parked_head;
    z->parked_head = z->parked_tail = NULL;
    while (r) {
        struct zk_req *next = r->next;
        zk_send_or_park(z, r);
        r = next;
    }
}

/* Fails parked requests whose deadline passed (all of them if `all`). */
void zk_expire_parked(struct zk *z, double now, int all, int rc)
{
    struct zk_req **pp = &z->parked_head, *r;
    z->parked_tail = NULL;
    while ((r = *pp) != NULL) {
        if (all || now >= r->deadline) {
            *pp = r->next;
            zk_fail_later(r, rc);
        } else {
            z->parked_tail = r;
            pp = &r->next;
        }
    }
}

int zk_build_multi(struct zk_req *r)
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
 * reconnection and a server's answer, which its IO thread may get while
 * the loop thread is inside a call: see zk_multi_usable. */
int zk_handle_usable(const struct zk *z)
{
    return z->connected && z->zh && zoo_state(z->zh) == ZOO_CONNECTED_STATE;
}

/* Whether a multi may be handed to the library now: the handle is usable
 * and the local lease still runs, so the server cannot have expired the
 * session yet.  A process stopped past its session (SIGSTOP, a paused VM)
 * finds the handle still CONNECTED when it runs again: its loop thread may
 * come before the library's IO thread sees the connection closed, and that
 * thread then reconnects and is told the session expired during a
 * zoo_amulti of the loop's, which fails its operations from there on and
 * frees their paths, twice (RELIABILITY 28: "ZooKeeper error -5 on multi",
 * then a double free).  Such a multi waits, parked: the session's events
 * decide (a reconnect, or the session given up, which answers it), or an
 * answer to the heartbeat shows the session alive (on_tick sends it). */
int zk_multi_usable(const struct zk *z)
{
    double lease = zk_lease_end(z);
    return zk_handle_usable(z) && (lease <= 0 || zk_now() < lease);
}

/* Sends r now, or parks it until the session connects. */
void zk_send_or_park(struct zk *z, struct zk_req *r)
{
    if (z->closed)
        zk_fail_later(r, ZK_CLOSING);
    else if (r->gen != z->gen)
        zk_fail_later(r, ZSESSIONEXPIRED);
    else if ((r->flags & ZK_BOUNDED) && zk_now() >= r->deadline)
        zk_fail_later(r, ZK_TIMEOUT);
    else if (r->kind == ZK_OP_MULTI ? zk_multi_usable(z) : zk_handle_usable(z))
        send_req(z, r);
    else if (zk_now() >= r->deadline)
        zk_fail_later(r, ZK_TIMEOUT);
    else
        park(z, r);
}

/* Whether the client library accepts path (its own check, which runs in
 * the library only after a multi has started: a path it refuses there makes
 * it free memory it does not own, so every path is checked here first).
 * Absolute, no empty, "." or ".." component, no trailing '/' (unless the
 * node is sequential: the server appends the number), no byte 1-30. */
static int path_ok(const char *path, int flags)
{
    /* The library's own create modes (0-6, its ZOOKEEPER_IS_SEQUENCE: 2,
     * 3, 6): a bit pattern it does not know fails inside a multi too. */
    if (flags < 0 || flags > 6)
        return 0;
    int seq = flags == 2 || flags == 3 || flags == 6;
    size_t len = strlen(path);
    if (len == 0 || path[0] != '/')
        return 0;
    if (len == 1)
        return 1;
    if (path[len - 1] == '/' && !seq)
        return 0;
    const char *c = path + 1, *part = c;
    for (;; c++) {
        if (*c == '/' || *c == '\0') {
            size_t n = (size_t)(c - part);
            int last = *c == '\0';
            if (n == 0 && !(last && seq))
                return 0;
            if ((n == 1 && part[0] == '.') ||
                (n == 2 && part[0] == '.' && part[1] == '.'))
                if (!last || !seq)
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
    zk_list_add(&z->all, r);
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
    wrap_sets(r);
    int valid = 1;
    for (int i = 0; i < r->nops; i++)
        valid = valid &&
                path_ok(r->ops[i].path,
                        r->ops[i].type == ZK_OP_CREATE ? r->ops[i].flags : 0);
    if (!valid || (r->kind == ZK_OP_MULTI && zk_build_multi(r) < 0)) {
        zk_fail_later(r, ZBADARGUMENTS);
        return;
    }
    r->bytes = zk_request_size(z, r->kind, r->ops, r->nops);
    if (r->bytes > zk_max_request(z)) {
        z->too_large++;
        log_debug("zk.request_too_large", "bytes=%zu max_request=%zu ops=%d",
                  r->bytes, zk_max_request(z), r->nops);
        zk_fail_later(r, ZK_TOOBIG);
        return;
    }
    r->gen = z->gen;
    if ((flags & ZK_GROUPED) && z->group_max > 1 && zk_handle_usable(z) &&
        !((flags & ZK_BOUNDED) && zk_now() >= deadline) &&
        (type == ZK_OP_CREATE || type == ZK_OP_SET || type == ZK_OP_DELETE ||
         type == ZK_OP_MULTI)) {
        zk_group_add(z, r);
    } else {
        zk_group_send(z);      /* what was submitted before goes first */
        zk_send_or_park(z, r); /* which fails it when the bridge is closed */
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

void zk_drain(struct zk *z)
{
    struct zk_qnode *n = zk_queue_take(&z->queue);
    while (n) {
        struct zk_req *r =
            (struct zk_req *)((char *)n - offsetof(struct zk_req, qnode));
        n = n->next;
        /* Read for each answer: the process may stop while an earlier
         * one's command runs. */
        double now = zk_now();
        if (r->answered_at > 0 && now >= r->answered_at)
            metrics_histo_add(&z->waited, (now - r->answered_at) / 1e3);
        /* An answer that may speak for a session over since is an unknown
         * outcome: an acquisition written before a SIGSTOP past the session
         * is not answered OK after SIGCONT (the lock may have passed on),
         * whichever comes first then, this or the timer that sees the lease
         * over; the command looks again under the new session. */
        if ((r->kind >= 0 || r->kind == ZK_GROUP || r->kind == ZK_EV_AHEAD) &&
            zk_stale_answer(z, r, now))
            r->res.rc = ZCONNECTIONLOSS;
        /* The client library ends the requests in flight with
         * ZRUNTIMEINCONSISTENCY when it drops a connection over a reply
         * out of order (a server's fault, e.g. ZOOKEEPER-2775; a multi's
         * own answer never carries it, only its operations): for each of
         * them that is a connection loss, its outcome unknown. */
        if ((r->kind >= 0 || r->kind == ZK_GROUP || r->kind == ZK_EV_AHEAD) &&
            r->res.rc == ZRUNTIMEINCONSISTENCY)
            r->res.rc = ZCONNECTIONLOSS;
        if (r->kind == ZK_EV_SESSION) {
            if (r->gen == z->gen && z->zh && !z->closed)
                zk_session_state(z, r->ev_state, r->answered_at);
            free(r);
        } else if (r->kind == ZK_EV_AHEAD) {
            zk_ahead_done(z, r);
        } else if (r->kind == ZK_EV_WATCH) {
            if (r->ahead_req && r->gen == z->gen && !z->closed)
                zk_ahead_event(z, r->ahead_req);
            if (r->gen == z->gen && !z->closed && z->on_watch)
                z->on_watch(watch_name(r->ev_state), r->res.path, z->watch_arg);
            free(r->res.path);
            free(r);
        } else if (r->kind == ZK_EV_AUTH) {
            if (r->gen == z->gen && !z->closed)
                zk_session_auth(z, r->ev_state);
            free(r);
        } else if (r->kind == ZK_GROUP) {
            zk_group_done(z, r);
        } else {
            zk_deliver(z, r);
        }
    }
}
