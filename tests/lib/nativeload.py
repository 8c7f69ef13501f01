"""The native lock commands (issue 18) from redis-py: LOCK.INFO read as
dicts (lock_info, holders, waiting), and a contention workload for the
fault suites with its checker.

contend(sidecars, keys, duration, chaos) runs three workers per sidecar,
each on its own connection, for `duration` seconds while chaos(stop) (a
function of the stop time, in a thread) injects faults:

  LOCK.ACQUIRE key owner MODE EX|PR PX 5000 WAIT 2000 (EX twice as often)
    token -> hold up to 10 ms; sometimes acquire again (reentrant: the same
             token is expected) and release once (1 expected); sometimes
             convert (PR up to EX, WAIT 1000: a token, or null with PR
             kept; EX down to PR: at once, or -TRYAGAIN with the outcome
             unknown); then LOCK.RELEASE (1 expected: the lease is far from
             over, unless a command before it waited out an election)
    null  -> WAIT ran out: ask again

Every owner string is used once.  -TRYAGAIN is a legitimate answer to any
command (counted); any other error, or a release answering 0 inside its
lease, is an error of the run.  A hold's lease runs LEASE_S from its
grant or its last reentrant ACQUIRE, no earlier than that command was
sent: a release answered later than that may find the hold ended by its
lease (a command held up by an election: counted "expired", not an
error), as a Redis DEL that arrives after the key's PEXPIRE answers 0.
On a sidecar named in `may_lose` (the
chaos ends its session) a hold may be gone when its owner next asks: there
a RELEASE answering 0, a CONVERT answering "owner holds no lock" and a
reentrant ACQUIRE granted anew (a new hold, another token) are counted as
"lost", not errors; check() then wants that sidecar's session replaced.
A release that answered -TRYAGAIN is asked again until it answers, so that
the next grant is not held up by a lease.

violations(holds) checks, for each key and each pair of spans of two holds
whose modes conflict (EX with EX or PR): one asked after the other was
granted has a larger token (tokens follow grant order); and two holds whose
releases both answered 1 never held at once.  A hold is one span, from its
grant's reply to its release's request, in its mode; a conversion makes it
two: an up-conversion holds PR throughout and EX from the CONVERT's reply
(asked when the CONVERT was sent, with the token it answered); a
down-conversion (answered, or -TRYAGAIN: it may have been written) holds
EX until the CONVERT was sent and PR throughout."""

import random
import threading
import time

import redis

CONFLICTS = {("EX", "EX"), ("EX", "PR"), ("PR", "EX")}


# ------------------------------------------------------------ LOCK.INFO

def text(v):
    """bytes decoded; anything else as it is."""
    return v.decode() if isinstance(v, bytes) else v


def flat_map(flat, what):
    """A RESP2 flat field-value array as a dict, its fields decoded."""
    assert isinstance(flat, list) and len(flat) % 2 == 0, "%s is not a flat field-value array: %r" % (what, flat)
    return {text(k): v for k, v in zip(flat[::2], flat[1::2])}


def _entry(flat, what):
    return {k: text(v) for k, v in flat_map(flat, what).items()}


def lock_info(r, key):
    """LOCK.INFO over RESP2 as {"holders": [dict], "waiters": [dict]}, text
    values decoded, in the order of the reply."""
    top = flat_map(r.execute_command("LOCK.INFO", key), "LOCK.INFO")
    assert set(top) == {"holders", "waiters"}, top
    return {"holders": [_entry(h, "a holder") for h in top["holders"]],
            "waiters": [_entry(w, "a waiter") for w in top["waiters"]]}


def holders(r, key):
    return [(h["owner"], h["mode"]) for h in lock_info(r, key)["holders"]]


def waiting(r, key):
    return [(w["owner"], w["mode"], w["kind"]) for w in lock_info(r, key)["waiters"]]


# ------------------------------------------------------------ the workload


class Span:
    """A mode held with a token: asked at t_asked, held from t_from to t_to."""
    __slots__ = ("hold", "mode", "token", "t_asked", "t_from", "t_to")

    def __init__(self, hold, mode, token, t_asked, t_from, t_to=None):
        self.hold, self.mode, self.token = hold, mode, token
        self.t_asked, self.t_from, self.t_to = t_asked, t_from, t_to

    def __repr__(self):
        return "%s %s %s token %d asked %.3f held %.3f..%s (released %r)" % (
            self.hold.key, self.hold.owner, self.mode, self.token, self.t_asked, self.t_from,
            "-" if self.t_to is None else "%.3f" % self.t_to, self.hold.released)


