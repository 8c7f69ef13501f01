"""Fault tier 45: the native lock commands (issue 18: LOCK.ACQUIRE,
LOCK.RELEASE) when ZooKeeper's replies are lost (RELIABILITY 2, 6, 7).

A ZkProxy between a sidecar and ZooKeeper lets a request execute and then
loses its reply with the connection; the session survives.  The sidecar
must settle the outcome before it answers:

- an ACQUIRE whose create was answered to nobody finds its request node by
  its nonce: one request in the queue, one grant, its token;
- a RELEASE whose delete (or delete-and-grant multi) was answered to nobody
  answers 1 once the node is confirmed gone, and the waiter it unblocked is
  granted exactly once;
- a RELEASE through another sidecar whose delete never arrives while the
  holder's session ends (the proxy goes silent at that request) answers 0:
  the node it then finds gone went with that session;
- a sidecar whose reads are held back while a middle conversion (PR ->
  CW) may go does not let a CW request hold beside that conversion's PR;
- a lost release through a sidecar whose record of the hold is out of
  date (released and taken again through another) releases the owner's
  hold, and a failed acquire's request taken up through another sidecar
  loses one count when its sidecar is back, not the hold, which that
  sidecar ends at its lease;
- a waiter whose client goes while its grant's read is out keeps no hold;
- under random connection cuts on every sidecar, with shared and exclusive
  holders on two keys, no two conflicting holds overlap and a hold asked
  after another conflicting one was granted gets a larger token.
"""

import random
import threading
import time

import kazoo.exceptions
import pytest
import redis

import harness
import nativeload
from harness import CREATE_OPS, DELETE_OPS, keyenc
from nativeload import holders, lock_info

SESSION_MS = 10000   # cuts must not cost a session, even on a loaded machine
REQUEST_MS = 3000


def _children(kz, z, key):
    """The request nodes of the lock `key` (name -> ephemeralOwner); none
    once ZooKeeper removed the lock node (a container, removed some time
    after its last request went)."""
    lock = "%s/l/%s" % (z.root.rstrip("/"), keyenc.encode(key))
    out = {}
    try:
        names = kz.get_children(lock)
    except kazoo.exceptions.NoNodeError:
        return out
    for name in names:
        _, st = kz.get("%s/%s" % (lock, name))
        out[name] = st.ephemeralOwner
    return out


@pytest.fixture
def native_pair(make_proxy, make_zkresp, zk):
    """A (through a proxy) and B (direct) on one root."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=SESSION_MS, request_timeout=REQUEST_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS, request_timeout=REQUEST_MS)
    return a, b, proxy


def _in_thread(r, *command):
    """Runs a command on r in a thread of its own: the started thread and
    {"token": its reply} or {"error": its error reply}, once it ends."""
    result = {}

    def run():
        try:
            result["token"] = r.execute_command(*command)
        except redis.ResponseError as e:
            result["error"] = str(e)
    th = threading.Thread(target=run)
    th.start()
    return th, result


def _counts(r, key):
    """The hold counts of the lock `key`'s holders."""
    return [h["count"] for h in lock_info(r, key)["holders"]]


def _count_write_lost_past_timeout(r, proxy, *command):
    """Runs a LOCK.* command whose hold-count write executes with its reply
    lost while ZooKeeper stays out of reach: it answers -TRYAGAIN."""
    proxy.drop_next_reply({"setData"}, hold=True)
    with pytest.raises(redis.ResponseError, match="^TRYAGAIN"):
        r.execute_command(*command)
    assert proxy.wait_dropped(0), "no setData went through the proxy (requests: %r)" % proxy.snapshot()


