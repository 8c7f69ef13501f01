"""Tier 36: each example policy in scripts/examples/, loaded with --policy
by a zkresp on a real ZooKeeper, its effect shown through redis-py (and the
znodes through kazoo).

  tenants.lua     AUTH users and client names get their own namespaces
  ttl_caps.lua    a lock set without a TTL gets one; TTLs are clamped
  lock_delay.lua  a lock whose holder's sidecar died is held back for the
                  delay; a released one is free at once
  audit.lua       an audit file of acquisitions and releases
  lockinfo.lua    LOCKINFO: holder, TTL, fencing token (the czxid)
"""

import os
import threading
import time

import pytest
import redis

import harness

EXAMPLES = os.path.join(harness.SCRIPTS_DIR, "examples")


def example(name):
    return os.path.join(EXAMPLES, name + ".lua")


def test_tenants_namespaces(make_zkresp, kz):
    z = make_zkresp(extra=["--policy", example("tenants"), "--requirepass", "default-pw"])
    alice = z.redis(username="alice", password="alice-secret")
    bob = z.redis(username="bob", password="bob-secret")
    dflt = z.redis(password="default-pw")
    acme = z.redis(password="default-pw", client_name="tenant:acme")
    # One key name, four holders: none sees another's lock.
    for r, tok in ((alice, "a"), (bob, "b"), (dflt, "d"), (acme, "c")):
        assert r.set("lock:orders", tok, nx=True, px=30000), tok
    assert alice.get("lock:orders") == b"a"
    assert bob.get("lock:orders") == b"b"
    assert dflt.get("lock:orders") == b"d"
    assert acme.get("lock:orders") == b"c"
    assert kz.exists(z.root + "/t/alice/lock:orders")
    assert kz.exists(z.root + "/t/bob/lock:orders")
    assert kz.exists(z.root + "/t/acme/lock:orders")
    assert kz.exists(z.root + "/k/lock:orders")
    # redis-py's Lock, per tenant.
    la = alice.lock("job", timeout=10)
    lb = bob.lock("job", timeout=10)
    assert la.acquire(blocking=False) and lb.acquire(blocking=False)
    assert not alice.lock("job", timeout=10).acquire(blocking=False)
    la.release()
    lb.release()
    # Native locks are one namespace, kept apart by name: a tenant's start
    # with "<tenant>:", and no other tenant (nor the default keyspace) may
    # use an AUTH user's prefix.
    token = alice.execute_command("LOCK.ACQUIRE", "alice:orders", "o1", "PX", 30000)
    assert isinstance(token, int) and token > 0
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        alice.execute_command("LOCK.ACQUIRE", "orders", "o1")
    assert "tenant alice's lock names start with 'alice:'" in str(e.value)
    with pytest.raises(redis.exceptions.NoPermissionError):
        bob.execute_command("LOCK.RELEASE", "alice:orders", "o1")
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        dflt.execute_command("LOCK.ACQUIRE", "alice:orders", "o2", "WAIT", 0)
    assert "lock 'alice:orders' is tenant alice's" in str(e.value)
    assert isinstance(dflt.execute_command("LOCK.ACQUIRE", "orders", "o2"), int)
    assert isinstance(acme.execute_command("LOCK.ACQUIRE", "acme:orders", "o3"), int)
    # Tenants may not list keys or reload the policy; admin may.
    with pytest.raises(redis.exceptions.NoPermissionError):
        alice.keys("*")
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        alice.execute_command("POLICY", "RELOAD")
    assert "User alice has no permissions to run the 'policy' command" in str(e.value)
    admin = z.redis(username="admin", password="admin-secret")
    assert admin.execute_command("POLICY", "RELOAD") == b"OK"
    assert admin.keys("lock:*") == [b"lock:orders"]
    holders = admin.execute_command("LOCK.INFO", "alice:orders")[1]
    assert len(holders) == 1 and holders[0][:2] == [b"owner", b"o1"]
    assert alice.execute_command("LOCK.RELEASE", "alice:orders", "o1") == 1
    # A wrong password is Redis's WRONGPASS.
    with pytest.raises(redis.exceptions.ResponseError) as e:
        z.redis(username="alice", password="bob-secret").ping()
    assert str(e.value) == "WRONGPASS invalid username-password pair or user is disabled."


def test_ttl_caps(make_zkresp, kz):
    a = make_zkresp(extra=["--policy", example("ttl_caps")])
    r = a.redis()
    # The classic leak: SET NX without PX still gets a TTL, and an
    # ephemeral node.
    assert r.set("lock:leaky", "tok", nx=True)
    assert 29000 < r.pttl("lock:leaky") <= 30000
    _, stat = harness.key_stat(kz, a.root, "lock:leaky")
    assert stat.ephemeralOwner == a.session_id()
    # Clamps.
    r.set("lock:long", "tok", px=3600000)
    assert r.pttl("lock:long") <= 60000
    r.set("lease:short", "tok", px=10)
    assert r.pttl("lease:short") > 900
    r.set("anything", "v", ex=30 * 86400)
    assert r.ttl("anything") == 86400
    r.set("plain", "v")
    assert r.ttl("plain") == -1
    # redis-py's Lock without a timeout is a lock that cannot leak.
    lk = r.lock("lock:job")
    assert lk.acquire(blocking=False)
    assert 0 < r.pttl("lock:job") <= 30000
    lk.release()


