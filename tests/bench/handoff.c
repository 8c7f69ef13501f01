/*
 * handoff: how fast one lock passes from holder to waiter, and how soon a
 * waiter hears that the lock was released.  Three modes:
 *
 * resp mode (--side PORT:N, repeatable): N Redisson-style waiters on each
 * RESP server, all on ONE hash lock.  Each waiter is a thread with two
 * blocking connections to its server, as a Redisson client has:
 *
 *   subscriber  SUBSCRIBE redisson_lock__channel:{<key>}, before the run
 *   command     EVALSHA acquire (SCRIPT LOAD on NOSCRIPT), hash lock, field
 *               "<uuid>:1", PEXPIRE 30000
 *                 nil  -> it holds: spin --hold-us, EVALSHA unlock (with its
 *                         latch key; the script PUBLISHes 0), back to acquire
 *                 PTTL -> wait for a message on the subscriber (at most
 *                         --timeout-ms, counted as a timeout), then retry
 *
 * The scripts are those of tests/integration/test_24_redisson.py.  A
 * message that arrived after the acquire was sent wakes the waiter (the
 * acquire may have been evaluated before that unlock); earlier ones are
 * stale and dropped when the next acquire is sent.  While a thread waits for
 * a command's reply it also reads its subscriber, so every message is
 * timestamped when it arrives, whatever the thread was doing.
 *
 * native mode (--native --side PORT:N, repeatable): zkresp's own lock
 * commands (issue 18), N waiters on each server, all on ONE key, each a
 * thread with ONE blocking connection and its own owner string:
 *
 *   LOCK.ACQUIRE <key> <owner> PX 30000 WAIT <--timeout-ms>
 *     integer -> granted, the reply is the grant's fencing token: spin
 *                --hold-us, LOCK.RELEASE <key> <owner> (:1 expected), again
 *     null    -> WAIT ran out (counted as a timeout), ask again
 *
 * The server queues the waiters and wakes them one at a time (FIFO, each
 * watching the node ahead of it), so a waiter's wake-up is its ACQUIRE's
 * reply.  Every grant is checked: its token must be above the previous
 * grant's (fencing=), and no other waiter may still hold (overlaps=).
 *
 * raw mode (--zk HOST:PORT): the same handoff as the ZooKeeper lock recipe,
 * with libzookeeper_mt.  --waiters N, each with its own session by default
 * (--sessions S spreads them over S sessions instead), all asynchronous on
 * the sessions' completion threads:
 *
 *   create EPHEMERAL|SEQUENCE <root>/<id>_ -> getChildren <root>
 *     lowest -> it holds: spin --hold-us, delete its node, create a new one
 *     else   -> getData of its predecessor with a watch (no watch is left on
 *               a node that is already gone); on the deletion event,
 *               getChildren again
 *
 * Herd-free: each deletion wakes exactly one waiter.
 *
 * A release is an unlock script (resp) or a holder's delete (raw); releases
 * are serialised by the lock and numbered.  Every waiter subscribes before
 * the first release and a channel delivers in publish order, so a waiter's
 * n-th message is release n's (matching a message to the latest release
 * instead misreads a message that arrives after the next unlock was sent,
 * common at redis-server's pace).  Raw wake-ups are matched by the deleted
 * node's sequence number.  Measured, each after a discarded warm-up:
 *
 *   ops_per_sec     acquisitions (handoffs) per second
 *   wake_p50/p99    resp: from the unlock's reply (read by the releasing
 *                   thread) to each other waiter's receipt of the message;
 *                   raw: from the holder's delete completion callback to its
 *                   successor's watch event; native: from LOCK.RELEASE's
 *                   reply to the next holder's LOCK.ACQUIRE reply (each
 *                   timestamped by the thread that read it), counted only
 *                   when that holder's ACQUIRE was sent before the release
 *                   (fresh= those that were not: the lock was free when
 *                   they asked; own= a releaser granted again at once).
 *                   Negative when the wake-up came first (counted in
 *                   early=): the server sends the event and the reply at
 *                   the same moment.
 *   sent_wake_*     the same from the moment the release's request was sent:
 *                   the release's own round trip plus the notification
 *   xwake_*, xsent_wake_*  the same for waiters on another side than the
 *                   releaser's: another --side (resp), another session (raw)
 *   swake_*         wake_* for waiters on the releaser's side
 *   gap_p50/p99     from a release's reply to the next acquire's reply: the
 *                   time the lock sat free (0 when the acquire's reply came
 *                   first)
 *   messages        resp: messages received over the whole run, against
 *                   expected = releases x subscribed waiters (lost=, extra=);
 *                   own= those a releaser got of its own unlock (not timed);
 *                   resyncs= messages that came before the release they were
 *                   counted for was sent (the count ran ahead: an extra
 *                   message), not timed
 *   timeouts        waits that ran out (resp), WAITs that ran out (native)
 *   errors          unexpected replies; an error reply to a script is retried
 *                   at once (tryagain= counts TRYAGAIN among them)
 *   overlaps        acquisitions while another waiter still held the lock
 *                   (had not sent its release): must be 0
 *   fencing         native: grants whose token was not above the previous
 *                   grant's (grants are serialised by the lock, so the order
 *                   in which their replies are recorded is the grant order
 *                   unless they overlap): must be 0; tokens= grants checked
 *                   (warm-up and drain included); release_not_held=
 *                   LOCK.RELEASE of a granted hold answered 0
 *   zk_watch_*      with --zk-mntr: ZooKeeper watch events delivered during
 *                   the measured period (mntr zk_sum_node_*_watch_count,
 *                   which add the watchers each event triggers), per
 *                   release, and the server's zk_watch_count at the end;
 *                   zk_reqs_per_handoff: requests the server received
 *                   (zk_packets_received, pings included) per handoff
 *
 * One result line goes to stdout:
 *
 *   handoff mode=resp waiters=4+4 secs=... ops=... errors=0 ops_per_sec=...
 *           wake_p50_us=... wake_p99_us=... wake_n=... early=... ...
 *
 * Exit status: 0 when the run completed (errors are reported, not fatal),
 * 1 when it could not run, 2 on bad usage, 3 when a native run completed
 * (its result line printed) but broke mutual exclusion: overlaps or
 * fencing above 0.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "bench.h"

#define MAX_WAITERS 32
#define MAX_SIDES 4
#define RING 4096 /* release records kept; a power of two */

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

