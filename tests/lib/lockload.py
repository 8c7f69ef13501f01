"""A lock workload over several sidecars, a session monitor, and a strict
but sound checker of what the clients saw (tests/fault/test_90_ensemble.py).

Workload (Workload): client threads, each with one connection (RawClient)
to one sidecar, reconnecting when the connection drops or the sidecar is
gone, contend on a few keys:

  short   SET k tok NX PX 250..500 on k0/k1, never released (RELIABILITY 26)
  long    SET k tok NX PX 3000 on L0/L1, renewed every PX/3 with redis-py's
          extend script (token-checked PEXPIRE, EVALSHA), released with
          DELIFEQ or redis-py's release script; one acquisition in four is
          PX 400, never renewed, released half of the time
  hash    Redisson's hash lock on R0: ACQUIRE, RENEW_ONE every PX/3, UNLOCK
          (the scripts of tests/integration/test_24_redisson.py)

Plain PEXPIRE is not used as a renewal: it is not token-checked, so a 1
from it does not say that the renewed lock was ours.  After every OK the
client asks LOCKINFO k (scripts/examples/lockinfo.lua) for the holder, the
fencing token (czxid) and the owner session.  Every token is unique.  Each
request is recorded with time.monotonic() and time.time() when it is sent
and when its reply arrives, and its answer.  A long hold renews until it
has had 1..3 renewals answered 1 (errors do not count and do not stop it:
it keeps renewing, as a retrying watchdog would), then releases; a renewal
answered 0 ends it (lost).  At stop() every thread releases what it holds.

Monitor: one thread per sidecar polls INFO zookeeper every ~100 ms and
records (time, zk_state, zk_session_id, zk_server).

Nemesis records (Fault): what was done to whom, from when to when, whether
it must cost the sidecars' sessions (longer than the session timeout), and
whether nothing could be written meanwhile (no_write).

Checker (check()): a hold is [OK received, end]; end = the release's send
time when the release answered 1 (the node was ours until the release ran),
else min(release sent, lease end), lease end = max(acquire sent + PX,
renewal sent + PX for every renewal answered 1).  Every bound errs towards
a shorter interval, so an overlap of recorded intervals is an overlap of
real holds.  Rules:

  overlap        two holds of one key overlap (each hold against every
                 earlier one: the maximum end so far)
  fencing        fencing tokens (LOCKINFO's, only when it named our token)
                 strictly increase: for A, B with A's OK received before B's
                 acquire was sent, fence(A) < fence(B)
  session loss   a hold on a sidecar that a declared session-costing fault
                 hit ends at the fault's start; a renewal or release of such
                 a hold answered 1 and SENT after fault start + the
                 negotiated session timeout is a RESURRECTION
  no write       a renewal or release answered 1, sent after the start of a
                 no-write fault of its sidecar and answered before its end,
                 is FALSE (nothing could be written)
  lying answers  holds without session loss: a renewal or release answered
                 0 whose reply ARRIVED before the lease end; LOCKINFO whose
                 reply ARRIVED before the lease end (and before any release)
                 naming another holder or nil
  errors         every error reply is one of the documented texts
                 (scripts/errors.lua); requests left without a reply for
                 REPLY_TIMEOUT, connections closed by a live sidecar
  txn log        (when the committed transactions are given) every OK,
                 renewal answered 1 and release answered 1 has the write it
                 claims among the committed transactions, timed between the
                 request's send and its reply (ZooKeeper's leader stamps
                 each transaction with the wall clock of this machine); the
                 fencing token is the czxid of our node

A session change that no declared fault explains is reported; the holds it
may have ended are then not checked for overlap (their end is unknown).
"""

import hashlib
import itertools
import os
import random
import re
import socket
import threading
import time
import uuid

import keyenc
import redisson_scripts
from resp import RawClient, ConnectionClosed, Err, decode_one, parse_info

REPLY_TIMEOUT = 20.0


def _documented_errors():
    """The retryable error texts a lock client may see under faults: the
    TRYAGAIN constants of scripts/errors.lua, where every error text of
    the system layer is written down."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "errors.lua")
    with open(path) as f:
        found = re.findall(r'^E\.[A-Z_]+ = "(TRYAGAIN [^"]*)"', f.read(), re.M)
    assert "TRYAGAIN ZooKeeper unavailable" in found, "scripts/errors.lua changed shape: %r" % found
    return frozenset(found)


DOCUMENTED_ERRORS = _documented_errors()
UNAVAILABLE = "TRYAGAIN ZooKeeper unavailable"
# An error raised by redis.call inside a script reaches the client with
# Redis 7's suffix naming the script and line; the error itself is the
# documented one.
_SCRIPT_SUFFIX = re.compile(r" script: [0-9a-f]{40}, on @user_script:\d+\.$")


def base_error(text):
    """The error text without Redis's script suffix."""
    return _SCRIPT_SUFFIX.sub("", text)

# redis-py's Lock scripts (redis/lock.py).
LUA_RELEASE = """
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1
"""

LUA_EXTEND = """
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
local expiration = redis.call('pttl', KEYS[1])
if not expiration then
    expiration = 0
end
if expiration < 0 then
    return 0
end
local newttl = ARGV[2]
if ARGV[3] == "0" then
    newttl = ARGV[2] + expiration
end
redis.call('pexpire', KEYS[1], newttl)
return 1
"""

# With Redisson's RedissonLock scripts.
SCRIPTS = {"release": LUA_RELEASE, "extend": LUA_EXTEND,
           "r_acquire": redisson_scripts.ACQUIRE, "r_renew": redisson_scripts.RENEW_ONE,
           "r_unlock": redisson_scripts.UNLOCK}
