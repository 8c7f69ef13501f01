"""Tier 27: pub/sub across zkresp sidecars on one ZooKeeper and one --root,
with real clients (issue 4, DESIGN.md "Pub/Sub").

- redis-py (RESP2) channel and pattern subscribers on sidecar B (and one on
  A) receive what two publishers on A publish, every message, in each
  publisher's order, and PUBLISH counts the subscribers of both sidecars;
  three sidecars likewise.
- ioredis (RESP3 push frames) subscribers on B, through node/pubsub.js;
  the exact RESP2 and RESP3 frames of a real redis-server.
- One connection's plain, script and pipelined publishes keep their order;
  channel names and payloads no znode name can hold as they are arrive byte
  for byte; glob patterns match as redis-server matches them; shard
  channels cross too; subscribers coming and going never disturb a steady
  one.
- A channel nobody on another sidecar listens to costs no ZooKeeper write
  (the server's last zxid and the publisher's requests through a proxy do
  not move); once B subscribes, publishes go through ZooKeeper and arrive;
  once B unsubscribes, they stop costing writes again.
- A publish made by a script is part of its commit: nothing for a script
  that raises after publishing, exactly one message per committed script,
  even when contention makes scripts re-run; and it reaches a subscription
  answered just before on another sidecar.
- Messages do not pile up in ZooKeeper.
"""

import json
import os
import re
import subprocess
import threading
import time

import pytest

import harness
from harness import RawClient, wait_for
from resp import encode
from pubsub_helpers import message_of, read_messages, subscribe, wait_publish_count

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_SCRIPT = os.path.join(HERE, "node", "pubsub.js")


# ---------------------------------------------------------------- helpers


def nothing_more(c, wait=0.5):
    """Frames other than probes that arrive within wait seconds."""
    extra = []
    deadline = time.monotonic() + wait
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return extra
        try:
            raw = c.read_reply(timeout=remaining)
        except Exception:
            return extra
        m = message_of(raw)
        if m is None or not m[-1].startswith(b"probe"):
            extra.append(raw)


def zxid(zk):
    m = re.search(r"Zxid: (0x[0-9a-fA-F]+)", zk.four_letter("srvr"))
    assert m, "no Zxid in srvr output"
    return int(m.group(1), 16)


def settled_zxid(zk, quiet=0.6, timeout=15.0):
    """The server's last zxid once it has not moved for `quiet` seconds (no
    session creation, ephemeral clean-up or other writer in flight)."""
    seen = {"z": zxid(zk), "t": time.monotonic()}

    def quiet_now():
        z = zxid(zk)
        now = time.monotonic()
        if z != seen["z"]:
            seen["z"], seen["t"] = z, now
            return False
        return now - seen["t"] >= quiet
    wait_for(quiet_now, timeout, 0.1, "ZooKeeper's zxid to stop moving")
    return seen["z"]


# ---------------------------------------------------------------- redis-py

