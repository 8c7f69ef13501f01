/*
 * http.h — the operations port: /metrics, /healthz, /readyz.
 *
 * A minimal HTTP/1.1 server on the daemon's libuv loop, for Prometheus and
 * the kubelet: GET only, one response per connection (Connection: close),
 * a bounded request head and a deadline to send it.
 *
 *   GET /metrics   200, Prometheus text format 0.0.4 (metrics_render)
 *   GET /healthz   200 "ok" whenever the loop runs (never depends on
 *                  ZooKeeper: a failing liveness probe restarts the pod and
 *                  drops its locks)
 *   GET /readyz    200 "ok", or 503 and the reason (metrics_ready)
 *   anything else  404; a method other than GET: 405; a malformed or
 *                  oversized head: 400 / 431
 */
#ifndef ZKRESP_HTTP_H
#define ZKRESP_HTTP_H

#include <stddef.h>
#include <uv.h>

struct http_conn;

struct http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listening;
    int port;                /* the port actually bound */
    struct http_conn *conns; /* open connections, for http_close */
    size_t nconns;
};

/* Binds bind:port and listens.  Returns 0 or a negative error with the
 * reason in err. */
int http_init(struct http *h, uv_loop_t *loop, const char *bind, int port,
              char *err, size_t errlen);

/* Closes the listener and every open connection (no-op if not listening). */
void http_close(struct http *h);

#endif
