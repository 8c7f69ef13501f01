"""Tier 21: the data types (hashes, lists, sets, sorted sets) against
redis-server 7.0, raw replies compared byte for byte in RESP2 and RESP3.

Keys are written "@name" (see tests/lib/differential.py).  Where Redis's
order is unspecified (SMEMBERS, and HKEYS/HVALS/HGETALL of a hash that Redis
may keep as a hashtable) a step is wrapped in Unordered: the reply's header
must be equal and its elements (pairs, for a map or a flat field/value
array) the same multiset.  Everything else is byte-exact.

Null arrays (LPOP with a count on a missing key) and RESP3's [member,
score] pairs (ZRANGE ... WITHSCORES) are compared byte for byte like the
rest.
"""

import time

import pytest

import harness
from differential import Either, Ignore, Tol, Sleep, run_both, compare, describe
from resp import elements as _elements


class Unordered(Ignore):
    """Compared as a multiset of elements (pairs=True: of consecutive
    pairs, for HGETALL)."""

    def __init__(self, step, pairs=False):
        Ignore.__init__(self, step)
        self.pairs = pairs


def _canon(raw, pairs):
    parsed = _elements(raw)
    if parsed is None:
        return raw
    head, els = parsed
    if pairs:
        els = [els[i] + els[i + 1] for i in range(0, len(els) - 1, 2)]
    return head + b"".join(sorted(els))


def check(ref_port, port, steps, proto, prefix):
    ref, got = run_both(ref_port, port, steps, proto, prefix)
    bad = compare(steps, ref, got)
    for i, step in enumerate(steps):
        if not isinstance(step, Unordered):
            continue
        r = ref[i] if i < len(ref) else b"<no reply>"
        g = got[i] if i < len(got) else b"<no reply>"
        ok = _canon(r, step.pairs) == _canon(g, step.pairs)
        if not ok:
            bad.append("step %d: %s\n    redis-server: %r\n    zkresp:       %r" % (i, describe(step), r, g))
    assert not bad, "RESP%d replies differ from redis-server:\n%s" % (proto, "\n".join(bad))


SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


def U(step):
    return Unordered(step)


def UP(step):
    return Unordered(step, pairs=True)


# ---------------------------------------------------------------- hashes

seq("hash_basic", [
    "HSET @h f1 v1 f2 v2", "HSET @h f1 x f3 v3", "HSET @h f1 y", "HSET @h f4 a f4 b",
    "HGET @h f1", "HGET @h f4", "HGET @h nope", "HGET @missing f", "HMGET @h f1 nope f3",
    "HMGET @missing a b", "HLEN @h", "HLEN @missing", "HEXISTS @h f1", "HEXISTS @h nope",
    "HEXISTS @missing f", UP("HGETALL @h"), U("HKEYS @h"), U("HVALS @h"), "HGETALL @missing",
    "HKEYS @missing", "HVALS @missing", "TYPE @h", "HMSET @h f5 v5", "HGET @h f5",
    ["HSET", "@b", b"\x00\r\n", b"\xff\x00", "", ""], ["HGET", "@b", b"\x00\r\n"], "HGET @b ''",
    "hset @c A 1", "hget @c A", "HGET @c a",
])

seq("hash_order", [
    # Small hashes: Redis keeps them as a listpack, in insertion order.
    "HSET @h b 1 a 2 c 3", "HDEL @h a", "HSET @h a 4", "HKEYS @h", "HVALS @h", "HGETALL @h",
    "HSET @h z 0", "HGETALL @h",
])

seq("hash_hincrby", [
    "HINCRBY @h n 5", "HINCRBY @h n -3", "HGET @h n", "HINCRBY @h n x", "HINCRBY @h n 1.5",
    "HINCRBY @h n ''", "HINCRBY @h n 9223372036854775808", "HINCRBY @h n ' 1'",
    "HSET @h s abc sp ' 1' f 1.0 z 01 e ''", "HINCRBY @h s 1", "HINCRBY @h sp 1", "HINCRBY @h f 1",
    "HINCRBY @h z 1", "HINCRBY @h e 1",
    "HSET @h max 9223372036854775807 min -9223372036854775808", "HINCRBY @h max 1",
    "HINCRBY @h min -1", "HINCRBY @h max 0", "HINCRBY @h min 9223372036854775807", "HGET @h min",
    "HINCRBY @h max -9223372036854775808", "HINCRBY @new f -9223372036854775808", "HGET @new f",
    "HINCRBY @h", "HINCRBY @h n", "HINCRBY @h n 1 2",
])

