"""Tier 42: MULTI, EXEC and DISCARD (scripts/cmd_multi.lua).

Differential sequences against redis-server 7.0 (exact reply bytes in RESP2
and RESP3): queued commands, an error inside EXEC with the others applied,
refusals while queued (EXECABORT, nothing applied), nested MULTI, EXEC and
DISCARD without MULTI, an empty transaction, RESET inside MULTI, hashes,
sets and sorted sets.  Then redis-py's transactional pipeline against both,
the pipelined order of a transaction and the commands after it, atomicity
across two sidecars, what zkresp refuses to queue, a client closed inside
MULTI, and the caps.
"""

import signal
import threading

import pytest
import redis

import harness
from differential import assert_same
from resp import Err, RawClient, encode

SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


seq("multi_basic", [
    "MULTI", "SET @a 1", "INCR @a", "INCRBY @a 5", "GET @a", "GET @missing", "EXEC", "GET @a",
])

seq("multi_error_inside_exec", [
    "SET @s foo",
    "MULTI", "SET @b 1", "INCR @s", "INCR @b", "HSET @s f v", "APPEND @s bar", "EXEC",
    "GET @b", "GET @s",
])

seq("multi_refused_while_queued", [
    "MULTI", "SET @c 1", "SET @c", "INCR @c", "EXEC", "GET @c",
    "MULTI", "SET @c 1", "NOSUCHCOMMAND x y", "EXEC", "GET @c",
    "MULTI", "SET @c 1", "EXEC x", "EXEC", "GET @c",
    "MULTI", "SET @c 1", "MULTI x", "DISCARD x", "EXEC", "GET @c",
])

seq("multi_nested_and_without", [
    "EXEC", "DISCARD",
    "MULTI", "MULTI", "SET @d 1", "EXEC", "GET @d",
    "EXEC", "DISCARD",
])

seq("multi_discard", [
    "MULTI", "SET @e 1", "INCR @e", "DISCARD", "GET @e", "EXEC", "DISCARD",
    "MULTI", "EXEC",
    "MULTI", "DISCARD",
])

seq("multi_reset", [
    "MULTI", "SET @f 1", "RESET", "GET @f", "EXEC", "SET @f 2", "GET @f",
])

seq("multi_types", [
    "MULTI", "HSET @h f1 v1", "HSET @h f2 v2", "HGETALL @h", "HGET @h f2", "HINCRBY @h n 3",
    "SADD @set a b c", "SISMEMBER @set b", "SCARD @set", "SMISMEMBER @set a x",
    "ZADD @z 1.5 m1 2 m2", "ZSCORE @z m1", "ZRANGE @z 0 -1 WITHSCORES", "ZINCRBY @z 1 m1",
    "RPUSH @l x y", "LRANGE @l 0 -1", "EXISTS @h @set @z @l @nope", "TYPE @h", "EXEC",
    "HGETALL @h", "ZRANGE @z 0 -1 WITHSCORES",
])

