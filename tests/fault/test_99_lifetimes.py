"""Fault tier 99: object lifetimes across asynchronous completions.

A client connection closed (by the peer, CLIENT KILL, a buffer cap) while
its command waits for ZooKeeper, is blocked in LOCK.ACQUIRE ... WAIT, is
being sent a pub/sub message or has a reply in flight; SIGTERM with all of
these in flight.  The sidecar stays up and sanitizer-clean (the harness
scans its log after every test), and the others it serves are unaffected.
"""

import os
import signal
import subprocess
import socket
import threading
import time

import pytest

import harness
from harness import RawClient, unique
from resp import encode
from lockload import LUA_EXTEND


def _raw(z, timeout=10):
    return socket.create_connection(("127.0.0.1", z.port), timeout=timeout)


def test_eval_reply_with_erroring_index_metamethod(make_zkresp):
    """A script's reply table whose __index raises: the reply encoder reads
    fields ("err", "ok", ...) with lua_getfield, which runs metamethods
    outside any protected call."""
    z = make_zkresp()
    c = z.client()
    r = c.cmd("EVAL", "return setmetatable({}, {__index = function() "
              "error('boom') end})", "0")
    assert r is not None
    assert z.alive(), z.log_tail()
    assert c.cmd("PING") == b"+PONG\r\n"


def test_eval_reply_with_yielding_index_metamethod(make_zkresp):
    """Same, with an __index that calls redis.call (which yields)."""
    z = make_zkresp()
    c = z.client()
    r = c.cmd("EVAL", "return setmetatable({}, {__index = function(t, k) "
              "return redis.call('GET', 'x') end})", "0")
    assert r is not None
    assert z.alive(), z.log_tail()
    assert c.cmd("PING") == b"+PONG\r\n"


def test_close_while_commands_wait_for_zookeeper(make_zkresp, make_proxy, zk):
    """Pipelined commands waiting on a slow ZooKeeper; the client goes."""
    proxy = make_proxy(zk)
    z = make_zkresp(proxy, request_timeout=3000, session_timeout=6000)
    c = z.client()
    assert c.cmd("SET", "keep", "v") == b"+OK\r\n"
    proxy.delay(400)
    for rnd in range(5):
        s = _raw(z)
        batch = b"".join(encode("SET", "k%d" % i, "v" * 100) + encode("GET", "k%d" % i)
                         + encode("EVAL", "redis.call('SET', KEYS[1], 'x'); "
                                  "return redis.call('GET', KEYS[1])", "1", "e%d" % i)
                         for i in range(40))
        s.sendall(batch)
        time.sleep(0.05 * rnd)
        s.close()
    proxy.delay(0)
    time.sleep(1.5)
    assert z.alive(), z.log_tail()
    assert c.cmd("GET", "keep") == b"$1\r\nv\r\n"


def test_close_blocked_lock_waiter_then_release(make_zkresp):
    """A LOCK.ACQUIRE ... WAIT blocked, its client gone (peer close and
    CLIENT KILL); the holder releases: the lock is free for a newcomer."""
    z = make_zkresp()
    key = unique("lk")
    h = z.client()
    assert h.cmd("LOCK.ACQUIRE", key, "h").startswith(b":")
    waiters = []
    for i in range(6):
        s = _raw(z)
        s.sendall(encode("CLIENT", "SETNAME", "w%d" % i)
                  + encode("LOCK.ACQUIRE", key, "w%d" % i, "WAIT", "20000"))
        waiters.append(s)
    time.sleep(0.5)
    admin = z.client()
    for i, s in enumerate(waiters):
        if i % 2:
            s.close()
        else:
            ids = admin.cmd("CLIENT", "LIST").decode()
            for line in ids.splitlines():
                if "name=w%d " % i in line:
                    cid = line.split("id=")[1].split()[0]
                    admin.cmd("CLIENT", "KILL", "ID", cid)
    time.sleep(1.5)
    assert h.cmd("LOCK.RELEASE", key, "h") == b":1\r\n"
    n = z.client()
    got = n.cmd("LOCK.ACQUIRE", key, "n", "WAIT", "5000")
    assert got.startswith(b":") and got != b":0\r\n", got
    for s in waiters:
        s.close()
    assert z.alive(), z.log_tail()


def test_subscriber_killed_while_messages_flow(make_zkresp):
    """Subscribers that never read, closed by the output cap or by the
    peer, while a publisher floods the channel."""
    z = make_zkresp(extra=["--max-output", "200000"])
    ch = unique("ch")
    subs = []
    for i in range(6):
        s = _raw(z)
        s.sendall(encode("SUBSCRIBE", ch))
        subs.append(s)
    time.sleep(0.3)
    p = z.client()
    payload = "x" * 4000
    stop = threading.Event()

    def closer():
        for s in subs[::2]:
            time.sleep(0.1)
            s.close()

    t = threading.Thread(target=closer)
    t.start()
    for i in range(300):
        p.send_cmd("PUBLISH", ch, payload)
    for i in range(300):
        p.read_reply()
    t.join()
    for s in subs:
        s.close()
    time.sleep(0.5)
    assert z.alive(), z.log_tail()
    assert p.cmd("PING") == b"+PONG\r\n"


