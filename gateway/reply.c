/*
 * reply.c — RESP2/RESP3 encoding (into the byte buffers of sidecar/buf.h).
 *
 * The encoder never validates what it is given beyond what the wire format
 * needs: status and error lines must not contain CR or LF, so those bytes
 * become spaces, exactly as Redis's addReplyError does.
 */
#include "reply.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends prefix, then s with CR/LF turned into spaces, then CRLF. */
static void reply_line(struct buf *b, char prefix, const char *s, size_t n)
{
    buf_reserve(b, n + 3);
    b->data[b->len++] = prefix;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        b->data[b->len++] = (c == '\r' || c == '\n') ? ' ' : c;
    }
    b->data[b->len++] = '\r';
    b->data[b->len++] = '\n';
}

void reply_status(struct buf *b, const char *s)
{
    reply_line(b, '+', s, strlen(s));
}

void reply_error(struct buf *b, const char *s)
{
    reply_line(b, '-', s, strlen(s));
}

void reply_status_len(struct buf *b, const char *s, size_t n)
{
    reply_line(b, '+', s, n);
}

void reply_error_len(struct buf *b, const char *s, size_t n)
{
    reply_line(b, '-', s, n);
}

void reply_errorf(struct buf *b, const char *fmt, ...)
{
    struct buf tmp;
    buf_init(&tmp);
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(&tmp, fmt, ap);
    va_end(ap);
    reply_line(b, '-', tmp.data ? tmp.data : "", tmp.len);
    buf_free(&tmp);
}

static void reply_header(struct buf *b, char prefix, long long n)
{
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%c%lld\r\n", prefix, n);
    buf_append(b, tmp, (size_t)len);
}

void reply_int(struct buf *b, long long v)
{
    reply_header(b, ':', v);
}

void reply_bulk(struct buf *b, const char *p, size_t n)
{
    reply_header(b, '$', (long long)n);
    buf_reserve(b, n + 2);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len++] = '\r';
    b->data[b->len++] = '\n';
}

void reply_bulk_str(struct buf *b, const char *s)
{
    reply_bulk(b, s, strlen(s));
}

void reply_null(struct buf *b, int proto)
{
    buf_append_str(b, proto >= 3 ? "_\r\n" : "$-1\r\n");
}

void reply_null_array(struct buf *b, int proto)
{
    buf_append_str(b, proto >= 3 ? "_\r\n" : "*-1\r\n");
}

void reply_array(struct buf *b, long n)
{
    reply_header(b, '*', n);
}

void reply_map(struct buf *b, int proto, long n)
{
    if (proto >= 3)
        reply_header(b, '%', n);
    else
        reply_header(b, '*', 2 * (long long)n);
}

void reply_set(struct buf *b, int proto, long n)
{
    reply_header(b, proto >= 3 ? '~' : '*', n);
}

void reply_push(struct buf *b, int proto, long n)
{
    reply_header(b, proto >= 3 ? '>' : '*', n);
}

/* Formats d as Redis does for doubles: inf/-inf/nan spelled out, integral
 * values without a fraction, others with 17 significant digits. */
static int format_double(char *out, size_t cap, double d)
{
    if (isinf(d))
        return snprintf(out, cap, "%s", d > 0 ? "inf" : "-inf");
    if (isnan(d))
        return snprintf(out, cap, "nan");
    return snprintf(out, cap, "%.17g", d);
}

void reply_double(struct buf *b, int proto, double d)
{
    char tmp[64];
    int n = format_double(tmp, sizeof tmp, d);
    if (proto >= 3) {
        buf_append(b, ",", 1);
        buf_append(b, tmp, (size_t)n);
        buf_append(b, "\r\n", 2);
    } else {
        reply_bulk(b, tmp, (size_t)n);
    }
}

void reply_bool(struct buf *b, int proto, int v)
{
    if (proto >= 3)
        buf_append_str(b, v ? "#t\r\n" : "#f\r\n");
    else
        buf_append_str(b, v ? ":1\r\n" : ":0\r\n");
}

void reply_verbatim(struct buf *b, int proto, const char *p, size_t n)
{
    if (proto < 3) {
        reply_bulk(b, p, n);
        return;
    }
    reply_header(b, '=', (long long)n + 4);
    buf_append(b, "txt:", 4);
    buf_append(b, p, n);
    buf_append(b, "\r\n", 2);
}
