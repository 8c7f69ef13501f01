"""Tier 83: ZooKeeper credentials and ACLs (issue 16, RELIABILITY 25, 32).

A sidecar given digest credentials (--zk-auth-file) authenticates every
session and creates every node (keys, session guards, pub/sub) with an ACL
that gives those credentials all rights and nobody else any (--zk-acl
creator).  A ZooKeeper client without them can neither read, set, delete
nor create under the root; sidecars with the same credentials share locks;
a sidecar that ZooKeeper refuses never answers as if a write worked: at
start it exits with status 2 and says why, later its commands fail closed
and /readyz says why.  The credentials never appear in INFO, /metrics or
the log.

Each test runs its own ZooKeeper (the digest provider is configured as the
issue asks; ZooKeeper also loads it by default) and its own root.
"""

import time

import pytest
import redis

import harness
from harness import free_port

CREDS = "zkresp-app:s3cret-pw-83"
OTHER = "zkresp-app:wrong-pw-83"


def _digest_id(creds):
    from kazoo.security import make_digest_acl_credential
    user, password = creds.split(":", 1)
    return make_digest_acl_credential(user, password)


_http = harness.http_get


@pytest.fixture
def zk_auth(make_zk):
    return make_zk()


def _sidecar(make_zkresp, zk, creds=CREDS, **kw):
    return make_zkresp(zk_target=zk, zk_auth=creds, **kw)


