"""Tier 16: the native lock commands (issue 18) -- LOCK.ACQUIRE, LOCK.RELEASE,
LOCK.RENEW, LOCK.CONVERT, LOCK.INFO -- through redis-py against three zkresp
sidecars on one root of one ZooKeeper started for this module.

Each test checks one clause of the contract from outside: the 36 cells of
the compatibility matrix, mutual exclusion and token order under random
contention with conversions, strict FIFO across sidecars with increasing
tokens, no reader overtaking a queued writer, readers granted together,
down- and up-conversions, the conversion queue and a conversion deadlock,
reentrancy, leases (from the grant) and RENEW, a holder's sidecar
killed or stalled past its session, waiters that disconnect or time out
leaving the queue at once, the sidecar serving other connections while one
waits, LOCK.INFO's shape in RESP2 and RESP3, the separate namespace, the
error replies, and random requests from several connections at once.

Blocking waiters run in threads, each on its own connection (socket
timeout above its WAIT).  A waiter is put in the queue in a known order by
waiting until LOCK.INFO lists it before the next one is sent."""

import contextlib
import random
import socket
import struct
import threading
import time

import pytest
import redis

import harness
from harness import Zkresp, unique, wait_for
from nativeload import flat_map, holders, lock_info, text, waiting
from resp import decode_one, elements, encode

MODES = ["NL", "CR", "CW", "PR", "PW", "EX"]
MATRIX = {            # held mode (row) x requested mode (column), in MODES order
    "NL": "YYYYYY",
    "CR": "YYYYYN",
    "CW": "YYYNNN",
    "PR": "YYNYNN",
    "PW": "YYNNNN",
    "EX": "YNNNNN",
}
HOLDER_FIELDS = {"owner", "mode", "token", "count", "lease_left_ms", "sidecar", "client"}
WAITER_FIELDS = {"owner", "mode", "waited_ms", "kind"}
SESSION_MS = 4000
# lease_left_ms is a lease end less the leader's clock as the answering
# sidecar estimates it (its last write's mtime against its own clock, late
# by that reply's delay); the sidecar that wrote the lease end estimated it
# too.  Two estimates differ by their replies' delays: a hold may show a few
# ms more than its PX.
LEASE_SLACK_MS = 250


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def lock_zk():
    srv = harness.ZkServer().start()
    yield srv
    srv.close()


def _sidecar(zk, root=None):
    """A sidecar of this file's kind (4 s session), not started."""
    return Zkresp(zk, root=root, session_timeout=SESSION_MS, request_timeout=2000)


@pytest.fixture(scope="module")
def trio(lock_zk):
    """Three sidecars on one root (like three pods), each with a 4 s
    session.  A test that finds one dead fails and it is started again."""
    first = _sidecar(lock_zk)
    sides = [first] + [_sidecar(lock_zk, first.root) for _ in range(2)]
    for z in sides:
        z.start()
    yield sides
    for z in reversed(sides):
        z.close()


@pytest.fixture
def sc(trio):
    dead = [z for z in trio if not z.alive()]
    for z in dead:
        z.restart()
    if dead:
        raise AssertionError("a sidecar had died before this test; restarted")
    return trio


@pytest.fixture
def conn(sc):
    """conn(i) -> a new redis-py connection to sidecar i (0, 1, 2), closed
    after the test."""
    made = []

    def make(i, timeout=10):
        r = sc[i].redis(socket_timeout=timeout)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


@pytest.fixture
def waiters():
    """Waiter threads started by the test: let go (their holds released) and
    joined after it."""
    made = []
    yield made
    for w in made:
        w.let_go()
    for w in made:
        w.join(5)
        w.close()


# ---------------------------------------------------------------- helpers

def acquire(r, key, owner, mode=None, px=None, wait=None):
    args = ["LOCK.ACQUIRE", key, owner]
    if mode is not None:
        args += ["MODE", mode]
    if px is not None:
        args += ["PX", px]
    if wait is not None:
        args += ["WAIT", wait]
    return r.execute_command(*args)


def release(r, key, owner):
    return r.execute_command("LOCK.RELEASE", key, owner)


def renew(r, key, owner, px):
    return r.execute_command("LOCK.RENEW", key, owner, "PX", px)


def convert(r, key, owner, mode, wait=None):
    args = ["LOCK.CONVERT", key, owner, "MODE", mode]
    if wait is not None:
        args += ["WAIT", wait]
    return r.execute_command(*args)


def is_token(v):
    return isinstance(v, int) and not isinstance(v, bool)


def wait_queued(r, key, expected, timeout=10):
    """Until LOCK.INFO lists exactly `expected` waiters, [(owner, mode,
    kind)], in that order."""
    wait_for(lambda: waiting(r, key) == expected, timeout,
             what="LOCK.INFO waiters of %s to be %r" % (key, expected))


class Waiter:
    """One blocking LOCK.ACQUIRE (or LOCK.CONVERT) in a thread, on its own
    connection.  After a grant it holds until let_go(), then releases on
    the same connection (at once when auto_release)."""

    def __init__(self, z, key, owner, mode="EX", wait=20000, px=None, convert_conn=None,
                 auto_release=False):
        self.key, self.owner, self.mode, self.wait = key, owner, mode, wait
        self.r = convert_conn or z.redis(socket_timeout=wait / 1000.0 + 20)
        self.own_conn = convert_conn is None
        if convert_conn is None:
            self.args = ["LOCK.ACQUIRE", key, owner, "MODE", mode, "WAIT", wait]
            if px is not None:
                self.args += ["PX", px]
        else:
            self.args = ["LOCK.CONVERT", key, owner, "MODE", mode, "WAIT", wait]
        self.auto_release = auto_release
        self.done = threading.Event()
        self._go = threading.Event()
        self.result = self.error = self.released = None
        self.t_sent = self.t_reply = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, registry=None):
        if registry is not None:
            registry.append(self)
        self.thread.start()
        return self

    def _run(self):
        try:
            self.t_sent = time.monotonic()
            self.result = self.r.execute_command(*self.args)
            self.t_reply = time.monotonic()
        except Exception as e:  # noqa: BLE001 - the test reports it
            self.error = e
        finally:
            self.done.set()
        if self.error is None and is_token(self.result):
            if not self.auto_release:
                self._go.wait(60)
            try:
                self.released = release(self.r, self.key, self.owner)
            except Exception as e:  # noqa: BLE001
                self.error = e

    @property
    def granted(self):
        return self.done.is_set() and self.error is None and is_token(self.result)

    def outcome(self, timeout):
        """The reply (token or None) once it came, within timeout."""
        if not self.done.wait(timeout):
            raise AssertionError("%s: no reply to %s within %.1fs" % (self.owner, self.args[0], timeout))
        if self.error is not None:
            raise AssertionError("%s: %s failed: %r" % (self.owner, self.args[0], self.error))
        return self.result

    def let_go(self):
        self._go.set()

    def join(self, timeout):
        self.thread.join(timeout)

    def close(self):
        if self.own_conn:
            self.r.close()


def _resp_err(c, *args):
    """The raw reply of a command that must fail: its text."""
    raw = c.cmd(*args)
    assert raw.startswith(b"-"), "%r answered %r, not an error" % (args, raw)
    return raw[1:-2].decode()


# ---------------------------------------------------------------- tests

def test_compatibility_matrix_all_36_cells(sc, conn):
    """For every held mode X (on sidecar A) and requested mode Y (on sidecar
    B, WAIT 0): a token exactly when the matrix says the two are granted
    together, else null.  Both are released between cells and LOCK.INFO
    then shows the lock empty."""
    a, b = conn(0), conn(1)
    key = unique("matrix")
    wrong = []
    for held in MODES:
        for j, req in enumerate(MODES):
            t_held = acquire(a, key, "holder", mode=held)
            assert is_token(t_held), "%s holder: %r" % (held, t_held)
            got = acquire(b, key, "requester", mode=req, wait=0)
            want = MATRIX[held][j] == "Y"
            if is_token(got) != want or (not want and got is not None):
                wrong.append("held %s, asked %s: expected %s, got %r" % (
                    held, req, "a token" if want else "null", got))
            assert release(a, key, "holder") == 1, (held, req)
            if is_token(got):
                assert release(b, key, "requester") == 1, (held, req)
            info = lock_info(b, key)
            assert info == {"holders": [], "waiters": []}, (held, req, info)
    assert not wrong, "matrix cells answered wrongly:\n" + "\n".join(wrong)


def _compatible(m1, m2):
    return MATRIX[m1][MODES.index(m2)] == "Y"


