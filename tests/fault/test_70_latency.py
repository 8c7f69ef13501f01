"""Fault tier 70: ZooKeeper latency (RELIABILITY 17).

1000 pipelined mixed commands with latency injected between zkresp and
ZooKeeper: the replies are the ones redis-server gives, in request order
(commands answered locally, like PING and ECHO, must wait their turn
behind slower keyed ones)."""

import time

import harness
from harness import RawClient
from resp import encode


def _mixed(prefix, n=1000):
    reqs = []
    for i in range(n):
        k = "%sk%d" % (prefix, i % 23)
        op = i % 12
        reqs.append({
            0: ("SET", k, "v%d" % i, "PX", "600000"),
            1: ("GET", k),
            2: ("PING",),
            3: ("INCR", prefix + "ctr"),
            4: ("ECHO", "e%d" % i),
            5: ("EXISTS", k, prefix + "k0"),
            6: ("DEL", k),
            7: ("SET", k, "n%d" % i, "NX"),
            8: ("TYPE", k),
            9: ("GETDEL", k),
            10: ("INCRBY", prefix + "ctr2", str(i)),
            11: ("PERSIST", k),
        }[op])
    return reqs


def _run(port, reqs, proto):
    with RawClient(port, timeout=120) as c:
        if proto == 3:
            assert c.cmd("HELLO", "3").startswith(b"%")
        c.send(b"".join(encode(*r) for r in reqs))
        return [c.read_reply() for _ in reqs]


def test_pipelined_replies_in_order_under_latency(make_proxy, make_zkresp, zk, redis_ref):
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=6000, request_timeout=5000)
    proxy.delay(20)
    for proto in (2, 3):
        prefix = harness.unique("lat") + ":"
        reqs = _mixed(prefix)
        ref = _run(redis_ref.port, reqs, proto)
        t0 = time.monotonic()
        got = _run(a.port, reqs, proto)
        took = time.monotonic() - t0
        bad = [(i, reqs[i], ref[i], got[i]) for i in range(len(reqs)) if ref[i] != got[i]]
        assert not bad, "RESP%d: %d replies differ from redis-server, first: %r" % (proto, len(bad), bad[:3])
        assert proxy.command_requests() > 0
        harness.log("1000 pipelined commands with 20 ms ZooKeeper latency: %.2f s (RESP%d)" % (took, proto))


def test_many_pipelining_clients_under_latency(make_proxy, make_zkresp, zk, redis_ref):
    """Eight connections pipelining at once through a slow ZooKeeper link:
    each connection's replies stay in its own request order."""
    import threading
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=6000, request_timeout=5000)
    proxy.delay(10)
    results, errors = {}, []

    def one(n):
        try:
            prefix = harness.unique("mc%d" % n) + ":"
            reqs = _mixed(prefix, 200)
            results[n] = (_run(redis_ref.port, reqs, 2), _run(a.port, reqs, 2), reqs)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    for n, (ref, got, reqs) in results.items():
        bad = [(i, reqs[i], ref[i], got[i]) for i in range(len(reqs)) if ref[i] != got[i]]
        assert not bad, "connection %d: first differences %r" % (n, bad[:3])