def test_every_node_carries_the_acl_and_outsiders_are_refused(zk_auth, make_zkresp):
    from kazoo.exceptions import NoAuthError
    a = _sidecar(make_zkresp, zk_auth)
    c = a.client()
    assert c.cmd("SET", "lock:a", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    assert c.cmd("SET", "plain", "v") == b"+OK\r\n"
    assert c.cmd("HSET", "h", "f", "1") == b":1\r\n"
    sub = a.client()
    assert sub.cmd("SUBSCRIBE", "redisson_lock__channel:{x}").startswith(b"*3")

    insider = harness.kazoo_client(zk_auth, auth=CREDS)
    expected = _digest_id(CREDS)
    # the root, <root>/k and the keys, the session guard, pub/sub's nodes
    paths = harness.all_paths(insider, a.root)
    assert len(paths) >= 6 and any("/g/" in p for p in paths) and any("/ps/" in p for p in paths), paths
    for p in paths:
        acls, _ = insider.get_acls(p)
        ids = [(acl.perms, acl.id.scheme, acl.id.id) for acl in acls]
        assert ids == [(31, "digest", expected)], "%s has ACL %r" % (p, ids)

    outsider = harness.kazoo_client(zk_auth, auth="")
    key = harness.keyenc.node_path(a.root, "lock:a")
    for attempt in (lambda: outsider.get(key),
                    lambda: outsider.get_children(a.root),
                    lambda: outsider.set(key, b"forged"),
                    lambda: outsider.delete(key),
                    lambda: outsider.create(a.root + "/k/forged", b"x")):
        with pytest.raises(NoAuthError):
            attempt()
    # Credentials of another user are no better.
    stranger = harness.kazoo_client(zk_auth, auth=OTHER)
    with pytest.raises(NoAuthError):
        stranger.delete(key)
    assert c.cmd("GET", "lock:a") == b"$3\r\ntok\r\n"


def test_sidecars_with_the_same_credentials_share_locks(zk_auth, make_zkresp):
    a = _sidecar(make_zkresp, zk_auth)
    b = _sidecar(make_zkresp, zk_auth, root=a.root)
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"$-1\r\n"
    assert cb.cmd("GET", "lk") == b"$5\r\ntok-a\r\n"
    # b writes a's node (a plain SET moves it to b's session).
    assert cb.cmd("SET", "lk", "tok-b", "PX", "60000") == b"+OK\r\n"
    assert ca.cmd("DELIFEQ", "lk", "tok-a") == b":0\r\n"
    assert ca.cmd("DELIFEQ", "lk", "tok-b") == b":1\r\n"
    assert cb.cmd("SET", "lk", "tok-b2", "NX", "PX", "60000") == b"+OK\r\n"


def test_wrong_credentials_exit_2_and_never_answer_ok(zk_auth, make_zkresp):
    a = _sidecar(make_zkresp, zk_auth)
    assert a.client().cmd("SET", "lk", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    b = _sidecar(make_zkresp, zk_auth, creds=OTHER, root=a.root, start=False)
    b.start(wait=False)
    answers = []
    deadline = time.monotonic() + 20
    while b.alive() and time.monotonic() < deadline:
        try:
            with b.client(timeout=3, connect_timeout=0.5) as c:
                answers.append(c.cmd("SET", "other", "x", "NX", "PX", "60000"))
        except Exception:  # noqa: BLE001 - not listening yet, or gone
            pass
        time.sleep(0.05)
    assert b.wait(10) == 2, "a sidecar ZooKeeper refuses kept running"
    assert not [r for r in answers if r.startswith(b"+OK")], answers
    log = b.log().decode("utf-8", "replace")
    assert "event=zkresp.fatal" in log and "refuses zkresp" in log and a.root in log, log[-2000:]
    assert "wrong-pw-83" not in log


def test_refused_at_run_time_fails_closed_and_readyz_says_why(zk_auth, make_zkresp):
    from kazoo.security import make_acl
    mport = free_port()
    a = _sidecar(make_zkresp, zk_auth, extra=["--metrics-port", mport])
    c = a.client()
    assert c.cmd("SET", "before", "v", "NX", "PX", "60000") == b"+OK\r\n"
    assert _http(mport, "/readyz") == (200, "ok\n")
    # An operator gives <root>/k to somebody else.
    admin = harness.kazoo_client(zk_auth, auth=CREDS)
    admin.set_acls(a.root + "/k", [make_acl("digest", _digest_id(OTHER), all=True)])
    r = c.cmd("SET", "after", "v", "NX", "PX", "60000")
    assert r.startswith(b"-ERR ZooKeeper denies zkresp access"), r
    status, body = _http(mport, "/readyz")
    assert status == 503 and "zookeeper denies access" in body and "NOAUTH" in body, (status, body)
    assert _http(mport, "/healthz")[0] == 200
    # The log says why, once (not per refused command).
    assert c.cmd("SET", "after2", "v", "NX", "PX", "60000").startswith(b"-ERR ZooKeeper denies")
    denied = [ln for ln in a.log().splitlines() if b"event=zk.access_denied" in ln]
    assert len(denied) == 1 and b"rc=NOAUTH" in denied[0] and (a.root + "/k").encode() in denied[0], denied
    # Given back: the next write works and the sidecar is ready again.
    other = harness.kazoo_client(zk_auth, auth=OTHER)
    other.set_acls(a.root + "/k", [make_acl("digest", _digest_id(CREDS), all=True)])
    assert c.cmd("SET", "after", "v", "NX", "PX", "60000") == b"+OK\r\n"
    assert _http(mport, "/readyz") == (200, "ok\n")
    assert b"event=zk.access_restored" in a.log()


def test_refused_native_lock_directory_says_so(zk_auth, make_zkresp):
    """<root>/l given to somebody else at run time: LOCK.ACQUIRE of a new
    lock fails closed with the refusal's own error (it answered -TRYAGAIN
    ZooKeeper unavailable after its tries), and works again once given back."""
    from kazoo.security import make_acl
    a = _sidecar(make_zkresp, zk_auth)
    r = a.redis()
    assert isinstance(r.execute_command("LOCK.ACQUIRE", "nl1", "me", "PX", "60000"), int)
    admin = harness.kazoo_client(zk_auth, auth=CREDS)
    admin.set_acls(a.root + "/l", [make_acl("digest", _digest_id(OTHER), all=True)])
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("LOCK.ACQUIRE", "nl2", "me", "PX", "60000")
    assert str(e.value).startswith("ZooKeeper denies zkresp access"), e.value
    other = harness.kazoo_client(zk_auth, auth=OTHER)
    other.set_acls(a.root + "/l", [make_acl("digest", _digest_id(CREDS), all=True)])
    assert isinstance(r.execute_command("LOCK.ACQUIRE", "nl2", "me", "PX", "60000"), int)


def test_a_root_others_may_write_is_a_warning(zk_auth, make_zkresp):
    root = "/" + harness.unique("open")
    outsider = harness.kazoo_client(zk_auth, auth="")
    outsider.create(root, b"")
    a = _sidecar(make_zkresp, zk_auth, root=root)
    assert a.client().cmd("SET", "lk", "t", "NX", "PX", "60000") == b"+OK\r\n"
    harness.wait_for(lambda: b"lets anyone change it" in a.log(), 5, 0.05, "the open root's warning")


def test_a_root_another_identity_may_write_is_a_warning(zk_auth, make_zkresp):
    """Not only world:anyone: a root whose ACL lets another digest user (or
    an ip) change it is named in a warning; one of our credentials alone
    is not."""
    from kazoo.security import make_acl
    admin = harness.kazoo_client(zk_auth, auth=CREDS)
    shared = "/" + harness.unique("shared")
    admin.create(shared, b"", acl=[make_acl("digest", _digest_id(CREDS), all=True),
                                   make_acl("digest", _digest_id(OTHER), all=True)])
    a = _sidecar(make_zkresp, zk_auth, root=shared)
    assert a.client().cmd("SET", "lk", "t", "NX", "PX", "60000") == b"+OK\r\n"
    harness.wait_for(lambda: b"lets others change it (ACL digest:" + _digest_id(OTHER).encode() in a.log(),
                     5, 0.05, "the shared root's warning")
    private = "/" + harness.unique("private")
    admin.create(private, b"", acl=[make_acl("digest", _digest_id(CREDS), all=True)])
    b = _sidecar(make_zkresp, zk_auth, root=private)
    assert b.client().cmd("SET", "lk", "t", "NX", "PX", "60000") == b"+OK\r\n"
    assert b"change it" not in b.log()


def test_credentials_never_shown(zk_auth, make_zkresp, tmp_path):
    mport = free_port()
    a = _sidecar(make_zkresp, zk_auth, extra=["--metrics-port", mport, "--log-level", "debug"])
    c = a.client()
    assert c.cmd("SET", "lk", "t", "NX", "PX", "60000") == b"+OK\r\n"
    secret = CREDS.split(":", 1)[1].encode()
    assert secret not in c.cmd("INFO", "everything")
    assert secret not in c.cmd("CONFIG", "GET", "*")
    assert secret.decode() not in _http(mport, "/metrics")[1]
    assert secret not in a.log()


@pytest.mark.parametrize("content", ["", "no-colon-here\n", ":nouser\n", "user:\n", "a:b\nc:d\n"])
def test_a_bad_credentials_file_is_exit_2(content, tmp_path, zk_auth):
    path = tmp_path / "creds"
    path.write_text(content)
    z = harness.Zkresp(zk_auth, zk_auth="", extra=["--zk-auth-file", str(path)])
    z.start(wait=False)
    assert z.wait(10) == 2
    out = z.log().decode("utf-8", "replace")
    assert "expected one line user:password" in out, out
    for secret in ("no-colon-here", "nouser", "c:d"):
        if secret in content:
            assert secret not in out


def test_creator_acl_needs_credentials(zk_auth):
    z = harness.Zkresp(zk_auth, zk_auth="", extra=["--zk-acl", "creator"])
    z.start(wait=False)
    assert z.wait(10) == 2
    assert b"--zk-acl creator needs ZooKeeper credentials" in z.log()


def test_open_acl_with_credentials_is_world_readable(zk_auth, make_zkresp):
    a = _sidecar(make_zkresp, zk_auth, extra=["--zk-acl", "open"])
    assert a.client().cmd("SET", "lk", "t", "NX", "PX", "60000") == b"+OK\r\n"
    outsider = harness.kazoo_client(zk_auth, auth="")
    data, _ = outsider.get(harness.keyenc.node_path(a.root, "lk"))
    assert b"t" in data
