"""Tier 17: native locks are herd-free.  With 2, 8 and 32 EX waiters queued
behind one holder, spread over three sidecars, a release wakes only the
waiter it may unblock: the ZooKeeper watchers fired while the queue drains
stay at about one or two per release, not one per waiter.

Counted by ZooKeeper itself: mntr's zk_sum_node_{created,deleted,changed,
children}_watch_count add up the watchers each event fired (ZooKeeper 3.8;
the counters are server-wide, so this module has its own server).  The
queue drains by every waiter releasing right after its grant."""

import threading
import time

import pytest

import harness
from harness import Zkresp, unique, wait_for
from nativeload import lock_info

WATCH_SUMS = ("zk_sum_node_created_watch_count", "zk_sum_node_deleted_watch_count",
              "zk_sum_node_changed_watch_count", "zk_sum_node_children_watch_count")


@pytest.fixture(scope="module")
def herd_zk():
    srv = harness.ZkServer().start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def trio(herd_zk):
    first = Zkresp(herd_zk, session_timeout=8000, request_timeout=3000)
    sides = [first] + [Zkresp(herd_zk, root=first.root, session_timeout=8000, request_timeout=3000)
                       for _ in range(2)]
    for z in sides:
        z.start()
    yield sides
    for z in reversed(sides):
        z.close()


def watchers_fired(zk):
    m = zk.mntr()
    missing = [k for k in WATCH_SUMS if k not in m]
    assert not missing, "this ZooKeeper's mntr lacks %s" % missing
    return sum(m[k] for k in WATCH_SUMS), m.get("zk_watch_count")


def settled(zk, quiet=0.3, timeout=10):
    """The watcher sum once it has not moved for `quiet` seconds."""
    last = [watchers_fired(zk)[0], time.monotonic()]

    def still():
        v = watchers_fired(zk)[0]
        now = time.monotonic()
        if v != last[0]:
            last[:] = [v, now]
            return False
        return now - last[1] >= quiet
    wait_for(still, timeout, 0.05, "ZooKeeper's watcher counters to settle")
    return last[0]


def waiter_count(r, key):
    return len(lock_info(r, key)["waiters"])


@pytest.mark.parametrize("n", [2, 8, 32])
def test_release_wakes_one_waiter_not_the_herd(trio, herd_zk, n):
    """n EX waiters (round-robin over 3 sidecars, each on its own
    connection) behind one EX holder; every waiter releases right after its
    grant.  From the holder's release until the queue is empty, ZooKeeper
    fires at most 2 watchers per release on average; every waiter was
    granted, each with a greater token than the grant before."""
    key = unique("herd")
    r = trio[0].redis()
    conns = [trio[i % 3].redis(socket_timeout=60) for i in range(n)]
    grants, errors = [], []
    glock = threading.Lock()

    def waiter(i):
        owner = "w%02d" % i
        try:
            tok = conns[i].execute_command("LOCK.ACQUIRE", key, owner, "MODE", "EX", "WAIT", 40000)
            with glock:
                grants.append((time.monotonic(), owner, tok))
            if tok is not None:
                rel = conns[i].execute_command("LOCK.RELEASE", key, owner)
                if rel != 1:
                    errors.append("%s: RELEASE answered %r" % (owner, rel))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("%s: %r" % (owner, e))

    try:
        t0 = r.execute_command("LOCK.ACQUIRE", key, "holder", "MODE", "EX")
        assert isinstance(t0, int), t0
        before_queue = settled(herd_zk)
        threads = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        wait_for(lambda: waiter_count(r, key) == n, 20, 0.05, "%d waiters in LOCK.INFO" % n)
        start = settled(herd_zk)
        watches_set = watchers_fired(herd_zk)[1]
        t_rel = time.monotonic()
        assert r.execute_command("LOCK.RELEASE", key, "holder") == 1
        for t in threads:
            t.join(60)
        drain = time.monotonic() - t_rel
        assert not errors, errors[:5]
        assert len(grants) == n, grants
        end = settled(herd_zk)
        flat = r.execute_command("LOCK.INFO", key)
        assert flat == [b"holders", [], b"waiters", []], flat
    finally:
        for c in conns:
            c.close()
        r.close()
    releases = n + 1
    fired = end - start
    per = fired / releases
    print("herd n=%d: %d watchers fired over %d releases = %.2f per release "
          "(queueing fired %d; %s watches set while queued; drained in %.2f s)"
          % (n, fired, releases, per, start - before_queue, watches_set, drain))
    tokens = [t0] + [tok for _, _, tok in sorted(grants)]
    assert all(isinstance(x, int) for x in tokens), tokens
    assert all(a < b for a, b in zip(tokens, tokens[1:])), "tokens not increasing in grant order: %r" % tokens
    assert per <= 2.0, "%.2f watchers fired per release with %d waiters (%d in all): a herd" % (per, n, fired)
