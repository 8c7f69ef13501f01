"""Fault tier 40: operations of unknown outcome (RELIABILITY 2, 6, 7).

Connection loss is injected by a ZkProxy between zkresp and ZooKeeper: the
request reaches the server and executes, its reply is lost and the
connection cut.  zkresp must resolve the outcome before answering: OK only
for a node confirmed ours (token and ephemeralOwner), never two OKs, never
deleting a node somebody else created meanwhile.
"""

import random
import threading
import time
import uuid

import pytest

import harness
from harness import CREATE_OPS, DELETE_OPS, LockHistory


def _owner(kz, root, key):
    data, st = harness.key_stat(kz, root, key)
    return (None, None) if st is None else (data, st.ephemeralOwner)


@pytest.fixture
def via_proxy(make_proxy, make_zkresp, zk):
    """A (through a proxy) and B (direct) on one root."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=4000, request_timeout=3000)
    b = make_zkresp(root=a.root)
    return a, b, proxy


def test_create_reply_lost_is_resolved_as_ours(via_proxy, kz):
    """RELIABILITY 2: the create executed, its reply was lost: OK, and only
    because the node is ours."""
    a, b, proxy = via_proxy
    sid = a.session_id()
    ca = a.client()
    proxy.drop_next_reply(CREATE_OPS)
    r = ca.cmd("SET", "lk", "tok-a", "NX", "PX", "30000", timeout=15)
    assert proxy.wait_dropped(0), "zkresp sent no create for SET NX PX (requests: %r)" % proxy.snapshot()
    assert r == b"+OK\r\n", "the create succeeded but zkresp answered %r" % r
    data, owner = _owner(kz, a.root, "lk")
    assert owner == sid and b"tok-a" in data, (owner, hex(sid), data)
    assert a.session_id() == sid, "a connection loss must not cost the session"
    assert b.client().cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"$-1\r\n"
    assert ca.cmd("GET", "lk") == b"$5\r\ntok-a\r\n"
    time.sleep(1.0)     # no late clean-up of a node that was confirmed
    assert _owner(kz, a.root, "lk")[1] == sid


def test_create_reply_lost_while_another_tries(via_proxy, kz):
    """While A is cut off with its create executed but unanswered, B is
    refused; A then answers OK: one OK in all."""
    a, b, proxy = via_proxy
    sid = a.session_id()
    ca, cb = a.client(), b.client()
    proxy.drop_next_reply(CREATE_OPS, hold=True)
    ca.send_cmd("SET", "lk", "tok-a", "NX", "PX", "30000")
    assert proxy.wait_dropped(5), "zkresp sent no create"
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"$-1\r\n"
    proxy.blackhole(False)
    r = ca.read_reply(timeout=15)
    assert r == b"+OK\r\n", r
    data, owner = _owner(kz, a.root, "lk")
    assert owner == sid and b"tok-a" in data


def test_create_reply_lost_then_node_deleted_by_other(via_proxy, kz):
    """A's create executed, then B deleted the node before A could look:
    A must not claim a node it cannot confirm.  Whatever A answers, the
    state agrees with it and there is at most one OK."""
    a, b, proxy = via_proxy
    sid = a.session_id()
    ca, cb = a.client(), b.client()
    proxy.drop_next_reply(CREATE_OPS, hold=True)
    ca.send_cmd("SET", "lk", "tok-a", "NX", "PX", "30000")
    assert proxy.wait_dropped(5)
    assert cb.cmd("DEL", "lk") == b":1\r\n"
    proxy.blackhole(False)
    r = ca.read_reply(timeout=15)
    time.sleep(0.5)
    data, owner = _owner(kz, a.root, "lk")
    if r == b"+OK\r\n":
        # Only if it re-created the node itself.
        assert owner == sid and b"tok-a" in data, (owner, data)
        assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"$-1\r\n"
    else:
        assert r in (b"$-1\r\n",) or r.startswith(b"-TRYAGAIN"), r
        assert owner is None, "A answered %r but left a node: %r owner %x" % (r, data, owner)
        assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"+OK\r\n"


def test_create_with_zookeeper_killed_after_request(make_zk, make_proxy, kz_factory, make_zkresp):
    """RELIABILITY 2, second form: the ZooKeeper server is killed right
    after the create reached it (the reply is lost with the connection),
    then restarted.  OK only with the node confirmed ours; never two OKs."""
    zk2 = make_zk()
    proxy = make_proxy(zk2)
    a = make_zkresp(zk_target=proxy, session_timeout=8000, request_timeout=6000)
    sid = a.session_id()
    ca = a.client()
    proxy.delay(400)                 # the reply is still in the proxy when...
    ca.send_cmd("SET", "lk", "tok-a", "NX", "PX", "60000")
    time.sleep(0.15)
    zk2.kill9()                      # ...the server dies
    proxy.cut()
    proxy.delay(0)
    zk2.start()
    r = ca.read_reply(timeout=20)
    kz2 = kz_factory(zk2)
    a.wait_ready(15)
    b = make_zkresp(zk_target=zk2, root=a.root, session_timeout=8000)
    data, owner = _owner(kz2, a.root, "lk")
    rb = b.client().cmd("SET", "lk", "tok-b", "NX", "PX", "60000")
    if r == b"+OK\r\n":
        assert owner == sid and b"tok-a" in data, (owner, hex(sid), data)
        assert rb == b"$-1\r\n", "two OKs for one lock"
    else:
        assert r == b"$-1\r\n" or r.startswith(b"-TRYAGAIN"), r
        # An unconfirmed create that turns out to be ours must be deleted.
        harness.wait_for(lambda: _owner(kz2, a.root, "lk")[1] != sid, 10,
                         what="zkresp to delete a create it had answered %r to" % r)


@pytest.mark.parametrize("release", [["DELIFEQ", "lk", "tok-a"], ["DELEX", "lk", "IFEQ", "tok-a"]],
                         ids=["DELIFEQ", "DELEX"])
def test_compare_and_delete_lost_while_other_recreates(via_proxy, kz, release):
    """RELIABILITY 6: A's compare-and-delete executed, its reply was lost;
    B re-created the lock before A could reconnect.  A must never delete
    B's node (no blind retry)."""
    a, b, proxy = via_proxy
    ca, cb = a.client(), b.client()
    sb = b.session_id()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "30000") == b"+OK\r\n"
    proxy.drop_next_reply(DELETE_OPS, hold=True)
    ca.send_cmd(*release)
    if not proxy.wait_dropped(5):
        raise AssertionError("%s sent no delete/multi to ZooKeeper (reply %r)" % (release[0], ca.read_reply(5)))
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"+OK\r\n"
    _, st_b = harness.key_stat(kz, a.root, "lk")
    proxy.blackhole(False)
    r = ca.read_reply(timeout=15)
    assert r in (b":1\r\n", b":0\r\n"), "%s answered %r" % (release[0], r)
    time.sleep(1.0)
    data, st = harness.key_stat(kz, a.root, "lk")
    assert st is not None, "A deleted the lock B re-created (A answered %r)" % r
    assert st.czxid == st_b.czxid and st.ephemeralOwner == sb and b"tok-b" in data
    assert cb.cmd("GET", "lk") == b"$5\r\ntok-b\r\n"


