"""Tier 41: one script cache for every sidecar (issue 19, item 5), and
SCRIPT KILL, next to redis-server as the oracle.

Two sidecars on one root behave like one Redis's script cache: a script
loaded or EVALed through one is run by EVALSHA through the other, SCRIPT
EXISTS through either knows it, SCRIPT FLUSH through either forgets it
everywhere (EVALSHA answers Redis's NOSCRIPT), a restarted sidecar still
knows it, and the cache holds at most --script-cache-max scripts (beyond:
the script stays in the sidecar that has it).  Replies are compared byte
for byte with redis-server's, in RESP2 and RESP3.
"""

import hashlib
import json
import os
import subprocess
import time

import pytest

import harness
from harness import Err

NOTBUSY = "NOTBUSY No scripts in execution right now."
HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.path.join(HERE, "..", "node_modules")


def sha(body):
    return hashlib.sha1(body.encode()).hexdigest()


def body_of(tag):
    """A script of this test only (the oracle's cache is shared by tests)."""
    return "return {'%s', KEYS[1], ARGV[1], redis.call('exists', KEYS[1] or 'none')}" % harness.unique(tag)


def clients(proto, *servers):
    out = []
    for s in servers:
        c = s.client()
        if proto == 3:
            assert c.call("HELLO", "3")
        out.append(c)
    return out


def known_through(c, digest, timeout=5.0):
    harness.wait_for(lambda: c.call("SCRIPT", "EXISTS", digest) == [1], timeout,
                     what="script %s known" % digest)


@pytest.mark.parametrize("proto", [2, 3])
def test_script_load_through_one_evalsha_through_the_other(zkresp_pair, redis_ref, proto):
    a, b = zkresp_pair
    body = body_of("load")
    ca, cb, r = clients(proto, a, b, redis_ref)
    with ca, cb, r:
        assert ca.cmd("SCRIPT", "LOAD", body) == r.cmd("SCRIPT", "LOAD", body)
        key = harness.unique("k")
        for digest in (sha(body), sha(body).upper()):
            want = r.cmd("EVALSHA", digest, "1", key, "arg")
            assert want.startswith(b"*4\r\n"), want
            assert cb.cmd("EVALSHA", digest, "1", key, "arg") == want
            assert cb.cmd("EVALSHA_RO", digest, "1", key, "arg") == r.cmd("EVALSHA_RO", digest, "1", key, "arg")
        # not a sha1, or one nobody loaded: Redis's NOSCRIPT
        for bad in ("0" * 40, "not-a-sha", "../../k/x" + "0" * 31):
            assert cb.cmd("EVALSHA", bad, "0") == r.cmd("EVALSHA", bad, "0")


@pytest.mark.parametrize("proto", [2, 3])
def test_eval_through_one_is_known_to_the_other(zkresp_pair, redis_ref, proto):
    a, b = zkresp_pair
    body = body_of("eval")
    ca, cb, r = clients(proto, a, b, redis_ref)
    with ca, cb, r:
        key = harness.unique("k")
        assert ca.cmd("EVAL", body, "1", key, "x") == r.cmd("EVAL", body, "1", key, "x")
        known_through(cb, sha(body))
        assert cb.cmd("EVALSHA", sha(body), "1", key, "y") == r.cmd("EVALSHA", sha(body), "1", key, "y")


@pytest.mark.parametrize("proto", [2, 3])
def test_script_exists_through_the_other_of_a_mixed_list(zkresp_pair, redis_ref, proto):
    a, b = zkresp_pair
    one, two = body_of("ex1"), body_of("ex2")
    ca, cb, r = clients(proto, a, b, redis_ref)
    with ca, cb, r:
        for body in (one, two):
            assert ca.cmd("SCRIPT", "LOAD", body) == r.cmd("SCRIPT", "LOAD", body)
        ask = ["SCRIPT", "EXISTS", sha(one), sha(body_of("never")), sha(two).upper(), "nope", "f" * 40]
        want = r.cmd(*ask)
        assert want == (b"*5\r\n:1\r\n:0\r\n:1\r\n:0\r\n:0\r\n")
        assert cb.cmd(*ask) == want
        assert ca.cmd(*ask) == want


