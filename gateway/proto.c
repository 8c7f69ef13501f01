/*
 * proto.c — the request reader: a connection's bytes in, argv vectors out.
 *
 *   proto_feed(bytes)
 *        |
 *        v
 *   framing state machine  ---- header line bad, limit hit ---> sticky error
 *        |            \
 *        | RESP         \ inline line ("PING\r\n")
 *        v               v
 *   hiredis redisReader   split_inline() (Redis's sdssplitargs rules)
 *   (our object fns)      |
 *        |               /
 *        v              v
 *   FIFO of complete requests  --->  proto_next()
 *
 * The framing state machine sees every byte first.  It knows at each moment
 * whether it expects the "*N" line, a "$len" line, payload bytes or the CRLF
 * after them, and it checks each header line as soon as the line is complete,
 * with Redis's rules and error texts (networking.c, processMultibulkBuffer and
 * processInlineBuffer).  Only checked bytes are handed to hiredis, so hiredis
 * never sees a malformed or over-limit header and never buffers more than the
 * bytes actually received for the current request.  hiredis is asked for the
 * request only once the state machine has seen its last byte; the argv is
 * built directly by our redisReplyObjectFunctions, which refuse anything but
 * one flat array of bulk strings.
 *
 * Complete requests are queued; proto_next() hands them out in order.  When
 * the stream turns out to be malformed, the requests completed before the bad
 * byte are still handed out, then PROTO_ERROR for ever, so a caller that
 * drains proto_next() answers what Redis would have answered before the
 * "-ERR Protocol error".
 *
 * Where this reader is stricter than Redis (each is a client bug that would
 * desynchronise the stream):
 *   - a header line must end in "\r\n"; Redis takes '\r' plus any byte;
 *   - the two bytes after a bulk payload must be "\r\n"; Redis skips any two;
 *   - a NUL byte is an ordinary byte; Redis's strchr() stops at it, so there
 *     such a request waits for more input until a "too big" error;
 *   - an inline request may not have more than max_args arguments.
 * Every decision is made per byte, so the outcome does not depend on how the
 * input is cut into proto_feed() calls.
 */
#include "proto.h"

#include "errors.h"

#include <hiredis/read.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest "*N" or "$len" line Redis waits for (PROTO_INLINE_MAX_SIZE). */
#define HDR_LINE_MAX (64 * 1024)
/* Header bytes kept for parsing.  A valid number has at most 20 characters
 * ("-9223372036854775808"); a longer line is invalid whatever it holds. */
#define HDR_KEEP 24
/* A reader whose last request was bigger than this is replaced, so that a
 * large request's buffer does not stay allocated. */
#define READER_RECYCLE (64 * 1024)
/* The inline line buffer is kept between requests up to this size. */
#define LINE_KEEP 4096
/* The request queue is kept, once empty, up to this many slots. */
#define QUEUE_KEEP 64

enum proto_state {
    ST_START,     /* at a request boundary */
    ST_MB_COUNT,  /* in the "*N" line, after the '*' */
    ST_BULK_HDR,  /* in a "$len" line */
    ST_BULK_DATA, /* in a bulk payload */
    ST_BULK_CR,   /* expecting the '\r' after a payload */
    ST_BULK_LF,   /* expecting the '\n' after a payload */
    ST_INLINE,    /* in an inline line */
};

struct proto {
    struct proto_limits lim;
    int unauth; /* before AUTH: Redis's tight limits apply */
    redisReader *reader;
    enum proto_state state;

    /* The header line being read: its length so far (counting the leading
     * '*' or '$'), its first HDR_KEEP bytes, and whether '\r' was seen. */
    size_t hdr_len;
    char hdr[HDR_KEEP];
    int hdr_cr;

    long long args_left; /* bulk strings still to come in this request */
    long long bulk_left; /* payload bytes still to come in this bulk */
    size_t req_bytes;    /* wire bytes of the unfinished request so far */

    /* The inline line being read, without its '\n'; at most max_inline+1. */
    char *line;
    size_t line_len;
    size_t line_cap;

    /* Complete requests not yet taken: q[q_head .. q_head+q_len). */
    struct proto_req *q;
    size_t q_head;
    size_t q_len;
    size_t q_cap;
    size_t q_bytes; /* sum of their wire sizes */

