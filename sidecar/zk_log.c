/*
 * zk_log.c — the ZooKeeper C client's own log lines, routed into ours.
 */
#include "zk_impl.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* While a server is down the C client writes the same line for every
 * connection attempt (about 30 a second).  A line whose text, after the
 * client's timestamp and thread prefix, repeats the one before is written
 * at most once per ZKLOG_REPEAT_MS with the number left out (repeated=N);
 * a run's count left out is written (zk.client_repeated) when another
 * line ends it.  The
 * client writes from its own threads, hence the mutex. */
#define ZKLOG_REPEAT_MS 10000
static struct {
    pthread_mutex_t mu;
    char last[512]; /* the previous line's text, after the prefix */
    size_t last_len;
    struct log_limit limit;
} zklog_runs = {.mu = PTHREAD_MUTEX_INITIALIZER,
                .limit = {.interval_ms = ZKLOG_REPEAT_MS}};

/* Routes the C client's own log lines into ours. */
static ssize_t zklog_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    char q[512];
    size_t len = n;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (!len)
        return (ssize_t)n;
    log_quote(buf, len, q, sizeof q);
    /* "2026-11-24 23:42:51,834:27449(0x7f..):ZOO_ERROR@fn@2985: text" */
    const char *body = memmem(buf, len, "):", 2);
    body = body ? body + 2 : buf;
    size_t blen = len - (size_t)(body - buf);
    uint64_t now_ms = uv_hrtime() / 1000000;
    unsigned long left_out = 0;
    pthread_mutex_lock(&zklog_runs.mu);
    int same =
        blen == zklog_runs.last_len && memcmp(body, zklog_runs.last, blen) == 0;
    if (same) {
        if (log_limit_allow(&zklog_runs.limit, now_ms, &left_out))
            log_warn("zk.client", "msg=%s repeated=%lu", q, left_out);
    } else {
        if (zklog_runs.limit.suppressed)
            log_warn("zk.client_repeated", "count=%lu",
                     zklog_runs.limit.suppressed);
        zklog_runs.last_len = blen < sizeof zklog_runs.last ? blen : 0;
        memcpy(zklog_runs.last, body, zklog_runs.last_len);
        zklog_runs.limit.suppressed = 0;
        zklog_runs.limit.next_ms = now_ms + ZKLOG_REPEAT_MS;
        log_warn("zk.client", "msg=%s", q);
    }
    pthread_mutex_unlock(&zklog_runs.mu);
    return (ssize_t)n;
}

void zk_log_install(void)
{
    static FILE *zklog;
    if (!zklog) {
        cookie_io_functions_t io = {.write = zklog_write};
        zklog = fopencookie(NULL, "w", io);
        if (zklog) {
            setvbuf(zklog, NULL, _IOLBF, 0);
            zoo_set_log_stream(zklog);
        }
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
}