seq("hash_hdel", [
    "HDEL @missing a", "HSET @h a 1 b 2 c 3", "HDEL @h x", "HDEL @h a a x", "HLEN @h", "EXISTS @h",
    "HDEL @h b c", "EXISTS @h", "HLEN @h", "TYPE @h", "HGETALL @h", "HDEL @h", "HDEL",
])

seq("hash_wrongtype", [
    "SET @s v", "HSET @s f v", "HGET @s f", "HMGET @s f", "HEXISTS @s f", "HDEL @s f", "HLEN @s",
    "HKEYS @s", "HVALS @s", "HGETALL @s", "HINCRBY @s f 1", "HINCRBY @s f x", "HMSET @s f v",
    "GET @s", "HSET @h f 1", "GET @h", "INCR @h", "GETDEL @h", "SET @h v GET", "TYPE @h",
    "SET @h v", "TYPE @h", "GET @h", "HSET @h f", "HSET @h f v g",
])

seq("hash_arity", [
    "HSET", "HSET @h", "HSET @h f", "HMSET @h f", "HGET @h", "HGET @h f g", "HMGET @h", "HINCRBY @h f",
    "HEXISTS @h", "HDEL @h", "HLEN", "HLEN @h x", "HKEYS", "HVALS @h x", "HGETALL", "HGETALL @h x",
    "EXISTS @h",
])

seq("hash_ttl", [
    "HSET @h f 1", "PEXPIRE @h 100000", "HSET @h g 2", Tol("PTTL @h", 1500), "HINCRBY @h f 1",
    "HDEL @h g", Tol("PTTL @h", 1500), "HMSET @h x y", Tol("PTTL @h", 1500), "PERSIST @h", "PTTL @h",
    "HSET @t f 1", "PEXPIRE @t 200", Sleep(400), "HGET @t f", "HLEN @t", "EXISTS @t", "HSET @t g 2",
    "PTTL @t", "HKEYS @t",
])

# ---------------------------------------------------------------- lists

seq("list_push_range", [
    "RPUSH @l a b", "LPUSH @l x y z", ["RPUSH", "@l", b"\x00\r\n"], "LRANGE @l 0 -1", "LLEN @l",
    "LLEN @missing", "TYPE @l", "LRANGE @l 1 2", "LRANGE @l -2 100", "LRANGE @l -100 100",
    "LRANGE @l 2 1", "LRANGE @l 6 10", "LRANGE @l -1 -2", "LRANGE @l -9223372036854775808 0",
    "LRANGE @l 0 9223372036854775807", "LRANGE @missing 0 -1", "LRANGE @missing x 1", "LRANGE @l 0 1.0",
    "LRANGE @l '' 1", "rpush @l q", "lrange @l -1 -1",
])

seq("list_pop", [
    "RPUSH @l a b c", "LPOP @l", "RPOP @l", "LPOP @l", "EXISTS @l", "LPOP @l", "RPOP @l",
    "RPUSH @l a b c d e", "LPOP @l 2", "RPOP @l 2", "LPOP @l 0", "RPOP @l 0", "RPOP @l 9223372036854775807",
    "EXISTS @l", "LPOP @l -1", "LPOP @l x", "RPOP @l 1.5", "LPOP @l ''", "LPOP @l 9223372036854775808",
    "LPOP @l 1 2", "RPOP @l 1 2", "LPOP", "RPUSH @m a", "LPOP @m 1", "EXISTS @m",
    "LPOP @l 0", "LPOP @l 3", "RPOP @l 1",
])

seq("list_lindex", [
    "RPUSH @l a b c", "LINDEX @l 0", "LINDEX @l -1", "LINDEX @l -3", "LINDEX @l -4", "LINDEX @l 3",
    "LINDEX @l x", "LINDEX @missing x", "LINDEX @missing 0", "LINDEX @l 9223372036854775807",
    "LINDEX @l -9223372036854775808", "LINDEX @l", "LINDEX @l 0 1",
])

