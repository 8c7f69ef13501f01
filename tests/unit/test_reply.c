/*
 * test_reply.c — byte buffers and the RESP2/RESP3 encoder (gateway/reply.c).
 *
 * Every encoder function is checked for the exact bytes it appends, in both
 * protocols where they differ.
 */
#include "reply.h"
#include "unit.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* Asserts that b holds exactly the string literal s (NULs allowed). */
#define ASSERT_BUF(b, s) ASSERT_MEM_EQ((b)->data, (b)->len, (s), sizeof(s) - 1)

TEST(buf_basics)
{
    struct buf b;
    buf_init(&b);
    ASSERT(b.data == NULL);
    ASSERT_INT_EQ(b.len, 0);
    buf_append(&b, "", 0);
    ASSERT_INT_EQ(b.len, 0);
    buf_append(&b, "ab\0c", 4);
    buf_append_str(&b, "de");
    buf_printf(&b, "%d-%s", 42, "x");
    ASSERT_BUF(&b, "ab\0cde42-x");
    ASSERT(b.cap >= b.len);
    buf_reserve(&b, 1000);
    ASSERT(b.cap >= b.len + 1000);
    ASSERT_BUF(&b, "ab\0cde42-x");
    buf_printf(&b, "%s", "");
    ASSERT_BUF(&b, "ab\0cde42-x");
    buf_free(&b);
    ASSERT(b.data == NULL);
    ASSERT_INT_EQ(b.len, 0);
    ASSERT_INT_EQ(b.cap, 0);
    /* A freed buffer is usable again. */
    buf_append_str(&b, "again");
    ASSERT_BUF(&b, "again");
    buf_free(&b);
}