SHAS = {k: hashlib.sha1(v.encode()).hexdigest() for k, v in SCRIPTS.items()}


# --------------------------------------------------------------------------
# records

class Op:
    """One request and its reply."""
    __slots__ = ("kind", "cmd", "sidecar", "thread", "key", "token", "px", "t_sent", "w_sent",
                 "t_reply", "w_reply", "status", "answer", "err", "raw")

    def __init__(self, kind, cmd, sidecar, thread, key, token, px=None):
        self.kind, self.cmd, self.sidecar, self.thread = kind, cmd, sidecar, thread
        self.key, self.token, self.px = key, token, px
        self.t_sent = self.w_sent = self.t_reply = self.w_reply = None
        self.status = None     # "reply", "timeout", "closed", "noconn"
        self.answer = None     # acquire: OK/NIL; renew, release: 1/0; lockinfo: dict or None
        self.err = None        # error reply text
        self.raw = None

    @property
    def failed(self):
        return self.err is not None or self.status != "reply"

    def outcome(self):
        if self.status != "reply":
            return self.status
        if self.err is not None:
            return "-" + self.err
        return repr(self.answer)

    def __repr__(self):
        return "%s %s %s" % (self.cmd, self.outcome(), self.times())

    def times(self, t0=0.0):
        if self.t_sent is None:
            return "[not sent]"
        if self.t_reply is None:
            return "[sent %.3f, no reply]" % (self.t_sent - t0)
        return "[sent %.3f reply %.3f]" % (self.t_sent - t0, self.t_reply - t0)


class Hold:
    __slots__ = ("key", "token", "sidecar", "thread", "mode", "px", "acq", "info", "renewals",
                 "release", "fence", "session", "end", "start", "lost_by", "unexpected", "lease_end",
                 "notes")

    def __init__(self, acq, mode):
        self.acq = acq
        self.key, self.token, self.sidecar, self.thread = acq.key, acq.token, acq.sidecar, acq.thread
        self.mode = mode
        self.px = acq.px
        self.info = None
        self.renewals = []
        self.release = None
        self.fence = None
        self.session = None
        self.end = None
        self.start = acq.t_reply
        self.lost_by = None
        self.unexpected = None
        self.lease_end = None
        self.notes = []

    def describe(self, t0=0.0, wl=None):
        side = wl.sidecar_name(self.sidecar) if wl else str(self.sidecar)
        parts = ["%s tok=%s on %s (%s) session=%s fence=%s: %s %s -> %s" % (
            self.key, self.token, side, self.mode, self.session, _hex(self.fence), self.acq.cmd,
            self.acq.times(t0), self.acq.outcome())]
        if self.info is not None:
            parts.append("LOCKINFO %s -> %s" % (self.info.times(t0), _info_str(self.info)))
        for r in self.renewals:
            parts.append("renew %s -> %s" % (r.times(t0), r.outcome()))
        if self.release is not None:
            parts.append("release %s %s -> %s" % (self.release.cmd, self.release.times(t0), self.release.outcome()))
        if self.end is not None:
            parts.append("checked as [%.3f, %.3f]" % (self.start - t0, self.end - t0))
        if self.lost_by is not None:
            parts.append("session lost by %s" % self.lost_by.name)
        return "; ".join(parts)


def _hex(v):
    return "0x%x" % v if isinstance(v, int) else str(v)


def _info_str(op):
    if op.status != "reply":
        return op.status
    if op.err is not None:
        return "-" + op.err
    a = op.answer
    if a is None:
        return "nil"
    return "holder=%s fence=%s owner=%s local=%s" % (a.get("holder"), _hex(a.get("fencing_token")),
                                                    a.get("owner_session"), a.get("local"))


class Fault:
    """What a nemesis did: name, the sidecars it hit (indices), [t_start,
    t_end] (monotonic), whether it must cost their sessions and whether
    nothing could be written through them meanwhile."""

    def __init__(self, name, sidecars, t_start, t_end=None, costs_session=False, no_write=False,
                 frozen=False):
        self.name, self.sidecars = name, set(sidecars)
        self.t_start, self.t_end = t_start, t_end
        self.costs_session, self.no_write = costs_session, no_write
        self.frozen = frozen      # the sidecar itself was stopped (SIGSTOP)
        self.old_sessions = {}    # sidecar -> the session it had when the fault began (check() fills it)

    def __repr__(self):
        return "Fault(%s on %s [%.3f, %s])" % (self.name, sorted(self.sidecars), self.t_start,
                                              "%.3f" % self.t_end if self.t_end else "...")


# --------------------------------------------------------------------------
# the workload