seq("list_lrem", [
    "RPUSH @l a b a c a d a", "LREM @l -2 a", "LRANGE @l 0 -1", "LREM @l 1 a", "LRANGE @l 0 -1",
    "LREM @l 0 zz", "LREM @l 0 a", "LRANGE @l 0 -1", "LREM @missing 0 a", "LREM @missing x a",
    "LREM @l x a", "RPUSH @m x x", "LREM @m 5 x", "EXISTS @m", "LREM @l", "LREM @l 1 a b",
    "RPUSH @n a b a", "LREM @n -9223372036854775808 a", "LRANGE @n 0 -1",
])

seq("list_wrongtype", [
    "SET @s v", "RPUSH @s a", "LPUSH @s a", "LPOP @s", "RPOP @s", "LPOP @s 0", "LPOP @s -1",
    "LINDEX @s 0", "LINDEX @s x", "LRANGE @s 0 1", "LREM @s 0 a", "LREM @s x a", "LLEN @s",
    "RPUSH @l a", "GET @l", "HGET @l a", "HSET @l a b", "INCR @l", "TYPE @l",
    "HSET @h a b", "RPUSH @h a", "LLEN @h", "SET @l v", "TYPE @l",
])

seq("list_arity", [
    "RPUSH", "RPUSH @l", "LPUSH @l", "LPOP", "RPOP", "LINDEX @l", "LRANGE @l 0", "LRANGE @l 0 1 2",
    "LREM @l 0", "LLEN", "LLEN @l @m", "EXISTS @l",
])

seq("list_ttl", [
    "RPUSH @l a b c", "PEXPIRE @l 100000", "RPUSH @l d", "LPOP @l", "LREM @l 0 b", Tol("PTTL @l", 1500),
    "LPUSH @l z", Tol("PTTL @l", 1500), "LRANGE @l 0 -1",
    "RPUSH @t a", "PEXPIRE @t 200", Sleep(400), "LLEN @t", "LPOP @t", "RPUSH @t b", "PTTL @t",
])

# ---------------------------------------------------------------- sets

seq("set_basic", [
    "SADD @s a b a", "SADD @s b c", "SADD @s c", ["SADD", "@s", b"\x00\r\n"], "SISMEMBER @s a",
    ["SISMEMBER", "@s", b"\x00\r\n"], "SISMEMBER @s x", "SISMEMBER @missing x", U("SMEMBERS @s"),
    "SMEMBERS @missing", "SCARD @s", "SCARD @missing", "TYPE @s", "sadd @s A", "SISMEMBER @s A",
    "SADD @n 3 1 2", U("SMEMBERS @n"),
])

seq("set_srem", [
    "SREM @missing a", "SADD @s a b c", "SREM @s x", "SREM @s a a x", U("SMEMBERS @s"), "SREM @s b c",
    "EXISTS @s", "SCARD @s", "SMEMBERS @s", "TYPE @s",
])

seq("set_wrongtype_arity", [
    "SET @str v", "SADD @str a", "SREM @str a", "SISMEMBER @str a", "SMEMBERS @str", "SCARD @str",
    "SADD @s a", "GET @s", "HGET @s a", "RPUSH @s a", "LLEN @s", "HLEN @s",
    "SADD", "SADD @s", "SREM @s", "SISMEMBER @s", "SISMEMBER @s a b", "SMEMBERS", "SMEMBERS @s x",
    "SCARD", "SCARD @s x",
])

seq("set_ttl", [
    "SADD @s a b", "PEXPIRE @s 100000", "SADD @s c", "SREM @s a", Tol("PTTL @s", 1500), U("SMEMBERS @s"),
    "SADD @t a", "PEXPIRE @t 200", Sleep(400), "SCARD @t", "SISMEMBER @t a", "SADD @t b", "PTTL @t",
])

# ---------------------------------------------------------------- sorted sets

