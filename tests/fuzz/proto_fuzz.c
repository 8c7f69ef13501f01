/*
 * proto_fuzz.c — libFuzzer harness for the request reader (gateway/proto.c).
 *
 * Each input is a client byte stream.  It is parsed twice: fed whole, and
 * fed in chunks whose sizes come from a generator seeded by the input (so a
 * crash reproduces from the input alone), draining requests after every
 * chunk as a connection does.  Besides the sanitizers' checks, the harness
 * aborts when the two runs disagree (requests, error text or feed result):
 * the outcome must not depend on how the bytes arrive.  The first byte also
 * picks the limits, so that tight limits (pre-authentication style) are
 * exercised as well as Redis's defaults.
 */
#include "proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A running digest of what a reader produced. */
struct outcome {
    uint64_t hash;
    size_t requests;
    int rc;
    char errstr[128];
};

static void mix(struct outcome *o, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        o->hash = (o->hash ^ b[i]) * 0x100000001b3ULL;
}

static void drain(struct proto *p, struct outcome *o)
{
    struct proto_req req;
    enum proto_status st;
    while ((st = proto_next(p, &req)) == PROTO_REQUEST) {
        if (req.argc <= 0 || req.bytes == 0)
            abort();
        mix(o, &req.argc, sizeof req.argc);
        mix(o, &req.bytes, sizeof req.bytes);
        for (int i = 0; i < req.argc; i++) {
            if (req.argv[i].ptr[req.argv[i].len] != '\0')
                abort();
            mix(o, &req.argv[i].len, sizeof req.argv[i].len);
            mix(o, req.argv[i].ptr, req.argv[i].len);
        }
        o->requests++;
        proto_req_free(&req);
    }
    if (st == PROTO_ERROR) {
        strncpy(o->errstr, proto_errstr(p), sizeof o->errstr - 1);
        if (o->errstr[0] == '\0' || proto_next(p, &req) != PROTO_ERROR)
            abort();
    }
}

/* Parses data[0..size) fed in chunks of at most max_chunk bytes (0: all at
 * once). */
static void run(const struct proto_limits *lim, const uint8_t *data,
                size_t size, size_t max_chunk, uint64_t seed, struct outcome *o)
{
    memset(o, 0, sizeof *o);
    o->hash = 0xcbf29ce484222325ULL;
    struct proto *p = proto_create(lim);
    if (p == NULL)
        abort();
    size_t i = 0;
    while (i < size) {
        size_t k = size - i;
        if (max_chunk) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            k = 1 + seed % max_chunk;
            if (k > size - i)
                k = size - i;
        }
        int rc = proto_feed(p, (const char *)data + i, k);
        if (o->rc && rc != o->rc)
            abort(); /* errors are sticky */
        o->rc = rc;
        i += k;
        if (max_chunk && rc == 0)
            drain(p, o);
        /* Never more pending than received. */
        if (proto_pending(p) > i)
            abort();
    }
    drain(p, o);
    proto_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_limits lim = {
        .max_args = 1024 * 1024,
        .max_bulk = 512 * 1024 * 1024,
        .max_inline = 64 * 1024,
        .max_query = 1024 * 1024 * 1024,
    };
    if (size > 0 && (data[0] & 3) == 1) {
        lim.max_args = 4;
        lim.max_bulk = 16;
        lim.max_inline = 32;
        lim.max_query = 64;
    } else if (size > 0 && (data[0] & 3) == 2) {
        lim.max_args = 1;
        lim.max_bulk = 0;
        lim.max_inline = 1;
        lim.max_query = 8;
    }

    uint64_t seed = 0x9E3779B97F4A7C15ULL ^ size;
    for (size_t i = 0; i < size && i < 16; i++)
        seed = seed * 31 + data[i];
    if (seed == 0)
        seed = 1;

    struct outcome whole, bytes, chunks;
    run(&lim, data, size, 0, seed, &whole);
    run(&lim, data, size, 1, seed, &bytes);
    run(&lim, data, size, 1 + (seed & 63), seed, &chunks);
    if (whole.hash != bytes.hash || whole.requests != bytes.requests ||
        whole.rc != bytes.rc || strcmp(whole.errstr, bytes.errstr) != 0)
        abort();
    if (whole.hash != chunks.hash || whole.requests != chunks.requests ||
        whole.rc != chunks.rc || strcmp(whole.errstr, chunks.errstr) != 0)
        abort();
    return 0;
}