def test_random_contention_modes_and_conversions(sc):
    """Nine clients (three per sidecar) for 5 s on one lock, each repeatedly
    acquiring a random mode (WAIT 3000), sometimes converting (EX/PW down to
    PR, PR/CR up to EX), holding a few ms and releasing (a conversion
    deadlock's EDEADLK is counted and the old mode kept: its reply is
    test_conversion_deadlock's subject).  Each hold is recorded on one clock from the reply that granted it to the send of the
    command that ended it, so recorded intervals lie inside the real ones:
    no two holds of incompatible modes overlap, and of two incompatible
    holds the later one has the greater token."""
    import random
    key = unique("storm")
    segs, errors, counts = [], [], {"grants": 0, "nulls": 0, "up": 0, "down": 0, "edeadlk": 0}
    mu = threading.Lock()
    stop = time.monotonic() + 5.0
    weights = ["EX"] * 4 + ["PR"] * 4 + ["PW", "CW", "CR", "NL"]

    def worker(i):
        rnd = random.Random(i)
        r = sc[i % 3].redis(socket_timeout=30)
        owner = "c%d" % i
        try:
            while time.monotonic() < stop:
                mode = rnd.choice(weights)
                tok = acquire(r, key, owner, mode=mode, wait=3000)
                t_a = time.monotonic()
                if tok is None:
                    with mu:
                        counts["nulls"] += 1
                    continue
                mine = [[owner, mode, tok, t_a, None]]
                time.sleep(rnd.uniform(0, 0.004))
                if rnd.random() < 0.35:
                    if mode in ("EX", "PW"):
                        t_c = time.monotonic()
                        t2 = convert(r, key, owner, "PR")
                        if t2 is None:
                            errors.append("%s: down-conversion %s -> PR answered null" % (owner, mode))
                        else:
                            # The stronger mode ends when the conversion is
                            # sent; the PR hold runs from the grant on.
                            mine[0][4] = t_c
                            mine.append([owner, "PR", tok, t_a, None])
                            with mu:
                                counts["down"] += 1
                    elif mode in ("PR", "CR"):
                        try:
                            t2 = convert(r, key, owner, "EX", wait=3000)
                        except redis.ResponseError as e:
                            # Two holders converting up wait for each other.
                            # Not this test's subject (see
                            # test_conversion_deadlock): the old mode is kept.
                            if not str(e).startswith("EDEADLK"):
                                raise
                            t2 = None
                            with mu:
                                counts["edeadlk"] += 1
                        if t2 is not None:
                            mine.append([owner, "EX", t2, time.monotonic(), None])
                            with mu:
                                counts["up"] += 1
                    time.sleep(rnd.uniform(0, 0.004))
                t_r = time.monotonic()
                for sgm in mine:
                    if sgm[4] is None:
                        sgm[4] = t_r
                rel = release(r, key, owner)
                if rel != 1:
                    errors.append("%s: RELEASE of its %s hold answered %r" % (owner, mode, rel))
                with mu:
                    counts["grants"] += 1
                    segs.extend(mine)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("%s: %r" % (owner, e))
        finally:
            r.close()

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(9)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(40)
    print("storm: %r, %d hold segments" % (counts, len(segs)))
    assert not errors, errors[:5]
    assert counts["grants"] >= 30 and counts["up"] >= 1 and counts["down"] >= 1, counts
    bad = []
    for x in range(len(segs)):
        o1, m1, k1, s1, e1 = segs[x]
        for y in range(x + 1, len(segs)):
            o2, m2, k2, s2, e2 = segs[y]
            if o1 == o2 or _compatible(m1, m2):
                continue
            if s1 < e2 and s2 < e1:
                bad.append("overlap: %s %s tok %d [%.4f, %.4f] and %s %s tok %d [%.4f, %.4f]"
                           % (o1, m1, k1, s1, e1, o2, m2, k2, s2, e2))
            elif (e1 <= s2 and not k1 < k2) or (e2 <= s1 and not k2 < k1):
                bad.append("token order: %s %s tok %d [%.4f, %.4f] vs %s %s tok %d [%.4f, %.4f]"
                           % (o1, m1, k1, s1, e1, o2, m2, k2, s2, e2))
    assert not bad, "%d violations, first: %s" % (len(bad), "\n".join(bad[:10]))
    assert lock_info(sc[0].redis(), key) == {"holders": [], "waiters": []}


def test_mode_names_case_insensitive_with_aliases(sc, conn):
    """MODE is case-insensitive; SHARED is PR, EXCLUSIVE is EX; no MODE is
    EX.  LOCK.INFO shows the canonical mode."""
    r = conn(0)
    key = unique("modes")
    for given, canon in (("shared", "PR"), ("Shared", "PR"), ("pr", "PR"), ("cw", "CW")):
        assert is_token(acquire(r, key, "o", mode=given)), given
        assert [(o, m.upper()) for o, m in holders(r, key)] == [("o", canon)], given
        assert release(r, key, "o") == 1
    for given in ("exclusive", "EXCLUSIVE", "ex", None):
        assert is_token(acquire(r, key, "o", mode=given)), given
        assert [(o, m.upper()) for o, m in holders(r, key)] == [("o", "EX")], given
        assert release(r, key, "o") == 1


def test_strict_fifo_12_waiters_across_three_sidecars(sc, conn, waiters):
    """One EX holder; 12 EX waiters with distinct owners, round-robin over
    the 3 sidecars, queued one at a time in a known order.  Released one by
    one, the grants come exactly in arrival order -- each release grants
    exactly the next waiter and nobody else -- and every token is greater
    than the one before."""
    r0 = conn(0)
    key = unique("fifo")
    taken_before = reads_ahead_taken(sc)
    t0 = acquire(r0, key, "h0", mode="EX")
    assert is_token(t0)
    owners = ["w%02d-%s" % (i, "abc"[i % 3] * (1 + i % 4)) for i in range(12)]
    ws = []
    for i, owner in enumerate(owners):
        ws.append(Waiter(sc[i % 3], key, owner, "EX", wait=30000).start(waiters))
        wait_queued(r0, key, [(o, "EX", "new") for o in owners[:i + 1]])
    assert holders(r0, key) == [("h0", "EX")]
    assert not any(w.done.is_set() for w in ws), "a waiter answered while the holder held"
    assert release(r0, key, "h0") == 1
    tokens = [t0]
    for i, w in enumerate(ws):
        pending = ws[i:]
        came = wait_for(lambda: [p for p in pending if p.done.is_set()], 10,
                        what="a grant after the release before %s" % w.owner)
        assert [p.owner for p in came] == [w.owner], \
            "release %d answered %r, expected only %s" % (i, [(p.owner, p.result, p.error) for p in came], w.owner)
        tok = w.outcome(0)
        assert is_token(tok), (w.owner, tok)
        assert tok > tokens[-1], "token of %s (%d) not above the previous grant's (%d)" % (w.owner, tok, tokens[-1])
        tokens.append(tok)
        assert holders(r0, key) == [(w.owner, "EX")]
        w.let_go()
        w.join(10)
        assert w.released == 1, (w.owner, w.released, w.error)
    assert lock_info(r0, key) == {"holders": [], "waiters": []}
    # every handoff crossed sidecars: the woken waiter took the table its
    # sidecar's ZooKeeper thread read as the event came (read-ahead)
    taken = reads_ahead_taken(sc) - taken_before
    print("reads ahead taken: %d" % taken)
    assert taken >= 8, "%d of 12 cross-sidecar wake-ups took the read-ahead" % taken


def reads_ahead_taken(sides):
    total = 0
    for z in sides:
        r = z.redis()
        try:
            total += int(r.info("zookeeper")["zk_reads_ahead_taken"])
        finally:
            r.close()
    return total


SO_TIMESTAMPNS = 35  # Linux: each read carries the kernel's receive time


def _timed_reply(sock):
    """The next reply on sock (one read: a short reply) and the time the
    kernel received it, in ns."""
    data, anc, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", payload[:16])
            return decode_one(data), sec * 10**9 + nsec
    raise AssertionError("no receive time on the socket (%r)" % data)


def test_waiter_on_the_releasers_sidecar_answered_before_the_release(sc, conn):
    """A release whose multi grants a waiter of its own sidecar answers
    that waiter first: the kernel received the waiter's grant (a token
    above the holder's) before the release's reply."""
    key = unique("first")
    holder = socket.create_connection(("127.0.0.1", sc[0].port), timeout=10)
    waiter = socket.create_connection(("127.0.0.1", sc[0].port), timeout=10)
    try:
        for s in (holder, waiter):
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        holder.sendall(encode("LOCK.ACQUIRE", key, "h"))
        t0, _ = _timed_reply(holder)
        assert is_token(t0), t0
        waiter.sendall(encode("LOCK.ACQUIRE", key, "w", "WAIT", "10000"))
        wait_queued(conn(1), key, [("w", "EX", "new")])
        holder.sendall(encode("LOCK.RELEASE", key, "h"))
        released, at_release = _timed_reply(holder)
        granted, at_grant = _timed_reply(waiter)
        assert released == 1
        assert is_token(granted) and granted > t0, (t0, granted)
        assert at_grant < at_release, \
            "the release answered %d ns before the waiter it granted" % (at_grant - at_release)
        assert holders(conn(2), key) == [("w", "EX")]
        assert release(conn(0), key, "w") == 1
    finally:
        holder.close()
        waiter.close()


