/*
 * reply.h — the RESP2/RESP3 reply encoder.
 *
 * Every reply a client sees is built here.  Functions append one RESP frame
 * (or a container header) to a struct buf; `proto` is 2 or 3 and selects the
 * encoding where the two protocols differ.  The buffer (sidecar/buf.h)
 * aborts when it cannot grow.
 */
#ifndef ZKRESP_REPLY_H
#define ZKRESP_REPLY_H

#include "buf.h"

#include <stddef.h>

/* "+s\r\n".  CR and LF inside s are replaced by spaces. */
void reply_status(struct buf *b, const char *s);
/* "-s\r\n"; s carries its code ("ERR ...", "WRONGTYPE ...").  CR and LF
 * inside s are replaced by spaces, as Redis does. */
void reply_error(struct buf *b, const char *s);
/* The same, of n bytes (a Lua string: a NUL inside is sent, as Redis does). */
void reply_status_len(struct buf *b, const char *s, size_t n);
void reply_error_len(struct buf *b, const char *s, size_t n);
void reply_errorf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void reply_int(struct buf *b, long long v);
void reply_bulk(struct buf *b, const char *p, size_t n);
void reply_bulk_str(struct buf *b, const char *s);
/* Null bulk: "$-1" in RESP2, "_" in RESP3. */
void reply_null(struct buf *b, int proto);
/* Null array: "*-1" in RESP2, "_" in RESP3. */
void reply_null_array(struct buf *b, int proto);
void reply_array(struct buf *b, long n);
/* A map of n pairs: "%n" in RESP3, a flat array of 2n in RESP2. */
void reply_map(struct buf *b, int proto, long n);
/* A set: "~n" in RESP3, an array in RESP2. */
void reply_set(struct buf *b, int proto, long n);
/* A push frame: ">n" in RESP3, an array in RESP2. */
void reply_push(struct buf *b, int proto, long n);
/* ",d" in RESP3, a bulk string in RESP2 (Redis's "%.17g" formatting). */
void reply_double(struct buf *b, int proto, double d);
/* "#t"/"#f" in RESP3, ":1"/":0" in RESP2. */
void reply_bool(struct buf *b, int proto, int v);
/* "=n\r\ntxt:..." in RESP3, a bulk string in RESP2. */
void reply_verbatim(struct buf *b, int proto, const char *p, size_t n);

#endif
