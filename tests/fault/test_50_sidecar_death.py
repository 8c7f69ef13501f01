"""Fault tier 50: sidecar and application deaths, foreign nodes, a sidecar
frozen past its session (RELIABILITY 5, 11, 12, 13, 28).

  kill -9 of the sidecar holding locks frees them within about one session
  timeout; the restarted sidecar treats them as foreign.
  SIGTERM: new acquisitions refused, in-flight work finishes, the session is
  closed so the locks are free at once, exit 0.
  kill -9 of the application: its locks live until their TTL, then free.
  A node of an earlier session is foreign: SET NX answers null, never
  claimed.
  kill -9 of one semaphore holder's sidecar keeps the other holders'
  permits (a collection written through two sidecars is shared).
"""

import re
import signal
import socket
import subprocess
import threading
import time

import pytest

import harness
from harness import Proc, RawClient
import nativeload
import redisson_scripts as redisson
from lockload import LUA_EXTEND, LUA_RELEASE


SESSION_MS = 2000


def _owner(kz, root, key):
    _, st = harness.key_stat(kz, root, key)
    return None if st is None else st.ephemeralOwner


def test_kill9_sidecar_frees_locks_within_session_timeout(make_zkresp, kz):
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    ca, cb = a.client(), b.client()
    for k in ("l1", "l2", "l3"):
        assert ca.cmd("SET", k, "tok-" + k, "NX", "PX", "60000") == b"+OK\r\n"
    assert ca.cmd("SET", "perm", "v") == b"+OK\r\n"
    sid = a.session_id()
    t_kill = time.monotonic()
    a.kill9()
    # The restarted sidecar (same port and root) has a new session and does
    # not think it holds the old locks: they are foreign until they vanish.
    a.restart()
    ca2 = a.client()
    sid2 = a.session_id()
    assert sid2 != sid
    if _owner(kz, a.root, "l1") == sid:
        assert ca2.cmd("SET", "l1", "mine", "NX", "PX", "60000") == b"$-1\r\n"
        assert _owner(kz, a.root, "l1") == sid, "the restarted sidecar claimed a node of its old session"
        assert ca2.cmd("GET", "l1") in (b"$6\r\ntok-l1\r\n", b"$-1\r\n")
    harness.wait_for(lambda: all(_owner(kz, a.root, k) is None for k in ("l1", "l2", "l3")),
                     SESSION_MS * 2 / 1000.0 + 2, 0.02, "the dead sidecar's locks to vanish")
    elapsed = time.monotonic() - t_kill
    assert elapsed <= SESSION_MS * 1.5 / 1000.0 + 1.0, "locks vanished only after %.2f s" % elapsed
    # A persistent key survives its writer.
    assert cb.cmd("GET", "perm") == b"$1\r\nv\r\n"
    assert cb.cmd("SET", "l1", "tok-b", "NX", "PX", "60000") == b"+OK\r\n"
    assert ca2.cmd("SET", "l2", "tok-a2", "NX", "PX", "60000") == b"+OK\r\n"
    assert _owner(kz, a.root, "l2") == sid2


SEMAPHORE_ACQUIRE = """
local key, limit, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local timeout, now = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('zremrangebyscore', key, '-inf', now - timeout)
if redis.call('zcard', key) < limit then
  redis.call('zadd', key, now, id)
  redis.call('pexpire', key, timeout)
  return 1
end
return 0
"""


def test_kill9_of_one_holders_sidecar_keeps_the_others_permits(make_zkresp, kz):
    """redis-semaphore's Semaphore (limit 2: a zset of its holders, PEXPIREd
    by each acquire): X takes a permit through A, Y through B.  kill -9 of
    B (Y's pod) ends B's session; X's permit stays (the zset, written
    through two sidecars, is shared: persistent with its TTL), so C grants
    one more permit, not two."""
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    c = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    ra, rb, rc = a.redis(), b.redis(), c.redis()
    now = str(int(time.time() * 1000))

    def acquire(r, who):
        return r.eval(SEMAPHORE_ACQUIRE, 1, "sem", "2", who, "30000", now)
    assert acquire(ra, "X") == 1
    assert acquire(rb, "Y") == 1
    assert acquire(rc, "Z") == 0
    assert _owner(kz, a.root, "sem") == 0
    b.kill9()
    time.sleep(SESSION_MS * 2 / 1000.0)  # B's session has ended
    assert ra.zscore("sem", "X") is not None
    assert [acquire(rc, who) for who in ("Z", "V")] == [0, 0]  # X and Y hold (Y until its timeout)
    assert 25000 <= rc.pttl("sem") <= 30000


