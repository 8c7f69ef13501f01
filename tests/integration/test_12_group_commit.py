"""Tier 12: group commit.  The writes of different commands submitted in one
turn of the loop go to ZooKeeper as one multi (sidecar/zk.c).  Each command
still answers as if its write had gone alone: all land together, a write
that fails in a group fails alone while the others land, and a group whose
reply is lost is resolved member by member.

ZooKeeper itself shows the grouping: the creates of one multi are one
transaction, so their nodes share a czxid."""

from harness import key_stat
from resp import encode


def _pipeline(c, cmds, timeout=30):
    """Sends cmds in one write, so that zkresp reads them together (one
    turn of its loop, however busy the machine), and reads the replies."""
    c.send(b"".join(encode(*args) for args in cmds))
    return [c.read_reply(timeout=timeout) for _ in cmds]


def _owned(kz, root, keys, sid):
    """key -> czxid of the keys whose node the session owns with the key's
    token; asserts every key is such a node."""
    out = {}
    for k in keys:
        data, st = key_stat(kz, root, k)
        assert st is not None, "no node for %r" % k
        assert st.ephemeralOwner == sid, (k, hex(st.ephemeralOwner), hex(sid))
        assert ("tok-" + k).encode() in data, (k, data)
        out[k] = st.czxid
    return out


def _groups(z):
    i = z.info("zookeeper")
    return int(i["zk_groups"]), int(i["zk_grouped_requests"]), int(i["zk_group_resends"])


KEYS = ["grp:%03d" % i for i in range(300)]


def test_pipelined_locks_are_committed_in_groups(make_zkresp, kz):
    a = make_zkresp()
    sid = a.session_id()
    c = a.client()
    g0, m0, _ = _groups(a)
    replies = _pipeline(c, [("SET", k, "tok-" + k, "NX", "PX", "30000") for k in KEYS])
    assert replies == [b"+OK\r\n"] * len(KEYS)
    czxids = _owned(kz, a.root, KEYS, sid)
    # Fewer transactions than creates: several locks per multi.
    assert len(set(czxids.values())) <= len(KEYS) // 4, sorted(set(czxids.values()))
    g1, m1, _ = _groups(a)
    assert g1 > g0 and m1 - m0 >= len(KEYS) // 2, (g0, m0, g1, m1)
    # A wrong token releases nothing; the releases are grouped too.
    assert _pipeline(c, [("DELIFEQ", k, "nope") for k in KEYS[::2]]) == [b":0\r\n"] * 150
    replies = _pipeline(c, [("DELIFEQ", k, "tok-" + k) for k in KEYS[1::2]])
    assert replies == [b":1\r\n"] * 150
    for i, k in enumerate(KEYS):
        assert (key_stat(kz, a.root, k)[1] is None) == (i % 2 == 1), k
    assert _groups(a)[1] - m1 >= 150 // 2


def test_without_grouping_every_create_is_its_own_transaction(make_zkresp, kz):
    a = make_zkresp(extra=["--zk-group-max", "0"])
    sid = a.session_id()
    replies = _pipeline(a.client(), [("SET", k, "tok-" + k, "NX", "PX", "30000") for k in KEYS])
    assert replies == [b"+OK\r\n"] * len(KEYS)
    czxids = _owned(kz, a.root, KEYS, sid)
    assert len(set(czxids.values())) == len(KEYS)
    assert _groups(a)[:2] == (0, 0)


def test_a_write_failing_in_a_group_fails_alone(make_zkresp, kz):
    """Every third key is held through sidecar B: A's creates of those fail
    (NODEEXISTS) inside groups with creates that would succeed.  The failing
    ones answer nil, the others are sent again alone and answer OK."""
    a = make_zkresp()
    b = make_zkresp(root=a.root)
    held = [k for i, k in enumerate(KEYS) if i % 3 == 0]
    assert _pipeline(b.client(), [("SET", k, "b-" + k, "NX", "PX", "30000") for k in held]) == \
        [b"+OK\r\n"] * len(held)
    replies = _pipeline(a.client(), [("SET", k, "tok-" + k, "NX", "PX", "30000") for k in KEYS])
    for i, (k, r) in enumerate(zip(KEYS, replies)):
        assert r == (b"$-1\r\n" if i % 3 == 0 else b"+OK\r\n"), (k, r)
    free = [k for i, k in enumerate(KEYS) if i % 3 != 0]
    _owned(kz, a.root, free, a.session_id())
    b_sid = b.session_id()
    for k in held:
        data, st = key_stat(kz, a.root, k)
        assert st.ephemeralOwner == b_sid and ("b-" + k).encode() in data, k
    assert _groups(a)[2] > 0, "no group failed: the test did not exercise the resend"


def test_a_lost_group_reply_is_resolved_for_every_member(make_proxy, make_zkresp, zk, kz):
    """The multi carrying a group executes but its reply is lost and the
    connection cut: every member's outcome is unknown, each is resolved by
    reading its node, and all answer OK."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=6000, request_timeout=5000)
    sid = a.session_id()
    c = a.client()
    proxy.drop_next_reply(frozenset({"multi"}))
    replies = _pipeline(c, [("SET", k, "tok-" + k, "NX", "PX", "30000") for k in KEYS])
    assert proxy.wait_dropped(0), "no multi was sent (requests: %r)" % proxy.snapshot()
    assert replies == [b"+OK\r\n"] * len(KEYS)
    _owned(kz, a.root, KEYS, sid)
    assert a.session_id() == sid
    # The locks are held from the cache as usual: released with one request each.
    assert _pipeline(c, [("DELIFEQ", k, "tok-" + k) for k in KEYS]) == [b":1\r\n"] * len(KEYS)
    for k in KEYS:
        assert key_stat(kz, a.root, k)[1] is None, k