seq("zset_zadd", [
    "ZADD @z 1 a 2 c 2 b 3 d -1 e", "ZRANGE @z 0 -1", "ZADD @z 10 a", "ZRANGE @z 0 -1", "ZCARD @z",
    "ZCARD @missing", "TYPE @z", ["ZADD", "@z", "0", b"\x00\r\n"], ["ZSCORE", "@z", b"\x00\r\n"],
    "ZADD @z", "ZADD @z 1", "ZADD @z 1 a 2", "ZADD @z NX", "ZADD @z NX XX", "ZADD @z 1 a nx",
    "ZADD @z NX XX 1 a", "ZADD @z XX NX 1 a", "ZADD @z GT LT 1 a", "ZADD @z NX GT 1 a", "ZADD @z LT NX 1 a",
    "ZADD @z INCR 1 a 2 b", "ZADD @z NX XX INCR 1 a 2 b", "ZADD @z XX 1 nosuch", "ZADD @n XX 1 a",
    "EXISTS @n", "ZADD @n XX INCR 1 a", "ZADD @n NX 1 a 2 b",
    "ZADD @z NX 5 a 3 f", "ZSCORE @z a", "ZADD @z XX 5 a 3 g", "ZSCORE @z g",
    "ZADD @z GT CH 100 a 0 b 7 h", "ZSCORE @z b", "ZADD @z lt ch 1 b 200 a", "ZADD @z CH 1 b",
    "ZADD @z CH 1 b 1 b", "ZADD @z ch 2 b", "ZADD @z xx gt ch 3 b", "ZADD @z XX LT 5 b",
    "ZADD @z GT INCR 1 a", "ZADD @z LT INCR 1 a", "ZADD @z NX INCR 1 a", "ZADD @z XX INCR 1 a",
    "ZADD @z XX INCR 1 nope", "ZADD @z INCR 0 a", "ZADD @z INCR 4 new", "ZADD @z INCR 0.1 new",
    "ZADD @z inf i", "ZADD @z INCR -inf i", "ZSCORE @z i", "ZRANGE @z 0 -1",
    "zadd @z Gt Ch 1000 a", "ZSCORE @z a",
])

seq("zset_scores", [
    "ZADD @z inf a -INF b +Infinity c 0x10 d 1e3 e", "ZADD @z .5 f 5. g -0 h 1e-310 i 0.1 j",
    "ZADD @z 9007199254740993 k 1e20 l -1.5e-7 m 123456789.125 n", "ZSCORE @z a", "ZSCORE @z b",
    "ZSCORE @z d", "ZSCORE @z e", "ZSCORE @z f", "ZSCORE @z g", "ZSCORE @z h", "ZSCORE @z i",
    "ZSCORE @z j", "ZSCORE @z k", "ZSCORE @z l", "ZSCORE @z m", "ZSCORE @z n", "ZRANGE @z 0 -1",
    "ZADD @z x m", "ZADD @z nan m", "ZADD @z NaN m", "ZADD @z ' 1' m", "ZADD @z '1 ' m", "ZADD @z '' m",
    "ZADD @z 1e400 m", "ZADD @z -1e400 m", "ZADD @z 1e-400 m", "ZADD @z 1e m", "ZADD @z 0x m",
    "ZADD @z . m", ["ZADD", "@z", b"1\x00", "m"], "ZADD @z --1 m", "ZADD @z inf1 m", "ZADD @z 1,5 m",
    "ZINCRBY @z 0.1 j", "ZINCRBY @z 0.2 j", "ZINCRBY @z 1 a", "ZINCRBY @z -inf a", "ZINCRBY @z nan a",
    "ZINCRBY @z x a", "ZSCORE @z a", "ZSCORE @z nope", "ZSCORE @missing a",
])

seq("zset_zincrby_zrem_zrank", [
    "ZINCRBY @z 1.5 a", "ZINCRBY @z 0.1 a", "ZINCRBY @z 1 a b", "ZINCRBY @z 1", "ZADD @z 0 b 9 c",
    "ZRANK @z b", "ZRANK @z a", "ZRANK @z c", "ZRANK @z x", "ZRANK @missing x", "ZRANK @z",
    # Redis 7.2 takes ZRANK key member WITHSCORE (test_37), so a third
    # argument that is not WITHSCORE is a syntax error there
    Either("ZRANK @z a b", b"-ERR syntax error\r\n"),
    "ZREM @missing a", "ZREM @z a a x b", "ZRANGE @z 0 -1", "ZREM @z c", "EXISTS @z", "ZREM @z",
    "ZADD @r 1 b 1 a 1 c 0 z", "ZRANK @r a", "ZRANK @r z", "ZRANK @r c",
])

