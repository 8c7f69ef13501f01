/*
 * test_proto.c — the request reader (gateway/proto.c).
 *
 * Most cases go through expect(): the input is fed whole, byte by byte, and
 * in random chunks (draining requests after every feed, as a connection
 * does), and each way must give the same requests and the same final state.
 * Requests are rendered as "[arg arg]" with bytes outside printable ASCII,
 * ' ', '\\', '[', ']' and '!' as \xHH; a protocol error is rendered as "!" and
 * proto_errstr().  The cases follow Redis's tests/unit/protocol.tcl.
 */
#include "errors.h"
#include "proto.h"
#include "reply.h"
#include "unit.h"

#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifdef HAVE_ASAN
/* From <sanitizer/allocator_interface.h>, which not every compiler ships. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#define KB 1024
#define MB (1024 * 1024)

/* Redis's defaults, with a 1 GiB query limit. */
static struct proto_limits lim_redis(void)
{
    struct proto_limits l = {
        .max_args = 1024 * 1024,
        .max_bulk = 512 * (size_t)MB,
        .max_inline = 64 * KB,
        .max_query = 1024 * (size_t)MB,
    };
    return l;
}

/* Bytes currently allocated by this process (0 when unknown). */
static size_t allocated_bytes(void)
{
#ifdef HAVE_ASAN
    return __sanitizer_get_current_allocated_bytes();
#else
    return mallinfo2().uordblks;
#endif
}

static void render_arg(struct buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c > 0x20 && c < 0x7f && !strchr("\\[]!", c))
            buf_append(out, &c, 1);
        else
            buf_printf(out, "\\x%02x", c);
    }
}

/* Takes every queued request, appending its rendering to out, and frees
 * it.  Appends "!<errstr>" when the reader reports an error.  Fails the test
 * when an argument is not NUL-terminated or proto_next() misbehaves. */
static void drain(struct proto *p, struct buf *out)
{
    struct proto_req req;
    enum proto_status st;
    while ((st = proto_next(p, &req)) == PROTO_REQUEST) {
        ASSERT(req.argc > 0);
        ASSERT(req.bytes > 0);
        buf_append(out, "[", 1);
        for (int i = 0; i < req.argc; i++) {
            if (i)
                buf_append(out, " ", 1);
            ASSERT(req.argv[i].ptr != NULL);
            ASSERT(req.argv[i].ptr[req.argv[i].len] == '\0');
            render_arg(out, req.argv[i].ptr, req.argv[i].len);
        }
        buf_append(out, "]", 1);
        proto_req_free(&req);
    }
    if (st == PROTO_ERROR) {
        buf_append(out, "!", 1);
        buf_append_str(out, proto_errstr(p));
        /* Sticky. */
        ASSERT(proto_next(p, &req) == PROTO_ERROR);
    } else {
        ASSERT(st == PROTO_NEED_MORE);
    }
}

enum feed_mode { WHOLE, BYTES, SMALL_CHUNKS, LARGE_CHUNKS, NMODES };
static const char *mode_name[] = {"whole", "byte by byte", "small chunks",
                                  "large chunks"};

/* Feeds in[0..n) to a new reader in the given way, renders what comes out
 * into out.  *rc gets the first non-zero proto_feed() result (or 0); after
 * it, every proto_feed() must return the same. */
static void run(const struct proto_limits *lim, const char *in, size_t n,
                enum feed_mode mode, struct buf *out, int *rc)
{
    struct proto *p = proto_create(lim);
    ASSERT(p != NULL);
    *rc = 0;
    size_t i = 0;
    while (i < n) {
        size_t k = n - i;
        if (mode == BYTES)
            k = 1;
        else if (mode == SMALL_CHUNKS)
            k = 1 + unit_rand() % 17;
        else if (mode == LARGE_CHUNKS)
            k = 1 + unit_rand() % 5000;
        if (k > n - i)
            k = n - i;
        int r = proto_feed(p, in + i, k);
        if (*rc) {
            if (r != *rc)
                proto_free(p);
            ASSERT_INT_EQ(r, *rc);
        }
        *rc = r;
        i += k;
        if (mode != WHOLE && r == 0)
            drain(p, out);
        if (unit_failed())
            break;
    }
    if (!unit_failed())
        drain(p, out);
    /* An empty feed changes nothing. */
    if (!unit_failed())
        ASSERT_INT_EQ(proto_feed(p, "", 0), *rc);
    proto_free(p);
}

/* The core check: in[0..n) gives `want` (see the file comment) whichever
 * way it is fed; *rc_out (if not NULL) gets the feed result. */