def _two_releases_free_it(a, ra, rb, kz, key):
    """Owner h holds `key` twice: the first RELEASE leaves one hold, the
    second frees the lock, a third finds nothing."""
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert holders(rb, key) == [("h", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert _children(kz, a, key) == {}
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0


def test_acquire_create_reply_lost_is_found_by_nonce(native_pair, kz):
    """RELIABILITY 2 for native locks: the request's create executed, its
    reply was lost: the sidecar finds the node by its nonce, is granted once,
    and leaves no second request behind."""
    a, b, proxy = native_pair
    sid = a.session_id()
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("nc")
    t0 = ra.execute_command("LOCK.ACQUIRE", key, "warm")   # the lock node exists
    assert ra.execute_command("LOCK.RELEASE", key, "warm") == 1
    proxy.drop_next_reply(CREATE_OPS)
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "o1", "WAIT", "5000")
    assert proxy.wait_dropped(0), "no create went through the proxy (requests: %r)" % proxy.snapshot()
    assert isinstance(t1, int) and t1 > t0, (t0, t1)
    assert a.session_id() == sid, "a lost reply must not cost the session"
    nodes = _children(kz, a, key)
    assert list(nodes.values()) == [sid], "one request of A's session expected: %r" % nodes
    assert holders(rb, key) == [("o1", "EX")]
    assert rb.execute_command("LOCK.ACQUIRE", key, "o2") is None
    assert ra.execute_command("LOCK.RELEASE", key, "o1") == 1
    assert ra.execute_command("LOCK.RELEASE", key, "o1") == 0
    t2 = rb.execute_command("LOCK.ACQUIRE", key, "o2")
    assert isinstance(t2, int) and t2 > t1, (t1, t2)
    assert rb.execute_command("LOCK.RELEASE", key, "o2") == 1


def test_acquire_that_runs_out_of_time_leaves_no_request(native_pair, kz):
    """The create executed, its reply was lost and ZooKeeper stays out of
    reach past the request timeout: ACQUIRE answers -TRYAGAIN, and once
    ZooKeeper is back the request it may have left is deleted, so nobody
    queues behind a request no one would ever release."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("ot")
    ra.execute_command("LOCK.ACQUIRE", key, "warm")    # the lock node exists
    assert ra.execute_command("LOCK.RELEASE", key, "warm") == 1
    proxy.drop_next_reply(CREATE_OPS, hold=True)
    with pytest.raises(redis.ResponseError, match="^TRYAGAIN"):
        ra.execute_command("LOCK.ACQUIRE", key, "o1", "WAIT", "20000")
    assert proxy.wait_dropped(0), "no create went through the proxy (requests: %r)" % proxy.snapshot()
    assert len(_children(kz, a, key)) == 1, "the create landed: its request is in the queue"
    proxy.blackhole(False)
    harness.wait_for(lambda: _children(kz, a, key) == {}, 10.0,
                     what="the request of the ACQUIRE that failed to leave the queue")
    t = rb.execute_command("LOCK.ACQUIRE", key, "o2")
    assert isinstance(t, int), t
    assert rb.execute_command("LOCK.RELEASE", key, "o2") == 1


def test_conversion_that_runs_out_of_time_is_given_up(native_pair, kz):
    """The write asking for an up-conversion executed, its reply was lost
    and ZooKeeper stays out of reach past the request timeout: CONVERT
    answers -TRYAGAIN, and once ZooKeeper is back the conversion is given
    up (the hold keeps its mode), so new requests do not queue behind a
    conversion nobody waits for."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("ct")
    ra.execute_command("LOCK.ACQUIRE", key, "h", "MODE", "PR")
    rb.execute_command("LOCK.ACQUIRE", key, "r", "MODE", "PR")
    proxy.drop_next_reply({"multi", "setData"}, hold=True)
    with pytest.raises(redis.ResponseError, match="^TRYAGAIN"):
        ra.execute_command("LOCK.CONVERT", key, "h", "MODE", "EX", "WAIT", "20000")
    assert proxy.wait_dropped(0), "no write went through the proxy (requests: %r)" % proxy.snapshot()
    proxy.blackhole(False)

    harness.wait_for(lambda: [w for w in lock_info(rb, key)["waiters"] if w["kind"] == "conversion"] == [], 10.0,
                     what="the conversion that failed to be given up")
    assert sorted(holders(rb, key)) == [("h", "PR"), ("r", "PR")]
    t = rb.execute_command("LOCK.ACQUIRE", key, "n", "MODE", "PR")
    assert isinstance(t, int), t
    for owner, r in (("n", rb), ("r", rb), ("h", ra)):
        assert r.execute_command("LOCK.RELEASE", key, owner) == 1


def test_reentrant_acquire_that_runs_out_of_time_counts_nothing(native_pair, kz):
    """A reentrant ACQUIRE's hold-count write executed, its reply was lost
    and ZooKeeper stays out of reach past the request timeout: the ACQUIRE
    answers -TRYAGAIN (not granted), and once ZooKeeper is back the count
    it added is taken off again, so the one RELEASE of the one hold the
    client has frees the lock."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("rt")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h")
    assert isinstance(t1, int), t1
    _count_write_lost_past_timeout(ra, proxy, "LOCK.ACQUIRE", key, "h")
    assert _counts(rb, key) == [2], "the count write landed"
    # asked again while that is not settled (the settling would go on for
    # minutes): it waits no longer than its own time, then -TRYAGAIN
    with pytest.raises(redis.ResponseError, match="^TRYAGAIN"):
        ra.execute_command("LOCK.ACQUIRE", key, "h")
    proxy.blackhole(False)

    harness.wait_for(lambda: _counts(rb, key) == [1], 10.0,
                     what="the hold count the failed ACQUIRE added to be taken off")
    assert holders(rb, key) == [("h", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert _children(kz, a, key) == {}
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0
    t2 = rb.execute_command("LOCK.ACQUIRE", key, "o2")
    assert isinstance(t2, int) and t2 > t1, (t1, t2)
    assert rb.execute_command("LOCK.RELEASE", key, "o2") == 1


def test_reentrant_acquire_asked_again_after_tryagain_counts_once(native_pair, kz):
    """The client of a reentrant ACQUIRE answered -TRYAGAIN (its count
    write landed, its reply lost) asks again as ZooKeeper comes back: the
    first one's count is taken back and the new one counts once, whichever
    reaches ZooKeeper first: two holds, two RELEASEs.  (That the new one
    waits for the settling when it would come first: locks_spec.)"""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("ra")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h")
    _count_write_lost_past_timeout(ra, proxy, "LOCK.ACQUIRE", key, "h")
    proxy.blackhole(False)
    assert ra.execute_command("LOCK.ACQUIRE", key, "h") == t1
    assert _counts(rb, key) == [2]
    _two_releases_free_it(a, ra, rb, kz, key)


def test_release_of_a_reentrant_hold_that_runs_out_of_time_counts_nothing(native_pair, kz):
    """A RELEASE of a hold counted twice: its count write executed, its
    reply was lost and ZooKeeper stays out of reach past the request
    timeout: -TRYAGAIN, and once ZooKeeper is back the count is put back,
    so the client that asks again releases one hold, not two."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("rl")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h")
    assert ra.execute_command("LOCK.ACQUIRE", key, "h") == t1
    _count_write_lost_past_timeout(ra, proxy, "LOCK.RELEASE", key, "h")
    assert _counts(rb, key) == [1], "the count write landed"
    proxy.blackhole(False)

    harness.wait_for(lambda: _counts(rb, key) == [2], 10.0,
                     what="the count the failed RELEASE took off to be put back")
    _two_releases_free_it(a, ra, rb, kz, key)