seq("zset_zrange_rank", [
    "ZADD @z 1 a 2 b 2.5 c 3 d -1 e", "ZRANGE @z 0 -1", "ZRANGE @z -2 -1", "ZRANGE @z 3 1",
    "ZRANGE @z -100 100", "ZRANGE @z 0 1 REV", "ZRANGE @z -2 -1 rev", "ZRANGE @z 5 10",
    "ZRANGE @missing 0 -1", "ZRANGE @z x 1", "ZRANGE @missing 0 1.5", "ZRANGE @z 0 1 FOO",
    "ZRANGE @z 0 1 REV REV", "ZRANGE @z 0 1 BYSCORE BYLEX", "ZRANGE @z 0 1 LIMIT 1", "ZRANGE @z 0 1 LIMIT 0 1",
    "ZRANGE @z 0 9223372036854775807", "ZRANGE @z -9223372036854775808 0", "ZRANGE @z", "ZRANGE @z 0",
    "ZRANGE @missing 0 1 FOO",
])

seq("zset_zrange_withscores", [
    # RESP2 only: in RESP3 Redis answers pairs (see test_zrange_withscores_resp3).
    "ZADD @z 1 a 2 b 2.5 c 3 d -1 e 0.1 f inf g", "ZRANGE @z 0 -1 WITHSCORES", "ZRANGE @z -2 -1 withscores",
    "ZRANGE @z 0 1 REV WITHSCORES", "ZRANGE @z (1 3 BYSCORE WITHSCORES", "ZRANGEBYSCORE @z -inf +inf WITHSCORES",
    "ZRANGEBYSCORE @z (1 (3 WITHSCORES", "ZRANGEBYSCORE @z 1 2 LIMIT 1 1 WITHSCORES LIMIT 0 5",
    "ZRANGEBYSCORE @z 1 2 withscores withscores", "ZRANGE @z 1 1 WITHSCORES WITHSCORES",
])

seq("zset_zrange_byscore", [
    "ZADD @z 1 a 2 b 2 c 3 d -1 e", "ZRANGE @z (1 3 BYSCORE", "ZRANGE @z 3 (1 BYSCORE REV",
    "ZRANGE @z 3 (1 REV BYSCORE", "ZRANGE @z -inf +inf BYSCORE LIMIT 1 2", "ZRANGE @z +inf -inf BYSCORE REV LIMIT 1 2",
    "ZRANGE @z -inf +inf BYSCORE LIMIT 1 -1", "ZRANGE @z -inf +inf BYSCORE LIMIT -1 2",
    "ZRANGE @z -inf +inf BYSCORE LIMIT 1 0", "ZRANGE @z -inf +inf BYSCORE LIMIT 10 1",
    "ZRANGE @z -inf +inf BYSCORE LIMIT 4 10", "ZRANGE @z -inf +inf BYSCORE LIMIT 5 10",
    "ZRANGE @z -inf +inf BYSCORE LIMIT x 1", "ZRANGE @z -inf +inf BYSCORE LIMIT 1", "ZRANGE @z x y BYSCORE",
    "ZRANGE @missing x y BYSCORE", "ZRANGE @missing 0 1 BYSCORE",
    "ZRANGEBYSCORE @z -inf +inf", "ZRANGEBYSCORE @z '' 2", "ZRANGEBYSCORE @z ' 1' 2", "ZRANGEBYSCORE @z ( 2",
    "ZRANGEBYSCORE @z '( 1' 2", "ZRANGEBYSCORE @z 1e400 inf", "ZRANGEBYSCORE @z 2 1", "ZRANGEBYSCORE @z (2 2",
    "ZRANGEBYSCORE @z 2 (2", "ZRANGEBYSCORE @z 1 2 LIMIT 1 1", "ZRANGEBYSCORE @z 1 2 REV",
    "ZRANGEBYSCORE @z 1 2 BYSCORE", "ZRANGEBYSCORE @z nan 2", "ZRANGEBYSCORE @z x 2", "ZRANGEBYSCORE @z '1 ' 2",
    "ZRANGEBYSCORE @z ' ' 2", "ZRANGEBYSCORE @z (x 2", "ZRANGEBYSCORE @z 1) 2", "ZRANGEBYSCORE @missing x 1",
    "ZRANGEBYSCORE @missing 0 1 foo", "ZRANGEBYSCORE @z 0x1 2", "ZRANGEBYSCORE @z -Infinity 2",
    "ZRANGEBYSCORE @z +inf -inf", "ZRANGEBYSCORE @z -inf -inf", "ZRANGEBYSCORE @z 1 2 LIMIT",
    "ZRANGEBYSCORE @z 1 2 LIMIT 0 9223372036854775807", "ZRANGEBYSCORE @z", "ZRANGEBYSCORE @z 1",
    ["ZRANGEBYSCORE", "@z", b"2\x00junk", "3"],
])