static void expect_lim(const struct proto_limits *lim, const char *in, size_t n,
                       const char *want, int *rc_out)
{
    for (int mode = 0; mode < NMODES; mode++) {
        struct buf out;
        buf_init(&out);
        int rc = 0;
        unit_context("fed %s", mode_name[mode]);
        run(lim, in, n, (enum feed_mode)mode, &out, &rc);
        buf_append(&out, "", 1);
        if (!unit_failed()) {
            int bad = strcmp(out.data, want) != 0;
            if (bad)
                unit_fail(__FILE__, __LINE__, "got \"%s\", want \"%s\"",
                          out.data, want);
            /* A reported error and a feed error go together. */
            else if ((strchr(want, '!') != NULL) != (rc != 0))
                unit_fail(__FILE__, __LINE__, "feed returned %d for \"%s\"", rc,
                          want);
        }
        buf_free(&out);
        if (unit_failed())
            return;
        if (rc_out)
            *rc_out = rc;
    }
    unit_context(NULL);
}

static void expect_n(const char *in, size_t n, const char *want)
{
    struct proto_limits lim = lim_redis();
    expect_lim(&lim, in, n, want, NULL);
}

/* For string literals (which may contain NUL bytes). */
#define EXPECT(in, want) CHECK(expect_n((in), sizeof(in) - 1, (want)))
#define EXPECT_LIM(lim, in, want)                                              \
    CHECK(expect_lim((lim), (in), sizeof(in) - 1, (want), NULL))

#define PING "*1\r\n$4\r\nPING\r\n"

TEST(proto_empty_query)
{
    EXPECT("\r\n", "");
    EXPECT("\r\n" PING, "[PING]");
    EXPECT("\n" PING, "[PING]");
}

TEST(proto_negative_multibulk_length)
{
    EXPECT("*-10\r\n" PING, "[PING]");
    EXPECT("*-1\r\n" PING, "[PING]");
    EXPECT("*-9223372036854775808\r\n" PING, "[PING]");
}

TEST(proto_zero_multibulk_length)
{
    EXPECT("*0\r\n" PING, "[PING]");
    EXPECT("*0\r\n*0\r\n*0\r\n", "");
}

TEST(proto_out_of_range_multibulk_length)
{
    EXPECT("*3000000000\r\n", "!Protocol error: invalid multibulk length");
    EXPECT("*1048577\r\n", "!Protocol error: invalid multibulk length");
    EXPECT("*9223372036854775808\r\n",
           "!Protocol error: invalid multibulk length");
    /* At the limit: waits for the arguments, allocates nothing for them. */
    EXPECT("*1048576\r\n", "");
    /* Earlier requests still come out before the error. */
    EXPECT(PING "*3000000000\r\n" PING,
           "[PING]!Protocol error: invalid multibulk length");
}

TEST(proto_bad_multibulk_count)
{
    static const char *bad[] =
        {
            "*\r\n",     "*abc\r\n", "*+1\r\n",  "*01\r\n",
            "*-0\r\n",   "* 1\r\n",  "*1 \r\n",  "*1x\r\n",
            "*-\r\n",    "*1.0\r\n", "*1\n\r\n", /* the line is "1\n" */
            "*1\rx",     /* '\r' must be followed by '\n' */
            "*1\x00\r\n" /* NUL is a byte like any other */
        };
    static const size_t len[] = {3, 6, 5, 5, 5, 5, 5, 5, 4, 6, 5, 4, 5};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(expect_n(bad[i], len[i],
                       "!Protocol error: invalid multibulk length"));
    }
}

TEST(proto_wrong_payload_header)
{
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
           "!Protocol error: expected '$', got 'f'");
    /* The '$' is checked once the line is complete, as Redis does. */
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz", "");
    /* An empty line: the byte Redis reports is the '\r' itself, shown as a
     * space as in every error line. */
    EXPECT("*1\r\n\r\n", "!Protocol error: expected '$', got ' '");
    EXPECT("*1\r\n\rx", "!Protocol error: expected '$', got ' '");
    EXPECT("*1\r\n\n\r\n", "!Protocol error: expected '$', got ' '");
    /* A NUL byte ends the text where Redis's reply ends too. */
    EXPECT("*1\r\n\x00\r\n", "!Protocol error: expected '$', got '");
}

TEST(proto_negative_bulk_length)
{
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
           "!Protocol error: invalid bulk length");
    /* A nil bulk is no argument. */
    EXPECT("*1\r\n$-1\r\n", "!Protocol error: invalid bulk length");
}

TEST(proto_out_of_range_bulk_length)
{
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
           "!Protocol error: invalid bulk length");
    EXPECT("*1\r\n$536870913\r\n", "!Protocol error: invalid bulk length");
    EXPECT("*1\r\n$99999999999999999999\r\n",
           "!Protocol error: invalid bulk length");
    /* At the limit it waits for the payload. */
    EXPECT("*1\r\n$536870912\r\n", "");
}

