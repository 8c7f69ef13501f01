"""Tier 20: the same command sequences against redis-server 7.0 and zkresp,
raw replies compared byte for byte, in RESP2 and in RESP3.

Every string/key command of issue 2 with its edge cases and errors.  Keys
are written "@name" (a per-test prefix is substituted).  PTTL/TTL replies
are compared with a tolerance.  IFEQ, DELEX and DELIFEQ do not exist in
redis-server 7.0: they are tested at the end directly against their
documented semantics (Redis 8.4 SET IFEQ / DELEX, Valkey 9 DELIFEQ).
"""

import itertools

import pytest

import harness
from differential import assert_same, Tol, Sleep, Raw  # noqa: F401


SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


# ---------------------------------------------------------------- SET

seq("set_basic", [
    "SET @a v", "GET @a", "SET @a v2", "GET @a", "SET @a ''", "GET @a", "EXISTS @a",
    ["SET", "@b", b"\x00\r\n\xff bin"], "GET @b",
    "SET @a", "SET", "SET @a v extra", "SET @a v EX", "SET @a v PX", "GET @a",
    "set @c lower", "get @c", "SeT @c Mixed", "gEt @c",
])

seq("set_nx_xx", [
    "SET @a v NX", "SET @a w NX", "GET @a", "SET @b v XX", "EXISTS @b", "SET @a w XX", "GET @a",
    "SET @a v NX XX", "SET @a v XX NX", "SET @a v nx", "SET @d v Nx", "SET @d v2 nX", "GET @d",
    "SET @d v3 xx", "GET @d", "SET @a v NX NX", "SET @e v XX XX", "EXISTS @e",
])

seq("set_expire_options", [
    "SET @a v PX 100000", Tol("PTTL @a", 1500), Tol("TTL @a", 2),
    "SET @a v EX 100", Tol("TTL @a", 2), Tol("PTTL @a", 2000),
    "SET @a v", "PTTL @a", "TTL @a",
    "SET @a v px 5000 nx", "SET @c v NX PX 100000", "SET @c v PX 100000 NX", "GET @c",
    "SET @d v ex 100 xx", "EXISTS @d", "SET @c w XX EX 50", Tol("TTL @c", 2), "GET @c",
    "SET @a v PX 100000 PX 100000", "SET @a v PX 100 EX 100", "SET @a v EX 100 PX 100",
    "SET @a v PX 100 PXAT 100", "SET @a v EXAT 100 EX 100",
])

seq("set_invalid_expire", [
    "SET @a v PX 0", "SET @a v PX -1", "SET @a v EX 0", "SET @a v EX -5", "SET @a v PXAT 0",
    "SET @a v EXAT 0", "SET @a v PXAT -1", "SET @a v EXAT -1",
    "SET @a v PX abc", "SET @a v EX 1.5", "SET @a v PX ''", "SET @a v PX ' 100'", "SET @a v PX 100x",
    "SET @a v PX 9223372036854775807", "SET @a v EX 9223372036854775807",
    "SET @a v EX 9223372036854775", "SET @a v PX 9223372036854775808",
    "SET @a v EX 10 KEEPTTL", "SET @a v KEEPTTL PX 10", "SET @a v KEEPTTL KEEPTTL",
    "SET @a v GET GET", "SET @a v FOO", "SET @a v PX", "SET @a v NX PX",
    "EXISTS @a",
])

seq("set_keepttl", [
    "SET @a v PX 100000", "SET @a w KEEPTTL", Tol("PTTL @a", 1500), "GET @a",
    "SET @a x", "PTTL @a", "SET @b v KEEPTTL", "PTTL @b", "GET @b",
    "SET @c v EX 100", "SET @c w XX KEEPTTL", Tol("TTL @c", 2), "SET @c y keepttl GET", Tol("TTL @c", 2),
])

seq("set_get", [
    "SET @a v GET", "SET @a w GET", "GET @a", "SET @a x NX GET", "GET @a",
    "SET @b x XX GET", "EXISTS @b", "SET @a y XX GET", "SET @a z GET PX 100000", Tol("PTTL @a", 1500),
    "SET @a q get", "SET @e v NX GET", "GET @e", "SET @a r GET KEEPTTL", "PTTL @a",
])

seq("set_pxat_exat", [
    "SET @a v PXAT {now_ms+100000}", Tol("PTTL @a", 1500),
    "SET @a v EXAT {now_s+100}", Tol("TTL @a", 2),
    "SET @b v PXAT {now_ms-1000}", "GET @b", "EXISTS @b", "PTTL @b",
    "SET @c v EXAT {now_s-10}", "GET @c",
    "SET @d v pxat {now_ms+60000} nx", Tol("PTTL @d", 1500), "SET @d v NX PXAT {now_ms+60000}",
])

