"""Tier 10: two zkresp processes on one ZooKeeper and one root behave as one
Redis for the lock commands: mutual exclusion under concurrency from both
sides (checked by the lock-history checker with fencing tokens), expiry seen
from both, a lock taken through one refused, expired and released through
the other, PTTL from the other, and the lifetime rule (a TTL key is an
ephemeral node of its last writer's session)."""

import contextlib
import random
import threading
import time
import uuid

import pytest

import harness
from harness import LockHistory, keyenc


def _fence(kz, root, key, token):
    """czxid of the key's node if it carries token, else None (gone, or
    somebody else's: the checker then flags the overlap)."""
    data, stat = harness.key_stat(kz, root, key)
    if stat is None or token.encode() not in data:
        return None
    return stat.czxid


def _contend(sidecars, kz, keys, threads_per_side, duration, px, release, hist, errors, sides=(0, 1)):
    stop = time.monotonic() + duration

    def worker(side, n):
        r = sidecars[side].redis(socket_timeout=15)
        holder = "%s-%d" % ("AB"[side], n)
        rnd = random.Random(n * 7 + side)
        try:
            while time.monotonic() < stop:
                key = rnd.choice(keys)
                tok = "%s-%s" % (holder, uuid.uuid4().hex[:10])
                t_sent = time.monotonic()
                ok = r.set(key, tok, nx=True, px=px)
                t_ok = time.monotonic()
                if not ok:
                    time.sleep(rnd.uniform(0.001, 0.01))
                    continue
                fence = _fence(kz, sidecars[0].root, key, tok)
                h = hist.acquired(key, holder, tok, t_ok, fence=fence,
                                  expires_at=t_sent + px / 1000.0)
                if fence is None:
                    hist.violation("%s: right after OK the node of %r does not carry its token" % (holder, key))
                if release:
                    time.sleep(rnd.uniform(0, 0.005))
                    t_rel = time.monotonic()
                    hist.released(h, t_rel)
                    n_del = r.delete(key)
                    if n_del != 1:
                        hist.violation("%s: DEL of its own lock %r answered %r" % (holder, key, n_del))
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append("%s: %r" % (holder, e))
        finally:
            r.close()

    ts = [threading.Thread(target=worker, args=(side, n))
          for side in sides for n in range(threads_per_side)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(duration + 60)


def _steady_pair(make_zkresp):
    """Two sidecars whose sessions survive a loaded machine: the safety
    property under test holds while the holder's sidecar keeps its session
    (a sidecar stalled past its session loses its ephemeral locks by design,
    RELIABILITY case 8), so these tests give the sessions room and check
    that neither was replaced."""
    a = make_zkresp(session_timeout=10000, request_timeout=5000)
    b = make_zkresp(root=a.root, session_timeout=10000, request_timeout=5000)
    return a, b


def _same_sessions(pair, before):
    after = [z.session_id() for z in pair]
    assert after == before, "a sidecar's ZooKeeper session was replaced during the run " \
        "(the machine stalled it past its session timeout): %r -> %r" % (before, after)


def test_mutual_exclusion_with_release(make_zkresp, kz):
    pair = _steady_pair(make_zkresp)
    sessions = [z.session_id() for z in pair]
    hist, errors = LockHistory(), []
    _contend(pair, kz, ["lock:a", "lock:b"], 6, 4.0, 30000, True, hist, errors)
    _same_sessions(pair, sessions)
    assert not errors, errors[:5]
    hist.check()
    assert hist.count() >= 20, "too few acquisitions to prove anything: %d" % hist.count()
    assert hist.count(holder_prefix="A") > 0 and hist.count(holder_prefix="B") > 0, \
        "one side never acquired: A=%d B=%d" % (hist.count(holder_prefix="A"), hist.count(holder_prefix="B"))


def test_mutual_exclusion_with_expiry(make_zkresp, kz):
    # Nobody releases: every lock must expire (PX 300) before the next one is
    # granted on either side.
    pair = _steady_pair(make_zkresp)
    sessions = [z.session_id() for z in pair]
    hist, errors = LockHistory(), []
    # Who wins an expired lock is a race (the holder's own sidecar sees the
    # expiry without a round trip, so under a sanitizer it may win a round's
    # every expiry): contend in rounds until both sides have won one.
    for _ in range(3):
        _contend(pair, kz, ["lock:x"], 4, 4.0, 300, False, hist, errors)
        if errors or (hist.count(holder_prefix="A") > 0 and hist.count(holder_prefix="B") > 0):
            break
    # A side that still never won (a loaded machine) contends alone: it
    # takes the lock once the other side's last hold has expired.
    for side, prefix in ((0, "A"), (1, "B")):
        if not errors and hist.count(holder_prefix=prefix) == 0:
            _contend(pair, kz, ["lock:x"], 4, 2.0, 300, False, hist, errors, sides=(side,))
    _same_sessions(pair, sessions)
    assert not errors, errors[:5]
    hist.check()
    assert hist.count() >= 6, "too few acquisitions: %d" % hist.count()
    assert hist.count(holder_prefix="A") > 0 and hist.count(holder_prefix="B") > 0, \
        "one side never acquired, even alone: A=%d B=%d" % (hist.count(holder_prefix="A"), hist.count(holder_prefix="B"))


def test_expiry_seen_from_both(zkresp_pair, kz):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    px = 1200
    t_sent = time.monotonic()
    assert ca.cmd("SET", "exp", "v", "NX", "PX", str(px)) == b"+OK\r\n"
    t_ok = time.monotonic()
    assert cb.cmd("GET", "exp") == b"$1\r\nv\r\n"
    assert cb.cmd("EXISTS", "exp") == b":1\r\n"
    pttl = int(cb.cmd("PTTL", "exp")[1:-2])
    assert 0 < pttl <= px, pttl
    # Still there on both sides shortly before the deadline...
    time.sleep(max(0, t_sent + (px - 200) / 1000.0 - time.monotonic()))
    assert ca.cmd("GET", "exp") == b"$1\r\nv\r\n"
    assert cb.cmd("GET", "exp") == b"$1\r\nv\r\n"
    # ...and absent on both sides just after it, even before the delete lands.
    time.sleep(max(0, t_ok + (px + 100) / 1000.0 - time.monotonic()))
    for c in (ca, cb):
        assert c.cmd("GET", "exp") == b"$-1\r\n"
        assert c.cmd("EXISTS", "exp") == b":0\r\n"
        assert c.cmd("PTTL", "exp") == b":-2\r\n"
    harness.wait_for(lambda: harness.key_stat(kz, a.root, "exp") == (None, None), 2.0,
                     what="the expired node to be deleted")


def test_lock_via_a_refused_and_released_via_b(zkresp_pair):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "30000") == b"+OK\r\n"
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"$-1\r\n"
    cb.cmd("HELLO", "3")
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"_\r\n"
    assert cb.cmd("GET", "lk") == b"$5\r\ntok-a\r\n"
    assert cb.cmd("TYPE", "lk") == b"+string\r\n"
    pttl = int(cb.cmd("PTTL", "lk")[1:-2])
    assert 28500 <= pttl <= 30000, pttl
    assert cb.cmd("DEL", "lk") == b":1\r\n"
    assert ca.cmd("GET", "lk") == b"$-1\r\n"
    assert ca.cmd("SET", "lk", "tok-a2", "NX", "PX", "30000") == b"+OK\r\n"
    assert cb.cmd("GET", "lk") == b"$6\r\ntok-a2\r\n"
    assert cb.cmd("DELIFEQ", "lk", "tok-a") == b":0\r\n"
    assert cb.cmd("DELIFEQ", "lk", "tok-a2") == b":1\r\n"
    assert ca.cmd("EXISTS", "lk") == b":0\r\n"


