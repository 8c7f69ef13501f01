"""Fixtures for tests/integration and tests/fault.

  zk            one ZooKeeper server for the whole session (tests isolate
                themselves by a unique zkresp --root each)
  kz            a kazoo client on it, for inspecting znodes
  kz_factory    factory: kazoo clients on dedicated servers
  make_zkresp   factory: zkresp processes stopped at the end of the test
  zkresp        one zkresp on the shared ZooKeeper
  zkresp_pair   two zkresp on the shared ZooKeeper (distinct roots are NOT
                used: both share one root, like two pods)
  zkr           one zkresp for a whole module (the differential suites,
                whose tests isolate themselves by key or channel prefix):
                zkr() returns it, started again if a test left it dead
  make_zk       factory: a dedicated ZooKeeper for tests that stop, kill or
                freeze it
  make_proxy    factory: a ZkProxy in front of a ZooKeeper
  redis_ref     a redis-server 7.0 (databases 1) as the reference oracle

Every zkresp started during a test has its log printed when the test fails,
and its log is scanned for sanitizer reports after every test (a report
fails the test).
"""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))

import harness  # noqa: E402
from harness import Zkresp, ZkServer, ZkProxy, RedisServer  # noqa: E402

TEST_TIMEOUT = float(os.environ.get("ZKRESP_TEST_TIMEOUT", "240"))


# ---------------------------------------------------------------- processes

@pytest.fixture(scope="session")
def zk():
    srv = ZkServer().start()
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def kz(zk):
    client = harness.kazoo_client(zk)
    yield client
    client.close_quietly()


@pytest.fixture
def kz_factory():
    """kazoo clients on other (dedicated) servers, stopped after the test."""
    made = []

    def make(target):
        c = harness.kazoo_client(target)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close_quietly()


@pytest.fixture
def make_zkresp(zk):
    made = []

    def make(zk_target=None, start=True, **kw):
        z = Zkresp(zk_target if zk_target is not None else zk, **kw)
        made.append(z)
        if start:
            z.start()
        return z
    yield make
    for z in reversed(made):
        z.close()


@pytest.fixture
def zkresp(make_zkresp):
    return make_zkresp()


@pytest.fixture
def zkresp_pair(make_zkresp):
    a = make_zkresp()
    b = make_zkresp(root=a.root)
    return a, b


@pytest.fixture(scope="module")
def zkr(zk):
    holder = {"z": Zkresp(zk).start()}

    def get():
        z = holder["z"]
        if not z.alive():
            holder["z"] = Zkresp(zk).start()
            raise AssertionError("zkresp had died (status %s) before this test; restarted" % z.proc.returncode)
        return holder["z"]
    yield get
    holder["z"].close()


@pytest.fixture
def make_zk():
    made = []

    def make(**kw):
        s = ZkServer(**kw)
        made.append(s)
        return s.start()
    yield make
    for s in made:
        s.close()


@pytest.fixture
def make_proxy():
    made = []

    def make(target):
        p = ZkProxy("127.0.0.1", target.port)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


@pytest.fixture(scope="session")
def redis_ref():
    srv = RedisServer("--databases", "1").start()
    yield srv
    srv.close()


# ------------------------------------------------ per-test watch and report

class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout("test exceeded %.0fs (ZKRESP_TEST_TIMEOUT)" % TEST_TIMEOUT)


@pytest.fixture(autouse=True)
def _zkresp_watch(request):
    """Set up before and torn down after every other fixture of the test:
    bounds the test's run time and fails it on a sanitizer report in the
    log of any zkresp (including ones shared by a module)."""
    request.node._zkresp_first = len(harness.ALL_ZKRESPS)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
    reports = []
    for z in harness.ALL_ZKRESPS:
        r = z.new_sanitizer_reports()
        if r:
            reports.append("zkresp port %d root %s:\n%s" % (z.port, z.root, r))
    if reports:
        pytest.fail("sanitizer report in zkresp output:\n" + "\n\n".join(reports), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    first = getattr(item, "_zkresp_first", len(harness.ALL_ZKRESPS))
    shown = set()
    for i, z in enumerate(harness.ALL_ZKRESPS):
        if i < first and not z.alive():
            continue
        if id(z) in shown or z.proc is None:
            continue
        shown.add(id(z))
        rep.sections.append(("zkresp port %d root %s (%s) log tail" % (z.port, z.root, z.log_path),
                             z.log_tail(120)))
