"""redis-py's Lock, unchanged, with blocking acquires from threads split
across two zkresp sidecars on one ZooKeeper: no two holders overlap (the
lock-history checker), both sidecars' clients acquire, and every release
(the library's token-checking script) succeeds."""
import threading
import time

import redis

from harness import LockHistory


def test_redis_py_lock_contention_two_sidecars(zkresp_pair):
    a, b = zkresp_pair
    hist, errors = LockHistory(), []
    deadline = time.monotonic() + 4.0

    def worker(side, n):
        port = (a, b)[side].port
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        holder = "%s%d" % ("AB"[side], n)
        try:
            while time.monotonic() < deadline:
                lock = r.lock("py:contended", timeout=5, blocking_timeout=3, sleep=0.01)
                if not lock.acquire():
                    continue
                hold = hist.acquired("py:contended", holder, lock.local.token, LockHistory.now())
                time.sleep(0.002)
                hist.released(hold, LockHistory.now())
                lock.release()  # raises LockNotOwnedError if the token is gone
        except Exception as e:  # noqa: BLE001 - any client error fails the test
            errors.append("%s: %r" % (holder, e))
        finally:
            r.close()

    ts = [threading.Thread(target=worker, args=(side, n)) for side in (0, 1) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors[:5]
    hist.check()
    assert hist.count() >= 20, "too few acquisitions to prove anything: %d" % hist.count()
    assert hist.count(holder_prefix="A") > 0 and hist.count(holder_prefix="B") > 0
