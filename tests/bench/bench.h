/*
 * Helpers shared by the benchmark tools (zkraw, respbench, handoff): a
 * monotonic clock, a growable latency sample set with percentiles, and
 * per-process CPU and RSS read from /proc so that a tool can charge a server's
 * CPU time to the operations it measured.
 *
 * Everything here is static: each tool is one translation unit plus this
 * header.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#define BENCH_MAX_PIDS 4

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Latency samples in nanoseconds.  Appending never fails silently: on
 * allocation failure the tool exits, since a truncated sample set would give
 * wrong percentiles. */
struct bench_samples {
    uint64_t *v;
    size_t n;
    size_t cap;
};

static inline void bench_samples_add(struct bench_samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        uint64_t *v = realloc(s->v, cap * sizeof(*v));
        if (v == NULL) {
            fprintf(stderr, "bench: out of memory for samples\n");
            exit(2);
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts the samples; call once before bench_samples_pct. */
static inline void bench_samples_sort(struct bench_samples *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof(*s->v), bench_cmp_u64);
}

/* The p-th percentile (0 < p <= 100) in microseconds, nearest-rank method;
 * 0 when there are no samples. */
static inline double bench_samples_pct(const struct bench_samples *s, double p)
{
    if (s->n == 0)
        return 0;
    size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return (double)s->v[rank - 1] / 1000.0;
}

static inline double bench_samples_mean(const struct bench_samples *s)
{
    if (s->n == 0)
        return 0;
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += (double)s->v[i];
    return sum / (double)s->n / 1000.0;
}

/* utime+stime of a process in microseconds, from /proc/PID/stat; -1 when the
 * process is gone or the file cannot be parsed. */
static inline long long bench_proc_cpu_us(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces; fields resume after the
     * last ')'.  utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long utime = 0, stime = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &utime, &stime) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (long long)((utime + stime) * 1000000ull / (unsigned long long)hz);
}

/* VmRSS of a process in KiB, or -1. */
static inline long bench_proc_rss_kb(int pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* This process's own CPU time (user+system) in microseconds. */
static inline long long bench_self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
           ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

/* Processes whose CPU time is charged to the measured operations, given on
 * the command line as --pid NAME=PID. */
struct bench_pids {
    int n;
    char name[BENCH_MAX_PIDS][32];
    int pid[BENCH_MAX_PIDS];
    long long cpu0[BENCH_MAX_PIDS];
    long long cpu1[BENCH_MAX_PIDS];
};

/* Parses "NAME=PID"; returns 0 or -1 on a malformed or surplus argument. */
static inline int bench_pids_add(struct bench_pids *p, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= sizeof(p->name[0]) ||
        p->n == BENCH_MAX_PIDS)
        return -1;
    char *end;
    long pid = strtol(eq + 1, &end, 10);
    if (*end != '\0' || pid <= 0)
        return -1;
    memcpy(p->name[p->n], arg, (size_t)(eq - arg));
    p->name[p->n][eq - arg] = '\0';
    p->pid[p->n] = (int)pid;
    p->n++;
    return 0;
}

static inline void bench_pids_start(struct bench_pids *p)
{
    for (int i = 0; i < p->n; i++)
        p->cpu0[i] = bench_proc_cpu_us(p->pid[i]);
}

static inline void bench_pids_stop(struct bench_pids *p)
{
    for (int i = 0; i < p->n; i++)
        p->cpu1[i] = bench_proc_cpu_us(p->pid[i]);
}

/* Appends " NAME_cpu_us_per_op=.. NAME_cpu_pct=.. NAME_rss_kb=.." for each
 * watched process to the result line. */
static inline void bench_pids_print(const struct bench_pids *p, FILE *out,
                                    uint64_t ops, double secs)
{
    for (int i = 0; i < p->n; i++) {
        long long d =
            (p->cpu0[i] < 0 || p->cpu1[i] < 0) ? -1 : p->cpu1[i] - p->cpu0[i];
        double per_op = (d >= 0 && ops > 0) ? (double)d / (double)ops : -1;
        double pct = (d >= 0 && secs > 0) ? (double)d / 1e4 / secs : -1;
        fprintf(out, " %s_cpu_us_per_op=%.2f %s_cpu_pct=%.1f %s_rss_kb=%ld",
                p->name[i], per_op, p->name[i], pct, p->name[i],
                bench_proc_rss_kb(p->pid[i]));
    }
}

