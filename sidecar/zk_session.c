/*
 * zk_session.c — the bridge's session lifecycle: the handle and its
 * reconnects, a new session after expiry, the local lease clock (own
 * ephemeral nodes count as lost once `last contact + session timeout -
 * margin` passes while disconnected, and the session is then replaced so
 * that they are never re-adopted), the credentials, the tick (deadlines,
 * heartbeats), and the bridge's creation, close and getters.
 *
 *   ZooKeeper's watcher thread ──► on_watch: a session or watch event,
 *   queued like a completion ──► zk_drain ──► zk_session_state(state)
 *       connected ──► flush parked requests, emit "connected" / "new"
 *       connecting ──► emit "disconnected", the lease clock runs
 *       expired / lease passed ──► emit "lost", restart_session
 */
#include "zk_impl.h"

#include "config.h"
#include "errors.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The local lease: the session may have expired in the ensemble once the
 * session timeout has passed since the send time of the last request the
 * server answered; a margin covers the clocks' drift. */
static double lease_margin(const struct zk *z)
{
    double margin = z->negotiated / 10.0;
    return margin < 100 ? 100 : margin;
}

/* The lease's end when the session was last known alive at `alive`. */
static double lease_from(const struct zk *z, double alive)
{
    return alive + z->negotiated - lease_margin(z);
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
        if (path && (type == ZOO_DELETED_EVENT || type == ZOO_CHANGED_EVENT))
            r->ahead_req = zk_ahead_start(hc->z, zh, hc->gen, path);
    }
    zk_enqueue(r);
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
    zk_enqueue(r);
}

/* Gives the current handle the credentials; the library sends them on
 * every (re)connection, before any request.  A handle whose client thread
 * is between connection attempts may refuse them (ZINVALIDSTATE, seen when
 * a new session is opened while the server is down): they are given again
 * when it connects, before the requests parked meanwhile are sent. */
static void add_auth(struct zk *z, int connected)
{
    if (!z->auth || z->auth_added)
        return;
    int arc = zoo_add_auth(z->zh, "digest", z->auth, (int)strlen(z->auth),
                           on_auth, z->hctx);
    z->auth_added = arc == ZOK;
    if (arc == ZOK)
        return;
    if (connected)
        log_error("zk.auth", "rc=%d err=\"%s\"", arc, zerror(arc));
    else
        log_warn("zk.auth_later", "rc=%d err=\"%s\"", arc, zerror(arc));
}

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
        free(hc);
        z->hctx = NULL;
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
    z->auth_added = 0;
    add_auth(z, 0);
    log_info("zk.connecting", "zk=%s session_timeout=%d credentials=%s acl=%s",
             z->hosts, z->session_timeout, z->auth ? "digest" : "none",
             z->acl == &ZOO_CREATOR_ALL_ACL ? "creator" : "open");
    return 0;
}

/* Closes the current handle.  What was in flight does not come back
 * (restart_session and zk_free answer it). */
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
    zk_ahead_close(z);
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

/* Opens a new handle, or, when the client cannot start (none of the
 * servers' names resolves: an ensemble with no ready pod), tries again
 * REOPEN_MS later from on_tick, for as long as it takes: without a handle
 * every request would wait for its deadline for ever. */
#define REOPEN_MS 1000.0

static void reopen(struct zk *z, double now)
{
    z->reopen_at = 0;
    if (open_handle(z, NULL, 0) < 0) {
        log_error("zk.init_failed", "zk=%s retry_ms=%d", z->hosts,
                  (int)REOPEN_MS);
        z->reopen_at = now + REOPEN_MS;
    }
}

static int in_group(const struct zk *z, const struct zk_req *r)
{
    for (const struct zk_req *g = z->groups_out; g; g = g->all_next)
        for (const struct zk_req *m = g->member; m; m = m->member)
            if (m == r)
                return 1;
    return 0;
}

/* What a closed handle of generation `gen` had in flight never comes
 * back: its completion thread stops at the close before it would answer
 * them (see zk_free).  Each is an unknown outcome, answered through the
 * queue like any failure; else a request with no deadline (background
 * work: an expiry holding its key's queue) would wait for ever.  A group's
 * members are answered through their group. */