TEST(proto_non_numeric_bulk_length)
{
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n",
           "!Protocol error: invalid bulk length");
    static const char *bad[] = {"$\r\n",    "$+1\r\n", "$01\r\n",
                                "$-0\r\n",  "$ 1\r\n", "$1 \r\n",
                                "$0x1\r\n", "$1\rx",   "$1\n\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char in[64];
        int n = snprintf(in, sizeof in, "*1\r\n%s", bad[i]);
        CHECK(expect_n(in, (size_t)n, "!Protocol error: invalid bulk length"));
    }
}

TEST(proto_multibulk_not_followed_by_bulk)
{
    EXPECT("*1\r\nfoo\r\n", "!Protocol error: expected '$', got 'f'");
}

TEST(proto_nested_and_typed_items)
{
    /* Only bulk strings may follow "*N": arrays, integers, status and error
     * lines are refused with the byte that was found. */
    EXPECT("*1\r\n*1\r\n$1\r\na\r\n", "!Protocol error: expected '$', got '*'");
    EXPECT("*2\r\n$3\r\nGET\r\n*1\r\n$1\r\na\r\n",
           "!Protocol error: expected '$', got '*'");
    EXPECT("*1\r\n:1\r\n", "!Protocol error: expected '$', got ':'");
    EXPECT("*1\r\n+OK\r\n", "!Protocol error: expected '$', got '+'");
    EXPECT("*1\r\n-ERR x\r\n", "!Protocol error: expected '$', got '-'");
    EXPECT("*1\r\n_\r\n", "!Protocol error: expected '$', got '_'");
    EXPECT("*1\r\n%1\r\n", "!Protocol error: expected '$', got '%'");
}

TEST(proto_unbalanced_quotes)
{
    EXPECT("set \"\"\"test-key\"\"\" test-value\r\nping\r\n",
           "!Protocol error: unbalanced quotes in request");
    EXPECT("PING\r\nset \"abc\r\nping\r\n",
           "[PING]!Protocol error: unbalanced quotes in request");
}

TEST(proto_desync_regression)
{
    /* Redis's "Protocol desync regression test": a first byte, then
     * "payload" for ever without a newline; the reader must give up after
     * 64 KiB.  "\x00" and "$\x00" start inline requests, "*\x00" a count
     * line. */
    const char *firsts[] = {"\x00", "*\x00", "$\x00", ""};
    const char *wants[] = {"!Protocol error: too big inline request",
                           "!Protocol error: too big mbulk count string",
                           "!Protocol error: too big inline request",
                           "!Protocol error: too big inline request"};
    struct buf in;
    buf_init(&in);
    for (int i = 0; i < 4; i++) {
        in.len = 0;
        buf_append(&in, firsts[i], i < 3 ? strlen(firsts[i]) + 1 : 0);
        while (in.len < 70 * KB)
            buf_append_str(&in, "payload");
        expect_n(in.data, in.len, wants[i]);
        if (unit_failed())
            break;
    }
    buf_free(&in);
}

TEST(proto_nul_bytes_in_bulk)
{
    EXPECT("*3\r\n$3\r\nSET\r\n$3\r\na\x00"
           "b\r\n$1\r\n\x00\r\n",
           "[SET a\\x00b \\x00]");
    EXPECT("*1\r\n$0\r\n\r\n", "[]");
    /* Check the lengths directly, too. */
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    static const char in[] = "*2\r\n$3\r\n\x00\x00\x00\r\n$0\r\n\r\n";
    ASSERT_INT_EQ(proto_feed(p, in, sizeof in - 1), 0);
    struct proto_req req;
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.argc, 2);
    ASSERT_MEM_EQ(req.argv[0].ptr, req.argv[0].len, "\0\0\0", 3);
    ASSERT_INT_EQ(req.argv[1].len, 0);
    ASSERT_INT_EQ(req.argv[1].ptr[0], 0);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_NEED_MORE);
    proto_free(p);
}

TEST(proto_binary_payload)
{
    /* CR, LF, '*' and '$' inside a payload are data. */
    EXPECT("*2\r\n$4\r\na\r\nb\r\n$6\r\n*1\r\n$1\r\n",
           "[a\\x0d\\x0ab *1\\x0d\\x0a$1]");
    struct buf in;
    buf_init(&in);
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    buf_append_str(&in, "*2\r\n$256\r\n");
    buf_append(&in, all, 256);
    buf_append_str(&in, "\r\n$256\r\n");
    buf_append(&in, all, 256);
    buf_append_str(&in, "\r\n");
    struct buf want;
    buf_init(&want);
    buf_append_str(&want, "[");
    render_arg(&want, all, 256);
    buf_append_str(&want, " ");
    render_arg(&want, all, 256);
    buf_append(&want, "]", 2);
    expect_n(in.data, in.len, want.data);
    buf_free(&in);
    buf_free(&want);
}

