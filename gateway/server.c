/*
 * server.c — the listener, the connection list and the once-a-second cron.
 *
 * The cron also gives memory back after bursts.  While clients work, the Lua
 * VM keeps its garbage until its collector runs, its small-block pool keeps
 * its peak and glibc keeps freed pages in its heaps; nothing of that shrinks
 * by itself once traffic stops.  So when a second passes with (almost) no
 * new connection and no Lua work after enough of both, the cron runs a full
 * Lua collection, gives the pool's free chunks back (lua_host_collect) and
 * calls malloc_trim(0), which returns the free pages of every arena:
 *
 *   busy ... busy | quiet second -> collect + trim -> idle RSS
 *
 * Work is counted in connections and coroutines started or finished, but
 * one background coroutine may do much while it counts as one (expiring
 * thousands of keys, after a trim that came while it ran): any work earns
 * a trim once IDLE_SETTLE seconds have passed since the last one.
 */
#include "server.h"

#include "config.h"
#include "conn.h"
#include "errors.h"
#include "log.h"

#include "lua_host.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>
#include <unistd.h>

/* A cron second with at most IDLE_QUIET new connections and coroutines
 * started or finished is quiet (a periodic timer or a health check does not
 * count as work); at least IDLE_WORK of them since the last trim make one
 * worth doing, and so does any work once IDLE_SETTLE seconds have passed. */
#define IDLE_QUIET 4
#define IDLE_WORK 64
#define IDLE_SETTLE 5

size_t server_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return n == 2 ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

void server_trim_memory(struct server *s)
{
    size_t rss0 = server_rss();
    struct lua_host_memory m0 = {0}, m1 = {0};
    size_t given = 0;
    if (s->lua) {
        lua_host_memory(s->lua, &m0);
        given = lua_host_collect(s->lua);
        lua_host_memory(s->lua, &m1);
    }
    malloc_trim(0);
    s->idle.trims++;
    s->idle.since = 0;
    log_debug("memory.trimmed",
              "lua_before=%zu lua_after=%zu pool_released=%zu "
              "rss_before=%zu rss_after=%zu",
              m0.used, m1.used, given, rss0, server_rss());
}

/* Once a cron second: trims after work, when a quiet second follows. */
static void idle_check(struct server *s)
{
    uint64_t seen = s->stats.connections_received +
                    (s->lua ? lua_host_activity(s->lua) : 0);
    uint64_t delta = seen - s->idle.seen;
    s->idle.seen = seen;
    s->idle.work += delta;
    s->idle.since++;
    if (delta > IDLE_QUIET || s->idle.work == 0 ||
        (s->idle.work < IDLE_WORK && s->idle.since < IDLE_SETTLE))
        return;
    /* Not while a command runs, abandoned ones included: a second can be
     * quiet while thousands wait for ZooKeeper, and their garbage comes
     * when they end.  Every command ends by its deadline. */
    if (s->lua && lua_host_commands_alive(s->lua) > 0)
        return;
    s->idle.work = 0;
    server_trim_memory(s);
}

static void on_connection(uv_stream_t *l, int status)
{
    struct server *s = l->data;
    if (status < 0) {
        log_warn("server.accept_error", "err=\"%s\"", uv_strerror(status));
        return;
    }
    conn_accept(s);
}

static void on_cron(uv_timer_t *t)
{
    struct server *s = t->data;
    uint64_t now = uv_now(s->loop);
    struct conn *c = s->conns;
    while (c) {
        struct conn *next = c->next;
        conn_cron(c, now);
        c = next;
    }
    unsigned long suppressed;
    if (log_limit_flush(&s->auth_log, now, &suppressed))
        log_info("client.auth_failed", "suppressed=%lu", suppressed);
    if (log_limit_flush(&s->proto_log, now, &suppressed))
        log_info("client.protocol_error", "suppressed=%lu", suppressed);
    idle_check(s);
}

static int is_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
           strcmp(addr, "localhost") == 0;
}

