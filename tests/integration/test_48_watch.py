"""Tier 48: WATCH and UNWATCH (scripts/cmd_multi.lua).

Differential sequences against redis-server 7.0 (exact reply bytes in RESP2
and RESP3): a watched key left alone, written by the same client, expired or
given a new TTL; WATCH inside MULTI (refused, the transaction still good);
UNWATCH, DISCARD, EXECABORT and RESET forgetting the watches; arity errors;
WATCH from a script.  Then, on zkresp alone: a write through another sidecar
aborts EXEC (redis-py's WatchError), optimistic increments by four clients
over two sidecars lose no update, a pipelined WATCH and the commands behind
it keep their order, a watch of another database, and a client's watches
gone with it (/metrics).
"""

import threading

import pytest
import redis

import harness
from differential import Sleep, assert_same
from resp import RawClient, encode

SEQUENCES = {}


def seq(name, steps):
    assert name not in SEQUENCES
    SEQUENCES[name] = steps


seq("watch_untouched", [
    "SET @a 1", "WATCH @a @b", "SET @c 1", "GET @a", "MULTI", "INCR @a", "SET @b x", "EXEC",
    "MGET @a @b",
])

seq("watch_own_writes", [
    "SET @a 1", "WATCH @a", "SET @a 1", "MULTI", "INCR @a", "EXEC", "GET @a",
    "WATCH @a", "DEL @a", "MULTI", "INCR @a", "EXEC", "GET @a",
    "WATCH @b", "SET @b 1", "MULTI", "EXEC",
    "WATCH @h", "HSET @h f v", "MULTI", "HGET @h f", "EXEC",
    "MULTI", "HGET @h f", "EXEC",
])

seq("watch_ttl", [
    "SET @t v PX 100000", "WATCH @t", "PEXPIRE @t 200000", "MULTI", "GET @t", "EXEC",
    "SET @u v PX 100000", "WATCH @u", "PERSIST @u", "MULTI", "GET @u", "EXEC",
    "SET @e v PX 50", "WATCH @e", Sleep(200), "MULTI", "GET @e", "EXEC",
    "SET @f v PX 50", Sleep(200), "WATCH @f", "MULTI", "GET @f", "EXEC",
])

seq("watch_inside_multi", [
    "MULTI", "WATCH @a", "SET @a 1", "EXEC", "GET @a",
    "MULTI", "WATCH", "SET @a 2", "EXEC", "GET @a",
    "MULTI", "UNWATCH", "SET @a 3", "EXEC", "GET @a",
])

seq("watch_forgotten", [
    "WATCH @a", "SET @a 1", "UNWATCH", "MULTI", "INCR @a", "EXEC",
    "WATCH @a", "SET @a 1", "MULTI", "DISCARD", "MULTI", "INCR @a", "EXEC",
    "WATCH @a", "SET @a 1", "MULTI", "NOSUCH", "EXEC", "MULTI", "INCR @a", "EXEC",
    "WATCH @a", "SET @a 1", "MULTI", "EXEC x", "MULTI", "INCR @a", "EXEC",
    "WATCH @a", "SET @a 1", "RESET", "MULTI", "INCR @a", "EXEC",
    "WATCH @a", "SET @a 5", "EXEC", "DISCARD", "MULTI", "INCR @a", "EXEC",
])

seq("watch_arity_and_scripts", [
    "WATCH", "UNWATCH x", "UNWATCH", "WATCH @a @a @b",
    "EVAL \"return redis.call('watch', KEYS[1])\" 1 @a",
    "EVAL \"return redis.pcall('unwatch')\" 0",
])


seq("watch_exec_refused", [
    "WATCH @a", "SET @a 1", "EXEC x", "MULTI", "INCR @a", "EXEC", "GET @a",
    "WATCH @a", "SET @a 1", "SUBSCRIBE @ch", "EXEC", "UNSUBSCRIBE @ch", "MULTI", "INCR @a", "EXEC",
])

