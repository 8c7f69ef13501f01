"""Tier 26: pub/sub sequences against redis-server 7.0 and one zkresp, raw
frames compared byte for byte, in RESP2 and in RESP3 (issue 4).

A pub/sub sequence needs several connections (subscribers and a publisher)
and a step may produce several frames (SUBSCRIBE a b answers twice) or none
that was asked for (a message arriving on a subscriber).  So the runner here
is not differential.run: a sequence declares its connections, every step
names one of them and says how many frames to read from it after sending
(or without sending anything: a message).  The same sequence runs against
both servers concurrently, each on its own connections, and every frame is
compared.  At the end every connection still open is drained (anything
unexpected that arrived, and whether the server closed it, is compared too),
then RESET so nothing stays subscribed on the shared servers.

Where Redis's order is its hash table's order (UNSUBSCRIBE with no argument,
pmessages of one message matching several patterns of one connection,
PUBSUB CHANNELS) the frames, or the array's elements, are compared sorted.

Channel and key names written "@name" get a per-run prefix; patterns are
written "@n.*" so they only ever match this run's channels.
"""

import shlex
import socket
import time

import pytest

import harness
from differential import run_both
from resp import RawClient, encode, frame_end, ConnectionClosed, Incomplete, elements as _elements

READ_TIMEOUT = 3.0       # a message that does not arrive within this is missing
DRAIN_WAIT = 0.25        # how long to listen for unexpected frames at the end
NO_FRAME = b"<no frame within %.0fs>" % READ_TIMEOUT


# ---------------------------------------------------------------- steps

class C:
    """Send a command on connection `conn`, then read `n` frames from it
    (n may be a dict by the connection's protocol: {2: 1, 3: 2}).
    unordered: compare the n frames as a multiset.  sort_array: the single
    reply is an array whose elements are compared as a multiset."""

    def __init__(self, conn, cmd, n=1, unordered=False, sort_array=False):
        self.conn, self.cmd, self.n = conn, cmd, n
        self.unordered, self.sort_array = unordered, sort_array


class pipeline(tuple):
    """Several commands sent in one write."""

    def __new__(cls, *cmds):
        return tuple.__new__(cls, cmds)


class R(C):
    """Read n frames (messages) from `conn` without sending anything."""

    def __init__(self, conn, n=1, unordered=False):
        C.__init__(self, conn, None, n, unordered)


class Sleep:
    def __init__(self, ms):
        self.ms = ms


def _args(cmd, prefix):
    if isinstance(cmd, str):
        cmd = shlex.split(cmd)
    out = []
    for a in cmd:
        if isinstance(a, str):
            a = a.encode()
        if a.startswith(b"@") and len(a) > 1:
            a = prefix.encode() + a[1:]
        out.append(a)
    return out


def _describe(step):
    if isinstance(step, Sleep):
        return "(sleep %d ms)" % step.ms
    if step.cmd is None:
        return "[%s] read %r" % (step.conn, step.n)
    if isinstance(step.cmd, bytes):
        return "[%s] inline %r" % (step.conn, step.cmd[:80])
    if isinstance(step.cmd, pipeline):
        return "[%s] pipeline %s" % (step.conn, " | ".join(step.cmd))
    cmd = step.cmd if isinstance(step.cmd, str) else " ".join(
        a if isinstance(a, str) else repr(a[:40]) for a in step.cmd)
    return "[%s] %s" % (step.conn, cmd)