def test_foreign_node_after_restart_never_claimed(make_zkresp, kz):
    """RELIABILITY 5 (process restart): the node of the previous session is
    foreign; only after it vanishes can the lock be taken."""
    a = make_zkresp(session_timeout=4000)
    assert a.client().cmd("SET", "lk", "old", "NX", "PX", "60000") == b"+OK\r\n"
    sid = a.session_id()
    a.kill9()
    a.restart()
    c = a.client()
    t0 = time.monotonic()
    got_it = None
    while time.monotonic() - t0 < 10:
        r = c.cmd("SET", "lk", "new", "NX", "PX", "60000")
        owner = _owner(kz, a.root, "lk")
        if r == b"+OK\r\n":
            got_it = time.monotonic() - t0
            assert owner == a.session_id()
            break
        assert r == b"$-1\r\n", r
        assert owner in (sid, None), "node claimed by %r while foreign" % owner
        time.sleep(0.05)
    assert got_it is not None, "the lock never became free"
    assert got_it >= 1.0, "the old session's node was taken after only %.2f s" % got_it


def test_foreign_node_after_reconnect_in_process(make_proxy, make_zkresp, zk, kz_factory, kz):
    """RELIABILITY 5 (same process): the sidecar loses its session locally
    (partition past the lease) while the old session stays alive at the
    server (a test client re-attaches to it).  After the partition heals
    the sidecar has a new session; the old session's node is foreign."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=SESSION_MS, request_timeout=1000)
    c = a.client()
    assert c.cmd("SET", "lk", "old", "NX", "PX", "60000") == b"+OK\r\n"
    sid = a.session_id()
    creds = [s for s in proxy.sessions if s[0] == sid]
    assert creds, "session handshake not seen by the proxy"
    passwd = creds[-1][1]
    proxy.blackhole(True)
    # Keep the old session alive from outside (moves it to our client).
    from kazoo.client import KazooClient
    pin = KazooClient(hosts=zk.address, client_id=(sid, passwd), timeout=SESSION_MS / 1000.0)
    pin.start(timeout=10)
    harness.register_closer(lambda: (pin.stop(), pin.close()))
    assert pin.client_id[0] == sid
    time.sleep(SESSION_MS / 1000.0 + 1.0)       # the sidecar's lease is past
    proxy.blackhole(False)
    harness.wait_for(lambda: a.zk_state() == "connected" and a.session_id() != sid, 15, 0.1,
                     "a new session after the lease was lost")
    assert pin.connected and pin.client_id[0] == sid, "the sidecar took its old session back"
    _, st = harness.key_stat(kz, a.root, "lk")
    assert st is not None and st.ephemeralOwner == sid
    r = c.cmd("SET", "lk", "new", "NX", "PX", "60000")
    assert r == b"$-1\r\n", "SET NX on a node of the old session answered %r" % r
    time.sleep(0.5)
    data, st2 = harness.key_stat(kz, a.root, "lk")
    assert st2.ephemeralOwner == sid and st2.mzxid == st.mzxid and b"old" in data, "the node was claimed"
    pin.stop()
    pin.close()
    harness.wait_for(lambda: c.cmd("SET", "lk", "new", "NX", "PX", "60000") == b"+OK\r\n", 10, 0.05,
                     "the lock to be free once the old session is gone")
    assert _owner(kz, a.root, "lk") == a.session_id()


def test_sigterm_releases_at_once(make_proxy, make_zkresp, zk, kz):
    """RELIABILITY 12: SIGTERM refuses new acquisitions, lets in-flight work
    finish, closes the session (locks free at once) and exits 0."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=10000, request_timeout=3000,
                    extra=["--shutdown-grace", "5000"])
    b = make_zkresp(root=a.root, session_timeout=10000)
    c1 = a.client()
    assert c1.cmd("SET", "held", "t1", "NX", "PX", "60000") == b"+OK\r\n"
    proxy.delay(500)
    c2 = a.client()
    c2.send_cmd("SET", "inflight", "t2", "NX", "PX", "60000")
    time.sleep(0.15)
    t_term = time.monotonic()
    a.proc.signal(signal.SIGTERM)
    time.sleep(0.1)
    # New acquisitions are refused: no new connection, or an error.
    try:
        with RawClient(a.port, timeout=3, connect_timeout=1) as n:
            r = n.cmd("SET", "newconn", "t3", "NX", "PX", "60000")
            assert r.startswith(b"-"), "a new connection acquired during shutdown: %r" % r
    except (ConnectionRefusedError, ConnectionResetError, harness.ConnectionClosed, socket.timeout):
        pass
    try:
        r = c1.cmd("SET", "existing", "t4", "NX", "PX", "60000", timeout=3)
        assert r.startswith(b"-"), "an existing connection acquired during shutdown: %r" % r
    except harness.ConnectionClosed:
        pass
    # In-flight work finished.
    assert c2.read_reply(timeout=10) == b"+OK\r\n"
    status = a.wait(15)
    t_exit = time.monotonic()
    assert status == 0, "exit status %r after SIGTERM" % status
    assert t_exit - t_term < 6.0
    # The session was closed: the locks are gone now, not after 10 s.
    harness.wait_for(lambda: _owner(kz, a.root, "held") is None and _owner(kz, a.root, "inflight") is None,
                     1.0, 0.02, "the locks to be released at exit")
    for k in ("newconn", "existing"):
        assert _owner(kz, a.root, k) is None, "%s was created during shutdown" % k
    assert b.client().cmd("SET", "held", "tb", "NX", "PX", "60000") == b"+OK\r\n"


