"""Tier 28: Redisson-style waiting across two sidecars (issue 4's first
acceptance test).

Redisson waits for a lock by subscribing to `redisson_lock__channel:{name}`,
trying the acquire script (which fails and answers the PTTL), then waiting
on its subscription; the holder's unlock script publishes 0 on that channel
and every waiter retries once per message.  Here, with Redisson's scripts
sent raw (test_24's ACQUIRE and UNLOCK, EVALSHA with SCRIPT LOAD on
NOSCRIPT):

- a holder on sidecar A with a 60 s lease, six waiters through sidecar B
  (or split over both), each subscribed before its first attempt;
- a waiter sends nothing but the retry its message triggers (no polling; the
  lease is far longer than the test, so no timeout-driven retry could
  explain an acquisition);
- every unlock wakes every remaining waiter, and exactly one acquires on
  its retry; it then holds (the hash names it alone, with count 1) until
  the others have retried, and unlocks in turn: the chain ends with every
  waiter having held the lock once, never two at a time.
"""

import queue
import threading
import time

import pytest

import harness
from resp import decode_one, encode
from pubsub_helpers import read_messages, subscribe, wait_publish_count
from test_24_redisson import NULL, Redisson, acquire, unlock, integer
from test_80_operations import parse, scrape, val, with_metrics

LEASE = 60000
WAITERS = 6
WAVE_TIMEOUT = 15.0


def _channel(name):
    return "redisson_lock__channel:{%s}" % name


class Waiter(threading.Thread):
    """One Redisson waiter: a subscription connection and a command
    connection (Redisson keeps them apart), both on sidecar z."""

    def __init__(self, idx, z, name, events):
        threading.Thread.__init__(self, daemon=True)
        self.idx, self.z, self.name, self.events = idx, z, name, events
        self.release = threading.Event()
        self.attempts = 0
        self.messages = 0
        self.r = Redisson(z)

    def emit(self, kind, detail=None):
        self.events.put((kind, self.idx, detail, time.monotonic()))

    def attempt(self):
        self.attempts += 1
        return acquire(self.r, self.name, self.idx, lease=LEASE)

    def run(self):
        sub = self.z.client(timeout=30)
        try:
            sub.send(encode("SUBSCRIBE", _channel(self.name)))
            confirm = decode_one(sub.read_reply())
            if confirm != [b"subscribe", _channel(self.name).encode(), 1]:
                self.emit("error", "SUBSCRIBE answered %r" % (confirm,))
                return
            r = self.attempt()
            self.emit("failed" if r != NULL else "acquired", r)
            while r != NULL:
                # Block on the subscription: nothing else is sent.
                try:
                    raw = sub.read_reply(timeout=30)
                except Exception as e:
                    self.emit("not woken", repr(e))
                    return
                self.messages += 1
                msg = decode_one(raw)
                self.emit("woken", msg)
                r = self.attempt()
                self.emit("failed" if r != NULL else "acquired", r)
            if not self.release.wait(60):
                self.emit("error", "never told to release")
                return
            u = unlock(self.r, self.name, self.idx, lease=LEASE)
            self.emit("released", u)
        except Exception as e:  # reported by the test
            self.emit("error", repr(e))
        finally:
            sub.close()
            self.r.close()


def _collect(events, want, timeout, what):
    """Events from the queue until want(list_so_far) is true."""
    got = []
    deadline = time.monotonic() + timeout
    while not want(got):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("timed out after %.0fs waiting for %s; events: %r" % (timeout, what, got))
        try:
            ev = events.get(timeout=remaining)
        except queue.Empty:
            continue
        if ev[0] in ("error", "not woken"):
            raise AssertionError("waiter %d: %s %s (events so far: %r)" % (ev[1], ev[0], ev[2], got))
        got.append(ev)
    return got


