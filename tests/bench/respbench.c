/*
 * respbench: a RESP load generator for lock pairs and reads, usable against
 * zkresp and redis-server.
 *
 * One thread, one epoll loop, C non-blocking connections, each with exactly
 * one request outstanding (no pipelining), so C is the number of concurrent
 * clients:
 *
 *   mode pair      SET <prefix><i> <tok> NX PX 30000  -> +OK  (--px; 0: no PX)
 *                  DELIFEQ <prefix><i> <tok>           -> :1
 *   mode pair-del  the same with a plain DEL (for redis-server, which has no
 *                  DELIFEQ)
 *   mode get       GET <prefix>held                    -> the held token;
 *                  the key is set (NX PX 60000) before the run and deleted
 *                  after it
 *
 * Script modes (each script SCRIPT LOADed once before the run, then sent as
 * EVALSHA, as redis-py and Redisson do):
 *
 *   mode script-pair    redis-py's Lock: SET <prefix><i> <tok> NX PX 30000
 *                       -> +OK, then its release script (GET, compare, DEL)
 *                       -> :1
 *   mode redisson-pair  Redisson's RLock: the hash lock acquire script
 *                       (EXISTS/HEXISTS, HINCRBY, PEXPIRE) -> null, then the
 *                       unlock script (HEXISTS, HINCRBY -1, DEL, PUBLISH)
 *                       -> :1
 *   mode redisson-renew the acquire script (reentrant: the hold count grows)
 *                       -> null, then the watchdog's renewal script (HEXISTS,
 *                       PEXPIRE) -> :1; the keys are deleted after the run
 *   mode counter        every connection runs one read-modify-write script
 *                       (GET, +1, SET) on the same key <prefix>counter ->
 *                       an integer: scripts contending for one key
 *
 * An operation is a pair (both replies as expected) or a GET; its latency is
 * from writing the first request to reading the last reply.  A warm-up period
 * is run and discarded; operations completed during the measured period are
 * counted.  A pair with an unexpected reply counts as an error, not as an
 * operation.  One result line goes to stdout:
 *
 *   respbench mode=pair conc=64 secs=5.00 ops=... errors=0 ops_per_sec=...
 *             p50_us=... p99_us=... mean_us=... max_us=... self_cpu_pct=...
 *             [NAME_cpu_us_per_op=... NAME_cpu_pct=... NAME_rss_kb=...]
 *
 * self_cpu_pct is this generator's own CPU use over the measured period; far
 * below 100 means it was not the bottleneck.
 *
 * Exit status: 0 when the run completed (errors are reported, not fatal),
 * 1 when it could not run (connect failed, connection lost, no reply),
 * 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };
enum {
    MODE_PAIR,
    MODE_PAIR_DEL,
    MODE_GET,
    MODE_SCRIPT_PAIR,
    MODE_REDISSON_PAIR,
    MODE_REDISSON_RENEW,
    MODE_COUNTER
};

/* redis-py's Lock release script. */
static const char script_release[] =
    "local token = redis.call('get', KEYS[1]) "
    "if not token or token ~= ARGV[1] then return 0 end "
    "redis.call('del', KEYS[1]) return 1";
/* Redisson's hash lock, in its shape: ARGV lease ms, "<uuid>:<thread>". */
static const char script_acquire[] =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
    "return redis.call('pttl', KEYS[1]);";
/* KEYS lock, channel; ARGV message, lease, holder. */
static const char script_unlock[] =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; end; "
    "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); "
    "return 1;";
/* ARGV lease, holder. */
static const char script_renew[] =
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";
static const char script_counter[] =
    "local v = tonumber(redis.call('get', KEYS[1]) or '0') "
    "redis.call('set', KEYS[1], v + 1) return v + 1";

/* The SHA1s SCRIPT LOAD answered. */
static char sha_release[41], sha_acquire[41], sha_unlock[41], sha_renew[41],
    sha_counter[41];
enum { ST_IDLE, ST_SET, ST_HOLD, ST_DEL, ST_GET };