TEST(proto_missing_crlf)
{
    /* Redis skips any two bytes after a payload; this reader wants CRLF. */
    EXPECT("*1\r\n$4\r\nPINGxx",
           "!Protocol error: bulk data not followed by CRLF");
    EXPECT("*1\r\n$4\r\nPING\rx",
           "!Protocol error: bulk data not followed by CRLF");
    EXPECT("*1\r\n$4\r\nPING\n\r",
           "!Protocol error: bulk data not followed by CRLF");
    EXPECT("*2\r\n$4\r\nPING" PING,
           "!Protocol error: bulk data not followed by CRLF");
    /* A length one too short or too long. */
    EXPECT("*1\r\n$3\r\nPING\r\n",
           "!Protocol error: bulk data not followed by CRLF");
    EXPECT("*1\r\n$5\r\nPING\r\n" PING,
           "!Protocol error: bulk data not followed by CRLF");
    /* Header lines end in CRLF only. */
    EXPECT("*1\n$4\r\nPING\r\n", "!Protocol error: invalid multibulk length");
    EXPECT("*1\r\n$4\nPING\r\n", "!Protocol error: invalid bulk length");
    /* Just unfinished: waits. */
    EXPECT("*1\r\n$4\r\nPING", "");
    EXPECT("*1\r\n$4\r\nPING\r", "");
    EXPECT("*1\r", "");
    EXPECT("*1\r\n$4\r", "");
}

TEST(proto_header_line_too_long)
{
    struct buf in;
    buf_init(&in);
    /* The count line: 64 KiB counting the '*' is still waited for. */
    buf_append_str(&in, "*");
    while (in.len < 64 * KB)
        buf_append_str(&in, "1");
    CHECK(expect_n(in.data, in.len, ""));
    buf_append_str(&in, "1");
    CHECK(expect_n(in.data, in.len,
                   "!Protocol error: too big mbulk count string"));
    in.len--;
    buf_append_str(&in, "\r\n");
    CHECK(
        expect_n(in.data, in.len, "!Protocol error: invalid multibulk length"));

    /* The bulk length line. */
    in.len = 0;
    buf_append_str(&in, "*1\r\n$");
    while (in.len < 4 + 64 * KB)
        buf_append_str(&in, "1");
    CHECK(expect_n(in.data, in.len, ""));
    buf_append_str(&in, "1");
    CHECK(expect_n(in.data, in.len,
                   "!Protocol error: too big bulk count string"));
    /* A line that is not "$..." is measured the same way. */
    in.len = 0;
    buf_append_str(&in, "*1\r\n");
    while (in.len < 5 + 64 * KB)
        buf_append_str(&in, "x");
    CHECK(expect_n(in.data, in.len,
                   "!Protocol error: too big bulk count string"));
    buf_free(&in);
}

TEST(proto_inline_basic)
{
    EXPECT("PING\r\n", "[PING]");
    EXPECT("PING\n", "[PING]");
    EXPECT("set foo bar\r\n", "[set foo bar]");
    EXPECT("  set   foo\tbar  \r\n", "[set foo bar]");
    EXPECT("PING", "");
    /* Only one '\r' before the '\n' belongs to the line end; others are
     * blanks. */
    EXPECT("PING\r\r\n", "[PING]");
    EXPECT("a\rb\r\n", "[a b]");
    /* Bytes that are no blanks are kept, NUL and non-ASCII included. */
    EXPECT("GET a\x00"
           "b \xc3\xa9\r\n",
           "[GET a\\x00b \\xc3\\xa9]");
    /* A line starting with '$' or ':' is inline, as in Redis. */
    EXPECT("$3\r\n", "[$3]");
    EXPECT(":1\r\n", "[:1]");
}

