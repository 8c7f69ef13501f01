/*
 * conn.h — one client connection: reading, the request FIFO, writing.
 *
 * Requests are appended to a FIFO as they are parsed and dispatched at once;
 * their replies may complete in any order (ZooKeeper work finishes out of
 * order across keys), but a reply leaves only when every earlier request's
 * reply has left — twemproxy's discipline.  Reading pauses while too many
 * requests are in flight or too much output is unsent (backpressure); a client
 * whose unsent output passes the hard cap is closed.
 */
#ifndef ZKRESP_CONN_H
#define ZKRESP_CONN_H

#include "lua_host.h"
#include "reply.h"

#include <stdint.h>
#include <uv.h>

struct server;
struct proto;
struct proto_req;

/* One request in the FIFO.  Its task is handed to the Lua host; if the
 * connection closes first the task is abandoned (the host drops the reply). */
struct req {
    struct req *next;
    struct conn *c;
    struct buf reply;
    struct lua_task task;
    int done;
    int close_after;        /* close the connection once this reply has left */
    int silent;             /* CLIENT REPLY OFF / SKIP: the reply is dropped */
    int held;               /* done: its reply counted in conn.held */
    int c_pending;          /* answered later by C code, see conn_req_finish */
    int orphan;             /* the connection closed while c_pending */
    unsigned info_sections; /* INFO waiting for ZooKeeper: what to print */
    int metric_cmd;         /* metrics.h command index; -1: not counted */
    uint64_t start_ns;      /* uv_hrtime() when read, for the latency */
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t pause_timer; /* ends the wait after a failed AUTH */
    int open_handles;       /* tcp and pause_timer: freed when both closed */
    int paused;             /* waiting after a failed AUTH: nothing is read
                               or dispatched */
    struct server *srv;
    struct conn *prev, *next; /* server's list */
    struct conn *id_next;     /* server's index by id */
    uint64_t id;
    struct proto *proto;
    int resp; /* 2 or 3 */
    /* CLIENT REPLY: ON, OFF (no reply to any command until ON), SKIP (none
     * to the next command); pushes (pub/sub messages) are sent regardless,
     * as in Redis. */
    enum { REPLY_ON, REPLY_OFF, REPLY_SKIP } reply_mode;
    int db; /* SELECT: 0 .. --databases - 1 */
    int authed;
    char *name; /* CLIENT SETNAME */
    char *user; /* the AUTH user; NULL: "default" */
    /* Pub/sub subscriptions, as scripts/pubsub_local.lua keeps them: channels,
     * patterns, shard channels.  A RESP2 client with any is in subscribed
     * mode (only the subscribe family, PING, QUIT and RESET). */
    int nsub, npsub, nssub;
    /* In MULTI: set when a well-formed MULTI is dispatched outside one,
     * cleared by a well-formed EXEC or DISCARD and by RESET, all in
     * dispatch order (pipelined commands run concurrently).  Meanwhile
     * every command but QUIT and RESET goes to Lua to be queued
     * (LUA_TASK_MULTI), which keeps the queue per client id. */
    int multi;
    /* A WATCH was dispatched: Lua may keep watched keys for this client
     * (scripts/cmd_multi.lua) until the client goes or RESETs. */
    int watched;
    struct req *pushing; /* between conn_push_begin and conn_push_end */
    char *lib_name, *lib_ver;
    char addr[64], laddr[64];
    struct req *head, *tail;
    size_t inflight;     /* requests in the FIFO */
    size_t window;       /* how many may be: see conn.c, Backpressure */
    struct buf out;      /* replies ready, not yet handed to the socket */
    size_t held;         /* bytes of finished replies and pushes waiting
                            behind an unfinished reply (--max-output) */
    size_t writing;      /* bytes handed to uv_write, not yet completed */
    double out_deadline; /* the earliest lease a reply in out rests on (0:
                            none; see lua_host_reply_deadline) */
    int reading;         /* uv_read_start is active */
    int closing;
    int close_when_flushed;
    int last_request; /* a request that closes the connection was read */
    uint64_t created_ms, last_io_ms, last_cmd_ms;
    const char *last_cmd;
    uint64_t commands;
    /* A request that waits for the pipeline (the subscribe family, RESET,
     * HELLO, INFO) read while others of the connection were in flight:
     * dispatched once none is (conn.c, next_request). */
    struct proto_req *held_back;
    int in_process; /* inside process(): completions only mark work */
    int again;      /* a completion arrived during process() */
};

/* Accepts a pending connection on the listener. */
void conn_accept(struct server *s);

/* For a request answered later by C code rather than Lua: dispatch sets
 * r->c_pending and returns; once the reply is in r->reply, the completion
 * calls this.  If the connection closed meanwhile, it only frees r. */
void conn_req_finish(struct req *r);

/* Closes the connection: in-flight commands finish without a reply. */
void conn_close(struct conn *c, const char *why);

/* Records whether the client has authenticated; until it has, the request
 * reader applies Redis's tight pre-authentication limits. */
void conn_set_authed(struct conn *c, int authed);

/* The client failed AUTH or HELLO ... AUTH: logs it (at most one line a
 * second for all clients together, with the number of failures left out;
 * never the password) and pauses c for --auth-fail-delay ms, so that its
 * next request waits (the WRONGPASS reply itself leaves at once).  One
 * connection then tries at most a few passwords a second, however many it
 * pipelines. */
void conn_auth_failed(struct conn *c);

/* Called once a second: idle and stall timeouts. */
void conn_cron(struct conn *c, uint64_t now_ms);

/* c's command blocked in a blocking wait (lua_task.blocked), or NULL:
 * CLIENT LIST's flag b, INFO's blocked_clients, CLIENT UNBLOCK. */
struct req *conn_blocked(const struct conn *c);

/* Formats the CLIENT LIST / CLIENT INFO line of c. */
void conn_describe(const struct conn *c, struct buf *out);

/* Lets the Lua host describe connections and push to them. */
void conn_client_ops(struct server *s);

/* Whether c is in RESP2 subscribed mode. */
int conn_subscribed_resp2(const struct conn *c);

/* Whether Lua may keep state for c (subscriptions, a MULTI queue, watched
 * keys) that its close or RESET must end (lua_host_client_gone). */
int conn_lua_state(const struct conn *c);

/* Out-of-band frames (pub/sub messages): conn_push_begin returns the buffer
 * to encode one frame into, queued after every reply not yet sent, or NULL
 * when client `id` is gone; conn_push_end sends what is ready without
 * reading further requests (it may run inside Lua code). */
struct buf *conn_push_begin(struct server *s, uint64_t id,
                            const struct req *from, int *proto);
void conn_push_end(struct server *s, uint64_t id);

#endif
