/*
 * keyenc.c — Redis keys to ZooKeeper node names and back (see keyenc.h).
 *
 * The encoding is percent-escaping with a fixed set of kept bytes and
 * upper-case hex, plus "%" for the empty key.  Decoding accepts exactly the
 * strings encoding produces, so the map is a bijection between all byte
 * strings and the set of names it produces: a name that could have been
 * written differently (lower-case hex, an escaped byte that is kept as is,
 * a bare byte that must be escaped) is refused rather than normalised.
 */
#include "keyenc.h"

#include <string.h>

static const char hex_digits[] = "0123456789ABCDEF";

/* Whether byte c is written as itself: [A-Za-z0-9] and "-_:{}@=+,!". */
static int kept(unsigned char c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
        (c >= '0' && c <= '9'))
        return 1;
    return c != '\0' && strchr("-_:{}@=+,!", c) != NULL;
}

/* The value of an upper-case hex digit, or -1 (lower case is not canonical). */
static int hex_upper(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t keyenc_encode(const char *key, size_t n, char *out)
{
    size_t o = 0;
    if (n == 0) {
        out[0] = '%';
        out[1] = '\0';
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (kept(c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex_digits[c >> 4];
            out[o++] = hex_digits[c & 15];
        }
    }
    out[o] = '\0';
    return o;
}

long keyenc_decode(const char *name, size_t n, char *out)
{
    size_t o = 0;
    if (n == 0)
        return -1;
    if (n == 1 && name[0] == '%')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (kept(c)) {
            out[o++] = (char)c;
            continue;
        }
        if (c != '%' || n - i < 3)
            return -1;
        int hi = hex_upper((unsigned char)name[i + 1]);
        int lo = hex_upper((unsigned char)name[i + 2]);
        if (hi < 0 || lo < 0)
            return -1;
        unsigned char b = (unsigned char)(hi * 16 + lo);
        if (kept(b))
            return -1; /* "%41" for 'A': not what encode writes */
        out[o++] = (char)b;
        i += 2;
    }
    return (long)o;
}
