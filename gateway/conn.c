/*
 * conn.c — a client connection.
 *
 *   socket ──read──► proto (hiredis) ──request──► FIFO tail ──► dispatch
 *                                                   │ (C now, or Lua later)
 *   socket ◄─write── out buffer ◄── FIFO head, while its reply is done
 *
 * Backpressure: reading stops while the client's window of requests is in
 * the FIFO or more than OUT_SOFT bytes wait to be written, and resumes when
 * both fall back.  The window (never more than `max-inflight`) starts at
 * WINDOW_START, grows by one with each reply up to `max-inflight` and halves
 * (not below WINDOW_MIN) with each reply of BIG_REPLY bytes or more: a long
 * pipeline of small commands still runs up to `max-inflight` at once, while a
 * burst of large reads cannot put hundreds of megabytes on the shared ZooKeeper
 * session ahead of every other client before its first reply shows how large
 * they are.  A client whose unsent output passes `max-output` is closed, so a
 * client that never reads costs bounded memory.
 */
#include "conn.h"

#include "config.h"
#include "dispatch.h"
#include "errors.h"
#include "log.h"
#include "lua_reply.h"
#include "metrics.h"
#include "proto.h"
#include "server.h"
#include "zk.h"

#include <poll.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OUT_SOFT (1u << 20)
#define READ_BUF (64 * 1024)
#define WINDOW_START 32
#define WINDOW_MIN 8
#define BIG_REPLY (64u * 1024)

struct wreq {
    uv_write_t w;
    struct conn *c;
    struct buf b;
    double deadline; /* the lease its replies rest on (conn.out_deadline) */
};