TEST(proto_inline_quotes_and_escapes)
{
    EXPECT("SET \"a b\" 'c d'\r\n", "[SET a\\x20b c\\x20d]");
    EXPECT("\"\\x41\\x4a\\x4b\\xff\\x00\"\r\n", "[AJK\\xff\\x00]");
    EXPECT("\"\\n\\r\\t\\b\\a\\\\\\\"\\z\"\r\n",
           "[\\x0a\\x0d\\x09\\x08\\x07\\x5c\"z]");
    /* "\x" without two hex digits is an escaped 'x'. */
    EXPECT("\"\\x4\" \"\\xg1\"\r\n", "[x4 xg1]");
    EXPECT("'it\\'s' 'a\\nb' 'a\"b'\r\n", "[it's a\\x5cnb a\"b]");
    EXPECT("\"\" ''\r\n", "[ ]");
    EXPECT("a\"b c\" d\r\n", "[ab\\x20c d]");
    EXPECT("a'b c' d\r\n", "[ab\\x20c d]");
    EXPECT("\"a\"\t'b'\r\n", "[a b]");
    /* A closing quote followed by any blank, '\v' and '\f' included. */
    EXPECT("\"a\"\x0b\"b\"\x0c\r\n", "[a b]");
    /* Blanks inside quotes are kept; the line end still ends the line. */
    EXPECT("\"a\r\nb\"\r\n", "!Protocol error: unbalanced quotes in request");
    EXPECT("\"a\rb\"\r\n", "[a\\x0db]");
}

TEST(proto_inline_unbalanced)
{
    static const char *bad[] = {
        "\"abc\r\n",     "'abc\r\n", "\"abc\\\"\r\n", "\"abc\\\r\n",
        "\"a\"b\r\n",    "'a'b\r\n", "a\"b\"c\r\n",   "\"a\"\"b\"\r\n",
        "SET k \"v\r\n", "\"\r\n",   "'\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(expect_n(bad[i], strlen(bad[i]),
                       "!Protocol error: unbalanced quotes in request"));
}

TEST(proto_inline_blanks)
{
    /* An unquoted argument does not end at '\v' or '\f' (sdssplitargs's
     * switch), but leading ones are skipped (isspace). */
    EXPECT("a\x0b"
           "b\r\n",
           "[a\\x0bb]");
    EXPECT("\x0b\x0c"
           "a\x0c\r\n",
           "[a\\x0c]");
    EXPECT(" \t \x0b\r\n", "");
}

TEST(proto_empty_lines)
{
    EXPECT("\r\n\r\n\n  \r\n\t\r\n" PING "\r\n", "[PING]");
    EXPECT("\n\n\n", "");
}