def test_old_holder_never_releases_the_lock_that_replaced_its_own(zkresp_pair, kz):
    """A's release of its lock goes by A's owned-key cache (one multi, no
    read).  When B deletes A's lock and takes the key again, the new node
    starts at the version A cached: only A's session guard, bumped by B's
    delete in the same multi, keeps A's release off B's lock."""
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    unlock = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
              "return redis.call('del', KEYS[1]) else return 0 end")
    guard = "%s/g/%016x" % (a.root, a.session_id())
    for i in range(30):
        assert ca.cmd("SET", "lk", "tok-a%d" % i, "NX", "PX", "30000") == b"+OK\r\n"
        v0 = kz.get(guard)[1].version
        assert cb.cmd("DEL", "lk") == b":1\r\n"
        assert kz.get(guard)[1].version == v0 + 1
        assert cb.cmd("SET", "lk", "tok-b%d" % i, "NX", "PX", "30000") == b"+OK\r\n"
        assert harness.key_stat(kz, a.root, "lk")[1].version == 0
        if i % 2:
            assert ca.cmd("DELIFEQ", "lk", "tok-a%d" % i) == b":0\r\n"
        else:
            assert ca.cmd("EVAL", unlock, "1", "lk", "tok-a%d" % i) == b":0\r\n"
        assert cb.cmd("GET", "lk") == ("$%d\r\ntok-b%d\r\n" % (len("tok-b%d" % i), i)).encode()
        assert cb.cmd("DELIFEQ", "lk", "tok-b%d" % i) == b":1\r\n"


