/*
 * main.c — the unit-test runner.
 *
 * Runs every test of list.h (or those whose name contains one of the
 * command-line arguments), one after the other in this process, and prints
 * TAP:
 *
 *   1..N
 *   ok 1 - proto_empty_query
 *   not ok 2 - proto_pipeline # tests/unit/test_proto.c:120 st == 1 (0 != 1)
 *   unit: 1 passed, 1 failed
 *
 * The exit status is 1 when a test failed, 0 otherwise.
 */
#include "unit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNIT_TEST(name) void test_##name(void);
#include "list.h"
#undef UNIT_TEST

struct unit_test {
    const char *name;
    void (*fn)(void);
};

static const struct unit_test tests[] = {
#define UNIT_TEST(name) {#name, test_##name},
#include "list.h"
#undef UNIT_TEST
};

static int failed;
static char failure[1024];
static char context[256];
static unsigned long long rng_state;

void unit_fail(const char *file, int line, const char *fmt, ...)
{
    if (failed)
        return;
    failed = 1;
    int n = snprintf(failure, sizeof failure, "%s:%d ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure + n, sizeof failure - (size_t)n, fmt, ap);
    va_end(ap);
    if (context[0]) {
        size_t len = strlen(failure);
        snprintf(failure + len, sizeof failure - len, " [%s]", context);
    }
    /* A TAP line must stay one line. */
    for (char *p = failure; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

int unit_failed(void)
{
    return failed;
}

void unit_context(const char *fmt, ...)
{
    if (fmt == NULL) {
        context[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
}

unsigned long long unit_rand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Appends s[0..n) to out (of size cap) with non-printable bytes as \xHH. */
static void escape(char *out, size_t cap, const unsigned char *s, size_t n)
{
    size_t o = strlen(out);
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
            out[o++] = (char)s[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", s[i]);
    }
    out[o] = '\0';
}

int unit_mem_eq(const char *file, int line, const char *what, const void *a,
                size_t alen, const void *b, size_t blen)
{
    if (alen == blen && (alen == 0 || memcmp(a, b, alen) == 0))
        return 1;
    char ea[300] = "", eb[300] = "";
    escape(ea, sizeof ea, a, alen < 60 ? alen : 60);
    escape(eb, sizeof eb, b, blen < 60 ? blen : 60);
    unit_fail(file, line, "%s: \"%s\" (%zu bytes) != \"%s\" (%zu bytes)", what,
              ea, alen, eb, blen);
    return 0;
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    size_t total = sizeof tests / sizeof tests[0], n = 0, pass = 0, fail = 0;
    for (size_t i = 0; i < total; i++)
        n += selected(tests[i].name, argc, argv);
    printf("1..%zu\n", n);
    fflush(stdout);
    size_t k = 0;
    for (size_t i = 0; i < total; i++) {
        if (!selected(tests[i].name, argc, argv))
            continue;
        failed = 0;
        failure[0] = '\0';
        context[0] = '\0';
        rng_state = 0x9E3779B97F4A7C15ULL ^ (i + 1);
        tests[i].fn();
        k++;
        if (failed) {
            fail++;
            printf("not ok %zu - %s # %s\n", k, tests[i].name, failure);
        } else {
            pass++;
            printf("ok %zu - %s\n", k, tests[i].name);
        }
        fflush(stdout);
    }
    printf("unit: %zu passed, %zu failed\n", pass, fail);
    return fail ? 1 : 0;
}