static void process(struct conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

static uint64_t now_ms(struct conn *c)
{
    return uv_now(c->srv->loop);
}

static void req_free(struct req *r)
{
    buf_free(&r->reply);
    free(r);
}

/* r is done: until popped its reply counts against --max-output, and
 * stops reading past OUT_SOFT, like the bytes waiting to be written.
 * Replies (and pushes) behind one that waits, a blocking LOCK.ACQUIRE,
 * would otherwise grow without bound. */
static void hold(struct conn *c, struct req *r)
{
    r->done = 1;
    if (!r->held) {
        r->held = 1;
        c->held += r->reply.len;
    }
}

/* The bytes this connection owes its client. */
static size_t owed(const struct conn *c)
{
    return c->out.len + c->writing + c->held;
}

void conn_req_finish(struct req *r)
{
    r->c_pending = 0;
    if (r->orphan) {
        req_free(r);
        return;
    }
    hold(r->c, r);
    process(r->c);
}

/* The Lua host finished r's command. */
static void req_done(struct lua_task *t)
{
    struct req *r = t->data;
    hold(r->c, r);
    process(r->c);
}

static int under_limits(const struct conn *c)
{
    size_t max = (size_t)c->srv->cfg->max_inflight;
    return !c->paused && c->inflight < (c->window < max ? c->window : max) &&
           owed(c) < OUT_SOFT;
}

/* Replies that rest on the local lease (see pop_done) went to the socket
 * at `now`: if the lease had ended by then, the process stopped between
 * the check and the write (a SIGSTOP, a paused VM).  Nothing takes them
 * back; the log and the metric say so, and fencing tokens guard what the
 * client does next. */
static void check_in_time(struct conn *c, double deadline)
{
    if (deadline <= 0)
        return;
    double now = zk_now();
    if (now < deadline)
        return;
    c->srv->stats.replies_past_lease++;
    log_warn("client.reply_past_lease", "id=%llu addr=%s late_ms=%.3f",
             (unsigned long long)c->id, c->addr, now - deadline);
}

static void on_write(uv_write_t *w, int status)
{
    struct wreq *wr = (struct wreq *)w;
    struct conn *c = wr->c;
    double deadline = wr->deadline;
    buf_free(&wr->b);
    free(wr);
    if (status == UV_ECANCELED || c->closing)
        return;
    if (status == 0)
        check_in_time(c, deadline);
    c->writing = 0;
    c->last_io_ms = now_ms(c);
    if (status < 0) {
        conn_close(c, "write error");
        return;
    }
    process(c);
}

/* Hands the out buffer to the socket: uv_try_write first, the rest with one
 * uv_write at a time. */
static void write_out(struct conn *c)
{
    if (c->closing || c->writing || c->out.len == 0)
        return;
    double deadline = c->out_deadline;
    c->out_deadline = 0;
    uv_buf_t ub = uv_buf_init(c->out.data, (unsigned)c->out.len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);
    if (n > 0) {
        c->srv->stats.net_output_bytes += (uint64_t)n;
        c->last_io_ms = now_ms(c);
        buf_consume(&c->out, (size_t)n);
        if (c->out.len == 0) {
            check_in_time(c, deadline);
            return;
        }
    } else if (n < 0 && n != UV_EAGAIN) {
        conn_close(c, "write error");
        return;
    }
    struct wreq *wr = malloc(sizeof *wr);
    if (!wr) {
        conn_close(c, "out of memory");
        return;
    }
    wr->c = c;
    wr->deadline = deadline;
    wr->b = c->out; /* takes the buffer */
    buf_init(&c->out);
    c->writing = wr->b.len;
    c->srv->stats.net_output_bytes += wr->b.len;
    ub = uv_buf_init(wr->b.data, (unsigned)wr->b.len);
    int rc = uv_write(&wr->w, (uv_stream_t *)&c->tcp, &ub, 1, on_write);
    if (rc < 0) {
        buf_free(&wr->b);
        free(wr);
        c->writing = 0;
        conn_close(c, "write error");
    }
}

/* A reply that rests on ZooKeeper's answers goes out only while the
 * session they came from may still be alive, checked here, just before it
 * is written (a grant that waited behind an earlier reply, or whose process
 * stopped, may be another's lock by now); else LUA_HOST_STALLED goes. */
static void check_reply(struct conn *c, struct req *r)
{
    double deadline = lua_host_reply_deadline(c->srv->lua, &r->task);
    if (deadline < 0) {
        buf_consume(&r->reply, r->reply.len);
        reply_error(&r->reply, LUA_HOST_STALLED);
    } else if (deadline > 0 &&
               (c->out_deadline == 0 || deadline < c->out_deadline)) {
        c->out_deadline = deadline;
    }
}

/* Moves the replies of completed requests at the FIFO head to out. */
static void pop_done(struct conn *c)
{
    struct req *r;
    while ((r = c->head) != NULL && r->done) {
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        c->inflight--;
        if (r->held)
            c->held -= r->reply.len;
        int sent = !c->close_when_flushed && !r->silent;
        if (sent)
            check_reply(c, r);
        if (r->reply.len >= BIG_REPLY)
            c->window = c->window / 2 > WINDOW_MIN ? c->window / 2 : WINDOW_MIN;
        else if (c->window < (size_t)c->srv->cfg->max_inflight)
            c->window++;
        /* Metrics: the reply is ready to leave; an error reply starts with
         * '-' (simple error) or '!' (RESP3 blob error). */
        if (r->metric_cmd >= 0)
            metrics_cmd_done(r->metric_cmd,
                             r->reply.len > 0 && (r->reply.data[0] == '-' ||
                                                  r->reply.data[0] == '!'),
                             uv_hrtime() - r->start_ns);
        if (sent)
            buf_append(&c->out, r->reply.data, r->reply.len);
        if (r->close_after)
            c->close_when_flushed = 1;
        req_free(r);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    static char rbuf[READ_BUF];
    (void)h;
    (void)suggested;
    *b = uv_buf_init(rbuf, sizeof rbuf);
}

static struct req *req_append(struct conn *c)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->c = c;
    r->metric_cmd = -1; /* dispatch() names it */
    r->start_ns = uv_hrtime();
    buf_init(&r->reply);
    r->task.done = req_done;
    r->task.data = r;
    r->task.out = &r->reply;
    r->task.proto = c->resp;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->inflight++;
    return r;
}

/* Which of the n names pr's command is (any case): its index + 1, or 0. */
static int named(const struct proto_req *pr, const char *const *names, size_t n)
{
    const struct proto_arg *a = &pr->argv[0];
    for (size_t i = 0; i < n; i++)
        if (a->len == strlen(names[i]) &&
            strncasecmp(a->ptr, names[i], a->len) == 0)
            return (int)i + 1;
    return 0;
}

/* Which of the subscribe family pr is: 1-3 the unsubscribes, 4-6 the
 * subscribes; 0: none. */
static int subscribe_family(const struct proto_req *pr)
{
    static const char *const names[] = {"unsubscribe",  "punsubscribe",
                                        "sunsubscribe", "subscribe",
                                        "psubscribe",   "ssubscribe"};
    return named(pr, names, sizeof names / sizeof names[0]);
}

/* Whether pr is of the subscribe family, whose confirmations Redis sends
 * as pushes, even under CLIENT REPLY OFF or SKIP (an arity error is no
 * confirmation: SUBSCRIBE with no channel). */
static int confirms_subscription(const struct proto_req *pr)
{
    int f = subscribe_family(pr);
    return f > 0 && (f <= 3 || pr->argc >= 2);
}

/* Whether pr waits for every earlier command of its connection before it
 * is dispatched: the subscribe family, RESET and HELLO, which change at
 * once what the connection is (its subscriptions, decisive for how the
 * commands after it are read in RESP2; its protocol, which encodes the
 * messages an earlier PUBLISH sends it), and INFO, which reads the
 * keyspace as it is read.  A command answered in Lua waits for its turn
 * there (scripts/queue.lua, Q.turn); these are answered, or change the
 * connection, as they are dispatched. */
static int waits_for_pipeline(const struct proto_req *pr)
{
    static const char *const names[] = {"reset", "hello", "info"};
    return subscribe_family(pr) ||
           named(pr, names, sizeof names / sizeof names[0]);
}

/* The next request to dispatch, as proto_next.  One that waits for the
 * pipeline (waits_for_pipeline) while others of its connection are in
 * flight is held back (c->held_back, reading stopped) until none is, as
 * Redis runs a pipeline one command after another. */
static enum proto_status next_request(struct conn *c, struct proto_req *pr)
{
    if (c->held_back) {
        if (c->inflight > 0)
            return PROTO_NEED_MORE;
        *pr = *c->held_back;
        free(c->held_back);
        c->held_back = NULL;
        return PROTO_REQUEST;
    }
    enum proto_status st = proto_next(c->proto, pr);
    if (st != PROTO_REQUEST || c->inflight == 0 || !waits_for_pipeline(pr))
        return st;
    c->held_back = malloc(sizeof *c->held_back);
    if (!c->held_back)
        return st; /* (dispatched now: the order is lost, not the request) */
    *c->held_back = *pr;
    return PROTO_NEED_MORE;
}

/* Parses and dispatches buffered requests while the limits allow, then
 * writes what is ready and sets the reading state.  Re-entrant calls (a
 * request completing inside dispatch) only mark work; the outer call does
 * it. */
static void process(struct conn *c)
{
    if (c->closing)
        return;
    if (c->in_process) {
        c->again = 1;
        return;
    }
    c->in_process = 1;
    do {
        c->again = 0;
        for (;;) {
            pop_done(c);
            if (c->closing || c->close_when_flushed || c->last_request ||
                !under_limits(c))
                break;
            struct proto_req pr;
            enum proto_status st = next_request(c, &pr);
            if (st == PROTO_NEED_MORE)
                break;
            struct req *r = req_append(c);
            if (!r) {
                if (st == PROTO_REQUEST)
                    proto_req_free(&pr);
                conn_close(c, "out of memory");
                break;
            }
            if (st == PROTO_ERROR) {
                c->srv->stats.protocol_errors++;
                char q[256];
                const char *e = proto_errstr(c->proto);
                unsigned long left_out;
                if (log_limit_allow(&c->srv->proto_log, uv_now(c->srv->loop),
                                    &left_out))
                    log_info("client.protocol_error",
                             "id=%llu addr=%s err=%s suppressed=%lu",
                             (unsigned long long)c->id, c->addr,
                             log_quote(e, strlen(e), q, sizeof q), left_out);
                reply_errorf(&r->reply, "ERR %s", e);
                r->done = 1;
                r->close_after = 1;
                c->last_request = 1; /* answered once, then closed */
                break;
            }
            c->commands++;
            c->srv->stats.commands_processed++;
            c->last_cmd_ms = now_ms(c);
            r->silent =
                c->reply_mode != REPLY_ON && !confirms_subscription(&pr);
            if (c->reply_mode == REPLY_SKIP)
                c->reply_mode = REPLY_ON;
            dispatch(c, r, &pr);
            proto_req_free(&pr);
            if (r->done)
                hold(c, r);
            /* QUIT, or CLIENT KILL of itself: nothing after it runs, even
             * while replies before it are still owed (as in Redis). */
            if (r->close_after)
                c->last_request = 1;
        }
    } while (c->again && !c->closing);
    c->in_process = 0;
    pop_done(c); /* what the last turn completed, e.g. a protocol error */
    if (c->closing)
        return;
    write_out(c);
    if (c->closing)
        return;
    if (owed(c) > (size_t)c->srv->cfg->max_output) {
        log_warn("client.output_limit", "id=%llu addr=%s bytes=%zu",
                 (unsigned long long)c->id, c->addr, owed(c));
        conn_close(c, "output buffer limit");
        return;
    }
    if (c->close_when_flushed) {
        if (c->out.len == 0 && c->writing == 0)
            conn_close(c, "quit");
        else if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = 0;
        }
        return;
    }
    int want = under_limits(c) && !c->last_request && !c->held_back;
    if (want && !c->reading) {
        /* Resume reading.  libuv refuses a NULL read callback, so this must
         * be the same pair conn_accept started with. */
        int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc < 0) {
            conn_close(c, uv_strerror(rc));
            return;
        }
        c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_close(c, nread == UV_EOF ? "eof" : uv_strerror((int)nread));
        return;
    }
    c->srv->stats.net_input_bytes += (uint64_t)nread;
    c->last_io_ms = now_ms(c);
    if (proto_feed(c->proto, b->base, (size_t)nread) == ZR_ELIMIT) {
        /* Over the query buffer limit: Redis closes such clients.  (Other
         * protocol errors are logged once, where process() answers them.) */
        char q[256];
        const char *e = proto_errstr(c->proto);
        log_warn("client.query_limit", "id=%llu addr=%s err=%s",
                 (unsigned long long)c->id, c->addr,
                 log_quote(e, strlen(e), q, sizeof q));
    }
    process(c);
}

