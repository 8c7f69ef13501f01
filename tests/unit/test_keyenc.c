/*
 * test_keyenc.c — the key to node-name map (sidecar/keyenc.c).
 *
 * Checks the contract of keyenc.h: encode is total and injective, its names
 * are legal ZooKeeper node names made only of the kept bytes and "%XX", and
 * decode inverts it exactly, refusing every name encode would not write.
 */
#include "keyenc.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* The bytes a name may contain. */
static int name_byte(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || (c != 0 && strchr("-_:{}@=+,!%", c));
}

static int kept_byte(unsigned char c)
{
    return c != '%' && name_byte(c);
}

/* Encodes key[0..n), checks the name's shape and that it decodes back to
 * the key; leaves the name in name (KEYENC_MAX(n) + 1 bytes). */
static void roundtrip(const char *key, size_t n, char *name)
{
    memset(name, 0x55, KEYENC_MAX(n) + 1);
    size_t len = keyenc_encode(key, n, name);
    ASSERT(len <= KEYENC_MAX(n));
    ASSERT(len > 0);
    ASSERT_INT_EQ(name[len], '\0');
    ASSERT_INT_EQ(strlen(name), len);
    for (size_t i = 0; i < len; i++)
        ASSERT(name_byte((unsigned char)name[i]));
    ASSERT(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
    ASSERT(n == 0 || strcmp(name, "%") != 0);
    char *out = malloc(len + 1);
    ASSERT(out != NULL);
    long k = keyenc_decode(name, len, out);
    if (k != (long)n)
        free(out);
    ASSERT_INT_EQ(k, (long)n);
    int same = n == 0 || memcmp(out, key, n) == 0;
    free(out);
    ASSERT(same);
}

#define ROUNDTRIP(key, want)                                                   \
    do {                                                                       \
        char name_[KEYENC_MAX(sizeof(key) - 1) + 1];                           \
        CHECK(roundtrip((key), sizeof(key) - 1, name_));                       \
        ASSERT_STR_EQ(name_, (want));                                          \
    } while (0)

TEST(keyenc_examples)
{
    ROUNDTRIP("", "%");
    ROUNDTRIP("a", "a");
    ROUNDTRIP("lock:{user42}", "lock:{user42}");
    ROUNDTRIP("-_:{}@=+,!", "-_:{}@=+,!");
    ROUNDTRIP("/", "%2F");
    ROUNDTRIP(".", "%2E");
    ROUNDTRIP("..", "%2E%2E");
    ROUNDTRIP("%", "%25");
    ROUNDTRIP("%25", "%2525");
    ROUNDTRIP("zookeeper", "zookeeper");
    ROUNDTRIP("/zookeeper/quota", "%2Fzookeeper%2Fquota");
    ROUNDTRIP("a b", "a%20b");
    ROUNDTRIP("\0", "%00");
    ROUNDTRIP("a\0b", "a%00b");
    ROUNDTRIP("\r\n\x7f", "%0D%0A%7F");
    ROUNDTRIP("\xff\xfe", "%FF%FE");
    ROUNDTRIP("caf\xc3\xa9", "caf%C3%A9");
    ROUNDTRIP("~*?[]'\"\\", "%7E%2A%3F%5B%5D%27%22%5C");
}

TEST(keyenc_every_byte)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int c = 0; c < 256; c++) {
        char key = (char)c, name[KEYENC_MAX(1) + 1], want[4];
        unit_context("byte %d", c);
        CHECK(roundtrip(&key, 1, name));
        if (kept_byte((unsigned char)c)) {
            want[0] = (char)c;
            want[1] = '\0';
        } else {
            want[0] = '%';
            want[1] = hex[c >> 4];
            want[2] = hex[c & 15];
            want[3] = '\0';
        }
        ASSERT_STR_EQ(name, want);
    }
    /* All 256 bytes in one key. */
    char all[256], name[KEYENC_MAX(256) + 1];
    for (int c = 0; c < 256; c++)
        all[c] = (char)c;
    unit_context("all bytes");
    CHECK(roundtrip(all, 256, name));
    unit_context(NULL);
}

