"""Tier 47 (faults): CLIENT UNBLOCK of a native lock's waiter at awkward
moments, its ZooKeeper requests held at a proxy: an unblock that answered 1
ends the wait at once, even when it lands while the wait reads its watch;
a wait that ran out is no longer blocked while it leaves the queue."""

import threading
import time

import redis

import harness
from harness import keyenc
from nativeload import waiting


def test_unblock_while_the_second_wait_reads_its_watch_ends_it(make_proxy, make_zkresp, zk, kz):
    """w waits behind h, a request of its own sidecar: its first wait sets
    no watch and looks again after 250 ms (LW.OWN_GRACE_MS); the second
    wait's getData with a watch on h's node is held at the proxy.  CLIENT
    UNBLOCK then answers 1 (the first wait's host.block() stands), and w
    answers null once the read is answered, not after its WAIT."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=3000)
    ra = a.redis(socket_timeout=30)
    key = harness.unique("rw")
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    lock = "%s/l/%s" % (a.root.rstrip("/"), keyenc.encode(key))
    (hname,) = kz.get_children(lock)
    proxy.hold_next_watch(hname)
    rw = a.redis(socket_timeout=40)
    wid = rw.client_id()
    out = {}

    def run():
        t0 = time.monotonic()
        try:
            out["reply"] = rw.execute_command("LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "20000")
        except redis.RedisError as e:
            out["reply"] = e
        out["elapsed"] = time.monotonic() - t0
    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        assert proxy.wait_held(10), "w's second wait set no watch on h's node"
        answered = ra.execute_command("CLIENT", "UNBLOCK", wid)
    finally:
        proxy.release_hold()
    assert answered == 1
    th.join(25)
    assert "elapsed" in out
    # at once, not after its whole WAIT (about 20 s)
    assert out["elapsed"] < 5, out
    assert out["reply"] is None, out
    assert waiting(ra, key) == []
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1


def test_wait_that_ran_out_is_no_longer_blocked(make_proxy, make_zkresp, zk, kz):
    """w's WAIT runs out; while it leaves the queue (its delete held at the
    proxy) it has stopped waiting, as a Redis client whose timeout fired is
    unblocked at once: CLIENT LIST shows no b, blocked_clients does not
    count it, and CLIENT UNBLOCK ERROR answers 0 and leaves the WAIT's
    null as it is."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=3000)
    ra = a.redis(socket_timeout=30)
    key = harness.unique("rt")
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    lock = "%s/l/%s" % (a.root.rstrip("/"), keyenc.encode(key))
    rw = a.redis(socket_timeout=40)
    wid = rw.client_id()
    out = {}

    def run():
        try:
            out["reply"] = rw.execute_command("LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "1500")
        except redis.RedisError as e:
            out["reply"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    harness.wait_for(lambda: len(kz.get_children(lock)) == 2, 10, 0.02, "w's request")
    (wname,) = [n for n in kz.get_children(lock) if n != min(kz.get_children(lock))]
    proxy.hold_next("delete", wname)
    try:
        assert proxy.wait_held(10), "w did not leave at its WAIT's end"
        (entry,) = ra.client_list(client_id=[str(wid)])
        flags = entry["flags"]
        blocked = ra.info("clients")["blocked_clients"]
        answered = ra.execute_command("CLIENT", "UNBLOCK", wid, "ERROR")
    finally:
        proxy.release_hold()
    th.join(10)
    assert (flags, blocked, answered) == ("N", 0, 0)
    assert out["reply"] is None, out  # (its WAIT's null, not -UNBLOCKED)
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1


def test_unblock_while_zookeeper_is_out_of_reach(make_proxy, make_zkresp, zk, kz):
    """CLIENT UNBLOCK ERROR of a waiter while ZooKeeper is out of reach
    answers 1; the waiter gets -UNBLOCKED once its leaving the queue is
    answered or times out, and is out of the queue once ZooKeeper is back."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=3000)
    ra = a.redis(socket_timeout=30)
    key = harness.unique("zo")
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    rw = a.redis(socket_timeout=40)
    wid = rw.client_id()
    out = {}

    def run():
        try:
            out["reply"] = rw.execute_command("LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "30000")
        except redis.RedisError as e:
            out["reply"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    harness.wait_for(lambda: ra.info("clients")["blocked_clients"] == 1, 10, what="w blocked")
    time.sleep(0.6)  # past the wait's first look (its own sidecar's request)
    proxy.blackhole(True)
    try:
        answered = ra.execute_command("CLIENT", "UNBLOCK", wid, "ERROR")
        th.join(20)
    finally:
        proxy.blackhole(False)
    assert answered == 1
    assert isinstance(out.get("reply"), redis.ResponseError) and str(out["reply"]) == \
        "UNBLOCKED client unblocked via CLIENT UNBLOCK", out
    harness.wait_for(lambda: waiting(ra, key) == [], 15, what="w out of the queue")
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1


def test_unblock_during_watch_read_then_zookeeper_out_of_reach(make_proxy, make_zkresp, zk, kz):
    """CLIENT UNBLOCK ERROR answers 1 while the wait's watch read is out;
    ZooKeeper then goes out of reach and the read fails: the waiter still
    gets -UNBLOCKED (not -TRYAGAIN), and leaves the queue once it is back."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=3000)
    ra = a.redis(socket_timeout=30)
    key = harness.unique("rz")
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    lock = "%s/l/%s" % (a.root.rstrip("/"), keyenc.encode(key))
    (hname,) = kz.get_children(lock)
    proxy.hold_next_watch(hname)
    rw = a.redis(socket_timeout=40)
    wid = rw.client_id()
    out = {}

    def run():
        t0 = time.monotonic()
        try:
            out["reply"] = rw.execute_command("LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "20000")
        except redis.RedisError as e:
            out["reply"] = e
        out["elapsed"] = time.monotonic() - t0
    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        assert proxy.wait_held(10), "w's second wait set no watch on h's node"
        answered = ra.execute_command("CLIENT", "UNBLOCK", wid, "ERROR")
        proxy.blackhole(True)   # the held read and all after it go nowhere
        proxy.release_hold()
        th.join(25)
    finally:
        proxy.blackhole(False)
    assert answered == 1
    assert "elapsed" in out
    assert isinstance(out["reply"], redis.ResponseError) and \
        str(out["reply"]) == "UNBLOCKED client unblocked via CLIENT UNBLOCK", out
    harness.wait_for(lambda: waiting(ra, key) == [], 15, what="w out of the queue")
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