SUB_KINDS = {b"$%d\r\n%s\r\n" % (len(k), k) for k in (
    b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe", b"sunsubscribe")}


def _unordered(frames):
    """Frames whose order among themselves is Redis's hash order.  The
    (un)subscribe confirmations keep their kinds and counts in order (the
    counts always run down or up one by one) with the channel masked; the
    channels, and any other frames, are compared as a multiset."""
    shape, bag = [], []
    for f in frames:
        split = _elements(f) if f.startswith((b"*", b">")) else None
        if split and len(split[1]) == 3 and split[1][0] in SUB_KINDS:
            head, (kind, chan, count) = split
            shape.append(head + kind + b"<channel>" + count)
            bag.append(chan)
        else:
            shape.append(b"<frame>")
            bag.append(f)
    return shape + [b"multiset:"] + sorted(bag)


def _sorted_array(raw):
    """The elements of an array reply, sorted (other replies unchanged)."""
    split = _elements(raw) if raw[:1] in (b"*", b"~") else None
    if split is None:
        return raw
    head, elems = split
    return head + b"".join(sorted(elems))


def _drain(c, wait):
    """Whatever arrives within `wait` seconds, as frames, plus b'<closed>'
    if the server closed the connection."""
    out = []
    deadline = time.monotonic() + wait
    while True:
        try:
            end = frame_end(c.buf, 0)
            out.append(bytes(c.buf[:end]))
            del c.buf[:end]
            continue
        except Incomplete:
            pass
        if c.eof:
            if c.buf:
                out.append(b"<partial %r>" % bytes(c.buf))
            out.append(b"<closed>")
            return out
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return out
        c.sock.settimeout(remaining)
        try:
            chunk = c.sock.recv(1 << 20)
        except socket.timeout:
            return out
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            c.eof = True
        else:
            c.buf += chunk


def run_seq(port, conns, steps, proto, prefix):
    """Runs one sequence on its own connections; returns a list with, per
    step, the list of frames read (None for sleeps), then per connection
    (in sorted name order) its drained leftovers."""
    clients = {}
    protos = {}
    out = []
    try:
        for name in sorted(conns):
            p = conns[name] or proto
            c = RawClient(port, timeout=READ_TIMEOUT)
            if p == 3:
                hello = c.cmd("HELLO", "3")
                if not hello.startswith(b"%"):
                    raise AssertionError("HELLO 3 answered %r on port %d" % (hello, port))
            clients[name] = c
            protos[name] = p
        for step in steps:
            if isinstance(step, Sleep):
                time.sleep(step.ms / 1000.0)
                out.append(None)
                continue
            c = clients[step.conn]
            frames = []
            try:
                if isinstance(step.cmd, pipeline):
                    c.send(b"".join(encode(*_args(cmd, prefix)) for cmd in step.cmd))
                elif isinstance(step.cmd, bytes):
                    # An inline command: "@" becomes the prefix.
                    c.send(step.cmd.replace(b"@", prefix.encode()))
                elif step.cmd is not None:
                    c.send(encode(*_args(step.cmd, prefix)))
                n = step.n[protos[step.conn]] if isinstance(step.n, dict) else step.n
                for _ in range(n):
                    frames.append(c.read_reply())
            except ConnectionClosed as e:
                if e.data:
                    frames.append(b"<partial %r>" % e.data)
                frames.append(b"<closed>")
            except socket.timeout:
                frames.append(NO_FRAME)
            except OSError as e:
                frames.append(("<%s>" % type(e).__name__).encode())
            if step.unordered:
                frames = _unordered(frames)
            if step.sort_array:
                frames = [_sorted_array(f) for f in frames]
            out.append(frames)
        time.sleep(DRAIN_WAIT)
        for name in sorted(conns):
            out.append(_drain(clients[name], 0.02))
    finally:
        for c in clients.values():
            try:
                if not c.eof:
                    c.send(encode("RESET"))
                    c.read_reply(timeout=2)
            except Exception:
                pass
            c.close()
    return out


def assert_same(ref_port, port, conns, steps, proto, prefix):
    ref, got = run_both(ref_port, port, steps, proto, prefix,
                        runner=lambda p: run_seq(p, conns, steps, proto, prefix))
    bad = []
    labels = [_describe(s) for s in steps] + ["[%s] (left over at the end)" % n for n in sorted(conns)]
    for i, label in enumerate(labels):
        if ref[i] != got[i]:
            bad.append("step %d: %s\n    redis-server: %r\n    zkresp:       %r" % (i, label, ref[i], got[i]))
    assert not bad, "RESP%d pub/sub frames differ from redis-server:\n%s" % (proto, "\n".join(bad))
    return ref


# ---------------------------------------------------------------- sequences

SEQUENCES = {}   # name -> (conns {name: proto or None for the parametrized one}, steps, protos)


def seq(name, conns, steps, protos=(2, 3)):
    assert name not in SEQUENCES
    SEQUENCES[name] = (conns, steps, protos)


S2 = {"s": None, "p": None}

seq("subscribe_publish_unsubscribe", S2, [
    C("s", "SUBSCRIBE @a @b @a", 3),
    C("p", "PUBLISH @a m1"), R("s"),
    C("p", ["PUBLISH", "@b", ""]), R("s"),
    C("p", ["PUBLISH", "@a", b"bin\x00\r\n\xff payload"]), R("s"),
    C("p", "PUBLISH @c nobody"),
    C("s", "UNSUBSCRIBE @a"),
    C("p", "PUBLISH @a gone"),
    C("p", "PUBLISH @b still"), R("s"),
    C("s", "UNSUBSCRIBE @zz"),
    C("s", "SUBSCRIBE @c @d", 2),
    C("s", "UNSUBSCRIBE", 3, unordered=True),
    C("s", "UNSUBSCRIBE"),
    C("p", "PUBLISH @b after"),
    C("p", "PUBLISH @c after"),
    C("s", "subscribe @e"),
    C("p", "publish @e lower"), R("s"),
    C("s", "UNSUBSCRIBE @e @e @f", 3),
])

seq("not_subscribed_unsubscribe", {"s": None}, [
    C("s", "UNSUBSCRIBE"),
    C("s", "PUNSUBSCRIBE"),
    C("s", "SUNSUBSCRIBE"),
    C("s", "UNSUBSCRIBE @x @y", 2),
    C("s", "PUNSUBSCRIBE @x* @y?", 2),
    C("s", "SUNSUBSCRIBE @x"),
    C("s", "GET @k"),
    C("s", "PING"),
    C("s", "SET @k v"),
    C("s", "GET @k"),
    C("s", "DEL @k"),
])

seq("subscribed_mode_rules", S2, [
    C("s", "SUBSCRIBE @a"),
    C("s", "PING"),
    C("s", "PING hello"),
    C("s", ["PING", ""]),
    C("s", "PING a b"),
    C("s", "GET @k"),
    C("s", "gEt @k"),
    C("s", "SET @k v"),
    C("s", "ECHO x"),
    C("s", "SELECT 0"),
    C("s", "CLIENT SETNAME x"),
    C("s", "EVAL 'return 1' 0"),
    C("s", "PUBSUB NUMSUB @a"),
    C("s", "PUBSUB NUMPAT"),
    C("s", "PUBSUB"),
    C("s", "PUBSUB FOO"),
    C("s", "FOO"),
    C("s", "FOO a b"),
    C("s", "GET"),
    C("s", "SET @k"),
    C("s", "SUBSCRIBE"),
    C("s", "PSUBSCRIBE"),
    C("s", "SSUBSCRIBE"),
    C("s", "PUBLISH @a"),
    C("s", "PUBLISH @a hi", {2: 1, 3: 2}),
    C("p", "PUBLISH @a from-p"), R("s"),
    C("s", "UNSUBSCRIBE"),
    C("s", "GET @k"),
    C("s", "PING"),
    C("s", "PUBLISH @a nobody"),
])

seq("subscribed_mode_with_patterns_only", S2, [
    C("s", "PSUBSCRIBE @p*"),
    C("s", "PING"),
    C("s", "GET @k"),
    C("p", "PUBLISH @px m"), R("s"),
    C("s", "PUNSUBSCRIBE @p*"),
    C("s", "GET @k"),
    C("s", "PING"),
])

seq("reset_in_subscribed_mode", S2, [
    C("s", "SUBSCRIBE @a @b", 2),
    C("s", "PSUBSCRIBE @a*"),
    C("s", "RESET"),
    Sleep(50),
    C("p", "PUBLISH @a after-reset"),
    C("s", "GET @k"),
    C("s", "PING"),
    C("s", "UNSUBSCRIBE"),
    C("s", "SUBSCRIBE @b"),
    C("p", "PUBLISH @b again"), R("s"),
    C("s", "RESET"),
    C("p", "PUBLISH @b again"),
    C("p", "PUBSUB NUMSUB @a @b", sort_array=False),
])

seq("quit_in_subscribed_mode", S2, [
    C("s", "SUBSCRIBE @a"),
    C("s", "PSUBSCRIBE @a*"),
    C("s", "QUIT", 2),
    Sleep(100),
    C("p", "PUBLISH @a after-quit"),
    C("p", "PUBSUB NUMSUB @a"),
])

seq("patterns", {"s": None, "t": None, "p": None}, [
    C("s", ["PSUBSCRIBE", "@n.*", "@n.?", "@x[ab]", "@h\\*"], 4),
    C("p", "PUBLISH @n.1 m"), R("s", 2, unordered=True),
    C("p", "PUBLISH @n.12 m"), R("s"),
    C("p", "PUBLISH @xa m"), R("s"),
    C("p", "PUBLISH @xc m"),
    C("p", "PUBLISH @h* star"), R("s"),
    C("p", "PUBLISH @hh no"),
    C("t", "SUBSCRIBE @n.1"),
    C("t", "PSUBSCRIBE @n.*"),
    C("p", "PUBLISH @n.1 m2"), R("s", 2, unordered=True), R("t", 2),
    C("s", "PUNSUBSCRIBE @n.*"),
    C("s", "PUNSUBSCRIBE @nomatch"),
    C("p", "PUBLISH @n.1 m3"), R("s"), R("t", 2),
    C("s", "PSUBSCRIBE @n.? @n.?", 2),
    C("s", "PUNSUBSCRIBE", 3, unordered=True),
    C("s", "PUNSUBSCRIBE"),
    C("t", "PUNSUBSCRIBE @n.*"),
    C("p", "PUBLISH @n.1 m4"), R("t"),
    C("t", "UNSUBSCRIBE"),
])

seq("publish_counts", {"s1": None, "s2": None, "s3": None, "p": None}, [
    C("s1", "SUBSCRIBE @a"),
    C("s2", "SUBSCRIBE @a @b", 2),
    C("s3", "PSUBSCRIBE @a* @?", 2),
    C("p", "PUBLISH @a m"), R("s1"), R("s2"), R("s3", 2, unordered=True),
    C("s1", "SUBSCRIBE @a"),
    C("p", "PUBLISH @a m"), R("s1"), R("s2"), R("s3", 2, unordered=True),
    C("p", "PUBLISH @b m"), R("s2"), R("s3"),
    C("p", "PUBLISH @ab m"), R("s3"),
    C("s2", "UNSUBSCRIBE @a"),
    C("p", "PUBLISH @a m"), R("s1"), R("s3", 2, unordered=True),
    C("s3", "PUNSUBSCRIBE @?"),
    C("p", "PUBLISH @a m"), R("s1"), R("s3"),
    C("p", "PUBSUB NUMSUB @a @b @c"),
    C("p", "PUBSUB NUMPAT"),
    C("s3", "PUNSUBSCRIBE"),
    C("p", "PUBSUB NUMPAT"),
])

seq("pubsub_introspection", {"a": None, "b": None, "p": None}, [
    C("p", "PUBSUB CHANNELS"),
    C("p", "PUBSUB NUMPAT"),
    C("a", "SUBSCRIBE @c1 @c2", 2),
    C("b", "SUBSCRIBE @c2 @c3", 2),
    C("b", "PSUBSCRIBE @c*"),
    C("a", "PSUBSCRIBE @c*"),
    C("p", "PUBSUB CHANNELS", sort_array=True),
    C("p", "PUBSUB CHANNELS @c*", sort_array=True),
    C("p", "PUBSUB CHANNELS @c[12]", sort_array=True),
    C("p", "PUBSUB CHANNELS @zz*"),
    C("p", "pubsub channels @c3"),
    C("p", "PUBSUB NUMSUB @c1 @c2 @c3 @c4 @c2"),
    C("p", "PUBSUB NUMSUB"),
    C("p", "PUBSUB NUMPAT"),
    C("p", "PUBSUB SHARDCHANNELS"),
    C("p", "PUBSUB SHARDNUMSUB @c1"),
    C("p", "PUBLISH @c2 x"), R("a", 2), R("b", 2),
    C("b", "UNSUBSCRIBE @c2"),
    C("p", "PUBSUB NUMSUB @c2"),
    C("p", "PUBSUB CHANNELS @c*", sort_array=True),
    C("a", "UNSUBSCRIBE", 2, unordered=True),
    C("b", "PUNSUBSCRIBE"),
    C("p", "PUBSUB CHANNELS @c*", sort_array=True),
    C("p", "PUBSUB NUMPAT"),
    C("a", "PUNSUBSCRIBE"),
    C("p", "PUBSUB NUMPAT"),
])

seq("pubsub_errors", {"p": None}, [
    C("p", "PUBSUB"),
    C("p", "PUBSUB FOO"),
    C("p", "PUBSUB CHANNELS a b"),
    C("p", "PUBSUB NUMPAT x"),
    C("p", "PUBLISH"),
    C("p", "PUBLISH @a"),
    C("p", "PUBLISH @a b c"),
    C("p", "SPUBLISH @a"),
    C("p", "SUBSCRIBE"),
    C("p", "PSUBSCRIBE"),
    C("p", "SSUBSCRIBE"),
    C("p", "PING a b"),
    C("p", "PING"),
])

seq("shard_channels", {"s": None, "p": None}, [
    C("s", "SSUBSCRIBE @s1 @s2 @s1", 3),
    C("p", "SPUBLISH @s1 m"), R("s"),
    C("p", "PUBLISH @s1 not-shard"),
    C("p", "PUBSUB SHARDCHANNELS @s*", sort_array=True),
    C("p", "PUBSUB SHARDNUMSUB @s1 @s2 @s3"),
    C("p", "PUBSUB CHANNELS @s*"),
    C("p", "PUBSUB NUMSUB @s1"),
    C("s", "SUBSCRIBE @s1"),
    C("p", "PUBLISH @s1 plain"), R("s"),
    C("p", "SPUBLISH @s2 shard"), R("s"),
    C("s", "SUNSUBSCRIBE @s1"),
    C("p", "SPUBLISH @s1 gone"),
    C("s", "SUNSUBSCRIBE"),
    C("s", "SUNSUBSCRIBE"),
    C("s", "PING"),
    C("s", "UNSUBSCRIBE"),
    C("s", "PING"),
])

seq("payloads", S2, [
    C("s", ["SUBSCRIBE", "@bin\x00ch", "@sp ace", "@crlf\r\n"], 3),
    C("p", ["PUBLISH", "@bin\x00ch", bytes(range(256))]), R("s"),
    C("p", ["PUBLISH", "@sp ace", "x" * 100000]), R("s"),
    C("p", ["PUBLISH", "@crlf\r\n", "\r\n"]), R("s"),
    C("s", ["PSUBSCRIBE", "@bin*"]),
    C("p", ["PUBLISH", "@bin\x00ch", b"\xff" * 3000]), R("s", 2),
])

seq("pipelined_and_inline", S2, [
    C("s", pipeline("SUBSCRIBE @a @b", "PING", "GET @k", "UNSUBSCRIBE @a @b", "GET @k", "PING"),
      8),
    C("s", pipeline("SUBSCRIBE @a", "PUBLISH @a self", "UNSUBSCRIBE", "PUBLISH @a self2"), {2: 4, 3: 5}),
    C("s", b"SUBSCRIBE @c\r\n"),
    C("s", b"PING\r\n"),
    C("s", b"PING inline\r\n"),
    C("s", b"GET @k\r\n"),
    C("p", "PUBLISH @c x"), R("s"),
    C("s", b"UNSUBSCRIBE\r\n"),
    C("s", b"GET @k\r\n"),
])

# RESP3 only: a connection mixes commands and subscriptions; its own
# publishes reach it as push frames, before the PUBLISH reply.
seq("resp3_mixing", {"c": 3, "p": 3}, [
    C("c", "SUBSCRIBE @a"),
    C("c", "GET @k"),
    C("c", "SET @k v"),
    C("c", "GET @k"),
    C("c", "PING"),
    C("c", "PING hello"),
    C("p", "PUBLISH @a from-p"), R("c"),
    C("c", "PUBLISH @a self", 2),
    C("c", "PSUBSCRIBE @a*"),
    C("c", "PUBLISH @a self2", 3),
    C("c", "PUBSUB NUMSUB @a"),
    C("c", "PUBSUB NUMPAT"),
    C("c", "HSET @h f 1"),
    C("c", "HGETALL @h"),
    C("p", "PUBLISH @ab p"), R("c"),
    C("c", "UNSUBSCRIBE"),
    C("c", "GET @k"),
    C("p", "PUBLISH @a p2"), R("c"),
    C("c", "PUNSUBSCRIBE"),
    C("c", "DEL @k @h"),
    C("p", "PUBLISH @a nobody"),
], protos=(3,))

seq("resp3_script_publish_to_self", {"c": 3}, [
    C("c", "SUBSCRIBE @a"),
    C("c", "EVAL \"return redis.call('publish', KEYS[1], 'z')\" 1 @a", 2),
    C("c", "UNSUBSCRIBE @a"),
], protos=(3,))

seq("resp2_and_resp3_subscribers", {"s2": 2, "s3": 3, "p": 2}, [
    C("s2", "SUBSCRIBE @a"),
    C("s3", "SUBSCRIBE @a"),
    C("s2", "PSUBSCRIBE @a*"),
    C("s3", "PSUBSCRIBE @a*"),
    C("p", "PUBLISH @a m"), R("s2", 2), R("s3", 2),
    C("s3", "SSUBSCRIBE @a"),
    C("p", "SPUBLISH @a sm"), R("s3"),
    C("s2", "PING"),
    C("s3", "PING"),
], protos=(2,))


CASES = [(n, p) for n in sorted(SEQUENCES) for p in SEQUENCES[n][2]]


@pytest.mark.parametrize("name,proto", CASES, ids=["%s-resp%d" % c for c in CASES])
def test_pubsub_same_as_redis(name, proto, zkr, redis_ref):
    conns, steps, _ = SEQUENCES[name]
    ref = assert_same(redis_ref.port, zkr().port, conns, steps, proto, harness.unique(name) + ":")
    # The reference itself must have answered every step (a sequence that
    # times out on redis-server is a broken test, not a comparison).
    for s, frames in zip(steps, ref):
        if frames:
            assert NO_FRAME not in frames, \
                "the reference timed out at %s: %r" % (_describe(s), frames)
