"""Tier 38: the string, key, hash and set commands of issue 19 (item 1)
against redis-server 7.0, raw replies compared byte for byte in RESP2 and
RESP3, and the multi-key ones raced through two sidecars.

Keys are written "@name" (tests/lib/differential.py).  Replies whose order
Redis leaves unspecified (SINTER, SUNION, SDIFF, SCAN) are compared as
multisets (Unordered); random replies (SPOP, SRANDMEMBER, HRANDFIELD,
RANDOMKEY) are checked by shape and membership.  Where Redis 7.2 (whose
version zkresp reports) answers otherwise than the 7.0 oracle, Either
names 7.2's reply.
"""

import random
import threading

import pytest

import harness
from differential import Ignore, Either, Tol, assert_same, run_both, compare
from resp import RawClient, elements, frame_end


SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


class Unordered(Ignore):
    """Compared as the multiset of the reply's elements."""


def U(step):
    return Unordered(step)


class ScanReply(Ignore):
    """A [cursor, elements] reply: the cursor equal, the elements the same
    multiset (pairs: of field/value pairs)."""

    def __init__(self, step, pairs):
        Ignore.__init__(self, step)
        self.pairs = pairs


def UP(step):
    return ScanReply(step, True)


def US(step):
    return ScanReply(step, False)


def _canon_scan(raw, pairs):
    parsed = elements(raw)
    if parsed is None or len(parsed[1]) != 2:
        return raw
    inner = elements(parsed[1][1])
    if inner is None:
        return raw
    els = inner[1]
    if pairs:
        els = [els[i] + els[i + 1] for i in range(0, len(els) - 1, 2)]
    return parsed[0] + parsed[1][0] + inner[0] + b"".join(sorted(els))


class Random(Ignore):
    """A random reply: the same shape as redis-server's (type and length),
    every member (bulk, or first of a pair) one of `members`."""

    def __init__(self, step, members):
        Ignore.__init__(self, step)
        self.members = set(m.encode() for m in members.split())


def _bulk(frame):
    return frame[frame.index(b"\r\n") + 2:-2]


def _random_ok(step, ref, got):
    if ref[:1] == b"$" and got[:1] == b"$":
        return _bulk(got) in step.members
    r, g = elements(ref), elements(got)
    if r is None or g is None:
        return ref == got
    if r[0] != g[0]:
        return False
    for frame in g[1]:
        if frame.startswith(b"*2\r\n"):
            frame = frame[4:4 + frame_end(frame, 4) - 4]
        if _bulk(frame) not in step.members:
            return False
    return True


def _canon(raw):
    parsed = elements(raw)
    if parsed is None:
        return raw
    head, els = parsed
    return head + b"".join(sorted(els))


def check(ref_port, port, steps, proto, prefix):
    ref, got = run_both(ref_port, port, steps, proto, prefix)
    bad = compare(steps, ref, got)
    for i, step in enumerate(steps):
        if isinstance(step, Random) and not _random_ok(step, ref[i], got[i]):
            bad.append("step %d: %r\n    redis-server: %r\n    zkresp:       %r" % (i, step.step, ref[i], got[i]))
        if isinstance(step, ScanReply) and _canon_scan(ref[i], step.pairs) != _canon_scan(got[i], step.pairs):
            bad.append("step %d: %r\n    redis-server: %r\n    zkresp:       %r" % (i, step.step, ref[i], got[i]))
        if isinstance(step, Unordered) and _canon(ref[i]) != _canon(got[i]):
            bad.append("step %d: %r\n    redis-server: %r\n    zkresp:       %r" % (i, step.step, ref[i], got[i]))
    assert not bad, "RESP%d replies differ from redis-server:\n%s" % (proto, "\n".join(bad))


# ---------------------------------------------------------------- strings

seq("setnx_setex_getset", [
    "SETNX @a v", "SETNX @a w", "GET @a", "SETNX @a", "SETNX @a v w",
    "SETEX @b 100 v", Tol("TTL @b", 2), "GET @b", "SETEX @b 0 v", "SETEX @b -1 v", "SETEX @b x v",
    "SETEX @b 9223372036854775807 v", "SETEX @b 100", "PSETEX @c 100000 v", Tol("PTTL @c", 1500),
    "PSETEX @c 0 v", "PSETEX @c 1.5 v", "PSETEX @c 9223372036854775807 v",
    "GETSET @a x", "GETSET @a y", "GETSET @new z", "GET @new", "SETEX @a 100 v", "GETSET @a w",
    "TTL @a", "HSET @h f v", "GETSET @h v", "SETNX @h v", "SETEX @h 10 v", "TYPE @h",
])