struct conn {
    int fd;
    int idx;
    int state;
    int bad;      /* the current pair had an unexpected reply */
    int want_out; /* EPOLLOUT is registered */
    redisReader *rd;
    uint64_t start_ns;
    uint64_t held_ns; /* time spent holding the lock, excluded from latency */
    uint64_t wake_ns; /* ST_HOLD: when to release */
    uint64_t seq;
    char key[128];
    char chan[160];
    char tok[64];
    char out[1024];
    size_t out_len;
    size_t out_off;
};

static int mode = MODE_PAIR;
static const char *client_name; /* --client-name */
static int phase = PHASE_WARMUP;
static int epfd = -1;
static const char *prefix = "bench:";
static const char *px = "30000";
static uint64_t hold_ns;
static char held_key[128];
static char held_tok[64];
static uint64_t ops, errors, bad_replies_shown;
static struct bench_samples samples;

static void die(const char *what)
{
    fprintf(stderr, "respbench: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Appends a RESP multi-bulk request of argc C strings to the connection's
 * output buffer.  The buffer is sized for the few short commands used here. */
static void conn_queue(struct conn *c, int argc, const char **argv)
{
    char *p = c->out + c->out_len;
    size_t room = sizeof(c->out) - c->out_len;
    int n = snprintf(p, room, "*%d\r\n", argc);
    for (int i = 0; i < argc && n >= 0 && (size_t)n < room; i++)
        n += snprintf(p + n, room - (size_t)n, "$%zu\r\n%s\r\n",
                      strlen(argv[i]), argv[i]);
    if (n < 0 || (size_t)n >= room) {
        fprintf(stderr, "respbench: request too long\n");
        exit(1);
    }
    c->out_len += (size_t)n;
}

static void conn_set_out(struct conn *c, int on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0),
                             .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        die("epoll_ctl");
    c->want_out = on;
}

/* Writes what the output buffer holds; waits for EPOLLOUT on a short write. */
static void conn_flush(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_set_out(c, 1);
                return;
            }
            die("write");
        }
        c->out_off += (size_t)n;
    }
    c->out_len = c->out_off = 0;
    conn_set_out(c, 0);
}

static void conn_send(struct conn *c, int argc, const char **argv)
{
    conn_queue(c, argc, argv);
    conn_flush(c);
}

/* Starts the next operation, or leaves the connection idle once the run is
 * over. */
static void conn_start(struct conn *c)
{
    if (phase == PHASE_STOP) {
        c->state = ST_IDLE;
        return;
    }
    c->start_ns = bench_now_ns();
    c->held_ns = 0;
    c->bad = 0;
    if (mode == MODE_GET) {
        const char *argv[] = {"GET", held_key};
        c->state = ST_GET;
        conn_send(c, 2, argv);
        return;
    }
    if (mode == MODE_COUNTER) {
        const char *argv[] = {"EVALSHA", sha_counter, "1", held_key};
        c->state = ST_GET;
        conn_send(c, 4, argv);
        return;
    }
    if (mode == MODE_REDISSON_PAIR || mode == MODE_REDISSON_RENEW) {
        const char *argv[] = {"EVALSHA", sha_acquire, "1", c->key, px, c->tok};
        c->state = ST_SET;
        conn_send(c, 6, argv);
        return;
    }
    c->seq++;
    snprintf(c->tok, sizeof(c->tok), "tok-%d-%d-%llu", (int)getpid(), c->idx,
             (unsigned long long)c->seq);
    const char *argv[] = {"SET", c->key, c->tok, "NX", "PX", px};
    c->state = ST_SET;
    /* --px 0: no TTL (redis-py's Lock without a timeout) */
    conn_send(c, strcmp(px, "0") == 0 ? 4 : 6, argv);
}

static void show_bad(const struct conn *c, const char *cmd, const redisReply *r)
{
    if (bad_replies_shown++ >= 5)
        return;
    char what[128];
    switch (r->type) {
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
    case REDIS_REPLY_STRING:
        snprintf(what, sizeof(what), "type %d \"%.*s\"", r->type,
                 (int)(r->len < 80 ? r->len : 80), r->str);
        break;
    case REDIS_REPLY_INTEGER:
        snprintf(what, sizeof(what), "integer %lld", r->integer);
        break;
    default:
        snprintf(what, sizeof(what), "type %d", r->type);
    }
    fprintf(stderr, "respbench: conn %d: unexpected reply to %s: %s\n", c->idx,
            cmd, what);
}