/* ------------------------------------------------------------ releases */

/* One release of the lock.  Written under mu. */
struct release {
    uint64_t k;       /* its number, from 1; 0: slot unused */
    long zseq;        /* raw: the sequence number of the deleted node */
    int releaser;     /* the waiter that released */
    int side;         /* its server (resp) or session (raw) */
    int measured;     /* sent during the measured period */
    uint64_t sent_ns; /* its request was about to be sent */
    uint64_t done_ns; /* its reply / delete completion; 0 until then */
    int nheard;       /* wake-ups heard before done_ns was known */
    uint64_t heard_ns[MAX_WAITERS];
    char heard_x[MAX_WAITERS]; /* heard on another side */
};

/* Wake-ups relative to the release's reply may be negative (the message
 * came first); they are kept with this offset added. */
#define SIGNED_OFF 1000000000000ull

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct release ring[RING];
static uint64_t releases;   /* releases begun */
static uint64_t releases_m; /* of which during the measured period */
/* Wake-ups from the release's reply and from its request, of every other
 * waiter and of those on another side (server or session) only. */
static struct bench_samples wake, wake_sent, xwake, xwake_sent, swake, gap;
static uint64_t early, unmatched, handoffs, errors, errors_shown;
static int holding = -1;  /* the waiter whose acquire said it holds */
static uint64_t overlaps; /* acquisitions while another waiter held */

static atomic_int phase = PHASE_WARMUP;
static atomic_int fatal;
static uint64_t hold_ns = 20000;

static void hold_spin(void)
{
    uint64_t until = bench_now_ns() + hold_ns;
    while (hold_ns > 0 && bench_now_ns() < until)
        ;
}

/* Numbers a new release by waiter id on side; returns its number. */
static uint64_t release_begin(int id, int side, long zseq)
{
    pthread_mutex_lock(&mu);
    uint64_t k = ++releases;
    if (holding == id)
        holding = -1;
    struct release *r = &ring[k & (RING - 1)];
    r->k = k;
    r->zseq = zseq;
    r->releaser = id;
    r->side = side;
    r->measured = atomic_load(&phase) == PHASE_MEASURE;
    r->done_ns = 0;
    r->nheard = 0;
    r->sent_ns = bench_now_ns();
    releases_m += (uint64_t)r->measured;
    pthread_mutex_unlock(&mu);
    return k;
}

static void wake_add(uint64_t heard, uint64_t done, int cross)
{
    early += heard < done;
    bench_samples_add(&wake, heard + SIGNED_OFF - done);
    bench_samples_add(cross ? &xwake : &swake, heard + SIGNED_OFF - done);
}

/* The release's reply came at now: the wake-ups heard before it are
 * recorded. */
static void release_done(uint64_t k, uint64_t now)
{
    pthread_mutex_lock(&mu);
    struct release *r = &ring[k & (RING - 1)];
    if (r->k == k) {
        r->done_ns = now;
        for (int i = 0; i < r->nheard; i++)
            wake_add(r->heard_ns[i], now, r->heard_x[i]);
        r->nheard = 0;
    }
    pthread_mutex_unlock(&mu);
}

/* Records a wake-up at t of release r, heard by someone else on side.
 * Under mu. */
static void wake_locked(struct release *r, uint64_t t, int side)
{
    if (!r->measured)
        return;
    int cross = side != r->side;
    bench_samples_add(&wake_sent, t - r->sent_ns);
    if (cross)
        bench_samples_add(&xwake_sent, t - r->sent_ns);
    if (r->done_ns != 0) {
        wake_add(t, r->done_ns, cross);
    } else if (r->nheard < MAX_WAITERS) {
        r->heard_x[r->nheard] = (char)cross;
        r->heard_ns[r->nheard++] = t;
    }
}

/* Records waiter id's acquisition at t: a handoff, and the time the lock sat
 * free since the latest release's reply.  An acquisition while another
 * waiter holds (it has not sent its release yet) is an overlap.  Under mu. */
static void acquired_locked(int id, uint64_t t)
{
    overlaps += holding != -1;
    holding = id;
    if (atomic_load(&phase) != PHASE_MEASURE)
        return;
    handoffs++;
    const struct release *r = &ring[releases & (RING - 1)];
    if (releases == 0 || r->k != releases)
        return;
    bench_samples_add(&gap, r->done_ns && r->done_ns <= t ? t - r->done_ns : 0);
}

static void count_error(const char *fmt, const char *a, const char *b)
{
    pthread_mutex_lock(&mu);
    errors++;
    if (errors_shown++ < 5) {
        fprintf(stderr, "handoff: ");
        fprintf(stderr, fmt, a, b);
        fprintf(stderr, "\n");
    }
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------ resp mode */

/* ACQUIRE and UNLOCK of tests/integration/test_24_redisson.py
 * (RedissonLock.tryLockInnerAsync, unlockInnerAsync with its latch). */
static const char script_acquire[] =
    "\n"
    "if ((redis.call('exists', KEYS[1]) == 0)\n"
    "    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1);\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1]);\n"
    "  return nil;\n"
    "end;\n"
    "return redis.call('pttl', KEYS[1]);\n";
static const char script_unlock[] =
    "\n"
    "local val = redis.call('get', KEYS[3]);\n"
    "if val ~= false then\n"
    "  return tonumber(val);\n"
    "end;\n"
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then\n"
    "  return nil;\n"
    "end;\n"
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);\n"
    "if (counter > 0) then\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2]);\n"
    "  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);\n"
    "  return 0;\n"
    "else\n"
    "  redis.call('del', KEYS[1]);\n"
    "  redis.call(ARGV[4], KEYS[2], ARGV[1]);\n"
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);\n"
    "  return 1;\n"
    "end;\n";

static char sha_acquire[41], sha_unlock[41];
static const char *host = "127.0.0.1";
static const char *key = "bench:handoff";
static char chan[256];
static int timeout_ms = 2000;
static int nwaiters;
static atomic_int stopped;
static atomic_ullong tryagain; /* TRYAGAIN replies, among the errors */

/* A blocking connection and its reply parser. */
struct rconn {
    int fd;
    redisReader *rd;
};