def test_reader_never_passes_queued_writer(sc, conn, waiters):
    """A PR holder, then an EX waiter: a new PR request (compatible with the
    holder) does not pass the queued writer -- WAIT 200 answers null.  After
    the reader releases, the writer gets the lock first; a reader queued
    behind it only after the writer releases, with a greater token."""
    a, c = conn(0), conn(2)
    key = unique("rw")
    t_r1 = acquire(a, key, "r1", mode="PR")
    assert is_token(t_r1)
    w = Waiter(sc[1], key, "writer", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("writer", "EX", "new")])
    t0 = time.monotonic()
    assert acquire(c, key, "r2", mode="PR", wait=200) is None, "a new reader passed the queued writer"
    assert time.monotonic() - t0 >= 0.18
    assert acquire(c, key, "r2", mode="PR", wait=0) is None
    wait_queued(a, key, [("writer", "EX", "new")])
    r3 = Waiter(sc[2], key, "r3", "PR", wait=20000).start(waiters)
    wait_queued(a, key, [("writer", "EX", "new"), ("r3", "PR", "new")])
    assert release(a, key, "r1") == 1
    t_w = w.outcome(10)
    assert is_token(t_w) and t_w > t_r1, (t_w, t_r1)
    assert not r3.done.wait(0.3), "the reader behind the writer was answered while the writer held: %r" % r3.result
    assert holders(a, key) == [("writer", "EX")]
    w.let_go()
    t_r3 = r3.outcome(10)
    assert is_token(t_r3) and t_r3 > t_w, (t_r3, t_w)


def test_queued_readers_granted_together_after_writer(sc, conn, waiters):
    """An EX holder, then three PR waiters and an EX waiter behind them, on
    three sidecars: the writer's release grants all three readers (each is
    compatible with everything granted and everything ahead of it was
    granted), the EX waiter still waits and is granted only when the last
    reader has released, with a token above every reader's."""
    a = conn(0)
    key = unique("batch")
    t0 = acquire(a, key, "writer", mode="EX")
    readers = []
    for i in range(3):
        readers.append(Waiter(sc[i], key, "r%d" % i, "PR", wait=20000).start(waiters))
        wait_queued(a, key, [(w.owner, "PR", "new") for w in readers])
    last = Waiter(sc[1], key, "w2", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [(w.owner, "PR", "new") for w in readers] + [("w2", "EX", "new")])
    assert release(a, key, "writer") == 1
    toks = [w.outcome(10) for w in readers]
    assert all(is_token(t) and t > t0 for t in toks), (toks, t0)
    assert sorted(holders(a, key)) == [("r0", "PR"), ("r1", "PR"), ("r2", "PR")]
    assert waiting(a, key) == [("w2", "EX", "new")]
    for w in readers[:2]:
        w.let_go()
        w.join(10)
        assert w.released == 1
    assert not last.done.wait(0.3), "the writer was answered while r2 held PR: %r" % last.result
    readers[2].let_go()
    t2 = last.outcome(10)
    assert is_token(t2) and t2 > max(toks), (t2, toks)


def test_readers_handed_the_lock_together_each_keep_their_hold(sc, conn, waiters):
    """h holds EX; R (EX), then readers c1 and c6 (PR, on two other
    sidecars) queue.  h releases: R is granted, having seen both readers
    queued behind it; R releases: c1 and c6 are granted together.  When c1
    releases (at once, on its grant), c6 still holds PR: LOCK.INFO lists it
    as the holder (not as a waiter), RENEW answers 1, a PR -> NL conversion
    is granted, and its RELEASE answers 1 and frees the lock."""
    a = conn(0)
    key = unique("handoff")
    assert is_token(acquire(a, key, "h", mode="EX"))
    rr = Waiter(sc[0], key, "R", "EX", wait=10000).start(waiters)
    wait_queued(a, key, [("R", "EX", "new")])
    c1 = Waiter(sc[1], key, "c1", "PR", wait=10000, auto_release=True).start(waiters)
    wait_queued(a, key, [("R", "EX", "new"), ("c1", "PR", "new")])
    c6 = Waiter(sc[2], key, "c6", "PR", wait=10000).start(waiters)
    wait_queued(a, key, [("R", "EX", "new"), ("c1", "PR", "new"), ("c6", "PR", "new")])
    assert release(a, key, "h") == 1
    t_r = rr.outcome(5)
    assert is_token(t_r)
    rr.let_go()
    t1, t6 = c1.outcome(5), c6.outcome(5)
    assert is_token(t1) and is_token(t6) and min(t1, t6) > t_r, (t_r, t1, t6)
    c1.join(5)
    assert c1.released == 1
    info = lock_info(a, key)
    assert ([(h["owner"], h["mode"], h["token"]) for h in info["holders"]], info["waiters"]) == \
        ([("c6", "PR", t6)], []), "after c1's release, c6 (granted PR, token %d) shows as %r" % (t6, info)
    r6 = conn(2)
    assert renew(r6, key, "c6", 30000) == 1, "RENEW of c6's hold"
    assert is_token(convert(r6, key, "c6", "NL")), "c6's PR -> NL"
    assert acquire(a, key, "x", mode="PW", wait=0) is not None, "PW beside c6's NL"
    assert release(a, key, "x") == 1
    c6.let_go()
    c6.join(5)
    assert c6.released == 1
    assert lock_info(a, key) == {"holders": [], "waiters": []}


def test_down_conversion_is_immediate(sc, conn):
    """EX -> PR: answered at once (WAIT 0) with the same token; the hold is
    then PR, so another PR request is granted and an EX one is not."""
    a, b = conn(0), conn(1)
    key = unique("down")
    t = acquire(a, key, "o1", mode="EX")
    assert is_token(t)
    t0 = time.monotonic()
    assert acquire(b, key, "o2", mode="PR") is None, "no WAIT tries once"
    assert time.monotonic() - t0 < 1.0
    assert convert(a, key, "o1", "PR", wait=0) == t
    assert holders(a, key) == [("o1", "PR")]
    t2 = acquire(b, key, "o2", mode="PR", wait=0)
    assert is_token(t2)
    assert sorted(holders(a, key)) == [("o1", "PR"), ("o2", "PR")]
    assert acquire(b, key, "o3", mode="EX", wait=0) is None
    assert release(a, key, "o1") == 1 and release(b, key, "o2") == 1


def test_down_conversion_wakes_compatible_waiter(sc, conn, waiters):
    """An EX holder with a PR waiter (on another sidecar) queued: the
    holder's EX -> PR conversion lets the waiter in at once, both then hold
    PR."""
    a = conn(0)
    key = unique("downwake")
    t = acquire(a, key, "o1", mode="EX")
    w = Waiter(sc[2], key, "reader", "PR", wait=20000).start(waiters)
    wait_queued(a, key, [("reader", "PR", "new")])
    assert convert(a, key, "o1", "PR") == t
    tw = w.outcome(5)
    assert is_token(tw) and tw > t, (tw, t)
    assert sorted(holders(a, key)) == [("o1", "PR"), ("reader", "PR")]
    assert release(a, key, "o1") == 1


def test_up_conversion_waits_and_goes_before_new_requests(sc, conn, waiters):
    """o1 and o2 hold PR; o3 queues for EX; then o1 converts to EX: the
    conversion waits for o2 and goes ahead of o3 although o3 asked first
    (LOCK.INFO: o1 "conversion" before o3 "new").  When o2 releases, o1 is
    converted (token above o2's) and o3 still waits; when o1 releases, o3
    gets the lock with a greater token.  A sole holder's up-conversion is
    immediate."""
    a, b = conn(0), conn(1)
    key = unique("up")
    t1 = acquire(a, key, "o1", mode="PR")
    t2 = acquire(b, key, "o2", mode="PR")
    assert is_token(t1) and is_token(t2)
    o3 = Waiter(sc[2], key, "o3", "EX", wait=20000).start(waiters)
    wait_queued(b, key, [("o3", "EX", "new")])
    conv = Waiter(sc[0], key, "o1", "EX", wait=20000, convert_conn=conn(0, timeout=40)).start(waiters)
    wait_queued(b, key, [("o1", "EX", "conversion"), ("o3", "EX", "new")])
    assert not conv.done.is_set(), "the conversion was answered while o2 held PR: %r" % conv.result
    assert sorted(holders(b, key)) == [("o1", "PR"), ("o2", "PR")], "the old mode is held while converting"
    assert release(b, key, "o2") == 1
    tc = conv.outcome(10)
    assert is_token(tc) and tc > t2, "conversion token %r not above o2's %d" % (tc, t2)
    assert not o3.done.wait(0.3), "o3 was answered while o1 held EX: %r" % o3.result
    assert holders(b, key) == [("o1", "EX")]
    assert waiting(b, key) == [("o3", "EX", "new")]
    conv.let_go()    # releases o1 on its connection
    t3 = o3.outcome(10)
    conv.join(10)
    assert conv.released == 1
    assert is_token(t3) and t3 > tc, (t3, tc)
    o3.let_go()
    o3.join(10)
    # A sole holder converts up at once.
    t = acquire(a, key, "solo", mode="PR")
    tu = convert(a, key, "solo", "EX", wait=0)
    assert is_token(tu) and tu >= t, (t, tu)
    assert holders(b, key) == [("solo", "EX")]
    assert acquire(b, key, "other", mode="NL", wait=0) is not None
    assert acquire(b, key, "other2", mode="CR", wait=0) is None
    assert release(a, key, "solo") == 1 and release(b, key, "other") == 1