static void op_done(struct conn *c)
{
    if (c->bad)
        errors++;
    else if (phase == PHASE_MEASURE) {
        ops++;
        bench_samples_add(&samples, bench_now_ns() - c->start_ns - c->held_ns);
    }
    conn_start(c);
}

/* Sends the release of the pair.  It is sent even after a failed SET or
 * once the run is over, so that no key is left behind. */
static void conn_release(struct conn *c)
{
    c->state = ST_DEL;
    if (mode == MODE_SCRIPT_PAIR) {
        const char *argv[] = {"EVALSHA", sha_release, "1", c->key, c->tok};
        conn_send(c, 5, argv);
    } else if (mode == MODE_REDISSON_PAIR) {
        const char *argv[] = {"EVALSHA", sha_unlock, "2", c->key,
                              c->chan,   "0",        px,  c->tok};
        conn_send(c, 8, argv);
    } else if (mode == MODE_REDISSON_RENEW) {
        const char *argv[] = {"EVALSHA", sha_renew, "1", c->key, px, c->tok};
        conn_send(c, 6, argv);
    } else {
        const char *argv[] = {mode == MODE_PAIR ? "DELIFEQ" : "DEL", c->key,
                              c->tok};
        conn_send(c, mode == MODE_PAIR ? 3 : 2, argv);
    }
}

static const char *first_cmd(void)
{
    return mode == MODE_REDISSON_PAIR || mode == MODE_REDISSON_RENEW
               ? "acquire script"
               : "SET";
}

static const char *second_cmd(void)
{
    switch (mode) {
    case MODE_PAIR:
        return "DELIFEQ";
    case MODE_SCRIPT_PAIR:
        return "release script";
    case MODE_REDISSON_PAIR:
        return "unlock script";
    case MODE_REDISSON_RENEW:
        return "renewal script";
    default:
        return "DEL";
    }
}

/* Releases the locks whose hold time is over; returns the earliest pending
 * release time, or UINT64_MAX when no connection holds a lock. */
static uint64_t release_due(struct conn *conns, int n, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < n; i++) {
        struct conn *c = &conns[i];
        if (c->state != ST_HOLD)
            continue;
        if (c->wake_ns <= now) {
            c->held_ns = now - (c->wake_ns - hold_ns);
            conn_release(c);
        } else if (c->wake_ns < next) {
            next = c->wake_ns;
        }
    }
    return next;
}

static void on_reply(struct conn *c, redisReply *r)
{
    switch (c->state) {
    case ST_SET: {
        int ok =
            mode == MODE_REDISSON_PAIR || mode == MODE_REDISSON_RENEW
                ? r->type == REDIS_REPLY_NIL
                : r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
        if (!ok) {
            show_bad(c, first_cmd(), r);
            c->bad = 1;
        }
        if (hold_ns > 0) {
            c->state = ST_HOLD;
            c->wake_ns = bench_now_ns() + hold_ns;
            break;
        }
        conn_release(c);
        break;
    }
    case ST_DEL:
        if (!(r->type == REDIS_REPLY_INTEGER && r->integer == 1)) {
            show_bad(c, second_cmd(), r);
            c->bad = 1;
        }
        op_done(c);
        break;
    case ST_GET:
        if (mode == MODE_COUNTER ? r->type != REDIS_REPLY_INTEGER
                                 : !(r->type == REDIS_REPLY_STRING &&
                                     r->len == strlen(held_tok) &&
                                     memcmp(r->str, held_tok, r->len) == 0)) {
            show_bad(c, mode == MODE_COUNTER ? "counter script" : "GET", r);
            c->bad = 1;
        }
        op_done(c);
        break;
    default:
        fprintf(stderr, "respbench: conn %d: reply while idle\n", c->idx);
        exit(1);
    }
}

