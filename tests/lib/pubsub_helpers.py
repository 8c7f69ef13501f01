"""Helpers shared by the pub/sub tests (test_27, test_65)."""
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
