"""Fault tier 65: pub/sub across sidecars survives ZooKeeper connection and
session loss (issue 4: "Interest and watches are restored after a reconnect
or a new session").

Sidecar B reaches ZooKeeper through a ZkProxy; A directly.  Subscribers sit
on B (RESP2 channel and pattern subscribers, a RESP3 one).  Faults:

- a partition longer than the session timeout: B's session is lost and
  renewed (a new zk_session_id in INFO zookeeper); B's client connections
  and their subscriptions stay, and once recovered they receive A's
  publishes again, exactly counted (the old session's interest is gone, the
  new one registered), and B's publishes reach A's subscribers;
- a Redisson waiter on B whose unlock message was published while B was
  partitioned: the lock channel's missed message is made up (the lock is
  re-checked) and the waiter's retry acquires;
- a short cut of B's ZooKeeper connection (same session): delivery goes on;
- the lock channel's make-up is for a free lock only: no message while the
  lock is still held;
- the publisher A's own session renewal: its view of B's subscribers is
  rebuilt (one left, others joined meanwhile);
- a sidecar killed (-9): its interest goes with its session, A stops
  writing, its inbox is cleaned once a sidecar starts again on the root;
- a freshly started sidecar 15 ms from ZooKeeper: its first subscribers
  get A's first PUBLISH and script publish;
- a lock channel's waiter that leaves while B is partitioned past its
  session: B's doorbell for it (persistent) goes too;
- a SUBSCRIBE whose confirmation waits behind a DEBUG SLEEP while B's
  session is renewed: confirmed all the same, and delivered to.
"""

import os
import socket
import sys
import time

import harness
import keyenc
from harness import wait_for
from resp import decode_one, encode
from pubsub_helpers import payloads, subscribe, wait_publish_count

# Redisson's lock scripts, sent raw, as tier 24 sends them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from test_24_redisson import NULL, Redisson, acquire, unlock, integer  # noqa: E402

SESSION_MS = 2000


def wait_flowing(ca, ch, subs, timeout=15.0):
    """Publishes "probe-flow" through ca until each subscriber has received
    one: delivery to them works again (whatever was published while it did
    not may be lost: pub/sub is at-most-once)."""
    pending = dict(subs)
    deadline = time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, "no delivery to %s within %.0fs" % (sorted(pending), timeout)
        ca.cmd("PUBLISH", ch, "probe-flow")
        for name, s in list(pending.items()):
            end = time.monotonic() + 0.2
            while name in pending and time.monotonic() < end:
                try:
                    v = decode_one(s.read_reply(timeout=max(0.01, end - time.monotonic())))
                except socket.timeout:
                    break
                if v[-1] == b"probe-flow":
                    del pending[name]


def _via_proxy(make_proxy, make_zkresp, zk):
    proxy = make_proxy(zk)
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(zk_target=proxy, root=a.root, session_timeout=SESSION_MS, request_timeout=1000)
    return a, b, proxy


def _lose_session(b, proxy, meanwhile=None):
    """Partitions B from ZooKeeper past its session timeout (calling
    meanwhile() once it is cut off), heals, and waits for B to run on a new
    session.  Returns (old, new) session ids."""
    sid = b.session_id()
    proxy.blackhole(True)
    if meanwhile:
        meanwhile()
    time.sleep(SESSION_MS / 1000.0 + 1.5)
    proxy.blackhole(False)
    wait_for(lambda: b.zk_state() == "connected" and b.session_id() != sid, 20, 0.1,
             "B to run on a new ZooKeeper session")
    return sid, b.session_id()


def _check_delivery(ca, ch, subs, count, tag):
    for i in range(20):
        r = ca.cmd("PUBLISH", ch, "%s%d" % (tag, i))
        assert r == b":%d\r\n" % count, "PUBLISH %s%d answered %r, %d subscribers expected" % (tag, i, r, count)
    want = [("%s%d" % (tag, i)).encode() for i in range(20)]
    for name, s in subs:
        got = payloads(s, 20, prefix=tag.encode())
        assert got == want, "%s after %s: received %r" % (name, tag, got)


