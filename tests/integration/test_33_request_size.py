"""Tier 33: one ZooKeeper request never exceeds what ZooKeeper takes
(issue 15, item 13).

A ZooKeeper server drops the connection of a client whose request is longer
than its jute.maxbuffer (1 MiB by default), without answering.  Inputs each
within zkresp's caps can add up to such a request: a script writing five
values of 250 KB (one multi), a DEL of 400 long keys.  Before, the request
was lost with the connection, sent again after the reconnect, lost again,
and the client got -TRYAGAIN after a second or more and a dozen reconnects.

Now every request's size is computed before it is sent (sidecar/zk.c):
what must be atomic (a script's commit) and does not fit is refused up
front with an error naming the limit, nothing written; a DEL, whose keys
are deleted independently, is split into multis that fit; and if a server
takes less than --zk-max-request, the sidecar stops sending requests that
large after the second drop instead of reconnecting over them forever.
"""

import threading

import harness
from harness import RawClient, keyenc, key_stat, wait_for
from resp import Err, encode

LIMIT_ERR = "exceeds ZooKeeper's request limit of"


def _disconnects(z):
    """Times zkresp's session lost its connection, from its log (one
    zk.disconnected line each), so that the count means the same on any
    build."""
    return z.log().count(b"event=zk.disconnected")


def _err_text(reply):
    assert isinstance(reply, Err), reply if not isinstance(reply, bytes) else reply[:80]
    return str(reply)


class _Bystander:
    """Another client taking and releasing a lock in a loop while the test
    runs; every answer must be the right one (no error, no TRYAGAIN)."""

    def __init__(self, z, key):
        self.z, self.key = z, key
        self.stop = threading.Event()
        self.rounds = 0
        self.errors = []
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        with RawClient(self.z.port, timeout=10) as c:
            while not self.stop.is_set():
                tok = "tok-%d" % self.rounds
                r1 = c.call("SET", self.key, tok, "NX", "PX", "30000")
                r2 = c.call("GET", self.key)
                r3 = c.call("DELIFEQ", self.key, tok)
                if (r1, r2, r3) != (b"OK", tok.encode(), 1):
                    self.errors.append((r1, r2, r3))
                self.rounds += 1

    def __enter__(self):
        self.t.start()
        wait_for(lambda: self.rounds > 0 or self.errors, 20, what="the bystander's first lock")
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(20)
        assert not self.t.is_alive()


WRITE_FIVE = ("for i = 1, #KEYS do redis.call('SET', KEYS[i], string.rep(ARGV[1], 250000)) end "
              "return #KEYS")


def test_a_script_over_the_limit_is_refused_up_front(zkresp, kz):
    keys = ["big:{s}:%d" % i for i in range(5)]
    before = _disconnects(zkresp)
    with _Bystander(zkresp, "lock:bystander-eval") as b, zkresp.client(timeout=30) as c:
        for _ in range(3):
            r = c.call("EVAL", WRITE_FIVE, "5", *keys, "x")
            text = _err_text(r)
            assert LIMIT_ERR in text and "983040 bytes" in text, text
            assert "nothing was written" in text, text
        rounds_before = b.rounds
        wait_for(lambda: b.rounds > rounds_before, 20, what="the bystander to go on")
    assert not b.errors, b.errors
    assert _disconnects(zkresp) == before, zkresp.log_tail(40)
    for k in keys:
        assert key_stat(kz, zkresp.root, k)[1] is None, k
    info = zkresp.info("zookeeper")
    assert int(info["zk_requests_too_large"]) >= 3
    assert info["zk_max_request"] == "983040"
    # what fits in one request still commits atomically: three of them
    with zkresp.client(timeout=30) as c:
        assert c.call("EVAL", WRITE_FIVE, "3", *keys[:3], "y") == 3
        assert len(c.call("GET", keys[2])) == 250000
    assert _disconnects(zkresp) == before


def test_del_of_many_long_keys_is_split_into_requests_that_fit(zkresp, kz):
    # 400 keys of 1000 bytes, '/' encoded as %2F: 3 KB of path each, 1.2 MB
    # of deletes in all
    keys = ["dl:%03d:" % i + "/" * 993 for i in range(400)]
    with zkresp.client(timeout=30) as c:
        c.send(b"".join(encode("SET", k, "v" * 1000) for k in keys))
        for _ in keys:
            assert c.read_reply(timeout=30) == b"+OK\r\n"
    assert len(kz.get_children(zkresp.root + "/k")) >= 400
    before = _disconnects(zkresp)
    with _Bystander(zkresp, "lock:bystander-del") as b, zkresp.client(timeout=30) as c:
        assert c.call("DEL", *(keys + ["dl:missing", keys[0]])) == 400
        assert c.call("EXISTS", *keys) == 0
        assert c.call("DEL", *keys) == 0
    assert not b.errors, b.errors
    assert _disconnects(zkresp) == before, zkresp.log_tail(40)
    left = [n for n in kz.get_children(zkresp.root + "/k") if n.startswith(keyenc.encode("dl:"))]
    assert left == [], left[:3]


