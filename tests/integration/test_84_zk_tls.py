"""Tier 84: TLS to ZooKeeper through a tunnel (issue 16).

Debian's libzookeeper_mt is built without TLS, so zkresp speaks plaintext to
a stunnel client beside it, and stunnel speaks TLS to the ensemble (README,
"TLS to ZooKeeper").  Here that set-up runs end to end:

  zkresp --zk 127.0.0.1:<tunnel> -> stunnel (client = yes, verifyChain,
  checkIP, client certificate) -> ZooKeeper's secureClientPort (Netty TLS,
  ssl.clientAuth=need), the certificates from docker/tls/make-certs.sh.

The ZooKeeper server has no plaintext client port at all, so every byte
zkresp exchanges with it went through the tunnel; the harness itself
inspects it over TLS (four-letter words, kazoo).  A tunnel that cannot
establish a trusted TLS session (wrong CA, wrong name, no client
certificate) and a zkresp pointed straight at the TLS port fail closed:
no lock command answers success, /readyz answers 503 and says why.
"""

import os
import subprocess
import time

import pytest

import harness
from harness import Stunnel, ZkServer, free_port

CREDS = "zkresp-app:s3cret-pw-84"


_http = harness.http_get


@pytest.fixture(scope="module")
def tls():
    # zkresp's tunnels and another application's certificate, same CA.
    return harness.make_tls_files(clients=("zkresp", "other-app"))


@pytest.fixture(scope="module")
def zk_tls(tls):
    """A ZooKeeper that speaks only TLS and requires a client certificate."""
    srv = ZkServer(tls=tls, client_auth="need", plaintext=False).start()
    yield srv
    srv.close()


@pytest.fixture
def make_tunnel(tls, zk_tls):
    made = []

    def make(**kw):
        t = Stunnel(kw.pop("target", zk_tls), kw.pop("tls", tls), **kw)
        made.append(t)
        return t.start()
    yield make
    for t in reversed(made):
        t.close()


def _with_metrics(make_zkresp, target, **kw):
    mport = free_port()
    z = make_zkresp(zk_target=target, extra=list(kw.pop("extra", [])) + ["--metrics-port", mport], **kw)
    z.mport = mport
    return z


def _fails_closed(z, seconds=6.0):
    """zkresp runs, answers PING, but never answers a lock command with
    success for `seconds`; /readyz is 503 throughout and says why."""
    z.wait_ready(timeout=20, connected=False)
    answers = []
    deadline = time.monotonic() + seconds
    with z.client(timeout=10) as c:
        while time.monotonic() < deadline:
            answers.append(c.cmd("SET", "lk", "tok", "NX", "PX", "60000"))
            answers.append(c.cmd("DELIFEQ", "lk", "tok"))
            status, body = _http(z.mport, "/readyz")
            assert status == 503, (status, body)
    assert answers and all(r.startswith(b"-TRYAGAIN ZooKeeper unavailable") for r in answers), answers[:4]
    assert z.zk_state() != "connected"
    status, body = _http(z.mport, "/readyz")
    assert status == 503 and "zookeeper session connecting" in body, (status, body)
    assert _http(z.mport, "/healthz")[0] == 200
    return body


# ------------------------------------------------------------------ the tunnel works

def test_the_server_speaks_only_tls(zk_tls, tls):
    # No plaintext client port was configured...
    with open(zk_tls.cfg) as f:
        cfg = f.read()
    assert "clientPort=" not in cfg.replace("secureClientPort=", "")
    assert "ssl.clientAuth=need" in cfg and harness.NETTY_FACTORY in cfg
    # ...and its TLS port answers over TLS only.
    assert zk_tls.four_letter("ruok") == "imok"
    assert harness.four_letter("127.0.0.1", zk_tls.secure_port, "ruok", 3) == ""