@pytest.mark.parametrize("mode", [[], ["ASYNC"], ["SYNC"]])
def test_script_flush_through_one_forgets_everywhere(zkresp_pair, redis_ref, kz, mode):
    a, b = zkresp_pair
    loaded, evaled = body_of("fl1"), body_of("fl2")
    ca, cb, r = clients(2, a, b, redis_ref)
    with ca, cb, r:
        assert ca.call("SCRIPT", "LOAD", loaded) == sha(loaded).encode()
        assert ca.call("EVAL", evaled, "0") is not None
        known_through(cb, sha(evaled))
        # both cached locally in both sidecars before the flush
        for c in (ca, cb):
            assert c.call("EVALSHA", sha(loaded), "0")[0].startswith(b"fl1")
            assert c.call("EVALSHA", sha(evaled), "0")[0].startswith(b"fl2")
        r.call("SCRIPT", "LOAD", loaded)
        assert cb.cmd("SCRIPT", "FLUSH", *mode) == r.cmd("SCRIPT", "FLUSH", *mode) == b"+OK\r\n"
        want = r.cmd("EVALSHA", sha(loaded), "0")
        assert want == b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        for c in (ca, cb):
            assert c.cmd("EVALSHA", sha(loaded), "0") == want
            assert c.cmd("EVALSHA", sha(evaled), "0") == want
            assert c.call("SCRIPT", "EXISTS", sha(loaded), sha(evaled)) == [0, 0]
        assert kz.get_children(a.root + "/s") == []
        # EVAL after the flush makes it known everywhere again
        assert ca.call("EVAL", evaled, "0")[0].startswith(b"fl2")
        known_through(cb, sha(evaled))


def test_script_flush_wrong_options_as_redis(zkresp, redis_ref):
    with zkresp.client() as c, redis_ref.client() as r:
        for args in (["SCRIPT", "FLUSH", "LAZY"], ["SCRIPT", "FLUSH", "SYNC", "ASYNC"], ["SCRIPT", "LOAD"],
                     ["SCRIPT", "LOAD", "return +"], ["SCRIPT", "EXISTS"]):
            assert c.cmd(*args).split(b":")[0] == r.cmd(*args).split(b":")[0], args


def test_the_shared_cache_is_bounded(make_zkresp, redis_ref, kz):
    a = make_zkresp(extra=("--script-cache-max", "3"))
    b = make_zkresp(root=a.root, extra=("--script-cache-max", "3"))
    bodies = [body_of("max%d" % i) for i in range(5)]
    with a.client() as ca, b.client() as cb, redis_ref.client() as r:
        for body in bodies:
            assert ca.cmd("SCRIPT", "LOAD", body) == r.cmd("SCRIPT", "LOAD", body)
        assert len(kz.get_children(a.root + "/s")) == 3
        # every one runs where it was loaded
        for body in bodies:
            assert ca.call("EVALSHA", sha(body), "0")[0] == r.call("EVALSHA", sha(body), "0")[0]
        # the first three everywhere; the others answer NOSCRIPT elsewhere,
        # which clients answer with EVAL
        assert cb.call("SCRIPT", "EXISTS", *[sha(x) for x in bodies]) == [1, 1, 1, 0, 0]
        assert cb.call("EVALSHA", sha(bodies[4]), "0") == Err("NOSCRIPT No matching script. Please use EVAL.")
        assert cb.call("EVAL", bodies[4], "0")[0] == r.call("EVAL", bodies[4], "0")[0]
        time.sleep(0.3)
        assert len(kz.get_children(a.root + "/s")) == 3


def test_a_script_too_big_for_zookeeper_stays_in_its_sidecar(make_zkresp, redis_ref, kz):
    a = make_zkresp(extra=("--zk-max-request", "32k"))
    b = make_zkresp(root=a.root, extra=("--zk-max-request", "32k"))
    big = "-- " + "x" * 40000 + "\n" + body_of("big")
    with a.client() as ca, b.client() as cb, redis_ref.client() as r:
        assert ca.cmd("SCRIPT", "LOAD", big) == r.cmd("SCRIPT", "LOAD", big)
        assert ca.call("EVALSHA", sha(big), "0")[0] == r.call("EVALSHA", sha(big), "0")[0]
        assert cb.call("EVALSHA", sha(big), "0") == Err("NOSCRIPT No matching script. Please use EVAL.")
        assert cb.call("EVAL", big, "0")[0].startswith(b"big")
        assert sha(big) not in (kz.get_children(a.root + "/s") if kz.exists(a.root + "/s") else [])