seq("getex", [
    "SET @a v", "GETEX @a", "TTL @a", "GETEX @a EX 100", Tol("TTL @a", 2), "GETEX @a PERSIST", "TTL @a",
    "GETEX @a PX 50000", Tol("PTTL @a", 1500), "GETEX @a EXAT {now_s+200}", Tol("TTL @a", 2),
    "GETEX @a PXAT {now_ms+300000}", Tol("TTL @a", 2), "GETEX @a ex 100 EX 200", Tol("TTL @a", 2),
    "GETEX @a EX 10 PX 10", "GETEX @a PERSIST EX 10", "GETEX @a EX 10 PERSIST", "GETEX @a EX",
    "GETEX @a FOO", "GETEX @a EX 0", "GETEX @a PX -1", "GETEX @a EX abc", "GETEX @a EXAT 0",
    "GETEX @a EX 9223372036854775807", "GETEX @missing", "GETEX @missing EX 10",
    "GETEX @a PXAT 1", "EXISTS @a", "HSET @h f v", "GETEX @h", "GETEX @h EX 10",
])

seq("argument_order_edges", [
    # the key is looked up before the expiry is parsed (GETEX), the EXPIREAT
    # bound truncates as C's division does, SCAN's cursor is strtoul's
    "GETEX @missing EX 0", "GETEX @missing EX abc", "GETEX @missing PX -1", "HSET @h f v",
    "GETEX @h EX 0", "GETEX @h EX abc", "SET @k 1", "EXPIREAT @k -9223372036854776",
    "EXPIREAT @k -9223372036854775", "EXISTS @k", "SET @k 1", "PEXPIREAT @k -9223372036854775808",
    "EXISTS @k", "SCAN ' 0' COUNT 0", "SCAN '' MATCH nothing-matches COUNT 1000000",
    "SCAN '+0' MATCH nothing-matches COUNT 1000000",
    "WAIT 0 abc", "WAIT abc 0", "WAIT 0 -1", "WAIT 0 0",
])

seq("mget_mset", [
    "MSET @a 1 @b 2 @c 3", "MGET @a @b @c @missing", "MSET @a x @a y", "GET @a", "MSET @a",
    "MSET @a 1 @b", "MGET", "HSET @h f v", "MGET @h @a", "MSET @h s", "TYPE @h",
    "SET @t v EX 100", "MSET @t w", "TTL @t",
    "MSETNX @n1 1 @n2 2", "MGET @n1 @n2", "MSETNX @n2 x @n3 3", "MGET @n2 @n3", "MSETNX @n4 1 @n4 2",
    "GET @n4", "MSETNX @n5", "MSETNX @n5 1 @n6",
])

seq("append_strlen_ranges", [
    "APPEND @a hello", "APPEND @a ' world'", "GET @a", "STRLEN @a", "STRLEN @missing",
    "SET @t v EX 100", "APPEND @t w", Tol("TTL @t", 2), "GET @t", ["APPEND", "@b", b"\x00\xff"], "STRLEN @b",
    "GETRANGE @a 0 4", "GETRANGE @a -5 -1", "GETRANGE @a 6 100", "GETRANGE @a -100 2", "GETRANGE @a 5 2",
    "GETRANGE @a -1 -5", "GETRANGE @a 0 -1", "GETRANGE @a 100 200", "GETRANGE @missing 0 -1",
    "GETRANGE @a x 1", "GETRANGE @a 0 1.5", "SUBSTR @a 0 4", "SET @n 12345", "GETRANGE @n 1 2",
    "SET @e ''", "GETRANGE @e 0 -1", "GETRANGE @e -1 0",
    "SETRANGE @a 6 WORLD", "GET @a", "SETRANGE @a 15 '!'", "GET @a", "SETRANGE @s 3 x", "GET @s",
    "SETRANGE @z 0 ''", "EXISTS @z", "SETRANGE @a 0 ''", "SETRANGE @a -1 x", "SETRANGE @a x x",
    "SETRANGE @a 536870911 xy", "SETRANGE @t 0 W", Tol("TTL @t", 2), "GET @t",
    "HSET @h f v", "APPEND @h x", "STRLEN @h", "GETRANGE @h 0 1", "SETRANGE @h 0 x",
    "SETRANGE @h 0 ''", "APPEND @a", "STRLEN @a b", "GETRANGE @a 0",
])