seq("watch_touched_unchanged", [
    "RPUSH @l a b", "WATCH @l", "LTRIM @l 0 -1", "MULTI", "LLEN @l", "EXEC",
    "HSET @h f v", "WATCH @h", "HSET @h f v", "MULTI", "HLEN @h", "EXEC",
    "SADD @s m", "WATCH @s", "SADD @s m", "MULTI", "SCARD @s", "EXEC",
    "ZADD @z 1 m", "WATCH @z", "ZADD @z 1 m", "MULTI", "ZCARD @z", "EXEC",
])


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_same_as_redis(name, proto, zkr, redis_ref):
    assert_same(redis_ref.port, zkr().port, SEQUENCES[name], proto, harness.unique(name) + ":")


# ----------------------------------------------------- across sidecars

def test_write_through_another_sidecar_aborts_exec(zkresp_pair):
    a, b = zkresp_pair
    k = harness.unique("w")
    ra, rb = a.redis(), b.redis()
    ra.set(k, "1")
    with ra.pipeline() as p:
        p.watch(k)
        assert p.get(k) == b"1"
        rb.set(k, "1")   # the same value: still a write
        p.multi()
        p.set(k, "mine")
        with pytest.raises(redis.WatchError):
            p.execute()
    assert rb.get(k) == b"1"
    with ra.pipeline() as p:   # the watch went with the aborted EXEC
        p.watch(k)
        p.multi()
        p.set(k, "mine")
        assert p.execute() == [True]
    assert rb.get(k) == b"mine"


def test_optimistic_increments_lose_nothing(zkresp_pair):
    """Four clients, two on each sidecar, each adds 1 to a counter 40 times
    with redis-py's transaction() (WATCH, GET, MULTI, SET, EXEC, again on a
    WatchError): every increment counts once."""
    a, b = zkresp_pair
    k = harness.unique("ctr")
    rounds, aborted, errors = 40, [0], []
    lock = threading.Lock()

    def add(pipe):
        n = int(pipe.get(k) or 0)
        pipe.multi()
        pipe.set(k, n + 1)

    def worker(z):
        r = z.redis()
        try:
            for _ in range(rounds):
                while True:
                    try:
                        with r.pipeline() as p:
                            p.watch(k)
                            add(p)
                            p.execute()
                        break
                    except redis.WatchError:
                        with lock:
                            aborted[0] += 1
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(z,)) for z in (a, b, a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert int(a.redis().get(k)) == 4 * rounds
    assert aborted[0] > 0  # (four writers of one key: some EXECs did abort)


def test_pipelined_watch_keeps_its_place(zkr):
    """WATCH, a write of the key by the same connection, MULTI, EXEC in one
    batch: EXEC sees the write that came after the WATCH (a null array);
    a RESET in the batch between them forgets the watch."""
    k = harness.unique("pipe")
    with zkr().client() as c:
        c.send(encode("SET", k, "0") + encode("WATCH", k) + encode("INCR", k) + encode("MULTI") +
               encode("INCR", k) + encode("EXEC") + encode("GET", k))
        assert [c.read_reply() for _ in range(7)] == [
            b"+OK\r\n", b"+OK\r\n", b":1\r\n", b"+OK\r\n", b"+QUEUED\r\n", b"*-1\r\n", b"$1\r\n1\r\n"]
        c.send(encode("WATCH", k) + encode("INCR", k) + encode("RESET") + encode("MULTI") +
               encode("INCR", k) + encode("EXEC"))
        assert [c.read_reply() for _ in range(6)] == [
            b"+OK\r\n", b":2\r\n", b"+RESET\r\n", b"+OK\r\n", b"+QUEUED\r\n", b"*1\r\n:3\r\n"]


def test_watch_in_another_database(zkresp_pair):
    """A key watched in database 1 stays that key after SELECT 0; EXEC
    there aborts when it was written (through another sidecar)."""
    a, b = zkresp_pair
    k = harness.unique("db")
    other = b.redis(db=1)
    with a.client() as c:
        assert c.cmd("SELECT", "1") == b"+OK\r\n"
        assert c.cmd("SET", k, "1") == b"+OK\r\n"
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        assert c.cmd("SELECT", "0") == b"+OK\r\n"
        b.redis().set(k, "database 0's")
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k + "x", "1") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*1\r\n+OK\r\n"
        assert c.cmd("SELECT", "1") == b"+OK\r\n"
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        assert c.cmd("SELECT", "0") == b"+OK\r\n"
        other.set(k, "2")
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k + "x", "2") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*-1\r\n"
        assert c.cmd("GET", k + "x") == b"$1\r\n1\r\n"