def test_redis_py_subscribers_across_sidecars(zkresp_pair):
    """redis-py (RESP2) subscribers: on B a channel subscriber, a pattern
    subscriber and one with both; on A a channel subscriber.  Two
    publishers on A publish 200 numbered messages each, concurrently: every
    subscriber gets every message once, in each publisher's order, with the
    right channel and pattern; every PUBLISH answers 5."""
    a, b = zkresp_pair
    p = harness.unique("rp") + ":"
    ch, pat = p + "events", p + "ev*"
    rb1, rb2, rb3, ra = b.redis(), b.redis(), b.redis(), a.redis()
    s_ch, s_pat, s_both, s_a = rb1.pubsub(), rb2.pubsub(), rb3.pubsub(), ra.pubsub()
    s_ch.subscribe(ch)
    s_pat.psubscribe(pat)
    s_both.subscribe(ch)
    s_both.psubscribe(pat)
    s_a.subscribe(ch)
    for s, n in ((s_ch, 1), (s_pat, 1), (s_both, 2), (s_a, 1)):
        for _ in range(n):
            m = s.get_message(timeout=5)
            assert m and m["type"] in ("subscribe", "psubscribe"), m
    with a.client() as probe:
        wait_publish_count(probe, ch, 5)

    N = 200
    replies = {0: [], 1: []}

    def publisher(k):
        with a.client() as c:
            for i in range(N):
                replies[k].append(c.cmd("PUBLISH", ch, "P%d:%d" % (k, i)))
    ts = [threading.Thread(target=publisher, args=(k,)) for k in (0, 1)]
    for t in ts:
        t.start()

    received = {}

    def collect(name, s, want):
        got = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            m = s.get_message(timeout=1)
            if m and m["type"] in ("message", "pmessage") and not m["data"].startswith(b"probe"):
                got.append(m)
        extra_until = time.monotonic() + 0.5
        while time.monotonic() < extra_until:
            m = s.get_message(timeout=0.1)
            if m and m["type"] in ("message", "pmessage") and not m["data"].startswith(b"probe"):
                got.append(m)
        received[name] = got
    cs = [threading.Thread(target=collect, args=(name, s, want)) for name, s, want in
          (("B channel", s_ch, 2 * N), ("B pattern", s_pat, 2 * N), ("B both", s_both, 4 * N),
           ("A channel", s_a, 2 * N))]
    for t in cs:
        t.start()
    for t in ts + cs:
        t.join(60)

    bad_replies = [(k, i, r) for k in (0, 1) for i, r in enumerate(replies[k]) if r != b":5\r\n"]
    assert not bad_replies, "PUBLISH did not count 5 subscribers: %r" % bad_replies[:5]

    def check(name, msgs, kind, pattern):
        assert all(m["type"] == kind for m in msgs), (name, [m for m in msgs if m["type"] != kind][:3])
        assert all(m["channel"] == ch.encode() for m in msgs), name
        if pattern:
            assert all(m["pattern"] == pat.encode() for m in msgs), name
        for k in (0, 1):
            seq = [int(m["data"].split(b":")[1]) for m in msgs if m["data"].startswith(b"P%d:" % k)]
            assert seq == list(range(N)), "%s: publisher %d's messages %s" % (
                name, k, "out of order or lost/duplicated: %d received, first wrong at %r" % (
                    len(seq), next(((i, v) for i, v in enumerate(seq) if v != i), None)))
    check("B channel", received["B channel"], "message", False)
    check("B pattern", received["B pattern"], "pmessage", True)
    check("A channel", received["A channel"], "message", False)
    both = received["B both"]
    check("B both (messages)", [m for m in both if m["type"] == "message"], "message", False)
    check("B both (pmessages)", [m for m in both if m["type"] == "pmessage"], "pmessage", True)
    assert len(both) == 4 * N, len(both)
    for s in (s_ch, s_pat, s_both, s_a):
        s.close()


def test_publish_counts_both_sidecars(zkresp_pair):
    """PUBLISH's reply is the number of subscribers reached on every
    sidecar, from either side, and falls back as they go."""
    a, b = zkresp_pair
    p = harness.unique("cnt") + ":"
    ch = p + "c"
    ca, cb = a.client(), b.client()
    assert ca.cmd("PUBLISH", ch, "x") == b":0\r\n"
    b1 = subscribe(b, ch)
    b2 = subscribe(b, p + "*", pattern=True)
    wait_publish_count(ca, ch, 2)
    a1 = subscribe(a, ch)
    wait_publish_count(ca, ch, 3)
    wait_publish_count(cb, ch, 3)
    assert cb.cmd("PUBLISH", p + "other", "x") == b":1\r\n"    # B's pattern only
    wait_publish_count(ca, p + "other", 1)
    b1.close()
    wait_publish_count(ca, ch, 2, what="B's closed subscriber to stop being counted")
    b2.send(encode("PUNSUBSCRIBE"))
    b2.read_reply()
    wait_publish_count(ca, ch, 1, what="B's pattern to stop being counted")
    wait_publish_count(cb, ch, 1)
    a1.close()
    wait_publish_count(ca, ch, 0)
    wait_publish_count(cb, ch, 0)