seq("multi_keys_and_ttl", [
    "MULTI", "SET @t v", "PEXPIRE @t 100000", "TTL @t", "SET @u w NX", "SET @u w2 NX",
    "GETSET @u w3", "DEL @t", "EXISTS @t", "MSET @m1 1 @m2 2", "MGET @m1 @m2 @m3", "EXEC",
    "MGET @t @u @m1 @m2",
])


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_same_as_redis(name, proto, zkr, redis_ref):
    assert_same(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")


# ------------------------------------------------------------- redis-py

def py_pipeline(r, p):
    pipe = r.pipeline()   # transaction=True: MULTI ... EXEC
    pipe.set(p + "k", "v")
    pipe.expire(p + "k", 1000)
    pipe.incr(p + "n")
    pipe.incrby(p + "n", 4)
    pipe.get(p + "k")
    pipe.hset(p + "h", mapping={"a": "1"})
    pipe.hgetall(p + "h")
    pipe.sadd(p + "s", "x", "y")
    pipe.smembers(p + "s")
    pipe.get(p + "missing")
    pipe.ttl(p + "k")
    return pipe.execute()


def py_failing_pipeline(r, p):
    r.set(p + "str", "text")
    pipe = r.pipeline()
    pipe.set(p + "ok", "1")
    pipe.incr(p + "str")
    pipe.set(p + "ok2", "2")
    try:
        pipe.execute()
    except Exception as e:  # compared with redis-server's
        return type(e), str(e), r.get(p + "ok"), r.get(p + "ok2"), r.get(p + "str")
    return None


def test_redis_py_pipeline(zkr, redis_ref):
    """(redis-py 4.3 speaks RESP2 only; RESP3 inside EXEC is in the
    sequences above.)"""
    p = harness.unique("py") + ":"
    ref = redis.Redis(port=redis_ref.port)
    got = zkr().redis()
    assert py_pipeline(got, p) == py_pipeline(ref, p)
    exp = py_failing_pipeline(ref, p)
    assert exp is not None and exp[2] == b"1" and exp[3] == b"2"
    assert py_failing_pipeline(got, p) == exp


def test_redis_cli_batch_is_not_half_done(zkr):
    """The bug's reproduction: MULTI, SET, EXEC, GET in one batch."""
    k = harness.unique("batch")
    with zkr().client() as c:
        c.send(encode("MULTI") + encode("SET", k, "v") + encode("EXPIRE", k, "100") +
               encode("EXEC") + encode("GET", k))
        assert [c.read_reply() for _ in range(5)] == [
            b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n", b"*2\r\n+OK\r\n:1\r\n", b"$1\r\nv\r\n"]


def test_pipelined_commands_after_exec_see_its_writes(zkr):
    """A connection's pipeline: a command after EXEC on one of its keys
    waits for its commit (EXEC holds its keys' queues from its start, as a
    script its KEYS), even when that key is the transaction's last."""
    k = harness.unique("order")
    rounds = 50
    batch = b"".join(encode("MULTI") + encode("INCR", k + "x") + encode("INCR", k) + encode("EXEC") +
                     encode("INCR", k) + encode("GET", k) for _ in range(rounds))
    with zkr().client() as c:
        c.send(batch)
        n = 0
        for i in range(rounds):
            replies = [c.read_reply() for _ in range(6)]
            assert replies[:3] == [b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n"], (i, replies)
            n += 1
            assert replies[3] == b"*2\r\n:%d\r\n:%d\r\n" % (i + 1, n), (i, replies)
            n += 1
            assert replies[4] == b":%d\r\n" % n, (i, replies)
            assert replies[5] == b"$%d\r\n%d\r\n" % (len(str(n)), n), (i, replies)


# ---------------------------------------------------- zkresp's refusals

@pytest.mark.parametrize("cmd", [["PING"], ["SELECT", "0"], ["CLIENT", "ID"], ["INFO"],
                                 ["EVAL", "return 1", "0"], ["SUBSCRIBE", "ch"],
                                 ["LOCK.INFO", "l"], ["SCRIPT", "FLUSH"], ["FLUSHDB"]])
def test_cannot_be_queued(zkr, cmd):
    k = harness.unique("nq")
    with zkr().client() as c:
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "1") == b"+QUEUED\r\n"
        r = c.cmd(*cmd)
        assert r == b"-ERR '%s' cannot be queued in MULTI by zkresp\r\n" % cmd[0].lower().encode(), r
        assert c.cmd("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.cmd("GET", k) == b"$-1\r\n"
        assert c.cmd("PING") == b"+PONG\r\n"


def test_key_too_long_while_queued(make_zkresp):
    z = make_zkresp(extra=["--max-key-len", "16"])
    with z.client() as c:
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", "short", "1") == b"+QUEUED\r\n"
        assert c.cmd("SET", "k" * 17, "1") == b"-ERR key too long\r\n"
        assert c.cmd("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.cmd("GET", "short") == b"$-1\r\n"


# ----------------------------------------------------- across sidecars

def test_atomic_across_two_sidecars(zkresp_pair):
    """Writers on both sidecars run MULTI INCR a INCR b EXEC while a reader
    on B reads both keys with MULTI MGET EXEC: it never sees them differ,
    and each committed EXEC counted once in both.  (A plain MGET is not
    read at one instant: its gets are concurrent ZooKeeper reads, and a
    commit may land between them, with EVAL writers as with these; a
    transaction that reads two keys sends their version checks.)"""
    a, b = zkresp_pair
    ka, kb = harness.unique("atom") + ":a", harness.unique("atom") + ":b"
    done = threading.Event()
    committed, errors, seen = [0], [], []
    lock = threading.Lock()

    def writer(z, n):
        r = z.redis(socket_timeout=30)
        try:
            for _ in range(n):
                pipe = r.pipeline()
                pipe.incr(ka)
                pipe.incr(kb)
                try:
                    x, y = pipe.execute()
                except redis.exceptions.ResponseError as e:
                    if not str(e).startswith("TRYAGAIN"):
                        errors.append(str(e))
                    continue
                if x != y:
                    errors.append("EXEC answered %r %r" % (x, y))
                with lock:
                    committed[0] += 1
        finally:
            r.close()

    def reader():
        r = b.redis(socket_timeout=30)
        try:
            while not done.is_set():
                pipe = r.pipeline()
                pipe.mget(ka, kb)
                try:
                    x, y = pipe.execute()[0]
                except redis.exceptions.ResponseError as e:
                    if not str(e).startswith("TRYAGAIN"):
                        errors.append(str(e))
                    continue
                seen.append((x, y))
        finally:
            r.close()
    rt = threading.Thread(target=reader)
    rt.start()
    ws = [threading.Thread(target=writer, args=(z, 60)) for z in (a, b, a)]
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    done.set()
    rt.join()
    assert not errors, errors[:5]
    assert len(seen) > 10
    torn = [s for s in seen if s[0] != s[1]]
    assert not torn, torn[:5]
    assert committed[0] >= 150
    assert a.redis().mget(ka, kb) == [str(committed[0]).encode()] * 2


# ------------------------------------------ leaving MULTI, and the caps

@pytest.fixture
def zm(make_zkresp):
    port = harness.free_port()
    z = make_zkresp(extra=["--metrics-port", port])
    z.metrics_port = port
    return z


def test_closed_inside_multi_leaves_nothing(zm):
    k = harness.unique("gone")
    c = zm.client()
    assert c.cmd("MULTI") == b"+OK\r\n"
    assert c.cmd("SET", k, "v") == b"+QUEUED\r\n"
    assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 1
    c.close()
    harness.wait_for(lambda: harness.metric_value(zm, "zkresp_lua_multi_queues") == 0, 10,
                     what="the closed client's queue to go")
    with zm.client() as c2:
        assert c2.cmd("GET", k) == b"$-1\r\n"
        assert c2.cmd("SET", k, "w") == b"+OK\r\n"
        assert c2.cmd("EXEC") == b"-ERR EXEC without MULTI\r\n"


def test_client_list_flags_a_client_in_multi(zkr):
    """CLIENT LIST shows a client in MULTI with Redis's flag x, from
    another connection, until EXEC or DISCARD."""
    z = zkr()
    other = z.redis()
    with z.client() as c:
        cid = int(c.cmd("CLIENT", "ID")[1:-2])
        assert harness.client_flags(other, cid) == "N"
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert harness.client_flags(other, cid) == "x"
        assert c.cmd("DISCARD") == b"+OK\r\n"
        assert harness.client_flags(other, cid) == "N"
    other.close()


def test_reset_inside_multi_leaves_it(zm):
    k = harness.unique("reset")
    with zm.client() as c:
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "v") == b"+QUEUED\r\n"
        assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 1
        assert c.cmd("RESET") == b"+RESET\r\n"
        assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 0
        assert c.cmd("GET", k) == b"$-1\r\n"
        assert c.cmd("EXEC") == b"-ERR EXEC without MULTI\r\n"
        # and EXEC / DISCARD leave it too
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 1
        assert c.cmd("EXEC") == b"*0\r\n"
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("DISCARD") == b"+OK\r\n"
        assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 0


def test_command_cap(zm):
    k = harness.unique("cap")
    with zm.client(timeout=60) as c:
        c.send(encode("MULTI") + encode("INCR", k) * 10001 + encode("EXEC") + encode("GET", k))
        assert c.read_reply() == b"+OK\r\n"
        for i in range(10000):
            assert c.read_reply() == b"+QUEUED\r\n", i
        assert c.read_reply() == b"-ERR too many commands queued in MULTI (the limit is 10000)\r\n"
        assert c.read_reply() == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.read_reply() == b"$-1\r\n"
        # 10000 run
        c.send(encode("MULTI") + encode("INCR", k) * 10000 + encode("EXEC"))
        assert c.read_reply() == b"+OK\r\n"
        for i in range(10000):
            assert c.read_reply() == b"+QUEUED\r\n", i
        r = c.read_value()
        assert len(r) == 10000 and r[-1] == 10000
    assert harness.metric_value(zm, "zkresp_lua_multi_queues") == 0


def test_byte_cap(zm):
    k = harness.unique("bytes")
    big = b"x" * (1024 * 1024)
    with zm.client(timeout=60) as c:
        assert c.cmd("MULTI") == b"+OK\r\n"
        for i in range(3):
            assert c.cmd("SET", k, big) == b"+QUEUED\r\n"
        assert c.cmd("SET", k, big) == \
            b"-ERR the commands queued in MULTI are too large (the limit is 4194304 bytes)\r\n"
        assert c.cmd("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.cmd("EXISTS", k) == b":0\r\n"


def test_sigterm_refuses_exec_and_multi(make_zkresp):
    """Once SIGTERM came, an EXEC is refused as every new key command is
    (-TRYAGAIN zkresp is shutting down) and applies nothing, and a MULTI
    does not start a transaction; a DEBUG SLEEP in flight keeps the grace
    period open meanwhile."""
    z = make_zkresp(extra=["--shutdown-grace", "60000"])
    other = make_zkresp(root=z.root)
    with RawClient(z.port) as c, RawClient(z.port) as late, RawClient(z.port) as sleeper:
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", "sigterm:k", "v") == b"+QUEUED\r\n"
        sleeper.send_cmd("DEBUG", "SLEEP", "20")
        z.proc.signal(signal.SIGTERM)
        harness.wait_for(lambda: late.cmd("SET", "sigterm:probe", "v").startswith(b"-TRYAGAIN"),
                         10.0, 0.05, "the sidecar to refuse new commands")
        assert c.cmd("EXEC") == b"-TRYAGAIN zkresp is shutting down\r\n"
        assert late.cmd("MULTI") == b"-TRYAGAIN zkresp is shutting down\r\n"
        assert late.cmd("SET", "sigterm:k", "w") == b"-TRYAGAIN zkresp is shutting down\r\n"
        assert late.cmd("EXEC") == b"-TRYAGAIN zkresp is shutting down\r\n"
    assert other.redis().get("sigterm:k") is None


def test_keyspace_listing_after_a_write_is_refused_not_stale(zkr):
    """KEYS, SCAN, RANDOMKEY and DBSIZE read ZooKeeper's committed listing:
    after a write of the same MULTI (or script), not committed yet, they
    would answer a keyspace without it (a review saw KEYS list the key the
    transaction had just deleted), so they answer an error in their place;
    before any write they answer as usual, and the writes still commit."""
    k = harness.unique("lst")
    with RawClient(zkr().port) as c:
        assert c.cmd("SET", k + ":old", "1") == b"+OK\r\n"
        assert c.cmd("MULTI") == b"+OK\r\n"
        for args in (("KEYS", k + ":*"), ("SET", k + ":new", "1"), ("DEL", k + ":old"), ("KEYS", k + ":*"),
                     ("SCAN", "0"), ("RANDOMKEY",), ("DBSIZE",), ("EXISTS", k + ":new", k + ":old")):
            assert c.cmd(*args) == b"+QUEUED\r\n", args
        r = c.call("EXEC")
        assert r[0] == [(k + ":old").encode()] and r[1] == b"OK" and r[2] == 1, r
        for i in (3, 4, 5, 6):
            assert isinstance(r[i], Err) and "cannot follow a write in the same script or MULTI" in r[i], r
        assert r[7] == 1, r
        assert c.call("KEYS", k + ":*") == [(k + ":new").encode()]
        e = c.cmd("EVAL", "redis.call('set', KEYS[1], 'v') return redis.call('dbsize')", "1", k + ":ev")
        assert e.startswith(b"-ERR zkresp lists committed keys only"), e
        assert c.cmd("EXISTS", k + ":ev") == b":0\r\n"  # the failed script committed nothing