def test_locks_through_the_tunnel(zk_tls, make_tunnel, make_zkresp):
    tunnel = make_tunnel()
    a = _with_metrics(make_zkresp, tunnel.address)
    c = a.client()
    assert c.cmd("SET", "lock:a", "tok-1", "NX", "PX", "60000") == b"+OK\r\n"
    assert c.cmd("SET", "lock:a", "tok-2", "NX", "PX", "60000") == b"$-1\r\n"
    assert c.cmd("GET", "lock:a") == b"$5\r\ntok-1\r\n"
    assert c.cmd("DELIFEQ", "lock:a", "tok-2") == b":0\r\n"
    assert c.cmd("DELIFEQ", "lock:a", "tok-1") == b":1\r\n"
    assert c.cmd("SET", "lock:a", "tok-3", "NX", "PX", "60000") == b"+OK\r\n"
    pttl = int(c.cmd("PTTL", "lock:a")[1:-2])
    assert 0 < pttl <= 60000
    assert _http(a.mport, "/readyz") == (200, "ok\n")
    # The node is in the TLS-only ZooKeeper (inspected over TLS).
    kz = harness.kazoo_client(zk_tls)
    data, stat = harness.key_stat(kz, a.root, "lock:a")
    assert data is not None and b"tok-3" in data and stat.ephemeralOwner == a.session_id()
    # The tunnel did verify the server and negotiate TLS.
    log = tunnel.log().decode("utf-8", "replace")
    assert 'IP address "127.0.0.1" matched' in log and "TLS connected" in log, log[-2000:]