# redis-py's Lock.release script
PY_RELEASE = ("local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end "
              "redis.call('del', KEYS[1]) return 1")


@pytest.mark.parametrize("release", [["DEL", "lk"], ["DELIFEQ", "lk", "tok-a"], ["EVAL", PY_RELEASE, "1", "lk", "tok-a"]],
                         ids=["DEL", "DELIFEQ", "redis-py"])
@pytest.mark.parametrize("meanwhile", ["ttl-ending", "guard-moved"])
def test_own_release_lost_but_applied_answers_1(via_proxy, kz, release, meanwhile):
    """A's release of its own lock applied and its reply was lost, and the
    node alone cannot tell A's delete from another remover's: the lock's
    TTL ends within a second (its expiry removes it too), or B removed
    another key of A's meanwhile (A's session guard moved).  The mark A's
    multi bumped still holds the nonce the multi wrote: A answers 1 (it
    ran the command again and answered 0, a release "not owned" that
    released)."""
    a, b, proxy = via_proxy
    ca, cb = a.client(), b.client()
    px = "3000" if meanwhile == "ttl-ending" else "30000"
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", px) == b"+OK\r\n"
    assert ca.cmd("SET", "other", "x", "PX", "30000") == b"+OK\r\n"
    if meanwhile == "ttl-ending":
        time.sleep(2.2)     # 0.8 s of the TTL left
    proxy.drop_next_reply(DELETE_OPS, hold=True)
    ca.send_cmd(*release)
    if not proxy.wait_dropped(5):
        raise AssertionError("%s sent no delete/multi to ZooKeeper (reply %r)" % (release[0], ca.read_reply(5)))
    if meanwhile == "guard-moved":
        assert cb.cmd("DEL", "other") == b":1\r\n"
    proxy.blackhole(False)
    assert ca.read_reply(timeout=15) == b":1\r\n"
    assert harness.key_stat(kz, a.root, "lk")[1] is None
    assert ca.cmd("DEL", "lk") == b":0\r\n"