class _Conn:
    """One client connection to one sidecar, reconnected on demand."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None

    def request(self, op, *args):
        """Sends args, fills op's times/status/raw.  Returns the decoded
        value (or None when there is no reply)."""
        if self.c is None:
            try:
                self.c = RawClient(self.port, timeout=REPLY_TIMEOUT, connect_timeout=1.0)
            except OSError:
                op.status = "noconn"
                return None
        op.t_sent, op.w_sent = time.monotonic(), time.time()
        try:
            self.c.send_cmd(*args)
            raw = self.c.read_reply(REPLY_TIMEOUT)
        except socket.timeout:
            op.t_reply = None
            op.status = "timeout"
            self.close()
            return None
        except (ConnectionClosed, OSError):
            op.status = "closed"
            self.close()
            return None
        op.t_reply, op.w_reply = time.monotonic(), time.time()
        op.status = "reply"
        op.raw = raw
        v = decode_one(raw)
        if isinstance(v, Err):
            op.err = str(v)
        return v

    def script(self, op, name, keys, args):
        v = self.request(op, "EVALSHA", SHAS[name], len(keys), *keys, *args)
        if op.err is not None and op.err.startswith("NOSCRIPT"):
            op.err = None
            load = Op("load", "SCRIPT LOAD", op.sidecar, op.thread, None, None)
            r = self.request(load, "SCRIPT", "LOAD", SCRIPTS[name])
            if load.failed:
                op.status, op.err, op.t_sent, op.t_reply = load.status, load.err, load.t_sent, load.t_reply
                return r
            v = self.request(op, "EVALSHA", SHAS[name], len(keys), *keys, *args)
        return v


class Workload:
    def __init__(self, sidecars, prefix, names=None, seed=None, short_threads=2, long_threads=1,
                 hash_threads=1, short_px=(250, 300, 400, 500), long_px=3000, short_keys=2,
                 long_keys=2, hash_keys=1):
        """sidecars: Zkresp objects (their .port is used at each reconnect,
        so a restarted sidecar is picked up)."""
        self.sidecars = list(sidecars)
        self.names = names or ["s%d" % i for i in range(len(self.sidecars))]
        self.prefix = prefix
        self.rnd_seed = seed if seed is not None else random.randrange(1 << 30)
        self.short_keys = ["%s:k%d" % (prefix, i) for i in range(short_keys)]
        self.long_keys = ["%s:L%d" % (prefix, i) for i in range(long_keys)]
        self.hash_keys = ["%s:R%d" % (prefix, i) for i in range(hash_keys)]
        self.short_px, self.long_px = short_px, long_px
        self.lock = threading.Lock()
        self.ops = []          # every request
        self.holds = []        # every OK
        self.stop_ev = threading.Event()
        self.threads = []
        self.counter = itertools.count()
        self.plan = []
        for s in range(len(self.sidecars)):
            self.plan += [(s, "short")] * short_threads + [(s, "long")] * long_threads + \
                         [(s, "hash")] * hash_threads
        self.t0 = None

    def sidecar_name(self, i):
        return self.names[i]

    def token(self, thread):
        return "%s-%d-%s" % (thread, next(self.counter), uuid.uuid4().hex[:8])

    def _rec(self, op):
        with self.lock:
            self.ops.append(op)
        return op

    def start(self):
        self.t0 = time.monotonic()
        self.w0 = time.time()
        for n, (s, mode) in enumerate(self.plan):
            name = "%s.%s%d" % (self.names[s], mode, n)
            t = threading.Thread(target=self._run, args=(s, mode, name, random.Random(self.rnd_seed + n)),
                                 daemon=True, name=name)
            self.threads.append(t)
            t.start()
        return self

    def stop(self, timeout=60):
        self.stop_ev.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        return alive

    # -- one client thread
    def _run(self, s, mode, name, rnd):
        conn = _Conn(self.sidecars[s].port)
        try:
            while not self.stop_ev.is_set():
                conn.port = self.sidecars[s].port
                if mode == "short":
                    self._short(conn, s, name, rnd)
                elif mode == "long":
                    self._long(conn, s, name, rnd)
                else:
                    self._hash(conn, s, name, rnd)
        finally:
            conn.close()

    def _pause_after(self, op, rnd, busy=(0.005, 0.02)):
        if op.status != "reply":
            time.sleep(0.1)
        elif op.err is not None:
            time.sleep(0.05)
        else:
            time.sleep(rnd.uniform(*busy))

    def _acquire_set(self, conn, s, name, key, px, mode):
        tok = self.token(name)
        op = Op("acquire", "SET NX PX %d" % px, s, name, key, tok, px)
        v = conn.request(op, "SET", key, tok, "NX", "PX", px)
        if op.status == "reply" and op.err is None:
            op.answer = "OK" if v == b"OK" else ("NIL" if v is None else repr(v))
        self._rec(op)
        if op.answer == "OK":
            h = Hold(op, mode)
            with self.lock:
                self.holds.append(h)
            self._lockinfo(conn, h)
            return h, op
        return None, op

    def _lockinfo(self, conn, h):
        op = Op("lockinfo", "LOCKINFO", h.sidecar, h.thread, h.key, h.token)
        v = conn.request(op, "LOCKINFO", h.key)
        if op.status == "reply" and op.err is None:
            if v is None:
                op.answer = None
            elif isinstance(v, list):
                d = {}
                for i in range(0, len(v) - 1, 2):
                    k = v[i].decode() if isinstance(v[i], bytes) else v[i]
                    d[k] = v[i + 1]
                for k in ("holder", "owner_session", "type", "lifetime"):
                    if isinstance(d.get(k), bytes):
                        d[k] = d[k].decode("utf-8", "replace")
                op.answer = d
            elif isinstance(v, dict):
                op.answer = {(k.decode() if isinstance(k, bytes) else k):
                             (x.decode("utf-8", "replace") if isinstance(x, bytes) else x) for k, x in v.items()}
            else:
                op.answer = {"unexpected": repr(v)}
        h.info = self._rec(op)

    def _renew_loop(self, conn, h, rnd, renew_fn):
        """Renews every PX/3 until 1..3 renewals answered 1, a 0, or stop.
        Returns False when the hold was lost (a renewal answered 0)."""
        want = rnd.randint(1, 3)
        good = 0
        last = h.acq.t_reply
        while good < want and not self.stop_ev.is_set():
            due = last + h.px / 3000.0
            while not self.stop_ev.is_set() and time.monotonic() < due:
                time.sleep(min(0.05, max(0.0, due - time.monotonic())))
            if self.stop_ev.is_set():
                break
            op = renew_fn()
            h.renewals.append(self._rec(op))
            if op.answer == 1:
                good += 1
            elif op.answer == 0:
                return False
            last = op.t_reply if op.t_reply is not None else time.monotonic()
        return True

    def _short(self, conn, s, name, rnd):
        key = rnd.choice(self.short_keys)
        px = rnd.choice(self.short_px)
        h, op = self._acquire_set(conn, s, name, key, px, "short")
        if h is None:
            self._pause_after(op, rnd)

    def _release_set(self, conn, h, rnd):
        if rnd.random() < 0.5:
            op = Op("release", "DELIFEQ", h.sidecar, h.thread, h.key, h.token)
            v = conn.request(op, "DELIFEQ", h.key, h.token)
        else:
            op = Op("release", "EVALSHA release", h.sidecar, h.thread, h.key, h.token)
            v = conn.script(op, "release", [h.key], [h.token])
        if op.status == "reply" and op.err is None:
            op.answer = v if v in (0, 1) else repr(v)
        h.release = self._rec(op)

    def _long(self, conn, s, name, rnd):
        key = rnd.choice(self.long_keys)
        renew = rnd.random() >= 0.25
        px = self.long_px if renew else 400
        h, op = self._acquire_set(conn, s, name, key, px, "long" if renew else "long-short")
        if h is None:
            self._pause_after(op, rnd, (0.01, 0.04))
            return
        if not renew:
            time.sleep(rnd.uniform(0, 0.2))
            if rnd.random() < 0.5:
                self._release_set(conn, h, rnd)
            return

        def renew_fn():
            op = Op("renew", "EVALSHA extend", h.sidecar, h.thread, h.key, h.token, h.px)
            v = conn.script(op, "extend", [h.key], [h.token, h.px, "1"])
            if op.status == "reply" and op.err is None:
                op.answer = v if v in (0, 1) else repr(v)
            return op
        if self._renew_loop(conn, h, rnd, renew_fn):
            self._release_set(conn, h, rnd)

    def _hash(self, conn, s, name, rnd):
        key = rnd.choice(self.hash_keys)
        px = self.long_px
        tok = self.token(name)
        op = Op("acquire", "EVALSHA r_acquire %d" % px, s, name, key, tok, px)
        v = conn.script(op, "r_acquire", [key], [px, tok])
        if op.status == "reply" and op.err is None:
            op.answer = "OK" if v is None else ("NIL" if isinstance(v, int) else repr(v))
        self._rec(op)
        if op.answer != "OK":
            self._pause_after(op, rnd, (0.01, 0.04))
            return
        h = Hold(op, "hash")
        with self.lock:
            self.holds.append(h)
        self._lockinfo(conn, h)

        def renew_fn():
            r = Op("renew", "EVALSHA r_renew", h.sidecar, h.thread, h.key, h.token, h.px)
            v = conn.script(r, "r_renew", [h.key], [h.px, h.token])
            if r.status == "reply" and r.err is None:
                r.answer = v if v in (0, 1) else repr(v)
            return r
        if not self._renew_loop(conn, h, rnd, renew_fn):
            return
        rel = Op("release", "EVALSHA r_unlock", h.sidecar, h.thread, h.key, h.token)
        latch = "redisson_unlock_latch:{%s}:%s" % (h.key, uuid.uuid4().hex[:12])
        v = conn.script(rel, "r_unlock", [h.key, "redisson_lock__channel:{%s}" % h.key, latch],
                        [0, h.px, h.token, "publish", 3000])
        if rel.status == "reply" and rel.err is None:
            rel.answer = 0 if v is None else (v if v in (0, 1) else repr(v))
        h.release = self._rec(rel)


# --------------------------------------------------------------------------
# the session monitor

class Monitor:
    """Polls every sidecar's INFO zookeeper every interval seconds."""

    def __init__(self, sidecars, interval=0.1, names=None):
        self.sidecars = list(sidecars)
        self.names = names or ["s%d" % i for i in range(len(self.sidecars))]
        self.interval = interval
        self.samples = [[] for _ in self.sidecars]   # (t_sent, t_reply, state, session, server, timeout)
        self.stop_ev = threading.Event()
        self.threads = []

    def start(self):
        for i in range(len(self.sidecars)):
            t = threading.Thread(target=self._run, args=(i,), daemon=True, name="monitor-%d" % i)
            self.threads.append(t)
            t.start()
        return self

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(5)

    def _run(self, i):
        c = None
        while not self.stop_ev.is_set():
            t_sent = time.monotonic()
            try:
                if c is None:
                    c = RawClient(self.sidecars[i].port, timeout=0.5, connect_timeout=0.3)
                info = parse_info(c.cmd("INFO", "zookeeper", timeout=0.5))
                sid = info.get("zk_session_id", "0")
                sid = int(sid, 16) if sid.lower().startswith("0x") else int(sid or 0)
                self.samples[i].append((t_sent, time.monotonic(), info.get("zk_state"), sid,
                                        info.get("zk_server"), int(info.get("zk_session_timeout") or 0)))
            except (OSError, ConnectionClosed, ValueError):
                if c is not None:
                    c.close()
                    c = None
                self.samples[i].append((t_sent, time.monotonic(), "unreachable", None, None, None))
            time.sleep(self.interval)
        if c is not None:
            c.close()

    def changes(self, i):
        """Session changes of sidecar i: (t_last_old, t_first_new, old, new)
        from consecutive samples with a session id."""
        out = []
        prev = None
        for (ts, tr, st, sid, srv, to) in self.samples[i]:
            if not sid:
                continue
            if prev is not None and sid != prev[1]:
                out.append((prev[0], tr, prev[1], sid))
            prev = (tr, sid)
        return out

    def states(self, i):
        """State transitions (t_reply, state, session, server) of sidecar i."""
        out = []
        last = None
        for (ts, tr, st, sid, srv, to) in self.samples[i]:
            cur = (st, sid, srv)
            if cur != last:
                out.append((tr, st, sid, srv))
                last = cur
        return out

    def last_state(self, i):
        for s in reversed(self.samples[i]):
            if s[2] != "unreachable":
                return s
        return None