seq("set_px_expiry", [
    "SET @a v PX 150", "GET @a", Sleep(400), "GET @a", "PTTL @a", "EXISTS @a",
    "SET @a v2 NX PX 100000", "GET @a",
    "SET @b v EX 1", Sleep(1300), "GET @b", "TTL @b", "SET @b w XX", "EXISTS @b",
])


def _option_permutations():
    steps = []
    for i, perm in enumerate(itertools.permutations(["NX", "PX 60000", "GET"])):
        words = " ".join(perm)
        steps += ["SET @p%d v %s" % (i, words), "SET @p%d w %s" % (i, words.lower()),
                  "GET @p%d" % i, Tol("PTTL @p%d" % i, 1500)]
    for i, perm in enumerate(itertools.permutations(["XX", "EX 60", "GET"])):
        words = " ".join(perm)
        steps += ["SET @q%d v %s" % (i, words), "SET @q%d v" % i, "SET @q%d w %s" % (i, words.title()),
                  "GET @q%d" % i, Tol("TTL @q%d" % i, 2)]
    return steps


seq("set_option_orders_and_cases", _option_permutations())

# ---------------------------------------------------------------- GET, GETDEL, DEL, UNLINK, EXISTS

seq("get_getdel", [
    "GET @a", "GET", "GET @a @b", "SET @a v", "GETDEL @a", "GET @a", "GETDEL @a", "GETDEL",
    "GETDEL @a @b", "SET @t v PX 100000", "GETDEL @t", "PTTL @t", "EXISTS @t",
])

seq("del_unlink", [
    "DEL @a", "SET @a 1", "SET @b 2", "DEL @a @b @c", "EXISTS @a @b", "SET @a 1", "DEL @a @a",
    "DEL", "SET @a 1", "SET @b 2", "UNLINK @a @b @c @a", "UNLINK", "UNLINK @a",
    "SET @t v PX 100000", "DEL @t", "PTTL @t",
])

seq("exists", [
    "EXISTS @a", "SET @a v", "EXISTS @a", "EXISTS @a @a @b", "EXISTS @b @a @a @a", "EXISTS",
    "SET @b v PX 100000", "EXISTS @a @b",
])

seq("type", [
    "TYPE @a", "SET @a v", "TYPE @a", "TYPE", "TYPE @a @b", "SET @t 1 PX 100000", "INCR @t", "TYPE @t",
])

# ---------------------------------------------------------------- expiry commands

seq("expire_basic", [
    "EXPIRE @a 100", "PEXPIRE @a 100000", "SET @a v", "EXPIRE @a 100", Tol("TTL @a", 2),
    "PEXPIRE @a 50000", Tol("PTTL @a", 1500), "EXPIRE @a abc", "EXPIRE @a 1.5", "EXPIRE @a ''",
    "EXPIRE @a", "EXPIRE", "EXPIRE @a 100 FOO", "PEXPIRE @a 100 BAR", "EXPIRE @a 100 NX extra",
    Tol("PTTL @a", 1500),
])

seq("expire_nx_xx_gt_lt", [
    "SET @a v", "EXPIRE @a 100 XX", "EXPIRE @a 100 GT", "TTL @a", "EXPIRE @a 100 LT", Tol("TTL @a", 2),
    "EXPIRE @a 50 NX", "EXPIRE @a 200 GT", Tol("TTL @a", 2), "EXPIRE @a 100 GT", "EXPIRE @a 300 LT",
    "EXPIRE @a 50 LT", Tol("TTL @a", 2), "EXPIRE @a 60 XX", Tol("TTL @a", 2),
    "EXPIRE @a 10 NX XX", "EXPIRE @a 10 GT LT", "EXPIRE @a 10 NX GT", "EXPIRE @a 10 NX LT",
    "EXPIRE @a 10 XX GT", "EXPIRE @a 10 xx", Tol("TTL @a", 2), "EXPIRE @a 20 gt", "EXPIRE @a 5 lt",
    Tol("TTL @a", 2), "EXPIRE @a 10 nx",
    "SET @b v", "PEXPIRE @b 100000 NX", "PEXPIRE @b 100000 NX", "PEXPIRE @b 200000 GT",
    Tol("PTTL @b", 1500), "PEXPIRE @b 300000 LT", "PEXPIRE @b 50000 LT", Tol("PTTL @b", 1500),
    "EXPIRE @missing 10 NX", "EXPIRE @missing 10 XX", "EXPIRE @missing 10 GT", "EXPIRE @missing 10 LT",
    "EXPIRE @b 10 GT XX", "EXPIRE @b 10 LT XX", Tol("PTTL @b", 1500),
])

