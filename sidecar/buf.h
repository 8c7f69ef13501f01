/*
 * buf.h — a growable byte buffer.
 *
 * The one buffer type of both layers: the gateway encodes replies into it
 * (gateway/reply.h), the sidecar renders /metrics and HTTP answers into it.
 * Allocation failure aborts: a buffer that cannot grow has no sensible
 * error to return.
 */
#ifndef ZKRESP_BUF_H
#define ZKRESP_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
};

void buf_init(struct buf *b);
void buf_free(struct buf *b);
void buf_reserve(struct buf *b, size_t extra);
void buf_append(struct buf *b, const void *p, size_t n);
void buf_append_str(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Drops the first n bytes. */
void buf_consume(struct buf *b, size_t n);

#endif