def test_two_sidecars_through_their_own_tunnels_share_a_lock(make_tunnel, make_zkresp):
    ta, tb = make_tunnel(), make_tunnel()
    a = make_zkresp(zk_target=ta.address)
    b = make_zkresp(zk_target=tb.address, root=a.root)
    ca, cb = a.client(), b.client()
    assert ca.cmd("SET", "lk", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"$-1\r\n"
    assert cb.cmd("GET", "lk") == b"$5\r\ntok-a\r\n"
    assert cb.cmd("DELIFEQ", "lk", "tok-a") == b":1\r\n"
    assert ca.cmd("GET", "lk") == b"$-1\r\n"
    assert cb.cmd("SET", "lk", "tok-b", "NX", "PX", "60000") == b"+OK\r\n"
    # a's sidecar dies: its ephemeral locks are gone with its session, which
    # b sees through its own tunnel.
    assert ca.cmd("SET", "lk2", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    a.kill9()
    harness.wait_for(lambda: cb.cmd("SET", "lk2", "tok-b", "NX", "PX", "60000") == b"+OK\r\n",
                     15, 0.1, "a's lock to expire with its session")


def test_the_tunnel_going_away_fails_closed_and_recovers(make_tunnel, make_zkresp, tls):
    tunnel = make_tunnel()
    a = _with_metrics(make_zkresp, tunnel.address, session_timeout=4000)
    c = a.client()
    assert c.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    tunnel.close()
    harness.wait_for(lambda: _http(a.mport, "/readyz")[0] == 503, 15, 0.05, "/readyz 503 without the tunnel")
    r = c.cmd("SET", "other", "x", "NX", "PX", "60000")
    assert r.startswith(b"-TRYAGAIN"), r
    # The tunnel back on the same port, within the session timeout: the
    # session survives and the lock is still ours.
    again = make_tunnel(port=tunnel.port)
    assert again.port == tunnel.port
    harness.wait_for(lambda: _http(a.mport, "/readyz")[0] == 200, 20, 0.05, "/readyz 200 with the tunnel back")
    assert c.cmd("DELIFEQ", "lk", "tok") == b":1\r\n"


def test_tls_and_acl_together(zk_tls, make_tunnel, make_zkresp):
    """Credentials (--zk-auth-file) over the tunnel.  ZooKeeper also
    authenticates the TLS connection by its client certificate
    (x509:CN=zkresp), and the creator ACL names every identity of the
    session: the digest credentials and the certificate.  So a client with
    another application's certificate and no credentials can do nothing,
    while the holder of zkresp's own certificate has its rights: a tunnel
    certificate is a credential, one per application (README)."""
    from kazoo.exceptions import NoAuthError
    tunnel = make_tunnel()
    a = make_zkresp(zk_target=tunnel.address, zk_auth=CREDS)
    assert a.client().cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    key = harness.keyenc.node_path(a.root, "lk")
    insider = harness.kazoo_client(zk_tls, auth=CREDS)
    acls, _ = insider.get_acls(key)
    ids = sorted((x.id.scheme, x.id.id, x.perms) for x in acls)
    assert [(s_, p) for s_, _, p in ids] == [("digest", 31), ("x509", 31)], ids
    assert [i for s_, i, _ in ids if s_ == "x509"] == ["CN=zkresp"], ids
    outsider = harness.kazoo_client(zk_tls, auth="", client_cert="other-app")
    for attempt in (lambda: outsider.get(key), lambda: outsider.get_children(a.root),
                    lambda: outsider.set(key, b"forged"), lambda: outsider.delete(key)):
        with pytest.raises(NoAuthError):
            attempt()
    same_cert = harness.kazoo_client(zk_tls, auth="", client_cert="zkresp")
    data, _ = same_cert.get(key)
    assert b"tok" in data


def test_the_health_check_of_the_manifests_works_over_tls(zk_tls, tls):
    """compose and Kubernetes check a TLS-only ZooKeeper with `zkServer.sh
    status` and these CLIENT_JVMFLAGS (the server's own keystore as client
    certificate, the truststore for the server's): it must find the secure
    port and report the mode."""
    flags = " ".join([
        "-Dzookeeper.client.secure=true",
        "-Dzookeeper.ssl.keyStore.location=%s" % tls.path("zk-keystore.p12"),
        "-Dzookeeper.ssl.keyStore.passwordPath=%s" % tls.path("zk-store.password"),
        "-Dzookeeper.ssl.trustStore.location=%s" % tls.path("zk-truststore.p12"),
        "-Dzookeeper.ssl.trustStore.passwordPath=%s" % tls.path("zk-store.password"),
    ])
    env = dict(os.environ, CLIENT_JVMFLAGS=flags, ZOO_LOG_DIR=zk_tls.dir)
    p = subprocess.run([harness.ZK_SERVER_SH, "status", zk_tls.cfg], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0 and "Client SSL: true" in out and "Mode: standalone" in out, out


# ------------------------------------------------------------------ failing closed

def test_plaintext_straight_to_the_tls_port_fails_closed(zk_tls, make_zkresp):
    z = _with_metrics(make_zkresp, zk_tls.secure_address, start=False)
    z.start(wait=False)
    _fails_closed(z)
    assert b"event=zk.client" in z.log()
    # kazoo without TLS does not get a session either.
    from kazoo.client import KazooClient
    kz = KazooClient(hosts=zk_tls.secure_address, timeout=2.0, connection_retry={"max_tries": 2})
    with pytest.raises(Exception):
        kz.start(timeout=3)
    kz.stop()
    kz.close()


@pytest.mark.parametrize("what", ["untrusted-ca", "wrong-name", "no-client-cert"])
def test_a_tunnel_that_cannot_trust_fails_closed(what, make_tunnel, make_zkresp, tls):
    if what == "untrusted-ca":
        # The tunnel trusts another CA: ZooKeeper's certificate is refused.
        other = harness.make_tls_files()
        tunnel = make_tunnel(ca=other.ca)
        expect = "certificate verify failed"
    elif what == "wrong-name":
        # Signed by the right CA, but not for the name the tunnel expects.
        tunnel = make_tunnel(check_host="zk.example.invalid")
        expect = "CERT: Subject checks failed"
    else:
        # ZooKeeper requires a client certificate (ssl.clientAuth=need).
        tunnel = make_tunnel(client_cert=False)
        expect = ""
    z = _with_metrics(make_zkresp, tunnel.address, start=False)
    z.start(wait=False)
    _fails_closed(z)
    log = tunnel.log().decode("utf-8", "replace")
    assert "TLS connected" not in log or what == "no-client-cert", log[-2000:]
    assert expect in log, log[-3000:]
    # zkresp's log says what it sees: the connection is reset, again and again.
    assert b"event=zk.client" in z.log() and b"failed while receiving a server response" in z.log()