    /* Before AUTH, the bytes after a complete request wait here unparsed
     * until it is taken and run: it may be the AUTH that lifts the limits
     * for the rest, as Redis reads one request at a time. */
    char *held;
    size_t held_len;
    size_t held_cap;

    int err; /* 0, or the sticky ZR_* code */
    char errstr[128];
    int refused; /* an object function refused what hiredis parsed */
};

/* ---- errors ---------------------------------------------------------- */

/* Makes the reader unusable: records code and text, drops the unfinished
 * request.  Requests already queued stay and are still handed out.  Returns
 * code. */
static int set_error(struct proto *p, int code, const char *msg)
{
    if (p->err)
        return p->err;
    p->err = code;
    snprintf(p->errstr, sizeof p->errstr, "%s", msg);
    /* The text goes on one reply line: CR and LF become spaces, as Redis's
     * addReplyErrorFormat() does. */
    for (char *c = p->errstr; *c; c++)
        if (*c == '\r' || *c == '\n')
            *c = ' ';
    if (p->reader) {
        redisReaderFree(p->reader);
        p->reader = NULL;
    }
    free(p->line);
    p->line = NULL;
    p->line_len = p->line_cap = 0;
    p->req_bytes = 0;
    return code;
}

/* "expected '$', got 'X'" with the raw byte, as Redis formats it with %c.  A
 * NUL byte ends the text right there, which is what a client of Redis sees
 * too (its reply is built with a C-string concatenation). */
static int set_error_dollar(struct proto *p, char got)
{
    char msg[64];
    snprintf(msg, sizeof msg, "Protocol error: expected '$', got '%c'", got);
    return set_error(p, ZR_EPROTO, msg);
}

/* ---- numbers --------------------------------------------------------- */

/* Parses s[0..n) as a long long with Redis's string2ll rules: an optional
 * '-', no '+', no spaces, no leading zeros ("0" alone is fine, "-0" is not),
 * no overflow.  Returns 1 and sets *out, or returns 0. */
static int parse_ll(const char *s, size_t n, long long *out)
{
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;

    if (n == 0 || n > 20)
        return 0;
    if (n == 1 && s[0] == '0') {
        *out = 0;
        return 1;
    }
    if (s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || s[i] < '1' || s[i] > '9')
        return 0;
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9)
            return 0;
        if (v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return 0;
        *out =
            v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > LLONG_MAX)
            return 0;
        *out = (long long)v;
    }
    return 1;
}

/* ---- hiredis object functions ------------------------------------------
 *
 * A request is one array of bulk strings.  The root array is a struct mb;
 * each string is stored in its slot of the array's argv and the object
 * returned for it is the array itself (hiredis only ever frees the root, so
 * freeObject always receives a struct mb).  Anything else — a nested array,
 * an integer, a nil, a status or error line, a string outside an array — is
 * refused: the function flags the reader and returns NULL, which stops
 * hiredis.  The framing state machine lets none of those through, so a
 * refusal means the two parsers disagree. */

struct mb {
    int argc;
    struct proto_arg *argv;
};

static void mb_free(struct mb *m)
{
    for (int i = 0; i < m->argc; i++)
        free(m->argv[i].ptr);
    free(m->argv);
    free(m);
}

/* Copies s[0..n) into a new NUL-terminated argument. */
static int arg_copy(struct proto_arg *a, const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d == NULL)
        return ZR_ENOMEM;
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    a->ptr = d;
    a->len = n;
    return 0;
}

static void *refuse(const redisReadTask *task)
{
    struct proto *p = task->privdata;
    p->refused = 1;
    return NULL;
}

static void *obj_string(const redisReadTask *task, char *str, size_t len)
{
    if (task->type != REDIS_REPLY_STRING || task->parent == NULL)
        return refuse(task);
    struct mb *m = task->parent->obj;
    if (m == NULL || task->idx < 0 || task->idx >= m->argc)
        return refuse(task);
    if (arg_copy(&m->argv[task->idx], str, len) < 0)
        return NULL;
    return m;
}

