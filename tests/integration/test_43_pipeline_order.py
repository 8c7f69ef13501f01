"""Tier 43: a connection's pipeline order (scripts/queue.lua's Q.turn).

A connection's pipelined commands run side by side, in arrival order on each
key; a command without keys (KEYS, DBSIZE, FLUSHDB, PUBLISH, a script with no
KEYS, EXEC...) runs once every earlier command of its connection is done and
before any later one starts, as Redis runs a pipeline one command after
another.  Pipelines sent in one write to redis-server and to zkresp must get
the same replies; a command without keys pipelined behind a blocking
LOCK.ACQUIRE waits for it, and does not run at all once its client has gone.
"""

import time

import pytest

import harness
from resp import RawClient, encode


def pipelined(port, cmds, proto=2):
    """Sends cmds (lists of words) in one write; their raw replies."""
    with RawClient(port) as c:
        if proto == 3:
            c.send_cmd("HELLO", "3")
            c.read_reply()
        c.send(b"".join(encode(*cmd) for cmd in cmds))
        return [c.read_reply() for _ in cmds]


def sets(prefix, n):
    return [["SET", "%s%d" % (prefix, i), "v"] for i in range(n)]


PIPELINES = {
    # writes, then commands that list or count the keyspace
    "count_after_writes": lambda p: [["FLUSHDB"]] + sets(p, 40) + [
        ["DBSIZE"], ["EXISTS"] + ["%s%d" % (p, i) for i in range(40)],
        ["EVAL", "return #redis.call('keys', ARGV[1])", "0", p + "*"]],
    # a flush, then writes that must land after it
    "writes_after_flush": lambda p: [["SET", p + "a", "0"], ["FLUSHDB"], ["SET", p + "a", "1"],
                                     ["INCR", p + "n"], ["GET", p + "a"], ["DBSIZE"]],
    # a script with no KEYS reading what was pipelined before it
    "script_without_keys": lambda p: [["SET", p + "k", "1"], ["INCR", p + "k"],
                                      ["EVAL", "return redis.call('get', ARGV[1])", "0", p + "k"],
                                      ["EVAL", "return redis.call('incr', ARGV[1])", "0", p + "k"],
                                      ["GET", p + "k"]],
    # a transaction counting, then a flush and a count
    "exec_after_writes": lambda p: [["FLUSHDB"]] + sets(p, 20) + [
        ["MULTI"], ["DBSIZE"], ["EXEC"], ["FLUSHDB"], ["SET", p + "x", "1"], ["DBSIZE"]],
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_same_as_redis(name, proto, zkr, redis_ref):
    for round_ in range(5):
        p = harness.unique("%s%d" % (name, round_)) + ":"
        cmds = PIPELINES[name](p)
        ref = pipelined(redis_ref.port, cmds, proto)
        got = pipelined(zkr().port, cmds, proto)
        bad = ["%r: redis-server %r, zkresp %r" % (cmd, r, g)
               for cmd, r, g in zip(cmds, ref, got) if r != g]
        assert not bad, "round %d:\n%s" % (round_, "\n".join(bad))


def test_publish_keeps_the_order_of_a_script_that_publishes(zkr):
    """A PUBLISH pipelined behind a script that publishes is delivered
    after the script's message (the README said they might swap)."""
    z = zkr()
    ch = harness.unique("ord-ch")
    rounds = 30
    with RawClient(z.port) as sub, RawClient(z.port) as pub:
        sub.send_cmd("SUBSCRIBE", ch)
        assert sub.read_reply().startswith(b"*3\r\n$9\r\nsubscribe\r\n")
        batch = b"".join(
            encode("EVAL", "redis.call('set', KEYS[1], ARGV[2]) "
                   "return redis.call('publish', ARGV[1], ARGV[2])",
                   "1", ch + ":k", ch, "s%d" % i) + encode("PUBLISH", ch, "p%d" % i)
            for i in range(rounds))
        pub.send(batch)
        for _ in range(2 * rounds):
            assert pub.read_reply() == b":1\r\n"
        got = []
        for _ in range(2 * rounds):
            msg = sub.read_reply()
            got.append(msg.rsplit(b"\r\n", 2)[-2].decode())
        assert got == [m for i in range(rounds) for m in ("s%d" % i, "p%d" % i)]


def hold_lock(z, lock):
    with RawClient(z.port) as c:
        c.send_cmd("LOCK.ACQUIRE", lock, "holder", "PX", "30000")
        assert c.read_reply().startswith(b":")


def test_behind_a_blocking_acquire(zkr):
    """FLUSHDB pipelined behind a LOCK.ACQUIRE that waits runs after the
    acquire's reply, not while it waits."""
    z = zkr()
    lock, mark = harness.unique("ord-lock"), harness.unique("ord-mark")
    hold_lock(z, lock)
    with RawClient(z.port) as c, RawClient(z.port) as probe:
        probe.send_cmd("SET", mark, "v")
        assert probe.read_reply() == b"+OK\r\n"
        c.send(encode("LOCK.ACQUIRE", lock, "waiter", "WAIT", "1500") + encode("FLUSHDB"))
        time.sleep(0.5)  # (the acquire still waits: it times out at 1.5 s)
        probe.send_cmd("GET", mark)
        assert probe.read_reply() == b"$1\r\nv\r\n"
        assert c.read_reply() == b"$-1\r\n"  # (not granted within its WAIT)
        assert c.read_reply() == b"+OK\r\n"
        probe.send_cmd("EXISTS", mark)
        assert probe.read_reply() == b":0\r\n"
    with RawClient(z.port) as c:
        c.send_cmd("LOCK.RELEASE", lock, "holder")
        assert c.read_reply() == b":1\r\n"


def test_not_run_once_its_client_left(zkr):
    """A command waiting for its turn behind a blocking LOCK.ACQUIRE does
    not run once its client has closed the connection (Redis drops what it
    had not run)."""
    z = zkr()
    lock, mark = harness.unique("ord-lock2"), harness.unique("ord-mark2")
    hold_lock(z, lock)
    with RawClient(z.port) as probe:
        probe.send_cmd("SET", mark, "v")
        assert probe.read_reply() == b"+OK\r\n"
        c = RawClient(z.port)
        c.send(encode("LOCK.ACQUIRE", lock, "w-gone", "WAIT", "10000") + encode("FLUSHDB"))
        # (the waiter is in the lock's queue before the connection closes)
        deadline = time.time() + 10
        while True:
            probe.send_cmd("LOCK.INFO", lock)
            if b"w-gone" in probe.read_reply():
                break
            assert time.time() < deadline, "the acquire never queued"
            time.sleep(0.02)
        c.close()
        while True:
            probe.send_cmd("LOCK.INFO", lock)
            if b"w-gone" not in probe.read_reply():
                break
            assert time.time() < deadline, "the waiter never left the queue"
            time.sleep(0.02)
        probe.send_cmd("LOCK.RELEASE", lock, "holder")
        assert probe.read_reply() == b":1\r\n"
        time.sleep(0.3)  # (time for a FLUSHDB that would wrongly run)
        probe.send_cmd("GET", mark)
        assert probe.read_reply() == b"$1\r\nv\r\n"
