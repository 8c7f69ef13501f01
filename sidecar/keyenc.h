/*
 * keyenc.h — the bijective map from Redis keys to ZooKeeper node names.
 *
 * Any byte string (empty, NUL, '/', ".", "..", "zookeeper", control bytes,
 * invalid UTF-8) maps to exactly one legal node name, and no two keys map to
 * the same name.  Bytes in [A-Za-z0-9] and "-_:{}@=+,!" are kept; every other
 * byte, '.' and '%' included, becomes "%XX" with upper-case hex.  The empty key
 * is the name "%" (a lone '%' never occurs otherwise).  So a name never is "."
 * or "..", never contains '/', NUL or a character ZooKeeper rejects, and the
 * escape is undone unambiguously.
 */
#ifndef ZKRESP_KEYENC_H
#define ZKRESP_KEYENC_H

#include <stddef.h>

/* Upper bound of the encoded size of an n-byte key (without the NUL). */
#define KEYENC_MAX(n) ((n)*3 + 1)

/* Encodes key[0..n) into out (at least KEYENC_MAX(n) + 1 bytes), NUL
 * terminated.  Returns the encoded length. */
size_t keyenc_encode(const char *key, size_t n, char *out);

/* Decodes a node name made by keyenc_encode into out (at least strlen(name)
 * bytes).  Returns the key's length, or -1 if name is not an encoding that
 * keyenc_encode could have produced (so decode(encode(k)) == k and
 * encode(decode(s)) == s whenever decode succeeds). */
long keyenc_decode(const char *name, size_t n, char *out);

#endif