TEST(keyenc_edge_roundtrip)
{
    static const struct {
        const char *s;
        size_t n;
    } keys[] = {
        {"", 0},
        {"\0", 1},
        {"\0\0", 2},
        {"/", 1},
        {"//", 2},
        {".", 1},
        {"..", 2},
        {"...", 3},
        {"./..", 4},
        {"%", 1},
        {"%%", 2},
        {"%2F", 3},
        {"zookeeper", 9},
        {"\x80", 1},
        {"\xc0\xaf", 2},
        {"\xed\xa0\x80", 3},
        {"\xef\xbf\xbf", 3},
        {"\x01\x1f\x7f", 3},
        {" ", 1},
        {"\t", 1},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char name[KEYENC_MAX(9) + 1];
        unit_context("key %zu", i);
        CHECK(roundtrip(keys[i].s, keys[i].n, name));
    }
    /* A long key of bytes that are all escaped: the worst case size. */
    size_t n = 100000;
    char *key = malloc(n), *name = malloc(KEYENC_MAX(n) + 1);
    ASSERT(key && name);
    memset(key, '/', n);
    unit_context("long key");
    roundtrip(key, n, name);
    if (!unit_failed() && strlen(name) != 3 * n)
        unit_fail(__FILE__, __LINE__, "long name is %zu bytes", strlen(name));
    free(key);
    free(name);
    unit_context(NULL);
}

