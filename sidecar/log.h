/*
 * log.h — one logfmt line per event on stderr.
 *
 *   ts=2026-11-22T10:00:00.123Z level=info event=zk.connected session=0x1...
 *
 * `event` names what happened; the rest are key=value pairs the caller
 * formats.  Values that may contain spaces are quoted with log_quote().
 * Never pass a password here.
 */
#ifndef ZKRESP_LOG_H
#define ZKRESP_LOG_H

#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level level);
int log_enabled(enum log_level level);
/* Returns the level for "debug", "info", "warn", "error", or -1. */
int log_level_parse(const char *s);

void log_event(enum log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats s[0..n) as a logfmt value into out (quoted and escaped when it
 * needs to be, truncated to fit).  Returns out. */
char *log_quote(const char *s, size_t n, char *out, size_t cap);

/* A line that a client can make repeat at will (a failed AUTH): at most one
 * per interval, the others counted and reported with the next one.  Zero
 * initialised but for interval_ms. */
struct log_limit {
    uint64_t interval_ms;
    uint64_t next_ms;         /* no line before this time */
    unsigned long suppressed; /* lines left out since the last one */
};

/* Whether a line may be written at now_ms.  If so, *suppressed is the
 * number of lines left out since the previous one (the count restarts);
 * if not, this line is counted as left out. */
int log_limit_allow(struct log_limit *l, uint64_t now_ms,
                    unsigned long *suppressed);

/* For a periodic timer: 1 when lines were left out and the interval has
 * passed since the last line written, with their number in *suppressed
 * (the caller writes one summary line, the count restarts); else 0.  So
 * the tail of a burst is reported even when no line follows it. */
int log_limit_flush(struct log_limit *l, uint64_t now_ms,
                    unsigned long *suppressed);

#define log_debug(ev, ...)                                                     \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG))                                            \
            log_event(LOG_DEBUG, ev, __VA_ARGS__);                             \
    } while (0)
#define log_info(ev, ...) log_event(LOG_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...) log_event(LOG_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_event(LOG_ERROR, ev, __VA_ARGS__)

#endif