def test_subscribers_keep_receiving_after_session_renewal(make_proxy, make_zkresp, zk):
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    p = harness.unique("ses") + ":"
    ch, back = p + "c", p + "back"
    s_ch = subscribe(b, ch)
    s_pat = subscribe(b, p + "c*", pattern=True)
    s_3 = subscribe(b, ch, proto=3)
    s_a = subscribe(a, back)
    subs = [("B channel (RESP2)", s_ch), ("B pattern", s_pat), ("B channel (RESP3)", s_3)]
    ca, cb = a.client(), b.client()
    wait_publish_count(ca, ch, 3)
    wait_publish_count(cb, back, 1)
    _check_delivery(ca, ch, subs, 3, "before-")

    old, new = _lose_session(b, proxy)
    for name, s in subs:
        assert not s.is_closed(0), "%s's connection was closed by the session loss" % name
    # The new session's interest is registered and the old one's is gone:
    # PUBLISH counts exactly B's three subscribers again.
    wait_publish_count(ca, ch, 3, what="A to count B's subscribers on B's new session")
    wait_flowing(ca, ch, subs)
    _check_delivery(ca, ch, subs, 3, "after-")
    # B's own watches work too: B publishes to a subscriber on A.
    wait_publish_count(cb, back, 1, what="B to see A's subscriber after its new session")
    assert cb.cmd("PUBLISH", back, "from-b") == b":1\r\n"
    assert payloads(s_a, 1, prefix=b"from-b") == [b"from-b"]
    # The subscribed connections still follow the subscribed-mode rules.
    assert s_ch.cmd("PING") == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    assert s_3.cmd("PING") == b"+PONG\r\n"
    assert b.session_id() == new != old


def test_missed_unlock_is_made_up_after_session_renewal(make_proxy, make_zkresp, zk):
    """A Redisson waiter on B waits on the lock channel; the holder on A
    unlocks (publishing 0) while B is partitioned past its session.  After B
    recovers, the waiter is woken (the lock is re-checked for lock
    channels) and its retry acquires."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    name = harness.unique("rl")
    chan = "redisson_lock__channel:{%s}" % name
    holder, waiter = Redisson(a), Redisson(b)
    try:
        assert acquire(holder, name, "h", lease=60000) == NULL
        sub = subscribe(b, chan)
        r = acquire(waiter, name, "w", lease=60000)
        integer(r, lo=45000, hi=60000)
        time.sleep(0.5)
        sid = b.session_id()
        proxy.blackhole(True)
        time.sleep(0.3)
        assert unlock(holder, name, "h", lease=60000) == b":1\r\n"
        time.sleep(SESSION_MS / 1000.0 + 1.2)
        proxy.blackhole(False)
        wait_for(lambda: b.zk_state() == "connected" and b.session_id() != sid, 20, 0.1,
                 "B to run on a new ZooKeeper session")
        t0 = time.monotonic()
        raw = sub.read_reply(timeout=15)
        v = decode_one(raw)
        assert isinstance(v, list) and v[:2] == [b"message", chan.encode()], \
            "the waiter got %r instead of a message on %s" % (v, chan)
        assert acquire(waiter, name, "w", lease=60000) == NULL, "the woken waiter's retry did not acquire"
        assert time.monotonic() - t0 < 15
    finally:
        holder.close()
        waiter.close()


def test_delivery_survives_a_short_cut(make_proxy, make_zkresp, zk):
    """B's ZooKeeper connection is cut (it reconnects within its session):
    subscribers on B keep receiving A's publishes, and B's publishes keep
    reaching A."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    p = harness.unique("cut") + ":"
    ch, back = p + "c", p + "back"
    s_ch = subscribe(b, ch)
    s_pat = subscribe(b, p + "c*", pattern=True)
    s_a = subscribe(a, back)
    subs = [("B channel", s_ch), ("B pattern", s_pat)]
    ca, cb = a.client(), b.client()
    wait_publish_count(ca, ch, 2)
    wait_publish_count(cb, back, 1)
    _check_delivery(ca, ch, subs, 2, "before-")
    sid = b.session_id()
    for round_ in range(3):
        conns = proxy.counters["connections"]
        proxy.cut()
        wait_for(lambda: proxy.counters["connections"] > conns and b.zk_state() == "connected", 10, 0.05,
                 "B to reconnect after cut %d" % round_)
        assert b.session_id() == sid, "a short cut cost B its session"
        # Delivery resumes once the watches are back: the first publishes
        # after a reconnect may race it, so wait for a probe to arrive.
        wait_publish_count(ca, ch, 2)
        wait_flowing(ca, ch, subs)
        _check_delivery(ca, ch, subs, 2, "after-cut%d-" % round_)
        assert cb.cmd("PUBLISH", back, "from-b%d" % round_) == b":1\r\n"
        assert payloads(s_a, 1, prefix=b"from-b") == [b"from-b%d" % round_]


