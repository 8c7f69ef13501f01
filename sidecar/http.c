/*
 * http.c — the operations port (see http.h for the routes).
 *
 *   accept ──► read head (≤ HEAD_MAX bytes, ≤ HEAD_TIMEOUT_MS) ──► route
 *          ──► one response (≤ WRITE_TIMEOUT_MS), Connection: close
 *          ──► shutdown ──► close
 *
 * Each connection owns two handles (socket, deadline timer); its memory is
 * freed in the second close callback.  Nothing here blocks or calls into
 * ZooKeeper: /metrics reads counters and gauges the loop already keeps.
 *
 * /healthz must be answered whatever other connections do (a liveness probe
 * that fails restarts the pod and drops its locks), so a slow client can
 * hold a slot only briefly and never keeps a new one out: at most MAX_CONNS
 * connections are open, and a connection arriving when all are taken
 * replaces the oldest one still sending its head (or, if none is, the
 * oldest).  Memory is bounded by MAX_CONNS heads and responses.
 */
#include "http.h"

#include "errors.h"
#include "log.h"
#include "metrics.h"
#include "buf.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_MAX 8192          /* request line and headers */
#define HEAD_TIMEOUT_MS 2000   /* to send the head, from the connection */
#define WRITE_TIMEOUT_MS 10000 /* to read the response, once it is ready */
#define MAX_CONNS 64           /* open at once; the next replaces one */

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct http *h;
    struct http_conn *prev, *next; /* newest first */
    char head[HEAD_MAX];
    size_t len;
    int responded;
    int closing;
    int open_handles; /* freed when both close callbacks have run */
    uv_write_t w;
    uv_shutdown_t sd;
    struct buf out;
};

static void on_handle_closed(uv_handle_t *hd)
{
    struct http_conn *c = hd->data;
    if (--c->open_handles > 0)
        return;
    buf_free(&c->out);
    free(c);
}