@pytest.mark.parametrize("placement", ["waiters_on_b", "waiters_split"])
def test_redisson_waiters_woken_across_sidecars(zkresp_pair, placement):
    a, b = zkresp_pair
    name = harness.unique("rlock")
    holder = Redisson(a)
    try:
        assert acquire(holder, name, "h", lease=LEASE) == NULL
        events = queue.Queue()
        sides = [b if placement == "waiters_on_b" or i % 2 == 0 else a for i in range(WAITERS)]
        waiters = [Waiter(i, sides[i], name, events) for i in range(WAITERS)]
        t0 = time.monotonic()
        for w in waiters:
            w.start()
        first = _collect(events, lambda g: len(g) == WAITERS, WAVE_TIMEOUT, "every waiter's first attempt")
        for kind, idx, r, _ in first:
            assert kind == "failed", "waiter %d acquired a held lock: %r" % (idx, r)
            integer(r, lo=LEASE - 15000, hi=LEASE)
        # At once (every waiter's SUBSCRIBE was answered before its attempt,
        # so a script's publish cannot miss it), the holder unlocks: its
        # script publishes 0.
        assert unlock(holder, name, "h", lease=LEASE) == b":1\r\n"

        remaining = set(range(WAITERS))
        order = []
        def wave_done(g):
            return all(any(e[0] == "woken" and e[1] == i for e in g) and
                       any(e[0] in ("failed", "acquired") and e[1] == i for e in g) for i in remaining)
        for wave in range(WAITERS):
            # Every remaining waiter is woken once and retries once.
            evs = _collect(events, wave_done, WAVE_TIMEOUT, "wave %d: a wake-up and a retry from each of waiters %s" % (
                wave, sorted(remaining)))
            woken = sorted(e[1] for e in evs if e[0] == "woken")
            assert woken == sorted(remaining), "wave %d: woken %r, waiting %r" % (wave, woken, sorted(remaining))
            for e in evs:
                if e[0] == "woken":
                    assert e[2] == [b"message", _channel(name).encode(), b"0"], "wave %d: %r" % (wave, e)
            winners = [e[1] for e in evs if e[0] == "acquired"]
            assert len(winners) == 1, "wave %d: %d waiters acquired on their retry: %r" % (wave, len(winners), evs)
            w = winners[0]
            for e in evs:
                if e[0] == "failed":
                    integer(e[2], lo=LEASE - 15000, hi=LEASE)
            # The lock is the winner's alone, seen from both sidecars.
            for side in (a, b):
                with side.client() as c:
                    fields = decode_one(c.cmd("HGETALL", name))
                    assert fields == [waiters[w].r.lock_name(w).encode(), b"1"], \
                        "wave %d: lock hash %r, winner %d" % (wave, fields, w)
            order.append(w)
            remaining.discard(w)
            waiters[w].release.set()
            rel = _collect(events, lambda g: any(e[0] == "released" and e[1] == w for e in g),
                           WAVE_TIMEOUT, "waiter %d's unlock" % w)
            assert [e[2] for e in rel if e[0] == "released"] == [b":1\r\n"], rel
            # Nothing else may happen between the unlock and the next wave's
            # wake-ups but that wave itself: put back what arrived early (a
            # waiter may hear the unlock before the unlocker has its reply,
            # so its wake-up goes back behind its retry's result).
            for e in rel:
                if e[0] != "released":
                    events.put(e)
        elapsed = time.monotonic() - t0
        assert sorted(order) == list(range(WAITERS))
        assert elapsed < LEASE / 1000.0 / 2, "the chain took %.1f s, near the lease: not woken by messages" % elapsed
        for w in waiters:
            w.join(10)
            # One attempt, then exactly one retry per message received.
            assert w.attempts == 1 + w.messages, "waiter %d: %d attempts for %d messages" % (
                w.idx, w.attempts, w.messages)
        with a.client() as c:
            assert c.cmd("EXISTS", name) == b":0\r\n"
    finally:
        holder.close()


def test_unlocks_ring_the_waiters_doorbell(make_zkresp):
    """B keeps a doorbell for the lock channel its subscriber waits on
    (README, "Pub/sub across sidecars"): each unlock message a script
    publishes through A reaches that subscriber at the doorbell's event
    (B's pubsub_rung_total counts them), exactly once, after the message A
    published before it."""
    a = make_zkresp()
    b = with_metrics(make_zkresp, root=a.root)
    name = harness.unique("bell")
    ch, news = _channel(name), name + ":news"
    sub = subscribe(b, ch, news)
    ca = a.client()
    wait_publish_count(ca, ch, 1)
    wait_publish_count(ca, news, 1)

    def rung():
        return val(parse(scrape(b.mport)), "zkresp_lua_pubsub_rung_total")
    rung0 = rung()
    n = 20
    script = "redis.call('publish', KEYS[1], ARGV[1]) return 1"
    for i in range(n):
        assert ca.cmd("PUBLISH", news, "n%d" % i) == b":1\r\n"
        assert [m[1:] for m in read_messages(sub, 1)] == [(news.encode(), b"n%d" % i)]
        assert ca.cmd("EVAL", script, "1", ch, "0") == b":1\r\n"
        assert [m[1:] for m in read_messages(sub, 1)] == [(ch.encode(), b"0")]
    assert read_messages(sub, 1, timeout=0.5) == [], "a message came twice"
    # (one that arrives while B lists its inbox comes from the listing)
    assert rung() - rung0 >= n // 2, rung() - rung0