struct waiter {
    int id;
    int port;
    int side; /* the index of its --side */
    pthread_t th;
    struct rconn sub, cmd;
    int subscribed;
    char uuid[40];
    char holder[48];
    uint64_t req;     /* unlock requests sent (the latch key's suffix) */
    unsigned pending; /* messages since the current acquire was sent */
    uint64_t next_k;  /* the release its next message is for */
    uint64_t msgs, own, resyncs, timeouts;
};

static struct waiter waiters[MAX_WAITERS];

static void die(const char *what)
{
    fprintf(stderr, "handoff: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void rconn_open(struct rconn *c, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "handoff: bad IPv4 address %s\n", host);
        exit(2);
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket");
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "handoff: connect %s:%d: %s\n", host, port,
                strerror(errno));
        exit(1);
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->rd = redisReaderCreate();
    if (c->rd == NULL)
        die("redisReaderCreate");
}

static void rconn_close(struct rconn *c)
{
    close(c->fd);
    redisReaderFree(c->rd);
}

static void rconn_send(struct rconn *c, int argc, const char **argv)
{
    char buf[4096];
    int n = snprintf(buf, sizeof(buf), "*%d\r\n", argc);
    for (int i = 0; i < argc && n >= 0 && (size_t)n < sizeof(buf); i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "$%zu\r\n%s\r\n",
                      strlen(argv[i]), argv[i]);
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        fprintf(stderr, "handoff: request too long\n");
        exit(1);
    }
    for (int off = 0; off < n;) {
        ssize_t w = write(c->fd, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        off += (int)w;
    }
}

/* A complete reply already read, or NULL.  The caller frees it. */
static redisReply *rconn_take(struct rconn *c)
{
    void *r = NULL;
    if (redisReaderGetReply(c->rd, &r) != REDIS_OK) {
        fprintf(stderr, "handoff: protocol error: %s\n", c->rd->errstr);
        exit(1);
    }
    return r;
}

/* Reads what the socket holds (it is readable). */
static void rconn_fill(struct rconn *c)
{
    char buf[16384];
    ssize_t n;
    do
        n = read(c->fd, buf, sizeof(buf));
    while (n < 0 && errno == EINTR);
    if (n == 0) {
        fprintf(stderr, "handoff: connection closed by the server\n");
        exit(1);
    }
    if (n < 0)
        die("read");
    if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK) {
        fprintf(stderr, "handoff: reader: %s\n", c->rd->errstr);
        exit(1);
    }
}

static int is_str(const redisReply *r, const char *s)
{
    return r != NULL &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->len == strlen(s) && memcmp(r->str, s, r->len) == 0;
}

static void describe(const redisReply *r, char *out, size_t n)
{
    switch (r->type) {
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
    case REDIS_REPLY_STRING:
        snprintf(out, n, "type %d \"%.*s\"", r->type,
                 (int)(r->len < 80 ? r->len : 80), r->str);
        break;
    case REDIS_REPLY_INTEGER:
        snprintf(out, n, "integer %lld", r->integer);
        break;
    case REDIS_REPLY_ARRAY:
        snprintf(out, n, "array of %zu", r->elements);
        break;
    default:
        snprintf(out, n, "type %d", r->type);
    }
}

/* A message arrived on w's subscriber.  Every waiter subscribed before the
 * first release and a channel delivers in publish order, so its n-th message
 * is that of release n.  A message that came before its supposed release was
 * sent means the count ran ahead (an extra message): it is not timed, and
 * the count restarts from the latest release (a resync). */
static void on_message(struct waiter *w)
{
    uint64_t t = bench_now_ns();
    w->msgs++;
    w->pending++;
    pthread_mutex_lock(&mu);
    uint64_t k = w->next_k++;
    struct release *r = &ring[k & (RING - 1)];
    if (k > releases || r->k != k || t < r->sent_ns) {
        w->resyncs++;
        w->next_k = releases + 1;
    } else if (r->releaser == w->id) {
        w->own++;
    } else {
        wake_locked(r, t, w->side);
    }
    pthread_mutex_unlock(&mu);
}

/* Handles every frame already read on the subscriber. */
static void sub_drain(struct waiter *w)
{
    redisReply *r;
    while ((r = rconn_take(&w->sub)) != NULL) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            is_str(r->element[0], "message") && is_str(r->element[1], chan) &&
            is_str(r->element[2], "0")) {
            on_message(w);
        } else {
            char d[128];
            describe(r, d, sizeof(d));
            count_error("unexpected frame on a subscriber: %s%s", d, "");
        }
        freeReplyObject(r);
    }
}

/* Sends a command and returns its reply, reading the subscriber meanwhile.
 * The caller frees the reply. */
static redisReply *cmd_call(struct waiter *w, int argc, const char **argv)
{
    rconn_send(&w->cmd, argc, argv);
    uint64_t deadline = bench_now_ns() + 30000000000ull;
    for (;;) {
        redisReply *r = rconn_take(&w->cmd);
        if (r != NULL)
            return r;
        struct pollfd p[2] = {{.fd = w->cmd.fd, .events = POLLIN},
                              {.fd = w->sub.fd, .events = POLLIN}};
        int n = poll(p, w->subscribed ? 2 : 1, 1000);
        if (n < 0 && errno != EINTR)
            die("poll");
        if (n > 0 && p[1].revents)
            rconn_fill(&w->sub), sub_drain(w);
        if (n > 0 && p[0].revents)
            rconn_fill(&w->cmd);
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "handoff: waiter %d: no reply to %s in 30 s\n",
                    w->id, argv[0]);
            exit(1);
        }
    }
}

/* EVALSHA, with SCRIPT LOAD and a second EVALSHA on NOSCRIPT, as Redisson
 * does. */
static redisReply *evalsha(struct waiter *w, const char *sha, const char *body,
                           int argc, const char **argv)
{
    const char *a[16] = {"EVALSHA", sha};
    for (int i = 0; i < argc; i++)
        a[2 + i] = argv[i];
    redisReply *r = cmd_call(w, argc + 2, a);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        const char *load[] = {"SCRIPT", "LOAD", body};
        r = cmd_call(w, 3, load);
        if (!(r->type == REDIS_REPLY_STRING && r->len == 40 &&
              memcmp(r->str, sha, 40) == 0)) {
            char d[128];
            describe(r, d, sizeof(d));
            fprintf(stderr, "handoff: SCRIPT LOAD: %s\n", d);
            exit(1);
        }
        freeReplyObject(r);
        r = cmd_call(w, argc + 2, a);
    }
    return r;
}

