"""Fault tier 60: the (one-server) ZooKeeper ensemble goes away
(RELIABILITY 15) or restarts.

While it is down, keyed requests fail within --zk-request-timeout with
-TRYAGAIN, liveness (PING) stays, readiness (INFO zk_state) goes; service
resumes by itself.  Down for less than the session timeout: the session and
its locks survive.  Down for longer: the sidecar counts its locks lost,
takes a new session and never resurrects them; a key its policy made
persistent, with a TTL, is still its to delete at the deadline.
"""

import threading
import time

import harness

REQ_MS = 1000


def _tryagain_within(c, budget_ms, *args):
    t0 = time.monotonic()
    r = c.cmd(*args, timeout=budget_ms / 1000.0 + 5)
    el = (time.monotonic() - t0) * 1000
    assert r.startswith(b"-TRYAGAIN"), "%s while ZooKeeper is down answered %r" % (args[0], r)
    assert el <= budget_ms + 750, "%s answered after %.0f ms (zk-request-timeout %d)" % (args[0], el, budget_ms)
    return r


def _liveness(c):
    t0 = time.monotonic()
    r = c.cmd("PING", timeout=2)
    took = time.monotonic() - t0
    assert r == b"+PONG\r\n", "PING while ZooKeeper is down answered %r" % r
    assert took < 0.5, "PING while ZooKeeper is down answered after %.2f s" % took


def test_zookeeper_down_shorter_than_session(make_zk, kz_factory, make_zkresp):
    zk2 = make_zk()
    # The outage includes ZooKeeper's JVM start (1-4 s on a loaded machine)
    # and may include the C client's whole handshake timeout, two thirds of
    # the session, when it connects while the JVM accepts but does not serve
    # yet (seen in CI: a 10 s session's lease ran out first under ASan, and
    # a 20 s session's once: connected 1-3 s into the outage, then 13.3 s of
    # handshake timeout, past the 18 s lease).  A 30 s session keeps both
    # inside the lease (session - 10%): 7 s + 20 s < 27 s.
    a = make_zkresp(zk_target=zk2, session_timeout=30000, request_timeout=REQ_MS)
    c = a.client()
    t_set = time.monotonic()
    assert c.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    sid = a.session_id()
    zk2.kill9()
    t_down = time.monotonic()
    _liveness(c)
    harness.wait_for(lambda: a.zk_state() != "connected", 3, 0.02, "INFO zk_state to leave 'connected'")
    r = _tryagain_within(c, REQ_MS, "SET", "other", "v")
    assert r == b"-TRYAGAIN ZooKeeper unavailable\r\n", r
    _tryagain_within(c, REQ_MS, "SET", "free", "x", "NX", "PX", "1000")
    _tryagain_within(c, REQ_MS, "GET", "lk")
    # RELIABILITY 4: a renewal of the lock this sidecar holds waits for the
    # reconnect inside the lease instead of failing (a failed renewal stops
    # Redisson's watchdog), past --zk-request-timeout.
    renewer = a.client()
    renewer.send_cmd("PEXPIRE", "lk", "60000")
    time.sleep(REQ_MS * 1.5 / 1000.0)
    zk2.start()
    down_s = time.monotonic() - t_down
    assert down_s < 7.0, "the outage lasted %.1f s, longer than this test means" % down_s
    assert renewer.read_reply(timeout=40) == b":1\r\n"
    a.wait_ready(15)
    assert a.session_id() == sid, "a short outage cost the session"
    kz2 = kz_factory(zk2)
    data, st = harness.key_stat(kz2, a.root, "lk")
    assert st is not None and st.ephemeralOwner == sid and b"tok" in data
    assert c.cmd("GET", "lk") == b"$3\r\ntok\r\n"
    # the TTL ran on through the outage, no faster
    elapsed_ms = (time.monotonic() - t_set) * 1000
    assert 60000 - elapsed_ms - 500 <= int(c.cmd("PTTL", "lk")[1:-2]) <= 60000
    assert c.cmd("SET", "other", "v") == b"+OK\r\n"
    assert c.cmd("SET", "lk", "x", "NX", "PX", "1000") == b"$-1\r\n"