def test_big_replies_in_flight_then_close(make_zkresp):
    """Replies large enough to need uv_write, the client gone before it
    reads them."""
    z = make_zkresp()
    c = z.client()
    big = "y" * 200000
    assert c.cmd("SET", "big", big) == b"+OK\r\n"
    for rnd in range(5):
        s = _raw(z)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"".join(encode("GET", "big") for _ in range(20)))
        time.sleep(0.2)
        s.close()
    time.sleep(0.5)
    assert z.alive(), z.log_tail()
    assert c.cmd("STRLEN", "big") == b":200000\r\n"


def test_sigterm_with_everything_in_flight(make_zkresp, make_proxy, zk):
    """SIGTERM while commands wait for a slow ZooKeeper, a lock waiter is
    blocked and a subscriber listens: exits 0, sanitizer-clean."""
    proxy = make_proxy(zk)
    z = make_zkresp(proxy, request_timeout=3000, session_timeout=6000, extra=["--shutdown-grace", "500"])
    key = unique("lk")
    h = z.client()
    assert h.cmd("LOCK.ACQUIRE", key, "h").startswith(b":")
    w = _raw(z)
    w.sendall(encode("LOCK.ACQUIRE", key, "w", "WAIT", "20000"))
    sub = _raw(z)
    sub.sendall(encode("SUBSCRIBE", "c1"))
    time.sleep(0.3)
    proxy.delay(300)
    s = _raw(z)
    s.sendall(b"".join(encode("SET", "k%d" % i, "v") + encode("EVAL",
              "redis.call('SET', KEYS[1], 'x'); return 1", "1", "k%d" % i)
                       for i in range(50)))
    time.sleep(0.1)
    z.proc.signal(signal.SIGTERM)
    rc = z.wait(20)
    assert rc == 0, z.log_tail()


# ------------------------------------------------- RELIABILITY 28's double free

SHIM_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim", "amulti_stall.c")


def _build_shim():
    out = os.path.join(harness.new_dir("shim"), "amulti_stall.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", out, SHIM_SRC, "-ldl"],
                   check=True)
    return out


def test_multi_after_a_stop_past_the_session(make_zkresp, zk):
    """RELIABILITY 28 as it happens: the sidecar stopped past its session
    (SIGSTOP), and after SIGCONT its loop thread runs before the library's
    IO thread has seen the server close the connection: the handle still
    says CONNECTED, so zk_handle_usable lets a multi through, while the IO
    thread reconnects and is told the session expired -- inside that
    zoo_amulti, which then frees paths it does not own, twice (ASan:
    double free in zoo_amulti, or in zk_req_free).  A shim holds the IO
    thread (the stop), then holds the loop thread inside zoo_amulti until
    the IO thread has seen the expiry (the race lost).  A multi must not be
    handed to the library once the local lease has run out: the session
    may be over on the server, and the library about to find out."""
    shim = _build_shim()
    d = harness.new_dir("arm")
    arm, io = os.path.join(d, "arm"), os.path.join(d, "io")
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = harness.zkresp_env(LD_PRELOAD=shim, AMULTI_STALL_ARM=arm, IO_STALL_ARM=io,
                             ASAN_OPTIONS=(asan + ":" if asan else "") + "verify_asan_link_order=0")
    z = make_zkresp(zk, session_timeout=2000, request_timeout=1000, env=env)
    c = z.client()
    assert c.cmd("SET", "a", "0") == b"+OK\r\n"
    keys = ["lk%d" % i for i in range(6)]
    for k in keys:
        assert c.cmd("SET", k, "tok-" + k, "NX", "PX", "60000") == b"+OK\r\n"
        assert c.cmd("EVAL", LUA_EXTEND, "1", k, "tok-" + k, "60000") == b":1\r\n"
    sid = z.session_id()
    open(io, "w").close()
    harness.wait_for(lambda: os.path.exists(io + ".in"), 10, 0.01, "the IO thread to stop")
    time.sleep(3.0)          # past the 2 s session: the server expires it
    open(arm, "w").close()
    # Renewals of held locks (the cached state of owned keys: no read
    # first), pipelined: multis at once.
    c.send(b"".join(encode("EVAL", LUA_EXTEND, "1", k, "tok-" + k, "60000") for k in keys))
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and not os.path.exists(arm + ".in"):
        time.sleep(0.01)
    os.unlink(io)            # the IO thread runs: EOF, reconnect, expired
    time.sleep(1.5)
    open(arm + ".go", "w").close()
    replies = [c.read_reply(timeout=15) for _ in keys]
    time.sleep(0.5)
    assert z.alive(), "zkresp died after the multi:\n" + z.log_tail(80)
    for reply in replies:
        assert reply == b":0\r\n" or reply.startswith(b"-"), reply
    harness.wait_for(lambda: z.session_id() not in (None, 0, sid), 15, 0.05, "a new session")
    assert c.cmd("SET", "a", "2") == b"+OK\r\n"
    assert c.cmd("GET", "a") == b"$1\r\n2\r\n"