seq("incrbyfloat", [
    "INCRBYFLOAT @a 1.5", "INCRBYFLOAT @a 0.1", "INCRBYFLOAT @a -1.6", "GET @a", "SET @b 0.1",
    "INCRBYFLOAT @b 0.2", "INCRBYFLOAT @c 3", "INCRBYFLOAT @c 5.0e3", "INCRBYFLOAT @c -5000.25",
    "INCRBYFLOAT @c 1.5e-5", "INCRBYFLOAT @c 1e20", "INCRBYFLOAT @d 0x10", "INCRBYFLOAT @d -inf",
    "INCRBYFLOAT @d inf", "INCRBYFLOAT @d nan", "INCRBYFLOAT @d abc", "INCRBYFLOAT @d ''",
    "INCRBYFLOAT @d ' 1'", "INCRBYFLOAT @d '1 '", "SET @e abc",
    "INCRBYFLOAT @e 1",
    "SET @t 10 EX 100", "INCRBYFLOAT @t 1", Tol("TTL @t", 2), "HSET @h f v", "INCRBYFLOAT @h 1",
    "INCRBYFLOAT @h x", "INCRBYFLOAT @a", "SET @i 100", "INCRBYFLOAT @i -100", "GET @i",
])


# ---------------------------------------------------------------- hashes

seq("hash_commands", [
    "HSETNX @h f v", "HSETNX @h f w", "HGET @h f", "HSETNX @h g w", "HLEN @h", "HSETNX @h f",
    "HSTRLEN @h f", "HSTRLEN @h nope", "HSTRLEN @missing f", "HSTRLEN @h", "HSET @h n 10.5",
    "HINCRBYFLOAT @h n 0.1", "HINCRBYFLOAT @h n -10.6", "HINCRBYFLOAT @h new 3", "HINCRBYFLOAT @h2 x 1.5e-5",
    "HINCRBYFLOAT @h f 1", "HINCRBYFLOAT @h n abc", "HINCRBYFLOAT @h n inf", "HINCRBYFLOAT @h n ''",
    "HGETALL @h2", "SET @s v", "HSETNX @s f v", "HSTRLEN @s f", "HINCRBYFLOAT @s f 1",
    "HINCRBYFLOAT @s f x", "HRANDFIELD @s", "HRANDFIELD @s 1", "HINCRBYFLOAT @h n",
    "HSET @t f v", "PEXPIRE @t 100000", "HSETNX @t g w", "HINCRBYFLOAT @t n 1", Tol("PTTL @t", 1500),
])

seq("hrandfield", [
    "HSET @h a 1 b 2 c 3", Random("HRANDFIELD @h", "a b c"), Random("HRANDFIELD @h 2", "a b c"),
    Random("HRANDFIELD @h 5", "a b c"), Random("HRANDFIELD @h -5", "a b c"),
    Random("HRANDFIELD @h 2 WITHVALUES", "a b c 1 2 3"), Random("HRANDFIELD @h -4 withvalues", "a b c 1 2 3"),
    Random("HRANDFIELD @h 9 WITHVALUES", "a b c 1 2 3"), "HRANDFIELD @h 0", "HRANDFIELD @h 0 WITHVALUES",
    "HRANDFIELD @missing", "HRANDFIELD @missing 3", "HRANDFIELD @missing -3 WITHVALUES",
    "HRANDFIELD @h x", "HRANDFIELD @h 1.5", "HRANDFIELD @h 1 WITHVALUE", "HRANDFIELD @h 1 WITHVALUES x",
    "HRANDFIELD @h x WITHVALUE", "HRANDFIELD @h -9223372036854775808",
    "HRANDFIELD @h -9223372036854775807 WITHVALUES", "HRANDFIELD @h 9223372036854775807 WITHVALUES",
    "HRANDFIELD",
])

# ---------------------------------------------------------------- sets