def _behind_proxy(make_proxy, make_zkresp, zk):
    """Sidecar B, and sidecar A on B's root reaching ZooKeeper through a
    proxy, with long timeouts (a request the proxy holds or cuts must not be
    given up with A's connection): B, the proxy, a client of A, one of B."""
    b = make_zkresp()
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, root=b.root, session_timeout=10000, request_timeout=5000)
    return b, proxy, a.client(), b.client()


@contextlib.contextmanager
def _in_flight(client, cmd, arm, wait, release):
    """Sends cmd through client, its ZooKeeper request caught by the proxy
    as arm() set it up (wait(timeout) tells when), and lets it go with
    release() once the body has run; gives the list its reply lands in."""
    arm()
    answer = []
    t = threading.Thread(target=lambda: answer.append(client.cmd(*cmd)))
    t.start()
    try:
        assert wait(5), "the command never sent its request"
        yield answer
    finally:
        release()
        t.join(15)


def _release_held(proxy, client, release, key, path):
    """Sends the release of key's token t1 through client (DELIFEQ, or
    redis-py's script), its multi on the node at path held back by proxy
    while the body runs; gives the list its reply lands in."""
    if release == "DELIFEQ":
        cmd = ("DELIFEQ", key, "t1")
    else:
        cmd = ("EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then "
               "return redis.call('del', KEYS[1]) else return 0 end", "1", key, "t1")
    return _in_flight(client, cmd, lambda: proxy.hold_next("multi", path), proxy.wait_held, proxy.release_hold)


def _create_lost(proxy, client, cmd):
    """Sends cmd through client, the reply of its create of cmd[1]'s node
    lost (the connection cut once the create reached ZooKeeper; not another
    create, such as the sidecar's own start-up writes) and the sidecar kept
    from ZooKeeper while the body runs; gives the list its reply lands in."""
    return _in_flight(client, cmd, lambda: proxy.drop_next_reply(ops=("create", "create2"), hold=True,
                                                                 needle=keyenc.encode(cmd[1])),
                      proxy.wait_dropped, lambda: proxy.blackhole(False))


def _mark_of(path, marks=64):
    """The mark a node's path hashes to: FNV-1a, modulo the number of marks
    (a session's 64, the 4096 persistent ones; every sidecar on a root
    must count alike)."""
    h = 2166136261
    for byte in path.encode():
        h = ((h ^ byte) * 16777619) & 0xffffffff
    return h % marks


def _on_same_pmark(root, key):
    """Another key whose node hashes to the persistent mark of key's."""
    mark = _mark_of(keyenc.node_path(root, key), 4096)
    for i in range(1 << 20):
        other = "%s.%d" % (key, i)
        if _mark_of(keyenc.node_path(root, other), 4096) == mark:
            return other
    raise AssertionError("no key found on the mark of " + key)


