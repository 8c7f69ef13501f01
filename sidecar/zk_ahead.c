/*
 * zk_ahead.c — read-ahead on a watch event: the read a waiter makes once
 * its watch fires, sent by ZooKeeper's completion thread the moment the
 * event arrives, rather than after the event's way to the loop thread and
 * the waiter's turn there (about 100 µs less per wake-up across sidecars).
 *
 *   loop: zk_read_ahead(watch, read)      when `watch` fires, read `read`
 *   completion thread: zk_ahead_start     the event came: zoo_aget(read)
 *   loop: zk_ahead_event (event drained)  a read of `read` is on its way
 *   loop: zk_ahead_done (answer drained)  to its taker, or kept a moment
 *   loop: zk_take_ahead(path)             a waiter the event woke takes it
 *   loop: zk_ahead_tick / zk_ahead_close  deadlines; the handle's end
 *
 * The read is sent after the event reached this client, so it sees the
 * change the event tells of, as the waiter's own read would.  An answer is
 * kept AHEAD_KEEP_MS for its taker, one taker each; a read nobody takes is
 * dropped.  Whatever goes wrong (an error, a deadline, the handle closed)
 * answers the taker with an error, and the taker reads for itself.
 *
 * The registrations and the reads in flight are shared with the
 * completion thread, under ahead_mu; the reads begun (z->ahead_got) are
 * the loop's.
 */
#include "zk_impl.h"

#include <stdlib.h>
#include <string.h>

#define AHEAD_KEEP_MS 50.0

void zk_ahead_init(struct zk *z)
{
    pthread_mutex_init(&z->ahead_mu, NULL);
}

static void reg_clear(struct zk_ahead_reg *g)
{
    free(g->watch);
    free(g->read);
    g->watch = g->read = NULL;
}

static void got_clear(struct zk_ahead_got *e)
{
    free(e->path);
    if (e->req)
        zk_req_free(e->req);
    memset(e, 0, sizeof *e);
}

/* Frees the reads still in flight: after zookeeper_close, which never
 * completes them. */
static void free_inflight(struct zk *z)
{
    pthread_mutex_lock(&z->ahead_mu);
    struct zk_req *r = z->ahead_inflight;
    z->ahead_inflight = NULL;
    pthread_mutex_unlock(&z->ahead_mu);
    while (r) {
        struct zk_req *next = r->next;
        free(r->ahead);
        zk_req_free(r);
        r = next;
    }
}

void zk_ahead_free(struct zk *z)
{
    for (int i = 0; i < ZK_AHEAD_MAX; i++) {
        reg_clear(&z->ahead_reg[i]);
        got_clear(&z->ahead_got[i]);
    }
    free_inflight(z);
    pthread_mutex_destroy(&z->ahead_mu);
}

void zk_read_ahead(struct zk *z, const char *watch, const char *read)
{
    pthread_mutex_lock(&z->ahead_mu);
    struct zk_ahead_reg *slot = NULL;
    for (int i = 0; i < ZK_AHEAD_MAX && !slot; i++)
        if (z->ahead_reg[i].watch && strcmp(z->ahead_reg[i].watch, watch) == 0)
            slot = &z->ahead_reg[i];
    for (int i = 0; i < ZK_AHEAD_MAX && !slot; i++)
        if (!z->ahead_reg[i].watch)
            slot = &z->ahead_reg[i];
    if (!slot) /* all taken: one goes, round-robin */
        slot = &z->ahead_reg[z->ahead_next++ % ZK_AHEAD_MAX];
    reg_clear(slot);
    slot->watch = strdup(watch);
    slot->read = strdup(read);
    if (!slot->watch || !slot->read)
        reg_clear(slot);
    pthread_mutex_unlock(&z->ahead_mu);
}

/* The answer of a read-ahead (completion thread): out of the list in
 * flight, then queued like any completion. */
static void on_ahead_data(int rc, const char *value, int len,
                          const struct Stat *stat, const void *data)
{
    struct zk_req *a = (struct zk_req *)data;
    pthread_mutex_lock(&a->z->ahead_mu);
    struct zk_req **pp = &a->z->ahead_inflight;
    while (*pp && *pp != a)
        pp = &(*pp)->next;
    if (*pp)
        *pp = a->next;
    pthread_mutex_unlock(&a->z->ahead_mu);
    a->next = NULL;
    zk_on_data(rc, value, len, stat, a);
}

struct zk_req *zk_ahead_start(struct zk *z, zhandle_t *zh, uint64_t gen,
                              const char *path)
{
    pthread_mutex_lock(&z->ahead_mu);
    struct zk_ahead_reg *g = NULL;
    for (int i = 0; i < ZK_AHEAD_MAX && !g; i++)
        if (z->ahead_reg[i].watch && strcmp(z->ahead_reg[i].watch, path) == 0)
            g = &z->ahead_reg[i];
    struct zk_req *a = g ? calloc(1, sizeof *a) : NULL;
    if (!a) {
        pthread_mutex_unlock(&z->ahead_mu);
        return NULL;
    }
    a->ahead = g->read;
    g->read = NULL;
    reg_clear(g);
    a->z = z;
    a->gen = gen;
    a->kind = ZK_EV_AHEAD;
    a->res.type = ZK_OP_GET;
    a->next = z->ahead_inflight;
    z->ahead_inflight = a;
    /* Sent under the mutex, so its answer (on_ahead_data, this thread)
     * finds it in the list.  Its send time lets the drain tell an answer
     * that may speak for a session over since (zk_stale_answer). */
    a->sent_at = zk_now();
    int rc = zoo_aget(zh, a->ahead, 0, on_ahead_data, a);
    if (rc != ZOK) {
        z->ahead_inflight = a->next;
        free(a->ahead);
        free(a);
        a = NULL;
    }
    pthread_mutex_unlock(&z->ahead_mu);
    return a;
}