seq("set_random", [
    "SADD @s a b c d", Random("SRANDMEMBER @s", "a b c d"), Random("SRANDMEMBER @s 2", "a b c d"),
    Random("SRANDMEMBER @s 9", "a b c d"), Random("SRANDMEMBER @s -6", "a b c d"), "SRANDMEMBER @s 0",
    "SRANDMEMBER @missing", "SRANDMEMBER @missing 2", "SRANDMEMBER @missing -2", "SRANDMEMBER @s x",
    "SRANDMEMBER @s -9223372036854775808", "SRANDMEMBER @s 1 2", "SCARD @s",
    Random("SPOP @s", "a b c d"), "SCARD @s", Random("SPOP @s 2", "a b c d"), "SCARD @s",
    Random("SPOP @s 0", ""), "SPOP @s -1", "SPOP @s x", "SPOP @s 1 2", Random("SPOP @s 5", "a b c d"),
    "EXISTS @s", "SPOP @s", "SPOP @s 3", "SET @str v", "SPOP @str", "SPOP @str 0", "SRANDMEMBER @str",
    "SRANDMEMBER @str 0", "SADD @t x", "PEXPIRE @t 100000", "SADD @t y", Random("SPOP @t 1", "x y"), Tol("PTTL @t", 1500),
])

seq("set_algebra", [
    "SADD @a 1 2 3 4 x", "SADD @b 3 4 5", "SADD @c 4 x y", "SET @str v",
    "SMISMEMBER @a 1 9 x", "SMISMEMBER @missing a", "SMISMEMBER @str a", "SMISMEMBER @a",
    U("SINTER @a @b"), U("SINTER @a @b @c"), U("SINTER @a"), "SINTER @a @missing", "SINTER @missing @str",
    "SINTER @a @str", U("SUNION @a @b @c"), U("SUNION @missing @b"), "SUNION @a @str", U("SDIFF @a @b @c"),
    U("SDIFF @a"), "SDIFF @missing @a", "SDIFF @missing @str", U("SDIFF @a @missing"),
    "SINTERSTORE @d @a @b", U("SMEMBERS @d"), "SUNIONSTORE @d @a @c", U("SMEMBERS @d"),
    "SDIFFSTORE @d @a @b", U("SMEMBERS @d"), "SINTERSTORE @d @a @missing", "EXISTS @d",
    "SET @e v EX 100", "SUNIONSTORE @e @b", "TTL @e", "TYPE @e", "SINTERSTORE @e @a @str", "TYPE @e",
    "SUNIONSTORE @a @a @b", "SCARD @a", "SINTERSTORE @d", "SINTER",
    "SINTERCARD 2 @a @b", "SINTERCARD 1 @a", "SINTERCARD 2 @a @b LIMIT 1", "SINTERCARD 2 @a @b limit 0",
    "SINTERCARD 2 @a @missing", "SINTERCARD 2 @a @str", "SINTERCARD 0 @a", "SINTERCARD x @a",
    "SINTERCARD 3 @a @b", "SINTERCARD 1 @a LIMIT -1", "SINTERCARD 1 @a LIMIT x", "SINTERCARD 1 @a LIMIT",
    "SINTERCARD 1 @a FOO 1", "SINTERCARD 1",
])

seq("smove", [
    "SADD @s a b", "SADD @d c", "SMOVE @s @d a", U("SMEMBERS @s"), U("SMEMBERS @d"), "SMOVE @s @d zz",
    "SMOVE @s @d b", "EXISTS @s", "SMOVE @missing @d c", "SMOVE @d @d c", "SMOVE @d @d zz",
    "SET @str v", "SMOVE @d @str c", "SMOVE @str @d c", "SMOVE @missing @str c", "SMOVE @d @new c",
    U("SMEMBERS @new"), "SADD @x c", "SMOVE @new @x c", "SMEMBERS @x", "EXISTS @new", "SMOVE @x @d",
])


# ---------------------------------------------------------------- keys

