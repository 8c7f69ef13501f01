"""Differential runs: the same command sequence against a reference
redis-server and against zkresp, raw replies compared byte for byte.

A sequence is a list of steps.  A step is a string (split like a shell
line, so quotes work) or a list of str/bytes arguments, optionally wrapped:

    Tol(step, ms)      the replies are integers that may differ by ms
                       (PTTL, TTL); negative values (-1, -2) must be equal
    Sleep(ms)          pause (both sides run concurrently, so they pause
                       together)
    Raw(bytes)         send these bytes as they are and read one reply
    Ignore(step)       run it, do not compare (setup whose reply differs
                       for a known, legitimate reason)
    Either(step, *alt) zkresp may answer like redis-server 7.0 or exactly
                       one of alt (where Redis 7.2, whose version zkresp
                       reports, changed a text)

In arguments, a token "@name" is a key: it becomes a per-run prefix plus
name, so runs never see each other's keys.  "{now_ms+N}" and "{now_s+N}"
(N may be negative) become the wall clock at send time.
"""

import re
import shlex
import threading
import time

from resp import RawClient, encode


class Tol:
    def __init__(self, step, ms):
        self.step, self.ms = step, ms


class Sleep:
    def __init__(self, ms):
        self.ms = ms


class Raw:
    def __init__(self, data):
        self.data = data


class Ignore:
    def __init__(self, step):
        self.step = step


class Either:
    def __init__(self, step, *alternatives):
        self.step, self.alternatives = step, alternatives


_NOW = re.compile(r"\{now_(ms|s)([+-]\d+)?\}")


def _subst(arg, prefix):
    if isinstance(arg, bytes):
        if arg.startswith(b"@") and len(arg) > 1:
            return prefix.encode() + arg[1:]
        return arg
    if arg.startswith("@") and len(arg) > 1:
        return (prefix + arg[1:]).encode()

    def now(m):
        off = int(m.group(2) or 0)
        t = time.time()
        return str(int(t * 1000) + off if m.group(1) == "ms" else int(t) + off)
    return _NOW.sub(now, arg).encode()


def args_of(step):
    if isinstance(step, (Tol, Ignore, Either)):
        return args_of(step.step)
    if isinstance(step, str):
        return shlex.split(step)
    return list(step)


def describe(step):
    if isinstance(step, Sleep):
        return "(sleep %d ms)" % step.ms
    if isinstance(step, Raw):
        return "raw %r" % (step.data,)
    return " ".join(a if isinstance(a, str) else repr(a) for a in args_of(step))


def run(port, steps, proto, prefix, timeout=10.0):
    """Runs the steps on one connection; returns the raw replies (None for
    sleeps).  A closed connection ends the run with the marker b'<closed>'."""
    out = []
    with RawClient(port, timeout=timeout) as c:
        if proto == 3:
            hello = c.cmd("HELLO", "3")
            if not hello.startswith(b"%"):
                raise AssertionError("HELLO 3 answered %r on port %d" % (hello, port))
        for step in steps:
            if isinstance(step, Sleep):
                time.sleep(step.ms / 1000.0)
                out.append(None)
                continue
            try:
                if isinstance(step, Raw):
                    c.send(step.data)
                else:
                    c.send(encode(*[_subst(a, prefix) for a in args_of(step)]))
                out.append(c.read_reply())
            except Exception as e:  # closed, timed out: recorded, compared
                out.append(("<%s>" % type(e).__name__).encode())
                break
    return out


def _int(raw):
    if raw.startswith(b":") and raw.endswith(b"\r\n"):
        try:
            return int(raw[1:-2])
        except ValueError:
            return None
    return None


def compare(steps, ref, got):
    """Mismatch descriptions (empty when the runs agree)."""
    bad = []
    for i, step in enumerate(steps):
        if isinstance(step, Sleep):
            continue
        r = ref[i] if i < len(ref) else b"<no reply>"
        g = got[i] if i < len(got) else b"<no reply>"
        if isinstance(step, Ignore):
            continue
        if isinstance(step, Tol):
            ri, gi = _int(r), _int(g)
            if ri is not None and gi is not None:
                if ri < 0 or gi < 0:
                    ok = ri == gi
                else:
                    ok = abs(ri - gi) <= step.ms
                if ok:
                    continue
        elif r == g:
            continue
        elif isinstance(step, Either) and g in step.alternatives:
            continue
        bad.append("step %d: %s\n    redis-server: %r\n    zkresp:       %r" % (i, describe(step), r, g))
    return bad


def run_both(ref_port, port, steps, proto, prefix, runner=None):
    """Runs the sequence on both servers concurrently; returns (ref, got).
    runner(port) runs it on one server (default: run(port, steps, proto,
    prefix))."""
    results = {}
    runner = runner or (lambda p: run(p, steps, proto, prefix))

    def go(name, p):
        try:
            results[name] = runner(p)
        except Exception as e:  # reported by the caller
            results[name] = e
    ts = [threading.Thread(target=go, args=("ref", ref_port)),
          threading.Thread(target=go, args=("got", port))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for name in ("ref", "got"):
        if isinstance(results[name], Exception):
            raise AssertionError("%s run failed: %r" % (name, results[name]))
    return results["ref"], results["got"]


def assert_same(ref_port, port, steps, proto, prefix):
    ref, got = run_both(ref_port, port, steps, proto, prefix)
    bad = compare(steps, ref, got)
    assert not bad, "RESP%d replies differ from redis-server:\n%s" % (proto, "\n".join(bad))