def test_dead_sidecar_interest_and_messages_go(make_proxy, make_zkresp, zk, kz):
    """B is killed (-9) with a subscriber: once its session has expired A
    counts it no more and stops writing to ZooKeeper for that channel; the
    messages A sent to the dead B meanwhile do not stay in ZooKeeper once
    a sidecar starts again on the root (a restarted pod)."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=SESSION_MS)

    def nodes():
        """The znodes under the root but each session's marks (guard.lua)."""
        return len([p for p in harness.all_paths(kz, a.root) if not p.startswith(a.root + "/m/")])
    base = nodes()
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    p = harness.unique("dead") + ":"
    ch = p + "c"
    s_b = subscribe(b, ch)
    ca = a.client()
    wait_publish_count(ca, ch, 1)
    wait_flowing(ca, ch, [("B", s_b)])
    b.kill9()
    for i in range(50):
        assert ca.cmd("PUBLISH", ch, "to-the-dead-%d" % i) in (b":0\r\n", b":1\r\n")
    wait_publish_count(ca, ch, 0, timeout=SESSION_MS / 1000.0 + 10,
                       what="A to stop counting the dead sidecar's subscriber")
    time.sleep(0.3)
    w = proxy.write_requests()
    for i in range(200):
        assert ca.cmd("PUBLISH", ch, "nobody-%d" % i) == b":0\r\n"
    time.sleep(0.3)
    assert proxy.write_requests() == w, "A kept writing to ZooKeeper for a channel whose only subscriber died"
    # The restarted sidecar's own nodes and channel nodes awaiting their
    # delayed clean-up are a handful; the 50 messages are not.
    make_zkresp(root=a.root, session_timeout=SESSION_MS)
    wait_for(lambda: nodes() <= base + 20, 15, 0.2,
             "the dead sidecar's inbox and messages to be removed (%d znodes under the root before it started, %d now)" % (
                 base, nodes()))


def test_first_subscribers_of_a_fresh_sidecar_behind_a_slow_link(make_proxy, make_zkresp, zk):
    """A sidecar just started (a pod restarted) with 15 ms to ZooKeeper: a
    client subscribes through it at once, as Redisson's waiters do.  Once
    SUBSCRIBE is answered, A's PUBLISH and A's script publish (Redisson's
    unlock) must both be counted, succeed and arrive."""
    a = make_zkresp(session_timeout=SESSION_MS)
    ca = a.client()
    script = "return redis.call('publish', KEYS[1], ARGV[1])"
    for trial in range(3):
        proxy = make_proxy(zk)
        proxy.delay(15)
        b = make_zkresp(zk_target=proxy, root=a.root, session_timeout=4000, request_timeout=3000)
        ch = harness.unique("fresh") + ":c"
        s = subscribe(b, ch)
        r_plain = ca.cmd("PUBLISH", ch, "plain")
        r_script = ca.cmd("EVAL", script, "1", ch, "script")
        got = payloads(s, 2, timeout=5)
        assert (r_plain, r_script, got) == (b":1\r\n", b":1\r\n", [b"plain", b"script"]), \
            "trial %d, right after SUBSCRIBE on a fresh sidecar: PUBLISH answered %r, the script %r; received %r" % (
                trial, r_plain, r_script, got)
        b.close()


