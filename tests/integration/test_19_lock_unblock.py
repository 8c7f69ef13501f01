"""Tier 19: a native lock's waiter is a blocked client, as BLPOP's is in
Redis -- CLIENT LIST shows it with flag b, INFO counts it in
blocked_clients, and CLIENT UNBLOCK ends its wait: TIMEOUT (the default)
as its WAIT running out would (a null, out of the queue; a conversion keeps
its old mode), ERROR with Redis's -UNBLOCKED error.  Two sidecars on one
ZooKeeper; the holder is on the other sidecar, so that the waiter watches
another sidecar's request.  CLIENT UNBLOCK's bad input is checked against
redis-server in test_40's differential sequences."""

import socket
import threading
import time

import pytest
import redis

from harness import Zkresp, client_flags, free_port, metric_value, unique, wait_for
from nativeload import holders, lock_info, waiting

UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"
WAIT_MS = 60000


@pytest.fixture(scope="module")
def pair(zk):
    port = free_port()
    a = Zkresp(zk, extra=["--metrics-port", port]).start()
    a.metrics_port = port
    b = Zkresp(zk, root=a.root).start()
    yield a, b
    b.close()
    a.close()


class Blocked:
    """A LOCK.ACQUIRE / LOCK.CONVERT with a long WAIT in a thread, on its own
    connection (whose CLIENT ID is known before it blocks)."""

    def __init__(self, z, *args, r=None):
        self.r = r or z.redis(socket_timeout=WAIT_MS / 1000 + 20)
        self.own = r is None
        self.id = self.r.client_id()
        self.args = args
        self.result = self.error = None
        self.elapsed = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        t0 = time.monotonic()
        try:
            self.result = self.r.execute_command(*self.args)
        except Exception as e:  # noqa: BLE001 - the test reads it
            self.error = e
        self.elapsed = time.monotonic() - t0
        self.done.set()

    def outcome(self, timeout=10):
        assert self.done.wait(timeout), "%r still waits" % (self.args,)
        return self.result

    def close(self):
        self.thread.join(5)
        if self.own:
            self.r.close()


def blocked_clients(r):
    return r.info("clients")["blocked_clients"]


def test_waiter_is_blocked_until_unblocked_with_timeout(pair):
    """A waiting LOCK.ACQUIRE shows flag b and counts in blocked_clients;
    CLIENT UNBLOCK answers 1 and the waiter answers null at once, long
    before its WAIT, out of the queue; a second CLIENT UNBLOCK answers 0;
    the waiter behind it is still granted on release."""
    a, b = pair
    key = unique("ub")
    ra, rb = a.redis(), b.redis()
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h"), int)
    assert blocked_clients(ra) == 0
    w1 = Blocked(a, "LOCK.ACQUIRE", key, "w1", "WAIT", WAIT_MS)
    wait_for(lambda: waiting(rb, key) == [("w1", "EX", "new")], 10, what="w1 queued")
    w2 = Blocked(a, "LOCK.ACQUIRE", key, "w2", "WAIT", WAIT_MS)
    wait_for(lambda: len(waiting(rb, key)) == 2, 10, what="w2 queued")
    wait_for(lambda: blocked_clients(ra) == 2, 5, what="two blocked clients")
    assert metric_value(a, "zkresp_blocked_clients") == 2
    assert client_flags(ra, w1.id) == "b"
    assert blocked_clients(rb) == 0  # (the holder's sidecar blocks nobody)
    assert ra.execute_command("CLIENT", "UNBLOCK", w1.id) == 1
    assert w1.outcome() is None and w1.error is None
    assert w1.elapsed < WAIT_MS / 1000 / 2
    assert ra.execute_command("CLIENT", "UNBLOCK", w1.id) == 0
    assert client_flags(ra, w1.id) == "N"
    assert waiting(rb, key) == [("w2", "EX", "new")]
    assert blocked_clients(ra) == 1
    assert metric_value(a, "zkresp_blocked_clients") == 1
    # the unblocked connection goes on
    assert w1.r.ping() is True
    assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
    token = w2.outcome()
    assert isinstance(token, int), (token, w2.error)
    assert holders(ra, key) == [("w2", "EX")]
    assert blocked_clients(ra) == 0
    assert w2.r.execute_command("LOCK.RELEASE", key, "w2") == 1
    for w in (w1, w2):
        w.close()
    ra.close()
    rb.close()