static void *obj_array(const redisReadTask *task, int elements)
{
    if (task->parent != NULL || elements <= 0)
        return refuse(task);
    struct mb *m = malloc(sizeof *m);
    if (m == NULL)
        return NULL;
    m->argv = calloc((size_t)elements, sizeof *m->argv);
    if (m->argv == NULL) {
        free(m);
        return NULL;
    }
    m->argc = elements;
    return m;
}

static void *obj_integer(const redisReadTask *task, long long v)
{
    (void)v;
    return refuse(task);
}

static void *obj_nil(const redisReadTask *task)
{
    return refuse(task);
}

static void obj_free(void *obj)
{
    mb_free(obj);
}

static redisReplyObjectFunctions obj_fns = {
    .createString = obj_string,
    .createArray = obj_array,
    .createInteger = obj_integer,
    .createNil = obj_nil,
    .freeObject = obj_free,
};

static redisReader *reader_new(struct proto *p)
{
    redisReader *r = redisReaderCreateWithFunctions(&obj_fns);
    if (r)
        r->privdata = p;
    return r;
}

/* ---- the queue of complete requests ------------------------------------ */

/* Appends req (taking ownership of its argv) to the queue.  Returns 0 or
 * ZR_ENOMEM (then req is freed). */
static int queue_push(struct proto *p, struct proto_req *req)
{
    if (p->q_head + p->q_len == p->q_cap) {
        if (p->q_head > 0) {
            memmove(p->q, p->q + p->q_head, p->q_len * sizeof *p->q);
            p->q_head = 0;
        } else {
            size_t cap = p->q_cap ? p->q_cap * 2 : 8;
            struct proto_req *q = realloc(p->q, cap * sizeof *q);
            if (q == NULL) {
                proto_req_free(req);
                return ZR_ENOMEM;
            }
            p->q = q;
            p->q_cap = cap;
        }
    }
    p->q[p->q_head + p->q_len++] = *req;
    p->q_bytes += req->bytes;
    return 0;
}

/* ---- hand-off to hiredis ------------------------------------------------ */

static int hiredis_feed(struct proto *p, const char *b, size_t n)
{
    if (redisReaderFeed(p->reader, b, n) != REDIS_OK)
        return set_error(p, ZR_ENOMEM, "out of memory reading the request");
    return 0;
}

/* Feeds the checked header line held in hdr, with its CRLF. */
static int hiredis_feed_hdr(struct proto *p)
{
    char line[HDR_KEEP + 2];
    memcpy(line, p->hdr, p->hdr_len);
    memcpy(line + p->hdr_len, "\r\n", 2);
    return hiredis_feed(p, line, p->hdr_len + 2);
}

/* The state machine has seen the last byte of a multibulk request, and
 * hiredis has been fed all of it: takes the request and queues it. */
static int mb_complete(struct proto *p)
{
    void *obj = NULL;
    if (redisReaderGetReply(p->reader, &obj) != REDIS_OK || obj == NULL) {
        if (p->refused || p->reader->err != REDIS_ERR_OOM)
            return set_error(p, ZR_EPROTO,
                             "Protocol error: request not understood");
        return set_error(p, ZR_ENOMEM, "out of memory reading the request");
    }
    struct mb *m = obj;
    struct proto_req req = {
        .argc = m->argc, .argv = m->argv, .bytes = p->req_bytes};
    free(m);
    if (p->req_bytes > READER_RECYCLE) {
        redisReader *r = reader_new(p);
        if (r == NULL) {
            proto_req_free(&req);
            return set_error(p, ZR_ENOMEM, "out of memory reading the request");
        }
        redisReaderFree(p->reader);
        p->reader = r;
    }
    p->req_bytes = 0;
    p->state = ST_START;
    if (queue_push(p, &req) != 0)
        return set_error(p, ZR_ENOMEM, "out of memory reading the request");
    return 0;
}

/* Before authentication, Redis accepts only small requests. */
#define UNAUTH_MAX_ARGS 10
#define UNAUTH_MAX_BULK 16384

/* ---- header lines ------------------------------------------------------- */

/* The "*N" line is complete: hdr holds "*N" (at least the '*'); lf_ok says
 * whether its '\r' was followed by '\n'.  Checks it and moves on. */
