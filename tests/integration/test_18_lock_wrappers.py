"""Tier 18: the native-lock wrappers in scripts/examples/ against real
sidecars: zklock.py (a context manager over redis-py) and zklock.js
(withLock over ioredis).  Users of a wrapper on two sidecars never overlap
inside the lock, tokens increase from one holder to the next, the lock is
free after the guarded code raised, and a lock held elsewhere makes the
wrapper fail clearly without running the guarded code."""

import importlib.util
import json
import os
import subprocess
import threading
import time

import pytest

import harness
from harness import unique

EXAMPLES = os.path.join(harness.SCRIPTS_DIR, "examples")
NODE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "lock_wrapper.js")


def _load_zklock():
    spec = importlib.util.spec_from_file_location("zklock", os.path.join(EXAMPLES, "zklock.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


zklock = _load_zklock()


def test_python_wrapper_mutual_exclusion(zkresp_pair):
    """Four threads (two per sidecar, each its own client) enter
    zk_lock(EX) five times each: never two inside at once, every entry
    counted, each token above the previous holder's."""
    a, b = zkresp_pair
    key = unique("pylock")
    log, errors = [], []
    state = {"inside": 0, "max": 0}
    mu = threading.Lock()

    def worker(i):
        r = (a, b)[i % 2].redis(socket_timeout=30)
        try:
            for _ in range(5):
                with zklock.zk_lock(r, key, wait=20000, px=10000) as token:
                    with mu:
                        state["inside"] += 1
                        state["max"] = max(state["max"], state["inside"])
                        log.append((i, token))
                    time.sleep(0.01)
                    with mu:
                        state["inside"] -= 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("worker %d: %r" % (i, e))
        finally:
            r.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert state["max"] == 1, "%d holders inside the lock at once" % state["max"]
    assert len(log) == 20, log
    tokens = [t for _, t in log]
    assert all(isinstance(t, int) for t in tokens), tokens
    assert all(x < y for x, y in zip(tokens, tokens[1:])), "tokens not increasing: %r" % tokens
    assert {i for i, _ in log} == {0, 1, 2, 3}


def test_python_wrapper_releases_after_exception_and_times_out(zkresp_pair):
    """The guarded block raising: the exception comes out unchanged and the
    lock is free (LOCK.INFO empty, another owner gets it at once).  A lock
    held by another owner: LockTimeout naming the key after about the wait,
    the block never runs.  Shared mode: two zk_lock(PR) nest.  A
    socket_timeout not above the wait is refused up front."""
    a, b = zkresp_pair
    ra, rb = a.redis(socket_timeout=30), b.redis(socket_timeout=30)
    key = unique("pyexc")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with zklock.zk_lock(ra, key, wait=1000) as token:
            assert isinstance(token, int)
            raise Boom()
    flat = rb.execute_command("LOCK.INFO", key)
    assert flat == [b"holders", [], b"waiters", []], flat
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", key, "other", "WAIT", 0), int)

    ran = []
    t0 = time.monotonic()
    with pytest.raises(zklock.LockTimeout) as e:
        with zklock.zk_lock(ra, key, wait=300):
            ran.append(1)
    assert not ran, "the block ran without the lock"
    assert key in str(e.value), str(e.value)
    assert 0.28 <= time.monotonic() - t0 <= 5
    assert rb.execute_command("LOCK.RELEASE", key, "other") == 1

    with zklock.zk_lock(ra, key, mode="PR", wait=1000) as t1:
        with zklock.zk_lock(rb, key, mode="SHARED", wait=0) as t2:
            assert isinstance(t1, int) and isinstance(t2, int)
            flat = rb.execute_command("LOCK.INFO", key)
            holders = dict(zip(flat[::2], flat[1::2]))[b"holders"]
            assert len(holders) == 2, flat
    assert rb.execute_command("LOCK.INFO", key) == [b"holders", [], b"waiters", []]

    short = a.redis(socket_timeout=1)
    with pytest.raises(ValueError):
        with zklock.zk_lock(short, key, wait=5000):
            pass
    short.close()
    ra.close()
    rb.close()


def test_node_wrapper(zkresp_pair):
    """zklock.js's withLock over ioredis, run by node: four workers on two
    sidecars never overlap (max one inside), all 20 entries happen with
    increasing tokens and withLock returns fn's result; after fn throws the
    error comes out and the lock is free; a lock held elsewhere rejects with
    LockTimeoutError without running fn."""
    a, b = zkresp_pair
    key = unique("nodelock")
    proc = subprocess.run(["node", NODE_SCRIPT, os.path.join(EXAMPLES, "zklock.js"),
                           str(a.port), str(b.port), key],
                          capture_output=True, text=True, timeout=90,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, "no summary from node: stdout=%r stderr=%r" % (proc.stdout, proc.stderr[-2000:])
    s = json.loads(lines[-1])
    print(s)
    assert not s["errors"], s["errors"]
    assert s["max_inside"] == 1, s
    assert s["entries"] == 20 and s["results_ok"], s
    toks = s["tokens"]
    assert all(x < y for x, y in zip(toks, toks[1:])), "tokens not increasing: %r" % toks
    assert s["released_after_throw"] is True, s
    assert s["timeout_error"] == "LockTimeoutError" and not s["timeout_fn_ran"], s
    assert proc.returncode == 0, (s, proc.stderr[-2000:])