seq("zset_zrange_bylex", [
    "ZADD @z 0 a 0 b 0 c 0 d", "ZRANGE @z - + BYLEX", "ZRANGE @z (a [c BYLEX", "ZRANGE @z [c (a BYLEX REV",
    "ZRANGE @z - + BYLEX LIMIT 1 1", "ZRANGE @z + - BYLEX", "ZRANGE @z (b [b BYLEX", "ZRANGE @z [b [b BYLEX",
    "ZRANGE @z a b BYLEX", "ZRANGE @z - + BYLEX WITHSCORES", "ZRANGE @z -x + BYLEX", "ZRANGE @z [ + BYLEX",
    "ZRANGE @z ( + BYLEX", "ZRANGE @z [bb [cc BYLEX", "ZRANGE @z + - BYLEX REV", "ZRANGE @z - + BYLEX REV LIMIT 1 2",
    "ZADD @m 1 z 2 a 3 m", "ZRANGE @m - + BYLEX", "ZRANGE @m [b [z BYLEX", "ZRANGE @m [a [m BYLEX",
    "ZRANGE @m [m [a BYLEX REV",
])

seq("zset_zremrangebyscore", [
    "ZADD @z 1 a 2 b 2 c 3 d -1 e", "ZREMRANGEBYSCORE @z x 1", "ZREMRANGEBYSCORE @missing x 1",
    "ZREMRANGEBYSCORE @missing 0 1", "ZREMRANGEBYSCORE @z 10 20", "ZREMRANGEBYSCORE @z (1 2", "ZRANGE @z 0 -1",
    "ZREMRANGEBYSCORE @z 3 1", "ZREMRANGEBYSCORE @z -inf +inf", "EXISTS @z", "ZREMRANGEBYSCORE @z",
    "ZREMRANGEBYSCORE @z 1 2 3",
])

seq("zset_wrongtype", [
    "SET @s v", "ZADD @s 1 a", "ZINCRBY @s 1 a", "ZREM @s a", "ZSCORE @s a", "ZRANK @s a", "ZCARD @s",
    "ZRANGE @s 0 1", "ZRANGEBYSCORE @s 0 1", "ZREMRANGEBYSCORE @s 0 1", "ZADD @s x a", "ZADD @s NX XX 1 a",
    "ZINCRBY @s x a", "ZRANGE @s x 1", "ZREMRANGEBYSCORE @s x 1", "ZADD @z 1 a", "GET @z", "SADD @z a",
    "HGET @z a", "LLEN @z", "INCR @z", "TYPE @z", "SET @z v", "TYPE @z",
])

seq("zset_ttl", [
    "ZADD @z 1 a 2 b", "PEXPIRE @z 100000", "ZADD @z 3 c", "ZINCRBY @z 1 a", "ZREM @z b",
    "ZREMRANGEBYSCORE @z 100 200", "ZADD @z XX CH 5 a", Tol("PTTL @z", 1500), "ZRANGE @z 0 -1",
    "ZADD @t 1 a", "PEXPIRE @t 200", Sleep(400), "ZCARD @t", "ZSCORE @t a", "ZADD @t 2 b", "PTTL @t",
])

