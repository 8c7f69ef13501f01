/*
 * zkraw: the ZooKeeper work of a lock pair, done directly with
 * libzookeeper_mt, as the baseline zkresp is compared against.
 *
 * One session, C workers, each with one pair in flight at a time:
 *
 *   create EPHEMERAL <root>/<worker> (a token-sized value)
 *     -> completion: delete <root>/<worker> at version 0
 *       -> completion: record the pair's latency, start the next pair
 *
 * libzookeeper_mt's default is to re-resolve the server list (getaddrinfo,
 * which on Linux also asks the kernel for the interface addresses) every time
 * its IO thread polls; that doubles the client's CPU per pair.  A tuned
 * client turns it off with zoo_set_servers_resolution_delay, which
 * --resolve-delay exposes (run.sh passes -1).
 *
 * This is what zkresp does for `SET k tok NX PX ms` + `DELIFEQ k tok` when
 * it is at its best (one create, one versioned delete, many operations in
 * flight on one session), without the RESP front end, the loop-thread hop
 * and Lua.  The next operation is issued from the completion thread, so the
 * client adds as little as libzookeeper_mt allows.
 *
 * A warm-up period is run and discarded, then pairs that complete during the
 * measured period are counted.  One result line goes to stdout:
 *
 *   zkraw conc=64 secs=5.00 ops=... errors=0 ops_per_sec=... p50_us=...
 *         p99_us=... mean_us=... max_us=... self_cpu_us_per_op=...
 *         [NAME_cpu_us_per_op=... NAME_cpu_pct=... NAME_rss_kb=...]
 *
 * Exit status: 0 when the run completed (errors are reported, not fatal),
 * 1 when it could not run (no session, lost session), 2 on bad usage.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The synchronous API (used only for setup) needs the threaded library. */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "bench.h"

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

struct worker {
    int id;
    char path[256];
    uint64_t start_ns;
};

static zhandle_t *zh;
static atomic_int phase = PHASE_WARMUP;
static atomic_int inflight;
static atomic_int fatal;
static atomic_ullong errors;
static char data[4096];
static int data_len = 32;
static int resolve_delay_ms = 0;

/* Written only by the completion thread while workers run; read by the main
 * thread after inflight dropped to zero. */
static struct bench_samples samples;
static uint64_t pairs;
static uint64_t max_errors = 100000;

static struct bench_zk_sessions sessions = BENCH_ZK_SESSIONS(&fatal);

static int is_session_error(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZSESSIONEXPIRED || rc == ZCLOSING ||
           rc == ZINVALIDSTATE || rc == ZOPERATIONTIMEOUT;
}

static void start_pair(struct worker *w);

/* Counts an error; returns 1 when the worker must stop. */
static int worker_error(struct worker *w, const char *op, int rc)
{
    unsigned long long n = atomic_fetch_add(&errors, 1) + 1;
    if (n <= 5)
        fprintf(stderr, "zkraw: %s %s: %s\n", op, w->path, zerror(rc));
    if (is_session_error(rc) || n >= max_errors) {
        atomic_store(&fatal, 1);
        atomic_fetch_sub(&inflight, 1);
        return 1;
    }
    return 0;
}

static void delete_done(int rc, const void *arg)
{
    struct worker *w = (struct worker *)arg;
    if (rc != ZOK) {
        if (worker_error(w, "delete", rc))
            return;
    } else if (atomic_load(&phase) == PHASE_MEASURE) {
        bench_samples_add(&samples, bench_now_ns() - w->start_ns);
        pairs++;
    }
    start_pair(w);
}

static void create_done(int rc, const char *value, const void *arg)
{
    struct worker *w = (struct worker *)arg;
    (void)value;
    if (rc != ZOK) {
        if (worker_error(w, "create", rc))
            return;
        start_pair(w);
        return;
    }
    rc = zoo_adelete(zh, w->path, 0, delete_done, w);
    if (rc != ZOK && !worker_error(w, "adelete", rc))
        start_pair(w);
}

/* Starts a pair for the worker, or retires it when the run is over.  Runs on
 * the main thread for the first pair, then on the completion thread. */