/* Runs for each of the connection's two handles; the second frees it. */
static void on_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    struct server *s = c->srv;
    struct req *r = c->head;
    while (r) {
        struct req *next = r->next;
        if (r->c_pending)
            r->orphan = 1; /* its completion frees it */
        else
            req_free(r);
        r = next;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    server_index_remove(s, c);
    if (c->held_back) {
        proto_req_free(c->held_back);
        free(c->held_back);
    }
    proto_free(c->proto);
    buf_free(&c->out);
    free(c->name);
    free(c->user);
    free(c->lib_name);
    free(c->lib_ver);
    free(c);
}

void conn_close(struct conn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = 1;
    log_debug("client.closed", "id=%llu addr=%s reason=\"%s\"",
              (unsigned long long)c->id, c->addr, why);
    for (struct req *r = c->head; r; r = r->next)
        if (!r->done)
            lua_host_abandon(c->srv->lua, &r->task);
    if (conn_lua_state(c))
        lua_host_client_gone(c->srv->lua, c->id, 1);
    if (c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
    uv_timer_stop(&c->pause_timer);
    uv_close((uv_handle_t *)&c->pause_timer, on_closed);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void sockname(uv_tcp_t *t, int peer, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    int rc = peer ? uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len)
                  : uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len);
    out[0] = 0;
    if (rc < 0)
        return;
    char host[64] = "";
    int port = 0;
    if (ss.ss_family == AF_INET) {
        uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(out, cap, "%s:%d", host, port);
    } else if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(out, cap, "[%s]:%d", host, port);
    }
}