TEST(buf_growth_and_consume)
{
    struct buf b;
    buf_init(&b);
    for (int i = 0; i < 100000; i++)
        buf_printf(&b, "%05d", i);
    ASSERT_INT_EQ(b.len, 500000);
    ASSERT_MEM_EQ(b.data + 5 * 12345, 5, "12345", 5);
    buf_consume(&b, 5);
    ASSERT_INT_EQ(b.len, 499995);
    ASSERT_MEM_EQ(b.data, 5, "00001", 5);
    buf_consume(&b, 0);
    ASSERT_INT_EQ(b.len, 499995);
    buf_consume(&b, 499995 - 5);
    ASSERT_BUF(&b, "99999");
    buf_consume(&b, 1000);
    ASSERT_INT_EQ(b.len, 0);
    /* A long printf. */
    char big[5000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    buf_printf(&b, "<%s>", big);
    ASSERT_INT_EQ(b.len, sizeof big + 1);
    ASSERT(b.data[0] == '<' && b.data[b.len - 1] == '>');
    buf_free(&b);
}

TEST(reply_status_and_error)
{
    struct buf b;
    buf_init(&b);
    reply_status(&b, "OK");
    ASSERT_BUF(&b, "+OK\r\n");
    b.len = 0;
    reply_status(&b, "a\r\nb\nc\rd");
    ASSERT_BUF(&b, "+a  b c d\r\n");
    b.len = 0;
    reply_status(&b, "");
    ASSERT_BUF(&b, "+\r\n");
    b.len = 0;
    reply_error(&b, "ERR unknown command");
    ASSERT_BUF(&b, "-ERR unknown command\r\n");
    b.len = 0;
    reply_error(&b, "ERR Protocol error: expected '$', got '\r'");
    ASSERT_BUF(&b, "-ERR Protocol error: expected '$', got ' '\r\n");
    b.len = 0;
    reply_error(&b, "WRONGTYPE x\r\n-ERR injected\r\n");
    ASSERT_BUF(&b, "-WRONGTYPE x  -ERR injected  \r\n");
    buf_free(&b);
}

TEST(reply_errorf)
{
    struct buf b;
    buf_init(&b);
    reply_errorf(&b, "ERR wrong number of arguments for '%s' command", "get");
    ASSERT_BUF(&b, "-ERR wrong number of arguments for 'get' command\r\n");
    b.len = 0;
    reply_errorf(&b, "ERR %s", "line1\r\nline2");
    ASSERT_BUF(&b, "-ERR line1  line2\r\n");
    b.len = 0;
    reply_errorf(&b, "%s", "");
    ASSERT_BUF(&b, "-\r\n");
    b.len = 0;
    reply_errorf(&b, "ERR %d %lld", -1, LLONG_MIN);
    ASSERT_BUF(&b, "-ERR -1 -9223372036854775808\r\n");
    buf_free(&b);
}

TEST(reply_int)
{
    struct buf b;
    buf_init(&b);
    reply_int(&b, 0);
    reply_int(&b, -1);
    reply_int(&b, 42);
    reply_int(&b, LLONG_MAX);
    reply_int(&b, LLONG_MIN);
    ASSERT_BUF(&b, ":0\r\n:-1\r\n:42\r\n:9223372036854775807\r\n"
                   ":-9223372036854775808\r\n");
    buf_free(&b);
}

TEST(reply_bulk)
{
    struct buf b;
    buf_init(&b);
    reply_bulk(&b, "foo", 3);
    ASSERT_BUF(&b, "$3\r\nfoo\r\n");
    b.len = 0;
    reply_bulk(&b, "", 0);
    ASSERT_BUF(&b, "$0\r\n\r\n");
    b.len = 0;
    reply_bulk(&b, NULL, 0);
    ASSERT_BUF(&b, "$0\r\n\r\n");
    b.len = 0;
    reply_bulk(&b, "a\0\r\n", 4);
    ASSERT_BUF(&b, "$4\r\na\0\r\n\r\n");
    b.len = 0;
    reply_bulk_str(&b, "hello");
    ASSERT_BUF(&b, "$5\r\nhello\r\n");
    b.len = 0;
    reply_bulk_str(&b, "");
    ASSERT_BUF(&b, "$0\r\n\r\n");
    b.len = 0;
    static char big[100000];
    memset(big, 'q', sizeof big);
    reply_bulk(&b, big, sizeof big);
    ASSERT_INT_EQ(b.len, 9 + sizeof big + 2);
    ASSERT_MEM_EQ(b.data, 9, "$100000\r\n", 9);
    ASSERT_MEM_EQ(b.data + b.len - 3, 3, "q\r\n", 3);
    buf_free(&b);
}

TEST(reply_nulls)
{
    struct buf b;
    buf_init(&b);
    reply_null(&b, 2);
    ASSERT_BUF(&b, "$-1\r\n");
    b.len = 0;
    reply_null(&b, 3);
    ASSERT_BUF(&b, "_\r\n");
    b.len = 0;
    reply_null_array(&b, 2);
    ASSERT_BUF(&b, "*-1\r\n");
    b.len = 0;
    reply_null_array(&b, 3);
    ASSERT_BUF(&b, "_\r\n");
    buf_free(&b);
}

TEST(reply_containers)
{
    struct buf b;
    buf_init(&b);
    reply_array(&b, 0);
    reply_array(&b, 3);
    reply_array(&b, -1);
    ASSERT_BUF(&b, "*0\r\n*3\r\n*-1\r\n");
    b.len = 0;
    reply_map(&b, 2, 3);
    reply_map(&b, 3, 3);
    reply_map(&b, 2, 0);
    reply_map(&b, 3, 0);
    ASSERT_BUF(&b, "*6\r\n%3\r\n*0\r\n%0\r\n");
    b.len = 0;
    reply_set(&b, 2, 2);
    reply_set(&b, 3, 2);
    ASSERT_BUF(&b, "*2\r\n~2\r\n");
    b.len = 0;
    reply_push(&b, 2, 3);
    reply_push(&b, 3, 3);
    ASSERT_BUF(&b, "*3\r\n>3\r\n");
    b.len = 0;
    /* A whole HELLO-like reply in RESP3 and RESP2. */
    reply_map(&b, 3, 2);
    reply_bulk_str(&b, "proto");
    reply_int(&b, 3);
    reply_bulk_str(&b, "modules");
    reply_array(&b, 0);
    ASSERT_BUF(&b, "%2\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n");
    b.len = 0;
    reply_map(&b, 2, 1);
    reply_bulk_str(&b, "proto");
    reply_int(&b, 2);
    ASSERT_BUF(&b, "*2\r\n$5\r\nproto\r\n:2\r\n");
    buf_free(&b);
}

TEST(reply_double)
{
    struct buf b;
    buf_init(&b);
    reply_double(&b, 3, 1.5);
    reply_double(&b, 3, 3.0);
    reply_double(&b, 3, -2.0);
    reply_double(&b, 3, 0.1);
    reply_double(&b, 3, INFINITY);
    reply_double(&b, 3, -INFINITY);
    reply_double(&b, 3, NAN);
    reply_double(&b, 3, 1e300);
    ASSERT_BUF(&b, ",1.5\r\n,3\r\n,-2\r\n,0.10000000000000001\r\n,inf\r\n"
                   ",-inf\r\n,nan\r\n,1.0000000000000001e+300\r\n");
    b.len = 0;
    reply_double(&b, 2, 1.5);
    reply_double(&b, 2, 3.0);
    reply_double(&b, 2, INFINITY);
    reply_double(&b, 2, -INFINITY);
    reply_double(&b, 2, 0.1);
    ASSERT_BUF(&b, "$3\r\n1.5\r\n$1\r\n3\r\n$3\r\ninf\r\n$4\r\n-inf\r\n"
                   "$19\r\n0.10000000000000001\r\n");
    buf_free(&b);
}

TEST(reply_bool)
{
    struct buf b;
    buf_init(&b);
    reply_bool(&b, 3, 1);
    reply_bool(&b, 3, 0);
    reply_bool(&b, 3, 7);
    reply_bool(&b, 2, 1);
    reply_bool(&b, 2, 0);
    reply_bool(&b, 2, -1);
    ASSERT_BUF(&b, "#t\r\n#f\r\n#t\r\n:1\r\n:0\r\n:1\r\n");
    buf_free(&b);
}

TEST(reply_verbatim)
{
    struct buf b;
    buf_init(&b);
    reply_verbatim(&b, 3, "abc", 3);
    ASSERT_BUF(&b, "=7\r\ntxt:abc\r\n");
    b.len = 0;
    reply_verbatim(&b, 3, "a\r\nb", 4);
    ASSERT_BUF(&b, "=8\r\ntxt:a\r\nb\r\n");
    b.len = 0;
    reply_verbatim(&b, 3, "", 0);
    ASSERT_BUF(&b, "=4\r\ntxt:\r\n");
    b.len = 0;
    reply_verbatim(&b, 2, "abc", 3);
    ASSERT_BUF(&b, "$3\r\nabc\r\n");
    buf_free(&b);
}