def test_replies_out_of_order_are_a_connection_loss(native_pair, kz):
    """A server that answers out of order (a known class of server bug):
    the client library drops the connection and ends the requests in flight
    with a runtime inconsistency; for the sidecar each is a connection loss
    whose outcome it settles.  An ACQUIRE sends its create and the listing
    together, so their answers are the pair swapped: it is granted once."""
    a, b, proxy = native_pair
    sid = a.session_id()
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("oo")
    t0 = ra.execute_command("LOCK.ACQUIRE", key, "warm")
    assert ra.execute_command("LOCK.RELEASE", key, "warm") == 1
    proxy.swap_next_replies()
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "o1", "WAIT", "5000")
    assert proxy.counters["swapped"] == 1, "no two replies were swapped: %r" % proxy.counters
    assert isinstance(t1, int) and t1 > t0, (t0, t1)
    assert a.session_id() == sid
    assert list(_children(kz, a, key).values()) == [sid]
    assert holders(rb, key) == [("o1", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "o1") == 1


@pytest.mark.parametrize("waiter_side", ["same", "other"])
def test_release_reply_lost_hands_on_once(native_pair, kz, waiter_side):
    """RELIABILITY 6 for native locks: the release's delete (a plain delete,
    or the multi that also grants the next waiter, when that waiter is on the
    holder's sidecar) executed, its reply was lost: RELEASE answers 1, the
    waiter is granted once, with a larger token, and holds alone."""
    a, b, proxy = native_pair
    ra = a.redis(socket_timeout=20)
    rw = (a if waiter_side == "same" else b).redis(socket_timeout=20)
    rb = b.redis(socket_timeout=20)
    key = harness.unique("rl")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h")
    result = {}

    def wait():
        result["token"] = rw.execute_command("LOCK.ACQUIRE", key, "w", "WAIT", "15000")
    th = threading.Thread(target=wait)
    th.start()
    harness.wait_for(lambda: len(_children(kz, a, key)) == 2, 5.0, what="the waiter's request")
    time.sleep(0.2)          # the holder's sidecar saw it (its release grants from a listing)
    proxy.drop_next_reply(DELETE_OPS)
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert proxy.wait_dropped(0), "no delete went through the proxy (requests: %r)" % proxy.snapshot()
    if waiter_side == "same":
        assert proxy.dropped_op == "multi", "the release on the waiter's sidecar grants in its multi, " \
            "but the lost reply was a %s" % proxy.dropped_op
    th.join(20)
    t2 = result.get("token")
    assert isinstance(t2, int) and t2 > t1, (t1, result)
    assert holders(rb, key) == [("w", "EX")]
    assert len(_children(kz, a, key)) == 1
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0
    assert rw.execute_command("LOCK.RELEASE", key, "w") == 1


def test_release_through_another_sidecar_delete_reply_lost(native_pair, kz):
    """A hold released through a sidecar other than its own (the owner
    string is global): that sidecar reads the lock and deletes the node;
    the delete executed, its reply was lost: RELEASE answers 1, not 0 (the
    node it finds gone is the one it deleted)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("xr")
    t1 = rb.execute_command("LOCK.ACQUIRE", key, "h")
    proxy.drop_next_reply(DELETE_OPS)
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert proxy.wait_dropped(0), "no delete went through the proxy (requests: %r)" % proxy.snapshot()
    assert _children(kz, a, key) == {}
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0
    t2 = ra.execute_command("LOCK.ACQUIRE", key, "w")
    assert isinstance(t2, int) and t2 > t1, (t1, t2)
    assert ra.execute_command("LOCK.RELEASE", key, "w") == 1


@pytest.mark.parametrize("back_at", [2.4, 3.6], ids=["near_the_lease_end", "past_the_lease_end"])
def test_release_reply_lost_until_the_lease_ends(native_pair, kz, back_at):
    """The holder's sidecar's delete executed 1 s into a 3 s lease, and its
    reply was lost while ZooKeeper stayed out of reach until `back_at` s:
    within a second of the lease's end, or past it.  That sidecar ends its
    own holds' leases itself, and had not (its timer found the node gone, or
    had not fired): RELEASE answers 1, not 0 (seen under leader changes,
    test_49's workload)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("rle")
    t0 = time.monotonic()
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "3000")
    time.sleep(max(0.0, t0 + 1.0 - time.monotonic()))
    proxy.drop_next_reply(DELETE_OPS, hold=True)
    th, result = _in_thread(ra, "LOCK.RELEASE", key, "h")
    assert proxy.wait_dropped(5), "no delete went through the proxy (requests: %r)" % proxy.snapshot()
    time.sleep(max(0.0, t0 + back_at - time.monotonic()))
    proxy.blackhole(False)
    th.join(20)
    assert result == {"token": 1}, result
    assert _children(kz, a, key) == {}
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0
    t2 = rb.execute_command("LOCK.ACQUIRE", key, "w")
    assert isinstance(t2, int) and t2 > t1, (t1, t2)
    assert rb.execute_command("LOCK.RELEASE", key, "w") == 1