/* Waits for a message on the subscriber.  Returns 1 when one came, 0 after
 * timeout_ms (a timeout), -1 when the run stopped meanwhile. */
static int wait_message(struct waiter *w)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        sub_drain(w);
        if (w->pending > 0)
            return 1;
        if (atomic_load(&phase) == PHASE_STOP || atomic_load(&fatal))
            return -1;
        uint64_t now = bench_now_ns();
        if (now >= deadline)
            return 0;
        uint64_t left = (deadline - now) / 1000000u + 1;
        struct pollfd p = {.fd = w->sub.fd, .events = POLLIN};
        int n = poll(&p, w->subscribed ? 1 : 0, left < 50 ? (int)left : 50);
        if (n < 0 && errno != EINTR)
            die("poll");
        if (n > 0)
            rconn_fill(&w->sub);
    }
}

/* Counts an unexpected reply to a script or command (TRYAGAIN errors also
 * apart). */
static void error_reply(struct waiter *w, const char *script,
                        const redisReply *r)
{
    char d[128];
    (void)w;
    describe(r, d, sizeof(d));
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "TRYAGAIN", 8) == 0)
        atomic_fetch_add(&tryagain, 1);
    count_error("unexpected reply to %s: %s", script, d);
}

/* Holds the lock (it just got it), then runs the unlock script. */
static void hold_and_unlock(struct waiter *w)
{
    char latch[320], req[24];
    hold_spin();
    w->req++;
    snprintf(req, sizeof(req), "%llu", (unsigned long long)w->req);
    snprintf(latch, sizeof(latch), "redisson_unlock_latch:{%s}:%s-%s", key,
             w->uuid, req);
    const char *argv[] = {"3",     key,       chan,      latch, "0",
                          "30000", w->holder, "publish", "3000"};
    uint64_t k = release_begin(w->id, w->side, 0);
    redisReply *r = evalsha(w, sha_unlock, script_unlock, 9, argv);
    /* An error reply (TRYAGAIN) left the lock held: the same request is
     * sent again, latch and all, as Redisson retries it. */
    for (int i = 0; i < 10 && r->type == REDIS_REPLY_ERROR; i++) {
        error_reply(w, "the unlock script", r);
        freeReplyObject(r);
        r = evalsha(w, sha_unlock, script_unlock, 9, argv);
    }
    release_done(k, bench_now_ns());
    if (!(r->type == REDIS_REPLY_INTEGER && r->integer == 1))
        error_reply(w, "the unlock script", r);
    freeReplyObject(r);
}

static void *waiter_run(void *arg)
{
    struct waiter *w = arg;
    while (atomic_load(&phase) != PHASE_STOP && !atomic_load(&fatal)) {
        w->pending = 0;
        const char *argv[] = {"1", key, "30000", w->holder};
        redisReply *r = evalsha(w, sha_acquire, script_acquire, 4, argv);
        if (r->type == REDIS_REPLY_NIL) {
            pthread_mutex_lock(&mu);
            acquired_locked(w->id, bench_now_ns());
            pthread_mutex_unlock(&mu);
            freeReplyObject(r);
            hold_and_unlock(w);
            continue;
        }
        if (r->type != REDIS_REPLY_INTEGER) {
            /* Not the lock's PTTL: an error (TRYAGAIN) is retried at once,
             * as Redisson retries it. */
            error_reply(w, "the acquire script", r);
            freeReplyObject(r);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        freeReplyObject(r);
        if (wait_message(w) == 0 && atomic_load(&phase) == PHASE_MEASURE)
            w->timeouts++;
    }
    /* Drain: every release is final once all have stopped; read the
     * messages still on their way, for the lost/extra count. */
    atomic_fetch_add(&stopped, 1);
    uint64_t deadline = bench_now_ns() + 1500000000ull;
    while (w->subscribed && bench_now_ns() < deadline) {
        sub_drain(w);
        if (atomic_load(&stopped) == nwaiters) {
            pthread_mutex_lock(&mu);
            uint64_t total = releases;
            pthread_mutex_unlock(&mu);
            if (w->msgs >= total)
                break;
        }
        struct pollfd p = {.fd = w->sub.fd, .events = POLLIN};
        if (poll(&p, 1, 20) > 0)
            rconn_fill(&w->sub);
    }
    return NULL;
}

/* Connects, subscribes and loads the scripts for one waiter (on the main
 * thread, before the run). */
static void waiter_setup(struct waiter *w)
{
    rconn_open(&w->sub, w->port);
    rconn_open(&w->cmd, w->port);
    /* Redisson's connection id: a UUID per client, thread 1. */
    snprintf(w->uuid, sizeof(w->uuid), "%08x-0000-4000-8000-%012x",
             (unsigned)getpid(), (unsigned)w->id);
    snprintf(w->holder, sizeof(w->holder), "%s:1", w->uuid);

    const char *sub[] = {"SUBSCRIBE", chan};
    rconn_send(&w->sub, 2, sub);
    redisReply *r;
    while ((r = rconn_take(&w->sub)) == NULL) {
        struct pollfd p = {.fd = w->sub.fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0) {
            fprintf(stderr, "handoff: no reply to SUBSCRIBE in 10 s\n");
            exit(1);
        }
        rconn_fill(&w->sub);
    }
    w->subscribed = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                    is_str(r->element[0], "subscribe");
    if (!w->subscribed) {
        char d[128];
        describe(r, d, sizeof(d));
        fprintf(stderr,
                "handoff: waiter %d (port %d): SUBSCRIBE answered %s; it "
                "will wait by timeouts only\n",
                w->id, w->port, d);
        /* The connection stays open and unread. */
    }
    freeReplyObject(r);

    const char *la[] = {"SCRIPT", "LOAD", script_acquire};
    const char *lu[] = {"SCRIPT", "LOAD", script_unlock};
    char *shas[] = {sha_acquire, sha_unlock};
    const char **loads[] = {la, lu};
    for (int i = 0; i < 2; i++) {
        r = cmd_call(w, 3, loads[i]);
        if (!(r->type == REDIS_REPLY_STRING && r->len == 40)) {
            char d[128];
            describe(r, d, sizeof(d));
            fprintf(stderr, "handoff: SCRIPT LOAD: %s\n", d);
            exit(1);
        }
        memcpy(shas[i], r->str, 40);
        shas[i][40] = '\0';
        freeReplyObject(r);
    }
}

/* ------------------------------------------------------------ native mode */

/* Native locks (issue 18): each waiter is a thread with ONE blocking
 * connection to its server, no subscriber.  LOCK.ACQUIRE blocks until the
 * lock is granted (an integer fencing token) or WAIT runs out (null). */

static int native;
static uint64_t last_token;      /* the latest grant's token; under mu */
static int have_token;           /* a token was seen; under mu */
static uint64_t fencing;         /* tokens not above the previous grant's */
static uint64_t tokens;          /* grants seen (the whole run); under mu */
static uint64_t own_acq;         /* granted right after its own release */
static uint64_t fresh_acq;       /* asked after the latest release was sent */
static uint64_t not_held;        /* LOCK.RELEASE answered 0 */
static uint64_t native_timeouts; /* WAIT ran out during the measured period */
static char nat_px[] = "30000";
static char nat_wait[24];

/* An error reply that says the command does not exist: the sidecar has no
 * native locks, and nothing can be measured. */
static void native_unknown(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR &&
        (strncmp(r->str, "ERR unknown command", 19) == 0 ||
         strstr(r->str, "unknown command") != NULL)) {
        fprintf(stderr, "handoff: the server has no native locks: %s\n",
                r->str);
        exit(1);
    }
}