/* Reads a ZooKeeper server's `mntr` answer into buf (NUL terminated).
 * addr is "IPv4:port".  Returns 0, or -1 when the server cannot be asked.
 * Blocks for one round trip. */
static inline int bench_zk_mntr(const char *addr, char *buf, size_t cap)
{
    char host[64];
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (cap == 0 || colon == NULL || (size_t)(colon - addr) >= sizeof(host))
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t len = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        write(fd, "mntr", 4) == 4) {
        ssize_t n;
        while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
            len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return len > 0 ? 0 : -1;
}

/* The number after `name` (e.g. "zk_packets_received") in an mntr answer,
 * or -1. */
static inline long long bench_mntr_value(const char *mntr, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(mntr, name); p; p = strstr(p + 1, name))
        if ((p == mntr || p[-1] == '\n') && p[n] == '\t')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

/* The value of `zk_packets_received` in a ZooKeeper server's `mntr` answer
 * (every request of every client, pings included), or -1 when the server
 * cannot be asked. */
static inline long long bench_zk_packets(const char *addr)
{
    char buf[8192];
    if (bench_zk_mntr(addr, buf, sizeof buf) < 0)
        return -1;
    return bench_mntr_value(buf, "zk_packets_received");
}

/* Sleeps until bench_now_ns() reaches deadline_ns, waking every 50 ms to
 * give up early once *stop is set. */
static inline void bench_sleep_until(uint64_t deadline_ns, atomic_int *stop)
{
    for (;;) {
        uint64_t now = bench_now_ns();
        if (now >= deadline_ns || atomic_load(stop))
            return;
        uint64_t d = deadline_ns - now;
        if (d > 50000000)
            d = 50000000;
        struct timespec ts = {(time_t)(d / 1000000000u),
                              (long)(d % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

#ifdef ZOOKEEPER_H_
#include <pthread.h>

/* The sessions of a tool's zhandles: zookeeper_init(..., bench_zk_watcher,
 * ..., &sessions, 0) on each; connected counts CONNECTED events, *fatal is
 * set on expiry or a failed authentication. */
struct bench_zk_sessions {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int connected;
    atomic_int *fatal;
};
#define BENCH_ZK_SESSIONS(fatal_flag)                                          \
    {                                                                          \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, (fatal_flag)   \
    }

static inline void bench_zk_watcher(zhandle_t *h, int type, int state,
                                    const char *path, void *ctx)
{
    struct bench_zk_sessions *s = (struct bench_zk_sessions *)ctx;
    (void)h;
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&s->mu);
    if (state == ZOO_CONNECTED_STATE)
        s->connected++;
    else if (state == ZOO_EXPIRED_SESSION_STATE ||
             state == ZOO_AUTH_FAILED_STATE)
        atomic_store(s->fatal, 1);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits up to secs for n CONNECTED events; returns 1 when they came. */
static inline int bench_zk_wait_connected(struct bench_zk_sessions *s, int n,
                                          int secs)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += secs;
    pthread_mutex_lock(&s->mu);
    while (s->connected < n && !atomic_load(s->fatal) &&
           pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
        ;
    int ok = s->connected >= n;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Creates every component of a persistent path; existing nodes are fine. */
static inline int bench_zk_ensure_path(zhandle_t *zh, const char *path)
{
    char buf[256];
    size_t len = strlen(path);
    if (len >= sizeof(buf) || path[0] != '/')
        return ZBADARGUMENTS;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        int rc =
            zoo_create(zh, buf, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        buf[i] = saved;
        if (rc != ZOK && rc != ZNODEEXISTS)
            return rc;
    }
    return ZOK;
}
#endif

/* ZooKeeper requests per operation over the measured period, when the tool
 * was given --zk-mntr: appended to the result line as zk_reqs_per_op. */
struct bench_zkreqs {
    const char *addr;
    long long p0, p1;
};

static inline void bench_zkreqs_print(const struct bench_zkreqs *z, FILE *out,
                                      uint64_t ops)
{
    if (z->addr == NULL)
        return;
    if (z->p0 < 0 || z->p1 < 0 || ops == 0)
        fprintf(out, " zk_reqs_per_op=-1");
    else
        fprintf(out, " zk_reqs_per_op=%.2f",
                (double)(z->p1 - z->p0) / (double)ops);
}

#endif
