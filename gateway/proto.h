/*
 * proto.h — turning a connection's bytes into requests.
 *
 * RESP multibulk requests are parsed by hiredis's redisReader (with our own
 * object functions, so nested arrays, integers and nils inside a request are
 * refused); inline commands ("PING\r\n" from telnet) are split here, with
 * Redis's quoting rules.  The limits are enforced before anything large is
 * buffered: a header announcing too many arguments or too long a bulk string
 * is refused as soon as its line is complete.
 *
 * After PROTO_ERROR the connection must send "-ERR <proto_errstr()>" and
 * close; the reader is not usable any more.
 */
#ifndef ZKRESP_PROTO_H
#define ZKRESP_PROTO_H

#include <stddef.h>

struct proto_limits {
    size_t max_args;   /* most arguments in one request (Redis: 1024*1024) */
    size_t max_bulk;   /* longest bulk string (Redis: proto-max-bulk-len) */
    size_t max_inline; /* longest inline line (Redis: 64 KiB) */
    size_t max_query;  /* most bytes buffered for one unfinished request */
};

struct proto_arg {
    char *ptr; /* NUL-terminated for convenience; may contain NULs */
    size_t len;
};

/* One parsed request.  Owned by whoever proto_next() gave it to; freed with
 * proto_req_free(). */
struct proto_req {
    int argc;
    struct proto_arg *argv;
    size_t bytes; /* wire size of the request, for statistics */
};

enum proto_status {
    PROTO_NEED_MORE = 0, /* no complete request buffered */
    PROTO_REQUEST = 1,   /* *req was filled in */
    PROTO_ERROR = -1,    /* protocol error; see proto_errstr() */
};

struct proto;

/* Creates a reader; the limits are copied. Returns NULL on allocation failure.
 */
struct proto *proto_create(const struct proto_limits *lim);
void proto_free(struct proto *p);

/* Until a client authenticates, Redis's tight limits apply: at most 10
 * arguments ("Protocol error: unauthenticated multibulk length") of at most
 * 16 KiB each ("... unauthenticated bulk length").  Readers start
 * authenticated. */
void proto_set_authenticated(struct proto *p, int authenticated);

/* Appends bytes received from the client.  Returns 0, or ZR_ELIMIT /
 * ZR_EPROTO (then proto_errstr() says why) when the buffered, unfinished
 * request would exceed max_query or the bytes already seen are malformed. */
int proto_feed(struct proto *p, const char *buf, size_t len);

/* Takes the next complete request, if any.  Empty inline lines are skipped,
 * as Redis does.  A request with zero arguments ("*0\r\n") is skipped too. */
enum proto_status proto_next(struct proto *p, struct proto_req *req);

/* The error text without the "ERR " prefix, e.g.
 * "Protocol error: invalid multibulk length". */
const char *proto_errstr(const struct proto *p);

/* Bytes received but not yet returned as requests (the query buffer). */
size_t proto_pending(const struct proto *p);

/* Of those, the bytes of a request not received whole yet. */
size_t proto_partial(const struct proto *p);

void proto_req_free(struct proto_req *req);

#endif