seq("expire_zero_negative", [
    "SET @a v", "EXPIRE @a 0", "EXISTS @a", "SET @a v", "PEXPIRE @a -100", "GET @a",
    "SET @a v", "EXPIRE @a -1", "GET @a", "SET @a v", "PEXPIRE @a 0", "PTTL @a",
    "SET @b v PX 100000", "EXPIRE @b -5 GT", Tol("PTTL @b", 1500), "EXPIRE @b -5 LT", "EXISTS @b",
    "SET @c v", "EXPIRE @c -1 NX", "EXISTS @c",
])

seq("expire_overflow", [
    "SET @a v", "EXPIRE @a 9223372036854775807", "EXPIRE @a 9223372036854775",
    "PEXPIRE @a 9223372036854775807", "PEXPIRE @a 9223372036854775806",
    "EXPIREAT @a 9223372036854775807", "PEXPIREAT @a 9223372036854775807",
    "EXPIRE @a -9223372036854775808", "EXPIRE @a 9223372036854775808", Tol("PTTL @a", 3000),
    "SET @a v", "PEXPIRE @a -9223372036854775807", "EXISTS @a",
])

seq("expireat", [
    "SET @a v", "EXPIREAT @a {now_s+100}", Tol("TTL @a", 2), "PEXPIREAT @a {now_ms+100000}",
    Tol("PTTL @a", 1500), "PEXPIREAT @a {now_ms-1}", "EXISTS @a", "EXPIREAT @missing {now_s+100}",
    "SET @b v", "EXPIREAT @b {now_s-100}", "GET @b", "SET @c v", "EXPIREAT @c 0", "EXISTS @c",
    "SET @d v", "EXPIREAT @d {now_s+100} NX", "EXPIREAT @d {now_s+200} NX", "EXPIREAT @d {now_s+200} GT",
    Tol("TTL @d", 2), "PEXPIREAT @d {now_ms+50000} LT", Tol("PTTL @d", 1500),
    "EXPIREAT @d abc", "EXPIREAT @d", "PEXPIREAT @d 1 2",
])

seq("ttl_pttl", [
    "PTTL @a", "TTL @a", "SET @a v", "PTTL @a", "TTL @a", "PTTL", "TTL", "PTTL @a @b", "TTL @a @b",
    "SET @b v PX 1500", Tol("TTL @b", 1), Tol("PTTL @b", 1500), "SET @c v PX 100000", Tol("TTL @c", 1),
])

seq("persist", [
    "PERSIST @a", "SET @a v", "PERSIST @a", "EXPIRE @a 100", "PERSIST @a", "TTL @a", "PERSIST @a",
    "PERSIST", "PERSIST @a @b", "SET @b v PX 100000", "PERSIST @b", "PTTL @b", "GET @b",
])

# ---------------------------------------------------------------- counters

seq("incr_basic", [
    "INCR @a", "INCR @a", "INCRBY @a 10", "DECR @a", "DECRBY @a 20", "INCRBY @a -1", "GET @a",
    "INCRBY @b 0", "DECRBY @c -5", "DECR @d", "GET @d", "SET @e 100", "INCR @e", "GET @e",
    "SET @f -7", "INCRBY @f 7", "GET @f", "incr @f", "IncrBy @f 3",
])

seq("incr_not_integer", [
    "SET @a abc", "INCR @a", "SET @a 1.5", "INCR @a", "SET @a ' 1'", "INCR @a", "SET @a '1 '", "INCR @a",
    "SET @a 01", "INCR @a", "SET @a +1", "INCR @a", "SET @a -0", "INCR @a", "SET @a ''", "INCR @a",
    "SET @a 1e3", "INCR @a", "SET @a 0x10", "INCR @a", "SET @a 99999999999999999999", "INCR @a",
    ["SET", "@a", b"1\x00"], "INCR @a", "GET @a",
    "INCRBY @b abc", "INCRBY @b 1.5", "INCRBY @b ''", "INCRBY @b 9223372036854775808", "DECRBY @b x",
    "EXISTS @b", "INCR", "INCR @a @b", "INCRBY @a", "INCRBY @a 1 2", "DECR", "DECRBY @a",
    "SET @z 0", "INCR @z", "SET @m -1", "DECR @m", "GET @m",
])