seq("copy_rename", [
    "SET @a v EX 100", "COPY @a @b", "GET @b", Tol("TTL @b", 2), "COPY @a @b", "COPY @a @b REPLACE",
    "SET @a w", "COPY @a @b replace", "GET @b", "TTL @b", "COPY @a @a", "COPY @missing @b",
    "COPY @a @b DB 0 REPLACE", "COPY @a @b DB", "COPY @a @b DB x", "COPY @a @b DB 16", "COPY @a @b DB -1",
    "COPY @a @b DB 99999999999", "COPY @a @b FOO", "COPY @a", "HSET @h f v", "COPY @h @h2", "HGETALL @h2",
    "SADD @s x", "COPY @s @a REPLACE", "TYPE @a", "SMEMBERS @a",
    "SET @r v PX 100000", "RENAME @r @r2", "EXISTS @r", "GET @r2", Tol("PTTL @r2", 1500), "RENAME @r @x",
    "RENAME @r2 @r2", "RENAMENX @r2 @r2", "RENAMENX @missing @x", "RENAME @h2 @r2", "TYPE @r2",
    "HGETALL @r2", "SET @n v", "RENAMENX @n @r2", "RENAMENX @n @n2", "GET @n2", "EXISTS @n", "RENAME @a",
])

seq("expiretime_object", [
    "SET @a v", "EXPIRETIME @a", "PEXPIRETIME @a", "EXPIRETIME @missing", "PEXPIRETIME @missing",
    "EXPIREAT @a {now_s+1000}", Tol("EXPIRETIME @a", 1), "PEXPIREAT @a {now_ms+500000}",
    Tol("PEXPIRETIME @a", 1000), "EXPIRETIME", "EXPIRETIME @a b",
    "SET @i 123", "SET @n -5", "SET @big 12345678901234567890", "SET @s short", "SET @e ''",
    ["SET", "@l", "x" * 44], ["SET", "@r", "x" * 45], "SET @z 007", "SET @f 1.5",
    "OBJECT ENCODING @i", "OBJECT ENCODING @n", "OBJECT ENCODING @big", "OBJECT ENCODING @s",
    "OBJECT ENCODING @e", "OBJECT ENCODING @l", "OBJECT ENCODING @r", "OBJECT ENCODING @z",
    "OBJECT ENCODING @f", "OBJECT ENCODING @missing",
    "HSET @h f v", "OBJECT ENCODING @h", ["HSET", "@h2", "f", "x" * 65], "OBJECT ENCODING @h2",
    "ZADD @zs 1 a", "OBJECT ENCODING @zs", ["ZADD", "@zs2", "1", "x" * 65], "OBJECT ENCODING @zs2",
    "SADD @si 1 2 3", "OBJECT ENCODING @si", "SADD @si x", Either("OBJECT ENCODING @si", b"$8\r\nlistpack\r\n"),
    ["SADD", "@sl", "x" * 65], "OBJECT ENCODING @sl", "RPUSH @li a b", Either("OBJECT ENCODING @li", b"$8\r\nlistpack\r\n"),
    "OBJECT REFCOUNT @i", "OBJECT REFCOUNT @s", "OBJECT REFCOUNT @n", "OBJECT REFCOUNT @h", "OBJECT REFCOUNT @missing",
    # idle seconds: a second may pass between the two servers' replies
    Tol("OBJECT IDLETIME @s", 1), "OBJECT IDLETIME @missing", "OBJECT FREQ @s", "OBJECT FREQ @missing",
    "OBJECT HELP", "OBJECT help", "OBJECT", "OBJECT FOO", "OBJECT ENCODING", "OBJECT HELP x",
    "OBJECT ENCODING @a b",
])


seq("object_thresholds", [
    ["HSET", "@h"] + [x for i in range(512) for x in ("f%d" % i, "v")], "OBJECT ENCODING @h",
    "HSET @h f512 v", "OBJECT ENCODING @h",
    ["SADD", "@i"] + [str(i) for i in range(512)], "OBJECT ENCODING @i", "SADD @i 512", "OBJECT ENCODING @i",
    ["ZADD", "@z"] + [x for i in range(128) for x in ("1", "m%d" % i)], "OBJECT ENCODING @z",
    "ZADD @z 2 m128", "OBJECT ENCODING @z",
    ["RPUSH", "@l"] + ["x" * 100] * 100, Either("OBJECT ENCODING @l", b"$9\r\nquicklist\r\n"),
])