void conn_accept(struct server *s)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->srv = s;
    c->window = WINDOW_START;
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }
    s->stats.connections_received++;
    uv_tcp_nodelay(&c->tcp, 1);
    sockname(&c->tcp, 1, c->addr, sizeof c->addr);
    sockname(&c->tcp, 0, c->laddr, sizeof c->laddr);

    if (s->stopping || s->nconns >= (size_t)s->cfg->maxclients) {
        /* Redis answers and closes; so do we. */
        s->stats.rejected_connections++;
        static const char msg[] = "-ERR max number of clients reached\r\n";
        uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }

    struct proto_limits lim = {
        .max_args = (size_t)s->cfg->max_args,
        .max_bulk = (size_t)s->cfg->max_bulk_len,
        .max_inline = 64 * 1024,
        .max_query = (size_t)s->cfg->max_query_len,
    };
    c->proto = proto_create(&lim);
    if (!c->proto) {
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }
    uv_timer_init(s->loop, &c->pause_timer);
    c->pause_timer.data = c;
    c->open_handles = 2;
    c->id = ++s->next_client_id;
    server_index_add(s, c);
    c->resp = 2;
    conn_set_authed(c, s->cfg->requirepass == NULL);
    c->created_ms = c->last_io_ms = c->last_cmd_ms = uv_now(s->loop);
    buf_init(&c->out);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
        c->reading = 1;
    log_debug("client.accepted", "id=%llu addr=%s", (unsigned long long)c->id,
              c->addr);
}

