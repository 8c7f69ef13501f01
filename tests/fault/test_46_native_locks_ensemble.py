"""Fault tier 46: the native lock commands (issue 18) on a 3-node ZooKeeper
ensemble, with three sidecars that each reach every server through a proxy
(RELIABILITY 14: a leader change; sessions that move between servers).

The workload and its checker are tests/lib/nativeload.py: exclusive and
shared holders, some reentrant, some converting up or down, on two keys
from three workers per sidecar.  Under each fault, every answer is a token, a null (WAIT ran
out) or -TRYAGAIN; no conflicting holds overlap; a hold asked after
another was granted has a larger token (zxids order grants across servers
and leaders); a release inside the lease answers 1; no session is lost
(the session, 10 s, outlives an election)."""

import random
import threading
import time

import pytest
import redis

import harness
import nativeload
from ensemble import ProxySet, ZkEnsemble
from harness import Zkresp

SESSION_MS = 10000
REQUEST_MS = 3000


class Trio:
    def __init__(self):
        self.ens = ZkEnsemble().start()
        self.root = "/" + harness.unique("nat")
        self.proxies = [ProxySet(self.ens) for _ in range(3)]
        self.sidecars = [Zkresp(p.connect_string, root=self.root, session_timeout=SESSION_MS,
                                request_timeout=REQUEST_MS) for p in self.proxies]
        for z in self.sidecars:
            z.start()

    def sessions(self):
        return [z.session_id() for z in self.sidecars]

    def close(self):
        for x in self.sidecars + self.proxies + [self.ens]:
            x.close()


@pytest.fixture(scope="module")
def trio():
    t = Trio()
    yield t
    t.close()


@pytest.fixture
def sides(trio):
    """The trio after the previous test: every server up, a leader, every
    sidecar alive."""
    trio.ens.restore()
    for z in trio.sidecars:
        assert z.alive(), "a sidecar had died before this test:\n%s" % z.log_tail(40)
        z.wait_ready(30)
    return trio


def test_leader_kill9_and_restart(sides):
    """The leader is killed (kill -9) two seconds in and started again two
    seconds later: the sidecars attached to it move to the others and go
    on through the election."""
    t, sessions, killed = sides, sides.sessions(), []

    def chaos(stop):
        time.sleep(2.0)
        ld = t.ens.leader()
        killed.append(ld)
        t.ens.kill9(ld)
        time.sleep(2.0)
        t.ens.start_server(ld, wait=False)

    run = nativeload.contend(t.sidecars, [harness.unique("lk1"), harness.unique("lk2")], 10.0, chaos)
    nativeload.check(run, t.sidecars, sessions, min_holds=20)
    assert killed, "the leader was never killed"


def test_sessions_moving_between_servers(sides):
    """Each sidecar's connections are cut at random moments; it reconnects
    to whichever server its host list gives next, which may be behind the
    one it left (ZooKeeper refuses a server older than what the client has
    seen, and the sidecar's reads after a reconnect see its own writes)."""
    t, sessions = sides, sides.sessions()

    def chaos(stop):
        rnd = random.Random(5)
        while time.monotonic() < stop:
            time.sleep(rnd.uniform(0.2, 0.5))
            rnd.choice(t.proxies).cut()

    run = nativeload.contend(t.sidecars, [harness.unique("mv1"), harness.unique("mv2")], 8.0, chaos)
    nativeload.check(run, t.sidecars, sessions)


def test_follower_stopped_for_a_while(sides):
    """A follower is stopped (SIGSTOP) for three seconds and continued:
    sidecars attached to it wait for it or move on, and answer -TRYAGAIN
    at worst."""
    t, sessions = sides, sides.sessions()

    def chaos(stop):
        time.sleep(2.0)
        f = t.ens.followers()[0]
        t.ens.sigstop(f)
        try:
            time.sleep(3.0)
        finally:
            t.ens.sigcont(f)

    run = nativeload.contend(t.sidecars, [harness.unique("fs1"), harness.unique("fs2")], 10.0, chaos)
    nativeload.check(run, t.sidecars, sessions, min_holds=20)