def test_watches_go_with_their_client(make_zkresp):
    port = harness.free_port()
    z = make_zkresp(extra=["--metrics-port", port])
    z.metrics_port = port
    k = harness.unique("gone")
    c = z.client()
    assert c.cmd("WATCH", k, k + "2") == b"+OK\r\n"
    assert harness.metric_value(z, "zkresp_lua_multi_watching_clients") == 1
    c.close()
    harness.wait_for(lambda: harness.metric_value(z, "zkresp_lua_multi_watching_clients") == 0, 10,
                     what="the closed client's watches gone")
    with z.client() as d:
        assert d.cmd("WATCH", k) == b"+OK\r\n"
        assert d.cmd("UNWATCH") == b"+OK\r\n"
        assert harness.metric_value(z, "zkresp_lua_multi_watching_clients") == 0
        assert d.cmd("WATCH", k) == b"+OK\r\n"
        z.redis().set(k, "1")
        assert d.cmd("MULTI") == b"+OK\r\n"
        assert d.cmd("EXEC") == b"*-1\r\n"
        assert harness.metric_value(z, "zkresp_lua_multi_watch_aborts_total") == 1
        assert harness.metric_value(z, "zkresp_lua_multi_watching_clients") == 0


def test_watch_caps(zkr):
    """At most 1000 keys, and their paths within a quarter of ZooKeeper's
    request limit (983040 bytes): EXEC's commit checks every one of them in
    its one multi.  A WATCH over a cap keeps nothing of its keys; under
    them EXEC commits, however many watched keys are absent."""
    k = harness.unique("cap")
    with zkr().client(timeout=30) as c:
        keys = ["%s:%d" % (k, i) for i in range(1001)]
        assert c.cmd("WATCH", *keys) == b"-ERR too many keys watched (the limit is 1000)\r\n"
        assert c.cmd("WATCH", *keys[:1000]) == b"+OK\r\n"
        assert c.cmd("WATCH", keys[1000]) == b"-ERR too many keys watched (the limit is 1000)\r\n"
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "1") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*1\r\n+OK\r\n"
        long = ["%s:%d:%s" % (k, i, "x" * 600) for i in range(400)]
        assert c.cmd("WATCH", *long[:300]) == b"+OK\r\n"
        assert c.cmd("WATCH", *long[300:]) == \
            b"-ERR the keys watched are too large (the limit is 245760 bytes)\r\n"
        zkr().redis().set(long[350], "not watched")
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("INCR", k) == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*1\r\n:2\r\n"


# ------------------------------------------- refusals, a busy script, a policy

def busy_run(port, key):
    """WATCH, then while another client's script runs past its time: EXEC
    outside MULTI, WATCH, UNWATCH, a command queued in MULTI and its EXEC,
    an empty transaction; after SCRIPT KILL the key is written and a
    transaction runs (nothing watched any more)."""
    import time
    out = []
    with RawClient(port, timeout=10) as a, RawClient(port, timeout=10) as b, \
            RawClient(port, timeout=10) as c, RawClient(port, timeout=30) as r:
        out.append(a.cmd("SET", key, "1"))
        out.append(a.cmd("WATCH", key))
        r.send(encode("EVAL", "while true do end", "0"))
        time.sleep(0.5)
        out.append(a.cmd("EXEC"))
        out.append(a.cmd("WATCH", key + "2"))
        out.append(a.cmd("UNWATCH"))
        out += [c.cmd("MULTI"), c.cmd("SET", key, "3"), c.cmd("EXEC")]
        out += [c.cmd("MULTI"), c.cmd("EXEC")]
        assert b.cmd("SCRIPT", "KILL") == b"+OK\r\n"
        r.read_reply()
        out.append(b.cmd("SET", key, "2"))
        out += [a.cmd("MULTI"), a.cmd("GET", key), a.cmd("EXEC")]
    return out