void conn_set_authed(struct conn *c, int authed)
{
    c->authed = authed;
    proto_set_authenticated(c->proto, authed);
}

static void on_pause_end(uv_timer_t *t)
{
    struct conn *c = t->data;
    c->paused = 0;
    process(c);
}

void conn_auth_failed(struct conn *c)
{
    struct server *s = c->srv;
    unsigned long suppressed;
    if (log_limit_allow(&s->auth_log, uv_now(s->loop), &suppressed))
        log_info("client.auth_failed", "id=%llu addr=%s suppressed=%lu",
                 (unsigned long long)c->id, c->addr, suppressed);
    if (s->cfg->auth_fail_delay <= 0 || c->closing)
        return;
    c->paused = 1;
    uv_timer_start(&c->pause_timer, on_pause_end,
                   (uint64_t)s->cfg->auth_fail_delay, 0);
}

/* Whether the peer closed or reset the connection, seen without reading:
 * its FIN shows (POLLRDHUP) even behind requests we have not read. */
static int peer_gone(struct conn *c)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void conn_cron(struct conn *c, uint64_t now)
{
    const struct config *cfg = c->srv->cfg;
    if (c->closing)
        return;
    /* A client gone while we do not read from it (a blocking command waits
     * with its window full, or with a QUIT behind it) would wait for its
     * reply's time: a LOCK.ACQUIRE with a long WAIT kept its place in the
     * queue, and was granted to nobody.  Redis reads on and sees the EOF;
     * here it is looked for once a second. */
    if (!c->reading && c->inflight > 0 && peer_gone(c)) {
        conn_close(c, "eof");
        return;
    }
    /* The client makes no progress: a request it sends half of while we
     * read, or replies it does not read.  Whole requests waiting behind a
     * long command (a blocking LOCK.ACQUIRE, reading stopped by the
     * window) wait on us, not on the client. */
    int stuck = (c->reading && proto_partial(c->proto) > 0) || c->out.len > 0 ||
                c->writing;
    if (stuck && now - c->last_io_ms > (uint64_t)cfg->stall_timeout) {
        log_info("client.stalled", "id=%llu addr=%s", (unsigned long long)c->id,
                 c->addr);
        conn_close(c, "stalled");
        return;
    }
    /* Subscribers wait for messages: Redis never times them out. */
    if (cfg->timeout > 0 && c->inflight == 0 &&
        c->nsub + c->npsub + c->nssub == 0 &&
        now - c->last_io_ms > (uint64_t)cfg->timeout * 1000) {
        conn_close(c, "idle");
    }
}

struct req *conn_blocked(const struct conn *c)
{
    for (struct req *r = c->head; r; r = r->next)
        if (!r->done && r->task.blocked)
            return r;
    return NULL;
}