static void fail_unanswered(struct zk *z, uint64_t gen)
{
    for (struct zk_req *g = z->groups_out; g; g = g->all_next)
        if (g->gen == gen && g->answered_at == 0 && !g->unsent)
            zk_fail_later(g, ZCONNECTIONLOSS);
    for (struct zk_req *r = z->all; r; r = r->all_next)
        if (r->gen == gen && r->sent_at > 0 && r->answered_at == 0 &&
            !in_group(z, r))
            zk_fail_later(r, ZCONNECTIONLOSS);
}

/* Replaces the session: the old one's ephemeral nodes become foreign. */
static void restart_session(struct zk *z, const char *why)
{
    log_warn("zk.session_restart", "reason=%s old_session=0x%llx", why,
             (unsigned long long)z->session_id);
    uint64_t old = z->gen;
    close_handle(z);
    fail_unanswered(z, old);
    /* No session until the new one connects (a command that read under the
     * old one sees that it changed); what was parked for the old one is
     * answered now, never sent. */
    z->session_id = 0;
    if (!z->closed)
        reopen(z, zk_now());
    struct zk_req **pp = &z->parked_head, *r;
    z->parked_tail = NULL;
    while ((r = *pp) != NULL) {
        if (r->gen != z->gen) {
            *pp = r->next;
            zk_fail_later(r, ZSESSIONEXPIRED);
        } else {
            z->parked_tail = r;
            pp = &r->next;
        }
    }
}