def test_no_made_up_unlock_while_the_lock_is_still_held(make_proxy, make_zkresp, zk):
    """The made-up message after a new session is for a lock that is free:
    a waiter on B whose lock (Redisson's hash, key `name` for the channel
    `redisson_lock__channel:{name}`) is still held through A is not woken
    by B's session renewal; A's unlock then wakes it and its retry
    acquires."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    name = harness.unique("held")
    chan = "redisson_lock__channel:{%s}" % name
    holder, waiter = Redisson(a), Redisson(b)
    try:
        assert acquire(holder, name, "h", lease=60000) == NULL
        sub = subscribe(b, chan)
        integer(acquire(waiter, name, "w", lease=60000), lo=45000, hi=60000)
        _lose_session(b, proxy)
        # Let the new session's interest and any make-up run.
        time.sleep(1.5)
        assert sub.is_closed(0) is False
        stray = []
        while True:
            try:
                stray.append(sub.read_reply(timeout=0.2))
            except socket.timeout:
                break
        assert stray == [], "the waiter was woken while the lock is still held: %r (PTTL %r)" % (
            stray, holder.cmd("PTTL", name))
        assert unlock(holder, name, "h", lease=60000) == b":1\r\n"
        v = decode_one(sub.read_reply(timeout=10))
        assert v == [b"message", chan.encode(), b"0"], v
        assert acquire(waiter, name, "w", lease=60000) == NULL
    finally:
        holder.close()
        waiter.close()


def test_publisher_session_renewal_rebuilds_its_view(make_proxy, make_zkresp, zk):
    """The publishing sidecar A (behind the proxy this time) loses its
    session; meanwhile subscribers on B change (one channel left, another
    joined, a pattern added).  After A's new session, A's PUBLISH counts
    and routes by the current subscribers, not the ones it knew."""
    proxy = make_proxy(zk)
    b = make_zkresp(session_timeout=SESSION_MS)
    a = make_zkresp(zk_target=proxy, root=b.root, session_timeout=SESSION_MS, request_timeout=1000)
    p = harness.unique("pub") + ":"
    old, new = p + "old", p + "new"
    s_old = subscribe(b, old)
    ca = a.client()
    wait_publish_count(ca, old, 1)
    wait_publish_count(ca, new, 0)
    sid = a.session_id()
    proxy.blackhole(True)
    s_old.send(encode("UNSUBSCRIBE", old))
    s_old.read_reply()
    s_new = subscribe(b, new)
    s_pat = subscribe(b, p + "n*", pattern=True)
    time.sleep(SESSION_MS / 1000.0 + 1.5)
    proxy.blackhole(False)
    wait_for(lambda: a.zk_state() == "connected" and a.session_id() != sid, 20, 0.1,
             "A to run on a new ZooKeeper session")
    wait_publish_count(ca, new, 2, what="A to count B's new subscribers after its new session")
    wait_publish_count(ca, old, 0, what="A to stop counting B's old subscriber after its new session")
    wait_flowing(ca, new, [("B new", s_new), ("B pattern", s_pat)])
    _check_delivery(ca, new, [("B new", s_new), ("B pattern", s_pat)], 2, "after-")
    assert ca.cmd("PUBLISH", old, "gone") == b":0\r\n"


def _bells(kz, root, chan):
    """The doorbells on chan under root, any sidecar's ("<instance>/<name>")."""
    from kazoo.exceptions import NoNodeError
    out = []
    try:
        owners = kz.get_children(root + "/ps/b")
    except NoNodeError:
        return out
    for who in owners:
        try:
            names = kz.get_children(root + "/ps/b/" + who)
        except NoNodeError:
            continue
        out += [who + "/" + n for n in names if n.startswith(keyenc.encode(chan) + ".")]
    return out