def test_unblock_error_answers_unblocked(pair):
    """CLIENT UNBLOCK id ERROR: the waiter gets Redis's -UNBLOCKED error and
    leaves the queue; its connection goes on (it may ask again)."""
    a, b = pair
    key = unique("ue")
    ra, rb = a.redis(), b.redis()
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h", "MODE", "PW"), int)
    w = Blocked(a, "LOCK.ACQUIRE", key, "w", "MODE", "PR", "WAIT", WAIT_MS)
    wait_for(lambda: waiting(rb, key) == [("w", "PR", "new")], 10, what="w queued")
    wait_for(lambda: client_flags(ra, w.id) == "b", 5, what="w blocked")
    assert ra.client_unblock(w.id, error=True) is True  # (redis-py's own call)
    w.outcome()
    assert isinstance(w.error, redis.ResponseError) and str(w.error) == UNBLOCKED, w.error
    assert lock_info(rb, key)["waiters"] == []
    assert w.r.execute_command("LOCK.ACQUIRE", key, "w", "MODE", "CR") is not None
    assert sorted(holders(rb, key)) == [("h", "PW"), ("w", "CR")]
    assert w.r.execute_command("LOCK.RELEASE", key, "w") == 1
    assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
    w.close()
    ra.close()
    rb.close()


def test_unblocked_conversion_keeps_old_mode(pair):
    """A waiting up-conversion unblocked answers null (TIMEOUT) and keeps
    the hold in its old mode and token, out of the conversion queue."""
    a, b = pair
    key = unique("uc")
    ra, rb = a.redis(), b.redis()
    conv = a.redis(socket_timeout=WAIT_MS / 1000 + 20)
    token = conv.execute_command("LOCK.ACQUIRE", key, "x", "MODE", "PR")
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "y", "MODE", "PR"), int)
    w = Blocked(a, "LOCK.CONVERT", key, "x", "MODE", "EX", "WAIT", WAIT_MS, r=conv)
    wait_for(lambda: waiting(rb, key) == [("x", "EX", "conversion")], 10, what="conversion queued")
    wait_for(lambda: blocked_clients(ra) == 1, 5, what="the conversion blocked")
    assert ra.execute_command("CLIENT", "UNBLOCK", w.id, "TIMEOUT") == 1
    assert w.outcome() is None and w.error is None
    info = lock_info(rb, key)
    assert info["waiters"] == []
    assert sorted((h["owner"], h["mode"]) for h in info["holders"]) == [("x", "PR"), ("y", "PR")]
    assert [int(h["token"]) for h in info["holders"] if h["owner"] == "x"] == [token]
    assert conv.execute_command("LOCK.RELEASE", key, "x") == 1
    assert rb.execute_command("LOCK.RELEASE", key, "y") == 1
    w.close()
    conv.close()
    ra.close()
    rb.close()