def test_three_sidecars(make_zkresp):
    """Subscribers on B and C, publishers on A and B: each message reaches
    every sidecar's subscribers once, counts add up over three sidecars."""
    a = make_zkresp()
    b = make_zkresp(root=a.root)
    c = make_zkresp(root=a.root)
    p = harness.unique("three") + ":"
    ch = p + "c"
    sb1, sb2 = subscribe(b, ch), subscribe(b, ch)
    sc = subscribe(c, ch)
    sc_pat = subscribe(c, p + "*", pattern=True)
    ca, cb = a.client(), b.client()
    wait_publish_count(ca, ch, 4)
    wait_publish_count(cb, ch, 4)
    for i in range(30):
        assert ca.cmd("PUBLISH", ch, "a%d" % i) == b":4\r\n"
        assert cb.cmd("PUBLISH", ch, "b%d" % i) == b":4\r\n"
    for name, s in (("B1", sb1), ("B2", sb2), ("C", sc), ("C pattern", sc_pat)):
        got = [m[-1] for m in read_messages(s, 60)]
        for tag in (b"a", b"b"):
            seq = [g for g in got if g.startswith(tag)]
            assert seq == [tag + b"%d" % i for i in range(30)], "%s, publisher %r: %r" % (name, tag, seq)
        assert nothing_more(s, 0.2) == [], name
    sc.close()
    sc_pat.close()
    wait_publish_count(ca, ch, 2, what="C's subscribers to stop being counted")
    c.close()
    wait_publish_count(ca, ch, 2)
    assert ca.cmd("PUBLISH", ch, "last") == b":2\r\n"
    for s in (sb1, sb2):
        assert [m[-1] for m in read_messages(s, 1)] == [b"last"]


# ---------------------------------------------------------------- ioredis

def test_ioredis_resp3_subscribers_across_sidecars(zkresp_pair):
    """ioredis (RESP3, push frames): subscribers and a pattern subscriber on
    B receive what A publishes, with the right channel, pattern and payload,
    in order; the subscribed connection also runs GET/SET."""
    a, b = zkresp_pair
    p = harness.unique("io") + ":"
    N = 60
    proc = subprocess.run(["node", NODE_SCRIPT, str(a.port), str(b.port), p, str(N)],
                          capture_output=True, text=True, timeout=90)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, "no summary from node: stdout=%r stderr=%r" % (proc.stdout[-2000:], proc.stderr[-2000:])
    out = json.loads(lines[-1])
    assert out["errors"] == [], out["errors"]
    assert out["protocol"] == [3, 3, 3], out["protocol"]
    assert out["subscribeReplies"] == [2, 1], out["subscribeReplies"]
    assert out["get"] == "v-while-subscribed", out["get"]
    assert out["replies"] == [1] * (3 * N), "PUBLISH replies: %r" % out["replies"][:12]
    want = []
    for i in range(N):
        want += [[p + "ch1", "m%d" % i], [p + "ch2", "n%d" % i]]
    assert out["messages"] == want, "messages: %r ... (%d)" % (out["messages"][:6], len(out["messages"]))
    assert out["pmessages"] == [[p + "p.*", p + "p.%d" % i, "q%d" % i] for i in range(N)], \
        "pmessages: %r ... (%d)" % (out["pmessages"][:4], len(out["pmessages"]))


@pytest.mark.parametrize("proto", [2, 3])
def test_exact_frames_across_sidecars(zkresp_pair, proto):
    """The exact frames a subscriber on B gets for A's publishes, as
    redis-server sends them: RESP2 arrays, RESP3 push frames."""
    a, b = zkresp_pair
    p = harness.unique("fr") + ":"
    s = subscribe(b, p + "c", proto=proto)
    s.send(encode("PSUBSCRIBE", p + "c*"))
    t = b"*" if proto == 2 else b">"
    assert s.read_reply() == t + b"3\r\n$10\r\npsubscribe\r\n$%d\r\n%sc*\r\n:2\r\n" % (len(p) + 2, p.encode())
    payload = b"\x00pay\r\nload\xff"
    with a.client() as ca:
        wait_publish_count(ca, p + "c", 2)
        assert nothing_more(s, 0.3) == []
        assert ca.cmd("PUBLISH", p + "c", payload) == b":2\r\n"
    frames = []
    for _ in range(2):
        raw = s.read_reply(timeout=10)
        while message_of(raw) and message_of(raw)[-1].startswith(b"probe"):
            raw = s.read_reply(timeout=10)
        frames.append(raw)
    chan = b"$%d\r\n%sc\r\n" % (len(p) + 1, p.encode())
    body = b"$%d\r\n%s\r\n" % (len(payload), payload)
    assert frames == [
        t + b"3\r\n$7\r\nmessage\r\n" + chan + body,
        t + b"4\r\n$8\r\npmessage\r\n$%d\r\n%sc*\r\n" % (len(p) + 2, p.encode()) + chan + body,
    ], frames
    if proto == 3:
        # The connection still runs commands.
        assert s.cmd("SET", p + "k", "v") == b"+OK\r\n"
        assert s.cmd("GET", p + "k") == b"$1\r\nv\r\n"
    else:
        assert s.cmd("PING") == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    s.close()