static void conn_read(struct conn *c)
{
    char buf[16384];
    ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        die("read");
    }
    if (n == 0) {
        fprintf(stderr, "respbench: conn %d: closed by server\n", c->idx);
        exit(1);
    }
    if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK) {
        fprintf(stderr, "respbench: conn %d: reader: %s\n", c->idx,
                c->rd->errstr);
        exit(1);
    }
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->rd, &reply) != REDIS_OK) {
            fprintf(stderr, "respbench: conn %d: protocol error: %s\n", c->idx,
                    c->rd->errstr);
            exit(1);
        }
        if (reply == NULL)
            break;
        on_reply(c, reply);
        freeReplyObject(reply);
    }
}

static int conn_connect(struct conn *c, const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "respbench: bad IPv4 address %s\n", host);
        exit(2);
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket");
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->rd = redisReaderCreate();
    if (c->rd == NULL)
        die("redisReaderCreate");
    return 0;
}

/* A blocking request/reply on a connection that is not yet (or no longer)
 * in non-blocking mode.  Returns the reply; the caller frees it. */
static redisReply *conn_call(struct conn *c, int argc, const char **argv)
{
    conn_queue(c, argc, argv);
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0 && errno != EINTR)
            die("write");
        if (n > 0)
            c->out_off += (size_t)n;
    }
    c->out_len = c->out_off = 0;
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->rd, &reply) != REDIS_OK) {
            fprintf(stderr, "respbench: protocol error: %s\n", c->rd->errstr);
            exit(1);
        }
        if (reply != NULL)
            return reply;
        char buf[4096];
        ssize_t n = read(c->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "respbench: connection lost during setup\n");
            exit(1);
        }
        redisReaderFeed(c->rd, buf, (size_t)n);
    }
}

static void set_blocking(int fd, int blocking)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 ||
        fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK) < 0)
        die("fcntl");
}

/* SCRIPT LOADs body on c (setup, blocking) into sha; exits unless the reply
 * is a 40-character bulk string. */