seq("incr_overflow", [
    "SET @a 9223372036854775806", "INCR @a", "INCR @a", "GET @a", "INCRBY @a 0",
    "SET @b -9223372036854775807", "DECR @b", "DECR @b", "GET @b",
    "SET @c 1", "INCRBY @c 9223372036854775807", "DECRBY @c -9223372036854775807",
    "DECRBY @c -9223372036854775808", "INCRBY @c -9223372036854775808", "GET @c",
    "SET @d -2", "DECRBY @d 9223372036854775807", "GET @d",
])

seq("incr_keeps_ttl", [
    "SET @a 5 PX 100000", "INCR @a", Tol("PTTL @a", 1500), "INCRBY @a 10", "DECR @a", "DECRBY @a 2",
    Tol("PTTL @a", 1500), "GET @a",
])

# ---------------------------------------------------------------- arity and unknown commands

seq("wrong_arity", [
    "GET", "SET @a", "GETDEL", "DEL", "UNLINK", "EXISTS", "EXPIRE @a", "PEXPIRE @a", "EXPIREAT @a",
    "PEXPIREAT @a", "TTL", "PTTL", "PERSIST", "INCR", "INCRBY @a", "DECR", "DECRBY @a", "TYPE",
    "GET @a @b", "TTL @a @b", "INCR @a @b", "INCRBY @a 1 2", "DECR @a @b", "DECRBY @a 1 2",
    "GETDEL @a @b", "PERSIST @a @b", "TYPE @a @b", "get", "Set @a",
])

seq("unknown_commands", [
    "FOO", "FOO a b", "foo 'a b' c", "NOSUCH ''", ["FOO", b"a\r\nb"], ["FOO", "x" * 200],
    ["FOO"] + ["arg%d" % i for i in range(40)], ["X" * 200, "a"], "GETT @a", "SETEXX @a 1 v",
    "PING",
])

# ---------------------------------------------------------------- mixed lock traffic

seq("lock_lifecycle", [
    "SET @lock tok1 NX PX 30000", "SET @lock tok2 NX PX 30000", "GET @lock", Tol("PTTL @lock", 1500),
    "PEXPIRE @lock 60000", Tol("PTTL @lock", 1500), "PEXPIRE @lock 30000 GT", "PEXPIRE @lock 90000 GT",
    Tol("PTTL @lock", 1500), "DEL @lock", "SET @lock tok2 NX PX 30000", "GET @lock", "GETDEL @lock",
    "EXISTS @lock", "SET @lock tok3 PX 200 NX", Sleep(350), "SET @lock tok4 NX PX 200", "GET @lock",
    "INCR @fence", "INCR @fence", "GET @fence",
])