def test_zookeeper_down_longer_than_session(make_zk, kz_factory, make_zkresp):
    session_ms = 2000
    zk2 = make_zk()
    a = make_zkresp(zk_target=zk2, session_timeout=session_ms, request_timeout=REQ_MS)
    c = a.client()
    assert c.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    sid = a.session_id()
    zk2.kill9()
    t_down = time.monotonic()
    _liveness(c)
    _tryagain_within(c, REQ_MS, "SET", "other", "v")
    time.sleep(max(0, t_down + session_ms * 1.5 / 1000.0 - time.monotonic()))
    _liveness(c)
    state = a.zk_state()
    assert state != "connected", "INFO zk_state %r 1.5 session timeouts into the outage" % state
    _tryagain_within(c, REQ_MS, "GET", "lk")
    _tryagain_within(c, REQ_MS, "SET", "lk", "x", "NX", "PX", "1000")
    zk2.start()
    t_up = time.monotonic()
    a.wait_ready(15)
    sid2 = a.session_id()
    assert sid2 != sid, "after an outage past the session timeout the old session was kept"
    kz2 = kz_factory(zk2)
    # The old lock is never resurrected: it vanishes (the old session expires
    # on the restarted server) and never becomes the new session's.
    def gone():
        _, st = harness.key_stat(kz2, a.root, "lk")
        assert st is None or st.ephemeralOwner != sid2, "the old lock was adopted by the new session"
        return st is None
    harness.wait_for(gone, session_ms * 2 / 1000.0 + 3, 0.05, "the old session's lock to vanish")
    assert time.monotonic() - t_up < session_ms * 2 / 1000.0 + 3
    assert c.cmd("GET", "lk") == b"$-1\r\n"
    assert c.cmd("SET", "lk", "tok2", "NX", "PX", "60000") == b"+OK\r\n"
    assert harness.key_stat(kz2, a.root, "lk")[1].ephemeralOwner == sid2
    # The C client retried the refused server about 30 times a second; its
    # line for that is written once per 10 s, the rest counted.
    refused = [l for l in a.log().splitlines() if b"event=zk.client " in l and b"refused" in l]
    assert 1 <= len(refused) <= 3, b"\n".join(refused[:10])
    assert b"event=zk.client_repeated count=" in a.log()


def test_zookeeper_restart_survived(make_zk, kz_factory, make_zkresp):
    zk2 = make_zk()
    # The outage the sidecars see is longer than stop + start: ZooKeeper's
    # JVM accepts connections before it serves them, and the C client waits
    # out a handshake timeout there, two thirds of the session timeout (13 s
    # here; 5.6 s seen under CI load, and once the whole 10 s of a 15 s
    # session, which a 10 s request timeout did not outlast).  Sessions and
    # the request timeout leave room for that.
    a = make_zkresp(zk_target=zk2, session_timeout=20000, request_timeout=18000)
    b = make_zkresp(zk_target=zk2, root=a.root, session_timeout=20000, request_timeout=18000)
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    assert cb.cmd("SET", "perm", "v") == b"+OK\r\n"
    sa, sb = a.session_id(), b.session_id()
    result = {}

    def during():
        time.sleep(0.1)
        t0 = time.monotonic()
        result["reply"] = ca.cmd("SET", "during", "v", timeout=30)
        result["took"] = time.monotonic() - t0
    t = threading.Thread(target=during)
    t_restart = time.monotonic()
    zk2.stop()
    t.start()
    zk2.start()
    restart_s = time.monotonic() - t_restart
    t.join(30)
    a.wait_ready(15)
    b.wait_ready(15)
    assert (a.session_id(), b.session_id()) == (sa, sb), "a ZooKeeper restart cost a session"
    if restart_s < 4.0:
        assert result.get("reply") == b"+OK\r\n", \
            "a SET during a %.1f s restart answered %r (zk-request-timeout 18000)" % (restart_s, result.get("reply"))
    kz2 = kz_factory(zk2)
    _, st = harness.key_stat(kz2, a.root, "lk")
    assert st is not None and st.ephemeralOwner == sa
    assert cb.cmd("GET", "lk") == b"$3\r\ntok\r\n"
    assert cb.cmd("SET", "lk", "x", "NX", "PX", "60000") == b"$-1\r\n"
    assert ca.cmd("GET", "perm") == b"$1\r\nv\r\n"
    assert ca.cmd("DEL", "lk") == b":1\r\n"
    assert cb.cmd("SET", "lk", "x", "NX", "PX", "60000") == b"+OK\r\n"