LEASE_S = 5.0   # every ACQUIRE's PX


class Hold:
    """lease_from: when the command that (re)started the lease was sent."""
    __slots__ = ("key", "owner", "spans", "released", "lease_from")

    def __init__(self, key, owner, lease_from):
        self.key, self.owner, self.spans, self.released = key, owner, [], None
        self.lease_from = lease_from

    def lease_over(self):
        """Whether the lease may have ended by now (see the header)."""
        return time.monotonic() >= self.lease_from + LEASE_S

    def __repr__(self):
        return "; ".join(repr(sp) for sp in self.spans)


def violations(holds):
    out = []
    by_key = {}
    for h in holds:
        by_key.setdefault(h.key, []).extend(h.spans)
    for spans in by_key.values():
        for x in spans:
            for y in spans:
                if x.hold is y.hold or (x.mode, y.mode) not in CONFLICTS:
                    continue
                if y.t_asked > x.t_from and y.token <= x.token:
                    out.append("token order: %r asked after %r was granted" % (y, x))
                if (x.hold.released == 1 and y.hold.released == 1 and x.t_from < y.t_from and
                        y.t_from < x.t_to):
                    out.append("overlap: %r granted while %r still held" % (y, x))
    return out


class Run:
    def __init__(self):
        self.holds, self.errors = [], []
        self.counts = {"tryagain": 0, "timeouts": 0, "lost": 0, "expired": 0}
        self.lock = threading.Lock()

    def error(self, msg):
        with self.lock:
            self.errors.append(msg)

    def tryagain(self, owner, what, e, lost_ok=False):
        if lost_ok and "holds no lock" in str(e):
            self.lost()
            return
        if not str(e).startswith("TRYAGAIN"):
            self.error("%s %s: %r" % (owner, what, e))
        with self.lock:
            self.counts["tryagain"] += 1

    def lost(self):
        with self.lock:
            self.counts["lost"] += 1

    def released_zero(self, h, lost_ok, what):
        """A RELEASE of hold h answered 0: lost with its session (where
        that may be), ended by its lease (answered once it may have run
        out), else an error."""
        if lost_ok:
            self.lost()
        elif h.lease_over():
            with self.lock:
                self.counts["expired"] += 1
        else:
            self.error("%s answered 0 inside the lease, with no session lost: %r" % (what, h))


def _convert(run, r, h, span, lost_ok):
    """Converts hold h (its current span `span`): PR up to EX, EX down to
    PR; returns its span from then on.  A down-conversion answered
    -TRYAGAIN may have been written all the same (its outcome is unknown):
    so, whatever the answer, EX is certain only until the CONVERT was sent,
    and PR (which EX includes) over the whole hold.  An up-conversion adds
    an EX span only when granted."""
    to = "EX" if span.mode == "PR" else "PR"
    t_sent = time.monotonic()
    tok, answered = None, True
    try:
        tok = r.execute_command("LOCK.CONVERT", h.key, h.owner, "MODE", to, "WAIT", "1000")
    except redis.ResponseError as e:
        run.tryagain(h.owner, "CONVERT", e, lost_ok)
        answered = False
    t_reply = time.monotonic()
    if to == "PR":
        if answered and tok is None:
            run.error("%s: a down-conversion answered null" % h.owner)
        span.t_to = t_sent
        new = Span(h, "PR", tok if tok is not None else span.token, span.t_asked, span.t_from)
        h.spans.append(new)
        return new
    if tok is None:
        return span
    new = Span(h, "EX", tok, t_sent, t_reply)
    h.spans.append(new)
    return new


def _reentrant(run, r, h, span, lost_ok):
    """ACQUIRE again (the same token expected) and RELEASE once (1
    expected).  Where the hold may have been lost with its session, an
    ACQUIRE answered with another token is a new hold, recorded as such."""
    key, owner, tok = h.key, h.owner, span.token
    t_sent = time.monotonic()
    try:
        again = r.execute_command("LOCK.ACQUIRE", key, owner, "MODE", span.mode, "PX", "5000")
        t_reply = time.monotonic()
        new = None
        if again == tok:
            h.lease_from = t_sent
        elif not lost_ok:
            run.error("%s: reentrant ACQUIRE answered %r, not its token %r" % (owner, again, tok))
        else:
            run.lost()
            if again is not None:
                new = Hold(key, owner, t_sent)
                new.spans.append(Span(new, span.mode, again, t_sent, t_reply))
        t_down = time.monotonic()
        down = r.execute_command("LOCK.RELEASE", key, owner)
        if new is not None:
            new.spans[0].t_to, new.released = t_down, down
            with run.lock:
                run.holds.append(new)
        if down == 0:
            run.released_zero(h, lost_ok, "the first of two RELEASEs")
        elif down != 1:
            run.error("%s: the first of two RELEASEs answered %r" % (owner, down))
    except redis.ResponseError as e:
        run.tryagain(owner, "reentrant", e, lost_ok)