# --------------------------------------------------------------------------
# the checker

class Report:
    def __init__(self, name):
        self.name = name
        self.counts = {"holds": 0, "holds_checked": 0, "acquire_attempts": 0, "renewals": 0,
                       "renewals_1": 0, "releases": 0, "overlaps": 0, "fencing": 0,
                       "false_answers": 0, "resurrections": 0, "lying_answers": 0, "txn_mismatch": 0,
                       "undocumented_errors": 0, "no_reply": 0, "session_changes": 0,
                       "unexpected_session_changes": 0, "renewals_past_ttl": 0}
        self.errors = {}           # text -> count
        self.error_latency = {}    # text -> max seconds
        self.late_unavailable = []  # (latency, op)
        self.violations = []       # (category, text)
        self.notes = []

    def add(self, category, text):
        self.violations.append((category, text))

    def summary(self):
        c = self.counts
        lines = ["%s: %d holds (%d checked), %d acquisition attempts, %d renewals (%d answered 1), "
                 "%d releases; overlaps %d, fencing %d, false answers %d, resurrections %d, lying "
                 "answers %d, txn-log mismatches %d, undocumented errors %d, no reply %d, session "
                 "changes %d (unexpected %d)" % (
                     self.name, c["holds"], c["holds_checked"], c["acquire_attempts"], c["renewals"],
                     c["renewals_1"], c["releases"], c["overlaps"], c["fencing"], c["false_answers"],
                     c["resurrections"], c["lying_answers"], c["txn_mismatch"],
                     c["undocumented_errors"], c["no_reply"], c["session_changes"],
                     c["unexpected_session_changes"])]
        if c["renewals_past_ttl"]:
            lines.append("  %d renewals failed once their lock's TTL had run out (not counted as violations)"
                         % c["renewals_past_ttl"])
        if self.errors:
            lines.append("  errors: " + ", ".join("%r x%d (max %.2fs after send)" % (
                t, n, self.error_latency.get(t, 0)) for t, n in sorted(self.errors.items())))
        if self.late_unavailable:
            worst = max(self.late_unavailable, key=lambda x: x[0])
            lines.append("  %d '-%s' later than the request timeout + 0.5 s (worst %.2f s: %s)" % (
                len(self.late_unavailable), UNAVAILABLE, worst[0], worst[1]))
        for n in self.notes:
            lines.append("  note: " + n)
        return "\n".join(lines)

    def text(self, limit=40):
        out = [self.summary()]
        cats = {}
        for cat, _ in self.violations:
            cats[cat] = cats.get(cat, 0) + 1
        if cats:
            out.append("  violations: " + ", ".join("%s %d" % kv for kv in sorted(cats.items())))
        for cat, t in self.violations[:limit]:
            out.append("  [%s] %s" % (cat, t))
        if len(self.violations) > limit:
            out.append("  ... %d more" % (len(self.violations) - limit))
        return "\n".join(out)