TEST(proto_pipeline)
{
    EXPECT(PING "PING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
                "*0\r\nGET k\n*-1\r\n\r\n" PING,
           "[PING][PING][SET k v][GET k][PING]");
    /* Many requests in one feed come out one at a time, in order. */
    struct buf in, want;
    buf_init(&in);
    buf_init(&want);
    for (int i = 0; i < 2000; i++) {
        char arg[32];
        int n = snprintf(arg, sizeof arg, "%d", i);
        if (i % 3 == 0)
            buf_printf(&in, "ECHO %s\r\n", arg);
        else
            buf_printf(&in, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", n, arg);
        buf_printf(&want, "[ECHO %s]", arg);
    }
    buf_append(&want, "", 1);
    expect_n(in.data, in.len, want.data);
    buf_free(&in);
    buf_free(&want);
}

TEST(proto_incomplete_waits)
{
    EXPECT("*", "");
    EXPECT("*2", "");
    EXPECT("*2\r\n", "");
    EXPECT("*2\r\n$3", "");
    EXPECT("*2\r\n$3\r\nGET\r\n", "");
    EXPECT("*2\r\n$3\r\nGET\r\n$1\r\nk", "");
    EXPECT("GET k", "");
    EXPECT("*1\r\nfoo", "");
    EXPECT(PING "*2\r\n$3\r\nGET", "[PING]");
}

TEST(proto_limit_max_args)
{
    struct proto_limits lim = lim_redis();
    lim.max_args = 2;
    EXPECT_LIM(&lim, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "[GET k]");
    EXPECT_LIM(&lim, "*3\r\n", "!Protocol error: invalid multibulk length");
    EXPECT_LIM(&lim, "GET k\r\n", "[GET k]");
    EXPECT_LIM(&lim, "SET k v\r\n",
               "!Protocol error: too many arguments in inline request");
    lim.max_args = (size_t)INT_MAX + 10;
    EXPECT_LIM(&lim, "*2147483648\r\n",
               "!Protocol error: invalid multibulk length");
    EXPECT_LIM(&lim, "*2147483647\r\n", "");
}

TEST(proto_limit_max_bulk)
{
    struct proto_limits lim = lim_redis();
    lim.max_bulk = 4;
    EXPECT_LIM(&lim, "*1\r\n$4\r\nPING\r\n", "[PING]");
    EXPECT_LIM(&lim, "*1\r\n$5\r\n", "!Protocol error: invalid bulk length");
    lim.max_bulk = 0;
    EXPECT_LIM(&lim, "*1\r\n$0\r\n\r\n", "[]");
    EXPECT_LIM(&lim, "*1\r\n$1\r\n", "!Protocol error: invalid bulk length");
}

TEST(proto_limit_max_inline)
{
    struct proto_limits lim = lim_redis();
    lim.max_inline = 8;
    /* The line without its '\n' may have max_inline bytes ('\r' counts). */
    EXPECT_LIM(&lim, "GET kkkk\n", "[GET kkkk]");
    EXPECT_LIM(&lim, "GET kkk\r\n", "[GET kkk]");
    EXPECT_LIM(&lim, "GET kkkk\r\n", "!Protocol error: too big inline request");
    EXPECT_LIM(&lim, "GET kkkkk", "!Protocol error: too big inline request");
    EXPECT_LIM(&lim, "GET kkkk", "");
    /* Multibulk requests are not inline. */
    EXPECT_LIM(&lim, "*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n",
               "[GET 0123456789]");
    /* Redis's 64 KiB: a 65536-byte line is fine, one more is not. */
    lim = lim_redis();
    struct buf in, want;
    buf_init(&in);
    buf_init(&want);
    buf_append_str(&in, "ECHO ");
    buf_append_str(&want, "[ECHO ");
    while (in.len < 64 * KB) {
        buf_append_str(&in, "x");
        buf_append_str(&want, "x");
    }
    buf_append(&want, "]", 2);
    buf_append_str(&in, "\n");
    expect_lim(&lim, in.data, in.len, want.data, NULL);
    in.len--;
    buf_append_str(&in, "x\n");
    if (!unit_failed())
        expect_lim(&lim, in.data, in.len,
                   "!Protocol error: too big inline request", NULL);
    buf_free(&in);
    buf_free(&want);
}

TEST(proto_limit_max_query)
{
    struct proto_limits lim = lim_redis();
    /* PING is 14 bytes on the wire. */
    lim.max_query = 14;
    int rc = 0;
    EXPECT_LIM(&lim, PING PING PING, "[PING][PING][PING]");
    CHECK(expect_lim(&lim, "*1\r\n$5\r\nPINGX\r\n", 15,
                     "!Protocol error: query buffer limit exceeded", &rc));
    ASSERT_INT_EQ(rc, ZR_ELIMIT);
    /* Refused as soon as the 15th byte arrives, complete or not. */
    EXPECT_LIM(&lim, "*1\r\n$5\r\nPINGX\r", "");
    EXPECT_LIM(&lim, "*1\r\n$6\r\nPINGXY", "");
    EXPECT_LIM(&lim, "*1\r\n$6\r\nPINGXY\r",
               "!Protocol error: query buffer limit exceeded");
    EXPECT_LIM(&lim, "PING PING PING\r\n",
               "!Protocol error: query buffer limit exceeded");
    /* Empty lines are requests of their own. */
    EXPECT_LIM(&lim, "\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n" PING, "[PING]");
    /* An announced size alone does not count. */
    EXPECT_LIM(&lim, "*1\r\n$100\r\n", "");
    /* Earlier requests come out before the error. */
    CHECK(expect_lim(&lim, PING "ECHO 12345678901\r\n", 33,
                     "[PING]!Protocol error: query buffer limit exceeded",
                     &rc));
    ASSERT_INT_EQ(rc, ZR_ELIMIT);
    /* A protocol error is ZR_EPROTO. */
    CHECK(expect_lim(&lim, "*x\r\n", 4,
                     "!Protocol error: invalid multibulk length", &rc));
    ASSERT_INT_EQ(rc, ZR_EPROTO);
}

TEST(proto_error_is_sticky)
{
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    ASSERT(p != NULL);
    ASSERT_STR_EQ(proto_errstr(p), "");
    ASSERT_INT_EQ(proto_feed(p, PING PING "*x\r\n" PING, 46), ZR_EPROTO);
    ASSERT_INT_EQ(proto_feed(p, PING, 14), ZR_EPROTO);
    struct proto_req req;
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    proto_req_free(&req);
    for (int i = 0; i < 3; i++)
        ASSERT_INT_EQ(proto_next(p, &req), PROTO_ERROR);
    ASSERT_STR_EQ(proto_errstr(p), "Protocol error: invalid multibulk length");
    ASSERT_INT_EQ(proto_pending(p), 0);
    proto_free(p);

    /* Freeing a reader with queued requests and an error frees them. */
    p = proto_create(&lim);
    ASSERT_INT_EQ(proto_feed(p, PING PING "*x\r\n", 32), ZR_EPROTO);
    proto_free(p);
}

TEST(proto_pending)
{
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    struct proto_req req;
    ASSERT_INT_EQ(proto_pending(p), 0);
    ASSERT_INT_EQ(proto_feed(p, "*1\r\n$4\r\nPI", 10), 0);
    ASSERT_INT_EQ(proto_pending(p), 10);
    ASSERT_INT_EQ(proto_feed(p, "NG\r\nPING\r\nGET", 13), 0);
    ASSERT_INT_EQ(proto_pending(p), 23);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.bytes, 14);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_pending(p), 9);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.bytes, 6);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_pending(p), 3);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_NEED_MORE);
    ASSERT_INT_EQ(proto_feed(p, " k\r\n", 4), 0);
    ASSERT_INT_EQ(proto_pending(p), 7);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_pending(p), 0);
    /* Skipped requests are not pending. */
    ASSERT_INT_EQ(proto_feed(p, "\r\n*0\r\n*-1\r\n  \r\n", 15), 0);
    ASSERT_INT_EQ(proto_pending(p), 0);
    ASSERT_INT_EQ(proto_feed(p, "*", 1), 0);
    ASSERT_INT_EQ(proto_pending(p), 1);
    ASSERT_INT_EQ(proto_feed(p, "1\r", 2), 0);
    ASSERT_INT_EQ(proto_pending(p), 3);
    proto_free(p);
}

