"""Tier 47 (faults): CLIENT UNBLOCK of a native lock's waiter at awkward
moments, its ZooKeeper requests held at a proxy: an unblock that answered 1
ends the wait at once, even when it lands while the wait reads its watch,
and answers as unblocked when ZooKeeper then fails it; a wait that ran out
is no longer blocked while it leaves the queue."""

import threading
import time

import redis

import harness
from harness import keyenc
from nativeload import waiting

UNBLOCKED = "UNBLOCKED client unblocked via CLIENT UNBLOCK"


class Scene:
    """One sidecar behind a proxy; h holds `key` there; w waits for it on
    its own connection (WAIT wait_ms) once started.  before_w(scene) runs
    after h's grant, before w's request (to set a hold at the proxy)."""

    def __init__(self, make_proxy, make_zkresp, zk, kz, tag, wait_ms, before_w=None):
        self.proxy = make_proxy(zk)
        self.a = make_zkresp(zk_target=self.proxy, session_timeout=10000, request_timeout=3000)
        self.r = self.a.redis(socket_timeout=30)
        self.kz = kz
        self.key = harness.unique(tag)
        assert isinstance(self.r.execute_command("LOCK.ACQUIRE", self.key, "h", "PX", "60000"), int)
        self.lock = "%s/l/%s" % (self.a.root.rstrip("/"), keyenc.encode(self.key))
        if before_w:
            before_w(self)
        self.rw = self.a.redis(socket_timeout=40)
        self.wid = self.rw.client_id()
        self.out = {}
        self.thread = threading.Thread(target=self._run, args=(wait_ms,), daemon=True)
        self.thread.start()

    def _run(self, wait_ms):
        t0 = time.monotonic()
        try:
            self.out["reply"] = self.rw.execute_command("LOCK.ACQUIRE", self.key, "w", "PX", "60000",
                                                        "WAIT", wait_ms)
        except redis.RedisError as e:
            self.out["reply"] = e
        self.out["elapsed"] = time.monotonic() - t0

    def hold_h_watch(self):
        (hname,) = self.kz.get_children(self.lock)
        self.proxy.hold_next_watch(hname)

    def unblock(self, *how):
        return self.r.execute_command("CLIENT", "UNBLOCK", self.wid, *how)

    def reply(self, timeout):
        self.thread.join(timeout)
        assert "elapsed" in self.out, "w still waits"
        return self.out["reply"]

    def done(self):
        harness.wait_for(lambda: waiting(self.r, self.key) == [], 15, what="w out of the queue")
        assert self.r.execute_command("LOCK.RELEASE", self.key, "h") == 1


def unblocked(reply):
    return isinstance(reply, redis.ResponseError) and str(reply) == UNBLOCKED


def test_unblock_while_the_second_wait_reads_its_watch_ends_it(make_proxy, make_zkresp, zk, kz):
    """w waits behind h, a request of its own sidecar: its first wait sets
    no watch and looks again after 250 ms (LW.OWN_GRACE_MS); the second
    wait's getData with a watch on h's node is held at the proxy.  CLIENT
    UNBLOCK then answers 1 (the first wait's host.block() stands), and w
    answers null once the read is answered, not after its WAIT (20 s)."""
    s = Scene(make_proxy, make_zkresp, zk, kz, "rw", 20000, Scene.hold_h_watch)
    try:
        assert s.proxy.wait_held(10), "w's second wait set no watch on h's node"
        answered = s.unblock()
    finally:
        s.proxy.release_hold()
    assert answered == 1
    assert s.reply(25) is None, s.out
    assert s.out["elapsed"] < 5, s.out
    s.done()


def test_wait_that_ran_out_is_no_longer_blocked(make_proxy, make_zkresp, zk, kz):
    """w's WAIT runs out; while it leaves the queue (its delete held at the
    proxy) it has stopped waiting, as a Redis client whose timeout fired is
    unblocked at once: CLIENT LIST shows no b, blocked_clients does not
    count it, and CLIENT UNBLOCK ERROR answers 0 and leaves the WAIT's
    null as it is."""
    s = Scene(make_proxy, make_zkresp, zk, kz, "rt", 1500)
    harness.wait_for(lambda: len(kz.get_children(s.lock)) == 2, 10, 0.02, "w's request")
    (wname,) = [n for n in kz.get_children(s.lock) if n != min(kz.get_children(s.lock))]
    s.proxy.hold_next("delete", wname)
    try:
        assert s.proxy.wait_held(10), "w did not leave at its WAIT's end"
        (entry,) = s.r.client_list(client_id=[str(s.wid)])
        seen = (entry["flags"], s.r.info("clients")["blocked_clients"], s.unblock("ERROR"))
    finally:
        s.proxy.release_hold()
    assert seen == ("N", 0, 0)
    assert s.reply(10) is None, s.out  # (its WAIT's null, not -UNBLOCKED)
    s.done()


def test_unblock_while_zookeeper_is_out_of_reach(make_proxy, make_zkresp, zk, kz):
    """CLIENT UNBLOCK ERROR of a waiter while ZooKeeper is out of reach
    answers 1; the waiter gets -UNBLOCKED once its leaving the queue is
    answered or times out, and is out of the queue once ZooKeeper is back."""
    s = Scene(make_proxy, make_zkresp, zk, kz, "zo", 30000)
    harness.wait_for(lambda: s.r.info("clients")["blocked_clients"] == 1, 10, what="w blocked")
    time.sleep(0.6)  # past the wait's first look (its own sidecar's request)
    s.proxy.blackhole(True)
    try:
        answered = s.unblock("ERROR")
        reply = s.reply(20)
    finally:
        s.proxy.blackhole(False)
    assert answered == 1
    assert unblocked(reply), s.out
    s.done()


def test_unblock_during_watch_read_then_zookeeper_out_of_reach(make_proxy, make_zkresp, zk, kz):
    """CLIENT UNBLOCK ERROR answers 1 while the wait's watch read is out;
    ZooKeeper then goes out of reach and the read fails: the waiter still
    gets -UNBLOCKED (not -TRYAGAIN), and leaves the queue once it is back."""
    s = Scene(make_proxy, make_zkresp, zk, kz, "rz", 20000, Scene.hold_h_watch)
    try:
        assert s.proxy.wait_held(10), "w's second wait set no watch on h's node"
        answered = s.unblock("ERROR")
        s.proxy.blackhole(True)  # the held read and all after it go nowhere
        s.proxy.release_hold()
        reply = s.reply(25)
    finally:
        s.proxy.blackhole(False)
    assert answered == 1
    assert unblocked(reply), s.out
    s.done()