def _session_hex(v):
    if v is None:
        return None
    if isinstance(v, int):
        return v
    try:
        return int(v, 16)
    except (TypeError, ValueError):
        return None


def check(wl, monitor, faults, session_timeout_ms, request_timeout_ms, name="workload",
          txns=None, root=None, expect=None, t0=None, log_lines=None):
    """Checks the recorded history.  faults: [Fault]; session_timeout_ms:
    the negotiated timeout per sidecar (list); txns: committed transactions
    (ensemble.committed_txns) or None; root: the sidecars' --root (for the
    key paths in the txn log); expect: the nemesis's own expectations:
      sessions_survive: sidecar indices whose session must not change
      reachable_at_end: sidecar indices that must reach ZooKeeper again by
        the end of the phase (default: sessions_survive)
      renewals_never_fail: sidecar indices whose renewals must not fail
      no_unavailable: no '-TRYAGAIN ZooKeeper unavailable' at all
    log_lines(sidecar, wall_from, wall_to): the sidecar's log lines of that
    time, for the evidence.  Returns a Report."""
    expect = expect or {}
    t0 = wl.t0 if t0 is None else t0
    w0 = wl.w0 + (t0 - wl.t0)
    rep = Report(name)
    holds = list(wl.holds)
    ops = list(wl.ops)
    rep.counts["holds"] = len(holds)
    rep.counts["acquire_attempts"] = sum(1 for o in ops if o.kind == "acquire")
    rep.counts["renewals"] = sum(1 for o in ops if o.kind == "renew")
    rep.counts["renewals_1"] = sum(1 for o in ops if o.kind == "renew" and o.answer == 1)
    rep.counts["releases"] = sum(1 for o in ops if o.kind == "release")

    def rel(t):
        return "%.3f" % (t - t0) if t is not None else "-"

    def hd(h):
        return h.describe(t0, wl) + logs_of(h)

    def logs_of(h):
        if log_lines is None:
            return ""
        w_from = h.acq.w_sent - 0.5
        last = [o for o in [h.acq, h.info, h.release] + h.renewals if o is not None and (o.w_reply or o.w_sent)]
        w_to = max((o.w_reply or o.w_sent) for o in last) + 0.5
        lines = log_lines(h.sidecar, w_from, w_to)
        if not lines:
            return ""
        return "\n        %s log:\n%s" % (wl.sidecar_name(h.sidecar), "\n".join("          " + l for l in lines[:12]))

    # ---- errors and missing replies
    req_s = request_timeout_ms / 1000.0
    for o in ops:
        if o.status == "reply" and o.err is not None:
            rep.errors[o.err] = rep.errors.get(o.err, 0) + 1
            lat = o.t_reply - o.t_sent
            rep.error_latency[o.err] = max(rep.error_latency.get(o.err, 0.0), lat)
            if base_error(o.err) not in DOCUMENTED_ERRORS:
                rep.counts["undocumented_errors"] += 1
                rep.add("undocumented_error", "%s %s on %s by %s: -%s %s" % (
                    o.cmd, o.key, wl.sidecar_name(o.sidecar), o.thread, o.err, o.times(t0)))
            frozen = any(f.frozen and o.sidecar in f.sidecars and f.t_start < o.t_reply and
                         (f.t_end is None or f.t_end > o.t_sent) for f in faults)
            if base_error(o.err) == UNAVAILABLE and lat > req_s + 0.5 and not frozen:
                rep.late_unavailable.append((lat, "%s %s on %s %s" % (o.cmd, o.key, wl.sidecar_name(o.sidecar),
                                                                       o.times(t0))))
            if base_error(o.err) == UNAVAILABLE and expect.get("no_unavailable"):
                rep.add("expectation", "-%s in a phase where ZooKeeper stayed available: %s %s on %s %s" % (
                    o.err, o.cmd, o.key, wl.sidecar_name(o.sidecar), o.times(t0)))
        elif o.status == "timeout":
            rep.counts["no_reply"] += 1
            rep.add("no_reply", "%s %s on %s by %s: no reply within %.0f s %s" % (
                o.cmd, o.key, wl.sidecar_name(o.sidecar), o.thread, REPLY_TIMEOUT, o.times(t0)))
    # A renewal must not fail while the session's lease outlives the fault,
    # unless the lock itself ran out first: a renewal that could not reach
    # ZooKeeper before the lock's TTL ended (counted from the send of its
    # last successful acquisition or renewal, which the sidecar's own
    # deadline is never earlier than) renews nothing; the sidecar answers
    # it then (seen: a 3 s lock renewed 1 s in, the leader stopped 3 s).
    for h in holds:
        if h.sidecar not in expect.get("renewals_never_fail", ()):
            continue
        ttl_end = h.acq.t_sent + h.px / 1000.0
        for o in h.renewals:
            if o.err is not None or o.status in ("timeout", "closed"):
                if o.t_reply is not None and o.t_reply >= ttl_end:
                    rep.counts["renewals_past_ttl"] += 1
                else:
                    rep.add("renewal_failed", "renewal failed in a fault the lease outlives, inside the lock's "
                            "TTL (to %s): %s %s tok=%s on %s -> %s %s" % (
                                rel(ttl_end), o.cmd, o.key, o.token, wl.sidecar_name(o.sidecar),
                                o.outcome(), o.times(t0)))
            elif o.answer == 1:
                ttl_end = max(ttl_end, o.t_sent + o.px / 1000.0)

    # ---- sessions
    unexpected = {}    # sidecar -> [(t_last_old, t_first_new, old, new)]
    for i in range(len(wl.sidecars)):
        for ch in monitor.changes(i):
            rep.counts["session_changes"] += 1
            t_last_old, t_first_new, old, new = ch
            covered = [f for f in faults if f.costs_session and i in f.sidecars and
                       f.t_start <= t_first_new and (f.t_end is None or t_last_old <= f.t_end + 15)]
            if covered:
                continue
            rep.counts["unexpected_session_changes"] += 1
            unexpected.setdefault(i, []).append(ch)
            line = "%s: session 0x%x -> 0x%x between %s and %s, not explained by a fault that must cost it" % (
                wl.sidecar_name(i), old, new, rel(t_last_old), rel(t_first_new))
            if i in expect.get("sessions_survive", ()):
                rep.add("session_lost", line)
            else:
                rep.notes.append(line)
    for i in expect.get("reachable_at_end", expect.get("sessions_survive", ())):
        if any(s[2] == "unreachable" for s in monitor.samples[i][-3:]):
            rep.add("session_lost", "%s unreachable at the end of the phase" % wl.sidecar_name(i))

    # ---- the session each sidecar had when a session-costing fault began
    for f in faults:
        for i in f.sidecars:
            before = [smp for smp in monitor.samples[i] if smp[1] <= f.t_start and smp[3]]
            if before:
                f.old_sessions[i] = before[-1][3]

    # ---- intervals
    for h in holds:
        if h.info is not None and h.info.status == "reply" and isinstance(h.info.answer, dict) and \
                h.info.answer.get("holder") == h.token:
            ft = h.info.answer.get("fencing_token")
            h.fence = ft if isinstance(ft, int) else None
            h.session = _session_hex(h.info.answer.get("owner_session"))
        lease = h.acq.t_sent + h.px / 1000.0
        for r in h.renewals:
            if r.answer == 1:
                lease = max(lease, r.t_sent + r.px / 1000.0)
        h.lease_end = lease
        if h.release is not None and h.release.answer == 1 and h.release.t_sent is not None:
            end = h.release.t_sent
        else:
            end = lease
            if h.release is not None and h.release.t_sent is not None:
                end = min(end, h.release.t_sent)
        untruncated = end
        for f in faults:
            if not (f.costs_session and h.sidecar in f.sidecars and end > f.t_start):
                continue
            old = f.old_sessions.get(h.sidecar)
            if h.session is not None:
                # LOCKINFO named our token: we know the node's session.
                of_old = old is not None and h.session == old
                if old is None and h.acq.t_reply < f.t_start:
                    of_old = True
            else:
                # Unknown: a hold whose acquisition was sent before the fault
                # ended may be of the old session; ending it at the fault's
                # start only shortens it.
                of_old = f.t_end is None or h.acq.t_sent < f.t_end
            if of_old:
                end = min(end, f.t_start)
                h.lost_by = f
                # The resurrection rule needs certainty that the hold was of
                # the lost session.
                h.notes.append("old" if (h.session is not None and h.session == old) or
                               h.acq.t_reply < f.t_start else "maybe-old")
        for ch in unexpected.get(h.sidecar, ()):
            t_last_old, t_first_new, old, new = ch
            if t_first_new > h.acq.t_sent and t_last_old < untruncated:
                h.unexpected = ch
                end = min(end, h.start)
        h.end = end

    # ---- overlaps (each hold against every earlier one)
    by_key = {}
    for h in holds:
        by_key.setdefault(h.key, []).append(h)
    for key, hs in by_key.items():
        live = sorted([h for h in hs if h.end > h.start], key=lambda h: h.start)
        rep.counts["holds_checked"] += len(live)
        best = None
        for h in live:
            if best is not None and h.start < best.end:
                rep.counts["overlaps"] += 1
                rep.add("overlap", "%s: two holders for %.0f ms:\n      A %s\n      B %s%s" % (
                    key, 1000 * (min(best.end, h.end) - h.start), hd(best), hd(h),
                    _txn_evidence(txns, root, key, [best, h], t0, w0)))
            if best is None or h.end > best.end:
                best = h
        # fencing: A's OK received before B's acquire was sent => fence(A) < fence(B)
        fenced = [h for h in hs if h.fence is not None]
        by_ok = sorted(fenced, key=lambda h: h.start)
        by_sent = sorted(fenced, key=lambda h: h.acq.t_sent)
        j, top = 0, None
        for b in by_sent:
            while j < len(by_ok) and by_ok[j].start < b.acq.t_sent:
                if top is None or by_ok[j].fence > top.fence:
                    top = by_ok[j]
                j += 1
            if top is not None and not top.fence < b.fence:
                rep.counts["fencing"] += 1
                rep.add("fencing", "%s: fencing token did not increase: %s then %s:\n      A %s\n      B %s" % (
                    key, _hex(top.fence), _hex(b.fence), hd(top), hd(b)))

    # ---- session loss: resurrection; no-write windows: false answers
    for h in holds:
        f = h.lost_by
        if f is not None and "old" in h.notes and h.unexpected is None:
            limit = f.t_start + session_timeout_ms[h.sidecar] / 1000.0
            for r in h.renewals + ([h.release] if h.release is not None else []):
                if r.answer == 1 and r.t_sent is not None and r.t_sent > limit:
                    rep.counts["resurrections"] += 1
                    rep.add("resurrection", "%s %s answered 1, sent %.2f s after %s began (session "
                            "timeout %d ms): %s" % (r.kind, r.cmd, r.t_sent - f.t_start, f.name,
                                                    session_timeout_ms[h.sidecar], hd(h)))
        for r in h.renewals + ([h.release] if h.release is not None else []):
            if r.answer != 1 or r.t_sent is None:
                continue
            for w in faults:
                if w.no_write and h.sidecar in w.sidecars and w.t_end is not None and \
                        r.t_sent >= w.t_start and r.t_reply <= w.t_end:
                    rep.counts["false_answers"] += 1
                    rep.add("false_answer", "%s %s answered 1 while %s let nothing be written "
                            "[%s, %s]: %s" % (r.kind, r.cmd, w.name, rel(w.t_start), rel(w.t_end), hd(h)))

    # ---- lying answers (holds without session loss)
    for h in holds:
        if h.lost_by is not None or h.unexpected is not None:
            continue
        lease = h.acq.t_sent + h.px / 1000.0
        for r in h.renewals:
            if r.answer == 0 and r.t_reply < lease:
                rep.counts["lying_answers"] += 1
                rep.add("lost_hold", "renewal answered 0 %.0f ms before the lease end, no session loss: %s" % (
                    1000 * (lease - r.t_reply), hd(h)))
            if r.answer == 1:
                lease = max(lease, r.t_sent + r.px / 1000.0)
        rl = h.release
        if rl is not None and rl.answer == 0 and rl.t_reply < lease:
            rep.counts["lying_answers"] += 1
            rep.add("lost_hold", "release answered 0 %.0f ms before the lease end, no session loss: %s" % (
                1000 * (lease - rl.t_reply), hd(h)))
        li = h.info
        if li is not None and li.status == "reply" and li.err is None and li.t_reply < h.lease_end and \
                (rl is None or rl.t_sent is None or li.t_reply < rl.t_sent):
            a = li.answer
            if a is None or a.get("holder") != h.token:
                rep.counts["lying_answers"] += 1
                rep.add("lost_hold", "LOCKINFO answered %.0f ms before the lease end names %s, no "
                        "session loss: %s%s" % (1000 * (h.lease_end - li.t_reply), _info_str(li), hd(h),
                                                _txn_evidence(txns, root, h.key, [h], t0, w0)))

    # ---- the transaction log
    if txns is not None and root is not None:
        _check_txns(rep, wl, holds, txns, root, t0, w0)
    return rep