static int mb_count_done(struct proto *p, int lf_ok)
{
    long long n;
    size_t max = p->lim.max_args < INT_MAX ? p->lim.max_args : INT_MAX;
    if (p->unauth && lf_ok && p->hdr_len <= HDR_KEEP &&
        parse_ll(p->hdr + 1, p->hdr_len - 1, &n) && n > UNAUTH_MAX_ARGS)
        return set_error(p, ZR_EPROTO,
                         "Protocol error: unauthenticated multibulk length");
    if (!lf_ok || p->hdr_len > HDR_KEEP ||
        !parse_ll(p->hdr + 1, p->hdr_len - 1, &n) ||
        (n > 0 && (unsigned long long)n > max))
        return set_error(p, ZR_EPROTO,
                         "Protocol error: invalid multibulk length");
    if (n <= 0) {
        /* "*0" and "*-1": nothing to run, skipped as Redis does. */
        p->req_bytes = 0;
        p->state = ST_START;
        return 0;
    }
    int rc = hiredis_feed_hdr(p);
    if (rc)
        return rc;
    p->args_left = n;
    p->state = ST_BULK_HDR;
    p->hdr_len = 0;
    return 0;
}

/* A "$len" line is complete (hdr_len is 0 when the line's first byte was the
 * '\r' itself).  Checks it as Redis does — first byte, then number — and
 * moves on. */
static int bulk_hdr_done(struct proto *p, int lf_ok)
{
    char first = p->hdr_len ? p->hdr[0] : '\r';
    long long n;
    if (first != '$')
        return set_error_dollar(p, first);
    if (!lf_ok || p->hdr_len > HDR_KEEP ||
        !parse_ll(p->hdr + 1, p->hdr_len - 1, &n) || n < 0 ||
        (unsigned long long)n > p->lim.max_bulk)
        return set_error(p, ZR_EPROTO, "Protocol error: invalid bulk length");
    if (p->unauth && n > UNAUTH_MAX_BULK)
        return set_error(p, ZR_EPROTO,
                         "Protocol error: unauthenticated bulk length");
    int rc = hiredis_feed_hdr(p);
    if (rc)
        return rc;
    p->bulk_left = n;
    p->state = n ? ST_BULK_DATA : ST_BULK_CR;
    return 0;
}

/* Consumes bytes of a header line from b[0..n).  Returns how many bytes were
 * used (the line's end stops it), or a negative error. */
static long header_bytes(struct proto *p, const char *b, size_t n)
{
    int is_count = p->state == ST_MB_COUNT;
    if (p->hdr_cr) {
        /* The byte after '\r' ends the line, whatever it is. */
        p->hdr_cr = 0;
        p->req_bytes++;
        int lf_ok = b[0] == '\n';
        int rc = is_count ? mb_count_done(p, lf_ok) : bulk_hdr_done(p, lf_ok);
        return rc ? rc : 1;
    }
    const char *cr = memchr(b, '\r', n);
    size_t take = cr ? (size_t)(cr - b) : n;
    if (p->hdr_len + take > HDR_LINE_MAX) {
        /* Redis counts from the line's first byte ('*' or '$') and gives up
         * when that many bytes came without a '\r'. */
        return set_error(p, ZR_EPROTO,
                         is_count
                             ? "Protocol error: too big mbulk count string"
                             : "Protocol error: too big bulk count string");
    }
    if (p->hdr_len < HDR_KEEP) {
        size_t k = HDR_KEEP - p->hdr_len;
        memcpy(p->hdr + p->hdr_len, b, take < k ? take : k);
    }
    p->hdr_len += take;
    p->req_bytes += take;
    if (cr == NULL)
        return (long)take;
    p->hdr_cr = 1;
    p->req_bytes++;
    return (long)take + 1;
}

/* ---- inline requests ----------------------------------------------------- */

/* isspace() in the C locale, without its sign and locale pitfalls. */
static int is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
           c == '\r';
}