def test_sigterm_answers_native_lock_waiters_at_once(make_zkresp):
    """A LOCK.ACQUIRE or LOCK.CONVERT waiting in its queue when SIGTERM comes
    would only wait out the grace period (60 s here) and then lose its
    connection unanswered: it leaves its queue and answers -TRYAGAIN zkresp
    is shutting down, the sidecar exits 0 without waiting for it, and the
    locks' holders through the other sidecar are untouched."""
    a = make_zkresp(extra=["--shutdown-grace", "60000"])
    b = make_zkresp(root=a.root)
    rb = b.redis()
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", "sd", "h", "PX", "120000"), int)
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", "cv", "r2", "MODE", "PR", "PX", "120000"), int)
    ca = a.client()
    assert ca.cmd("LOCK.ACQUIRE", "cv", "r1", "MODE", "PR", "PX", "120000").startswith(b":")
    waiter, converter = a.client(), a.client()
    waiter.send_cmd("LOCK.ACQUIRE", "sd", "w", "PX", "120000", "WAIT", "100000")
    converter.send_cmd("LOCK.CONVERT", "cv", "r1", "MODE", "EX", "WAIT", "100000")
    harness.wait_for(lambda: nativeload.waiting(rb, "sd") == [("w", "EX", "new")]
                     and nativeload.waiting(rb, "cv") == [("r1", "EX", "conversion")],
                     10.0, 0.05, "the two requests to be queued")
    a.proc.signal(signal.SIGTERM)
    assert waiter.read_reply(timeout=30) == b"-TRYAGAIN zkresp is shutting down\r\n"
    assert converter.read_reply(timeout=30) == b"-TRYAGAIN zkresp is shutting down\r\n"
    assert a.wait(30) == 0
    assert nativeload.holders(rb, "sd") == [("h", "EX")] and nativeload.waiting(rb, "sd") == []
    assert nativeload.holders(rb, "cv") == [("r2", "PR")] and nativeload.waiting(rb, "cv") == []