def test_script_publish_reaches_a_subscription_already_answered(zkresp_pair):
    """Once SUBSCRIBE (or PSUBSCRIBE) has been answered on B, a script's
    publish through A must reach it, with no wait in between: a Redisson
    waiter subscribes, fails to acquire, and relies on the unlock script's
    message."""
    a, b = zkresp_pair
    p = harness.unique("ans") + ":"
    script = "return redis.call('publish', KEYS[1], ARGV[1])"
    with a.client() as ca:
        for i in range(15):
            ch = "%sc%d" % (p, i)
            s = subscribe(b, ch)
            r = ca.cmd("EVAL", script, "1", ch, "m%d" % i)
            assert r == b":1\r\n", "round %d: the script's publish counted %r right after SUBSCRIBE on B" % (i, r)
            assert [m[1:] for m in read_messages(s, 1, timeout=5)] == [(ch.encode(), b"m%d" % i)], i
            s.close()
        for i in range(10):
            s = subscribe(b, "%sq%d.*" % (p, i), pattern=True)
            ch = "%sq%d.x" % (p, i)
            r = ca.cmd("EVAL", script, "1", ch, "pm%d" % i)
            assert r == b":1\r\n", "round %d: the script's publish counted %r right after PSUBSCRIBE on B" % (i, r)
            assert [m[2:] for m in read_messages(s, 1, timeout=5)] == [(ch.encode(), b"pm%d" % i)], i
            s.close()