def test_busy_script_as_redis(make_zkresp):
    z = make_zkresp(extra=("--script-time-limit", "20000"))
    ref = harness.RedisServer("--busy-reply-threshold", "100").start()
    try:
        k = harness.unique("busy")
        assert busy_run(z.port, k) == busy_run(ref.port, k)
    finally:
        ref.close()


def test_exec_before_auth_as_redis(make_zkresp):
    z = make_zkresp(extra=("--requirepass", "pw"))
    ref = harness.RedisServer("--requirepass", "pw").start()
    try:
        def run(port):
            with RawClient(port, timeout=5) as c:
                return [c.cmd("EXEC"), c.cmd("EXEC", "x"), c.cmd("DISCARD"), c.cmd("WATCH", "k")]
        assert run(z.port) == run(ref.port)
    finally:
        ref.close()


def test_refused_exec_counts_as_execabort(make_zkresp):
    port = harness.free_port()
    z = make_zkresp(extra=["--metrics-port", port])
    z.metrics_port = port
    with z.client() as c:
        assert c.cmd("EXEC", "x").startswith(b"-EXECABORT")
        assert c.cmd("SUBSCRIBE", "ch").startswith(b"*3")
        assert c.cmd("EXEC").startswith(b"-EXECABORT")
    assert harness.metric_value(z, "zkresp_lua_multi_execaborts_total") == 2


def test_watch_under_a_tenant_policy(make_zkresp):
    """A policy whose key_path leaves the database out (examples/tenants.lua)
    makes database 1's key and database 0's one node: an EXEC in 0 that
    writes the key watched in 1 commits (one check of the node, not two).
    It maps a key by the AUTH user: the key watched is the node WATCH read,
    whoever the connection is when it runs EXEC."""
    import os
    z = make_zkresp(extra=["--policy", os.path.join(harness.SCRIPTS_DIR, "examples", "tenants.lua"),
                           "--requirepass", "default-pw"])
    k = harness.unique("tenantdb")
    with z.client(timeout=30) as c:
        assert c.cmd("AUTH", "alice", "alice-secret") == b"+OK\r\n"
        assert c.cmd("SET", k, "1") == b"+OK\r\n"
        assert c.cmd("SELECT", "1") == b"+OK\r\n"
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        assert c.cmd("SELECT", "0") == b"+OK\r\n"
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "2") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*1\r\n+OK\r\n"
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        z.redis(username="alice", password="alice-secret").set(k, "3")
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "4") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*-1\r\n"
        # the key watched is alice's node, whoever runs EXEC
        bob = z.redis(username="bob", password="bob-secret")
        bob.set(k, "bob's")
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        assert c.cmd("AUTH", "bob", "bob-secret") == b"+OK\r\n"
        bob.set(k, "bob's again")   # not the key watched
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "5") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*1\r\n+OK\r\n"
        assert bob.get(k) == b"5"
        assert c.cmd("AUTH", "alice", "alice-secret") == b"+OK\r\n"
        assert c.cmd("WATCH", k) == b"+OK\r\n"
        assert c.cmd("AUTH", "bob", "bob-secret") == b"+OK\r\n"
        z.redis(username="alice", password="alice-secret").set(k, "alice's")
        assert c.cmd("MULTI") == b"+OK\r\n"
        assert c.cmd("SET", k, "6") == b"+QUEUED\r\n"
        assert c.cmd("EXEC") == b"*-1\r\n"
        assert bob.get(k) == b"5"
