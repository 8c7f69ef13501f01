/*
 * unit.h — a tiny unit-test harness in the style of libuv's test/runner.c and
 * Valkey's src/unit.
 *
 * A test is a `void test_<name>(void)` function listed in list.h.  The
 * ASSERT macros record the first failure of the running test (file, line,
 * the expression and, for the typed forms, the values) and return from the
 * test function; the runner then goes on with the next test.  A helper that
 * asserts must return void; its caller continues with CHECK(helper(...)),
 * which returns as soon as the helper has recorded a failure.
 *
 * unit_context() attaches a note (e.g. "fed byte by byte") that is printed
 * with a failure, for helpers that run the same checks in several ways.
 */
#ifndef ZKRESP_UNIT_H
#define ZKRESP_UNIT_H

#include <stddef.h>
#include <string.h>

#define TEST(name) void test_##name(void)

/* Records a failure of the running test (only the first one is kept). */
void unit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether the running test has failed. */
int unit_failed(void);
/* Sets the note printed with a failure; NULL or "" clears it. */
void unit_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A deterministic pseudo-random number (xorshift), seeded per test. */
unsigned long long unit_rand(void);

#define ASSERT(e)                                                              \
    do {                                                                       \
        if (!(e)) {                                                            \
            unit_fail(__FILE__, __LINE__, "%s", #e);                           \
            return;                                                            \
        }                                                                      \
    } while (0)

#define ASSERT_INT_EQ(a, b)                                                    \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            unit_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b,   \
                      a_, b_);                                                 \
            return;                                                            \
        }                                                                      \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                    \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (strcmp(a_, b_) != 0) {                                             \
            unit_fail(__FILE__, __LINE__, "%s == %s (\"%s\" != \"%s\")", #a,   \
                      #b, a_, b_);                                             \
            return;                                                            \
        }                                                                      \
    } while (0)

/* Compares two byte ranges; shows them escaped on failure. */
#define ASSERT_MEM_EQ(a, alen, b, blen)                                        \
    do {                                                                       \
        if (!unit_mem_eq(__FILE__, __LINE__, #a, (a), (alen), (b), (blen)))    \
            return;                                                            \
    } while (0)

#define CHECK(call)                                                            \
    do {                                                                       \
        call;                                                                  \
        if (unit_failed())                                                     \
            return;                                                            \
    } while (0)

int unit_mem_eq(const char *file, int line, const char *what, const void *a,
                size_t alen, const void *b, size_t blen);

#endif