static int hex_val(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Appends a copy of s[0..n) to req's argv (cap is its allocated size).
 * Returns 0 or ZR_ENOMEM. */
static int argv_push(struct proto_req *req, size_t *cap, const char *s,
                     size_t n)
{
    if ((size_t)req->argc == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        struct proto_arg *a = realloc(req->argv, c * sizeof *a);
        if (a == NULL)
            return ZR_ENOMEM;
        req->argv = a;
        *cap = c;
    }
    if (arg_copy(&req->argv[req->argc], s, n) < 0)
        return ZR_ENOMEM;
    req->argc++;
    return 0;
}

/* Splits line[0..n) into arguments with the rules of Redis's sdssplitargs():
 * blanks (isspace) separate arguments; an unquoted argument ends at ' ',
 * '\t', '\r', '\n' (not at '\v' or '\f'); "..." understands \n \r \t \b \a,
 * \xHH and \<other> (that byte); '...' understands only \'; a closing quote
 * must be followed by a blank or the end of the line; a quote may open in the
 * middle of an argument (a"b c" is "ab c").  Unlike sdssplitargs, a NUL byte
 * is an ordinary byte.  Fills req->argc/argv and returns 0, or returns
 * ZR_EPROTO for unbalanced quotes or ZR_ENOMEM, then req holds nothing. */
static int split_inline(const char *line, size_t n, struct proto_req *req)
{
    size_t cap = 0, i = 0;
    int rc = 0;
    char *tok = malloc(n ? n : 1); /* an argument never outgrows its source */
    req->argc = 0;
    req->argv = NULL;
    if (tok == NULL)
        return ZR_ENOMEM;

    for (;;) {
        while (i < n && is_space((unsigned char)line[i]))
            i++;
        if (i == n)
            break;
        size_t len = 0;
        int quote = 0, done = 0; /* quote: 0, or the open '"' or '\'' */
        while (!done) {
            /* c is the current byte, or -1 at the end of the line. */
            int c = i < n ? (unsigned char)line[i] : -1;
            int c1 = i + 1 < n ? (unsigned char)line[i + 1] : -1;
            if (quote == '"' && c == '\\' && c1 == 'x' && i + 3 < n &&
                hex_val((unsigned char)line[i + 2]) >= 0 &&
                hex_val((unsigned char)line[i + 3]) >= 0) {
                tok[len++] = (char)(16 * hex_val((unsigned char)line[i + 2]) +
                                    hex_val((unsigned char)line[i + 3]));
                i += 3;
            } else if (quote == '"' && c == '\\' && c1 != -1) {
                char e = (char)c1;
                i++;
                switch (c1) {
                case 'n':
                    e = '\n';
                    break;
                case 'r':
                    e = '\r';
                    break;
                case 't':
                    e = '\t';
                    break;
                case 'b':
                    e = '\b';
                    break;
                case 'a':
                    e = '\a';
                    break;
                default:
                    break;
                }
                tok[len++] = e;
            } else if (quote == '\'' && c == '\\' && c1 == '\'') {
                i++;
                tok[len++] = '\'';
            } else if (quote && c == quote) {
                if (c1 != -1 && !is_space(c1))
                    goto unbalanced;
                done = 1;
            } else if (quote && c == -1) {
                goto unbalanced;
            } else if (quote) {
                tok[len++] = (char)c;
            } else {
                switch (c) {
                case ' ':
                case '\n':
                case '\r':
                case '\t':
                case -1:
                    done = 1;
                    break;
                case '"':
                case '\'':
                    quote = c;
                    break;
                default:
                    tok[len++] = (char)c;
                    break;
                }
            }
            if (i < n)
                i++;
        }
        rc = argv_push(req, &cap, tok, len);
        if (rc)
            goto fail;
    }
    free(tok);
    return 0;

unbalanced:
    rc = ZR_EPROTO;
fail:
    free(tok);
    proto_req_free(req);
    return rc;
}

/* The inline line is complete: line holds it without its '\n'. */
static int inline_done(struct proto *p)
{
    size_t n = p->line_len;
    if (n > 0 && p->line[n - 1] == '\r')
        n--;
    struct proto_req req;
    int rc = split_inline(p->line ? p->line : "", n, &req);
    p->line_len = 0;
    p->state = ST_START;
    if (p->line_cap > LINE_KEEP) {
        /* Do not keep a long line's buffer for the next, short, one. */
        free(p->line);
        p->line = NULL;
        p->line_cap = 0;
    }
    if (rc == ZR_EPROTO)
        return set_error(p, ZR_EPROTO,
                         "Protocol error: unbalanced quotes in request");
    if (rc)
        return set_error(p, ZR_ENOMEM, "out of memory reading the request");
    req.bytes = p->req_bytes;
    p->req_bytes = 0;
    if (req.argc == 0) {
        proto_req_free(&req);
        return 0; /* an empty line: skipped, as Redis does */
    }
    if ((size_t)req.argc > p->lim.max_args) {
        proto_req_free(&req);
        return set_error(p, ZR_EPROTO,
                         "Protocol error: too many arguments in inline "
                         "request");
    }
    if (queue_push(p, &req) != 0)
        return set_error(p, ZR_ENOMEM, "out of memory reading the request");
    return 0;
}

/* Appends b[0..n) to the growing buffer *buf (*len used of *cap).  Returns
 * 0, or ZR_ENOMEM (the reader's error is set). */
static int append(struct proto *p, char **buf, size_t *len, size_t *cap,
                  const char *b, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n)
            c *= 2;
        char *nb = realloc(*buf, c);
        if (nb == NULL)
            return set_error(p, ZR_ENOMEM, "out of memory reading the request");
        *buf = nb;
        *cap = c;
    }
    if (n)
        memcpy(*buf + *len, b, n);
    *len += n;
    return 0;
}

