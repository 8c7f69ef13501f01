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


NAMES = sorted(SEQUENCES)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_redis(name, proto, zkr, redis_ref):
    check(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")