def wait_gone(kz, path, timeout):
    harness.wait_for(lambda: not kz.exists(path), timeout, 0.01, "%s to vanish" % path)
    return time.monotonic()


def held_back(take, gone, delay_ms):
    """Tries take() until it succeeds, from the moment the holder was gone:
    refused for about the delay from the first try, no less."""
    first_try = None
    while True:
        got = take()
        now = time.monotonic()
        if first_try is None:
            first_try = now
        if got:
            break
        assert now - gone < 15, "never acquired after the holder vanished"
        time.sleep(0.05)
    waited = now - first_try
    assert waited >= delay_ms / 1000.0 - 0.3, "free again after %.2f s" % waited
    assert waited < delay_ms / 1000.0 + 3


def test_lock_delay(make_zkresp, kz):
    delay_ms = 3000
    env = harness.zkresp_env(ZKRESP_LOCK_DELAY_MS=str(delay_ms))
    a = make_zkresp(extra=["--policy", example("lock_delay")], env=env)
    b = make_zkresp(root=a.root, extra=["--policy", example("lock_delay")], env=env)
    ra, rb = a.redis(), b.redis()
    path = harness.keyenc.node_path(a.root, "lock:x")
    # Released: free at once.
    assert ra.set("lock:x", "t1", nx=True, px=30000)
    assert ra.execute_command("DELIFEQ", "lock:x", "t1") == 1
    assert rb.set("lock:x", "t2", nx=True, px=30000)
    assert rb.delete("lock:x") == 1
    # Expired by its TTL: free at once.
    assert ra.set("lock:x", "t3", nx=True, px=200)
    time.sleep(0.4)
    assert rb.set("lock:x", "t4", nx=True, px=30000)
    assert rb.delete("lock:x") == 1
    time.sleep(0.2)
    # The holder's sidecar dies: its session expires and the node goes, and
    # then nobody gets the lock for the delay.
    assert ra.set("lock:x", "t5", nx=True, px=30000)
    time.sleep(0.3)  # the marker is written in the background
    a.kill9()
    gone = wait_gone(kz, path, 15)
    held_back(lambda: rb.set("lock:x", "t6", nx=True, px=30000), gone, delay_ms)
    assert rb.get("lock:x") == b"t6"
    # After the delay all is normal again, and the new holder is covered:
    # its marker (written in the background) carries its fencing token.
    assert rb.delete("lock:x") == 1
    assert rb.set("lock:x", "t7", nx=True, px=30000)
    _, stat = harness.key_stat(kz, a.root, "lock:x")
    marker = a.root + "/ld/" + harness.keyenc.encode(path)
    harness.wait_for(lambda: kz.exists(marker) and kz.get(marker)[0] == str(stat.czxid).encode(),
                     10, what="the new holder's lock-delay marker")


def test_lock_delay_native(make_zkresp, kz):
    """lock_delay.lua on LOCK.*: a released lock is free at once; after its
    holder's sidecar is killed, a new request is refused (WAIT 0: null) for
    the delay, then granted; its marker goes with its release.  A request
    queued when its holder's sidecar is killed is granted only after the
    delay."""
    delay_ms = 3000
    env = harness.zkresp_env(ZKRESP_LOCK_DELAY_MS=str(delay_ms))
    a = make_zkresp(extra=["--policy", example("lock_delay")], env=env)
    b = make_zkresp(root=a.root, extra=["--policy", example("lock_delay")], env=env)
    ra, rb = a.redis(), b.redis()
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", "nx", "o1", "PX", 30000), int)
    time.sleep(0.3)  # the marker is written in the background
    assert ra.execute_command("LOCK.RELEASE", "nx", "o1") == 1
    time.sleep(0.3)
    assert isinstance(rb.execute_command("LOCK.ACQUIRE", "nx", "o2", "WAIT", 0), int)
    assert rb.execute_command("LOCK.RELEASE", "nx", "o2") == 1
    time.sleep(0.3)
    assert isinstance(ra.execute_command("LOCK.ACQUIRE", "nx", "o3", "PX", 30000), int)
    time.sleep(0.3)
    a.kill9()
    harness.wait_for(lambda: rb.execute_command("LOCK.INFO", "nx")[1] == [], 15, 0.01,
                     "the killed sidecar's hold to end")
    gone = time.monotonic()
    held_back(lambda: rb.execute_command("LOCK.ACQUIRE", "nx", "o4", "WAIT", 0) is not None, gone, delay_ms)
    assert rb.execute_command("LOCK.RELEASE", "nx", "o4") == 1
    harness.wait_for(lambda: kz.get_children(a.root + "/ld") == [], 10, what="no lock-delay marker left")

    # A request already queued when the holder vanishes waits out the delay
    # in its place.
    c = make_zkresp(root=a.root, extra=["--policy", example("lock_delay")], env=env)
    rc = c.redis(socket_timeout=30)
    assert isinstance(rc.execute_command("LOCK.ACQUIRE", "nq", "o5", "PX", 30000), int)
    time.sleep(0.3)
    out = {}
    waiter = threading.Thread(target=lambda: out.update(
        t=rb.execute_command("LOCK.ACQUIRE", "nq", "o6", "WAIT", 20000), at=time.monotonic()))
    waiter.start()
    harness.wait_for(lambda: len(rc.execute_command("LOCK.INFO", "nq")[3]) == 1, 10, what="o6 queued")
    c.kill9()
    harness.wait_for(lambda: all(h[1] != b"o5" for h in rb.execute_command("LOCK.INFO", "nq")[1]),
                     15, 0.01, "the killed sidecar's hold to end")
    gone = time.monotonic()
    waiter.join(25)
    assert isinstance(out.get("t"), int), out
    assert out["at"] - gone >= delay_ms / 1000.0 - 0.3, "granted %.2f s after the holder vanished" % (
        out["at"] - gone)
    assert out["at"] - gone < delay_ms / 1000.0 + 3
    assert rb.execute_command("LOCK.RELEASE", "nq", "o6") == 1