def test_doorbell_goes_when_its_waiter_left_during_a_session_loss(make_proxy, make_zkresp, zk, kz):
    """A waiter on B subscribes to a lock channel (B keeps a doorbell node
    for it, persistent) and leaves while B is partitioned past its session:
    its interest node goes with the old session, and B, which lives on,
    deletes the doorbell too (nobody else would).  A waiter that comes back
    has a doorbell again and receives the unlock message."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    chan = "redisson_lock__channel:{%s}" % harness.unique("bell")
    ca = a.client()
    sub = subscribe(b, chan)
    assert len(_bells(kz, a.root, chan)) == 1
    wait_publish_count(ca, chan, 1)
    _lose_session(b, proxy, meanwhile=sub.close)
    wait_for(lambda: _bells(kz, a.root, chan) == [], 10, 0.1,
             "B's doorbell on %s to go" % chan)
    sub = subscribe(b, chan)
    assert len(_bells(kz, a.root, chan)) == 1
    wait_publish_count(ca, chan, 1)
    assert ca.cmd("PUBLISH", chan, "0") == b":1\r\n"
    assert payloads(sub, 1) == [b"0"]


def test_doorbell_keeps_publish_order_across_a_reconnect(make_proxy, make_zkresp, zk):
    """B's connection is blackholed for a moment (within its session) while
    A publishes a message on `news` and then the unlock message of a lock
    channel (which rings B's doorbell).  The events of both watches are
    lost with the connection; when it is cut and B reconnects, the server
    sets B's watches again and fires the doorbell's (a data watch) before
    the inbox's (a child watch).  B's subscriber on both channels still
    receives them in publish order, once each: the doorbell's event is not
    used before B has listed its inbox again."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    p = harness.unique("order")
    news, chan = p + ":news", "redisson_lock__channel:{%s}" % p
    sub = subscribe(b, news, chan)
    ca = a.client()
    wait_publish_count(ca, news, 1)
    wait_publish_count(ca, chan, 1)
    assert ca.cmd("PUBLISH", chan, "0") == b":1\r\n"
    assert payloads(sub, 1) == [b"0"]
    time.sleep(0.3)  # B's listing and its doorbell's watch again: B idle, both watches set
    for round_ in range(3):
        sid = b.session_id()
        proxy.blackhole(True)
        time.sleep(0.1)
        assert ca.cmd("PUBLISH", news, "m%d" % round_) == b":1\r\n"
        assert ca.cmd("PUBLISH", chan, "0") == b":1\r\n"
        time.sleep(0.2)
        proxy.blackhole(False)  # cuts B's connection: it reconnects at once
        got = payloads(sub, 2)
        assert got == [b"m%d" % round_, b"0"], "round %d: B's subscriber received %r" % (round_, got)
        assert b.session_id() == sid, "the cut cost B its session"
        stray = payloads(sub, 1, timeout=0.5)
        assert stray == [], "round %d: a message came twice: %r" % (round_, stray)


def test_subscription_confirmed_behind_a_wait_across_a_new_session(make_proxy, make_zkresp, zk):
    """A SUBSCRIBE pipelined behind a command that waits (DEBUG SLEEP)
    waits for it, as in Redis (the gateway holds the subscribe family back
    until nothing else of its connection runs), while B's session is lost
    and renewed.  Then it is confirmed, not -TRYAGAIN (which answers a
    grant from a session given up): the subscription is made under the new
    session, and A's publishes reach it."""
    a, b, proxy = _via_proxy(make_proxy, make_zkresp, zk)
    ca = a.client()
    s = b.client(timeout=30)
    sent = time.monotonic()
    s.send_cmd("DEBUG", "SLEEP", "8")
    s.send_cmd("SUBSCRIBE", "held-ch")
    time.sleep(0.5)
    assert ca.cmd("PUBLISH", "held-ch", "early") == b":0\r\n", "subscribed before the wait ended"
    _lose_session(b, proxy)
    assert time.monotonic() < sent + 8, "the new session came after the wait ended"
    assert s.read_reply(timeout=20) == b"+OK\r\n"
    confirmation = s.read_reply(timeout=20)
    assert decode_one(confirmation) == [b"subscribe", b"held-ch", 1], confirmation
    wait_flowing(ca, "held-ch", {"s": s})
