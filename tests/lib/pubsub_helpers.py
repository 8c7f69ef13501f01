"""Helpers shared by the pub/sub tests (test_27, test_65)."""
import time

from harness import wait_for
from resp import decode_one, encode


def subscribe(z, *channels, pattern=False, proto=2):
    """A RawClient of zkresp z subscribed (or pattern-subscribed) to
    channels, their confirmations read."""
    c = z.client(timeout=10)
    if proto == 3:
        assert c.cmd("HELLO", "3").startswith(b"%")
    c.send(encode("PSUBSCRIBE" if pattern else "SUBSCRIBE", *channels))
    for ch in channels:
        v = decode_one(c.read_reply())
        assert v[0] == (b"psubscribe" if pattern else b"subscribe") and v[1] == ch.encode(), v
    return c


def wait_publish_count(client, channel, want, timeout=15.0, what=None):
    """Publishes probe messages ("probe") through client (a RawClient)
    until PUBLISH answers want: the other sidecars' interest is known."""
    last = []

    def ok():
        r = client.cmd("PUBLISH", channel, "probe")
        last[:] = [r]
        return r == b":%d\r\n" % want
    try:
        wait_for(ok, timeout, 0.05, what or "PUBLISH %s to count %d subscribers" % (channel, want))
    except AssertionError as e:
        raise AssertionError("%s; last reply %r" % (e, last[0] if last else None))


def message_of(raw):
    """(kind, fields...) of a message or pmessage frame, RESP2 or RESP3,
    or None for any other frame."""
    v = decode_one(raw)
    if isinstance(v, list) and v and v[0] in (b"message", b"pmessage", b"smessage"):
        return tuple(v)
    return None


def read_messages(c, n, timeout=10.0, skip_probes=True, prefix=b""):
    """The next n messages (tuples, see message_of) on a subscribed
    RawClient whose payload starts with prefix; probes are skipped; other
    frames are an error."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            raw = c.read_reply(timeout=remaining)
        except Exception:
            break
        m = message_of(raw)
        assert m is not None, "unexpected frame on a subscribed connection: %r" % raw
        if skip_probes and m[-1].startswith(b"probe"):
            continue
        if m[-1].startswith(prefix):
            out.append(m)
    return out


def payloads(c, n, timeout=10.0, prefix=b""):
    """Payloads of the next n non-probe messages on a subscribed RawClient
    whose payload starts with prefix (others are skipped)."""
    return [m[-1] for m in read_messages(c, n, timeout, prefix=prefix)]