def test_a_restarted_sidecar_knows_the_scripts(make_zkresp):
    a = make_zkresp()
    body = body_of("restart")
    with a.client() as c:
        assert c.call("SCRIPT", "LOAD", body) == sha(body).encode()
    a.term()
    a.restart()
    b = make_zkresp(root=a.root)
    for z in (a, b):
        with z.client() as c:
            assert c.call("EVALSHA", sha(body), "1", "k", "v")[0].startswith(b"restart")


def test_redis_py_register_script_through_two_sidecars(zkresp_pair, redis_ref):
    a, b = zkresp_pair
    body = "return redis.call('incrby', KEYS[1], ARGV[1])"
    key = harness.unique("rp")
    ra, rb = a.redis(), b.redis()
    sa, sb = ra.register_script(body), rb.register_script(body)
    assert sa(keys=[key], args=[2]) == 2          # EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA through A
    assert rb.script_exists(sa.sha) == [True]
    assert sb(keys=[key], args=[3]) == 5          # EVALSHA through B finds it
    rb.script_flush()
    assert ra.script_exists(sa.sha) == [False]
    assert sa(keys=[key], args=[1]) == 6          # NOSCRIPT through A again, loaded again
    assert sb(keys=[key], args=[1]) == 7
    for c in (ra, rb):
        c.close()