TEST(keyenc_random_roundtrip)
{
    char key[200], name[KEYENC_MAX(200) + 1];
    for (int i = 0; i < 20000; i++) {
        size_t n = unit_rand() % (i % 10 ? 16 : 200);
        int alphabet = (int)(unit_rand() % 3);
        for (size_t j = 0; j < n; j++) {
            unsigned long long r = unit_rand();
            key[j] = alphabet == 0   ? (char)r
                     : alphabet == 1 ? "%./\0aZ9-"[r % 9]
                                     : (char)(0x20 + r % 95);
        }
        CHECK(roundtrip(key, n, name));
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

TEST(keyenc_no_collisions)
{
    /* Every key of up to two bytes, plus random longer ones: all names are
     * distinct. */
    size_t cap = 1 + 256 + 65536 + 20000, n = 0;
    char **names = malloc(cap * sizeof *names);
    ASSERT(names != NULL);
    char key[32] = {0};
    names[n] = malloc(KEYENC_MAX(0) + 1);
    keyenc_encode(key, 0, names[n++]);
    for (int a = 0; a < 256; a++) {
        key[0] = (char)a;
        names[n] = malloc(KEYENC_MAX(1) + 1);
        keyenc_encode(key, 1, names[n++]);
        for (int b = 0; b < 256; b++) {
            key[1] = (char)b;
            names[n] = malloc(KEYENC_MAX(2) + 1);
            keyenc_encode(key, 2, names[n++]);
        }
    }
    for (int i = 0; i < 20000; i++) {
        /* Lengths 3..31, so none equals a key above; duplicates among the
         * random keys themselves are avoided by a counter prefix. */
        size_t len = 3 + unit_rand() % 29;
        key[0] = (char)(i & 255);
        key[1] = (char)(i >> 8);
        key[2] = '.';
        for (size_t j = 3; j < len; j++)
            key[j] = (char)unit_rand();
        names[n] = malloc(KEYENC_MAX(len) + 1);
        keyenc_encode(key, len, names[n++]);
    }
    qsort(names, n, sizeof *names, cmp_str);
    size_t dup = 0;
    for (size_t i = 1; i < n; i++)
        dup += strcmp(names[i - 1], names[i]) == 0;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    ASSERT_INT_EQ(dup, 0);
}

TEST(keyenc_names_are_legal)
{
    /* Names never are "." or "..", never hold '/', NUL or a byte outside
     * the set; "%" stands only for the empty key. */
    char key[8], name[KEYENC_MAX(8) + 1];
    for (int i = 0; i < 50000; i++) {
        size_t n = unit_rand() % 8;
        for (size_t j = 0; j < n; j++)
            key[j] = "..//%\0x"[unit_rand() % 7];
        size_t len = keyenc_encode(key, n, name);
        ASSERT(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
        ASSERT(memchr(name, '/', len) == NULL);
        ASSERT_INT_EQ(strlen(name), len);
        for (size_t j = 0; j < len; j++)
            ASSERT(name_byte((unsigned char)name[j]));
        ASSERT((strcmp(name, "%") == 0) == (n == 0));
    }
}

TEST(keyenc_decode_rejects)
{
    static const struct {
        const char *s;
        size_t n;
    } bad[] = {
        {"", 0}, /* encode never writes an empty name */
        {"%%", 2},
        {"%4", 2},
        {"%2", 2},
        {"a%", 2},
        {"a%2", 3},
        {"%2f", 3},
        {"%2e%2E", 6},
        {"%fF", 3},
        {"%4g", 3},
        {"%G0", 3},
        {"%-1", 3},
        {"% 20", 4},
        {"%41", 3}, /* 'A' is kept, never escaped */
        {"%2D", 3}, /* '-' too */
        {"%7A", 3}, /* 'z' */
        {"%30", 3}, /* '0' */
        {".", 1},
        {"..", 2},
        {"a.b", 3},
        {"/", 1},
        {"a/b", 3},
        {"a b", 3},
        {"\0", 1},
        {"a\0b", 3},
        {"~", 1},
        {"*", 1},
        {"\x80", 1},
        {"\xff", 1},
        {"%25%", 4},
        {"%%25", 4},
        {"%\0"
         "0",
         3},
    };
    char out[16];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unit_context("name %zu", i);
        ASSERT_INT_EQ(keyenc_decode(bad[i].s, bad[i].n, out), -1);
    }
    unit_context(NULL);
    /* The lone '%' is the empty key. */
    ASSERT_INT_EQ(keyenc_decode("%", 1, out), 0);
    /* The length given is what counts, not a NUL. */
    ASSERT_INT_EQ(keyenc_decode("ab%2F", 2, out), 2);
    ASSERT_INT_EQ(keyenc_decode("ab%2F", 4, out), -1);
}

/* Whether s[0..n), n <= 3, is a name encode writes (an independent
 * statement of the rules for short names). */
static int canonical_short(const unsigned char *s, size_t n)
{
    if (n == 1 && s[0] == '%')
        return 1;
    int all_kept = 1;
    for (size_t i = 0; i < n; i++)
        all_kept &= kept_byte(s[i]);
    if (all_kept)
        return n > 0;
    if (n != 3 || s[0] != '%')
        return 0;
    const char *hex = "0123456789ABCDEF";
    const char *h = s[1] ? strchr(hex, s[1]) : NULL;
    const char *l = s[2] ? strchr(hex, s[2]) : NULL;
    if (!h || !l)
        return 0;
    return !kept_byte((unsigned char)((h - hex) * 16 + (l - hex)));
}

TEST(keyenc_decode_exhaustive_short)
{
    /* Every name of up to three bytes over an alphabet rich in traps:
     * decode accepts exactly the canonical ones, and re-encodes them. */
    static const unsigned char alpha[] = "%0279AFZafg.-/ \x00\x80";
    size_t na = sizeof alpha - 1; /* the embedded NUL included */
    unsigned char s[3];
    char out[4], again[KEYENC_MAX(3) + 1];
    for (size_t n = 0; n <= 3; n++) {
        size_t total = 1;
        for (size_t i = 0; i < n; i++)
            total *= na;
        for (size_t idx = 0; idx < total; idx++) {
            size_t x = idx;
            for (size_t i = 0; i < n; i++) {
                s[i] = alpha[x % na];
                x /= na;
            }
            long k = keyenc_decode((const char *)s, n, out);
            unit_context("name %.*s (%zu bytes)", (int)n, (const char *)s, n);
            ASSERT_INT_EQ(k >= 0, canonical_short(s, n));
            if (k >= 0) {
                size_t len = keyenc_encode(out, (size_t)k, again);
                ASSERT_MEM_EQ(again, len, s, n);
            }
        }
    }
    unit_context(NULL);
}