def test_zookeeper_frozen_briefly(make_zk, kz_factory, make_zkresp):
    """SIGSTOP the server for less than the session timeout: a request made
    meanwhile waits (inside --zk-request-timeout) and succeeds after
    SIGCONT; the session and its lock survive."""
    zk2 = make_zk()
    a = make_zkresp(zk_target=zk2, session_timeout=8000, request_timeout=4000)
    c = a.client()
    assert c.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    sid = a.session_id()
    zk2.sigstop()
    try:
        c.send_cmd("SET", "during", "v")
        time.sleep(1.0)
        _liveness(a.client())
    finally:
        zk2.sigcont()
    assert c.read_reply(timeout=10) == b"+OK\r\n"
    a.wait_ready(10)
    assert a.session_id() == sid
    kz2 = kz_factory(zk2)
    assert harness.key_stat(kz2, a.root, "lk")[1].ephemeralOwner == sid
    assert c.cmd("GET", "during") == b"$1\r\nv\r\n"


DURABLE_POLICY = """
return {
    lifetime = function(key, type, ttl)
        if key:find("^durable:") then return "persistent" end
        return ttl and "ephemeral" or "persistent"
    end,
}
"""


def test_persistent_key_with_ttl_is_deleted_after_a_session_change(make_proxy, make_zkresp, zk, kz, tmp_path):
    """A key the policy makes persistent outlives its writer's session; the
    writer deletes it at its TTL in its next session (nobody else would:
    readers only take it for absent), and a key without a TTL stays."""
    policy = tmp_path / "durable.lua"
    policy.write_text(DURABLE_POLICY)
    session_ms = 2000
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=session_ms, request_timeout=REQ_MS,
                    extra=["--policy", str(policy)])
    c = a.client()
    ttl_ms = 6000
    assert c.cmd("SET", "durable:k", "v", "PX", str(ttl_ms)) == b"+OK\r\n"
    t_set = time.monotonic()
    assert c.cmd("SET", "durable:keep", "v") == b"+OK\r\n"
    _, st = harness.key_stat(kz, a.root, "durable:k")
    assert st is not None and st.ephemeralOwner == 0, "the policy's persistent key is %r" % (st,)
    sid = a.session_id()
    proxy.blackhole(True)
    time.sleep(session_ms / 1000.0 + 1.5)
    proxy.blackhole(False)
    harness.wait_for(lambda: a.zk_state() == "connected" and a.session_id() != sid, 20, 0.1,
                     "the sidecar to run on a new ZooKeeper session")
    assert time.monotonic() - t_set < ttl_ms / 1000.0, "the session changed after the key's TTL"
    assert harness.key_stat(kz, a.root, "durable:k")[1] is not None
    harness.wait_for(lambda: harness.key_stat(kz, a.root, "durable:k")[1] is None,
                     ttl_ms / 1000.0 + 5, 0.1, "the persistent key's node to be deleted at its TTL")
    assert time.monotonic() - t_set >= ttl_ms / 1000.0 - 0.1, "deleted before its TTL"
    assert c.cmd("GET", "durable:k") == b"$-1\r\n"
    assert harness.key_stat(kz, a.root, "durable:keep")[1] is not None
    assert c.cmd("GET", "durable:keep") == b"$1\r\nv\r\n"