void conn_describe(const struct conn *c, struct buf *out)
{
    uint64_t now = uv_now(c->srv->loop);
    /* Redis's letters, in its order: P subscribed, x in MULTI, b blocked. */
    char flags[4], *f = flags;
    if (c->nsub + c->npsub + c->nssub > 0)
        *f++ = 'P';
    /* (a MULTI read behind a blocked command has not run yet, for Redis,
     * which reads nothing of a blocked client: b alone) */
    int blocked = conn_blocked(c) != NULL;
    if (c->multi && !blocked)
        *f++ = 'x';
    if (blocked)
        *f++ = 'b';
    if (f == flags)
        *f++ = 'N';
    *f = '\0';
    buf_printf(
        out,
        "id=%llu addr=%s laddr=%s fd=-1 name=%s age=%llu idle=%llu "
        "flags=%s db=%d sub=%d psub=%d ssub=%d multi=-1 qbuf=%zu "
        "qbuf-free=0 argv-mem=0 multi-mem=0 obl=0 oll=%zu omem=%zu "
        "tot-mem=0 events=r cmd=%s user=%s redir=-1 resp=%d "
        "lib-name=%s lib-ver=%s\n",
        (unsigned long long)c->id, c->addr, c->laddr, c->name ? c->name : "",
        (unsigned long long)((now - c->created_ms) / 1000),
        (unsigned long long)((now - c->last_cmd_ms) / 1000), flags, c->db,
        c->nsub, c->npsub, c->nssub, proto_pending(c->proto), c->inflight,
        c->out.len + c->writing, c->last_cmd ? c->last_cmd : "NULL",
        c->user ? c->user : "default", c->resp, c->lib_name ? c->lib_name : "",
        c->lib_ver ? c->lib_ver : "");
}

int conn_subscribed_resp2(const struct conn *c)
{
    return c->resp == 2 && c->nsub + c->npsub + c->nssub > 0;
}

int conn_lua_state(const struct conn *c)
{
    return c->nsub + c->npsub + c->nssub > 0 || c->multi || c->watched;
}

struct buf *conn_push_begin(struct server *s, uint64_t id,
                            const struct req *from, int *proto)
{
    struct conn *c = server_conn_by_id(s, id);
    if (!c || c->closing || c->close_when_flushed)
        return NULL;
    struct req *r = req_append(c);
    if (!r)
        return NULL;
    if (from && from->c == c && !from->done && from != r) {
        /* move r from the tail to just before `from` */
        struct req **pp = &c->head;
        while (*pp && *pp != from)
            pp = &(*pp)->next;
        if (*pp == from) {
            struct req *prev = c->head;
            while (prev->next != r)
                prev = prev->next;
            prev->next = NULL;
            c->tail = prev;
            r->next = (struct req *)from;
            *pp = r;
        }
    }
    c->pushing = r;
    *proto = c->resp;
    return &r->reply;
}

void conn_push_end(struct server *s, uint64_t id)
{
    struct conn *c = server_conn_by_id(s, id);
    if (!c || c->closing || !c->pushing)
        return;
    struct req *r = c->pushing;
    c->pushing = NULL;
    hold(c, r);
    if (c->in_process)
        return; /* process() pops and writes it */
    pop_done(c);
    write_out(c);
    if (!c->closing && owed(c) > (size_t)s->cfg->max_output) {
        log_warn("client.output_limit", "id=%llu addr=%s bytes=%zu",
                 (unsigned long long)c->id, c->addr, owed(c));
        conn_close(c, "output buffer limit");
    }
}

/* --- the Lua host's view of connections (lua_host.h, lua_client_ops) ---- */

static int ops_describe(void *arg, const struct lua_task *t,
                        struct lua_client *out)
{
    (void)arg;
    const struct req *r = t->data;
    if (!r || !r->c || r->c->closing)
        return -1;
    const struct conn *c = r->c;
    out->id = c->id;
    out->addr = c->addr;
    out->laddr = c->laddr;
    out->name = c->name;
    out->user = c->user ? c->user : "default";
    out->lib_name = c->lib_name;
    out->resp = c->resp;
    return 0;
}

static struct buf *ops_push_begin(void *arg, unsigned long long id,
                                  const struct lua_task *from, int *proto)
{
    return conn_push_begin(arg, id, from ? from->data : NULL, proto);
}

static void ops_push_end(void *arg, unsigned long long id)
{
    conn_push_end(arg, id);
}

static void ops_subscriptions(void *arg, unsigned long long id, int channels,
                              int patterns, int shard)
{
    struct conn *c = server_conn_by_id(arg, id);
    if (!c)
        return;
    c->nsub = channels;
    c->npsub = patterns;
    c->nssub = shard;
}

void conn_client_ops(struct server *s)
{
    struct lua_client_ops ops = {
        .encode = lua_reply_encode,
        .encode_error = lua_reply_error,
        .arg = s,
        .describe = ops_describe,
        .push_begin = ops_push_begin,
        .push_end = ops_push_end,
        .subscriptions = ops_subscriptions,
    };
    lua_host_set_client_ops(s->lua, &ops);
    lua_reply_limit((size_t)s->cfg->max_output);
}