seq("scan_errors_and_small_collections", [
    "SCAN x", "SCAN 0 COUNT 0", "SCAN 0 COUNT -1", "SCAN 0 COUNT x", "SCAN 0 MATCH", "SCAN 0 FOO bar",
    "SCAN 18446744073709551616", "SCAN 1.5", "SCAN", "SCAN 0 TYPE",
    "HSET @h a 1 b 2 ab 3", "SADD @s a b ab 1", "SET @str v",
    UP("HSCAN @h 0"), UP("HSCAN @h 0 MATCH a*"), UP("HSCAN @h 0 COUNT 1"), "HSCAN @h 0 MATCH zz",
    "HSCAN @h x", "HSCAN @h 0 COUNT 0", "HSCAN @h 0 TYPE string", "HSCAN @h 0 FOO", "HSCAN @missing 0",
    "HSCAN @missing 0 FOO", "HSCAN @str 0", "HSCAN @h",
    US("SSCAN @s 0"), US("SSCAN @s 0 MATCH a*"), US("SSCAN @s 0 COUNT 100"), "SSCAN @s x", "SSCAN @s 0 COUNT x",
    "SSCAN @missing 0", "SSCAN @str 0", "SSCAN @s 0 TYPE set",
    "ZADD @z 1 a 2.5 b 0.1 c inf d -inf e", UP("ZSCAN @z 0"), UP("ZSCAN @z 0 MATCH [ab]"),
    UP("ZSCAN @z 0 COUNT 2"), "ZSCAN @z x", "ZSCAN @z 0 COUNT 0", "ZSCAN @z 0 TYPE zset", "ZSCAN @missing 0",
    "ZSCAN @str 0", "ZSCAN @z",
])


