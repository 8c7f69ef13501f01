/*
 * log.c — logfmt lines on stderr.  One write(2) per line, so lines from the
 * loop thread and from ZooKeeper's threads never interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum log_level min_level = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
    min_level = level;
}

int log_enabled(enum log_level level)
{
    return level >= min_level;
}

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    if (strcmp(s, "warning") == 0)
        return LOG_WARN;
    return -1;
}

char *log_quote(const char *s, size_t n, char *out, size_t cap)
{
    int plain = n > 0;
    for (size_t i = 0; i < n && plain; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f)
            plain = 0;
    }
    size_t o = 0;
    if (cap < 4) {
        if (cap)
            out[0] = 0;
        return out;
    }
    if (!plain)
        out[o++] = '"';
    for (size_t i = 0; i < n && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (plain) {
            out[o++] = (char)c;
        } else if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < ' ' || c >= 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    if (!plain)
        out[o++] = '"';
    out[o] = 0;
    return out;
}

int log_limit_allow(struct log_limit *l, uint64_t now_ms,
                    unsigned long *suppressed)
{
    if (now_ms < l->next_ms) {
        l->suppressed++;
        return 0;
    }
    *suppressed = l->suppressed;
    l->suppressed = 0;
    l->next_ms = now_ms + l->interval_ms;
    return 1;
}

int log_limit_flush(struct log_limit *l, uint64_t now_ms,
                    unsigned long *suppressed)
{
    if (l->suppressed == 0 || now_ms < l->next_ms)
        return 0;
    *suppressed = l->suppressed;
    l->suppressed = 0;
    l->next_ms = now_ms + l->interval_ms;
    return 1;
}

void log_event(enum log_level level, const char *event, const char *fmt, ...)
{
    if (level < min_level)
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s "
                     "event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     level_names[level], event);
    if (fmt && *fmt && n < (int)sizeof line - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