TEST(proto_request_bytes)
{
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    struct proto_req req;
    static const char in[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
                             "\r\n"
                             "GET k\n"
                             "*0\r\n"
                             "  GET  k  \r\n";
    ASSERT_INT_EQ(proto_feed(p, in, sizeof in - 1), 0);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.bytes, 20);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.bytes, 6);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.bytes, 12);
    ASSERT_INT_EQ(req.argc, 2);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_NEED_MORE);
    proto_free(p);
}

TEST(proto_no_prealloc)
{
    /* Announcing a million arguments and half a gigabyte allocates only for
     * what was received. */
    struct proto_limits lim = lim_redis();
    size_t before = allocated_bytes();
    struct proto *p = proto_create(&lim);
    ASSERT_INT_EQ(proto_feed(p, "*1048576\r\n$536870912\r\n", 22), 0);
    char chunk[1000];
    memset(chunk, 'x', sizeof chunk);
    ASSERT_INT_EQ(proto_feed(p, chunk, sizeof chunk), 0);
    size_t during = allocated_bytes();
    ASSERT(during < before + 256 * KB);
    ASSERT_INT_EQ(proto_pending(p), 1022);
    proto_free(p);
}

TEST(proto_big_bulk)
{
    /* 8 MiB in 64 KiB reads, then a small request: the big buffer goes. */
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    size_t size = 8 * MB;
    char *data = malloc(size);
    ASSERT(data != NULL);
    for (size_t i = 0; i < size; i++)
        data[i] = (char)(i * 131 + (i >> 11));
    char hdr[64];
    int hn = snprintf(hdr, sizeof hdr, "*2\r\n$3\r\nSET\r\n$%zu\r\n", size);
    size_t before = allocated_bytes();
    ASSERT_INT_EQ(proto_feed(p, hdr, (size_t)hn), 0);
    for (size_t off = 0; off < size; off += 64 * KB)
        ASSERT_INT_EQ(proto_feed(p, data + off, 64 * KB), 0);
    ASSERT_INT_EQ(proto_pending(p), (size_t)hn + size);
    ASSERT_INT_EQ(proto_feed(p, "\r\n", 2), 0);
    struct proto_req req;
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    ASSERT_INT_EQ(req.argc, 2);
    ASSERT_MEM_EQ(req.argv[1].ptr, req.argv[1].len, data, size);
    ASSERT_INT_EQ(req.bytes, (size_t)hn + size + 2);
    proto_req_free(&req);
    ASSERT_INT_EQ(proto_feed(p, PING, 14), 0);
    ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
    proto_req_free(&req);
    size_t after = allocated_bytes();
    ASSERT(after < before + 256 * KB);
    free(data);
    proto_free(p);
}

/* Writes arg as one inline argument: quoted, with \xHH for everything but
 * letters and digits. */
static void inline_arg(struct buf *b, const unsigned char *s, size_t n)
{
    buf_append(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9'))
            buf_append(b, &s[i], 1);
        else
            buf_printf(b, "\\x%02X", s[i]);
    }
    buf_append(b, "\"", 1);
}