def test_compare_and_delete_through_another_sidecar_lost_as_the_holders_session_ends(make_proxy, make_zkresp, zk,
                                                                                     kz):
    """A lock held through D is released through A (the token is global);
    A's delete never reaches ZooKeeper (its connection goes silent from
    that request on) while D, frozen, loses its session.  Once A is
    through again the node is gone, but with D's session (its session guard
    went too), maybe before the release was asked: A runs the command again
    and answers 0, not 1."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=8000)
    d = make_zkresp(root=a.root, session_timeout=1000, request_timeout=500)
    assert d.client().cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    ca = a.client(timeout=30)
    proxy.blackhole_at_next(DELETE_OPS)
    d.stop()
    try:
        ca.send_cmd("DELIFEQ", "lk", "tok")
        assert proxy.wait_holed(5), "A sent no delete (requests: %r)" % proxy.snapshot()
        harness.wait_for(lambda: harness.key_stat(kz, a.root, "lk")[1] is None, 10, 0.05,
                         "D's session to end")
        proxy.blackhole(False)
        r = ca.read_reply(timeout=20)
    finally:
        d.cont()
    assert r == b":0\r\n", "DELIFEQ answered %r" % r


def test_wrong_token_release_and_renewal(zkresp_pair, kz):
    """RELIABILITY 7: a release or renewal with the wrong token answers 0
    (or nil for SET IFEQ) and leaves the node untouched."""
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "30000") == b"+OK\r\n"
    data0, st0 = harness.key_stat(kz, a.root, "lk")
    for c in (ca, cb):
        assert c.cmd("DELIFEQ", "lk", "tok-x") == b":0\r\n"
        assert c.cmd("DELEX", "lk", "IFEQ", "tok-x") == b":0\r\n"
        assert c.cmd("SET", "lk", "tok-x", "IFEQ", "tok-y", "PX", "90000") == b"$-1\r\n"
        assert c.cmd("SET", "lk", "tok-a", "IFEQ", "TOK-A", "PX", "90000") == b"$-1\r\n"
    data1, st1 = harness.key_stat(kz, a.root, "lk")
    assert (data1, st1.czxid, st1.mzxid, st1.version, st1.ephemeralOwner) == \
        (data0, st0.czxid, st0.mzxid, st0.version, st0.ephemeralOwner)
    pttl = int(cb.cmd("PTTL", "lk")[1:-2])
    assert pttl <= 30000, "a refused renewal extended the lock: PTTL %d" % pttl
    # The right token works, from the other sidecar too.
    assert cb.cmd("SET", "lk", "tok-a", "IFEQ", "tok-a", "PX", "90000") == b"+OK\r\n"
    assert 88000 <= int(ca.cmd("PTTL", "lk")[1:-2]) <= 90000
    assert ca.cmd("DELIFEQ", "lk", "tok-a") == b":1\r\n"
    assert harness.key_stat(kz, a.root, "lk") == (None, None)


def test_contention_with_random_connection_cuts(make_proxy, make_zkresp, zk, kz):
    """Two sidecars, each behind a proxy that cuts its ZooKeeper connection
    at random moments, contend for two locks: zero overlaps, fencing tokens
    strictly increasing."""
    pa, pb = make_proxy(zk), make_proxy(zk)
    a = make_zkresp(zk_target=pa, session_timeout=4000, request_timeout=3000)
    b = make_zkresp(zk_target=pb, root=a.root, session_timeout=4000, request_timeout=3000)
    pa.delay(3)
    pb.delay(3)
    hist, errors = LockHistory(), []
    duration, px = 6.0, 2000
    stop = time.monotonic() + duration
    sides = (a, b)

    def worker(side, n):
        r = sides[side].redis(socket_timeout=20)
        holder = "%s-%d" % ("AB"[side], n)
        rnd = random.Random(side * 100 + n)
        try:
            while time.monotonic() < stop:
                key = rnd.choice(["c1", "c2"])
                tok = "%s-%s" % (holder, uuid.uuid4().hex[:8])
                t_sent = time.monotonic()
                try:
                    ok = r.set(key, tok, nx=True, px=px)
                except Exception as e:  # -TRYAGAIN is a legitimate answer here
                    if "TRYAGAIN" not in str(e):
                        errors.append("%s SET: %r" % (holder, e))
                    continue
                t_ok = time.monotonic()
                if not ok:
                    time.sleep(rnd.uniform(0.002, 0.02))
                    continue
                data, st = harness.key_stat(kz, a.root, key)
                fence = st.czxid if st is not None and tok.encode() in data else None
                if fence is None:
                    hist.violation("%s: right after OK the node of %r does not carry its token" % (holder, key))
                h = hist.acquired(key, holder, tok, t_ok, fence=fence, expires_at=t_sent + px / 1000.0)
                time.sleep(rnd.uniform(0, 0.02))
                hist.released(h, time.monotonic())
                try:
                    r.execute_command("DELIFEQ", key, tok)
                except Exception as e:
                    if "TRYAGAIN" not in str(e):
                        errors.append("%s DELIFEQ: %r" % (holder, e))
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %r" % (holder, e))

    def chaos():
        rnd = random.Random(7)
        while time.monotonic() < stop:
            time.sleep(rnd.uniform(0.2, 0.6))
            rnd.choice((pa, pb)).cut()

    ts = [threading.Thread(target=worker, args=(s, n)) for s in (0, 1) for n in range(3)]
    ts.append(threading.Thread(target=chaos))
    for t in ts:
        t.start()
    for t in ts:
        t.join(duration + 60)
    assert not errors, errors[:5]
    hist.check()
    assert pa.counters["cuts"] + pb.counters["cuts"] >= 5
    assert hist.count() >= 10, "too few acquisitions under cuts: %d" % hist.count()


def test_request_timeout_bounds_slow_replies(make_proxy, make_zkresp, zk, kz):
    """Issue 14 item 8: --zk-request-timeout bounds how long a command waits
    for ZooKeeper, also once its request is sent: with every reply held
    back 3 s (no disconnect) and a 1 s request timeout, a read and a lock
    acquisition answer TRYAGAIN within the timeout.  The acquisition's
    create did reach ZooKeeper after its client was told TRYAGAIN: the
    sidecar removes it, so nobody holds the lock.  A renewal of a lock the
    sidecar holds waits instead, inside the session's lease (item 7), and
    answers 1."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=1000)
    b = make_zkresp(root=a.root)
    c = a.client()
    assert c.cmd("SET", "held", "tok-h", "NX", "PX", "30000") == b"+OK\r\n"
    assert c.cmd("SET", "warm", "v") == b"+OK\r\n"
    proxy.delay(3000)
    try:
        for args in (("GET", "warm"), ("SET", "lk", "tok-a", "NX", "PX", "30000")):
            t0 = time.monotonic()
            r = c.cmd(*args, timeout=15)
            took = time.monotonic() - t0
            assert r == b"-TRYAGAIN ZooKeeper unavailable\r\n", (args, r)
            assert took < 1.0 + 0.5, "%s answered after %.2f s (zk-request-timeout 1000)" % (args[0], took)
        t0 = time.monotonic()
        assert c.cmd("PEXPIRE", "held", "30000", timeout=15) == b":1\r\n"
        assert time.monotonic() - t0 >= 2.5
    finally:
        proxy.delay(0)
    # The unconfirmed create landed; it is found and removed.
    harness.wait_for(lambda: harness.key_stat(kz, a.root, "lk")[1] is None, 20, 0.1,
                     "the unconfirmed lock to be removed")
    assert b.client().cmd("SET", "lk", "tok-b", "NX", "PX", "30000") == b"+OK\r\n"
    # (the proxy still delivers the replies it held back before new ones)
    harness.wait_for(lambda: c.cmd("GET", "held") == b"$5\r\ntok-h\r\n", 10, 0.2, "GET of the renewed lock")