NAMES = sorted(SEQUENCES)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_redis(name, proto, zkr, redis_ref):
    assert_same(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")


# ---------------------------------------------------------------- Redis 8.4 / Valkey 9 commands


def _run(z, proto, steps):
    """Runs [(args, expected RESP2, expected RESP3 or None for same)] on one
    connection; returns the mismatches."""
    bad = []
    with z.client() as c:
        if proto == 3:
            assert c.cmd("HELLO", "3").startswith(b"%")
        for args, e2, e3 in steps:
            want = e2 if proto == 2 or e3 is None else e3
            got = c.cmd(*args)
            ok = want(got) if callable(want) else got == want
            if not ok:
                bad.append("%s\n    expected %r\n    got      %r" % (" ".join(map(str, args)), want, got))
    return bad


NIL2, NIL3 = b"$-1\r\n", b"_\r\n"
OK = b"+OK\r\n"


def _pttl_between(lo, hi):
    return lambda raw: raw.startswith(b":") and lo <= int(raw[1:-2]) <= hi


@pytest.mark.parametrize("proto", [2, 3])
def test_set_ifeq(zkr, proto):
    p = harness.unique("ifeq") + ":"
    a, m = p + "a", p + "missing"
    steps = [
        (["SET", a, "v1"], OK, None),
        (["SET", a, "v2", "IFEQ", "v1"], OK, None),
        (["GET", a], b"$2\r\nv2\r\n", None),
        (["SET", a, "v3", "IFEQ", "v1"], NIL2, NIL3),
        (["GET", a], b"$2\r\nv2\r\n", None),
        (["SET", m, "v", "IFEQ", "x"], NIL2, NIL3),
        (["EXISTS", m], b":0\r\n", None),
        (["SET", a, "v4", "IFEQ", "v2", "PX", "100000"], OK, None),
        (["PTTL", a], _pttl_between(98000, 100000), None),
        (["SET", a, "v5", "ifeq", "v4"], OK, None),
        (["PTTL", a], b":-1\r\n", None),   # a plain SET drops the TTL; so does SET IFEQ
        (["SET", a, "v6", "IFEQ", "v5", "KEEPTTL"], OK, None),
        (["SET", a, "v7", "PX", "50000", "IFEQ", "v6"], OK, None),
        (["PTTL", a], _pttl_between(48000, 50000), None),
        (["SET", a, "v8", "IFEQ", "v7", "GET"], b"$2\r\nv7\r\n", None),
        (["SET", a, "v9", "IFEQ", "nope", "GET"], b"$2\r\nv8\r\n", None),
        (["GET", a], b"$2\r\nv8\r\n", None),
        (["SET", a, "v", "NX", "IFEQ", "v8"], b"-ERR syntax error\r\n", None),
        (["SET", a, "v", "IFEQ", "v8", "XX"], b"-ERR syntax error\r\n", None),
        (["SET", a, "v", "IFEQ"], b"-ERR syntax error\r\n", None),
        (["SET", a, "v", "IFEQ", "v8", "IFEQ", "v8"], b"-ERR syntax error\r\n", None),
        (["GET", a], b"$2\r\nv8\r\n", None),
        (["SET", a, "", "IFEQ", "v8"], OK, None),
        (["SET", a, "w", "IFEQ", ""], OK, None),
        (["GET", a], b"$1\r\nw\r\n", None),
    ]
    bad = _run(zkr(), proto, steps)
    assert not bad, "SET IFEQ (Redis 8.4 semantics):\n" + "\n".join(bad)


@pytest.mark.parametrize("proto", [2, 3])
def test_delex_ifeq(zkr, proto):
    p = harness.unique("delex") + ":"
    a, b = p + "a", p + "b"
    steps = [
        (["SET", a, "tok"], OK, None),
        (["DELEX", a, "IFEQ", "other"], b":0\r\n", None),
        (["EXISTS", a], b":1\r\n", None),
        (["DELEX", a, "IFEQ", "tok"], b":1\r\n", None),
        (["EXISTS", a], b":0\r\n", None),
        (["DELEX", a, "IFEQ", "tok"], b":0\r\n", None),
        (["DELEX", b], b":0\r\n", None),
        (["SET", b, "x", "PX", "100000"], OK, None),
        (["DELEX", b], b":1\r\n", None),
        (["DELEX"], b"-ERR wrong number of arguments for 'delex' command\r\n", None),
        (["SET", a, "tok", "PX", "100000"], OK, None),
        (["DELEX", a, "FOO", "tok"], lambda r: r.startswith(b"-ERR "), None),
        (["DELEX", a, "IFEQ", "tok", "extra"], lambda r: r.startswith(b"-ERR "), None),
        (["EXISTS", a], b":1\r\n", None),
        (["delex", a, "ifeq", "tok"], b":1\r\n", None),
        (["EXISTS", a], b":0\r\n", None),
    ]
    bad = _run(zkr(), proto, steps)
    assert not bad, "DELEX (Redis 8.4 semantics):\n" + "\n".join(bad)


@pytest.mark.parametrize("proto", [2, 3])
def test_delifeq(zkr, proto):
    p = harness.unique("delifeq") + ":"
    a = p + "a"
    steps = [
        (["DELIFEQ", a, "tok"], b":0\r\n", None),
        (["SET", a, "tok", "NX", "PX", "30000"], OK, None),
        (["DELIFEQ", a, "TOK"], b":0\r\n", None),
        (["DELIFEQ", a, "tok "], b":0\r\n", None),
        (["GET", a], b"$3\r\ntok\r\n", None),
        (["DELIFEQ", a, "tok"], b":1\r\n", None),
        (["DELIFEQ", a, "tok"], b":0\r\n", None),
        (["EXISTS", a], b":0\r\n", None),
        (["DELIFEQ", a], b"-ERR wrong number of arguments for 'delifeq' command\r\n", None),
        (["DELIFEQ", a, "b", "c"], b"-ERR wrong number of arguments for 'delifeq' command\r\n", None),
        (["SET", a, b"\x00\xff"], OK, None),
        (["DELIFEQ", a, b"\x00\xff"], b":1\r\n", None),
    ]
    bad = _run(zkr(), proto, steps)
    assert not bad, "DELIFEQ (Valkey 9 semantics):\n" + "\n".join(bad)