def test_order_of_plain_and_script_publishes(zkresp_pair):
    """One connection on A alternates PUBLISH, EVAL publishing, and
    pipelined PUBLISHes: B's subscriber sees them in that order."""
    a, b = zkresp_pair
    p = harness.unique("ord") + ":"
    ch = p + "c"
    s = subscribe(b, ch)
    script = "return redis.call('publish', KEYS[1], ARGV[1])"
    with a.client() as ca:
        wait_publish_count(ca, ch, 1)
        want = []
        for i in range(40):
            if i % 3 == 0:
                r = ca.cmd("PUBLISH", ch, "p%d" % i)
            elif i % 3 == 1:
                r = ca.cmd("EVAL", script, "1", ch, "p%d" % i)
            else:
                ca.send(encode("PUBLISH", ch, "p%d" % i) + encode("EVAL", script, "1", ch, "q%d" % i)
                        + encode("PUBLISH", ch, "r%d" % i))
                r = ca.read_reply()
                assert ca.read_reply() == r and ca.read_reply() == r
                want += [b"p%d" % i, b"q%d" % i, b"r%d" % i]
                continue
            assert r == b":1\r\n", r
            want.append(b"p%d" % i)
    got = [m[2] for m in read_messages(s, len(want))]
    assert got == want, "order differs: got %r; first difference at %r" % (got,
        next(((i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w), (len(got), len(want))),)
    assert nothing_more(s, 0.3) == []


TRICKY = [
    ("slash/in/channel", b"payload/with/slashes"),
    ("..", b"."),
    (".", b".."),
    ("dots.and.more.", b"a.b.c."),
    ("%2F-looks-encoded", b"%00%2F"),
    ("unicode-\u00e9\u4e2d", "\u00e9\u4e2d\U0001f600".encode()),
    ("nul\x00in-channel", b"\x00\x01\x02"),
    ("crlf\r\n", b"\r\n\r\n"),
    ("space channel", b" "),
    ("empty-payload", b""),
    ("name-max-boundary", b"x" * 384),
    ("name-max-plus-one", b"y" * 385),
    ("encoded-boundary", b"/" * 200),
    ("long", bytes(range(256)) * 400),
    ("a" * 500, b"long channel name"),
]


def test_tricky_channels_and_payloads_across_sidecars(zkresp_pair):
    """Channel names and payloads that a znode name cannot hold as they are
    (slashes, dots, NUL, non-ASCII, CRLF, empty, long) arrive byte for byte
    on the other sidecar, for channel and pattern subscribers."""
    a, b = zkresp_pair
    p = harness.unique("tr") + ":"
    chans = [p + c for c, _ in TRICKY]
    s = subscribe(b, *chans)
    sp = subscribe(b, p + "*", pattern=True)
    with a.client() as ca:
        for ch in chans:
            wait_publish_count(ca, ch, 2)
        nothing_more(s, 0.3)
        nothing_more(sp, 0.1)
        for ch, (_, payload) in zip(chans, TRICKY):
            assert ca.cmd("PUBLISH", ch, payload) == b":2\r\n", ch
    want = [(ch.encode(), payload) for ch, (_, payload) in zip(chans, TRICKY)]
    got = [m[1:] for m in read_messages(s, len(want))]
    assert got == want, [(g[0][:40], len(g[1])) for g in got]
    gotp = [m[2:] for m in read_messages(sp, len(want))]
    assert gotp == want, [(g[0][:40], len(g[1])) for g in gotp]


GLOBS = ["h?llo", "h*llo", "h[ae]llo", "h[^e]llo", "h[a-b]llo", "h\\*llo", "*", "h*", "*o", "[", "h[", "\\",
         "h[]llo", "*[*]*", "??", "h?*o", "[a-z]*[0-9]"]
CHANNELS = ["hello", "hallo", "hillo", "hbllo", "h*llo", "hllo", "heeeello", "h", "[", "h[", "\\", "ho",
            "x9", "Hello", "h]llo", "abc1", "a*b"]


def test_pattern_matching_across_sidecars_as_redis(zkresp_pair, redis_ref):
    """Glob patterns subscribed on B match A's publishes exactly as
    redis-server matches them (the publisher decides where a message goes
    from the patterns other sidecars registered)."""
    a, b = zkresp_pair
    p = harness.unique("glob") + ":"
    pats = [p + g for g in GLOBS]
    chans = [p + c for c in CHANNELS]
    ref_sub = RawClient(redis_ref.port)
    ref_sub.send(encode("PSUBSCRIBE", *pats))
    for _ in pats:
        ref_sub.read_reply()
    expected = {}
    with redis_ref.client() as rp:
        for ch in chans:
            expected[ch] = rp.cmd("PUBLISH", ch, "m")
    n = sum(int(expected[c][1:-2]) for c in chans)
    ref_frames = sorted(ref_sub.read_reply() for _ in range(n))
    ref_sub.close()
    assert n > len(chans), "the reference matched too little (%d) for this test to mean much" % n

    s = subscribe(b, *pats, pattern=True)
    ca = a.client()
    probe = p + "hello"
    wait_publish_count(ca, probe, int(expected[probe][1:-2]))
    nothing_more(s, 0.3)
    got = {ch: ca.cmd("PUBLISH", ch, "m") for ch in chans}
    bad = {c[len(p):]: (expected[c], got[c]) for c in chans if expected[c] != got[c]}
    assert not bad, "PUBLISH counts (redis-server, zkresp) differ for channels %r" % bad
    frames = []
    for _ in range(n):
        try:
            frames.append(s.read_reply(timeout=10))
        except Exception:
            break
    assert sorted(frames) == ref_frames, "%d pmessages, %d expected" % (len(frames), n)
    assert nothing_more(s, 0.3) == []


def test_shard_channels_across_sidecars(zkresp_pair):
    """SSUBSCRIBE on B receives SPUBLISH through A as smessage frames;
    PUBLISH and SPUBLISH stay apart across sidecars too."""
    a, b = zkresp_pair
    p = harness.unique("sh") + ":"
    ch = p + "s"
    c = b.client(timeout=10)
    c.send(encode("SSUBSCRIBE", ch))
    assert c.read_reply() == b"*3\r\n$10\r\nssubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(ch), ch.encode())
    with a.client() as ca:
        def counted():
            r = ca.cmd("SPUBLISH", ch, "probe")
            return r == b":1\r\n"
        wait_for(counted, 10, 0.05, "SPUBLISH through A to count B's shard subscriber")
        assert ca.cmd("PUBLISH", ch, "plain") == b":0\r\n"
        assert ca.cmd("SPUBLISH", ch, "shard") == b":1\r\n"
    frames = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        raw = c.read_reply(timeout=10)
        if b"probe" not in raw:
            frames.append(raw)
            break
    chan = b"$%d\r\n%s\r\n" % (len(ch), ch.encode())
    assert frames == [b"*3\r\n$8\r\nsmessage\r\n" + chan + b"$5\r\nshard\r\n"], frames
    assert nothing_more(c, 0.3) == []


def test_subscribers_come_and_go_while_publishing(zkresp_pair):
    """While A publishes without pause (plain and script publishes),
    subscribers on both sidecars subscribe and leave every way a client can
    (UNSUBSCRIBE, RESET, QUIT, closing mid-stream): a steady subscriber on B
    misses nothing and sees A's order, both sidecars live on, and the count
    settles back to the steady subscriber alone."""
    a, b = zkresp_pair
    p = harness.unique("churn") + ":"
    ch = p + "c"
    steady = subscribe(b, ch)
    with a.client() as ca:
        wait_publish_count(ca, ch, 1)
    stop = threading.Event()
    sent, errors = [], []
    script = "return redis.call('publish', KEYS[1], ARGV[1])"

    def publisher():
        try:
            with a.client() as c:
                i = 0
                while not stop.is_set():
                    m = "m%d" % i
                    r = c.cmd("PUBLISH", ch, m) if i % 2 else c.cmd("EVAL", script, "1", ch, m)
                    if not r.startswith(b":"):
                        errors.append(r)
                    sent.append(m.encode())
                    i += 1
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    def churn(z, k):
        try:
            # 30 rounds at least, and on until the publisher has sent enough
            # to mean something (a loaded machine publishes slowly)
            i = 0
            while i < 30 or (len(sent) <= 60 and i < 600 and not errors):
                c = z.client(timeout=10)
                if (i + k) % 3 == 0:
                    assert c.cmd("HELLO", "3").startswith(b"%")
                c.send(encode("SUBSCRIBE", ch, p + "other"))
                c.send(encode("PSUBSCRIBE", p + "*"))
                c.read_reply()
                how = (i + k) % 4
                if how == 0:
                    c.send(encode("UNSUBSCRIBE") + encode("PUNSUBSCRIBE") + encode("PING"))
                elif how == 1:
                    c.send(encode("RESET"))
                elif how == 2:
                    c.send(encode("QUIT"))
                time.sleep(0.02 * (i % 3))
                c.close()
                i += 1
        except Exception as e:  # noqa: BLE001
            errors.append("churn %d: %r" % (k, e))

    pub = threading.Thread(target=publisher)
    pub.start()
    ts = [threading.Thread(target=churn, args=(z, k)) for k, z in enumerate((a, b, a, b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    time.sleep(0.2)
    stop.set()
    pub.join(30)
    assert not errors, errors[:5]
    assert a.alive() and b.alive()
    assert len(sent) > 50, "too few publishes (%d) during the churn to mean much" % len(sent)
    got = [m[2] for m in read_messages(steady, len(sent), timeout=20)]
    assert got == sent, "the steady subscriber got %d of %d messages; first difference %r" % (
        len(got), len(sent), next(((i, g, w) for i, (g, w) in enumerate(zip(got, sent)) if g != w), None))
    with a.client() as ca, b.client() as cb:
        wait_publish_count(ca, ch, 1, what="the count to settle back to the steady subscriber (from A)")
        wait_publish_count(cb, ch, 1, what="the count to settle back to the steady subscriber (from B)")


# ---------------------------------------------------------------- ZooKeeper cost

def test_unlistened_channel_costs_no_zookeeper_write(make_zk, make_proxy, make_zkresp):
    """On a ZooKeeper of its own (no other writer): PUBLISH through A to a
    channel with subscribers only on A, and to a channel nobody listens to,
    changes neither the server's last zxid nor sends a write from A.  After
    B subscribes, publishes do go through ZooKeeper (zxid advances) and
    arrive at B; after B unsubscribes they cost nothing again."""
    zk2 = make_zk()
    proxy = make_proxy(zk2)
    a = make_zkresp(zk_target=proxy)
    b = make_zkresp(zk_target=zk2, root=a.root)
    p = harness.unique("cost") + ":"
    ch = p + "local"
    sa = subscribe(a, ch)
    sa2 = subscribe(a, p + "loc*", pattern=True)
    ca = a.client()
    assert ca.cmd("PUBLISH", ch, "warm") == b":2\r\n"
    assert len(read_messages(sa, 1)) == 1 and len(read_messages(sa2, 1)) == 1

    z0 = settled_zxid(zk2)
    w0 = proxy.write_requests()
    for i in range(100):
        assert ca.cmd("PUBLISH", ch, "m%d" % i) == b":2\r\n"
        assert ca.cmd("PUBLISH", p + "nobody", "m%d" % i) == b":0\r\n"
    got = read_messages(sa, 100)
    assert [m[2] for m in got] == [b"m%d" % i for i in range(100)]
    assert len(read_messages(sa2, 100)) == 100
    time.sleep(0.3)
    assert proxy.write_requests() == w0, "A sent ZooKeeper writes for local-only publishes: %r" % (
        proxy.snapshot()["requests"],)
    assert zxid(zk2) == z0, "the zxid moved from %#x to %#x during 200 publishes nobody elsewhere listens to" % (
        z0, zxid(zk2))

    # B subscribes: now a publish must cross through ZooKeeper.
    sb = subscribe(b, ch)
    wait_publish_count(ca, ch, 3)
    assert nothing_more(sb, 0.3) == []
    read_messages(sa, 10**6, timeout=0.3)     # probes and nothing else
    read_messages(sa2, 10**6, timeout=0.3)
    z1 = settled_zxid(zk2)
    w1 = proxy.write_requests()
    for i in range(20):
        assert ca.cmd("PUBLISH", ch, "x%d" % i) == b":3\r\n"
    got = read_messages(sb, 20)
    assert [m[1:] for m in got] == [(ch.encode(), b"x%d" % i) for i in range(20)]
    assert zxid(zk2) > z1, "publishes B listens to did not go through ZooKeeper (zxid %#x)" % z1
    assert proxy.write_requests() > w1

    # B leaves: free again.
    sb.send(encode("UNSUBSCRIBE"))
    sb.read_reply()
    wait_publish_count(ca, ch, 2, what="B's unsubscribe to be known to A")
    z2 = settled_zxid(zk2)
    w2 = proxy.write_requests()
    for i in range(50):
        assert ca.cmd("PUBLISH", ch, "y%d" % i) == b":2\r\n"
    time.sleep(0.3)
    assert zxid(zk2) == z2 and proxy.write_requests() == w2, \
        "publishes kept writing to ZooKeeper after the other sidecar's subscriber left"


def test_messages_do_not_accumulate_in_zookeeper(zkresp_pair, kz):
    """Message garbage is collected: the znodes under the root do not grow
    with the number of messages published across sidecars."""
    a, b = zkresp_pair
    p = harness.unique("gc") + ":"
    ch = p + "c"
    sb = subscribe(b, ch)
    ca = a.client()
    wait_publish_count(ca, ch, 1)

    def publish(n, tag):
        for i in range(n):
            assert ca.cmd("PUBLISH", ch, "%s%d" % (tag, i)) == b":1\r\n"
        assert len(read_messages(sb, n)) == n

    publish(20, "a")
    base = len(harness.all_paths(kz, a.root))
    publish(300, "b")
    wait_for(lambda: len(harness.all_paths(kz, a.root)) <= base + 20, 15, 0.2,
             "the znodes under the root to stay bounded after 300 more messages (had %d)" % base)


# ---------------------------------------------------------------- scripts

# Each writes a key, publishes, then fails.  A script that raises (error(),
# or a redis.call that fails) commits nothing (README, "Design notes"), so
# its message must not exist either.  One that returns redis.error_reply
# ends normally, its writes committed as in Redis: its message then follows
# its writes, once.
FAILING_SCRIPTS = {
    "error": ("redis.call('set', KEYS[2], 'v') redis.call('publish', KEYS[1], ARGV[1]) error('boom')", False),
    "failing_call": ("redis.call('set', KEYS[2], 'v') redis.call('publish', KEYS[1], ARGV[1]) "
                     "redis.call('incr', KEYS[2])", False),
    "error_reply": ("redis.call('set', KEYS[2], 'v') redis.call('publish', KEYS[1], ARGV[1]) "
                    "return redis.error_reply('boom')", None),
}


@pytest.mark.parametrize("name", sorted(FAILING_SCRIPTS))
def test_script_publish_is_part_of_the_commit(zkresp_pair, name):
    """A script's publish is delivered if and only if its writes commit: a
    script that publishes and then raises delivers nothing, on the other
    sidecar nor on its own; a committed one delivers exactly once."""
    body, committed = FAILING_SCRIPTS[name]
    a, b = zkresp_pair
    p = harness.unique("sp") + ":"
    ch, key = p + "c", p + "k"
    sb = subscribe(b, ch)
    sa = subscribe(a, ch)
    ca = a.client()
    wait_publish_count(ca, ch, 2)
    assert nothing_more(sb, 0.2) == [] and nothing_more(sa, 0.1) == []
    r = ca.cmd("EVAL", body, "2", ch, key, "failed-script")
    assert r.startswith(b"-"), "the script was meant to fail: %r" % r
    wrote = ca.cmd("EXISTS", key) == b":1\r\n"
    if committed is not None:
        assert wrote == committed, "a script that raised had its SET committed (%r)" % r
    r = ca.cmd("EVAL", "local n = redis.call('publish', KEYS[1], ARGV[1]) return n", "1", ch, "committed")
    assert r == b":2\r\n", "a committed script's publish counted %r" % r
    assert ca.cmd("PUBLISH", ch, "marker") == b":2\r\n"
    want = ([b"failed-script"] if wrote else []) + [b"committed", b"marker"]
    for side, s in (("B", sb), ("A", sa)):
        got = [m[2] for m in read_messages(s, len(want))]
        got += [message_of(x)[2] if message_of(x) else x for x in nothing_more(s, 0.3)]
        assert got == want, "%s received %r; the failed script's writes were %s" % (
            side, got, "committed" if wrote else "not committed")


def test_script_publish_exactly_once_under_contention(zkresp_pair):
    """Scripts on both sidecars increment one key and publish the new value:
    contention makes some of them re-run, yet every committed script's
    message arrives exactly once on both sidecars, and only those."""
    a, b = zkresp_pair
    p = harness.unique("spc") + ":"
    ch, key = p + "c", p + "n"
    sa, sb = subscribe(a, ch), subscribe(b, ch)
    with a.client() as ca, b.client() as cb:
        wait_publish_count(ca, ch, 2)
        wait_publish_count(cb, ch, 2)
    nothing_more(sa, 0.2)
    nothing_more(sb, 0.2)
    script = "local v = redis.call('incr', KEYS[1]) redis.call('publish', KEYS[2], ARGV[1] .. ':' .. v) return v"
    results, errors = [], []

    def worker(z, name):
        with z.client(timeout=30) as c:
            for i in range(25):
                r = c.cmd("EVAL", script, "2", key, ch, "%s-%d" % (name, i))
                if r.startswith(b":"):
                    results.append(("%s-%d" % (name, i), int(r[1:-2])))
                elif not r.startswith(b"-TRYAGAIN"):
                    errors.append(r)
    ts = [threading.Thread(target=worker, args=(z, "%s%d" % (n, k)))
          for z, n in ((a, "A"), (b, "B")) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    assert not errors, errors[:3]
    values = sorted(v for _, v in results)
    assert values == list(range(1, len(values) + 1)), "INCR values are not 1..n: %r" % values[:20]
    want = sorted(("%s:%d" % (tag, v)).encode() for tag, v in results)
    for side, s in (("A", sa), ("B", sb)):
        got = [m[2] for m in read_messages(s, len(want), timeout=20)]
        got += [message_of(x)[2] for x in nothing_more(s, 0.5) if message_of(x)]
        assert sorted(got) == want, "%s: %d messages for %d committed scripts; duplicates %r, missing %r, extra %r" % (
            side, len(got), len(want), sorted({g for g in got if got.count(g) > 1})[:5],
            sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5])