seq("semaphore_zset", [
    # redis-semaphore: a zset of holders scored by acquire time.
    "ZREMRANGEBYSCORE @sem -inf 1000", "ZCARD @sem", "ZADD @sem 2000 id1", "ZADD @sem 2001 id2",
    "ZRANGE @sem 0 -1", "ZRANK @sem id2", "ZREMRANGEBYSCORE @sem -inf 2000", "ZCARD @sem",
    "ZADD @sem 3000 id2", "ZSCORE @sem id2", "ZREM @sem id2", "EXISTS @sem",
])

# ---------------------------------------------------------------- Redisson-style usage

seq("redisson_hash_lock", [
    "EXISTS @lock", "HINCRBY @lock uuid:1 1", "PEXPIRE @lock 30000", Tol("PTTL @lock", 1500),
    "HEXISTS @lock uuid:1", "HINCRBY @lock uuid:1 1", "PEXPIRE @lock 30000", "HEXISTS @lock uuid:2",
    Tol("PTTL @lock", 1500), "HINCRBY @lock uuid:1 -1", "HINCRBY @lock uuid:1 -1", "HDEL @lock uuid:1",
    "EXISTS @lock", "HGETALL @lock",
])

seq("redisson_fair_lock_queue", [
    "RPUSH @queue t1", "RPUSH @queue t2", "RPUSH @queue t3", "LINDEX @queue 0", "LRANGE @queue 0 -1",
    "LREM @queue 0 t2", "LPOP @queue", "LINDEX @queue 0", "LLEN @queue", "LPOP @queue", "EXISTS @queue",
])


