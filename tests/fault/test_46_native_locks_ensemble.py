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
import time

import pytest

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
