/*
 * metrics.h — what the daemon counts, and its Prometheus text rendering.
 *
 * Everything here belongs to the loop thread.  Commands are counted by name
 * and result (ok: any reply but an error; error: a top-level error reply) with
 * one latency histogram per command name.  Names are a closed set, so a
 * client cannot grow the label space: the Lua command table (registered at
 * start) and the commands implemented in C (registered as they are
 * dispatched); anything else counts as "unknown".
 *
 * The gauges (clients, ZooKeeper state, owned keys...) are read from their
 * owners at scrape time; see struct metrics_sources.
 */
#ifndef ZKRESP_METRICS_H
#define ZKRESP_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct zk;
struct lua_host;

/* What the client side (the gateway's server) reports for a scrape. */
struct metrics_clients {
    uint64_t connected; /* connections open */
    uint64_t blocked;   /* clients blocked (LOCK.ACQUIRE ... WAIT) */
    uint64_t connections_received;
    uint64_t rejected_connections;
    uint64_t protocol_errors;
    uint64_t replies_past_lease;
    uint64_t net_input_bytes;
    uint64_t net_output_bytes;
};

/* Where a scrape reads the gauges from.  Borrowed; each may be NULL.
 * clients(clients_arg, out) fills in the client gauges (left 0 without it):
 * the layer above provides it, so that this file reads nothing of it. */
struct metrics_sources {
    void (*clients)(void *clients_arg, struct metrics_clients *out);
    void *clients_arg;
    struct zk *zk;
    struct lua_host *lua;
};

void metrics_set_sources(const struct metrics_sources *src);

/* A latency histogram: METRICS_BUCKETS upper bounds from 50 us to 5 s (and
 * +Inf), as every *_duration_seconds family renders it. */
#define METRICS_BUCKETS 16
struct metrics_histo {
    uint64_t
        buckets[METRICS_BUCKETS]; /* not cumulative; summed when rendered */
    uint64_t count;
    double sum; /* seconds */
};

void metrics_histo_add(struct metrics_histo *h, double seconds);

/* Adds a command name (lowercased copy) to the known set; returns its index,
 * the existing one if already known, or the "unknown" index when full. */
int metrics_cmd_register(const char *name, size_t len);

/* The index of a known command name (case-insensitive), else "unknown". */
int metrics_cmd_find(const char *name, size_t len);

/* One command finished: its index, whether the reply was an error, and how
 * long it took from being read to its reply being ready, in nanoseconds. */
void metrics_cmd_done(int idx, int error, uint64_t ns);

/* Calls cb for each known command that ran (INFO commandstats): its name,
 * how many times, how many answered an error, and their total time in
 * microseconds. */
void metrics_cmd_each(void (*cb)(void *arg, const char *name, uint64_t calls,
                                 uint64_t failed, double usec),
                      void *arg);

/* Session events from the bridge ("connected", "new", ...): the session age
 * gauge counts from the first event naming a new session id. */
void metrics_session_event(const char *event, int64_t session_id);

/* SIGTERM arrived: /readyz answers 503 from now on. */
void metrics_set_shutting_down(void);

/* Readiness: 1 when the ZooKeeper session is connected, the policy is loaded
 * and no shutdown is under way; else 0 with the reason in `why`. */
int metrics_ready(char *why, size_t cap);

/* Appends the Prometheus text exposition (format 0.0.4) to out. */
void metrics_render(struct buf *out);

#endif