def _worker(run, sidecar, side, n, keys, stop, lost_ok):
    r = sidecar.redis(socket_timeout=30)
    rnd = random.Random(side * 100 + n)
    i = 0
    try:
        while time.monotonic() < stop:
            i += 1
            key = rnd.choice(keys)
            mode = rnd.choice(["EX", "EX", "PR"])
            owner = "s%d-%d-%d" % (side, n, i)
            t_sent = time.monotonic()
            try:
                tok = r.execute_command("LOCK.ACQUIRE", key, owner, "MODE", mode, "PX", "5000", "WAIT", "2000")
            except redis.ResponseError as e:
                run.tryagain(owner, "ACQUIRE", e)
                continue
            t_reply = time.monotonic()
            if tok is None:
                with run.lock:
                    run.counts["timeouts"] += 1
                continue
            h = Hold(key, owner, t_sent)
            span = Span(h, mode, tok, t_sent, t_reply)
            h.spans.append(span)
            time.sleep(rnd.uniform(0, 0.01))
            if rnd.random() < 0.3:
                _reentrant(run, r, h, span, lost_ok)
            if rnd.random() < 0.25:
                span = _convert(run, r, h, span, lost_ok)
            t_rel = time.monotonic()
            for sp in h.spans:
                if sp.t_to is None:
                    sp.t_to = t_rel
            try:
                h.released = r.execute_command("LOCK.RELEASE", key, owner)
            except redis.ResponseError as e:
                run.tryagain(owner, "RELEASE", e)
                h.released = "TRYAGAIN"
                for _ in range(20):   # the hold may still be there: end it
                    try:
                        r.execute_command("LOCK.RELEASE", key, owner)
                        break
                    except redis.ResponseError:
                        time.sleep(0.2)
            if h.released == 0:
                run.released_zero(h, lost_ok, "RELEASE")
            with run.lock:
                run.holds.append(h)
    except Exception as e:  # noqa: BLE001 - reported by the run
        run.error("%s-%d: %r" % (side, n, e))
    finally:
        r.close()


def contend(sidecars, keys, duration, chaos, workers=3, may_lose=()):
    """Runs the workload; returns the Run (holds, errors, counts).
    may_lose: the indexes of the sidecars whose session chaos ends."""
    run = Run()
    stop = time.monotonic() + duration
    ts = [threading.Thread(target=_worker, args=(run, z, side, n, keys, stop, side in may_lose))
          for side, z in enumerate(sidecars) for n in range(workers)]
    ts.append(threading.Thread(target=chaos, args=(stop,)))
    for t in ts:
        t.start()
    for t in ts:
        t.join(duration + 120)
    return run


def check(run, sidecars, sessions, min_holds=30, lost=()):
    """The run's verdict, as assertions: sessions kept (those of `lost`
    replaced), no error, no violation, enough grants of both modes."""
    now = [z.session_id() for z in sidecars]
    for i, (was, is_) in enumerate(zip(sessions, now)):
        if i in lost:
            assert is_ != was, "sidecar %d kept its session %r through a fault meant to end it" % (i, was)
        else:
            assert is_ == was, "a sidecar's session was replaced (the machine stalled it): %r -> %r" % (
                sessions, now)
    assert not run.errors, "\n".join(run.errors[:10])
    bad = violations(run.holds)
    assert not bad, "%d violations in %d holds:\n%s" % (len(bad), len(run.holds), "\n".join(bad[:10]))
    assert len(run.holds) >= min_holds, "too few grants: %d (%r)" % (len(run.holds), run.counts)
    modes = {sp.mode for h in run.holds for sp in h.spans}
    assert modes == {"EX", "PR"}, modes
    converted = sum(1 for h in run.holds if len(h.spans) > 1)
    assert converted >= min_holds // 10, "too few conversions: %d" % converted