/* The token of a grant: an integer reply, or (counted as an error, the
 * contract says integer) a string of digits; 0 when r is not a grant. */
static int native_token(const redisReply *r, uint64_t *tok)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *tok = (uint64_t)r->integer;
        return 1;
    }
    if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
        r->len > 0 && r->len < 21 && strspn(r->str, "0123456789") == r->len) {
        *tok = strtoull(r->str, NULL, 10);
        count_error("LOCK.ACQUIRE answered its token as a string: %s%s", r->str,
                    "");
        return 1;
    }
    return 0;
}

/* Waiter w was granted the lock at t with token tok, its acquire having
 * been sent at sent.  The grant is checked (overlap, fencing) and, when w
 * was waiting as the latest release was sent and is not its releaser,
 * timed as that release's wake-up.  Under mu. */
static void native_granted_locked(struct waiter *w, uint64_t t, uint64_t sent,
                                  uint64_t tok)
{
    tokens++;
    if (have_token && tok <= last_token) {
        if (fencing++ < 5)
            fprintf(stderr,
                    "handoff: FENCING: waiter %d granted token %llu after "
                    "token %llu\n",
                    w->id, (unsigned long long)tok,
                    (unsigned long long)last_token);
    }
    if (holding != -1 && overlaps < 5)
        fprintf(stderr,
                "handoff: OVERLAP: waiter %d granted (token %llu) while "
                "waiter %d holds\n",
                w->id, (unsigned long long)tok, holding);
    have_token = 1;
    last_token = tok;
    acquired_locked(w->id, t);
    if (releases == 0)
        return;
    struct release *r = &ring[releases & (RING - 1)];
    if (r->k != releases) {
        unmatched++;
    } else if (r->releaser == w->id) {
        own_acq += r->measured;
    } else if (sent > r->sent_ns) {
        fresh_acq += r->measured;
    } else {
        wake_locked(r, t, w->side);
    }
}

/* LOCK.RELEASE of w's hold: numbered, timed, retried on an error reply. */
static void native_release(struct waiter *w)
{
    const char *argv[] = {"LOCK.RELEASE", key, w->holder};
    uint64_t k = release_begin(w->id, w->side, 0);
    redisReply *r = cmd_call(w, 3, argv);
    /* An error reply (TRYAGAIN) may have left the lock held: sent again. */
    for (int i = 0; i < 10 && r->type == REDIS_REPLY_ERROR; i++) {
        native_unknown(r);
        error_reply(w, "LOCK.RELEASE", r);
        freeReplyObject(r);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        r = cmd_call(w, 3, argv);
    }
    release_done(k, bench_now_ns());
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
        pthread_mutex_lock(&mu);
        not_held++;
        pthread_mutex_unlock(&mu);
        count_error("LOCK.RELEASE of a granted hold answered %s%s", "0", "");
    } else if (!(r->type == REDIS_REPLY_INTEGER && r->integer == 1)) {
        error_reply(w, "LOCK.RELEASE", r);
    }
    freeReplyObject(r);
}