static void load_script(struct conn *c, const char *body, char *sha)
{
    const char *argv[] = {"SCRIPT", "LOAD", body};
    redisReply *r = conn_call(c, 3, argv);
    if (!(r->type == REDIS_REPLY_STRING && r->len == 40)) {
        show_bad(c, "SCRIPT LOAD", r);
        exit(1);
    }
    memcpy(sha, r->str, 40);
    sha[40] = '\0';
    freeReplyObject(r);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: respbench --port P [--host 127.0.0.1] [--mode "
            "pair|pair-del|get|script-pair|\n"
            "                 redisson-pair|redisson-renew|counter]\n"
            "                 [--conns N] [--seconds S] [--warmup S] "
            "[--prefix P]\n"
            "                 [--pid NAME=PID]... [--zk-mntr HOST:PORT]\n"
            "  --mode          pair: SET NX PX + DELIFEQ (default); pair-del: "
            "SET NX PX + DEL;\n"
            "                  get: GET of a held key; the script modes: see "
            "the source\n"
            "  --conns N       concurrent connections (default 1)\n"
            "  --seconds S     measured period (default 5)\n"
            "  --warmup S      discarded warm-up period (default 1)\n"
            "  --prefix P      key prefix (default bench:)\n"
            "  --px MS         the lock's TTL in pair modes (default 30000; 0: "
            "none)\n"
            "  --hold-us N     hold each lock at least N us before releasing "
            "it (default 0);\n"
            "                  the hold is not counted in the latency\n"
            "  --pid NAME=PID  charge PID's CPU time to the operations "
            "(repeatable)\n"
            "  --zk-mntr ADDR  count a ZooKeeper server's requests per op "
            "(mntr)\n"
            "  --client-name N CLIENT SETNAME N on every connection first (a "
            "policy may\n"
            "                  key on it, scripts/examples/tenants.lua)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0, nconn = 1;
    double seconds = 5, warmup = 1;
    struct bench_pids pids = {0};
    struct bench_zkreqs zkreqs = {0};

    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || v == NULL)
            usage();
        if (strcmp(a, "--host") == 0)
            host = v;
        else if (strcmp(a, "--port") == 0)
            port = atoi(v);
        else if (strcmp(a, "--conns") == 0)
            nconn = atoi(v);
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--warmup") == 0)
            warmup = atof(v);
        else if (strcmp(a, "--prefix") == 0)
            prefix = v;
        else if (strcmp(a, "--px") == 0)
            px = v;
        else if (strcmp(a, "--hold-us") == 0)
            hold_ns = (uint64_t)atoll(v) * 1000;
        else if (strcmp(a, "--mode") == 0) {
            if (strcmp(v, "pair") == 0)
                mode = MODE_PAIR;
            else if (strcmp(v, "pair-del") == 0)
                mode = MODE_PAIR_DEL;
            else if (strcmp(v, "get") == 0)
                mode = MODE_GET;
            else if (strcmp(v, "script-pair") == 0)
                mode = MODE_SCRIPT_PAIR;
            else if (strcmp(v, "redisson-pair") == 0)
                mode = MODE_REDISSON_PAIR;
            else if (strcmp(v, "redisson-renew") == 0)
                mode = MODE_REDISSON_RENEW;
            else if (strcmp(v, "counter") == 0)
                mode = MODE_COUNTER;
            else
                usage();
        } else if (strcmp(a, "--zk-mntr") == 0) {
            zkreqs.addr = v;
        } else if (strcmp(a, "--client-name") == 0) {
            client_name = v;
        } else if (strcmp(a, "--pid") == 0) {
            if (bench_pids_add(&pids, v) != 0)
                usage();
        } else
            usage();
    }
    if (port <= 0 || port > 65535 || nconn < 1 || nconn > 10000 ||
        seconds <= 0 || warmup < 0 || strlen(prefix) > 64)
        usage();
    signal(SIGPIPE, SIG_IGN);

    struct conn *conns = calloc((size_t)nconn, sizeof(*conns));
    if (conns == NULL)
        die("calloc");
    for (int i = 0; i < nconn; i++) {
        conns[i].idx = i;
        snprintf(conns[i].key, sizeof(conns[i].key), "%s%d", prefix, i);
        snprintf(conns[i].chan, sizeof(conns[i].chan),
                 "redisson_lock__channel:{%s}", conns[i].key);
        /* Redisson's holder: "<client uuid>:<thread id>". */
        snprintf(conns[i].tok, sizeof(conns[i].tok), "bench-%d:%d",
                 (int)getpid(), i);
        if (conn_connect(&conns[i], host, port) != 0) {
            fprintf(stderr, "respbench: connect %s:%d: %s\n", host, port,
                    strerror(errno));
            return 1;
        }
        if (client_name != NULL) {
            const char *setname[] = {"CLIENT", "SETNAME", client_name};
            redisReply *r = conn_call(&conns[i], 3, setname);
            if (!(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)) {
                show_bad(&conns[i], "CLIENT SETNAME", r);
                return 1;
            }
            freeReplyObject(r);
        }
    }

    if (mode == MODE_GET) {
        snprintf(held_key, sizeof(held_key), "%sheld", prefix);
        snprintf(held_tok, sizeof(held_tok), "held-%d", (int)getpid());
        const char *del[] = {"DEL", held_key};
        freeReplyObject(conn_call(&conns[0], 2, del));
        const char *set[] = {"SET", held_key, held_tok, "NX", "PX", "60000"};
        redisReply *r = conn_call(&conns[0], 6, set);
        if (!(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0)) {
            show_bad(&conns[0], "SET (held key)", r);
            return 1;
        }
        freeReplyObject(r);
    }

    switch (mode) {
    case MODE_SCRIPT_PAIR:
        load_script(&conns[0], script_release, sha_release);
        break;
    case MODE_REDISSON_PAIR:
        load_script(&conns[0], script_acquire, sha_acquire);
        load_script(&conns[0], script_unlock, sha_unlock);
        break;
    case MODE_REDISSON_RENEW:
        load_script(&conns[0], script_acquire, sha_acquire);
        load_script(&conns[0], script_renew, sha_renew);
        break;
    case MODE_COUNTER: {
        load_script(&conns[0], script_counter, sha_counter);
        snprintf(held_key, sizeof(held_key), "%scounter", prefix);
        const char *del[] = {"DEL", held_key};
        freeReplyObject(conn_call(&conns[0], 2, del));
        break;
    }
    default:
        break;
    }

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        die("epoll_create1");
    for (int i = 0; i < nconn; i++) {
        set_blocking(conns[i].fd, 0);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, conns[i].fd, &ev) != 0)
            die("epoll_ctl");
    }

    uint64_t t0 = bench_now_ns();
    uint64_t m0 = t0 + (uint64_t)(warmup * 1e9);
    uint64_t m1 = m0 + (uint64_t)(seconds * 1e9);
    uint64_t drain_end = 0;
    uint64_t m0_real = 0, m1_real = 0;
    long long self0 = 0, self1 = 0;
    for (int i = 0; i < nconn; i++)
        conn_start(&conns[i]);

    struct epoll_event evs[256];
    for (;;) {
        uint64_t now = bench_now_ns();
        if (phase == PHASE_WARMUP && now >= m0) {
            phase = PHASE_MEASURE;
            m0_real = now;
            self0 = bench_self_cpu_us();
            bench_pids_start(&pids);
            zkreqs.p0 = zkreqs.addr ? bench_zk_packets(zkreqs.addr) : -1;
        }
        if (phase == PHASE_MEASURE && now >= m1) {
            phase = PHASE_STOP;
            m1_real = now;
            self1 = bench_self_cpu_us();
            bench_pids_stop(&pids);
            zkreqs.p1 = zkreqs.addr ? bench_zk_packets(zkreqs.addr) : -1;
            drain_end = now + 10000000000ull;
        }
        if (phase == PHASE_STOP) {
            int busy = 0;
            for (int i = 0; i < nconn; i++)
                busy += conns[i].state != ST_IDLE;
            if (busy == 0)
                break;
            if (now >= drain_end) {
                fprintf(stderr,
                        "respbench: %d requests unanswered after "
                        "10 s\n",
                        busy);
                return 1;
            }
        }
        uint64_t wake = release_due(conns, nconn, now);
        uint64_t next = phase == PHASE_WARMUP    ? m0
                        : phase == PHASE_MEASURE ? m1
                                                 : drain_end;
        if (wake < next)
            next = wake;
        int timeout = next > now ? (int)((next - now + 999999) / 1000000) : 0;
        int n = epoll_wait(epfd, evs, 256, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (evs[i].events & EPOLLOUT)
                conn_flush(c);
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(c);
        }
    }

    if (mode == MODE_GET || mode == MODE_COUNTER) {
        set_blocking(conns[0].fd, 1);
        const char *del[] = {"DEL", held_key};
        freeReplyObject(conn_call(&conns[0], 2, del));
    }
    if (mode == MODE_REDISSON_RENEW) {
        set_blocking(conns[0].fd, 1);
        for (int i = 0; i < nconn; i++) {
            const char *del[] = {"DEL", conns[i].key};
            freeReplyObject(conn_call(&conns[0], 2, del));
        }
    }

    double secs = (double)(m1_real - m0_real) / 1e9;
    bench_samples_sort(&samples);
    static const char *mode_names[] = {
        "pair",          "pair-del",       "get",    "script-pair",
        "redisson-pair", "redisson-renew", "counter"};
    printf("respbench mode=%s conc=%d secs=%.3f ops=%llu errors=%llu "
           "ops_per_sec=%.1f p50_us=%.1f p99_us=%.1f mean_us=%.1f "
           "max_us=%.1f self_cpu_pct=%.1f",
           mode_names[mode], nconn, secs, (unsigned long long)ops,
           (unsigned long long)errors, (double)ops / secs,
           bench_samples_pct(&samples, 50), bench_samples_pct(&samples, 99),
           bench_samples_mean(&samples), bench_samples_pct(&samples, 100),
           (double)(self1 - self0) / 1e4 / secs);
    bench_pids_print(&pids, stdout, ops, secs);
    bench_zkreqs_print(&zkreqs, stdout, ops);
    printf("\n");

    for (int i = 0; i < nconn; i++) {
        close(conns[i].fd);
        redisReaderFree(conns[i].rd);
    }
    close(epfd);
    free(conns);
    free(samples.v);
    return 0;
}