@pytest.mark.parametrize("release", ["DELIFEQ", "script"])
def test_release_landing_late_through_another_sidecar_spares_the_next_holder(
        release, make_proxy, make_zkresp, zk, kz):
    """A lock taken through B is released through A, whose multi reaches
    ZooKeeper only after the lock expired on B and B gave the key to a new
    client: B's new node is at version 0, as the one A read, and B's expiry
    bumped no guard, only the node's mark of B's.  A read that mark before
    the node and bumps it at the version read in its multi, so the multi
    fails; A reads again and answers 0, and the new holder keeps its lock
    (guard.lua)."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("late")
    assert cb.cmd("SET", key, "t1", "NX", "PX", "800") == b"+OK\r\n"
    with _release_held(proxy, ca, release, key, keyenc.node_path(b.root, key)) as answer:
        # B expires t1 at its TTL (its node deleted); a new client takes the
        # key through B: a new node at version 0, as t1's was
        harness.wait_for(lambda: harness.key_stat(kz, b.root, key)[1] is None,
                         5, 0.01, "B's expiry of t1")
        assert cb.cmd("SET", key, "t2", "NX", "PX", "30000") == b"+OK\r\n"
        assert harness.key_stat(kz, b.root, key)[1].version == 0
    assert answer == [b":0\r\n"]
    assert cb.cmd("GET", key) == b"$2\r\nt2\r\n"
    data, stat = harness.key_stat(kz, b.root, key)
    assert stat is not None and b"t2" in data and stat.ephemeralOwner == b.session_id()
    # B's own release bumps the mark the node's path hashes to (FNV-1a,
    # 64 marks: every sidecar on a root must count alike)
    mark = "%s/m/%016x.%d" % (b.root, b.session_id(), _mark_of(keyenc.node_path(b.root, key)))
    v = kz.get(mark)[1].version
    assert cb.cmd("DELIFEQ", key, "t2") == b":1\r\n"
    assert kz.get(mark)[1].version == v + 1


@pytest.mark.parametrize("release", ["DELIFEQ", "script"])
def test_late_release_of_a_lock_without_ttl_spares_the_lock_taken_since(
        release, make_proxy, make_zkresp, zk, kz):
    """A lock without a TTL (redis-py's Lock with no timeout) is a persistent
    node: no session guard or mark counts its removals.  Its release
    through A reaches ZooKeeper only after B forced it free (DEL) and a
    client of B took it again: a new node at version 0, as the one A read.
    B's DEL bumped the node's persistent mark, which A's multi checks at
    the version A knew before its read, so the multi fails; A reads again
    and answers 0, and the new holder keeps its lock (guard.lua)."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("nottl")
    assert ca.cmd("SET", key, "t1", "NX") == b"+OK\r\n"
    assert harness.key_stat(kz, b.root, key)[1].ephemeralOwner == 0
    path = keyenc.node_path(b.root, key)
    with _release_held(proxy, ca, release, key, path) as answer:
        assert cb.cmd("DEL", key) == b":1\r\n"
        assert cb.cmd("SET", key, "t2", "NX") == b"+OK\r\n"
        assert harness.key_stat(kz, b.root, key)[1].version == 0
    assert answer == [b":0\r\n"]
    assert cb.cmd("GET", key) == b"$2\r\nt2\r\n"
    # the mark B's DEL bumped, shared by every sidecar on the root
    mark = "%s/m/p.%d" % (b.root, _mark_of(path, 4096))
    v = kz.get(mark)[1].version
    assert ca.cmd("DELIFEQ", key, "t2") == b":1\r\n"
    assert kz.get(mark)[1].version == v + 1


@pytest.mark.parametrize("mark", ["known", "not known"])
@pytest.mark.parametrize("after", ["set again", "gone"])
def test_lost_create_of_a_counter_without_ttl_is_not_counted_twice(after, mark, make_proxy, make_zkresp, zk, kz):
    """An INCR of a missing key without a TTL creates a persistent node.  Its
    reply is lost and, before A can look, B deletes the counter (and sets it
    again: a new node at version 0, as A's would be).  B's DEL bumped the
    node's persistent mark since A read it (with a watch, for a write of
    another key on that mark), or, the mark not known to A, after the
    newest zxid A had seen as it sent the create; so A's create may have
    applied and been removed since: A answers TRYAGAIN rather than count
    again (resolve.lua)."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("ctr")
    if mark == "known":
        assert cb.cmd("SET", key, "0") == b"+OK\r\n"
        assert cb.cmd("DEL", key) == b":1\r\n"  # (the mark bumped)
        # A reads the mark (with a watch) for its write of a key on the same mark
        other = _on_same_pmark(b.root, key)
        assert cb.cmd("SET", other, "1") == b"+OK\r\n"
        assert ca.cmd("INCR", other) == b":2\r\n"
    with _create_lost(proxy, ca, ("INCR", key)) as answer:
        assert cb.cmd("GET", key) == b"$1\r\n1\r\n"  # A's create applied
        assert cb.cmd("DEL", key) == b":1\r\n"
        if after == "set again":
            assert cb.cmd("SET", key, "5") == b"+OK\r\n"
            assert harness.key_stat(kz, b.root, key)[1].version == 0
    assert answer == [b"-TRYAGAIN ZooKeeper unavailable\r\n"]
    assert cb.cmd("GET", key) == (b"$1\r\n5\r\n" if after == "set again" else b"$-1\r\n")


def test_lost_create_that_did_not_apply_runs_again_on_a_mark_moved_before(make_proxy, make_zkresp, zk):
    """B bumped the persistent mark of a counter's node (a DEL), long
    before; A never read that mark, and has written since (a create whose
    answer carries a zxid after the bump).  A's INCR of the counter never
    reaches ZooKeeper, the connection cut: A finds no node and a mark last
    written before the newest zxid it had seen as it sent the create, so
    nothing at that path was removed since, and the INCR runs again
    (resolve.lua, zk.seen_zxid)."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("ctr")
    assert cb.cmd("SET", key, "0") == b"+OK\r\n"
    assert cb.cmd("DEL", key) == b":1\r\n"  # (the mark bumped)
    assert ca.cmd("SET", harness.unique("other"), "1") == b"+OK\r\n"
    with _in_flight(ca, ("INCR", key), lambda: proxy.blackhole_at_next(("create", "create2")),
                    proxy.wait_holed, lambda: proxy.blackhole(False)) as answer:
        pass
    assert answer == [b":1\r\n"]
    assert cb.cmd("GET", key) == b"$1\r\n1\r\n"


def test_lost_lock_seen_and_deleted_is_not_taken_again(make_proxy, make_zkresp, zk):
    """A's SET NX PX (an ephemeral node of A's session) applies, its reply
    lost; B's client sees the lock and deletes it, which bumps A's session
    guard.  A finds no node: its create may have applied and been removed,
    so it answers TRYAGAIN rather than take the lock again behind that DEL
    (resolve.lua)."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("lk")
    assert ca.cmd("SET", "warm", "x", "PX", "60000") == b"+OK\r\n"  # (A's guard known)
    with _create_lost(proxy, ca, ("SET", key, "t1", "NX", "PX", "60000")) as answer:
        assert cb.cmd("GET", key) == b"$2\r\nt1\r\n"
        assert cb.cmd("DEL", key) == b":1\r\n"
    assert answer == [b"-TRYAGAIN ZooKeeper unavailable\r\n"]
    assert cb.cmd("GET", key) == b"$-1\r\n"


def test_lost_lock_that_did_not_apply_is_taken_after_a_removal_of_another_key(make_proxy, make_zkresp, zk, kz):
    """A's SET NX PX never reaches ZooKeeper (the connection cut); meanwhile
    B deletes another lock of A's, which bumps A's session guard and the
    mark of that lock's node, not the mark of this one's.  A finds no node
    and this node's mark last written before the newest zxid A had seen as
    it sent the create: nothing of A's at that path was removed since, so
    the SET runs again and takes the lock (resolve.lua, guard.lua's
    mark_moved), where the guard alone answered TRYAGAIN."""
    b, proxy, ca, cb = _behind_proxy(make_proxy, make_zkresp, zk)
    key = harness.unique("lk")
    mark = _mark_of(keyenc.node_path(b.root, key))
    other = next(o for o in ("%s.%d" % (key, i) for i in range(1000))
                 if _mark_of(keyenc.node_path(b.root, o)) != mark)
    assert ca.cmd("SET", other, "t0", "PX", "60000") == b"+OK\r\n"
    guard = "%s/g/%016x" % (b.root, harness.key_stat(kz, b.root, other)[1].ephemeralOwner)
    v = kz.get(guard)[1].version
    with _in_flight(ca, ("SET", key, "t1", "NX", "PX", "60000"),
                    lambda: proxy.blackhole_at_next(("create", "create2")),
                    proxy.wait_holed, lambda: proxy.blackhole(False)) as answer:
        assert cb.cmd("DEL", other) == b":1\r\n"
        assert kz.get(guard)[1].version == v + 1
    assert answer == [b"+OK\r\n"]
    assert cb.cmd("GET", key) == b"$2\r\nt1\r\n"


def test_lock_expires_via_a_then_taken_via_b(zkresp_pair):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    px = 600
    t_sent = time.monotonic()
    assert ca.cmd("SET", "lk2", "tok-a", "NX", "PX", str(px)) == b"+OK\r\n"
    t_ok_a = time.monotonic()
    while True:
        r = cb.cmd("SET", "lk2", "tok-b", "NX", "PX", "30000")
        if r == b"+OK\r\n":
            t_ok_b = time.monotonic()
            break
        assert r == b"$-1\r\n", r
        assert time.monotonic() < t_ok_a + px / 1000.0 + 3, "B never got the expired lock"
        time.sleep(0.01)
    assert t_ok_b >= t_sent + px / 1000.0 - 0.005, \
        "B got the lock %.0f ms before A's could have expired" % ((t_sent + px / 1000.0 - t_ok_b) * 1000)
    assert t_ok_b <= t_ok_a + px / 1000.0 + 1.0, "B got it %.0f ms late" % ((t_ok_b - t_ok_a) * 1000 - px)
    assert ca.cmd("GET", "lk2") == b"$5\r\ntok-b\r\n"


def test_pttl_from_b(zkresp_pair):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    assert cb.cmd("PTTL", "p") == b":-2\r\n"
    assert ca.cmd("SET", "p", "v", "PX", "5000") == b"+OK\r\n"
    t0 = time.monotonic()
    time.sleep(0.3)
    pttl = int(cb.cmd("PTTL", "p")[1:-2])
    elapsed = (time.monotonic() - t0) * 1000
    assert 5000 - elapsed - 250 <= pttl <= 5000 - 300 + 50, (pttl, elapsed)
    assert cb.cmd("TTL", "p") in (b":5\r\n", b":4\r\n")
    assert ca.cmd("PEXPIRE", "p", "20000") == b":1\r\n"
    pttl = int(cb.cmd("PTTL", "p")[1:-2])
    assert 19000 <= pttl <= 20000, pttl
    assert ca.cmd("PERSIST", "p") == b":1\r\n"
    assert cb.cmd("PTTL", "p") == b":-1\r\n"
    assert cb.cmd("EXPIRE", "p", "100") == b":1\r\n"
    ttl = int(ca.cmd("TTL", "p")[1:-2])
    assert 98 <= ttl <= 100, ttl


def test_lifetime_follows_last_writer(zkresp_pair, kz):
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    sa, sb = a.session_id(), b.session_id()
    assert sa != sb
    assert ca.cmd("SET", "life", "v1", "PX", "30000") == b"+OK\r\n"
    _, st = harness.key_stat(kz, a.root, "life")
    assert st is not None and st.ephemeralOwner == sa, (st, hex(sa))
    assert cb.cmd("SET", "life", "v2", "PX", "30000") == b"+OK\r\n"
    data, st = harness.key_stat(kz, a.root, "life")
    assert st.ephemeralOwner == sb and b"v2" in data, (st, hex(sb))
    assert ca.cmd("SET", "life", "v3", "KEEPTTL") == b"+OK\r\n"
    _, st = harness.key_stat(kz, a.root, "life")
    assert st.ephemeralOwner == sa
    assert 28000 <= int(cb.cmd("PTTL", "life")[1:-2]) <= 30000
    # A key without TTL is persistent.
    assert cb.cmd("SET", "perm", "v") == b"+OK\r\n"
    _, st = harness.key_stat(kz, a.root, "perm")
    assert st is not None and st.ephemeralOwner == 0
    # PERSIST turns a TTL key into a persistent node; EXPIRE back into an
    # ephemeral one of the writer.
    assert cb.cmd("PERSIST", "life") == b":1\r\n"
    _, st = harness.key_stat(kz, a.root, "life")
    assert st.ephemeralOwner == 0
    assert ca.cmd("PEXPIRE", "perm", "30000") == b":1\r\n"
    _, st = harness.key_stat(kz, a.root, "perm")
    assert st.ephemeralOwner == sa
    # Every node lives under <root>/k.
    assert sorted(kz.get_children(a.root + "/k")) == sorted([keyenc.encode("life"), keyenc.encode("perm")])


def test_fencing_token_increases_on_every_acquire(zkresp_pair, kz):
    """DESIGN: the fencing token (czxid) strictly increases for every lock,
    plain SET NX ones included -- also when a lock is re-taken right after
    it expired, before the owner's delete landed."""
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    fences = []

    def take(c, tok, px):
        deadline = time.monotonic() + 5
        # Spin without pausing, so the re-take races the owner's delete.
        while c.cmd("SET", "fk", tok, "NX", "PX", str(px)) != b"+OK\r\n":
            assert time.monotonic() < deadline, "never acquired"
        data, st = harness.key_stat(kz, a.root, "fk")
        assert st is not None and tok.encode() in data
        fences.append((tok, st.czxid))
    take(ca, "t1", 200)      # expires...
    take(ca, "t2", 200)      # ...re-taken on the same sidecar
    take(ca, "t2b", 200)
    take(cb, "t3", 200)      # ...then on the other one
    take(cb, "t3b", 200)
    take(ca, "t4", 30000)
    assert ca.cmd("DEL", "fk") == b":1\r\n"
    take(cb, "t5", 30000)
    assert cb.cmd("DELIFEQ", "fk", "t5") == b":1\r\n"
    take(cb, "t6", 30000)
    tokens = [f for _, f in fences]
    assert all(x < y for x, y in zip(tokens, tokens[1:])), "fencing tokens (czxid) not strictly increasing: %r" % fences