def test_lost_release_through_a_stale_record_releases_the_owners_newer_hold(native_pair, kz):
    """h takes the lock through A, lets it go through B and takes it again
    through B: A's record of the first hold is out of date (B's release
    bumped A's session guard).  A RELEASE through A then sends the delete
    of the first node, gone already, and loses its reply: A must not take
    the node it finds gone for its own release (the old code answered 1 and
    left h's newer hold); it reads, and releases the hold h has."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("sr")
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", key, "h"), int)
    assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h"), int)
    proxy.drop_next_reply(DELETE_OPS)
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert proxy.wait_dropped(0), "no delete went through the proxy (requests: %r)" % proxy.snapshot()
    assert holders(rb, key) == []
    assert _children(kz, a, key) == {}
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "w"), int)


def test_release_through_another_sidecar_lost_as_the_holders_session_ends(make_proxy, make_zkresp, zk, kz):
    """A hold released through a sidecar other than its own, whose delete
    never reaches ZooKeeper (its connection goes silent from that request
    on) while the holder's sidecar, frozen, loses its session: once the
    releasing sidecar is through again, the node is gone, but with the
    holder's session (its session guard went too), maybe before the release
    was asked.  RELEASE answers 0, not 1."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=SESSION_MS, request_timeout=8000)
    d = make_zkresp(root=a.root, session_timeout=1000, request_timeout=500)
    ra, rd = a.redis(socket_timeout=30), d.redis(socket_timeout=20)
    key = harness.unique("xe")
    assert isinstance(rd.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    rd.close()
    node, = _children(kz, a, key).keys()
    proxy.blackhole_at_next(DELETE_OPS | {"multi"})
    d.stop()
    try:
        out = {}
        t = threading.Thread(target=lambda: out.update(r=ra.execute_command("LOCK.RELEASE", key, "h")))
        t.start()
        assert proxy.wait_holed(5), "the release sent no delete (requests: %r)" % proxy.snapshot()
        harness.wait_for(lambda: _children(kz, a, key) == {}, 10, 0.05, "the holder's session to end")
        proxy.blackhole(False)
        t.join(20)
    finally:
        d.cont()
    assert out.get("r") == 0, out
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0


def test_middle_conversion_not_recorded_keeps_a_clashing_request_waiting(native_pair, kz):
    """x (through A) and y (through B) hold PR; x asks PR -> CW, which
    waits for y's PR, and z asks CW through B behind it.  y converts down
    to NL: x's conversion may go, and z with it (CW and CW are compatible),
    but z only once x's CW is recorded, for x holds PR until then, and PR
    and CW clash.  A's reads are held at the proxy meanwhile, so B decides
    first: z must wait (the old grant rule let it hold CW beside x's PR)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=30)
    key = harness.unique("mc")
    tokens = [ra.execute_command("LOCK.ACQUIRE", key, "x", "MODE", "PR"),
              rb.execute_command("LOCK.ACQUIRE", key, "y", "MODE", "PR")]
    assert all(isinstance(t, int) for t in tokens), tokens
    tx, rx = _in_thread(a.redis(socket_timeout=30), "LOCK.CONVERT", key, "x", "MODE", "CW", "WAIT", "20000")
    harness.wait_for(lambda: ("x", "CW", "conversion") in nativeload.waiting(rb, key), 10, 0.05,
                     "x's conversion to wait")
    tz, rz = _in_thread(b.redis(socket_timeout=30), "LOCK.ACQUIRE", key, "z", "MODE", "CW", "WAIT", "20000")
    harness.wait_for(lambda: ("z", "CW", "new") in nativeload.waiting(rb, key), 10, 0.05, "z to wait")
    lock = "%s/l/%s" % (a.root.rstrip("/"), keyenc.encode(key))
    proxy.hold_next("getData", lock)
    try:
        assert isinstance(rb.execute_command("LOCK.CONVERT", key, "y", "MODE", "NL"), int)
        assert proxy.wait_held(10), "A read nothing after y's conversion (requests: %r)" % proxy.snapshot()
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            held = dict(holders(rb, key))
            assert not ("z" in held and held.get("x") == "PR"), held
            time.sleep(0.05)
    finally:
        proxy.release_hold()
    tx.join(20)
    tz.join(20)
    assert isinstance(rx.get("token"), int), rx
    assert isinstance(rz.get("token"), int), rz
    assert sorted(holders(rb, key)) == [("x", "CW"), ("y", "NL"), ("z", "CW")]
    assert rz["token"] > max(tokens)  # above both PR holds it clashes with


def test_failed_acquire_taken_up_through_another_sidecar_keeps_the_hold(native_pair, kz):
    """o waits through A (WAIT 2 s); A goes silent (its session lives on)
    and h's release through B grants o's request, which A does not learn:
    its command answers null (or -TRYAGAIN) when its WAIT runs out, and o asks again
    through B, which finds the request granted: a reentrant hold (count 2).
    When A is through again it takes its failed command's request out: one
    count of it, not o's hold (the old code deleted the node, and x got the
    lock while o held it)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("tu")
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    tw, rw = _in_thread(ra, "LOCK.ACQUIRE", key, "o", "PX", "60000", "WAIT", "2000")
    harness.wait_for(lambda: ("o", "EX", "new") in nativeload.waiting(rb, key), 10, 0.05, "o to wait")
    proxy.blackhole(True)
    try:
        assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
        tw.join(10)
        # not granted: null, or -TRYAGAIN when a read of its was still out
        assert ("token" in rw and rw["token"] is None) or rw.get("error", "").startswith("TRYAGAIN"), rw
        t = rb.execute_command("LOCK.ACQUIRE", key, "o", "PX", "60000")
        assert isinstance(t, int), t
        assert _counts(rb, key) == [2], lock_info(rb, key)
    finally:
        proxy.blackhole(False)
    time.sleep(2)  # A is through again: its leave went out
    assert holders(rb, key) == [("o", "EX")]
    assert _counts(rb, key) == [1]
    assert rb.execute_command("LOCK.ACQUIRE", key, "x") is None
    assert rb.execute_command("LOCK.RELEASE", key, "o") == 1
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "x"), int)