static void *native_run(void *arg)
{
    struct waiter *w = arg;
    const char *argv[] = {"LOCK.ACQUIRE", key,    w->holder, "PX",
                          nat_px,         "WAIT", nat_wait};
    while (atomic_load(&phase) != PHASE_STOP && !atomic_load(&fatal)) {
        uint64_t sent = bench_now_ns();
        redisReply *r = cmd_call(w, 7, argv);
        uint64_t t = bench_now_ns();
        uint64_t tok;
        if (native_token(r, &tok)) {
            freeReplyObject(r);
            pthread_mutex_lock(&mu);
            native_granted_locked(w, t, sent, tok);
            pthread_mutex_unlock(&mu);
            hold_spin();
            native_release(w);
            continue;
        }
        if (r->type == REDIS_REPLY_NIL) {
            /* WAIT ran out: not granted, no longer queued. */
            if (atomic_load(&phase) == PHASE_MEASURE) {
                pthread_mutex_lock(&mu);
                native_timeouts++;
                pthread_mutex_unlock(&mu);
            }
            freeReplyObject(r);
            continue;
        }
        native_unknown(r);
        error_reply(w, "LOCK.ACQUIRE", r);
        freeReplyObject(r);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Connects one native waiter (on the main thread, before the run). */
static void native_setup(struct waiter *w)
{
    rconn_open(&w->cmd, w->port);
    snprintf(w->holder, sizeof(w->holder), "owner-%u-%d", (unsigned)getpid(),
             w->id);
}

/* ------------------------------------------------------------ raw mode */

struct rwaiter {
    int id;
    zhandle_t *zh;
    char node[256]; /* its current node */
    long seq;       /* the node's sequence number */
    long pred_seq;  /* the predecessor it watches */
    char pred[256];
    uint64_t rel_k; /* its release in flight */
};

static const char *root = "/bench/handoff";
static struct rwaiter rwaiters[MAX_WAITERS];
static zhandle_t *handles[MAX_WAITERS];
static int nsessions;
static atomic_int inflight;
static struct bench_zk_sessions sessions = BENCH_ZK_SESSIONS(&fatal);

static void raw_start(struct rwaiter *w);
static void raw_look(struct rwaiter *w);

/* An error on w's chain: counted; w retires (its node, if any, goes with
 * its session). */
static void raw_fail(struct rwaiter *w, const char *op, int rc)
{
    count_error("raw %s: %s", op, zerror(rc));
    atomic_store(&fatal, 1);
    (void)w;
    atomic_fetch_sub(&inflight, 1);
}

static long seq_of(const char *name)
{
    size_t n = strlen(name);
    return n >= 10 ? atol(name + n - 10) : -1;
}

static void raw_deleted(int rc, const void *data)
{
    struct rwaiter *w = (struct rwaiter *)data;
    release_done(w->rel_k, bench_now_ns());
    if (rc != ZOK) {
        raw_fail(w, "delete", rc);
        return;
    }
    raw_start(w);
}

static void raw_acquired(struct rwaiter *w)
{
    pthread_mutex_lock(&mu);
    acquired_locked(w->id, bench_now_ns());
    pthread_mutex_unlock(&mu);
    hold_spin();
    w->rel_k = release_begin(w->id, w->id % nsessions, w->seq);
    int rc = zoo_adelete(w->zh, w->node, -1, raw_deleted, w);
    if (rc != ZOK)
        raw_fail(w, "adelete", rc);
}

/* The deletion of w's predecessor (or a session event). */
static void raw_pred_watch(zhandle_t *zh, int type, int state, const char *path,
                           void *ctx)
{
    (void)zh;
    (void)state;
    (void)path;
    struct rwaiter *w = ctx;
    if (type == ZOO_SESSION_EVENT)
        return; /* bench_zk_watcher judges it */
    uint64_t t = bench_now_ns();
    pthread_mutex_lock(&mu);
    int found = 0;
    for (uint64_t k = releases; k > 0 && k + 64 > releases; k--) {
        struct release *r = &ring[k & (RING - 1)];
        if (r->k == k && r->zseq == w->pred_seq) {
            wake_locked(r, t, w->id % nsessions);
            found = 1;
            break;
        }
    }
    unmatched += !found;
    pthread_mutex_unlock(&mu);
    raw_look(w);
}

static void raw_pred_data(int rc, const char *value, int len,
                          const struct Stat *stat, const void *data)
{
    (void)value;
    (void)len;
    (void)stat;
    struct rwaiter *w = (struct rwaiter *)data;
    if (rc == ZNONODE)
        raw_look(w); /* gone already; no watch was left */
    else if (rc != ZOK)
        raw_fail(w, "get (predecessor)", rc);
    /* ZOK: the watch is set; raw_pred_watch carries on. */
}

static void raw_children(int rc, const struct String_vector *sv,
                         const void *data)
{
    struct rwaiter *w = (struct rwaiter *)data;
    if (rc != ZOK) {
        raw_fail(w, "get_children", rc);
        return;
    }
    long lowest = -1, pred = -1;
    const char *pred_name = NULL;
    for (int i = 0; i < sv->count; i++) {
        long s = seq_of(sv->data[i]);
        if (lowest < 0 || s < lowest)
            lowest = s;
        if (s < w->seq && s > pred) {
            pred = s;
            pred_name = sv->data[i];
        }
    }
    if (pred_name == NULL) {
        raw_acquired(w);
        return;
    }
    w->pred_seq = pred;
    snprintf(w->pred, sizeof(w->pred), "%s/%s", root, pred_name);
    rc = zoo_awget(w->zh, w->pred, raw_pred_watch, w, raw_pred_data, w);
    if (rc != ZOK)
        raw_fail(w, "awget", rc);
}

static void raw_look(struct rwaiter *w)
{
    int rc = zoo_aget_children(w->zh, root, 0, raw_children, w);
    if (rc != ZOK)
        raw_fail(w, "aget_children", rc);
}

static void raw_created(int rc, const char *value, const void *data)
{
    struct rwaiter *w = (struct rwaiter *)data;
    if (rc != ZOK) {
        raw_fail(w, "create", rc);
        return;
    }
    snprintf(w->node, sizeof(w->node), "%s", value);
    w->seq = seq_of(value);
    raw_look(w);
}

/* Queues w for the lock, or retires it once the run is over. */
static void raw_start(struct rwaiter *w)
{
    if (atomic_load(&phase) == PHASE_STOP || atomic_load(&fatal)) {
        atomic_fetch_sub(&inflight, 1);
        return;
    }
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "%s/%d_", root, w->id);
    int rc = zoo_acreate(w->zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL | ZOO_SEQUENCE, raw_created, w);
    if (rc != ZOK)
        raw_fail(w, "acreate", rc);
}

/* ------------------------------------------------------------ mntr */

/* Watch numbers of a ZooKeeper server's mntr: the watchers triggered by
 * each kind of event since the server started, and the watches set now. */
struct watch_stats {
    long long created, deleted, changed, children, count, packets;
};

static int read_mntr(const char *addr, struct watch_stats *s)
{
    char buf[16384];
    if (bench_zk_mntr(addr, buf, sizeof buf) < 0)
        return -1;
    static const char *names[] = {"zk_sum_node_created_watch_count",
                                  "zk_sum_node_deleted_watch_count",
                                  "zk_sum_node_changed_watch_count",
                                  "zk_sum_node_children_watch_count",
                                  "zk_watch_count",
                                  "zk_packets_received"};
    long long *vals[] = {&s->created,  &s->deleted, &s->changed,
                         &s->children, &s->count,   &s->packets};
    for (int i = 0; i < 6; i++) {
        *vals[i] = bench_mntr_value(buf, names[i]);
        if (*vals[i] < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ main */

/* Prints " NAME_p50_us=.. NAME_p99_us=.. NAME_max_us=.." of sorted samples
 * kept with offset off (us) added, or n/a without samples. */
static void print_pct(const char *name, const struct bench_samples *s,
                      double off)
{
    static const double pcts[] = {50, 99, 100};
    static const char *labels[] = {"p50", "p99", "max"};
    for (int i = 0; i < 3; i++) {
        if (s->n == 0)
            printf(" %s_%s_us=n/a", name, labels[i]);
        else
            printf(" %s_%s_us=%.1f", name, labels[i],
                   bench_samples_pct(s, pcts[i]) - off);
    }
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: handoff --side PORT:N [--side PORT:N]... [--key K]   (resp)\n"
        "       handoff --native --side PORT:N [--side PORT:N]... [--key K]\n"
        "       handoff --zk HOST:PORT [--waiters N] [--sessions S] [--root "
        "P]  (raw)\n"
        "       [--seconds S] [--warmup S] [--hold-us N] [--timeout-ms N]\n"
        "       [--zk-mntr HOST:PORT] [--pid NAME=PID]... [--resolve-delay "
        "MS]\n"
        "  --side PORT:N   N waiters on the RESP server at 127.0.0.1:PORT\n"
        "  --native        LOCK.ACQUIRE / LOCK.RELEASE instead of Redisson's\n"
        "                  scripts (one blocking connection per waiter)\n"
        "  --key K         the lock (default bench:handoff)\n"
        "  --zk ADDR       raw mode: the ZooKeeper lock recipe on ADDR\n"
        "  --waiters N     raw mode: waiters (default 8)\n"
        "  --sessions S    raw mode: sessions the waiters share (default: "
        "one each)\n"
        "  --root P        raw mode: the lock's directory (default "
        "/bench/handoff)\n"
        "  --hold-us N     hold each acquisition N us (default 20)\n"
        "  --timeout-ms N  resp mode: a waiter's longest wait for a message;\n"
        "                  native mode: LOCK.ACQUIRE's WAIT (default 2000)\n"
        "  --zk-mntr ADDR  count ZooKeeper watch events per release (mntr)\n"
        "  --pid NAME=PID  charge PID's CPU time to the handoffs "
        "(repeatable)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *zk = NULL, *mntr = NULL;
    double seconds = 5, warmup = 1;
    int raw_waiters = 8, resolve_delay = -1;
    int sides = 0, side_port[MAX_SIDES], side_n[MAX_SIDES];
    struct bench_pids pids = {0};

    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--native") == 0) {
            native = 1;
            i--; /* a flag: no value */
            continue;
        }
        if (strcmp(a, "--help") == 0 || v == NULL)
            usage();
        if (strcmp(a, "--side") == 0) {
            if (sides == MAX_SIDES ||
                sscanf(v, "%d:%d", &side_port[sides], &side_n[sides]) != 2 ||
                side_port[sides] <= 0 || side_port[sides] > 65535 ||
                side_n[sides] < 1)
                usage();
            sides++;
        } else if (strcmp(a, "--key") == 0)
            key = v;
        else if (strcmp(a, "--zk") == 0)
            zk = v;
        else if (strcmp(a, "--waiters") == 0)
            raw_waiters = atoi(v);
        else if (strcmp(a, "--sessions") == 0)
            nsessions = atoi(v);
        else if (strcmp(a, "--root") == 0)
            root = v;
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--warmup") == 0)
            warmup = atof(v);
        else if (strcmp(a, "--hold-us") == 0)
            hold_ns = (uint64_t)atoll(v) * 1000;
        else if (strcmp(a, "--timeout-ms") == 0)
            timeout_ms = atoi(v);
        else if (strcmp(a, "--zk-mntr") == 0)
            mntr = v;
        else if (strcmp(a, "--resolve-delay") == 0)
            resolve_delay = atoi(v);
        else if (strcmp(a, "--pid") == 0) {
            if (bench_pids_add(&pids, v) != 0)
                usage();
        } else
            usage();
    }
    if ((sides > 0) == (zk != NULL) || (native && sides == 0) || seconds <= 0 ||
        warmup < 0 || timeout_ms < 1 || strlen(key) > 128)
        usage();
    snprintf(nat_wait, sizeof(nat_wait), "%d", timeout_ms);
    signal(SIGPIPE, SIG_IGN);
    snprintf(chan, sizeof(chan), "redisson_lock__channel:{%s}", key);

    char who[64] = "";
    if (sides > 0) {
        for (int s = 0; s < sides; s++) {
            for (int j = 0; j < side_n[s]; j++) {
                if (nwaiters == MAX_WAITERS)
                    usage();
                waiters[nwaiters].id = nwaiters;
                waiters[nwaiters].next_k = 1;
                waiters[nwaiters].port = side_port[s];
                waiters[nwaiters].side = s;
                nwaiters++;
            }
            snprintf(who + strlen(who), sizeof(who) - strlen(who), "%s%d",
                     s ? "+" : "", side_n[s]);
        }
        for (int i = 0; i < nwaiters; i++)
            (native ? native_setup : waiter_setup)(&waiters[i]);
        for (int i = 0; i < nwaiters; i++)
            if (pthread_create(&waiters[i].th, NULL,
                               native ? native_run : waiter_run,
                               &waiters[i]) != 0)
                die("pthread_create");
    } else {
        if (raw_waiters < 1 || raw_waiters > MAX_WAITERS)
            usage();
        nwaiters = raw_waiters;
        if (nsessions <= 0 || nsessions > nwaiters)
            nsessions = nwaiters;
        snprintf(who, sizeof(who), "%d", nwaiters);
        zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
        for (int i = 0; i < nsessions; i++) {
            handles[i] =
                zookeeper_init(zk, bench_zk_watcher, 10000, NULL, &sessions, 0);
            if (handles[i] == NULL)
                die("zookeeper_init");
            if (resolve_delay != 0)
                zoo_set_servers_resolution_delay(handles[i], resolve_delay);
        }
        int ok = bench_zk_wait_connected(&sessions, nsessions, 15);
        if (!ok) {
            fprintf(stderr, "handoff: no sessions with %s\n", zk);
            return 1;
        }
        int rc = bench_zk_ensure_path(handles[0], root);
        if (rc != ZOK) {
            fprintf(stderr, "handoff: create %s: %s\n", root, zerror(rc));
            return 1;
        }
        atomic_store(&inflight, nwaiters);
        for (int i = 0; i < nwaiters; i++) {
            rwaiters[i].id = i;
            rwaiters[i].zh = handles[i % nsessions];
            raw_start(&rwaiters[i]);
        }
    }

    uint64_t t0 = bench_now_ns();
    struct watch_stats w0 = {0}, w1 = {0};
    bench_sleep_until(t0 + (uint64_t)(warmup * 1e9), &fatal);
    int mntr_ok = mntr != NULL && read_mntr(mntr, &w0) == 0;
    bench_pids_start(&pids);
    uint64_t m0 = bench_now_ns();
    long long self0 = bench_self_cpu_us();
    atomic_store(&phase, PHASE_MEASURE);
    bench_sleep_until(m0 + (uint64_t)(seconds * 1e9), &fatal);
    atomic_store(&phase, PHASE_STOP);
    uint64_t m1 = bench_now_ns();
    long long self1 = bench_self_cpu_us();
    bench_pids_stop(&pids);
    mntr_ok = mntr_ok && read_mntr(mntr, &w1) == 0;

    uint64_t msgs = 0, own = 0, resyncs = 0, timeouts = 0;
    int subscribed = 0;
    if (sides > 0) {
        for (int i = 0; i < nwaiters; i++) {
            pthread_join(waiters[i].th, NULL);
            msgs += waiters[i].msgs;
            own += waiters[i].own;
            resyncs += waiters[i].resyncs;
            timeouts += waiters[i].timeouts;
            subscribed += waiters[i].subscribed;
            if (!native)
                rconn_close(&waiters[i].sub);
            rconn_close(&waiters[i].cmd);
        }
    } else {
        uint64_t drain = bench_now_ns() + 10000000000ull;
        while (atomic_load(&inflight) > 0 && bench_now_ns() < drain) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        int stuck = atomic_load(&inflight);
        for (int i = 0; i < nsessions; i++)
            zookeeper_close(handles[i]);
        if (stuck > 0) {
            fprintf(stderr, "handoff: %d raw waiters stuck after 10 s\n",
                    stuck);
            return 1;
        }
    }

    double secs = (double)(m1 - m0) / 1e9;
    bench_samples_sort(&wake);
    bench_samples_sort(&wake_sent);
    bench_samples_sort(&xwake);
    bench_samples_sort(&xwake_sent);
    bench_samples_sort(&swake);
    bench_samples_sort(&gap);
    double off = (double)SIGNED_OFF / 1000;
    printf("handoff mode=%s waiters=%s",
           native      ? "native"
           : sides > 0 ? "resp"
                       : "raw",
           who);
    if (sides == 0)
        printf(" sessions=%d", nsessions);
    printf(" hold_us=%.0f secs=%.3f ops=%llu errors=%llu ops_per_sec=%.1f",
           (double)hold_ns / 1000, secs, (unsigned long long)handoffs,
           (unsigned long long)errors, (double)handoffs / secs);
    print_pct("wake", &wake, off);
    printf(" wake_n=%zu early=%llu", wake.n, (unsigned long long)early);
    print_pct("xwake", &xwake, off);
    printf(" xwake_n=%zu", xwake.n);
    print_pct("swake", &swake, off);
    printf(" swake_n=%zu", swake.n);
    print_pct("sent_wake", &wake_sent, 0);
    print_pct("xsent_wake", &xwake_sent, 0);
    print_pct("gap", &gap, 0);
    printf(" overlaps=%llu tryagain=%llu", (unsigned long long)overlaps,
           (unsigned long long)atomic_load(&tryagain));
    printf(" unmatched=%llu releases=%llu releases_measured=%llu "
           "self_cpu_pct=%.1f",
           (unsigned long long)unmatched, (unsigned long long)releases,
           (unsigned long long)releases_m,
           (double)(self1 - self0) / 1e4 / secs);
    if (native) {
        printf(" fencing=%llu tokens=%llu own=%llu fresh=%llu timeouts=%llu "
               "release_not_held=%llu wait_ms=%d",
               (unsigned long long)fencing, (unsigned long long)tokens,
               (unsigned long long)own_acq, (unsigned long long)fresh_acq,
               (unsigned long long)native_timeouts,
               (unsigned long long)not_held, timeout_ms);
    } else if (sides > 0) {
        uint64_t expected = releases * (uint64_t)subscribed;
        printf(" subscribed=%d messages=%llu expected=%llu lost=%llu "
               "extra=%llu own=%llu resyncs=%llu timeouts=%llu",
               subscribed, (unsigned long long)msgs,
               (unsigned long long)expected,
               (unsigned long long)(expected > msgs ? expected - msgs : 0),
               (unsigned long long)(msgs > expected ? msgs - expected : 0),
               (unsigned long long)own, (unsigned long long)resyncs,
               (unsigned long long)timeouts);
    }
    if (mntr != NULL) {
        if (mntr_ok && releases_m > 0) {
            double r = (double)releases_m;
            long long ev =
                (w1.created - w0.created) + (w1.deleted - w0.deleted) +
                (w1.changed - w0.changed) + (w1.children - w0.children);
            printf(" zk_watch_events=%lld zk_watch_events_per_release=%.2f "
                   "zk_wev_created=%.2f zk_wev_deleted=%.2f "
                   "zk_wev_changed=%.2f zk_wev_children=%.2f "
                   "zk_watch_count=%lld zk_reqs_per_handoff=%.2f",
                   ev, (double)ev / r, (double)(w1.created - w0.created) / r,
                   (double)(w1.deleted - w0.deleted) / r,
                   (double)(w1.changed - w0.changed) / r,
                   (double)(w1.children - w0.children) / r, w1.count,
                   handoffs
                       ? (double)(w1.packets - w0.packets) / (double)handoffs
                       : -1.0);
        } else {
            printf(" zk_watch_events=n/a zk_watch_events_per_release=n/a");
        }
    }
    bench_pids_print(&pids, stdout, handoffs, secs);
    printf("\n");
    free(wake.v);
    free(wake_sent.v);
    free(xwake.v);
    free(xwake_sent.v);
    free(swake.v);
    free(gap.v);
    if (atomic_load(&fatal)) {
        fprintf(stderr, "handoff: run aborted (session lost)\n");
        return 1;
    }
    if (native && (overlaps > 0 || fencing > 0)) {
        fprintf(stderr,
                "handoff: FAILED: native locks broke mutual exclusion: %llu "
                "overlapping grants, %llu fencing tokens not above the "
                "previous grant's\n",
                (unsigned long long)overlaps, (unsigned long long)fencing);
        return 3;
    }
    return 0;
}