# --------------------------------------------------------------------------
# transaction-log evidence

TXN_TOL = 0.05    # s: the leader stamps a txn with currentTimeMillis between our send and our reply


def _index_txns(txns, root):
    """path -> [(entry, op)] of the writes of committed transactions."""
    idx = {}
    for e in txns:
        for o in e["ops"]:
            p = o.get("path")
            if p and o["op"] in ("create", "delete", "setData") and p.startswith(root):
                idx.setdefault(p, []).append((e, o))
    return idx


_txn_cache = {}


def _indexed(txns, root):
    k = (id(txns), root)
    if k not in _txn_cache:
        _txn_cache.clear()
        _txn_cache[k] = _index_txns(txns, root)
    return _txn_cache[k]


def _txn_evidence(txns, root, key, hs, t0, w0=None):
    """The committed writes of key's node around the given holds, with the
    whole transaction of each (who replaced whom)."""
    if txns is None or root is None:
        return ""
    from ensemble import describe_txn
    path = keyenc.node_path(root, key)
    idx = _indexed(txns, root)
    entries = idx.get(path, [])
    toks = [h.token.encode() for h in hs]
    ws = [w for h in hs for o in [h.acq, h.info, h.release] + h.renewals if o is not None
          for w in (o.w_sent, o.w_reply) if w]
    lo = min(ws) - 0.5
    hi = max(max(ws), max(h.acq.w_sent + h.px / 1000.0 for h in hs)) + 0.5
    lines = []
    # Each hold's node: the write that put its token there and the write
    # that ended that node (a delete, or a replacement), with its session.
    for n, h in enumerate(hs):
        tok = toks[n]
        who = "AB"[n] if len(hs) == 2 else "the hold"
        born = None
        for e, o in entries:
            d = o.get("data") or b""
            if born is None:
                if o["op"] in ("create", "setData") and tok in d:
                    born = e
            elif o["op"] == "delete" or (o["op"] in ("create", "setData") and tok not in d):
                lines.append("        %s's node: written 0x%x by session 0x%x, ended at 0x%x (%+.3f) by session "
                             "0x%x, %s" % (who, born["zxid"], born["session"], e["zxid"],
                                           e["time_ms"] / 1000.0 - (w0 or 0), e["session"],
                                           "its own session" if e["session"] == born["session"] else
                                           "ANOTHER session"))
                break
        else:
            if born is not None:
                lines.append("        %s's node: written 0x%x by session 0x%x, not ended in the log" % (
                    who, born["zxid"], born["session"]))
    shown = set()
    for e, o in entries:
        if e["zxid"] in shown:
            continue
        ts = e["time_ms"] / 1000.0
        mine = sorted({i for op in e["ops"] if op.get("path") == path
                       for i, t in enumerate(toks) if t in (op.get("data") or b"")})
        if lo <= ts <= hi or mine:
            shown.add(e["zxid"])
            who = ["AB"[i] if len(hs) == 2 else "the hold" for i in mine]
            tag = (" <- token of " + "/".join(who)) if mine else ""
            lines.append("        %s%s" % (describe_txn(e, root, w0), tag))
    if not lines:
        return "\n      txn log: no committed write of %s around these holds" % path
    return "\n      committed transactions on %s:\n%s" % (path, "\n".join(lines[:20]))