TEST(proto_random_roundtrip)
{
    /* Random requests, written as RESP or inline at random, fed in random
     * chunks: the arguments come back exactly. */
    for (int round = 0; round < 20; round++) {
        struct buf in, want;
        buf_init(&in);
        buf_init(&want);
        for (int r = 0; r < 100; r++) {
            int argc = 1 + (int)(unit_rand() % 6);
            int as_inline = unit_rand() % 4 == 0;
            if (!as_inline)
                buf_printf(&in, "*%d\r\n", argc);
            buf_append(&want, "[", 1);
            for (int a = 0; a < argc; a++) {
                unsigned char arg[300];
                size_t n = unit_rand() % (unit_rand() % 8 ? 20 : 300);
                for (size_t i = 0; i < n; i++)
                    arg[i] = unit_rand() % 2
                                 ? (unsigned char)unit_rand()
                                 : "\r\n*$ \"'\\a"[unit_rand() % 10];
                if (a)
                    buf_append(&want, " ", 1);
                render_arg(&want, (const char *)arg, n);
                if (as_inline) {
                    if (a)
                        buf_append(&in, " ", 1);
                    inline_arg(&in, arg, n);
                } else {
                    buf_printf(&in, "$%zu\r\n", n);
                    buf_append(&in, arg, n);
                    buf_append(&in, "\r\n", 2);
                }
            }
            if (as_inline)
                buf_append_str(&in, unit_rand() % 2 ? "\r\n" : "\n");
            buf_append(&want, "]", 1);
        }
        buf_append(&want, "", 1);
        expect_n(in.data, in.len, want.data);
        buf_free(&in);
        buf_free(&want);
        if (unit_failed())
            return;
    }
}

/* Before AUTH, Redis's tight limits: 10 arguments, 16 KiB per argument;
 * afterwards the configured ones. */
TEST(proto_unauthenticated_limits)
{
    struct proto_limits lim = lim_redis();
    struct proto *p = proto_create(&lim);
    ASSERT(p != NULL);
    proto_set_authenticated(p, 0);
    const char ok[] = "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n";
    ASSERT_INT_EQ(proto_feed(p, ok, sizeof ok - 1), 0);
    struct buf out;
    buf_init(&out);
    drain(p, &out);
    buf_append(&out, "", 1);
    ASSERT_STR_EQ(out.data, "[AUTH pw]");
    const char many[] = "*11\r\n";
    ASSERT(proto_feed(p, many, sizeof many - 1) != 0);
    ASSERT_STR_EQ(proto_errstr(p),
                  "Protocol error: unauthenticated multibulk length");
    proto_free(p);

    p = proto_create(&lim);
    proto_set_authenticated(p, 0);
    const char big[] = "*2\r\n$3\r\nSET\r\n$16385\r\n";
    ASSERT(proto_feed(p, big, sizeof big - 1) != 0);
    ASSERT_STR_EQ(proto_errstr(p),
                  "Protocol error: unauthenticated bulk length");
    proto_free(p);

    /* Once authenticated, the same requests are fine. */
    p = proto_create(&lim);
    proto_set_authenticated(p, 0);
    proto_set_authenticated(p, 1);
    const char eleven[] = "*11\r\n";
    ASSERT_INT_EQ(proto_feed(p, eleven, sizeof eleven - 1), 0);
    ASSERT_INT_EQ(proto_feed(p, big + 4, sizeof big - 5), 0);
    proto_free(p);
    buf_free(&out);
}

/* Requests pipelined behind an AUTH, in the same read, are parsed under
 * the limits the AUTH leaves (Redis reads one request at a time): lifted
 * when it succeeded, still tight when it failed. */
TEST(proto_limits_follow_pipelined_auth)
{
    struct proto_limits lim = lim_redis();
    const char in[] = "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
                      "*11\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"
                      "$1\r\ne\r\n$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n"
                      "$1\r\nj\r\n$1\r\nk\r\nPING\r\n";
    for (int ok = 0; ok <= 1; ok++) {
        struct proto *p = proto_create(&lim);
        ASSERT(p != NULL);
        proto_set_authenticated(p, 0);
        /* in two reads, the second arriving before the AUTH is taken */
        ASSERT_INT_EQ(proto_feed(p, in, 40), 0);
        ASSERT_INT_EQ(proto_feed(p, in + 40, sizeof in - 41), 0);
        ASSERT_INT_EQ((long long)proto_pending(p), (long long)sizeof in - 1);
        struct proto_req req;
        ASSERT_INT_EQ(proto_next(p, &req), PROTO_REQUEST);
        ASSERT_INT_EQ(req.argc, 2);
        proto_req_free(&req);
        proto_set_authenticated(p, ok);
        struct buf out;
        buf_init(&out);
        drain(p, &out);
        buf_append(&out, "", 1);
        ASSERT_STR_EQ(out.data, ok ? "[a b c d e f g h i j k][PING]"
                                   : "!Protocol error: unauthenticated "
                                     "multibulk length");
        ASSERT_INT_EQ((long long)proto_pending(p), 0);
        buf_free(&out);
        proto_free(p);
    }
}