static void start_pair(struct worker *w)
{
    for (;;) {
        if (atomic_load(&phase) == PHASE_STOP || atomic_load(&fatal)) {
            atomic_fetch_sub(&inflight, 1);
            return;
        }
        w->start_ns = bench_now_ns();
        int rc = zoo_acreate(zh, w->path, data, data_len, &ZOO_OPEN_ACL_UNSAFE,
                             ZOO_EPHEMERAL, create_done, w);
        if (rc == ZOK)
            return;
        if (worker_error(w, "acreate", rc))
            return;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: zkraw --zk HOST:PORT [--conc N] [--seconds S] "
            "[--warmup S]\n"
            "             [--root PATH] [--data-bytes N] [--pid NAME=PID]...\n"
            "             [--zk-mntr HOST:PORT] [--resolve-delay MS]\n"
            "  --conc N        concurrent pairs on one session (default 1)\n"
            "  --seconds S     measured period (default 5)\n"
            "  --warmup S      discarded warm-up period (default 1)\n"
            "  --root PATH     parent of the worker nodes (default "
            "/bench/raw)\n"
            "  --data-bytes N  value stored in each node (default 32)\n"
            "  --pid NAME=PID  charge PID's CPU time to the pairs "
            "(repeatable)\n"
            "  --zk-mntr ADDR  count the server's requests per pair (mntr)\n"
            "  --resolve-delay MS  zoo_set_servers_resolution_delay: 0 (the "
            "library\n"
            "                  default) resolves the server list on every "
            "IO-loop turn,\n"
            "                  -1 never in normal operation, >0 at most once "
            "per window\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *zk = NULL, *root = "/bench/raw";
    int conc = 1;
    double seconds = 5, warmup = 1;
    struct bench_pids pids = {0};
    struct bench_zkreqs zkreqs = {0};

    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || v == NULL)
            usage();
        if (strcmp(a, "--zk") == 0)
            zk = v;
        else if (strcmp(a, "--conc") == 0)
            conc = atoi(v);
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--warmup") == 0)
            warmup = atof(v);
        else if (strcmp(a, "--root") == 0)
            root = v;
        else if (strcmp(a, "--data-bytes") == 0)
            data_len = atoi(v);
        else if (strcmp(a, "--resolve-delay") == 0)
            resolve_delay_ms = atoi(v);
        else if (strcmp(a, "--zk-mntr") == 0)
            zkreqs.addr = v;
        else if (strcmp(a, "--pid") == 0) {
            if (bench_pids_add(&pids, v) != 0)
                usage();
        } else
            usage();
    }
    if (zk == NULL || conc < 1 || conc > 100000 || seconds <= 0 || warmup < 0 ||
        data_len < 0 || data_len > (int)sizeof(data))
        usage();
    for (int i = 0; i < data_len; i++)
        data[i] = (char)('a' + i % 26);

    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh = zookeeper_init(zk, bench_zk_watcher, 10000, NULL, &sessions, 0);
    if (zh == NULL) {
        fprintf(stderr, "zkraw: zookeeper_init: %s\n", strerror(errno));
        return 1;
    }
    if (resolve_delay_ms != 0 &&
        zoo_set_servers_resolution_delay(zh, resolve_delay_ms) != ZOK) {
        fprintf(stderr, "zkraw: bad --resolve-delay %d\n", resolve_delay_ms);
        return 2;
    }
    int ok = bench_zk_wait_connected(&sessions, 1, 15);
    if (!ok) {
        fprintf(stderr, "zkraw: no session with %s\n", zk);
        zookeeper_close(zh);
        return 1;
    }
    int rc = bench_zk_ensure_path(zh, root);
    if (rc != ZOK) {
        fprintf(stderr, "zkraw: create %s: %s\n", root, zerror(rc));
        zookeeper_close(zh);
        return 1;
    }

    struct worker *workers = calloc((size_t)conc, sizeof(*workers));
    if (workers == NULL) {
        fprintf(stderr, "zkraw: out of memory\n");
        return 1;
    }
    uint64_t t0 = bench_now_ns();
    atomic_store(&inflight, conc);
    for (int i = 0; i < conc; i++) {
        workers[i].id = i;
        snprintf(workers[i].path, sizeof(workers[i].path), "%s/%d", root, i);
        start_pair(&workers[i]);
    }

    bench_sleep_until(t0 + (uint64_t)(warmup * 1e9), &fatal);
    uint64_t m0 = bench_now_ns();
    long long self0 = bench_self_cpu_us();
    bench_pids_start(&pids);
    zkreqs.p0 = zkreqs.addr ? bench_zk_packets(zkreqs.addr) : -1;
    atomic_store(&phase, PHASE_MEASURE);

    bench_sleep_until(m0 + (uint64_t)(seconds * 1e9), &fatal);
    atomic_store(&phase, PHASE_STOP);
    uint64_t m1 = bench_now_ns();
    long long self1 = bench_self_cpu_us();
    bench_pids_stop(&pids);
    zkreqs.p1 = zkreqs.addr ? bench_zk_packets(zkreqs.addr) : -1;

    /* Let the pairs in flight finish so that the sample set is complete and
     * the nodes are gone before the session closes. */
    uint64_t drain = bench_now_ns() + 10000000000ull;
    while (atomic_load(&inflight) > 0 && bench_now_ns() < drain) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    int stuck = atomic_load(&inflight);
    zookeeper_close(zh);
    if (stuck > 0) {
        fprintf(stderr, "zkraw: %d pairs still in flight after 10 s\n", stuck);
        return 1;
    }

    double secs = (double)(m1 - m0) / 1e9;
    bench_samples_sort(&samples);
    printf("zkraw conc=%d secs=%.3f ops=%llu errors=%llu ops_per_sec=%.1f "
           "p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f "
           "self_cpu_us_per_op=%.2f",
           conc, secs, (unsigned long long)pairs,
           (unsigned long long)atomic_load(&errors), (double)pairs / secs,
           bench_samples_pct(&samples, 50), bench_samples_pct(&samples, 99),
           bench_samples_mean(&samples), bench_samples_pct(&samples, 100),
           pairs ? (double)(self1 - self0) / (double)pairs : -1.0);
    bench_pids_print(&pids, stdout, pairs, secs);
    bench_zkreqs_print(&zkreqs, stdout, pairs);
    printf("\n");
    free(samples.v);
    free(workers);
    if (atomic_load(&fatal)) {
        fprintf(stderr, "zkraw: run aborted (session lost or too many "
                        "errors)\n");
        return 1;
    }
    return 0;
}