def test_unblock_answers_0_for_clients_not_blocked(pair):
    """0 for an id nobody has, for an idle connection, for one whose
    acquire was granted at once, for the caller itself, and for a waiter
    of the other sidecar (client ids are a sidecar's own, as a Redis
    server's)."""
    a, b = pair
    key = unique("u0")
    ra, rb = a.redis(), b.redis()
    idle = a.redis()
    assert ra.execute_command("CLIENT", "UNBLOCK", 10 ** 12) == 0
    assert ra.execute_command("CLIENT", "UNBLOCK", idle.client_id()) == 0
    assert ra.execute_command("CLIENT", "UNBLOCK", ra.client_id(), "ERROR") == 0
    granted = Blocked(a, "LOCK.ACQUIRE", key, "g", "WAIT", WAIT_MS)
    assert isinstance(granted.outcome(), int)
    assert ra.execute_command("CLIENT", "UNBLOCK", granted.id) == 0
    w = Blocked(b, "LOCK.ACQUIRE", key, "w", "WAIT", WAIT_MS)
    wait_for(lambda: waiting(ra, key) == [("w", "EX", "new")], 10, what="w queued")
    wait_for(lambda: blocked_clients(rb) == 1, 5, what="w blocked")
    assert client_flags(ra, idle.client_id()) == "N"
    # another sidecar's CLIENT UNBLOCK does not reach it (nobody blocks there)
    assert ra.execute_command("CLIENT", "UNBLOCK", w.id) == 0
    assert not w.done.is_set()
    assert rb.execute_command("CLIENT", "UNBLOCK", w.id) == 1
    assert w.outcome() is None
    assert granted.r.execute_command("LOCK.RELEASE", key, "g") == 1
    for x in (granted, w):
        x.close()
    for r in (ra, rb, idle):
        r.close()


def test_pipelined_commands_after_an_unblocked_wait(pair):
    """A connection that pipelined commands behind its waiting acquire gets
    them all answered, in order, once the wait is unblocked."""
    a, b = pair
    key = unique("up")
    ra, rb = a.redis(), b.redis()
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h"), int)
    r = a.redis(socket_timeout=30)
    cid = r.client_id()
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("LOCK.ACQUIRE", key, "w", "WAIT", WAIT_MS)
    pipe.set(key + ":after", "1")
    pipe.get(key + ":after")
    out = []
    t = threading.Thread(target=lambda: out.append(pipe.execute(raise_on_error=False)), daemon=True)
    t.start()
    wait_for(lambda: client_flags(ra, cid) == "b", 10, what="the pipeline's acquire blocked")
    assert ra.execute_command("CLIENT", "UNBLOCK", cid, "ERROR") == 1
    t.join(10)
    assert out, "no replies"
    first, ok, value = out[0]
    assert isinstance(first, redis.ResponseError) and str(first) == UNBLOCKED
    assert ok is True and value == b"1"
    assert r.delete(key + ":after") == 1
    assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
    for c in (r, ra, rb):
        c.close()


def test_multi_behind_a_blocked_acquire_shows_b_alone(pair):
    """A MULTI pipelined behind a blocked acquire has not run yet (Redis
    reads nothing of a blocked client): CLIENT LIST shows b, not xb; once
    unblocked, the MULTI runs and the client shows x."""
    a, b = pair
    key = unique("ux")
    ra, rb = a.redis(), b.redis()
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h"), int)
    with socket.create_connection(("127.0.0.1", int(a.port)), timeout=10) as s:
        s.sendall(b"CLIENT ID\r\n")
        wid = int(s.recv(100)[1:-2])
        s.sendall(("*5\r\n$12\r\nLOCK.ACQUIRE\r\n$%d\r\n%s\r\n$1\r\nw\r\n$4\r\nWAIT\r\n$5\r\n60000\r\n"
                   % (len(key), key)).encode() + b"*1\r\n$5\r\nMULTI\r\n")
        wait_for(lambda: waiting(rb, key) == [("w", "EX", "new")], 10, what="w queued")
        wait_for(lambda: blocked_clients(ra) == 1, 5, what="w blocked")
        assert client_flags(ra, wid) == "b"
        assert ra.execute_command("CLIENT", "UNBLOCK", wid) == 1
        wait_for(lambda: client_flags(ra, wid) == "x", 5, what="the MULTI run")
        got = b""
        while got.count(b"\r\n") < 2:
            got += s.recv(100)
        assert got == b"$-1\r\n+OK\r\n", got
    assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
    ra.close()
    rb.close()