NODE_DEFINE = r"""
const path = require('path');
const Redis = require(path.join(process.argv[1], 'ioredis'));
(async () => {
  const [pa, pb, key] = process.argv.slice(2);
  const a = new Redis({ port: Number(pa), host: '127.0.0.1' });
  const b = new Redis({ port: Number(pb), host: '127.0.0.1' });
  const lua = "return redis.call('incrby', KEYS[1], ARGV[1])";
  for (const c of [a, b]) c.defineCommand('bump', { numberOfKeys: 1, lua });
  const out = [];
  out.push(await a.bump(key, 2));
  out.push(await b.bump(key, 3));
  out.push(await b.script('EXISTS', require('crypto').createHash('sha1').update(lua).digest('hex')));
  await a.script('FLUSH');
  out.push(await b.bump(key, 4));
  out.push(await a.bump(key, 5));
  console.log(JSON.stringify(out));
  a.disconnect(); b.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_ioredis_define_command_through_two_sidecars(zkresp_pair):
    if not os.path.isdir(os.path.join(MODULES, "ioredis")):
        pytest.skip("ioredis is not installed")
    a, b = zkresp_pair
    key = harness.unique("io")
    proc = subprocess.run(["node", "-e", NODE_DEFINE, MODULES, str(a.port), str(b.port), key],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [2, 5, [1], 9, 14]


# ---------------------------------------------------------------- SCRIPT KILL

@pytest.mark.parametrize("proto", [2, 3])
def test_script_kill_with_no_script_running_as_redis(zkresp_pair, redis_ref, proto):
    a, b = zkresp_pair
    ca, cb, r = clients(proto, a, b, redis_ref)
    with ca, cb, r:
        want = r.cmd("SCRIPT", "KILL")
        assert want == ("-%s\r\n" % NOTBUSY).encode()
        assert ca.cmd("SCRIPT", "KILL") == want
        assert cb.cmd("SCRIPT", "KILL") == want
        assert ca.cmd("SCRIPT", "KILL", "now") == r.cmd("SCRIPT", "KILL", "now")


def _kill_busy(server, body, key):
    """Runs body on one client, kills it from another; (kill reply, the
    runner's reply) as raw bytes."""
    with server.client(timeout=30) as runner, server.client(timeout=10) as other:
        runner.send_cmd("EVAL", body, "1", key)
        time.sleep(0.4)
        harness.wait_for(lambda: other.cmd("SCRIPT", "KILL") != ("-%s\r\n" % NOTBUSY).encode(), 10,
                         what="the script to be killable")
        return runner.read_reply(timeout=10)


def test_script_kill_ends_a_busy_read_only_script_as_redis(make_zkresp, redis_ref):
    z = make_zkresp(extra=("--script-time-limit", "20000"))
    body = "local n = 0 while true do n = n + 1 end -- %s" % harness.unique("kill")
    key = harness.unique("kk")
    with redis_ref.client() as r:
        old = r.call("CONFIG", "GET", "busy-reply-threshold")[1]
        r.call("CONFIG", "SET", "busy-reply-threshold", "100")
    try:
        want = _kill_busy(redis_ref, body, key)
    finally:
        with redis_ref.client() as r:
            r.call("CONFIG", "SET", "busy-reply-threshold", old)
    assert want == ("-ERR Script killed by user with SCRIPT KILL... script: %s, on @user_script:1.\r\n"
                    % sha(body)).encode()
    assert _kill_busy(z, body, key) == want
    with z.client() as c:
        assert c.cmd("SCRIPT", "KILL") == ("-%s\r\n" % NOTBUSY).encode()
        assert c.call("PING") == b"PONG"


def test_script_kill_of_a_script_that_wrote(make_zkresp, redis_ref):
    """Redis cannot undo a script's writes, so it refuses to kill one that
    wrote (UNKILLABLE); zkresp commits nothing before a script ends, so it
    kills it and nothing is written (README, design notes)."""
    z = make_zkresp(extra=("--script-time-limit", "20000"))
    key = harness.unique("kw")
    body = "redis.call('set', KEYS[1], 'v') local n = 0 for i = 1, 600000000 do n = n + 1 end return 'done'"
    with redis_ref.client() as r, redis_ref.client(timeout=10) as runner:
        old = r.call("CONFIG", "GET", "busy-reply-threshold")[1]
        r.call("CONFIG", "SET", "busy-reply-threshold", "100")
        try:
            runner.send_cmd("EVAL", body, "1", key)
            time.sleep(0.5)
            assert r.call("SCRIPT", "KILL") == Err(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. "
                "You can either wait the script termination or kill the server in a hard way "
                "using the SHUTDOWN NOSAVE command.")
            assert runner.read_value(timeout=30) == b"done"
        finally:
            r.call("CONFIG", "SET", "busy-reply-threshold", old)
    reply = _kill_busy(z, body, key)
    assert reply.startswith(b"-ERR Script killed by user with SCRIPT KILL..."), reply
    with z.client() as c:
        assert c.call("EXISTS", key) == 0


# ---------------------------------------------------------------- ZooKeeper away

def test_zookeeper_away(make_zk, make_zkresp):
    zk = make_zk()
    z = make_zkresp(zk)
    cached, new = ["return {'%s'}" % harness.unique(t) for t in ("away1", "away2")]
    with z.client(timeout=10) as c:
        assert c.call("SCRIPT", "LOAD", cached) == sha(cached).encode()
        zk.stop()
        harness.wait_for(lambda: b"zk_state:connected" not in c.call("INFO", "zookeeper"), 20,
                         what="the sidecar to lose ZooKeeper")
        # a locally cached script runs as EVAL does (it needs no key)
        assert c.call("EVALSHA", sha(cached), "0")[0].startswith(b"away1")
        assert c.call("EVAL", new, "0")[0].startswith(b"away2")
        assert c.call("SCRIPT", "LOAD", body_of("away3")) == Err("TRYAGAIN ZooKeeper unavailable")
        assert c.call("PING") == b"PONG"


@pytest.mark.parametrize("body", [
    "return redis.call('incr', KEYS[1])",     # writes: its read of the key comes after the FLUSH's event
    "return redis.call('exists', KEYS[1])",   # reads: it looks again when the FLUSH came in meanwhile
])
def test_evalsha_right_after_a_flush_elsewhere_answers_noscript(zkresp_pair, body):
    """No delay between the FLUSH's reply through one sidecar and the
    EVALSHA through the other, which had the script in its local cache."""
    a, b = zkresp_pair
    key = harness.unique("race")
    with a.client() as ca, b.client() as cb:
        for i in range(25):
            tagged = body + " -- %d" % i
            assert ca.call("SCRIPT", "LOAD", tagged) == sha(tagged).encode()
            assert not isinstance(cb.call("EVALSHA", sha(tagged), "1", key), Err)
            assert ca.call("SCRIPT", "FLUSH") == b"OK"
            assert cb.call("EVALSHA", sha(tagged), "1", key) == Err("NOSCRIPT No matching script. Please use EVAL.")
        if "incr" in body:
            assert ca.call("GET", key) == b"25"