def test_audit_log(make_zkresp):
    d = harness.new_dir("audit")
    audit = os.path.join(d, "audit.log")
    z = make_zkresp(extra=["--policy", example("audit")],
                    env=harness.zkresp_env(ZKRESP_AUDIT_FILE=audit, ZKRESP_AUDIT_CHANNEL="audit"))
    sub = z.redis().pubsub()
    sub.subscribe("audit")
    assert sub.get_message(timeout=5)["type"] == "subscribe"
    r = z.redis(client_name="billing")
    lk = r.lock("lock:invoice", timeout=30)
    assert lk.acquire(blocking=False)
    token = lk.local.token.decode()
    lk.release()
    assert r.set("lock:short", "s", nx=True, px=100)
    harness.wait_for(lambda: os.path.exists(audit) and "event=expire" in open(audit).read(), 10,
                     what="the expiry in the audit file")
    lines = open(audit).read().splitlines()
    acq = [l for l in lines if "event=acquire key=lock:invoice" in l]
    rel = [l for l in lines if "event=release key=lock:invoice" in l]
    assert len(acq) == 1 and len(rel) == 1, lines
    assert "name=billing" in acq[0] and "user=default" in acq[0] and "addr=127.0.0.1:" in acq[0]
    assert ("token=" + token) in acq[0] and ("token=" + token) in rel[0]
    fence = acq[0].split("fence=")[1].split()[0]
    assert int(fence) > 0 and ("fence=" + fence) in rel[0]
    assert any("event=expire key=lock:short" in l for l in lines)
    # The same lines are in zkresp's log, and were published.
    assert "audit event=acquire key=lock:invoice" in z.log_tail(500)
    got = []
    harness.wait_for(lambda: (got.append(sub.get_message(timeout=0.2)) or
                              any(m and b"event=expire key=lock:short" in m["data"] for m in got)),
                     10, what="the published audit lines")
    published = [m["data"].decode() for m in got if m and m["type"] == "message"]
    assert published[0] == acq[0].split(" ", 1)[1], (published, acq)
    assert any("event=release key=lock:invoice" in p for p in published)
    sub.close()


def test_lockinfo(make_zkresp, kz):
    a = make_zkresp(extra=["--policy", example("lockinfo")])
    b = make_zkresp(root=a.root, extra=["--policy", example("lockinfo")])
    ra, rb = a.redis(), b.redis()
    assert ra.execute_command("LOCKINFO", "lock:x") is None
    assert ra.set("lock:x", "tok-1", nx=True, px=30000)
    _, stat = harness.key_stat(kz, a.root, "lock:x")

    def info(r):
        flat = r.execute_command("LOCKINFO", "lock:x")
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    m = info(rb)
    assert m["holder"] == b"tok-1"
    assert m["type"] == b"string"
    assert 25000 < m["pttl"] <= 30000
    assert m["fencing_token"] == stat.czxid
    assert m["owner_session"] == ("0x%x" % a.session_id()).encode()
    assert m["lifetime"] == b"ephemeral"
    assert m["local"] == 0 and info(ra)["local"] == 1
    # RESP3: a map.
    with a.client() as c:
        c.call("HELLO", "3")
        m3 = c.call("LOCKINFO", "lock:x")
    assert isinstance(m3, dict) and m3[b"fencing_token"] == stat.czxid, m3
    # The next holder's token is greater.
    assert ra.delete("lock:x") == 1
    assert rb.set("lock:x", "tok-2", nx=True, px=30000)
    assert info(ra)["fencing_token"] > stat.czxid
    with a.client() as c:
        assert c.call("COMMAND", "INFO", "lockinfo")[0][0] == b"lockinfo"