APP = r"""
import sys, time, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
t = time.monotonic()
ok = r.set("applock", "app-tok", nx=True, px=int(sys.argv[2]))
sys.stdout.write("ACQ %r %.6f %.6f\n" % (ok, t, time.monotonic()))
sys.stdout.flush()
time.sleep(120)
"""


def test_kill9_application_lock_lives_until_ttl(zkresp_pair):
    """RELIABILITY 13: the application dies holding a lock; the lock is
    neither released early (connection close is not a release) nor kept
    past its TTL."""
    a, b = zkresp_pair
    px = 1500
    d = harness.new_dir("app")
    app = Proc("app", ["/usr/bin/python3", "-c", APP, str(a.port), str(px)], d).start()
    def acquired():
        for line in app.output().splitlines():
            if line.startswith(b"ACQ ") and line.count(b" ") == 3:
                return line
    line = harness.wait_for(acquired, 15, 0.01, "the application to report its SET")
    _, ok, t_sent, t_ok = line.split()
    assert ok == b"True", "the application could not take the lock: %r" % line
    t_sent, t_ok = float(t_sent), float(t_ok)
    app.kill9()
    cb, ca = b.client(), a.client()
    assert cb.cmd("SET", "applock", "b-tok", "NX", "PX", "30000") == b"$-1\r\n"
    assert ca.cmd("GET", "applock") == b"$7\r\napp-tok\r\n"
    while True:
        r = cb.cmd("SET", "applock", "b-tok", "NX", "PX", "30000")
        if r == b"+OK\r\n":
            t_b = time.monotonic()
            break
        assert r == b"$-1\r\n", r
        assert time.monotonic() < t_ok + px / 1000.0 + 3, "the dead application's lock never expired"
        time.sleep(0.01)
    assert t_b >= t_sent + px / 1000.0 - 0.005, "freed %.0f ms before its TTL" % ((t_sent + px / 1000.0 - t_b) * 1000)
    assert t_b <= t_ok + px / 1000.0 + 1.0, "freed %.0f ms after its TTL" % ((t_b - t_ok) * 1000 - px)


def test_sigstop_sidecar_past_session_timeout(make_zkresp, kz):
    """RELIABILITY 8: the sidecar is frozen past its session timeout; its
    lock expires with the session and is taken through the other sidecar.
    After SIGCONT, no stale answer: a token-checked renewal or release by
    the old holder answers nil/0 and leaves the new holder's node alone."""
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    a.stop()
    try:
        harness.wait_for(lambda: cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"+OK\r\n",
                         SESSION_MS * 2 / 1000.0 + 3, 0.05, "the frozen sidecar's lock to expire")
    finally:
        a.cont()
    _, st_b = harness.key_stat(kz, a.root, "lk")
    r1 = ca.cmd("SET", "lk", "tok-a", "IFEQ", "tok-a", "PX", "60000", timeout=10)
    assert r1 == b"$-1\r\n" or r1.startswith(b"-TRYAGAIN"), "stale renewal answered %r" % r1
    r2 = ca.cmd("DELIFEQ", "lk", "tok-a", timeout=10)
    assert r2 == b":0\r\n" or r2.startswith(b"-TRYAGAIN"), "stale release answered %r" % r2
    data, st = harness.key_stat(kz, a.root, "lk")
    assert st is not None and st.czxid == st_b.czxid and st.mzxid == st_b.mzxid and b"tok-b" in data
    a.wait_ready(15)
    assert ca.cmd("GET", "lk") == b"$5\r\ntok-b\r\n"


# Grant and release of one lock kind, and what the other sidecar answers
# when it takes the lock (the key locks of SET NX; native locks).
FREEZE_KINDS = {
    "SET NX": (lambda k, t: ("SET", k, t, "NX", "PX", "20000"), lambda r: r == b"+OK\r\n",
               lambda k, t: ("DELIFEQ", k, t)),
    "LOCK.ACQUIRE": (lambda k, t: ("LOCK.ACQUIRE", k, t, "PX", "20000"), lambda r: r.startswith(b":"),
                     lambda k, t: ("LOCK.RELEASE", k, t)),
}


