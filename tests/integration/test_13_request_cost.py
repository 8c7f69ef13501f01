"""Tier 13: what lock calls cost in ZooKeeper requests, counted at a proxy
in front of a real ZooKeeper, and that the shortcuts behind those counts
answer what reads would have.

- Presumed absence (README, "How a key lives"): Redisson's acquire of a
  fresh lock and its unlock with a fresh latch key send no read, one request
  each; a script that reads keys written through another sidecar, which it
  has never seen, still answers from their values.
- An owned key's expiry is one multi (a versioned delete with a check of
  the session guard), no read first.
- A sidecar receiving messages lists its inbox at most once per message
  and deletes the delivered ones in batches; the inbox ends up empty.
"""

import time

import harness
from harness import keyenc, wait_for
from pubsub_helpers import read_messages, subscribe, wait_publish_count
from resp import encode
from test_24_redisson import NULL, ONE, Redisson, acquire, integer, unlock


def _ops(proxy, key, root):
    """The ops of the requests that named key's node, in order."""
    return [op for op, _ in proxy.requests_containing(keyenc.node_path(root, key).encode())]


def _guarded(r, proxy, root):
    """Waits until a's lock pairs run from the owned-key cache: that needs
    the session guard, which a sidecar learns just after it starts."""
    def cached_pair():
        name = harness.unique("warm")
        assert acquire(r, name, 1) == NULL
        assert unlock(r, name, 1) == ONE
        return "getData" not in _ops(proxy, name, root)
    wait_for(cached_pair, 10, 0.1, "a lock pair from the owned-key cache")


def test_redisson_pair_sends_no_read(make_proxy, make_zkresp, zk):
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy)
    r = Redisson(a)
    _guarded(r, proxy, a.root)
    name = harness.unique("cost")
    assert acquire(r, name, 1) == NULL
    assert _ops(proxy, name, a.root) == ["create2"]
    request = harness.unique("req")
    latch = "redisson_unlock_latch:{%s}:%s" % (name, request)
    assert unlock(r, name, 1, request=request) == ONE
    assert _ops(proxy, latch, a.root) == ["multi"]
    assert _ops(proxy, name, a.root) == ["create2", "multi"]
    # The repeated request answers from its latch, and the lock is free.
    assert unlock(r, name, 1, request=request) == ONE
    assert acquire(r, name, 2) == NULL
    r.close()


def test_scripts_read_keys_they_presumed_absent(zkresp_pair):
    """Keys written through B, never seen by A: A's scripts presume them
    absent, find out and run again with real reads."""
    a, b = zkresp_pair
    p = harness.unique("seen") + ":"
    cb = b.client()
    for k, v in (("n", "41"), ("c", "10"), ("x", "1"), ("y", "2")):
        assert cb.cmd("SET", p + k, v) == b"+OK\r\n"
    ca = a.client()
    # a script that would fail on the guess
    assert ca.cmd("EVAL", "return redis.call('get', KEYS[1]) + 1", "1", p + "n") == b":42\r\n"
    # a write on the guess: its create fails, the re-run reads
    incr = "local v = tonumber(redis.call('get', KEYS[1]) or '0') redis.call('set', KEYS[1], v + 1) return v + 1"
    assert ca.cmd("EVAL", incr, "1", p + "c") == b":11\r\n"
    assert cb.cmd("GET", p + "c") == b"$2\r\n11\r\n"
    # a read-only script of two keys
    assert ca.cmd("EVAL", "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}",
                  "2", p + "x", p + "y") == b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    # Redisson's acquire of a lock held through B answers its PTTL
    rb, ra = Redisson(b), Redisson(a)
    lock = p + "lock"
    assert acquire(rb, lock, 1) == NULL
    integer(acquire(ra, lock, 2), lo=1, hi=30000)
    ra.close()
    rb.close()


def test_expiry_is_one_guarded_delete(make_proxy, make_zkresp, zk, kz):
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy)
    r = Redisson(a)
    _guarded(r, proxy, a.root)
    r.close()
    key = harness.unique("exp")
    c = a.client()
    assert c.cmd("SET", key, "v", "PX", "300") == b"+OK\r\n"
    path = keyenc.node_path(a.root, key)
    wait_for(lambda: kz.exists(path) is None, 10, 0.05, "the owner to delete the expired key")
    time.sleep(0.2)
    ops = _ops(proxy, key, a.root)
    assert ops[ops.index("create2") + 1:] == ["multi"], ops  # after the SET's
    frames = [f for op, f in proxy.requests_containing(path.encode()) if op == "multi"]
    assert b"/g/" in frames[0], "the expiry's multi checks no session guard"


def test_inbox_listed_once_per_message_and_emptied(make_proxy, make_zkresp, zk, kz):
    """B, behind the proxy, receives 100 messages published through A in
    one burst: no second listing per message (a delete per message would
    fire B's watch again), deletes in batches, and the inbox emptied."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=zk)
    b = make_zkresp(zk_target=proxy, root=a.root)
    ch = harness.unique("inbox")
    sb = subscribe(b, ch)
    ca = a.client()
    wait_publish_count(ca, ch, 1)
    before = proxy.snapshot()["requests"]
    n = 100
    ca.send(b"".join(encode("PUBLISH", ch, "m%d" % i) for i in range(n)))
    assert [ca.read_reply(timeout=30) for _ in range(n)] == [b":1\r\n"] * n
    assert [m[2] for m in read_messages(sb, n, timeout=30)] == [b"m%d" % i for i in range(n)]
    after = proxy.snapshot()["requests"]

    def sent(*ops):
        return sum(after.get(op, 0) - before.get(op, 0) for op in ops)
    lists, deletes = sent("getChildren2", "getChildren"), sent("delete", "multi")
    # a batch every 32 messages, and one 100 ms after a first delivery
    assert deletes <= n // 32 + 4, "delete requests for %d messages: %d" % (n, deletes)
    assert lists <= n + deletes + 2, "listings for %d messages: %d (%d batches)" % (n, lists, deletes)
    inboxes = a.root + "/ps/i"
    wait_for(lambda: all(not kz.get_children(inboxes + "/" + i) for i in kz.get_children(inboxes)),
             10, 0.1, "the inboxes to be emptied")