NAMES = sorted(SEQUENCES)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_redis(name, proto, zkr, redis_ref):
    check(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")


@pytest.mark.parametrize("proto", [2, 3])
def test_zrange_withscores(zkr, redis_ref, proto):
    """WITHSCORES: a flat array in RESP2, [member, score] pairs in RESP3."""
    check(redis_ref.port, zkr().port, [
        "ZADD @z 1 a 2 b 2.5 c 3 d -1 e 0.1 f inf g",
        "ZRANGE @z 0 -1 WITHSCORES", "ZRANGE @z -2 -1 WITHSCORES", "ZRANGE @z 0 1 REV WITHSCORES",
        "ZRANGE @z (1 3 BYSCORE WITHSCORES", "ZRANGEBYSCORE @z -inf +inf WITHSCORES",
        "ZRANGEBYSCORE @z (1 (3 WITHSCORES LIMIT 0 1", "ZRANGE @missing 0 -1 WITHSCORES",
        "ZRANGE @z 0 -1", "ZRANGEBYSCORE @z 1 2",
    ], proto, harness.unique("zws") + ":")


def test_unordered_checks_can_fail():
    """The comparison helpers themselves reject what they must."""
    assert _canon(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", False) == _canon(b"*2\r\n$1\r\nb\r\n$1\r\na\r\n", False)
    assert _canon(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", False) != _canon(b"*2\r\n$1\r\na\r\n$1\r\nc\r\n", False)
    assert _canon(b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", False) != _canon(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", False)
    m1 = b"%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"
    m2 = b"%2\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n"
    m3 = b"%2\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n1\r\n"
    assert _canon(m1, True) == _canon(m2, True)
    assert _canon(m1, True) != _canon(m3, True)


# ---------------------------------------------------------------- lifetime on a real ZooKeeper


def test_types_lifetime_follows_last_writer(zkresp_pair, kz):
    """Every type is one znode; with a TTL it is ephemeral, owned by the
    session of its writer, and keeps its TTL across writes; written through
    a second sidecar it is shared (its entries are two sidecars' clients'):
    persistent, keeping its TTL; without one it is persistent."""
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    sa, sb = a.session_id(), b.session_id()
    writes = {
        "h": (["HSET", "h", "f", "1"], ["HINCRBY", "h", "f", "1"], ["HGET", "h", "f"], b"$1\r\n2\r\n"),
        "l": (["RPUSH", "l", "a", "b"], ["LPOP", "l"], ["LRANGE", "l", "0", "-1"], b"*1\r\n$1\r\nb\r\n"),
        "s": (["SADD", "s", "a"], ["SADD", "s", "b"], ["SCARD", "s"], b":2\r\n"),
        "z": (["ZADD", "z", "1", "a"], ["ZINCRBY", "z", "1.5", "a"], ["ZSCORE", "z", "a"], b"$3\r\n2.5\r\n"),
    }
    for key, (first, second, read, want) in writes.items():
        assert ca.cmd(*first).startswith(b":"), first
        _, st = harness.key_stat(kz, a.root, key)
        assert st is not None and st.ephemeralOwner == 0, (key, st)
        assert ca.cmd("PEXPIRE", key, "30000") == b":1\r\n"
        _, st = harness.key_stat(kz, a.root, key)
        assert st.ephemeralOwner == sa, (key, st, hex(sa))
        reply = cb.cmd(*second)
        assert not reply.startswith(b"-"), (second, reply)
        _, st = harness.key_stat(kz, a.root, key)
        assert st.ephemeralOwner == 0, (key, st, hex(sb))
        assert ca.cmd(*read) == want, (read, ca.cmd(*read))
        # a reads b's node through the leader-clock offset, which errs late
        # by up to a reply's latency (keyspace.lua): a few ms over 30000.
        pttl = int(ca.cmd("PTTL", key)[1:-2])
        assert 25000 <= pttl <= 30200, (key, pttl)
        assert ca.cmd("PERSIST", key) == b":1\r\n"
        _, st = harness.key_stat(kz, a.root, key)
        assert st.ephemeralOwner == 0, (key, st)
        assert cb.cmd("PTTL", key) == b":-1\r\n"
        assert cb.cmd("TYPE", key) == {"h": b"+hash\r\n", "l": b"+list\r\n", "s": b"+set\r\n",
                                        "z": b"+zset\r\n"}[key]


def test_types_vanish_with_their_sidecar(make_zkresp, kz):
    """A collection with a TTL is lost with its owner's session (a killed
    sidecar), as a lock must be."""
    a = make_zkresp()
    b = make_zkresp(root=a.root)
    ca = a.client()
    assert ca.cmd("HSET", "lock", "uuid:1", "1") == b":1\r\n"
    assert ca.cmd("PEXPIRE", "lock", "60000") == b":1\r\n"
    assert ca.cmd("ZADD", "sem", "1", "id1") == b":1\r\n"
    assert ca.cmd("PEXPIRE", "sem", "60000") == b":1\r\n"
    assert ca.cmd("RPUSH", "plain", "x") == b":1\r\n"
    a.kill9()
    cb = b.client()
    deadline = time.time() + 20
    while time.time() < deadline and cb.cmd("EXISTS", "lock", "sem") != b":0\r\n":
        time.sleep(0.2)
    assert cb.cmd("EXISTS", "lock", "sem") == b":0\r\n"
    assert cb.cmd("LRANGE", "plain", "0", "-1") == b"*1\r\n$1\r\nx\r\n"


TYPE_COMMANDS = ["hset", "hmset", "hget", "hmget", "hincrby", "hexists", "hdel", "hlen", "hkeys", "hvals",
                 "hgetall", "rpush", "lpush", "lpop", "rpop", "lindex", "lrange", "lrem", "llen", "sadd",
                 "srem", "sismember", "smembers", "scard", "zadd", "zincrby", "zrem", "zscore", "zrank", "zcard",
                 "zrange", "zrangebyscore", "zremrangebyscore"]


def test_command_info_matches_redis(zkr, redis_ref):
    """COMMAND INFO of every type command: name, arity, flags, first key,
    last key, step as redis-server 7.0 lists them."""
    from resp import decode_one
    with zkr().client() as c:
        got = decode_one(c.cmd("COMMAND", "INFO", *TYPE_COMMANDS))
    with redis_ref.client() as r:
        ref = decode_one(r.cmd("COMMAND", "INFO", *TYPE_COMMANDS))
    assert len(got) == len(TYPE_COMMANDS)
    for name, g, e in zip(TYPE_COMMANDS, got, ref):
        if name == "zrank":
            assert e[1] == 3 and g[1] == -3  # Redis 7.2: ZRANK key member [WITHSCORE]
            e = [e[0], -3] + list(e[2:])
        assert g is not None, "COMMAND INFO %s: zkresp does not know it" % name
        assert [g[0], g[1], sorted(g[2]), g[3], g[4], g[5]] == [e[0], e[1], sorted(e[2]), e[3], e[4], e[5]], \
            (name, g[:6], e[:6])