def test_no_grant_answered_after_a_freeze_past_the_session(make_zkresp):
    """Acquisitions in flight when the sidecar is frozen (SIGSTOP) past its
    session: ZooKeeper's answers wait in its socket, or the freeze lands
    while a command runs on an answer already checked.  None of them is
    answered as a grant once the session is over and the lock passed on
    through the other sidecar (-TRYAGAIN or null instead): a client told it
    holds a lock that went to another would hold it with that other.  Six
    clients loop acquire / release (SET NX and LOCK.ACQUIRE); the freeze
    comes at a random moment, 8 times.  A freeze that lands between the
    sidecar's last check of its lease and the write of the reply (a few
    microseconds) cannot be caught: such a reply counts only if the sidecar
    did not report it written past its lease (client.reply_past_lease)."""
    import random
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    two_holders = []
    for attempt in range(8):
        stop = threading.Event()
        late, frozen_at, cont_at = [], [0.0], [None]
        log_from = len(a.log())

        def loop(kind, key):
            take, granted, release = FREEZE_KINDS[kind]
            with a.client(timeout=20) as c:
                addr = "addr=127.0.0.1:%d " % c.sock.getsockname()[1]
                n = 0
                while not stop.is_set():
                    n += 1
                    tok = "a%d" % n
                    try:
                        got = c.cmd(*take(key, tok))
                    except OSError:
                        return
                    if granted(got) and stop.is_set():
                        # read after SIGCONT was sent: written after it (a
                        # frozen sidecar writes nothing; a reply read
                        # before is one written before the freeze, however
                        # late this thread got to it)
                        read_at = time.monotonic()
                        if cont_at[0] is not None and read_at > cont_at[0]:
                            late.append((key, addr))
                        return
                    if granted(got):
                        c.cmd(*release(key, tok))
        keys = [(kind, "fz:%d:%d" % (attempt, j)) for j, kind in enumerate(sorted(FREEZE_KINDS) * 3)]
        threads = [threading.Thread(target=loop, args=k, daemon=True) for k in keys]
        for t in threads:
            t.start()
        time.sleep(0.5 + random.random() * 0.3)
        a.stop()
        frozen_at[0] = time.monotonic()
        stop.set()
        try:
            time.sleep(SESSION_MS * 1.75 / 1000.0)
            cb = b.client()
            taken = {k for kind, k in keys
                     if FREEZE_KINDS[kind][1](cb.cmd(*FREEZE_KINDS[kind][0](k, "other")))}
        finally:
            cont_at[0] = time.monotonic()
            a.cont()
        for t in threads:
            t.join(20)
        a.wait_ready(15)
        reported = [line for line in a.log()[log_from:].decode("utf-8", "replace").splitlines()
                    if "event=client.reply_past_lease" in line]
        two_holders += [(attempt, k) for k, addr in late
                        if k in taken and not any(addr in line for line in reported)]
    assert not two_holders, "a grant answered after the session ended, the lock taken by another: %r" % two_holders