/* Consumes inline bytes from b[0..n).  Returns how many were used (the '\n'
 * stops it), or a negative error. */
static long inline_bytes(struct proto *p, const char *b, size_t n)
{
    const char *nl = memchr(b, '\n', n);
    size_t take = nl ? (size_t)(nl - b) : n;
    if (p->line_len + take > p->lim.max_inline)
        return set_error(p, ZR_EPROTO,
                         "Protocol error: too big inline request");
    if (append(p, &p->line, &p->line_len, &p->line_cap, b, take) != 0)
        return ZR_ENOMEM;
    p->req_bytes += take;
    if (nl == NULL)
        return (long)take;
    p->req_bytes++;
    int rc = inline_done(p);
    return rc ? rc : (long)take + 1;
}

/* ---- the state machine ------------------------------------------------- */

/* Consumes bytes from b[0..n), n > 0, in the current state.  Returns how
 * many were used (at least one), or a negative error.  Every handler adds
 * what it uses to req_bytes before it may complete a request. */
static long step(struct proto *p, const char *b, size_t n)
{
    int rc;
    switch (p->state) {
    case ST_START:
        if (b[0] == '*') {
            p->state = ST_MB_COUNT;
            p->hdr[0] = '*';
            p->hdr_len = 1;
            p->hdr_cr = 0;
            p->req_bytes = 1;
            return 1;
        }
        p->state = ST_INLINE;
        p->line_len = 0;
        return inline_bytes(p, b, n);
    case ST_MB_COUNT:
    case ST_BULK_HDR:
        return header_bytes(p, b, n);
    case ST_BULK_DATA: {
        size_t take = n;
        if ((unsigned long long)p->bulk_left < take)
            take = (size_t)p->bulk_left;
        rc = hiredis_feed(p, b, take);
        if (rc)
            return rc;
        p->req_bytes += take;
        p->bulk_left -= (long long)take;
        if (p->bulk_left == 0)
            p->state = ST_BULK_CR;
        return (long)take;
    }
    case ST_BULK_CR:
        if (b[0] != '\r')
            break;
        p->req_bytes++;
        p->state = ST_BULK_LF;
        return 1;
    case ST_BULK_LF:
        if (b[0] != '\n')
            break;
        p->req_bytes++;
        rc = hiredis_feed(p, "\r\n", 2);
        if (rc)
            return rc;
        if (--p->args_left == 0) {
            rc = mb_complete(p);
            return rc ? rc : 1;
        }
        p->state = ST_BULK_HDR;
        p->hdr_len = 0;
        p->hdr_cr = 0;
        return 1;
    case ST_INLINE:
        return inline_bytes(p, b, n);
    }
    return set_error(p, ZR_EPROTO,
                     "Protocol error: bulk data not followed by CRLF");
}