NAMES = sorted(SEQUENCES)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_redis(name, proto, zkr, redis_ref):
    check(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")


def test_checkers_can_fail():
    r = Random("SRANDMEMBER @s 2", "a b")
    assert _random_ok(r, b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", b"*2\r\n$1\r\nb\r\n$1\r\nb\r\n")
    assert not _random_ok(r, b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", b"*2\r\n$1\r\na\r\n$1\r\nc\r\n")
    assert not _random_ok(r, b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", b"*1\r\n$1\r\na\r\n")
    assert not _random_ok(r, b"~1\r\n$1\r\na\r\n", b"*1\r\n$1\r\na\r\n")
    assert _random_ok(r, b"*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n", b"*1\r\n*2\r\n$1\r\nb\r\n$1\r\n1\r\n")
    assert not _random_ok(r, b"*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n", b"*1\r\n*2\r\n$1\r\nz\r\n$1\r\n1\r\n")
    a = b"*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"
    b = b"*2\r\n$1\r\n0\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n"
    c = b"*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n1\r\n"
    assert _canon_scan(a, True) == _canon_scan(b, True)
    assert _canon_scan(a, True) != _canon_scan(c, True)


# ---------------------------------------------------------------- SCAN, RANDOMKEY


def _scan_all(client, prefix, count, typ=None, during=None):
    """Every key SCAN returns for MATCH prefix*, as a list (repeats kept)."""
    seen, cursor, calls = [], b"0", 0
    while True:
        args = ["SCAN", cursor, "MATCH", prefix + "*", "COUNT", str(count)]
        if typ:
            args += ["TYPE", typ]
        raw = client.cmd(*args)
        head, els = elements(raw)
        assert head == b"*2\r\n", raw
        cursor = _bulk(els[0])
        seen += [_bulk(f).decode() for f in elements(els[1])[1]]
        calls += 1
        if during:
            during(calls)
        if cursor == b"0":
            return seen
        assert calls < 1000


@pytest.mark.parametrize("proto", [2, 3])
def test_scan_lists_every_key(zkr, redis_ref, proto):
    prefix = harness.unique("scan") + ":"
    hashes = {prefix + "h%d" % i for i in range(7)}
    strings = {prefix + "k%d" % i for i in range(53)}
    sides = [RawClient(zkr().port), RawClient(redis_ref.port)]
    for c in sides:
        c.cmd("HELLO", str(proto))
        for k in strings:
            assert c.cmd("SET", k, "v") == b"+OK\r\n"
        for k in hashes:
            assert c.cmd("HSET", k, "f", "v") == b":1\r\n"
        for count in (1, 7, 1000):
            assert set(_scan_all(c, prefix, count)) == strings | hashes
        assert set(_scan_all(c, prefix, 5, "hash")) == hashes
        assert set(_scan_all(c, prefix, 5, "STRING")) == strings
        assert _scan_all(c, prefix, 5, "nosuchtype") == []
    z = sides[0]
    for count in (1, 7, 1000):
        seen = _scan_all(z, prefix, count)
        assert len(seen) == len(set(seen)), "zkresp's SCAN returned a key twice"
    # Keys added and removed during the scan: those present throughout are
    # each seen exactly once.
    extra = [prefix + "x%d" % i for i in range(40)]
    gone = sorted(strings)[:20]

    def churn(calls):
        for k in extra[(calls - 1) * 4:calls * 4]:
            z.cmd("SET", k, "v")
        for k in gone[(calls - 1) * 2:calls * 2]:
            z.cmd("DEL", k)
    seen = _scan_all(z, prefix, 6, during=churn)
    stayed = (strings - set(gone)) | hashes
    assert stayed <= set(seen)
    assert all(seen.count(k) == 1 for k in stayed)
    key = RawClient(zkr().port).cmd("RANDOMKEY")
    assert key.startswith(b"$") and z.cmd("EXISTS", _bulk(key)) == b":1\r\n", key


# ---------------------------------------------------------------- two sidecars


def _both(fa, fb):
    out, errs = {}, []

    def run(name, f):
        try:
            out[name] = f()
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=run, args=(n, f)) for n, f in (("a", fa), ("b", fb))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errs, errs
    return out["a"], out["b"]


def test_two_sidecars_multi_key_writes(zkresp_pair):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    for proto in (2, 3):
        for c in (ca, cb):
            c.cmd("HELLO", str(proto))
        assert ca.cmd("RANDOMKEY") == (b"$-1\r\n" if proto == 2 else b"_\r\n")
    for c in (ca, cb):
        c.cmd("HELLO", "2")
    # MSETNX from both sidecars on overlapping keys: one sets all of its
    # keys, the other none.
    for r in range(30):
        ka = ["m%d:%s" % (r, k) for k in ("a", "ab", "abc")]
        kb = ["m%d:%s" % (r, k) for k in ("abc", "ab", "b")]
        ra, rb = _both(lambda: ca.cmd("MSETNX", *[x for k in ka for x in (k, "A")]),
                       lambda: cb.cmd("MSETNX", *[x for k in kb for x in (k, "B")]))
        assert sorted([ra, rb]) == [b":0\r\n", b":1\r\n"], (ra, rb)
        win, lose, v = (ka, kb, b"A") if ra == b":1\r\n" else (kb, ka, b"B")
        got = elements(ca.cmd("MGET", *sorted(set(ka + kb))))[1]
        want = {k: (b"$1\r\n" + v + b"\r\n") if k in win else b"$-1\r\n" for k in set(ka + kb)}
        assert got == [want[k] for k in sorted(set(ka + kb))]
    # RENAME back and forth from both sidecars: the value is never lost or
    # duplicated.
    assert ca.cmd("SET", "r:x", "v") == b"+OK\r\n"
    ok = b"+OK\r\n"
    missing = b"-ERR no such key\r\n"

    def renames(c, src, dst):
        n = 0
        for _ in range(60):
            reply = c.cmd("RENAME", src, dst)
            assert reply in (ok, missing), reply
            n += reply == ok
        return n
    _both(lambda: renames(ca, "r:x", "r:y"), lambda: renames(cb, "r:y", "r:x"))
    assert sorted([ca.cmd("EXISTS", "r:x"), ca.cmd("EXISTS", "r:y")]) == [b":0\r\n", b":1\r\n"]
    assert b"$1\r\nv\r\n" in (ca.cmd("GET", "r:x"), ca.cmd("GET", "r:y"))
    # SMOVE between two sets from both sidecars: every member stays in
    # exactly one of them.
    members = ["m%d" % i for i in range(40)]
    assert ca.cmd("SADD", "s:1", *members) == b":40\r\n"

    def smoves(c, src, dst):
        moved = 0
        for i in range(80):
            reply = c.cmd("SMOVE", src, dst, members[(i * 7) % 40])
            assert reply in (b":0\r\n", b":1\r\n"), reply
            moved += reply == b":1\r\n"
        return moved
    _both(lambda: smoves(ca, "s:1", "s:2"), lambda: smoves(cb, "s:2", "s:1"))
    s1 = {_bulk(f) for f in elements(ca.cmd("SMEMBERS", "s:1"))[1]}
    s2 = {_bulk(f) for f in elements(cb.cmd("SMEMBERS", "s:2"))[1]}
    assert not (s1 & s2) and s1 | s2 == {m.encode() for m in members}
    # INCRBYFLOAT from both sidecars sums exactly.

    def incrs(c):
        for _ in range(100):
            assert c.cmd("INCRBYFLOAT", "f", "0.5").startswith(b"$")
    _both(lambda: incrs(ca), lambda: incrs(cb))
    assert cb.cmd("GET", "f") == b"$3\r\n100\r\n"


NEW_COMMANDS = [
    "setnx", "setex", "psetex", "getset", "getex", "mget", "mset", "msetnx", "append", "strlen",
    "getrange", "substr", "setrange", "incrbyfloat", "copy", "rename", "renamenx", "expiretime",
    "pexpiretime", "object", "scan", "randomkey", "hsetnx", "hincrbyfloat", "hstrlen", "hrandfield",
    "hscan", "spop", "smismember", "srandmember", "sinter", "sunion", "sdiff", "smove", "sinterstore",
    "sunionstore", "sdiffstore", "sintercard", "sscan", "zscan",
]


def test_command_info_matches_redis(zkr, redis_ref):
    """Name, arity, flags and key positions as redis-server 7.0 lists them
    (what EVAL's redis.call and cluster-aware clients read)."""
    from resp import decode_one
    with zkr().client() as c:
        got = decode_one(c.cmd("COMMAND", "INFO", *NEW_COMMANDS))
    with redis_ref.client() as r:
        ref = decode_one(r.cmd("COMMAND", "INFO", *NEW_COMMANDS))
    bad = []
    for name, g, e in zip(NEW_COMMANDS, got, ref):
        if g is None or [g[0], g[1], sorted(g[2]), g[3], g[4], g[5]] != [e[0], e[1], sorted(e[2]), e[3], e[4], e[5]]:
            bad.append((name, g and g[:6], e[:6]))
    assert not bad, "\n".join(map(repr, bad))


def test_command_info_types_in_resp3(zkr, redis_ref):
    """In RESP3 an entry's flags, ACL categories and tips are sets, its key
    specs and subcommands arrays: the type bytes of each field as Redis's."""
    def kinds(port):
        with RawClient(port) as c:
            c.cmd("HELLO", "3")
            raw = c.cmd("COMMAND", "INFO", "get")
        assert raw.startswith(b"*1\r\n*10\r\n"), raw[:40]
        out, pos = [], len(b"*1\r\n*10\r\n")
        for _ in range(10):
            out.append(raw[pos:pos + 1])
            pos = frame_end(raw, pos)
        return out
    got, ref = kinds(zkr().port), kinds(redis_ref.port)
    assert [got[i] for i in (0, 1, 2, 3, 4, 5, 6, 7)] == [ref[i] for i in (0, 1, 2, 3, 4, 5, 6, 7)], (got, ref)
    assert got[2] == b"~" and got[8] == b"*" and got[9] == b"*"


@pytest.mark.parametrize("proto", [2, 3])
def test_from_scripts(zkr, redis_ref, proto):
    """The multi-key commands inside EVAL are part of the script's one
    transaction."""
    E = "EVAL"
    check(redis_ref.port, zkr().port, [
        [E, "redis.call('MSET', KEYS[1], 'a', KEYS[2], 'b') return redis.call('MGET', KEYS[1], KEYS[2])",
         "2", "@a", "@b"],
        [E, "return redis.call('MSETNX', KEYS[1], 'x', KEYS[2], 'y')", "2", "@a", "@c"],
        [E, "redis.call('RENAME', KEYS[1], KEYS[2]) return redis.call('EXISTS', KEYS[1], KEYS[2])",
         "2", "@a", "@d"],
        [E, "return redis.call('COPY', KEYS[1], KEYS[2])", "2", "@d", "@e"],
        [E, "redis.call('SADD', KEYS[1], 'm') return redis.call('SMOVE', KEYS[1], KEYS[2], 'm')",
         "2", "@s1", "@s2"],
        [E, "return redis.call('INCRBYFLOAT', KEYS[1], '1.5')", "1", "@f"],
        [E, "return redis.call('GETRANGE', KEYS[1], 0, -1)", "1", "@e"],
        [E, "return redis.pcall('RENAME', KEYS[1], KEYS[2])", "2", "@nope", "@x"],
        "MGET @a @b @c @d @e", "SMEMBERS @s2",
    ], proto, harness.unique("scripts") + ":")