static void conn_close(struct http_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    struct http *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    h->nconns--;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_timeout(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    log_debug("http.timeout", "bytes=%zu responded=%d", c->len, c->responded);
    conn_close(c);
}

/* All MAX_CONNS slots are taken: closes the oldest connection still
 * sending its head, else the oldest of all.  Returns 0 if there was none. */
static int evict_one(struct http *h)
{
    struct http_conn *oldest = NULL, *oldest_reading = NULL;
    for (struct http_conn *c = h->conns; c; c = c->next) {
        oldest = c;
        if (!c->responded)
            oldest_reading = c;
    }
    struct http_conn *victim = oldest_reading ? oldest_reading : oldest;
    if (victim) {
        log_debug("http.evicted", "bytes=%zu responded=%d", victim->len,
                  victim->responded);
        conn_close(victim);
    }
    return victim != NULL;
}

static void on_shutdown(uv_shutdown_t *sd, int status)
{
    (void)status;
    conn_close(sd->data);
}

static void on_write(uv_write_t *w, int status)
{
    struct http_conn *c = w->data;
    if (c->closing)
        return;
    if (status < 0 ||
        uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
        conn_close(c);
}

static void respond(struct http_conn *c, int status, const char *reason,
                    const char *ctype, const char *body, size_t bodylen)
{
    if (c->responded)
        return;
    c->responded = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_start(&c->timer, on_timeout, WRITE_TIMEOUT_MS, 0);
    buf_printf(&c->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
               "Connection: close\r\nCache-Control: no-store\r\n\r\n",
               status, reason, ctype, bodylen);
    buf_append(&c->out, body, bodylen);
    uv_buf_t ub = uv_buf_init(c->out.data, (unsigned)c->out.len);
    c->w.data = c;
    c->sd.data = c;
    if (uv_write(&c->w, (uv_stream_t *)&c->tcp, &ub, 1, on_write) < 0)
        conn_close(c);
}

static void respond_text(struct http_conn *c, int status, const char *reason,
                         const char *text)
{
    respond(c, status, reason, "text/plain; charset=utf-8", text, strlen(text));
}

/* The head is complete: parse the request line and answer. */
static void route(struct http_conn *c)
{
    char *sp1 = memchr(c->head, ' ', c->len);
    char *eol = memchr(c->head, '\n', c->len);
    if (!sp1 || !eol || sp1 > eol) {
        respond_text(c, 400, "Bad Request", "bad request\n");
        return;
    }
    char *target = sp1 + 1;
    char *sp2 = memchr(target, ' ', (size_t)(eol - target));
    if (!sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        respond_text(c, 400, "Bad Request", "bad request\n");
        return;
    }
    size_t mlen = (size_t)(sp1 - c->head);
    size_t tlen = (size_t)(sp2 - target);
    char *q = memchr(target, '?', tlen);
    if (q)
        tlen = (size_t)(q - target);
    if (mlen != 3 || memcmp(c->head, "GET", 3) != 0) {
        respond_text(c, 405, "Method Not Allowed", "only GET\n");
        return;
    }
#define IS(p) (tlen == sizeof(p) - 1 && memcmp(target, p, tlen) == 0)
    if (IS("/metrics")) {
        struct buf body;
        buf_init(&body);
        metrics_render(&body);
        respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                body.data ? body.data : "", body.len);
        buf_free(&body);
    } else if (IS("/healthz")) {
        respond_text(c, 200, "OK", "ok\n");
    } else if (IS("/readyz")) {
        char why[128], text[160];
        int ready = metrics_ready(why, sizeof why);
        snprintf(text, sizeof text, "%s\n", why);
        if (ready)
            respond_text(c, 200, "OK", text);
        else
            respond_text(c, 503, "Service Unavailable", text);
    } else {
        respond_text(c, 404, "Not Found", "not found\n");
    }
#undef IS
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    struct http_conn *c = hd->data;
    (void)suggested;
    /* One spare byte past HEAD_MAX tells "too long" from "exactly full". */
    static char spare[1];
    if (c->len < HEAD_MAX)
        *b = uv_buf_init(c->head + c->len, (unsigned)(HEAD_MAX - c->len));
    else
        *b = uv_buf_init(spare, sizeof spare);
}

static int head_complete(const struct http_conn *c)
{
    for (size_t i = 0; i + 1 < c->len; i++) {
        if (c->head[i] != '\n')
            continue;
        if (c->head[i + 1] == '\n' ||
            (c->head[i + 1] == '\r' && i + 2 < c->len &&
             c->head[i + 2] == '\n'))
            return 1;
    }
    return 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct http_conn *c = s->data;
    if (nread == 0 || c->closing || c->responded)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (c->len >= HEAD_MAX) {
        respond_text(c, 431, "Request Header Fields Too Large",
                     "request head too large\n");
        return;
    }
    (void)b;
    c->len += (size_t)nread;
    if (head_complete(c))
        route(c);
    else if (c->len >= HEAD_MAX)
        respond_text(c, 431, "Request Header Fields Too Large",
                     "request head too large\n");
}

static void on_connection(uv_stream_t *l, int status)
{
    struct http *h = l->data;
    if (status < 0) {
        log_warn("http.accept_error", "err=\"%s\"", uv_strerror(status));
        return;
    }
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    uv_tcp_init(h->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }
    while (h->nconns >= MAX_CONNS)
        if (!evict_one(h))
            break;
    c->h = h;
    buf_init(&c->out);
    uv_timer_init(h->loop, &c->timer);
    c->timer.data = c;
    c->open_handles = 2;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    h->nconns++;
    uv_timer_start(&c->timer, on_timeout, HEAD_TIMEOUT_MS, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        conn_close(c);
}

int http_init(struct http *h, uv_loop_t *loop, const char *bind, int port,
              char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->loop = loop;
    struct sockaddr_storage ss;
    const char *addr = strcmp(bind, "localhost") == 0 ? "127.0.0.1" : bind;
    int rc = strchr(addr, ':')
                 ? uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&ss)
                 : uv_ip4_addr(addr, port, (struct sockaddr_in *)&ss);
    if (rc < 0) {
        snprintf(err, errlen, "invalid --metrics-bind address '%s'", bind);
        return ZR_EINVAL;
    }
    uv_tcp_init(loop, &h->listener);
    h->listener.data = h;
    rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->listener, 64, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d (metrics): %s", bind,
                 port, uv_strerror(rc));
        uv_close((uv_handle_t *)&h->listener, NULL);
        return ZR_EIO;
    }
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&h->listener, (struct sockaddr *)&got, &len);
    h->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    h->listening = 1;
    log_info("http.listening", "bind=%s port=%d", bind, h->port);
    return 0;
}

void http_close(struct http *h)
{
    if (!h->listening)
        return;
    h->listening = 0;
    uv_close((uv_handle_t *)&h->listener, NULL);
    while (h->conns)
        conn_close(h->conns);
}