def test_failed_acquire_taken_up_through_another_sidecar_ends_at_its_lease(native_pair):
    """As above, with leases of 3 s and no release: once A took its failed
    command's count out, A keeps o's hold and ends it at its lease, and x,
    waiting through B, is granted then with a larger token (the old code
    kept no record of the hold on A, whose session owns it: nobody ended
    it, and x waited for as long as A's session lasted)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=40)
    key = harness.unique("tl")
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    tw, rw = _in_thread(ra, "LOCK.ACQUIRE", key, "o", "PX", "3000", "WAIT", "2000")
    harness.wait_for(lambda: ("o", "EX", "new") in nativeload.waiting(rb, key), 10, 0.05, "o to wait")
    proxy.blackhole(True)
    try:
        assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
        tw.join(10)
        assert ("token" in rw and rw["token"] is None) or rw.get("error", "").startswith("TRYAGAIN"), rw
        t = rb.execute_command("LOCK.ACQUIRE", key, "o", "PX", "3000")
        assert isinstance(t, int), t
    finally:
        proxy.blackhole(False)
    harness.wait_for(lambda: _counts(rb, key) == [1], 10, 0.05, "A to take its count out")
    tx = rb.execute_command("LOCK.ACQUIRE", key, "x", "PX", "60000", "WAIT", "30000")
    assert isinstance(tx, int) and tx > t, (tx, t)
    assert holders(rb, key) == [("x", "EX")]
    assert rb.execute_command("LOCK.RELEASE", key, "o") == 0


def test_reentrant_hold_count_reply_lost(native_pair, kz):
    """The hold count is a write of the request node: a reentrant ACQUIRE
    whose write executed with its reply lost answers the hold's token (once
    counted), and a RELEASE whose count write was lost counts down once, so
    two ACQUIREs take exactly two RELEASEs."""
    a, b, proxy = native_pair
    ra = a.redis(socket_timeout=20)
    key = harness.unique("re")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h")
    proxy.drop_next_reply({"setData"})
    assert ra.execute_command("LOCK.ACQUIRE", key, "h") == t1
    assert proxy.wait_dropped(0), "no setData went through the proxy (requests: %r)" % proxy.snapshot()
    proxy.drop_next_reply({"setData"})
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert proxy.wait_dropped(0), "no setData went through the proxy (requests: %r)" % proxy.snapshot()
    assert len(_children(kz, a, key)) == 1, "one hold left after one of two releases"
    assert holders(b.redis(socket_timeout=20), key) == [("h", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1
    assert _children(kz, a, key) == {}
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 0


def test_conversion_request_reply_lost(native_pair, kz):
    """An up-conversion that must wait is a write of the grant table (and a
    touch of the holder's node): when it executed with its reply lost, the
    CONVERT goes on waiting for it instead of answering that a conversion
    already waits, and is granted when the other reader leaves."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("cv")
    t1 = ra.execute_command("LOCK.ACQUIRE", key, "h", "MODE", "PR")
    rb.execute_command("LOCK.ACQUIRE", key, "r", "MODE", "PR")
    proxy.drop_next_reply({"multi", "setData"})
    th, result = _in_thread(ra, "LOCK.CONVERT", key, "h", "MODE", "EX", "WAIT", "15000")
    assert proxy.wait_dropped(10), "no write went through the proxy (requests: %r)" % proxy.snapshot()
    time.sleep(0.5)
    assert th.is_alive(), "CONVERT answered while the other reader held: %r" % result
    assert rb.execute_command("LOCK.RELEASE", key, "r") == 1
    th.join(20)
    assert isinstance(result.get("token"), int) and result["token"] > t1, result
    assert holders(rb, key) == [("h", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "h") == 1


def test_waiter_looks_again_when_its_target_converted_down_before_its_watch(native_pair):
    """A reader on A reads the table while x holds EX (through B) and
    watches x's node; x's down-conversion to PR lands between that read and
    the watch (the proxy holds A's getData back meanwhile), so no event
    will come.  x's node shows a write after the table the reader chose
    on: it looks again and is granted beside x's PR, not left waiting for
    x's release or its WAIT (then it would answer null)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=20), b.redis(socket_timeout=20)
    key = harness.unique("dc")
    tx = rb.execute_command("LOCK.ACQUIRE", key, "x", "MODE", "EX")
    proxy.hold_next_watch("/l/%s/EX." % keyenc.encode(key))
    th, result = _in_thread(ra, "LOCK.ACQUIRE", key, "w", "MODE", "PR", "WAIT", "8000")
    try:
        assert proxy.wait_held(10), "A never watched x's node (requests: %r)" % proxy.snapshot()
        assert rb.execute_command("LOCK.CONVERT", key, "x", "MODE", "PR") == tx
    finally:
        proxy.release_hold()
    th.join(20)
    assert isinstance(result.get("token"), int) and result["token"] > tx, result
    assert sorted(holders(rb, key)) == [("w", "PR"), ("x", "PR")]
    assert ra.execute_command("LOCK.RELEASE", key, "w") == 1
    assert rb.execute_command("LOCK.RELEASE", key, "x") == 1


def test_contention_with_random_connection_cuts(make_proxy, make_zkresp, zk):
    """Three sidecars, each behind a proxy that delays replies and cuts its
    ZooKeeper connection at random moments; exclusive and shared holders on
    two keys, some of them acquiring again (reentrant) and releasing twice,
    some converting up or down (tests/lib/nativeload.py): every answer is a token, a null (WAIT ran
    out) or -TRYAGAIN; no conflicting holds overlap; tokens follow grant
    order; a release of a hold inside its lease answers 1."""
    proxies = [make_proxy(zk) for _ in range(3)]
    first = make_zkresp(zk_target=proxies[0], session_timeout=SESSION_MS, request_timeout=REQUEST_MS)
    sides = [first] + [make_zkresp(zk_target=p, root=first.root, session_timeout=SESSION_MS,
                                   request_timeout=REQUEST_MS) for p in proxies[1:]]
    sessions = [z.session_id() for z in sides]
    for p in proxies:
        p.delay(3)

    def chaos(stop):
        rnd = random.Random(11)
        while time.monotonic() < stop:
            time.sleep(rnd.uniform(0.2, 0.5))
            rnd.choice(proxies).cut()

    run = nativeload.contend(sides, [harness.unique("cut1"), harness.unique("cut2")], 8.0, chaos)
    nativeload.check(run, sides, sessions)
    assert sum(p.counters["cuts"] for p in proxies) >= 8


def test_waiter_whose_client_goes_while_its_grant_is_read_keeps_no_hold(native_pair):
    """w waits through A; h's release through B grants w's request in its
    multi, and A's read of the table (after the watch event) is held at the
    proxy while w's client disconnects.  When the read is answered, A lets
    the grant go: nobody reads its token (the old code kept the hold for its
    whole lease, 60 s here)."""
    a, b, proxy = native_pair
    rb = b.redis(socket_timeout=20)
    key = harness.unique("cg")
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000"), int)
    cw = a.client()
    cw.send_cmd("LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "30000")
    harness.wait_for(lambda: ("w", "EX", "new") in nativeload.waiting(rb, key), 10, 0.05, "w to wait")
    lock = "%s/l/%s" % (a.root.rstrip("/"), keyenc.encode(key))
    proxy.hold_next("getData", lock)
    try:
        assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
        assert proxy.wait_held(10), "A read nothing after h's release (requests: %r)" % proxy.snapshot()
        cw.close()       # w's client goes, its grant's read still out
        time.sleep(1.5)  # (the sidecar looks for a closed peer once a second)
    finally:
        proxy.release_hold()
    harness.wait_for(lambda: holders(rb, key) == [], 10, 0.05, "w's grant to be let go")
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "x", "WAIT", "0"), int)


def test_waiter_rides_out_a_disconnect_shorter_than_its_wait(native_pair):
    """w waits through A behind h, a hold of A's own; A's connection to
    ZooKeeper is cut and refused for longer than the request timeout (its
    session lives on) while h is released through B.  w keeps its place
    and is granted once A is back, with a larger token: a waiter's look due
    while ZooKeeper is away waits for it (the old code's read sat in the
    queue of unsent requests and answered -TRYAGAIN at the request
    timeout, the request taken out of its place)."""
    a, b, proxy = native_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=20)
    key = harness.unique("ro")
    t0 = ra.execute_command("LOCK.ACQUIRE", key, "h", "PX", "60000")
    assert isinstance(t0, int), t0
    tw, rw = _in_thread(ra, "LOCK.ACQUIRE", key, "w", "PX", "60000", "WAIT", "25000")
    harness.wait_for(lambda: ("w", "EX", "new") in nativeload.waiting(rb, key), 10, 0.02, "w to wait")
    proxy.refuse(True)
    proxy.cut()
    try:
        assert rb.execute_command("LOCK.RELEASE", key, "h") == 1
        time.sleep(REQUEST_MS / 1000.0 + 1.5)
        assert tw.is_alive(), "w answered while A was cut off: %r" % rw
    finally:
        proxy.refuse(False)
    tw.join(20)
    assert isinstance(rw.get("token"), int) and rw["token"] > t0, rw
    assert holders(rb, key) == [("w", "EX")]
    assert ra.execute_command("LOCK.RELEASE", key, "w") == 1