def _holder_cut_off_past_its_session(t, name, cut, heal):
    """Sidecar 0's client takes an EX hold on a lock of its own with a lease
    far past the fault (PX 60000, so only the end of the session frees it);
    then cut() cuts sidecar 0 off for longer than its session while every
    sidecar's workers contend on two other locks, and heal() ends that.
    Meanwhile an heir on sidecar 1 asks for the first lock, the old holder
    renews it through sidecar 0 every 200 ms, and once the heir holds, the
    old holder releases it through sidecar 0 (asking again while the answer
    is -TRYAGAIN).

    Checked: the heir is granted within the session timeout (and a margin)
    of the cut, with a larger token; the old holder's RELEASE, asked after
    that, ends in 0 and never answers 1; no RENEW answers 1 once sent after
    the heir's grant, nor once sidecar 0 runs again without its session (it
    answers 0 within a few seconds of the heal); sidecar 0 grants again on
    a new session; and the workload's check over all of it (its holds lost
    with sidecar 0's session are let off their RELEASE's 0, not the token
    order)."""
    sessions = t.sessions()
    keys = [harness.unique(name + "1"), harness.unique(name + "2")]
    lock = harness.unique(name + "0")
    seen, renews, releases, errors = {}, [], [], []
    r0 = t.sidecars[0].redis(socket_timeout=40)
    r0b = t.sidecars[0].redis(socket_timeout=40)
    r1 = t.sidecars[1].redis(socket_timeout=40)

    def ask(r, *args):
        try:
            return r.execute_command(*args)
        except redis.ResponseError as e:
            return "error: %s" % e

    def renewer(until):
        while time.monotonic() < until and "renewed_0" not in seen:
            t_sent = time.monotonic()
            v = ask(r0, "LOCK.RENEW", lock, "cut-off", "PX", "60000")
            renews.append((t_sent, v))
            if v == 0 and "healed" in seen:
                seen["renewed_0"] = time.monotonic()
            time.sleep(0.2)

    def heir():
        t_sent = time.monotonic()
        tok = r1.execute_command("LOCK.ACQUIRE", lock, "heir", "PX", "60000", "WAIT", "40000")
        seen["heir"] = (tok, t_sent, time.monotonic())
        until = time.monotonic() + 40
        while time.monotonic() < until:
            v = ask(r0b, "LOCK.RELEASE", lock, "cut-off")
            releases.append(v)
            if v in (0, 1):
                break
            time.sleep(0.2)
        seen["heir_released"] = r1.execute_command("LOCK.RELEASE", lock, "heir")

    def chaos(stop):
        try:
            time.sleep(1.0)
            t_sent = time.monotonic()
            tok = r0.execute_command("LOCK.ACQUIRE", lock, "cut-off", "PX", "60000")
            seen["hold"] = (tok, t_sent, time.monotonic())
            cut()
            seen["cut"] = time.monotonic()
            ts = [threading.Thread(target=renewer, args=(stop + 10,)), threading.Thread(target=heir)]
            for x in ts:
                x.start()
            try:
                time.sleep(SESSION_MS / 1000.0 + 3.0)
            finally:
                heal()
            seen["healed"] = time.monotonic()
            for x in ts:
                x.join(60)
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(repr(e))

    run = nativeload.contend(t.sidecars, keys, 24.0, chaos, may_lose=(0,))
    for r in (r0, r0b, r1):
        r.close()
    assert not errors, errors
    tok, t_asked, t_granted = seen["hold"]
    assert isinstance(tok, int), seen
    htok, h_sent, h_granted = seen["heir"]
    print("heir granted %.2f s after the cut; releases %r; renewals %r; counts %r" % (
        h_granted - seen["cut"], releases, [(round(a - seen["cut"], 2), v) for a, v in renews], run.counts))
    assert isinstance(htok, int) and htok > tok, (htok, tok)
    assert seen["heir_released"] == 1
    assert h_granted - seen["cut"] <= SESSION_MS / 1000.0 + 5.0, \
        "the heir was granted %.1f s after the cut" % (h_granted - seen["cut"])
    assert 1 not in releases and releases[-1] == 0, \
        "the old holder's RELEASE, asked after the heir's grant, answered %r" % releases
    stale = [x for x in renews if x[1] == 1 and (x[0] > h_granted or x[0] > seen["healed"])]
    assert not stale, "RENEW answered 1 after the hold had passed on: %r (heir %.3f)" % (stale, h_granted)
    assert "renewed_0" in seen and seen["renewed_0"] - seen["healed"] < 15, renews[-5:]
    again = [h for h in run.holds if h.owner.startswith("s0-") and h.spans[0].t_from > seen["healed"]]
    assert again, "sidecar 0 granted nothing after the heal (%r)" % run.counts
    nativeload.check(run, t.sidecars, sessions, min_holds=20, lost=(0,))


def test_holder_sidecar_stopped_past_its_session(sides):
    """RELIABILITY 8, 28: the holder's sidecar is stopped (SIGSTOP) for its
    session timeout and 3 s more, then continued."""
    z0 = sides.sidecars[0]
    _holder_cut_off_past_its_session(sides, "stop", z0.stop, z0.cont)


def test_holder_sidecar_partitioned_past_its_session(sides):
    """RELIABILITY 3, 5: the holder's sidecar is cut off from every server
    (its connections closed, new ones never answered) for its session
    timeout and 3 s more; it keeps running and answering its clients."""
    p0 = sides.proxies[0]

    def cut():
        p0.blackhole(True)
        p0.cut()
    _holder_cut_off_past_its_session(sides, "part", cut, lambda: p0.blackhole(False))