int server_init(struct server *s, uv_loop_t *loop, const struct config *cfg,
                struct zk *zk, struct lua_host *lua, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->cfg = cfg;
    s->zk = zk;
    s->lua = lua;
    s->auth_log.interval_ms = 1000;
    s->proto_log.interval_ms = 1000;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    s->started_ms = (double)tv.tv_sec * 1000 + tv.tv_usec / 1000.0;
    unsigned char rnd[20];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        memset(rnd, 0x5a, sizeof rnd);
    for (int i = 0; i < 20; i++)
        snprintf(s->run_id + 2 * i, 3, "%02x", rnd[i]);

    if (!is_loopback(cfg->bind) && !cfg->requirepass) {
        snprintf(err, errlen,
                 "refusing to listen on non-loopback address %s without "
                 "--requirepass",
                 cfg->bind);
        return ZR_EINVAL;
    }
    struct sockaddr_storage ss;
    const char *bind =
        strcmp(cfg->bind, "localhost") == 0 ? "127.0.0.1" : cfg->bind;
    int rc = strchr(bind, ':')
                 ? uv_ip6_addr(bind, cfg->port, (struct sockaddr_in6 *)&ss)
                 : uv_ip4_addr(bind, cfg->port, (struct sockaddr_in *)&ss);
    if (rc < 0) {
        snprintf(err, errlen, "invalid --bind address '%s'", cfg->bind);
        return ZR_EINVAL;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", cfg->bind,
                 cfg->port, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->listener, NULL);
        return ZR_EIO;
    }
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
    s->tcp_port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    if (lua)
        conn_client_ops(s);
    uv_timer_init(loop, &s->cron);
    s->cron.data = s;
    uv_timer_start(&s->cron, on_cron, 1000, 1000);
    log_info("server.listening", "bind=%s port=%d", cfg->bind, s->tcp_port);
    return 0;
}

static size_t bucket(const struct server *s, uint64_t id)
{
    return (size_t)(id * 0x9E3779B97F4A7C15ull >> 32) & (s->by_id_cap - 1);
}

static void index_grow(struct server *s)
{
    size_t cap = s->by_id_cap ? s->by_id_cap * 2 : 64;
    struct conn **t = calloc(cap, sizeof *t);
    if (!t)
        return; /* chains just get longer */
    struct conn **old = s->by_id;
    size_t oldcap = s->by_id_cap;
    s->by_id = t;
    s->by_id_cap = cap;
    for (size_t i = 0; i < oldcap; i++) {
        struct conn *c = old[i];
        while (c) {
            struct conn *next = c->id_next;
            size_t b = bucket(s, c->id);
            c->id_next = t[b];
            t[b] = c;
            c = next;
        }
    }
    free(old);
}

void server_index_add(struct server *s, struct conn *c)
{
    if (s->nconns >= s->by_id_cap)
        index_grow(s);
    if (!s->by_id_cap)
        abort();
    size_t b = bucket(s, c->id);
    c->id_next = s->by_id[b];
    s->by_id[b] = c;
}

void server_index_remove(struct server *s, struct conn *c)
{
    if (!s->by_id_cap)
        return;
    for (struct conn **p = &s->by_id[bucket(s, c->id)]; *p;
         p = &(*p)->id_next) {
        if (*p == c) {
            *p = c->id_next;
            return;
        }
    }
}

size_t server_blocked_clients(const struct server *s)
{
    size_t n = 0;
    for (const struct conn *c = s->conns; c; c = c->next)
        n += !c->closing && conn_blocked(c) != NULL;
    return n;
}

struct conn *server_conn_by_id(const struct server *s, uint64_t id)
{
    if (!s->by_id_cap)
        return NULL;
    for (struct conn *c = s->by_id[bucket(s, id)]; c; c = c->id_next)
        if (c->id == id)
            return c;
    return NULL;
}

void server_stop_accepting(struct server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    uv_close((uv_handle_t *)&s->listener, NULL);
}

void server_close(struct server *s)
{
    server_stop_accepting(s);
    struct conn *c = s->conns;
    while (c) {
        struct conn *next = c->next;
        conn_close(c, "shutdown");
        c = next;
    }
    uv_timer_stop(&s->cron);
    uv_close((uv_handle_t *)&s->cron, NULL);
}