/* Loop: the event whose read-ahead `a` is on its way is drained, before
 * the waiters it wakes run. */
void zk_ahead_event(struct zk *z, struct zk_req *a)
{
    struct zk_ahead_got *e = NULL;
    for (int i = 0; i < ZK_AHEAD_MAX && !e; i++)
        if (!z->ahead_got[i].path)
            e = &z->ahead_got[i];
    for (int i = 0; i < ZK_AHEAD_MAX && !e; i++) /* else one not waited on */
        if (!z->ahead_got[i].cb)
            e = &z->ahead_got[i];
    if (!e)
        return; /* its answer finds no entry and is dropped */
    got_clear(e);
    e->path = strdup(a->ahead);
    if (!e->path)
        return;
    e->inflight = a;
    e->seq = ++z->ahead_seq;
    z->ahead_sent++;
}

static struct zk_ahead_got *got_of(struct zk *z, const struct zk_req *a)
{
    for (int i = 0; i < ZK_AHEAD_MAX; i++)
        if (z->ahead_got[i].path && z->ahead_got[i].inflight == a)
            return &z->ahead_got[i];
    return NULL;
}

/* Ends e, then answers its taker, if any, with `res` (NULL: an error
 * `rc`): the taker may take again meanwhile. */
static void end_answer(struct zk_ahead_got *e, const struct zk_result *res,
                       int rc)
{
    zk_done_cb cb = e->cb;
    void *arg = e->arg;
    e->cb = NULL;
    e->inflight = NULL; /* its answer, if it comes, finds no entry */
    got_clear(e);
    struct zk_result err = {.type = ZK_OP_GET, .rc = rc};
    if (cb)
        cb(res ? res : &err, arg);
}

void zk_ahead_done(struct zk *z, struct zk_req *a)
{
    struct zk_ahead_got *e = got_of(z, a);
    int current = a->gen == z->gen && !z->closed;
    free(a->ahead);
    a->ahead = NULL;
    if (e && current && e->cb) {
        z->ahead_taken++;
        end_answer(e, &a->res, 0);
        zk_req_free(a);
    } else if (e && current) {
        e->inflight = NULL;
        e->req = a;
        e->at = zk_now();
    } else {
        if (e)
            end_answer(e, NULL, ZCONNECTIONLOSS);
        zk_req_free(a);
    }
}

int zk_take_ahead(struct zk *z, const char *path, double deadline,
                  zk_done_cb cb, void *arg, const struct zk_result **now,
                  int *slot)
{
    struct zk_ahead_got *e = NULL;
    for (int i = 0; i < ZK_AHEAD_MAX; i++) {
        struct zk_ahead_got *g = &z->ahead_got[i];
        if (g->path && strcmp(g->path, path) == 0 && (!e || g->seq > e->seq))
            e = g;
    }
    if (!e || e->cb)
        return 0;
    if (e->inflight) {
        e->cb = cb;
        e->arg = arg;
        e->deadline = deadline;
        return 2;
    }
    if (!e->req || zk_now() - e->at > AHEAD_KEEP_MS) {
        got_clear(e);
        return 0;
    }
    z->ahead_taken++;
    *now = &e->req->res;
    *slot = (int)(e - z->ahead_got);
    return 1;
}

void zk_ahead_taken(struct zk *z, int slot)
{
    if (slot >= 0 && slot < ZK_AHEAD_MAX)
        got_clear(&z->ahead_got[slot]);
}

/* Loop, every tick: a taker whose deadline passed is answered with an
 * error (it reads for itself, bounded); answers nobody took are dropped. */
void zk_ahead_tick(struct zk *z, double now)
{
    for (int i = 0; i < ZK_AHEAD_MAX; i++) {
        struct zk_ahead_got *e = &z->ahead_got[i];
        if (e->cb && now >= e->deadline)
            end_answer(e, NULL, ZOPERATIONTIMEOUT);
        else if (e->req && now - e->at > AHEAD_KEEP_MS)
            got_clear(e);
    }
}

/* Loop: the handle closed (zookeeper_close returned): the reads in flight
 * never come back.  Each is replaced by an error queued like a completion
 * (of no current handle), so that its taker is answered from the drain,
 * as a request failed at the close is, not from within the close. */
void zk_ahead_close(struct zk *z)
{
    free_inflight(z);
    for (int i = 0; i < ZK_AHEAD_MAX; i++) {
        struct zk_ahead_got *e = &z->ahead_got[i];
        /* an answer kept for a taker is the old session's: never taken */
        if (e->req)
            got_clear(e);
        if (!e->inflight)
            continue;
        struct zk_req *f = calloc(1, sizeof *f);
        if (!f) {
            end_answer(e, NULL, ZCONNECTIONLOSS);
            continue;
        }
        f->z = z;
        f->kind = ZK_EV_AHEAD;
        f->gen = z->gen - 1; /* never the current handle's */
        f->res.type = ZK_OP_GET;
        f->res.rc = ZCONNECTIONLOSS;
        e->inflight = f;
        zk_enqueue(f);
    }
}