def _check_txns(rep, wl, holds, txns, root, t0, w0):
    idx = _indexed(txns, root)

    def writes(path, token, lo, hi):
        out = []
        for e, o in idx.get(path, []):
            if o["op"] in ("create", "setData") and token in (o.get("data") or b""):
                ts = e["time_ms"] / 1000.0
                if lo - TXN_TOL <= ts <= hi + TXN_TOL:
                    out.append((e, o))
        return out

    for h in holds:
        path = keyenc.node_path(root, h.key)
        tok = h.token.encode()
        a = h.acq
        if not writes(path, tok, a.w_sent, a.w_reply):
            rep.counts["txn_mismatch"] += 1
            rep.add("txn_acquire", "OK without a committed write of the token between request and "
                    "reply: %s%s" % (h.describe(t0, wl), _txn_evidence(txns, root, h.key, [h], t0, w0)))
        creates = [e["zxid"] for e, o in idx.get(path, []) if o["op"] == "create" and tok in (o.get("data") or b"")]
        if h.fence is not None and creates and h.fence not in creates:
            rep.counts["txn_mismatch"] += 1
            rep.add("txn_fence", "LOCKINFO's fencing token %s is not the czxid of the hold's node (%s): %s" % (
                _hex(h.fence), ", ".join(_hex(c) for c in creates), h.describe(t0, wl)))
        for r in h.renewals:
            if r.answer == 1 and not writes(path, tok, r.w_sent, r.w_reply):
                rep.counts["txn_mismatch"] += 1
                rep.add("false_renewal", "renewal answered 1 %s but no committed write of the node between "
                        "request and reply: %s%s" % (r.times(t0), h.describe(t0, wl),
                                                     _txn_evidence(txns, root, h.key, [h], t0, w0)))
        r = h.release
        if r is not None and r.answer == 1:
            ok = False
            last_tok = False
            for e, o in idx.get(path, []):
                ts = e["time_ms"] / 1000.0
                if o["op"] in ("create", "setData"):
                    last_tok = tok in (o.get("data") or b"")
                elif o["op"] == "delete":
                    if last_tok and r.w_sent - TXN_TOL <= ts <= r.w_reply + TXN_TOL:
                        ok = True
                    last_tok = False
            if not ok:
                rep.counts["txn_mismatch"] += 1
                rep.add("false_release", "release answered 1 %s but no committed delete of the hold's node "
                        "between request and reply: %s%s" % (r.times(t0), h.describe(t0, wl),
                                                             _txn_evidence(txns, root, h.key, [h], t0, w0)))