def test_conversion_wait_timeout_keeps_old_mode(sc, conn):
    """PR -> EX with WAIT 300 while another PR holder holds: null after
    about 300 ms; the converting owner still holds PR, no conversion is left
    queued, and a new PR request is granted at once."""
    a, b = conn(0), conn(1)
    key = unique("convto")
    assert is_token(acquire(a, key, "o1", mode="PR"))
    assert is_token(acquire(b, key, "o2", mode="PR"))
    t0 = time.monotonic()
    assert convert(a, key, "o1", "EX", wait=300) is None
    assert time.monotonic() - t0 >= 0.28
    info = lock_info(b, key)
    assert sorted((h["owner"], h["mode"]) for h in info["holders"]) == [("o1", "PR"), ("o2", "PR")], info
    assert info["waiters"] == [], info
    assert is_token(acquire(b, key, "o3", mode="PR", wait=0)), "a new reader is blocked by a conversion that gave up"
    for r, o in ((a, "o1"), (b, "o2"), (b, "o3")):
        assert release(r, key, o) == 1, o


@pytest.mark.parametrize("how", ["released through another sidecar", "lease ended"])
def test_conversion_whose_hold_ends_while_it_waits_is_answered_at_once(sc, conn, waiters, how):
    """o1 and o2 hold PR; o1's conversion to EX waits (WAIT 60 s) for o2.
    When o1's own hold ends meanwhile (released through another sidecar,
    or its lease not renewed), the conversion is answered then, not at the
    end of its WAIT, with an error (null would say the old mode was kept:
    o1 holds nothing); o2 holds on alone and nothing is queued."""
    a, b = conn(0), conn(1)
    key = unique("cvend")
    assert is_token(acquire(a, key, "o1", mode="PR", px=(3000 if how == "lease ended" else 60000)))
    assert is_token(acquire(b, key, "o2", mode="PR", px=60000))
    conv = Waiter(sc[0], key, "o1", "EX", wait=60000, convert_conn=conn(0, timeout=90)).start(waiters)
    wait_queued(b, key, [("o1", "EX", "conversion")])
    if how == "released through another sidecar":
        assert release(b, key, "o1") == 1
    if not conv.done.wait(30):
        raise AssertionError("the conversion was not answered within 30 s of its hold's end (WAIT 60 s)")
    assert isinstance(conv.error, redis.ResponseError), (conv.result, conv.error)
    assert str(conv.error) == "owner's hold of this lock ended while its conversion waited"
    assert holders(b, key) == [("o2", "PR")] and waiting(b, key) == []
    assert release(b, key, "o2") == 1


def test_conversion_deadlock(sc, conn, waiters):
    """Two PR holders both converting to EX wait for each other (each for
    the other's PR hold, the second also behind the first in the conversion
    queue).  The contract's replies: a token or null (on WAIT), the old
    mode kept -- so both answer null within their WAIT plus a margin, both
    still hold PR, nothing is left queued, and each can release."""
    a, b = conn(0), conn(1)
    key = unique("deadlock")
    t1 = acquire(a, key, "o1", mode="PR")
    t2 = acquire(b, key, "o2", mode="PR")
    assert is_token(t1) and is_token(t2)
    c1 = Waiter(sc[0], key, "o1", "EX", wait=800, convert_conn=conn(0, timeout=20)).start(waiters)
    wait_queued(a, key, [("o1", "EX", "conversion")])
    c2 = Waiter(sc[1], key, "o2", "EX", wait=800, convert_conn=conn(1, timeout=20)).start(waiters)
    replies = {}
    for w in (c1, c2):
        assert w.done.wait(5), "%s: no reply to its conversion" % w.owner
        replies[w.owner] = w.result if w.error is None else "error: %s" % w.error
    info = lock_info(a, key)
    assert sorted((h["owner"], h["mode"]) for h in info["holders"]) == [("o1", "PR"), ("o2", "PR")], info
    assert info["waiters"] == [], info
    assert release(a, key, "o1") == 1 and release(b, key, "o2") == 1
    assert replies == {"o1": None, "o2": None}, \
        "deadlocked conversions answered %r (contract: a token or null)" % replies


def test_reentrancy(sc, conn):
    """The same owner acquiring again in the same mode: the same token and
    LOCK.INFO count 2.  Releases: 1 (still held, count 1), 1 (free), then 0.
    Acquiring in another mode is an error naming LOCK.CONVERT, and leaves
    the hold as it was."""
    r = conn(0)
    key = unique("reent")
    t = acquire(r, key, "o", mode="EX")
    assert is_token(t)
    assert acquire(r, key, "o", mode="EX") == t
    info = lock_info(r, key)
    assert [(h["owner"], h["mode"], h["count"], h["token"]) for h in info["holders"]] == [("o", "EX", 2, t)], info
    assert release(r, key, "o") == 1
    info = lock_info(r, key)
    assert [(h["owner"], h["count"]) for h in info["holders"]] == [("o", 1)], info
    assert acquire(conn(1), key, "x", mode="EX", wait=0) is None, "free after the first of two releases"
    assert release(r, key, "o") == 1
    assert lock_info(r, key) == {"holders": [], "waiters": []}
    assert release(r, key, "o") == 0
    t = acquire(r, key, "o", mode="EX")
    with pytest.raises(redis.ResponseError) as e:
        acquire(r, key, "o", mode="PR")
    assert "LOCK.CONVERT" in str(e.value), str(e.value)
    assert r.ping()
    info = lock_info(r, key)
    assert [(h["owner"], h["mode"], h["count"], h["token"]) for h in info["holders"]] == [("o", "EX", 1, t)], info
    assert release(r, key, "o") == 1


def test_lease_ends_and_waiter_on_other_sidecar_gets_it(sc, conn, waiters):
    """A hold with PX 500, never renewed, ends with its lease: a waiter on
    another sidecar (WAIT 5000) is granted no earlier than the lease's end
    and within about 1.5 s of it, with a greater token.  The old owner then
    holds nothing: RELEASE and RENEW answer 0."""
    a = conn(0)
    key = unique("lease")
    t_sent = time.monotonic()
    t = acquire(a, key, "short", mode="EX", px=500)
    t_ok = time.monotonic()
    assert is_token(t)
    w = Waiter(sc[1], key, "w", "EX", wait=5000).start(waiters)
    tw = w.outcome(8)
    assert is_token(tw), "the waiter was not granted after the lease ended: %r" % tw
    assert w.t_reply >= t_sent + 0.5 - 0.02, "granted %.0f ms before the lease could end" % (
        (t_sent + 0.5 - w.t_reply) * 1000)
    late = w.t_reply - (t_ok + 0.5)
    assert late <= 1.5, "granted %.0f ms after the lease's end" % (late * 1000)
    assert tw > t
    assert renew(a, key, "short", 5000) == 0
    assert release(a, key, "short") == 0
    assert holders(a, key) == [("w", "EX")]


def test_lease_of_a_waiter_runs_from_its_grant(sc, conn, waiters):
    """A waiter asking PX 2000 that waits 1.2 s gets a full lease from its
    grant: LOCK.INFO's lease_left_ms right after the grant is near 2000
    (not 2000 less the wait), and the hold ends no earlier than 2 s after
    the release that granted it (a waiter behind it gets the lock then)."""
    a = conn(0)
    key = unique("waitlease")
    assert is_token(acquire(a, key, "h", mode="EX"))
    w = Waiter(sc[1], key, "w", "EX", wait=10000, px=2000).start(waiters)
    wait_queued(a, key, [("w", "EX", "new")])
    w2 = Waiter(sc[2], key, "w2", "EX", wait=10000).start(waiters)
    wait_queued(a, key, [("w", "EX", "new"), ("w2", "EX", "new")])
    time.sleep(1.2)
    t_rel = time.monotonic()
    assert release(a, key, "h") == 1
    assert is_token(w.outcome(5))
    left = [h["lease_left_ms"] for h in lock_info(a, key)["holders"] if h["owner"] == "w"]
    t2 = w2.outcome(8)
    assert is_token(t2)
    assert w2.t_reply >= t_rel + 2.0 - 0.02, \
        "w's PX 2000 hold ended %.0f ms after its grant" % ((w2.t_reply - t_rel) * 1000)
    assert left and 1500 <= left[0] <= 2000 + LEASE_SLACK_MS, \
        "lease_left_ms of a hold granted a moment ago with PX 2000 after a 1.2 s wait: %r" % left


def test_lease_near_the_largest_px(sc, conn, waiters):
    """PX takes what SET's PX takes: up to the largest integer less the
    time now (past that, Redis's invalid expire time, for ACQUIRE and
    RENEW).  A lease that long is a lease, through each path that writes a
    lease end: the grant at once, a reentrant ACQUIRE, RENEW, and a
    waiter granted by another sidecar's release; LOCK.INFO shows it."""
    a = conn(0)
    key = unique("hugepx")
    huge = 9223300000000000000  # accepted: below 2^63 - 1 - now
    for cmd in ("LOCK.ACQUIRE", "LOCK.RENEW"):
        with pytest.raises(redis.ResponseError) as e:
            a.execute_command(cmd, key, "h", "PX", 2 ** 63 - 1)
        assert str(e.value) == "invalid expire time in '%s' command" % cmd.lower()
    t = acquire(a, key, "h", mode="EX", px=huge)
    assert is_token(t)
    assert acquire(a, key, "h", mode="EX", px=huge) == t
    assert renew(a, key, "h", huge) == 1
    w = Waiter(sc[1], key, "w", "EX", wait=10000, px=huge).start(waiters)
    wait_queued(a, key, [("w", "EX", "new")])
    [left] = [h["lease_left_ms"] for h in lock_info(a, key)["holders"]]
    assert left > 10 ** 18, left
    assert release(a, key, "h") == 1
    assert release(a, key, "h") == 1
    tw = w.outcome(5)
    assert is_token(tw) and tw > t
    [left] = [h["lease_left_ms"] for h in lock_info(a, key)["holders"] if h["owner"] == "w"]
    assert left > 10 ** 18, left
    assert release(a, key, "w") == 1
    assert holders(a, key) == []