def test_a_script_deleting_many_long_keys_stays_atomic(zkresp, kz):
    """Inside a script nothing is split: the whole commit is refused and
    every key stays."""
    keys = ["sd:{x}:%03d:" % i + "/" * 990 for i in range(400)]
    with zkresp.client(timeout=30) as c:
        c.send(b"".join(encode("SET", k, "v") for k in keys))
        for _ in keys:
            assert c.read_reply(timeout=30) == b"+OK\r\n"
        before = _disconnects(zkresp)
        r = c.call("EVAL", "return redis.call('DEL', unpack(KEYS))", str(len(keys)), *keys)
        assert LIMIT_ERR in _err_text(r)
        assert c.call("EXISTS", *keys) == 400
        assert c.call("DEL", *keys) == 400
    assert _disconnects(zkresp) == before, zkresp.log_tail(40)


def test_an_oversized_value_is_refused_up_front(make_zkresp, kz):
    z = make_zkresp(extra=["--max-value-len", "900k", "--zk-max-request", "300k"])
    assert z.info("zookeeper")["zk_max_request"] == str(300 * 1024)
    before = _disconnects(z)
    with _Bystander(z, "lock:bystander-set") as b, z.client(timeout=30) as c:
        r = c.call("SET", "bigval", "z" * 400000)
        text = _err_text(r)
        assert LIMIT_ERR in text and "307200 bytes" in text, text
        # over --max-value-len: its own error, as before
        assert _err_text(c.call("SET", "bigval", "z" * 1000000)) == "ERR value too large"
        assert c.call("SET", "bigval", "z" * 200000) == b"OK"
        assert LIMIT_ERR in _err_text(c.call("SET", "bigval", "z" * 400000, "XX"))
        assert len(c.call("GET", "bigval")) == 200000
    assert not b.errors, b.errors
    assert _disconnects(z) == before, z.log_tail(40)
    data, _ = key_stat(kz, z.root, "bigval")
    assert data is not None and len(data) < 300 * 1024


def test_a_server_that_takes_less_is_not_reconnected_over_forever(make_zk, make_zkresp, kz_factory):
    """A ZooKeeper whose jute.maxbuffer is below --zk-max-request drops the
    connection over a large request; after the second such drop the sidecar
    refuses requests that large (the error names the limit it learned) and
    never reconnects over them again."""
    zk = make_zk(jvm_flags="-Djute.maxbuffer=200000")
    z = make_zkresp(zk, extra=["--max-value-len", "900k"], session_timeout=4000, request_timeout=3000)
    with z.client(timeout=30) as c:
        assert c.call("SET", "small", "v") == b"OK"
        r = c.call("SET", "big", "z" * 300000)
        assert isinstance(r, Err), r
        after_first = _disconnects(z)
        assert after_first <= 2, z.log_tail(60)
        learned = int(z.info("zookeeper")["zk_max_request"])
        assert 200000 < learned < 300000 + 1000, learned
        for _ in range(5):
            text = _err_text(c.call("SET", "big", "z" * 300000))
            assert LIMIT_ERR in text and ("%d bytes" % learned) in text, text
        assert _disconnects(z) == after_first, z.log_tail(60)
        assert c.call("SET", "mid", "z" * 150000) == b"OK"
        assert c.call("GET", "small") == b"v"
    assert b"event=zk.request_dropped" in z.log()
    assert key_stat(kz_factory(zk), z.root, "big")[1] is None


def test_a_learned_limit_lasts_ten_minutes(make_zk, make_zkresp, tmp_path):
    """The limit learned from two drops holds for 10 minutes, not for the
    process's life (two unlucky losses in a leader's failover would shrink
    it for good): then --zk-max-request is in force again and a large
    request is sent again.  libfaketime moves the sidecar's clocks (the
    monotonic one too) 11 minutes on."""
    stamp = tmp_path / "stamp"
    stamp.write_text("+0\n")
    env = harness.faketime_env(stamp, monotonic=True)
    zk = make_zk(jvm_flags="-Djute.maxbuffer=200000")
    z = make_zkresp(zk, extra=["--max-value-len", "900k"], session_timeout=4000, request_timeout=3000,
                    env=env)
    with z.client(timeout=30) as c:
        assert c.call("SET", "small", "v") == b"OK"
        assert isinstance(c.call("SET", "big", "z" * 300000), Err)
        learned = int(z.info("zookeeper")["zk_max_request"])
        assert learned < 300000 + 1000, learned
    stamp.write_text("+660\n")
    wait_for(lambda: int(z.info("zookeeper")["zk_max_request"]) == 983040, 10, 0.2,
             "the configured limit to be back")
    with z.client(timeout=30) as c:
        wait_for(lambda: c.call("SET", "small", "w") == b"OK", 20, 0.2, "the sidecar to serve again")
        before = _disconnects(z)
        # sent again, dropped twice again: learned again (the command's
        # own retry may answer with the limit)
        assert isinstance(c.call("SET", "big", "z" * 300000), Err)
        assert _disconnects(z) > before, "the large request was not sent again: " + z.log_tail(40)
        assert z.log().count(b"event=zk.request_dropped") == 2, z.log_tail(40)
        assert int(z.info("zookeeper")["zk_max_request"]) < 300000 + 1000
        assert c.call("GET", "small") == b"w"