void zk_session_state(struct zk *z, int state, double at)
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
        /* The event proves the session alive when it came, on the
         * completion thread, not when the loop drained it: a process
         * stopped in between (SIGSTOP, a paused VM) must not restart
         * its lease from its waking. */
        z->last_contact = at > 0 && at < now ? at : now;
        z->last_heartbeat = z->last_contact;
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
        add_auth(z, 1);
        zk_flush_parked(z);
        emit(z, is_new && z->sessions > 1 ? "new" : "connected");
    } else if (state == ZOO_CONNECTING_STATE ||
               state == ZOO_ASSOCIATING_STATE) {
        if (z->connected) {
            z->connected = 0;
            z->disconnects++;
            z->lease_deadline = lease_from(z, z->last_contact);
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

/* The answer to the credentials the current handle sent.  Only the
 * server's refusal is a failure: a connection lost before the answer
 * (ZCONNECTIONLOSS...) says nothing of the credentials, and the client sends
 * them again on its next connection (a refusal then arrives as
 * ZOO_AUTH_FAILED_STATE). */
void zk_session_auth(struct zk *z, int rc)
{
    if (rc == ZOK) {
        z->auth_failed = 0;
    } else if (rc == ZAUTHFAILED) {
        z->auth_failed = 1;
        log_error("zk.auth_failed", "rc=%d err=\"%s\"", rc, zerror(rc));
    } else {
        log_warn("zk.auth_unanswered", "rc=%d err=\"%s\"", rc, zerror(rc));
    }
}

static void on_tick(uv_timer_t *t)
{
    struct zk *z = t->data;
    double now = zk_now();
    if (z->parked_head)
        zk_expire_parked(z, now, 0, ZK_TIMEOUT);
    /* multis parked while the lease had run out, the session alive after
     * all (the heartbeat was answered: zk_multi_usable) */
    if (z->parked_head && !z->closed && zk_multi_usable(z))
        zk_flush_parked(z);
    if (z->all)
        zk_abandon_late(z, now);
    zk_ahead_tick(z, now);
    if (z->closed)
        return;
    if (!z->zh && z->reopen_at > 0 && now >= z->reopen_at) {
        reopen(z, now);
        return;
    }
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

/* The completion queue's wake-up (zk_queue.h). */
static void on_wake(struct zk_queue *q)
{
    zk_drain(q->data);
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

/* Frees z and the strings it owns (the credentials wiped first). */
static void free_zk(struct zk *z)
{
    free(z->hosts);
    free(z->root);
    if (z->auth) {
        explicit_bzero(z->auth, strlen(z->auth));
        free(z->auth);
    }
    free(z);
}

struct zk *zk_create(uv_loop_t *loop, const struct config *cfg,
                     zk_event_cb on_event, void *arg, char *err, size_t errlen)
{
    zk_log_install();

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
        free_zk(z);
        return NULL;
    }
    z->session_timeout = cfg->session_timeout;
    z->negotiated = cfg->session_timeout;
    z->on_event = on_event;
    z->event_arg = arg;
    int rc = zk_queue_init(&z->queue, loop, on_wake, z);
    if (rc < 0) {
        snprintf(err, errlen, "completion queue: %s", uv_strerror(rc));
        free_zk(z);
        return NULL;
    }
    zk_ahead_init(z);
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
    zk_group_send(z);
    zk_expire_parked(z, zk_now(), 1, ZK_CLOSING);
    if (z->zh)
        log_info("zk.closing", "session=0x%llx",
                 (unsigned long long)z->session_id);
    close_handle(z);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct zk *z = h->data;
    if (--z->handles_open == 0) {
        zk_queue_destroy(&z->queue);
        zk_ahead_free(z);
        free_zk(z);
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
        if (!zk_queue_empty(&z->queue)) {
            zk_drain(z);
        } else if (z->all) {
            z->all->res.rc = ZK_CLOSING;
            zk_deliver(z, z->all);
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
    zk_group_arm(z, 0);
    zk_queue_close(&z->queue, on_handle_closed);
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

int zk_stale_answer(const struct zk *z, const struct zk_req *r, double now)
{
    if (zk_is_connection_rc(r->res.rc) || r->res.rc == ZK_TIMEOUT ||
        r->sent_at <= 0)
        return 0; /* (never sent: answered here, e.g. refused as too big) */
    if (r->gen != z->gen)
        return 1; /* its session was given up since */
    if (z->session_id == 0 || z->lease_lost)
        return 0;
    /* The answer itself proves the session alive when it was sent. */
    return now >= lease_from(z, r->sent_at > z->last_contact ? r->sent_at
                                                             : z->last_contact);
}

double zk_lease_end(const struct zk *z)
{
    if (z->closed || z->lease_lost || z->session_id == 0)
        return 0;
    if (!z->connected)
        return z->lease_deadline;
    return lease_from(z, z->last_contact);
}

int zk_lease_lost(const struct zk *z)
{
    /* (not session_id: restart_session zeroes it while the loss lasts) */
    return !z->closed && z->lease_lost;
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

void zk_ahead_counts(const struct zk *z, uint64_t *sent, uint64_t *taken)
{
    *sent = z->ahead_sent;
    *taken = z->ahead_taken;
}

uint64_t zk_requests_too_large(const struct zk *z)
{
    return z->too_large;
}

const struct metrics_histo *zk_request_took(const struct zk *z,
                                            enum zk_op_type type)
{
    return (unsigned)type < ZK_OP_TYPES ? &z->took[type] : NULL;
}

const struct metrics_histo *zk_answer_waited(const struct zk *z)
{
    return &z->waited;
}

uint64_t zk_requests_sent(const struct zk *z, enum zk_op_type type)
{
    return (unsigned)type < ZK_OP_TYPES ? z->sent[type] : 0;
}

const char *zk_op_name(enum zk_op_type type)
{
    static const char *const names[ZK_OP_TYPES] = {
        [ZK_OP_GET] = "get",           [ZK_OP_EXISTS] = "exists",
        [ZK_OP_CHILDREN] = "children", [ZK_OP_CREATE] = "create",
        [ZK_OP_SET] = "set",           [ZK_OP_DELETE] = "delete",
        [ZK_OP_CHECK] = "check",       [ZK_OP_SYNC] = "sync",
        [ZK_OP_MULTI] = "multi",       [ZK_OP_GET_ACL] = "get_acl"};
    return (unsigned)type < ZK_OP_TYPES ? names[type] : "unknown";
}