def test_renew_keeps_hold_past_several_leases(sc, conn):
    """RENEW every 100 ms keeps a PX 600 hold for over 4 leases: every
    RENEW answers 1, the lock stays refused elsewhere.  RENEW PX 20000
    restarts the lease (lease_left_ms near 20000).  RENEW by an owner that
    holds nothing, or of a lock nobody holds, answers 0."""
    a, b = conn(0), conn(1)
    key = unique("renew")
    t = acquire(a, key, "o", mode="EX", px=600)
    assert is_token(t)
    end = time.monotonic() + 2.6
    replies = []
    while time.monotonic() < end:
        replies.append(renew(a, key, "o", 600))
        time.sleep(0.1)
    assert replies and all(x == 1 for x in replies), replies
    assert acquire(b, key, "x", mode="EX", wait=0) is None
    assert holders(b, key) == [("o", "EX")]
    assert renew(a, key, "o", 20000) == 1
    left = lock_info(b, key)["holders"][0]["lease_left_ms"]
    assert 17000 <= left <= 20000 + LEASE_SLACK_MS, left
    assert renew(b, key, "somebody-else", 1000) == 0
    assert renew(b, unique("nolock"), "o", 1000) == 0
    assert holders(b, key) == [("o", "EX")]
    assert release(a, key, "o") == 1
    assert renew(a, key, "o", 1000) == 0


def test_a_shorter_renewal_shortens_the_lease(sc, conn, waiters):
    """RENEW through the holder's sidecar restarts the lease with the PX it
    gives, shorter too: a PX 20000 hold renewed with PX 1000 shows
    lease_left_ms at most 1000 in LOCK.INFO on every sidecar, and a waiter
    on another sidecar gets the lock about a second later, not 20 s.
    Through another sidecar too: PX 25000 shows everywhere, then PX 1000
    (that sidecar ends the hold at the shorter lease: the holder's own
    timer still runs to the longer one) -- and the hold ends then."""
    a = conn(0)

    def lease_left(key):
        """lease_left_ms of the hold, as each of the three sidecars shows it."""
        return [lock_info(conn(i), key)["holders"][0]["lease_left_ms"] for i in range(3)]

    for via in (0, 2):
        key = unique("shorter%d" % via)
        assert is_token(acquire(a, key, "o", mode="EX", px=20000))
        assert renew(conn(2), key, "o", 25000) == 1
        left = lease_left(key)
        assert all(22000 <= x <= 25000 + LEASE_SLACK_MS for x in left), left
        t_renew = time.monotonic()
        assert renew(conn(via), key, "o", 1000) == 1
        left = lease_left(key)
        assert all(0 <= x <= 1000 + LEASE_SLACK_MS for x in left), (via, left)
        w = Waiter(sc[1], key, "w", "EX", wait=8000).start(waiters)
        assert is_token(w.outcome(10)), "the renewed hold did not end (renewed through sidecar %d)" % via
        assert t_renew + 1.0 - 0.02 <= w.t_reply <= t_renew + 2.5, \
            "a PX 1000 renewal through sidecar %d ended the hold %.0f ms after it" % (
                via, (w.t_reply - t_renew) * 1000)
        assert renew(conn(via), key, "o", 1000) == 0
        assert release(conn(1), key, "w") == 1


def test_default_lease_and_hold_outlives_connection(sc, conn):
    """Without PX the lease is 30000 ms; a hold is the owner's, not the
    connection's: after the acquiring client disconnects the lock is still
    held (until released, by the owner through any connection)."""
    key = unique("deflease")
    r = sc[0].redis()
    t = acquire(r, key, "o", mode="EX")
    assert is_token(t)
    left = lock_info(r, key)["holders"][0]["lease_left_ms"]
    assert 28000 <= left <= 30000 + LEASE_SLACK_MS, left
    r.close()
    b = conn(1)
    time.sleep(0.3)
    assert holders(b, key) == [("o", "EX")]
    assert acquire(b, key, "x", mode="EX", wait=0) is None
    assert release(conn(0), key, "o") == 1
    assert lock_info(b, key) == {"holders": [], "waiters": []}


def test_holder_sidecar_killed_releases_after_session(sc, conn, waiters, lock_zk):
    """kill -9 of the sidecar holding a lock (PX 60000, so only the
    session's end frees it): the waiter on another sidecar is granted
    within the session timeout plus a margin, with a greater token, and the
    dead holder is gone from LOCK.INFO."""
    d = _sidecar(lock_zk, sc[0].root)
    try:
        d.start()
        rd = d.redis()
        key = unique("kill")
        td = acquire(rd, key, "doomed", mode="EX", px=60000)
        assert is_token(td)
        rd.close()
        b = conn(1)
        w = Waiter(sc[1], key, "w", "EX", wait=20000).start(waiters)
        wait_queued(b, key, [("w", "EX", "new")])
        t_kill = time.monotonic()
        d.kill9()
        tw = w.outcome(SESSION_MS / 1000.0 + 8)
        elapsed = w.t_reply - t_kill
        print("granted %.2f s after kill -9 (session %d ms)" % (elapsed, SESSION_MS))
        assert is_token(tw), tw
        assert elapsed <= SESSION_MS / 1000.0 + 3.0, "granted %.1f s after the kill" % elapsed
        assert tw > td
        assert lock_info(b, key)["waiters"] == []
        assert holders(b, key) == [("w", "EX")]
    finally:
        d.close()


@contextlib.contextmanager
def _stalled(sc, conn, waiters, lock_zk, while_stopped=None):
    """A sidecar of its own whose client "stalled" holds a new lock EX with
    a 60 s lease, stopped (SIGSTOP) past its session once a waiter "w" on
    sidecar 1 queues for it, and continued once w is granted (a greater
    token) and while_stopped(d, key), if given, has run.  Yields (d, key, b: a
    connection to sidecar 1); d is closed after."""
    d = _sidecar(lock_zk, sc[0].root)
    try:
        d.start()
        key = unique("stall")
        rd = d.redis(socket_timeout=20)
        td = acquire(rd, key, "stalled", mode="EX", px=60000)
        rd.close()
        assert is_token(td)
        b = conn(1)
        w = Waiter(sc[1], key, "w", "EX", wait=25000).start(waiters)
        wait_queued(b, key, [("w", "EX", "new")])
        d.stop()
        try:
            tw = w.outcome(SESSION_MS / 1000.0 + 10)
            assert is_token(tw) and tw > td, (tw, td)
            if while_stopped:
                while_stopped(d, key)
        finally:
            d.cont()
        yield d, key, b
    finally:
        d.close()


def test_renew_after_session_loss_never_answers_1(sc, conn, waiters, lock_zk):
    """A sidecar stalled (SIGSTOP) past its session loses its holds: a
    waiter elsewhere is granted; once the sidecar runs again, RENEW by the
    old holder through it answers 0 (an error while it reconnects is
    tolerated, 1 never), RELEASE answers 0, and the new holder keeps the
    lock."""
    with _stalled(sc, conn, waiters, lock_zk) as (d, key, b):
        rd = d.redis(socket_timeout=20)
        replies = []

        def renewed_zero():
            try:
                v = renew(rd, key, "stalled", 60000)
            except redis.ResponseError as e:
                replies.append("error: %s" % e)
                return False
            replies.append(v)
            if v == 1:
                raise harness.Fatal("RENEW after the session was lost answered 1")
            return v == 0
        wait_for(renewed_zero, 15, 0.1, "RENEW through the resumed sidecar to answer 0")
        assert 1 not in replies, replies
        assert release(rd, key, "stalled") == 0
        assert holders(b, key) == [("w", "EX")]
        rd.close()


# A command of the old holder sent to its frozen sidecar after the lock
# passed on (it waits in the socket until SIGCONT), and the replies that
# do not claim the lost hold (a prefix of the raw reply).
STALE = {
    "RELEASE": (("LOCK.RELEASE", "stalled"), (b":0\r\n", b"-TRYAGAIN")),
    "RENEW": (("LOCK.RENEW", "stalled", "PX", "60000"), (b":0\r\n", b"-TRYAGAIN")),
    "CONVERT down": (("LOCK.CONVERT", "stalled", "MODE", "PR"), (b"-ERR owner holds no lock", b"-TRYAGAIN")),
    "ACQUIRE again": (("LOCK.ACQUIRE", "stalled", "PX", "60000"), (b"$-1\r\n", b"-TRYAGAIN")),
}


