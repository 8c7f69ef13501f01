/*
 * zk_group.c — the bridge's request sizes and group commit.
 *
 *   zk_submit(write, ZK_GROUPED) ──► zk_group_add: held for this loop turn
 *   end of the turn (uv_prepare / uv_check) ──► zk_group_send: one multi
 *   its answer ──► zk_group_done: each member's answer, or sent again
 */
#include "zk_impl.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

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
 * force becomes the smaller of the two sizes less one, for LEARNED_MS: a
 * request is then refused rather than sent again into the same drop (never
 * a reconnect loop).  Ordinary connection losses (a leader's failover under
 * large writes) rarely meet two such requests in a row; when they do, only
 * requests that large are refused, with an error that names the limit, and
 * only for a while: then the configured limit is tried again, at the cost
 * of two more reconnects if the servers still take less. */
#define SUSPECT_MIN (64 * 1024)
#define SUSPECT_WINDOW_MS 60000
#define LEARNED_MS (10 * 60000)

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
    if (z->learned_max && z->learned_max < z->max_request &&
        zk_now() < z->learned_until)
        return z->learned_max;
    return z->max_request;
}

/* r (a request, or a group) completed: when its connection was lost under
 * it and it was large, it may be why (see above). */
void zk_note_loss(struct zk *z, const struct zk_req *r)
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
            z->learned_until = now + LEARNED_MS;
            log_warn("zk.request_dropped",
                     "bytes=%zu earlier_bytes=%zu max_request=%zu "
                     "for_ms=%d reason=\"ZooKeeper dropped the connection "
                     "twice with a request this large in flight; larger "
                     "requests are refused for a while (check the servers' "
                     "jute.maxbuffer and --zk-max-request)\"",
                     r->bytes, z->suspect_bytes, lim, LEARNED_MS);
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

void zk_group_arm(struct zk *z, int on)
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

/* A group's answer; split on the loop thread (group_done). */
static void on_group(int rc, const void *data)
{
    struct zk_req *g = (struct zk_req *)data;
    g->res.rc = rc;
    zk_enqueue(g);
}

/* Sends the group held so far. */
void zk_group_send(struct zk *z)
{
    struct zk_req *head = z->group_head, *m;
    if (!head)
        return;
    int total = z->group_ops;
    z->group_head = z->group_tail = NULL;
    z->group_ops = 0;
    z->group_bytes = 0;
    zk_group_arm(z, 0);

    struct zk_req *g = NULL;
    if (head->member && zk_multi_usable(z) && !z->closed) {
        g = calloc(1, sizeof *g);
        if (g) {
            g->zops = calloc((size_t)total, sizeof(zoo_op_t));
            g->zres = calloc((size_t)total, sizeof(zoo_op_result_t));
        }
        for (m = head; g && g->zops && g->zres && m; m = m->member)
            if (!m->zops && zk_build_multi(m) < 0)
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
            zk_send_or_park(z, m);
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
        m->answered_at = 0; /* the group's time counts, as one multi */
        m->conn = z->connects;
        g->bytes += member_bytes(z, m);
        memcpy(&g->zops[off], m->zops, (size_t)m->nops * sizeof(zoo_op_t));
        off += m->nops;
        z->gstats.members++;
    }
    z->gstats.groups++;
    zk_list_add(&z->groups_out, g);
    g->sent_at = now;
    int rc = zoo_amulti(z->zh, total, g->zops, g->zres, on_group, g);
    if (rc == ZOK) {
        z->sent[ZK_OP_MULTI]++;
    } else {
        g->unsent = 1;
        g->res.rc = rc;
        zk_enqueue(g);
    }
}

static void on_group_turn(uv_handle_t *h)
{
    zk_group_send(h->data);
}

/* Holds r, a write that may be grouped, for this turn's group. */
void zk_group_add(struct zk *z, struct zk_req *r)
{
    size_t bytes = member_bytes(z, r), cap = group_cap(z);
    if (r->nops >= z->group_max || bytes >= cap) {
        zk_group_send(z);
        zk_send_or_park(z, r);
        return;
    }
    if (z->group_ops + r->nops > z->group_max || z->group_bytes + bytes > cap)
        zk_group_send(z);
    r->member = NULL;
    if (z->group_tail)
        z->group_tail->member = r;
    else
        z->group_head = r;
    z->group_tail = r;
    z->group_ops += r->nops;
    z->group_bytes += bytes;
    zk_group_arm(z, 1);
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
        zk_fill_multi(m);
    else if (rc == ZOK && m->kind == ZK_OP_CREATE && m->pathbufs[0])
        m->res.path = strdup(m->pathbufs[0]);
    else if (rc == ZOK && m->kind == ZK_OP_SET)
        zk_set_stat(&m->res, &m->zstats[0]);
}

void zk_group_done(struct zk *z, struct zk_req *g)
{
    zk_list_remove(&z->groups_out, g);
    if (!g->unsent) {
        zk_note_took(z, ZK_OP_MULTI, g);
        zk_note_loss(z, g);
    }

    /* An operation that failed answers the multi's rc; after a connection
     * failure the results may hold anything. */
    int rc = g->res.rc, failed = -1;
    if (rc != ZOK && !g->unsent && !zk_is_connection_rc(rc) && rc != ZK_CLOSING)
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
            zk_deliver(z, m);
        } else if (m->abandoned) { /* answered already: not applied */
            /* as the group's outcome says, never as a success (which
             * would count as access granted and a server's answer) */
            m->res.rc = g->unsent ? ZCONNECTIONLOSS : rc;
            zk_deliver(z, m);
        } else {
            memset(m->zres, 0, (size_t)m->nops * sizeof(zoo_op_result_t));
            z->gstats.resent++;
            zk_send_or_park(z, m);
        }
        m = next;
    }
    free(g->zops);
    free(g->zres);
    free(g);
}
