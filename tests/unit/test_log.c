/*
 * test_log.c — the log line limiter (sidecar/log.c, struct log_limit).
 */
#include "log.h"
#include "unit.h"

TEST(log_limit_one_line_per_interval)
{
    struct log_limit l = {.interval_ms = 1000};
    unsigned long n = 99;
    ASSERT(log_limit_allow(&l, 5000, &n));
    ASSERT_INT_EQ(n, 0);
    /* Within the interval: counted, not written. */
    for (int i = 0; i < 7; i++)
        ASSERT(!log_limit_allow(&l, 5000 + (uint64_t)i * 100, &n));
    ASSERT(!log_limit_flush(&l, 5999, &n));
    /* The next line carries the count, which restarts. */
    ASSERT(log_limit_allow(&l, 6000, &n));
    ASSERT_INT_EQ(n, 7);
    ASSERT(!log_limit_allow(&l, 6001, &n));
    ASSERT(!log_limit_allow(&l, 6002, &n));
    /* With no line to follow, the flush reports the tail once. */
    ASSERT(!log_limit_flush(&l, 6500, &n));
    ASSERT(log_limit_flush(&l, 7000, &n));
    ASSERT_INT_EQ(n, 2);
    ASSERT(!log_limit_flush(&l, 9000, &n));
    /* The flush counts as a line: the next one waits an interval. */
    ASSERT(!log_limit_allow(&l, 7500, &n));
    ASSERT(log_limit_allow(&l, 8000, &n));
    ASSERT_INT_EQ(n, 1);
}