def _freeze_at(pid, function, seconds):
    """Stops process pid at its next call of `function` for `seconds` (gdb:
    a SIGSTOP at an exact point, every thread stopped), then lets it run
    on.  Returns once the breakpoint is set; the caller waits for gdb."""
    g = subprocess.Popen(["gdb", "-nx", "-batch", "-p", str(pid),
                          "-ex", "break " + function, "-ex", "echo ARMED\\n", "-ex", "continue",
                          "-ex", "shell sleep %.1f" % seconds, "-ex", "detach"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    harness.register_closer(lambda: g.poll() is None and g.kill())
    seen = []
    for line in g.stdout:
        seen.append(line)
        if "ARMED" in line:
            return g
    raise AssertionError("gdb did not set its breakpoint:\n" + "".join(seen[-20:]))


def test_freeze_after_the_answer_before_the_reply_check(make_zkresp):
    """A freeze past the session that lands after the command ran on its
    answer, just before its reply is checked and written (the reply is
    encoded, the gateway about to send it): the reply goes as -TRYAGAIN,
    never +OK, and the lock is another's afterwards."""
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    c = a.client(timeout=30)
    assert c.cmd("PING") == b"+PONG\r\n"
    g = _freeze_at(a.pid, "lua_host_reply_deadline", SESSION_MS * 1.75 / 1000.0)
    c.send_cmd("SET", "lk", "tok-a", "NX", "PX", "60000")
    r = c.read_reply(timeout=30)
    g.wait(30)
    assert r.startswith(b"-TRYAGAIN zkresp stalled"), "a grant checked after the freeze answered %r" % r
    with b.client() as cb:
        harness.wait_for(lambda: cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"+OK\r\n", 10, 0.05,
                         "the lock to be free once the frozen session is gone")


def test_freeze_between_the_reply_check_and_its_write_is_reported(make_zkresp):
    """The one moment a freeze cannot be caught: after the reply's check,
    before the write.  The grant goes out late (as a reply delayed in the
    network would arrive late), and the sidecar says so: the log's
    client.reply_past_lease names the client, and
    zkresp_replies_past_lease_total counts it."""
    mport = harness.free_port()
    a = make_zkresp(session_timeout=SESSION_MS, extra=("--metrics-port", mport))
    c = a.client(timeout=30)
    assert c.cmd("PING") == b"+PONG\r\n"
    addr = "addr=127.0.0.1:%d " % c.sock.getsockname()[1]
    g = _freeze_at(a.pid, "uv_try_write", SESSION_MS * 1.75 / 1000.0)
    c.send_cmd("SET", "lk", "tok-a", "NX", "PX", "60000")
    assert c.read_reply(timeout=30) == b"+OK\r\n"
    g.wait(30)
    reports = [line for line in a.log().decode("utf-8", "replace").splitlines()
               if "event=client.reply_past_lease" in line and addr in line]
    assert len(reports) == 1, a.log_tail(30)
    status, text = harness.http_get(mport, "/metrics")
    assert status == 200 and re.search(r"^zkresp_replies_past_lease_total 1$", text, re.M), text


def test_grant_held_behind_a_waiting_reply_is_not_sent_after_its_session(make_proxy, make_zkresp, zk, kz):
    """A SET NX pipelined behind a command that waits (a blocking
    LOCK.ACQUIRE; here DEBUG SLEEP, which waits without ZooKeeper) is
    granted at once, its reply held until the waiting one's has gone.
    Meanwhile the sidecar is cut off from ZooKeeper past its session, which
    ends, and the lock goes to a client of another sidecar.  When the wait
    ends, the grant held back is not sent: -TRYAGAIN instead (its answer
    came from a session given up since), never +OK for a lock that is
    another's."""
    proxy = make_proxy(zk)
    a = make_zkresp(zk_target=proxy, session_timeout=SESSION_MS, request_timeout=1000)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    cb = b.client()
    ca = a.client(timeout=30)
    ca.send_cmd("DEBUG", "SLEEP", "8")
    ca.send_cmd("SET", "lk", "tok-a", "NX", "PX", "60000")
    sid = a.session_id()
    harness.wait_for(lambda: _owner(kz, a.root, "lk") == sid, 5, 0.02, "the SET NX behind the wait to land")
    replies = []
    reader = threading.Thread(target=lambda: replies.extend(
        (ca.read_reply(timeout=30), time.monotonic()) for _ in range(2)), daemon=True)
    reader.start()
    proxy.blackhole(True)
    try:
        harness.wait_for(lambda: cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"+OK\r\n",
                         SESSION_MS * 2 / 1000.0 + 3, 0.05, "the lock to pass on with the cut-off session")
        taken_at = time.monotonic()
    finally:
        proxy.blackhole(False)
    reader.join(30)
    assert len(replies) == 2, replies
    (waited, _), (held, held_at) = replies
    assert waited == b"+OK\r\n" and held_at > taken_at, "the wait ended before the lock passed on: %r" % replies
    assert held.startswith(b"-TRYAGAIN zkresp stalled"), \
        "the SET NX granted under the session that ended answered %r after the wait" % held
    data, _ = harness.key_stat(kz, a.root, "lk")
    assert b"tok-b" in data


# A lock taken by "a" through one sidecar and, once that sidecar's session
# ended, by "b" through another: the command and its answer when the lock
# is "b"'s (string locks: SET NX PX; Redisson's: its hash lock script).
def _string_lock(who):
    return ("SET", "lk", "tok-" + who, "NX", "PX", "60000"), b"+OK\r\n"


def _redisson_lock(who):
    return ("EVAL", redisson.ACQUIRE, "1", "lk", "60000", "uuid-%s:1" % who), b"$-1\r\n"


STALE = {
    "DELIFEQ": (_string_lock, ("DELIFEQ", "lk", "tok-a"), b":0\r\n"),
    "redis-py release": (_string_lock, ("EVAL", LUA_RELEASE, "1", "lk", "tok-a"), b":0\r\n"),
    "redis-py extend": (_string_lock, ("EVAL", LUA_EXTEND, "1", "lk", "tok-a", "60000", "1"), b":0\r\n"),
    "SET IFEQ PX": (_string_lock, ("SET", "lk", "tok-a", "IFEQ", "tok-a", "PX", "60000"), b"$-1\r\n"),
    "Redisson unlock": (_redisson_lock, ("EVAL", redisson.UNLOCK, "3", "lk", "ch", "latch", "0", "60000",
                                         "uuid-a:1", "publish", "13000"), b"$-1\r\n"),
    "Redisson renewal": (_redisson_lock, ("EVAL", redisson.RENEW_ONE, "1", "lk", "60000", "uuid-a:1"),
                         b":0\r\n"),
}


@pytest.mark.parametrize("stale", sorted(STALE))
def test_release_or_renewal_asked_while_frozen_after_the_lock_passed_on(make_zkresp, kz, stale):
    """RELIABILITY 8: a release or a renewal sent to the frozen sidecar
    after its lock ended with its session and was taken through the other
    sidecar (it waits in the socket until SIGCONT) answers as for a lock
    held by another (0 or nil) or -TRYAGAIN, never success, which would tell
    the old holder it held the lock until then; the new holder's node stays
    as it is."""
    lock, cmd, refused = STALE[stale]
    a = make_zkresp(session_timeout=SESSION_MS)
    b = make_zkresp(root=a.root, session_timeout=SESSION_MS)
    ca, cb = a.client(), b.client()
    take, taken = lock("a")
    assert ca.cmd(*take) == taken
    a.stop()
    try:
        take, taken = lock("b")
        harness.wait_for(lambda: cb.cmd(*take) == taken,
                         SESSION_MS * 2 / 1000.0 + 3, 0.05, "the frozen sidecar's lock to expire")
        _, st_b = harness.key_stat(kz, a.root, "lk")
        ca.send_cmd(*cmd)
        time.sleep(0.2)
    finally:
        a.cont()
    r = ca.read_reply(timeout=15)
    assert r == refused or r.startswith(b"-TRYAGAIN"), \
        "%s asked after the lock had passed on answered %r" % (stale, r)
    data, st = harness.key_stat(kz, a.root, "lk")
    assert st is not None and st.czxid == st_b.czxid and st.mzxid == st_b.mzxid and b"-b" in data


PIPE_SCRIPT = """
local v = redis.call('get', KEYS[1])
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
redis.call('hincrby', KEYS[2], ARGV[1], 1)
redis.call('pexpire', KEYS[2], ARGV[2])
return v
"""


def test_sidecar_sigstop_with_pipelined_scripts_one_server(zk, make_zkresp, make_proxy):
    """Issue 14 item 3, RELIABILITY 28: clients pipelining scripts and
    MULTI/EXEC-free multi-key writes at a sidecar that is SIGSTOPped past its
    session and SIGCONTed, five times (the crash was seen on a sidecar that
    had been through reconnects): it stays up and sanitizer-clean (the
    harness scans its log) and serves new locks after each round."""
    proxy = make_proxy(zk)
    z = make_zkresp(zk_target=proxy, session_timeout=1500, request_timeout=1000)
    stop = threading.Event()
    errors = []

    def client(n):
        c = None
        i = 0
        while not stop.is_set():
            try:
                if c is None:
                    c = RawClient(z.port, timeout=15, connect_timeout=1)
                batch = []
                for _ in range(16):
                    i += 1
                    k1, k2 = "p%d:%d" % (n, i % 5), "h%d:%d" % (n, i % 3)
                    batch.append(harness.encode("EVAL", PIPE_SCRIPT, 2, k1, k2, "v%d" % i, 3000))
                    batch.append(harness.encode("SET", "s%d:%d" % (n, i % 7), "t%d" % i, "NX", "PX", 2000))
                    batch.append(harness.encode("PEXPIRE", "s%d:%d" % (n, i % 7), 2500))
                    batch.append(harness.encode("DELIFEQ", "s%d:%d" % (n, (i + 3) % 7), "t%d" % (i - 3)))
                c.send(b"".join(batch))
                t_sent = time.monotonic()
                for _ in range(len(batch)):
                    c.read_reply()
            except socket.timeout:
                # 15 s without the batch's replies, while the sidecar was
                # stopped for at most 3.5 s of it: requests were lost.
                errors.append("pipelined requests sent %.1f s before were never answered (sidecar %s)" % (
                    time.monotonic() - t_sent, "alive" if z.alive() else "dead"))
                c.close()
                c = None
            except (OSError, harness.ConnectionClosed) as e:
                if c is not None:
                    c.close()
                c = None
                if not stop.is_set() and not z.alive():
                    errors.append(repr(e))
                    return
                time.sleep(0.05)
        if c is not None:
            c.close()

    ts = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(4)]
    for t in ts:
        t.start()
    try:
        for rnd in range(5):
            time.sleep(1.0)
            sid = z.session_id()
            if rnd % 2 == 1:
                proxy.cut()          # a reconnect in between, as in the report
                time.sleep(0.5)
            z.stop()
            time.sleep(1.5 * 2 + 0.5)
            z.cont()
            time.sleep(1.0)
            assert z.alive(), "zkresp exited with status %s after SIGCONT (round %d):\n%s" % (
                z.proc.popen.returncode, rnd, z.log_tail(60))
            z.wait_ready(15)
            assert z.session_id() != sid, "the session outlived a SIGSTOP past its timeout"
            with z.client(timeout=10) as c:
                tok = harness.unique("t")
                assert c.cmd("SET", tok, tok, "NX", "PX", "5000") == b"+OK\r\n"
    finally:
        stop.set()
        for t in ts:
            t.join(20)
    assert z.alive(), "zkresp exited with status %s:\n%s" % (z.proc.popen.returncode, z.log_tail(60))
    assert not errors, "\n".join(errors[:10])


def test_repeated_signals_exit_cleanly(make_zkresp, kz):
    """A second SIGTERM ends the grace period at once; more signals after
    that are ignored (Ctrl-C reaches the whole process group and `make run`
    forwards a TERM as well): the exit stays clean, locks released."""
    a = make_zkresp(session_timeout=10000, extra=["--shutdown-grace", "5000"])
    c = a.client()
    assert c.cmd("SET", "held", "t1", "NX", "PX", "60000") == b"+OK\r\n"
    # one signal every 2 ms while it lives: some land in the grace period,
    # some after it ended, while the loop closes its handles
    deadline = time.monotonic() + 5
    while a.proc.alive() and time.monotonic() < deadline:
        try:
            a.proc.signal(signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.002)
    status = a.wait(15)
    assert status == 0, "exit status %r after repeated SIGTERMs:\n%s" % (
        status, a.proc.output()[-2000:].decode("utf-8", "replace"))
    harness.wait_for(lambda: _owner(kz, a.root, "held") is None, 2.0, 0.02, "the lock to be released at exit")