/* ---- public ------------------------------------------------------------- */

void proto_set_authenticated(struct proto *p, int authenticated)
{
    p->unauth = !authenticated;
}

struct proto *proto_create(const struct proto_limits *lim)
{
    struct proto *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->lim = *lim;
    p->state = ST_START;
    p->reader = reader_new(p);
    if (p->reader == NULL) {
        free(p);
        return NULL;
    }
    return p;
}

void proto_free(struct proto *p)
{
    if (p == NULL)
        return;
    if (p->reader)
        redisReaderFree(p->reader);
    for (size_t i = 0; i < p->q_len; i++)
        proto_req_free(&p->q[p->q_head + i]);
    free(p->q);
    free(p->line);
    free(p->held);
    free(p);
}

/* Runs the state machine over buf[0..len), all of it but before AUTH: then
 * it stops after a complete request.  *used: the bytes it took. */
static int run(struct proto *p, const char *buf, size_t len, size_t *used)
{
    size_t i = 0;
    *used = 0;
    while (i < len && !(p->unauth && p->q_len > 0)) {
        /* No request may grow past max_query bytes: offer the state machine
         * only as many bytes as the current request may still take, and
         * refuse the first byte past the limit. */
        if (p->req_bytes >= p->lim.max_query)
            return set_error(p, ZR_ELIMIT,
                             "Protocol error: query buffer limit exceeded");
        size_t n = len - i;
        if (n > p->lim.max_query - p->req_bytes)
            n = p->lim.max_query - p->req_bytes;
        long took = step(p, buf + i, n);
        if (took < 0)
            return (int)took;
        i += (size_t)took;
        *used = i;
    }
    return 0;
}

/* Keeps buf[0..len) for after the queued request (see held). */
static int hold(struct proto *p, const char *buf, size_t len)
{
    if (p->held_len + len > p->lim.max_query)
        return set_error(p, ZR_ELIMIT,
                         "Protocol error: query buffer limit exceeded");
    return append(p, &p->held, &p->held_len, &p->held_cap, buf, len);
}

/* The queue is empty: parses what was held, under the limits of now. */
static void resume(struct proto *p)
{
    size_t used;
    if (run(p, p->held, p->held_len, &used) != 0) {
        p->held_len = 0;
        return;
    }
    memmove(p->held, p->held + used, p->held_len - used);
    p->held_len -= used;
    if (p->held_len == 0 && p->held_cap > LINE_KEEP) {
        free(p->held);
        p->held = NULL;
        p->held_cap = 0;
    }
}

/* The whole input is examined at once (but before AUTH, see held), so an
 * error is reported by the proto_feed() call that brings the offending
 * byte; requests completed before that byte stay queued. */
int proto_feed(struct proto *p, const char *buf, size_t len)
{
    size_t used = 0;
    if (p->err)
        return p->err;
    int rc = p->held_len ? 0 : run(p, buf, len, &used);
    if (rc == 0 && used < len)
        rc = hold(p, buf + used, len - used);
    return rc;
}

enum proto_status proto_next(struct proto *p, struct proto_req *req)
{
    if (p->q_len == 0 && p->held_len && !p->err)
        resume(p);
    if (p->q_len == 0) {
        p->q_head = 0;
        if (p->q_cap > QUEUE_KEEP) {
            /* A burst of pipelined requests is over: give back its queue. */
            free(p->q);
            p->q = NULL;
            p->q_cap = 0;
        }
        return p->err ? PROTO_ERROR : PROTO_NEED_MORE;
    }
    *req = p->q[p->q_head++];
    p->q_len--;
    p->q_bytes -= req->bytes;
    return PROTO_REQUEST;
}

const char *proto_errstr(const struct proto *p)
{
    return p->err ? p->errstr : "";
}

size_t proto_pending(const struct proto *p)
{
    return p->q_bytes + p->req_bytes + p->held_len;
}

size_t proto_partial(const struct proto *p)
{
    return p->req_bytes;
}

void proto_req_free(struct proto_req *req)
{
    for (int i = 0; i < req->argc; i++)
        free(req->argv[i].ptr);
    free(req->argv);
    req->argc = 0;
    req->argv = NULL;
    req->bytes = 0;
}
