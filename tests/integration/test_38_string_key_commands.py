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
from resp import RawClient, elements


SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


class Unordered(Ignore):
    """Compared as the multiset of the reply's elements."""


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


NAMES = sorted(SEQUENCES)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_redis(name, proto, zkr, redis_ref):
    check(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")
