/*
 * server.h — the listener and what every connection shares.
 */
#ifndef ZKRESP_SERVER_H
#define ZKRESP_SERVER_H

#include "log.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct config;
struct zk;
struct lua_host;
struct conn;

struct server_stats {
    uint64_t connections_received;
    uint64_t rejected_connections;
    uint64_t commands_processed;
    uint64_t protocol_errors;
    uint64_t replies_past_lease; /* written after the lease they rest on */
    uint64_t net_input_bytes;
    uint64_t net_output_bytes;
};

struct server {
    uv_loop_t *loop;
    const struct config *cfg;
    struct zk *zk;
    struct lua_host *lua;
    uv_tcp_t listener;
    uv_timer_t cron;    /* timeouts, once a second */
    struct conn *conns; /* doubly linked list of live connections */
    size_t nconns;
    struct conn **by_id; /* hash of live connections by id, chained */
    size_t by_id_cap;    /* buckets, a power of two */
    uint64_t next_client_id;
    double started_ms; /* wall clock, for uptime */
    int stopping;      /* SIGTERM received: accept nothing new */
    struct server_stats stats;
    struct {
        uint64_t seen;  /* connections + coroutines at the last cron */
        uint64_t work;  /* of those, since the last trim */
        uint64_t trims; /* server_trim_memory runs */
        uint64_t since; /* cron seconds since the last trim */
    } idle;
    struct log_limit auth_log;  /* client.auth_failed lines, for all clients */
    struct log_limit proto_log; /* client.protocol_error lines, likewise */
    char run_id[41];
    int tcp_port; /* the port actually bound */
};

/* Binds and listens.  Returns 0 or a negative error with the reason in err. */
int server_init(struct server *s, uv_loop_t *loop, const struct config *cfg,
                struct zk *zk, struct lua_host *lua, char *err, size_t errlen);

/* Stops accepting; open connections keep being served. */
void server_stop_accepting(struct server *s);

/* Closes every connection and the listener. */
void server_close(struct server *s);

/* Gives memory back now: a full Lua collection, the pool's free chunks,
 * malloc_trim(0).  The cron calls it when a quiet second follows work. */
void server_trim_memory(struct server *s);

/* The process's resident set (bytes, from /proc/self/statm); 0 if unknown. */
size_t server_rss(void);

/* The connection index by client id (for pushes to subscribers). */
void server_index_add(struct server *s, struct conn *c);
void server_index_remove(struct server *s, struct conn *c);
struct conn *server_conn_by_id(const struct server *s, uint64_t id);

/* Clients blocked in a blocking wait (conn_blocked): INFO's
 * blocked_clients, /metrics' zkresp_blocked_clients. */
size_t server_blocked_clients(const struct server *s);

#endif