@pytest.mark.parametrize("stale", sorted(STALE))
def test_old_holders_command_asked_while_frozen_after_the_lock_passed_on(sc, conn, waiters, lock_zk, stale):
    """A sidecar stalled (SIGSTOP) past its session: a waiter elsewhere is
    granted; a command of the old holder sent to the stalled sidecar after
    that (it waits in the socket) is answered once the sidecar runs again,
    and never as if the hold had lasted: RELEASE and RENEW 0 (not 1), a
    CONVERT no token, a reentrant ACQUIRE not the old token (null: the new
    holder holds it); the new holder keeps the lock."""
    (name, *args), accepted = STALE[stale]
    clients = []

    def ask(d, key):
        c = d.client(timeout=30)  # the kernel accepts it for the stopped sidecar
        clients.append(c)
        c.send_cmd(name, key, *args)
        time.sleep(0.2)
    with _stalled(sc, conn, waiters, lock_zk, ask) as (d, key, b):
        r = clients[0].read_reply(timeout=20)
        assert r.startswith(accepted), "%s asked after the lock passed on answered %r" % (stale, r)
        assert holders(b, key) == [("w", "EX")]


def test_disconnected_waiter_leaves_queue(sc, conn, waiters):
    """A waiter whose client disconnects leaves the queue at once (LOCK.INFO
    within about 1 s); on release the waiter behind it is granted."""
    a = conn(0)
    key = unique("gone")
    assert is_token(acquire(a, key, "h", mode="EX"))
    raw = sc[1].client()
    raw.send_cmd("LOCK.ACQUIRE", key, "w1", "MODE", "EX", "WAIT", "20000")
    wait_queued(a, key, [("w1", "EX", "new")])
    w2 = Waiter(sc[2], key, "w2", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w1", "EX", "new"), ("w2", "EX", "new")])
    raw.sock.shutdown(socket.SHUT_RDWR)
    raw.close()
    t0 = time.monotonic()
    wait_for(lambda: waiting(a, key) == [("w2", "EX", "new")], 1.5, 0.02,
             "the disconnected waiter to leave the queue")
    print("disconnected waiter left the queue in %.0f ms" % ((time.monotonic() - t0) * 1000))
    assert release(a, key, "h") == 1
    assert is_token(w2.outcome(10))
    assert holders(a, key) == [("w2", "EX")]


@pytest.mark.parametrize("behind", ["quit", "pipeline"])
def test_waiter_gone_while_not_read_leaves_queue(sc, conn, waiters, behind):
    """A waiter whose client leaves while the sidecar is not reading from it
    -- a QUIT pipelined behind the waiting LOCK.ACQUIRE, or a pipeline that
    fills its window -- leaves the queue too (the sidecar looks for the
    peer's close once a second): the waiter behind it is granted at the
    release, not the departed one (before: it kept its place, was granted,
    and held the lock for its lease)."""
    a = conn(0)
    key = unique("gone-" + behind)
    assert is_token(acquire(a, key, "h", mode="EX"))
    raw = sc[1].client()
    tail = encode("QUIT") if behind == "quit" else encode("PING") * 500
    raw.sock.sendall(encode("LOCK.ACQUIRE", key, "w1", "MODE", "EX", "PX", "30000",
                            "WAIT", "20000") + tail)
    wait_queued(a, key, [("w1", "EX", "new")])
    w2 = Waiter(sc[2], key, "w2", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w1", "EX", "new"), ("w2", "EX", "new")])
    raw.close()
    wait_for(lambda: waiting(a, key) == [("w2", "EX", "new")], 3.0, 0.05,
             "the departed waiter to leave the queue")
    assert release(a, key, "h") == 1
    assert is_token(w2.outcome(10))
    assert holders(a, key) == [("w2", "EX")]


def test_middle_waiter_leaving_keeps_order(sc, conn, waiters):
    """Holder h, waiters w1, w2, w3 (three sidecars): w2 -- the one w3
    queued behind -- disconnects and leaves the queue at once; releases then
    grant w1, then w3."""
    a = conn(0)
    key = unique("middle")
    assert is_token(acquire(a, key, "h", mode="EX"))
    w1 = Waiter(sc[0], key, "w1", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w1", "EX", "new")])
    raw = sc[1].client()
    raw.send_cmd("LOCK.ACQUIRE", key, "w2", "MODE", "EX", "WAIT", "20000")
    wait_queued(a, key, [("w1", "EX", "new"), ("w2", "EX", "new")])
    w3 = Waiter(sc[2], key, "w3", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w1", "EX", "new"), ("w2", "EX", "new"), ("w3", "EX", "new")])
    raw.close()
    wait_for(lambda: waiting(a, key) == [("w1", "EX", "new"), ("w3", "EX", "new")], 1.5, 0.02,
             "the disconnected middle waiter to leave the queue")
    assert release(a, key, "h") == 1
    t1 = w1.outcome(10)
    assert is_token(t1)
    assert not w3.done.wait(0.2), "w3 answered while w1 held: %r" % w3.result
    w1.let_go()
    t3 = w3.outcome(10)
    assert is_token(t3) and t3 > t1


def test_waiter_of_killed_sidecar_leaves_queue(sc, conn, waiters, lock_zk):
    """A waiter whose sidecar is killed (-9) leaves the queue when that
    sidecar's session ends; the waiter queued behind it is then granted
    after the holder's release (within the session timeout plus a
    margin)."""
    d = _sidecar(lock_zk, sc[0].root)
    try:
        d.start()
        a = conn(0)
        key = unique("deadwaiter")
        assert is_token(acquire(a, key, "h", mode="EX"))
        dw = Waiter(d, key, "doomed", "EX", wait=20000).start(waiters)
        wait_queued(a, key, [("doomed", "EX", "new")])
        w = Waiter(sc[1], key, "w", "EX", wait=20000).start(waiters)
        wait_queued(a, key, [("doomed", "EX", "new"), ("w", "EX", "new")])
        t_kill = time.monotonic()
        d.kill9()
        assert release(a, key, "h") == 1
        tw = w.outcome(SESSION_MS / 1000.0 + 8)
        assert is_token(tw), tw
        elapsed = w.t_reply - t_kill
        print("waiter behind a killed sidecar's waiter granted %.2f s after the kill" % elapsed)
        assert elapsed <= SESSION_MS / 1000.0 + 3.0, elapsed
        assert lock_info(a, key)["waiters"] == []
        assert holders(a, key) == [("w", "EX")]
        assert not dw.granted, "the killed sidecar's waiter was answered a token"
    finally:
        d.close()


def test_wait_timeout_leaves_queue(sc, conn, waiters):
    """A waiter whose WAIT (600 ms) lapses answers null no earlier and
    leaves the queue with its reply; the waiter behind it is granted on
    release."""
    a = conn(0)
    key = unique("lapse")
    assert is_token(acquire(a, key, "h", mode="EX"))
    w1 = Waiter(sc[1], key, "w1", "EX", wait=600).start(waiters)
    wait_queued(a, key, [("w1", "EX", "new")])
    w2 = Waiter(sc[2], key, "w2", "EX", wait=20000).start(waiters)
    assert w1.outcome(5) is None
    assert w1.t_reply - w1.t_sent >= 0.58, w1.t_reply - w1.t_sent
    wait_for(lambda: waiting(a, key) == [("w2", "EX", "new")], 1.0, 0.02,
             "the timed-out waiter to leave the queue")
    assert release(a, key, "h") == 1
    assert is_token(w2.outcome(10))
    assert holders(a, key) == [("w2", "EX")]


def test_sidecar_serves_others_while_one_waits(sc, conn, waiters):
    """While one connection of sidecar A waits in LOCK.ACQUIRE WAIT 3000,
    other connections of A are answered promptly: PING, SET/GET, another
    lock's ACQUIRE and RELEASE.  The waiter itself answers null after its
    WAIT."""
    key = unique("busy")
    assert is_token(acquire(conn(1), key, "h", mode="EX"))
    w = Waiter(sc[0], key, "w", "EX", wait=3000).start(waiters)
    wait_queued(conn(1), key, [("w", "EX", "new")])
    other = conn(0)
    slow = []

    def timed(what, fn):
        t0 = time.monotonic()
        v = fn()
        dt = time.monotonic() - t0
        if dt > 0.5:
            slow.append("%s took %.0f ms" % (what, dt * 1000))
        return v
    k2 = unique("other")
    for _ in range(5):
        assert timed("PING", other.ping) is True
        assert timed("SET", lambda: other.set(k2 + ":v", "x")) is True
        assert timed("GET", lambda: other.get(k2 + ":v")) == b"x"
        assert is_token(timed("LOCK.ACQUIRE", lambda: acquire(other, k2, "o2", mode="EX", wait=0)))
        assert timed("LOCK.RELEASE", lambda: release(other, k2, "o2")) == 1
    assert other.delete(k2 + ":v") == 1
    assert is_token(timed("LOCK.ACQUIRE on a new connection",
                          lambda: acquire(conn(0), unique("fresh"), "o3", wait=0)))
    assert not w.done.is_set(), "the waiter answered before its WAIT: %r" % w.result
    assert not slow, slow
    assert w.outcome(5) is None
    assert w.t_reply - w.t_sent >= 2.95


def test_info_shape_resp2(sc, conn, waiters):
    """LOCK.INFO over RESP2 (redis-py's default): a flat array holders,
    waiters; each holder a flat field-value array with exactly owner, mode,
    token, count, lease_left_ms, sidecar, client; each waiter with exactly
    owner, mode, waited_ms, kind.  Holders on different sidecars have
    different `sidecar` values, on one sidecar the same: the
    `zkresp_instance` of that sidecar's INFO server.  A lock nobody holds:
    both empty."""
    a, b = conn(0), conn(1)
    key = unique("info2")
    empty = a.execute_command("LOCK.INFO", key)
    assert flat_map(empty, "LOCK.INFO") == {"holders": [], "waiters": []}, empty
    t1 = acquire(a, key, "h1", mode="PR", px=30000)
    t2 = acquire(b, key, "h2", mode="PR", px=30000)
    a2 = conn(0)
    t3 = acquire(a2, key, "h3", mode="PR", px=30000)
    w = Waiter(sc[2], key, "w", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w", "EX", "new")])
    raw = a.execute_command("LOCK.INFO", key)
    top = flat_map(raw, "LOCK.INFO")
    assert set(top) == {"holders", "waiters"}, raw
    hs = []
    for h in top["holders"]:
        fields = flat_map(h, "a holder")
        assert set(fields) == HOLDER_FIELDS, sorted(fields)
        hs.append({k: text(v) for k, v in fields.items()})
    assert [h["owner"] for h in hs] == ["h1", "h2", "h3"], hs
    for h, t in zip(hs, (t1, t2, t3)):
        assert h["mode"] == "PR" and h["token"] == t and h["count"] == 1, h
        assert isinstance(h["lease_left_ms"], int) and 25000 <= h["lease_left_ms"] <= 30000 + LEASE_SLACK_MS, h
    assert hs[0]["sidecar"] != hs[1]["sidecar"], hs
    assert hs[0]["sidecar"] == hs[2]["sidecar"], hs
    # ... and each is the zkresp_instance its sidecar's INFO server shows
    for h, r in ((hs[0], a), (hs[1], b)):
        assert h["sidecar"] == r.info("server")["zkresp_instance"], (h, r.info("server"))
    assert hs[0]["client"] != hs[2]["client"], hs
    ws = top["waiters"]
    assert len(ws) == 1
    wf = flat_map(ws[0], "a waiter")
    assert set(wf) == WAITER_FIELDS, sorted(wf)
    assert (text(wf["owner"]), text(wf["mode"]), text(wf["kind"])) == ("w", "EX", "new"), wf
    assert isinstance(wf["waited_ms"], int) and wf["waited_ms"] >= 0, wf
    time.sleep(0.3)
    later = lock_info(a, key)["waiters"][0]["waited_ms"]
    assert later >= wf["waited_ms"] + 250, (wf["waited_ms"], later)
    for r, o in ((a, "h1"), (b, "h2"), (a2, "h3")):
        assert release(r, key, o) == 1
    assert is_token(w.outcome(10))


def test_info_shape_resp3(sc, conn, waiters):
    """LOCK.INFO after HELLO 3: a map of holders and waiters whose entries
    are maps with exactly the contract's field names; tokens and counts are
    integers; LOCK.ACQUIRE's null is RESP3's null."""
    a = conn(0)
    key = unique("info3")
    t = acquire(a, key, "h", mode="EX", px=30000)
    assert is_token(t)
    w = Waiter(sc[1], key, "w", "PR", wait=20000).start(waiters)
    wait_queued(a, key, [("w", "PR", "new")])
    with sc[0].client() as c:
        hello = c.call("HELLO", "3")
        assert isinstance(hello, dict), hello
        raw = c.cmd("LOCK.INFO", key)
        assert raw.startswith(b"%2\r\n"), raw[:80]
        top = harness.decode_one(raw)
        assert set(top) == {b"holders", b"waiters"}, top
        for name, fields in ((b"holders", HOLDER_FIELDS), (b"waiters", WAITER_FIELDS)):
            for e in top[name]:
                assert isinstance(e, dict), "a %s entry is not a map: %r" % (name.decode(), e)
                assert {text(k) for k in e} == fields, e
        assert len(top[b"holders"]) == 1 and len(top[b"waiters"]) == 1, top
        h = {text(k): v for k, v in top[b"holders"][0].items()}
        assert (h["owner"], h["mode"], h["token"], h["count"]) == (b"h", b"EX", t, 1), h
        assert isinstance(h["lease_left_ms"], int) and 0 < h["lease_left_ms"] <= 30000 + LEASE_SLACK_MS, h
        wv = {text(k): v for k, v in top[b"waiters"][0].items()}
        assert (wv["owner"], wv["mode"], wv["kind"]) == (b"w", b"PR", b"new"), wv
        assert isinstance(wv["waited_ms"], int), wv
        # Every entry's frame is itself a map ('%'), not a flat array.
        _, parts = elements(raw)
        for arr in (parts[1], parts[3]):
            _, entries = elements(arr)
            assert all(e.startswith(b"%") for e in entries), entries
        assert c.cmd("LOCK.ACQUIRE", key, "x", "MODE", "EX", "WAIT", "0") == b"_\r\n"
        assert c.cmd("LOCK.ACQUIRE", key, "x", "MODE", "EX", "WAIT", "50") == b"_\r\n"
        assert c.cmd("LOCK.ACQUIRE", key, "h", "MODE", "EX") == b":%d\r\n" % t
        assert c.cmd("LOCK.RELEASE", key, "h") == b":1\r\n"
        assert c.cmd("LOCK.INFO", key).startswith(b"%2\r\n")
        assert c.call("LOCK.INFO", unique("none")) == {b"holders": [], b"waiters": []}
    assert release(a, key, "h") == 1
    assert is_token(w.outcome(10))


def test_locks_are_a_separate_namespace(sc, conn):
    """After LOCK.ACQUIRE k: EXISTS k is 0, GET k null, DEL k 0, KEYS *
    does not list it; SET/GET/DEL of k work independently and leave the
    lock held.  Lock names with '/', NUL, non-ASCII or '*' work too."""
    a, b = conn(0), conn(1)
    key = unique("ns")
    t = acquire(a, key, "o", mode="EX")
    assert is_token(t)
    for r in (a, b):
        assert r.exists(key) == 0
        assert r.get(key) is None
        assert key.encode() not in r.keys("*")
    assert b.delete(key) == 0
    assert holders(a, key) == [("o", "EX")]
    assert b.set(key, "value") is True
    assert a.get(key) == b"value"
    assert a.exists(key) == 1
    assert b.delete(key) == 1
    assert holders(b, key) == [("o", "EX")], "DEL of the key touched the lock"
    assert b.set(key, "again") is True
    assert release(a, key, "o") == 1
    assert a.get(key) == b"again", "LOCK.RELEASE touched the key"
    assert a.delete(key) == 1
    # Names that are paths or bytes to ZooKeeper are lock names like any.
    for odd in ("a/b c", "/", "x\x00y", "\u00e9/..", "*"):
        assert is_token(acquire(a, odd, "o")), odd
        assert acquire(b, odd, "p", wait=0) is None, odd
        assert b.exists(odd) == 0, odd
        assert odd.encode() not in a.keys("*"), odd
        assert holders(b, odd) == [("o", "EX")], odd
        assert release(a, odd, "o") == 1, odd


def test_error_texts_exact(sc, conn, waiters):
    """The exact texts README lists: the option errors (the command named
    in the expire error, a missing value, RENEW without PX, CONVERT without
    MODE), an owner longer than --max-key-len (1024 here: 1024 bytes are
    fine), and each owner-state error.  None changes the lock."""
    key = unique("texts")
    with sc[0].client() as c:
        exact = [
            (("LOCK.ACQUIRE", key, "o", "PX", "0"), "ERR invalid expire time in 'lock.acquire' command"),
            (("LOCK.RENEW", key, "o", "PX", "0"), "ERR invalid expire time in 'lock.renew' command"),
            (("LOCK.ACQUIRE", key, "o", "WAIT"), "ERR syntax error"),
            (("LOCK.RENEW", key, "o", "WAIT", "5"), "ERR syntax error"),
            (("LOCK.CONVERT", key, "o", "WAIT", "5"), "ERR syntax error"),
            (("LOCK.ACQUIRE", key, "o", "WAIT", "-1"), "ERR timeout is negative"),
            (("LOCK.ACQUIRE", key, "o", "WAIT", "1.5"), "ERR timeout is not an integer or out of range"),
            (("LOCK.ACQUIRE", key, "o", "MODE", "zz"),
             "ERR unknown lock mode 'zz' (NL CR CW PR PW EX SHARED EXCLUSIVE)"),
            (("LOCK.ACQUIRE", key, "o" * 1025), "ERR owner too long"),
        ]
        for args, msg in exact:
            assert _resp_err(c, *args) == msg, args[:4]
            assert c.cmd("PING") == b"+PONG\r\n"
        assert c.call("LOCK.INFO", key) == [b"holders", [], b"waiters", []]
        long_owner = "o" * 1024
        assert c.cmd("LOCK.ACQUIRE", key, long_owner).startswith(b":")
        assert c.cmd("LOCK.RELEASE", key, long_owner) == b":1\r\n"

    a = conn(0)
    assert is_token(acquire(a, key, "h", mode="PR"))
    assert is_token(acquire(a, key, "r", mode="PR"))
    w = Waiter(sc[1], key, "w", "EX", wait=20000).start(waiters)
    wait_queued(a, key, [("w", "EX", "new")])
    with sc[2].client() as c:
        assert _resp_err(c, "LOCK.ACQUIRE", key, "w", "MODE", "EX") == \
            "ERR owner 'w' already waits for this lock"
        assert _resp_err(c, "LOCK.ACQUIRE", key, "h", "MODE", "EX") == \
            "ERR owner holds this lock in mode PR; use LOCK.CONVERT to change its mode"
        assert _resp_err(c, "LOCK.CONVERT", key, "x", "MODE", "EX") == \
            "ERR owner holds no lock on this key (LOCK.ACQUIRE first)"
    # h's conversion to EX must wait for r: WAIT 0 answers null, and one
    # that waits makes a second one an error.
    assert a.execute_command("LOCK.CONVERT", key, "h", "MODE", "EX", "WAIT", 0) is None
    conv = Waiter(sc[0], key, "h", "EX", wait=20000, convert_conn=sc[0].redis(socket_timeout=40)).start(waiters)
    wait_queued(a, key, [("h", "EX", "conversion"), ("w", "EX", "new")])
    with sc[2].client() as c:
        assert _resp_err(c, "LOCK.CONVERT", key, "h", "MODE", "EX") == \
            "ERR owner's conversion of this lock is already waiting"
    assert sorted(holders(a, key)) == [("h", "PR"), ("r", "PR")]
    assert release(a, key, "r") == 1
    assert is_token(conv.outcome(10))
    assert holders(a, key) == [("h", "EX")]
    assert waiting(a, key) == [("w", "EX", "new")]


def test_an_error_naming_a_binary_owner_keeps_its_bytes(sc):
    """An error reply that names an owner holding a NUL keeps every byte of
    it, as Redis sends an error's bytes (the encoder once stopped at the
    NUL: `-ERR owner 'a`)."""
    key = unique("nul")
    with sc[0].client() as h, sc[0].client() as w, sc[1].client() as c:
        assert h.cmd("LOCK.ACQUIRE", key, "h").startswith(b":")
        w.send_cmd("LOCK.ACQUIRE", key, "a\0b", "WAIT", "20000")
        r = sc[1].redis()
        wait_for(lambda: waiting(r, key) == [("a\0b", "EX", "new")], 10, 0.02, "the waiter to queue")
        assert c.cmd("LOCK.ACQUIRE", key, "a\0b") == b"-ERR owner 'a\x00b' already waits for this lock\r\n"
        assert h.cmd("LOCK.RELEASE", key, "h") == b":1\r\n"
        assert w.read_reply(timeout=10).startswith(b":")


def test_error_replies_keep_connection(sc):
    """Wrong arity: Redis's exact message; unknown MODE, bad PX (0,
    negative, not an integer), bad WAIT, unknown option: ERR replies.  None
    of them grants anything, and the connection answers PING after each."""
    key = unique("err")
    arity = "ERR wrong number of arguments for '%s' command"
    with sc[0].client() as c:
        for args in (("LOCK.ACQUIRE",), ("LOCK.ACQUIRE", key), ("LOCK.RELEASE", key),
                     ("LOCK.RELEASE", key, "o", "extra"), ("LOCK.RENEW", key),
                     ("LOCK.CONVERT", key), ("LOCK.INFO",), ("LOCK.INFO", key, "extra")):
            assert _resp_err(c, *args) == arity % args[0].lower(), args
            assert c.cmd("PING") == b"+PONG\r\n"
        px_msgs = {"ERR value is not an integer or out of range",
                   "ERR invalid expire time in 'lock.acquire' command"}
        for px in ("0", "-5", "abc", "1.5", ""):
            msg = _resp_err(c, "LOCK.ACQUIRE", key, "o", "PX", px)
            assert msg in px_msgs, (px, msg)
            assert c.cmd("PING") == b"+PONG\r\n"
        bad = [
            ("LOCK.ACQUIRE", key, "o", "MODE", "XX"),
            ("LOCK.ACQUIRE", key, "o", "MODE", ""),
            ("LOCK.ACQUIRE", key, "o", "MODE"),
            ("LOCK.ACQUIRE", key, "o", "PX"),
            ("LOCK.ACQUIRE", key, "o", "WAIT", "-1"),
            ("LOCK.ACQUIRE", key, "o", "WAIT", "soon"),
            ("LOCK.ACQUIRE", key, "o", "FOO", "1"),
            ("LOCK.RENEW", key, "o", "PX", "0"),
            ("LOCK.RENEW", key, "o", "PX", "-1"),
            ("LOCK.RENEW", key, "o", "PX", "x"),
            ("LOCK.RENEW", key, "o", "EX", "5"),
            ("LOCK.CONVERT", key, "o", "MODE", "XX"),
            ("LOCK.CONVERT", key, "o", "MODE", "EX", "WAIT", "-1"),
        ]
        for args in bad:
            msg = _resp_err(c, *args)
            assert msg.startswith("ERR"), (args, msg)
            assert c.cmd("PING") == b"+PONG\r\n", args
        assert c.call("LOCK.INFO", key) == [b"holders", [], b"waiters", []], "an erroneous call left a hold"
        # The connection still works for locks too.
        assert c.cmd("LOCK.ACQUIRE", key, "o", "MODE", "ex").startswith(b":")
        assert c.cmd("LOCK.RELEASE", key, "o") == b":1\r\n"


# The random lock traffic's vocabulary: lock names and owners shared by
# every thread, modes valid and not, numbers at the edges.
R_MODES = ["NL", "CR", "CW", "PR", "PW", "EX", "SHARED", "EXCLUSIVE", "ex", "XX", ""]
R_NUMS = ["0", "1", "5", "50", "200", "1000", "30000", "-1", "abc", "1.5", " 5", "1e3",
          "9223300000000000000", "9223372036854775807", "9223372036854775808"]
R_OPTS = ["MODE", "PX", "WAIT", "mode", "px", "wait", "FOO"]


def _random_lock_request(rng, keys):
    key, owner = rng.choice(keys), rng.choice(["o%d" % i for i in range(5)] + [""])

    def opts(names):
        out = []
        for _ in range(rng.randrange(4)):
            name = rng.choice(names)
            out.append(name)
            if rng.random() < 0.95:
                out.append(rng.choice(R_MODES) if name.upper() == "MODE" else rng.choice(R_NUMS))
        return out
    r = rng.random()
    if r < 0.35:
        return ["LOCK.ACQUIRE", key, owner] + opts(R_OPTS)
    if r < 0.6:
        return ["LOCK.RELEASE", key, owner] + ([] if rng.random() < 0.95 else ["x"])
    if r < 0.7:
        return ["LOCK.RENEW", key, owner, "PX", rng.choice(R_NUMS)] if rng.random() < 0.8 else \
            ["LOCK.RENEW", key, owner] + opts(R_OPTS)
    if r < 0.85:
        return ["LOCK.CONVERT", key, owner, "MODE", rng.choice(R_MODES)] + \
            (["WAIT", rng.choice(R_NUMS)] if rng.random() < 0.5 else [])
    return ["LOCK.INFO", key] + ([] if rng.random() < 0.95 else ["x"])


def _wait_arg(req):
    """The WAIT a request would wait (its last one), 0 when none parses."""
    waits = [req[i + 1] for i in range(len(req) - 1) if req[i].upper() == "WAIT"]
    try:
        return int(waits[-1]) if waits else 0
    except ValueError:
        return 0


def test_random_lock_requests(sc):
    """RELIABILITY 31 for the lock commands: 8 connections over the three
    sidecars send random LOCK.* requests on four shared names (random
    options in any order and case, modes valid and not, leases and waits at
    the edges: 1 ms leases that end under contention, PX at and past the
    largest integer), and some leave while they wait.  Every request is
    answered, none with an internal error; no Lua error is logged; every
    sidecar stays up; and once the connections are gone, no waiter is left
    in any queue."""
    seed = random.randrange(1 << 30)
    keys = [unique("rnd%d" % i) for i in range(4)]
    internal, errors = [], []
    log_at = [len(z.log()) for z in sc]

    def lane(i):
        rng = random.Random(seed * 10 + i)
        deadline = time.monotonic() + 8
        c = sc[i % 3].client(timeout=10)
        try:
            while time.monotonic() < deadline:
                req = _random_lock_request(rng, keys)
                wait = _wait_arg(req)
                if wait > 1000 or (req[0] == "LOCK.ACQUIRE" and rng.random() < 0.05):
                    # Sent, then the connection goes while it may wait.
                    c.send_cmd(*req)
                    time.sleep(rng.random() * 0.05)
                    c.close()
                    c = sc[rng.randrange(3)].client(timeout=10)
                    continue
                reply = c.cmd(*req)
                if b"internal" in reply.lower() or b".lua:" in reply:
                    internal.append((req, reply[:300]))
        except Exception as e:  # reported below with the seed
            errors.append("lane %d: %r" % (i, e))
        finally:
            c.close()
    threads = [threading.Thread(target=lane, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    where = "seed %d" % seed
    assert not errors, "%s: %s" % (where, errors)
    assert not internal, "%s: internal errors:\n%s" % (where, "\n".join("%r -> %r" % i for i in internal[:10]))
    assert all(z.alive() for z in sc), where
    with sc[0].client() as c:
        def no_waiters():
            return all(c.call("LOCK.INFO", k)[3] == [] for k in keys)
        wait_for(no_waiters, 10, what="every waiter gone from the queues (%s)" % where)
    for z, at in zip(sc, log_at):
        logged = [l for l in z.log()[at:].splitlines() if b"event=lua.error" in l]
        assert not logged, "%s: %s" % (where, logged[:5])
