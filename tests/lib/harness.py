"""Processes for the integration and fault suites: ZooKeeper, redis-server,
zkresp, each on a free loopback port in a temp dir, always stopped.

Every process is started in its own session (process group) and registered;
it is stopped by killing that group, by PID, on every exit path: fixture
finalizers, atexit, and SIGTERM/SIGHUP/SIGINT handlers.  Nothing is ever
killed by name.

Also re-exported here: RawClient and friends (resp.py), ZkProxy (zkproxy.py),
LockHistory (history.py), the key encoding (keyenc.py).
"""

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from resp import RawClient, ConnectionClosed, encode, decode_one, Err, Push, parse_info  # noqa: F401
from zkproxy import ZkProxy, WRITE_OPS, CREATE_OPS, DELETE_OPS  # noqa: F401
from history import LockHistory  # noqa: F401
import keyenc  # noqa: F401

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ZK_SERVER_SH = "/usr/share/zookeeper/bin/zkServer.sh"
SCRIPTS_DIR = os.environ.get("ZKRESP_TEST_SCRIPTS", os.path.join(REPO, "scripts"))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
STUNNEL = shutil.which("stunnel4") or shutil.which("stunnel") or "/usr/bin/stunnel4"
MAKE_CERTS = os.path.join(REPO, "docker", "tls", "make-certs.sh")
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"   # zkEnv.sh's
NETTY_CODEC_JAR = "/usr/share/java/netty-codec.jar"

SANITIZER_RE = re.compile(rb"ERROR: \w*Sanitizer|runtime error:|SUMMARY: \w*Sanitizer")

# ZKRESP_TEST_ZK_AUTH=user:password runs the suites with ZooKeeper
# credentials: every ZooKeeper server gets the digest provider, every zkresp
# the credentials (--zk-auth-file, so its nodes carry the creator-only ACL),
# every inspecting kazoo client too (tests/run.sh does that for one pass).
TEST_ZK_AUTH = os.environ.get("ZKRESP_TEST_ZK_AUTH") or None
DIGEST_PROVIDER = "authProvider.1=org.apache.zookeeper.server.auth.DigestAuthenticationProvider"


def zoo_cfg_common(min_session, max_session):
    """The zoo.cfg lines every test server has (standalone or in an
    ensemble): no admin server, every four-letter word, the session bounds,
    no fsync, no connection cap, no purge, the digest provider."""
    return ["admin.enableServer=false", "4lw.commands.whitelist=*",
            "minSessionTimeout=%d" % min_session, "maxSessionTimeout=%d" % max_session,
            "forceSync=no", "maxClientCnxns=0", "autopurge.purgeInterval=0", DIGEST_PROVIDER]


def zkresp_bin():
    b = os.environ.get("ZKRESP_BIN", "build/zkresp")
    return b if os.path.isabs(b) else os.path.join(REPO, b)


# --------------------------------------------------------------------------
# temp dirs, ports, process registry, cleanup

_lock = threading.RLock()
_procs = []          # every Proc ever started, in order
_closers = []        # other things to close at exit (proxies, kazoo clients)
_base_tmp = None
_ports_given = set()


def base_tmp():
    global _base_tmp
    with _lock:
        if _base_tmp is None:
            _base_tmp = tempfile.mkdtemp(prefix="zkresp-tests-")
        return _base_tmp


def new_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix + "-", dir=base_tmp())


def free_port():
    """A loopback port that is free now, below the kernel's ephemeral range
    (so outgoing connections cannot take it meanwhile) and never handed out
    twice in this process."""
    for _ in range(1000):
        p = random.randint(20000, 32000)
        if p in _ports_given:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            s.close()
        with _lock:
            _ports_given.add(p)
        return p
    raise RuntimeError("no free port")


def unique(prefix="t"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


def register_closer(fn):
    with _lock:
        _closers.append(fn)


def cleanup_all():
    """Kills every process still running that this process started and runs
    the registered closers.  Safe to call more than once."""
    with _lock:
        procs = list(_procs)
        closers = list(_closers)
        _closers.clear()
    for p in reversed(procs):
        try:
            p.kill_hard()
        except Exception:
            pass
    for fn in reversed(closers):
        try:
            fn()
        except Exception:
            pass


def _remove_tmp():
    if _base_tmp and not os.environ.get("ZKRESP_KEEP_TMP"):
        shutil.rmtree(_base_tmp, ignore_errors=True)


def _at_exit():
    cleanup_all()
    _remove_tmp()


atexit.register(_at_exit)


def _on_signal(signum, frame):
    cleanup_all()
    _remove_tmp()
    os._exit(128 + signum)


def install_signal_handlers():
    if threading.current_thread() is not threading.main_thread():
        return
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


install_signal_handlers()


class Proc:
    """A child process in its own process group, output to a file."""

    def __init__(self, name, argv, workdir, env=None, log_path=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.workdir = workdir
        self.env = env
        self.log_path = log_path or os.path.join(workdir, name + ".log")
        self.popen = None
        self.returncode = None

    def start(self):
        shown = list(self.argv)
        for i, a in enumerate(shown[:-1]):
            if a == "--requirepass":
                shown[i + 1] = "<redacted>"
        with open(self.log_path, "ab") as log:
            log.write(b"\n=== start %s: %s\n" % (time.strftime("%H:%M:%S").encode(),
                                                 " ".join(shown).encode()))
            log.flush()
            self.popen = subprocess.Popen(self.argv, cwd=self.workdir, env=self.env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          start_new_session=True)
        self.returncode = None
        with _lock:
            if self not in _procs:
                _procs.append(self)
        return self

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig):
        """Signals our process group; only while our child is unreaped, so
        the group id cannot belong to anyone else."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout=None):
        """Waits for exit; returns the exit status (negative: signal), or
        raises subprocess.TimeoutExpired."""
        if self.popen is None:
            return None
        self.returncode = self.popen.wait(timeout)
        return self.returncode

    def kill_hard(self):
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            try:
                self.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def kill9(self):
        self.signal(signal.SIGKILL)
        return self.wait(10)

    def term(self, timeout=10.0):
        """SIGTERM, then SIGKILL if it is still running after timeout.
        Returns the exit status."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_hard()
            raise AssertionError("%s did not exit within %.1fs of SIGTERM" % (self.name, timeout))

    def sigstop(self):
        self.signal(signal.SIGSTOP)

    def sigcont(self):
        self.signal(signal.SIGCONT)

    def output(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""


class Fatal(AssertionError):
    """Raised by a polled predicate to stop waiting at once."""


def wait_for(pred, timeout, interval=0.02, what="condition"):
    """Polls pred() until it returns a true value (returned) or timeout.
    Exceptions from pred() count as "not yet", except Fatal."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Fatal:
            raise
        except Exception as e:  # noqa: BLE001 - polled predicates may fail while starting
            last_exc = e
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s%s" % (
                timeout, what, " (last error: %r)" % last_exc if last_exc else ""))
        time.sleep(interval)


# --------------------------------------------------------------------------
# ZooKeeper


def http(port, path="/", method="GET", raw=None, timeout=5.0):
    """One HTTP/1.1 exchange on a fresh connection; returns (status, headers
    as a lowercase dict, body bytes).  The server closes after answering."""
    req = raw if raw is not None else (
        "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % (method, path)).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(req)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    assert int(headers["content-length"]) == len(body), "Content-Length disagrees with the body"
    return status, headers, body


def http_get(port, path):
    """GET path on the metrics port: (status, body as text)."""
    status, _, body = http(port, path)
    return status, body.decode()


def four_letter(host, port, cmd, timeout=2.0):
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(cmd.encode())
        chunks = []
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                break
            if not c:
                break
            chunks.append(c)
    return b"".join(chunks).decode("utf-8", "replace")


def four_letter_tls(host, port, cmd, tls, timeout=2.0):
    """A four-letter word over TLS, with the tunnels' client certificate
    (ZooKeeper may require one) and the server's name checked."""
    import ssl
    ctx = tls.client_context()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                try:
                    c = s.recv(65536)
                except (socket.timeout, ssl.SSLError):
                    break
                if not c:
                    break
                chunks.append(c)
    return b"".join(chunks).decode("utf-8", "replace")


# --------------------------------------------------------------------------
# TLS: certificates (docker/tls/make-certs.sh) and stunnel tunnels


class TlsFiles:
    """The output of docker/tls/make-certs.sh in a temp dir: a throwaway CA,
    ZooKeeper's PKCS12 keystore and truststore, the tunnels' client
    certificate and key."""

    def __init__(self, hosts=(), clients=("zkresp",), existing=None):
        if existing:
            # Files made elsewhere (by the same script), named as it names them.
            self.dir, self.output = existing, ""
            return
        self.dir = new_dir("tls")
        env = dict(os.environ, ZK_TLS_CLIENTS=" ".join(clients))
        p = subprocess.run([MAKE_CERTS, self.dir] + list(hosts), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120, env=env)
        if p.returncode != 0:
            raise AssertionError("make-certs.sh failed: %s" % p.stdout.decode(errors="replace"))
        self.output = p.stdout.decode(errors="replace")

    def path(self, name):
        return os.path.join(self.dir, name)

    @property
    def ca(self):
        return self.path("ca.pem")

    @property
    def client_cert(self):
        return self.path("zkresp-client.pem")

    @property
    def client_key(self):
        return self.path("zkresp-client.key")

    def zoo_cfg(self, secure_port, client_auth="need"):
        """zoo.cfg lines for a server that listens with TLS on secure_port."""
        return [
            "serverCnxnFactory=%s" % NETTY_FACTORY,
            "secureClientPort=%d" % secure_port,
            "secureClientPortAddress=127.0.0.1",
            "ssl.keyStore.location=%s" % self.path("zk-keystore.p12"),
            "ssl.keyStore.passwordPath=%s" % self.path("zk-store.password"),
            "ssl.trustStore.location=%s" % self.path("zk-truststore.p12"),
            "ssl.trustStore.passwordPath=%s" % self.path("zk-store.password"),
            "ssl.clientAuth=%s" % client_auth,
        ]

    def client_context(self):
        import ssl
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def make_tls_files(hosts=(), clients=("zkresp",)):
    return TlsFiles(hosts, clients)


class Stunnel:
    """A stunnel client in the foreground: plaintext on 127.0.0.1:port,
    TLS to target (a ZkServer's secure port or "host:port"), the server's
    certificate checked against ca (default: tls's CA) and its name
    (check_host or, by default, check_ip 127.0.0.1); the client certificate
    and key of tls unless client_cert=False.  Started and stopped by PID like
    every other process here."""

    def __init__(self, target, tls, ca=None, check_host=None, check_ip="127.0.0.1",
                 client_cert=True, port=None):
        self.dir = new_dir("stunnel")
        self.port = port or free_port()
        self.target = target if isinstance(target, str) else target.secure_address
        self.conf = os.path.join(self.dir, "stunnel.conf")
        lines = [
            "foreground = yes",
            "pid =",
            "debug = info",
            "[zookeeper]",
            "client = yes",
            "accept = 127.0.0.1:%d" % self.port,
            "connect = %s" % self.target,
            "sslVersionMin = TLSv1.2",
            "verifyChain = yes",
            "CAfile = %s" % (ca or tls.ca),
        ]
        if check_host:
            lines.append("checkHost = %s" % check_host)
        elif check_ip:
            lines.append("checkIP = %s" % check_ip)
        if client_cert:
            lines += ["cert = %s" % tls.client_cert, "key = %s" % tls.client_key]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines + [""]))
        self.proc = Proc("stunnel", [STUNNEL, self.conf], self.dir)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=20):
        if not os.access(STUNNEL, os.X_OK):
            raise AssertionError("stunnel not found (Debian package stunnel4; `make deps` installs it)")
        self.proc.start()

        def listening():
            if not self.proc.alive():
                raise Fatal("stunnel exited: %s" % self.proc.output()[-2000:].decode("utf-8", "replace"))
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        wait_for(listening, timeout, 0.05, "stunnel on port %d" % self.port)
        return self

    def log(self):
        return self.proc.output()

    def close(self):
        if self.proc.alive():
            try:
                self.proc.term(10)
            except AssertionError:
                pass


class ZkServer:
    """One standalone ZooKeeper server with its own dataDir and port.
    restart() keeps the dataDir and the port.

    tls: a TlsFiles (make_tls_files()): the server also listens on
    secure_port with Netty's TLS (keystore, truststore, ssl.clientAuth =
    client_auth: none, want or need).  plaintext=False leaves out the
    plaintext clientPort altogether: then only TLS clients reach it, and the
    harness's own four-letter words and kazoo clients use TLS too (with the
    tunnels' client certificate).  jvm_flags: extra JVM options of the
    server (system properties such as -Djute.maxbuffer=N)."""

    def __init__(self, tick=200, min_session=400, max_session=60000, port=None,
                 tls=None, client_auth="need", plaintext=True, secure_port=None, tls_cfg=None,
                 jvm_flags=""):
        if not plaintext and tls is None:
            raise ValueError("a ZooKeeper without a plaintext port needs tls")
        self.dir = new_dir("zk")
        self.tls = tls
        self.port = (port or free_port()) if plaintext else None
        self.secure_port = (secure_port or free_port()) if tls else None
        self.cfg = os.path.join(self.dir, "zoo.cfg")
        lines = [
            "tickTime=%d" % tick,
            "initLimit=10",
            "syncLimit=5",
            "dataDir=%s" % os.path.join(self.dir, "data"),
        ] + zoo_cfg_common(min_session, max_session)
        if plaintext:
            lines += ["clientPort=%d" % self.port, "clientPortAddress=127.0.0.1"]
        if tls:
            # tls_cfg: the TLS lines to use instead of the harness's own
            # (a manifest's settings, with their ports and paths local).
            lines += tls_cfg if tls_cfg is not None else tls.zoo_cfg(self.secure_port, client_auth)
        with open(self.cfg, "w") as f:
            f.write("\n".join(lines + [""]))
        env = dict(os.environ)
        flags = "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
        if tls:
            # Debian's zookeeper 3.8.0 lists netty-handler in its jar's
            # Class-Path but not netty-codec, which Netty's SslHandler needs:
            # without it every TLS connection fails (NoClassDefFoundError
            # ByteToMessageDecoder).  zkServer.sh puts $SERVER_JVMFLAGS after
            # its own -cp, and the java launcher takes the last one.
            flags += " -cp %s:%s" % (ZK_CLASSPATH, NETTY_CODEC_JAR)
        if jvm_flags:
            flags += " " + jvm_flags
        env.update({"SERVER_JVMFLAGS": flags,
                    "JMXDISABLE": "true", "ZOO_LOG_DIR": self.dir, "ZOOPIDFILE":
                    os.path.join(self.dir, "zk.pid")})
        self.proc = Proc("zookeeper", [ZK_SERVER_SH, "start-foreground", self.cfg],
                         self.dir, env=env)

    @property
    def address(self):
        if self.port is None:
            raise AssertionError("this ZooKeeper speaks only TLS: connect through a Stunnel")
        return "127.0.0.1:%d" % self.port

    @property
    def secure_address(self):
        return "127.0.0.1:%d" % self.secure_port

    def start(self, timeout=60):
        self.proc.start()
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout=60):
        def serving():
            if not self.proc.alive():
                raise Fatal("ZooKeeper exited: %s" % self.proc.output()[-2000:].decode("utf-8", "replace"))
            if self.four_letter("ruok", 0.5) != "imok":
                return False
            return "Mode:" in self.four_letter("srvr", 0.5)
        wait_for(serving, timeout, 0.05, "ZooKeeper on port %d to serve" % (self.port or self.secure_port))

    def four_letter(self, cmd, timeout=2.0):
        try:
            if self.port is None:
                return four_letter_tls("127.0.0.1", self.secure_port, cmd, self.tls, timeout)
            return four_letter("127.0.0.1", self.port, cmd, timeout)
        except OSError:
            return ""

    def mntr(self):
        out = {}
        for line in self.four_letter("mntr").splitlines():
            if "\t" in line:
                k, v = line.split("\t", 1)
                try:
                    out[k] = int(v)
                except ValueError:
                    out[k] = v
        return out

    def stop(self):
        """SIGTERM (orderly shutdown)."""
        if self.proc.alive():
            self.proc.term(20)

    def kill9(self):
        self.proc.kill9()

    def sigstop(self):
        self.proc.sigstop()

    def sigcont(self):
        self.proc.sigcont()

    def restart(self, timeout=60):
        self.stop()
        return self.start(timeout)

    def close(self):
        self.proc.kill_hard()


# --------------------------------------------------------------------------
# redis-server


class RedisServer:
    def __init__(self, *extra, port=None):
        self.dir = new_dir("redis")
        self.port = port or free_port()
        self.extra = [str(e) for e in extra]
        self.proc = Proc("redis-server", [REDIS_SERVER, "--port", self.port, "--bind", "127.0.0.1",
                                          "--save", "", "--appendonly", "no", "--dir", self.dir,
                                          "--daemonize", "no", "--protected-mode", "no",
                                          "--logfile", ""] + self.extra, self.dir)

    def start(self, timeout=20):
        self.proc.start()

        def up():
            if not self.proc.alive():
                raise Fatal("redis-server exited: %s" % self.proc.output()[-2000:].decode())
            with RawClient(self.port, timeout=1) as c:
                r = c.cmd("PING")
                return r == b"+PONG\r\n" or r.startswith(b"-NOAUTH")
        wait_for(up, timeout, 0.05, "redis-server on port %d" % self.port)
        return self

    def client(self, **kw):
        return RawClient(self.port, **kw)

    def close(self):
        self.proc.kill_hard()


# --------------------------------------------------------------------------
# zkresp

ALL_ZKRESPS = []     # every Zkresp created, for failure reports and sanitizer scans


def _zk_address(zk):
    if isinstance(zk, str):
        return zk
    return zk.address


class Zkresp:
    """One zkresp process.  zk: a ZkServer, a ZkProxy or a connect string.

    Started as: zkresp --port P --zk ADDR --root ROOT --session-timeout MS
    --zk-request-timeout MS --log-level debug [extra...], stderr (and
    stdout) to a file in its own temp dir."""

    def __init__(self, zk, root=None, session_timeout=2000, request_timeout=1000,
                 extra=(), port=None, env=None, log_level="debug", zk_auth=None):
        self.zk = zk
        self.root = root or "/" + unique("t")
        self.port = port or free_port()
        self.session_timeout = session_timeout
        self.request_timeout = request_timeout
        self.extra = [str(e) for e in extra]
        self.dir = new_dir("zkresp")
        self.bin = zkresp_bin()
        if env is None:
            env = zkresp_env()
        self.env = dict(env)
        self.log_level = log_level
        # ZooKeeper credentials (user:password; default the suite's, "" for
        # none): written to a file in its dir, passed as --zk-auth-file.
        self.zk_auth = TEST_ZK_AUTH if zk_auth is None else zk_auth
        if self.zk_auth and "--zk-auth-file" not in self.extra:
            path = os.path.join(self.dir, "zk-auth")
            with open(path, "w") as f:
                f.write(self.zk_auth + "\n")
            os.chmod(path, 0o600)
            self.extra += ["--zk-auth-file", path]
        self.fake = bool(os.environ.get("ZKRESP_FAKE_REDIS"))
        self.starts = 0
        self.scan_offset = 0
        self.proc = None
        self.password = None
        if "--requirepass" in self.extra:
            self.password = self.extra[self.extra.index("--requirepass") + 1]
        ALL_ZKRESPS.append(self)

    def argv(self):
        if self.fake:
            # Development only: a redis-server standing in for zkresp so that
            # the harness and the differential machinery can be exercised
            # before the daemon exists.  Never used by tests/run.sh.
            a = [REDIS_SERVER, "--port", self.port, "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--databases", "1"]
            it = iter(self.extra)
            for opt in it:
                if opt in ("--requirepass", "--maxclients", "--timeout"):
                    a += [opt, next(it)]
            return a
        return [self.bin, "--port", self.port, "--zk", _zk_address(self.zk), "--root", self.root,
                "--session-timeout", self.session_timeout,
                "--zk-request-timeout", self.request_timeout,
                "--log-level", self.log_level, "--scripts", SCRIPTS_DIR] + self.extra

    @property
    def log_path(self):
        return os.path.join(self.dir, "zkresp.log")

    def start(self, wait=True, timeout=20):
        if not self.fake and not os.access(self.bin, os.X_OK):
            raise AssertionError("zkresp binary %s is missing or not executable (set ZKRESP_BIN)" % self.bin)
        self.proc = Proc("zkresp", self.argv(), self.dir, env=self.env, log_path=self.log_path)
        self.proc.start()
        self.starts += 1
        if wait:
            self.wait_ready(timeout)
        return self

    def restart(self, wait=True, timeout=20):
        """Starts it again with the same port and root (after it exited)."""
        if self.proc and self.proc.alive():
            raise AssertionError("restart of a running zkresp")
        return self.start(wait, timeout)

    def wait_ready(self, timeout=20, connected=True):
        """Until it answers PING and INFO zookeeper says zk_state:connected."""
        def ready():
            if not self.proc.alive():
                raise Fatal("zkresp exited with status %s before becoming ready" % self.proc.popen.returncode)
            with RawClient(self.port, timeout=2, connect_timeout=0.5) as c:
                if self.password is not None and c.cmd("AUTH", self.password) != b"+OK\r\n":
                    return False
                if c.cmd("PING") != b"+PONG\r\n":
                    return False
                if self.fake or not connected:
                    return True
                info = c.call("INFO", "zookeeper")
                return isinstance(info, bytes) and b"zk_state:connected" in info
        try:
            wait_for(ready, timeout, 0.05, "zkresp on port %d to be ready" % self.port)
        except AssertionError as e:
            raise AssertionError("%s\n--- zkresp log tail:\n%s" % (e, self.log_tail(60)))

    # -- clients
    def client(self, **kw):
        return RawClient(self.port, **kw)

    def redis(self, **kw):
        import redis
        kw.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def admin(self, **kw):
        """A RawClient, authenticated when a password is configured."""
        c = RawClient(self.port, **kw)
        if self.password is not None:
            r = c.cmd("AUTH", self.password)
            if r != b"+OK\r\n":
                raise AssertionError("AUTH answered %r" % r)
        return c

    def info(self, section=None):
        with self.admin() as c:
            return parse_info(c.call("INFO", section) if section else c.call("INFO"))

    def session_id(self):
        """The ZooKeeper session id from INFO zookeeper (an int)."""
        v = self.info("zookeeper").get("zk_session_id")
        if v is None:
            raise AssertionError("INFO zookeeper has no zk_session_id")
        return int(v, 16) if v.lower().startswith("0x") else int(v)

    def zk_state(self):
        return self.info("zookeeper").get("zk_state")

    # -- signals
    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.alive()

    def kill9(self):
        return self.proc.kill9()

    def term(self, timeout=15):
        return self.proc.term(timeout)

    def stop(self):
        self.proc.sigstop()

    def cont(self):
        self.proc.sigcont()

    def wait(self, timeout=None):
        return self.proc.wait(timeout)

    def close(self):
        """Orderly stop (SIGTERM so that sanitizers report at exit), then a
        hard kill if it hangs."""
        if self.proc and self.proc.alive():
            try:
                self.proc.term(15)
            except AssertionError:
                pass

    # -- logs
    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def log_tail(self, lines=200):
        data = self.log().splitlines()[-lines:]
        return b"\n".join(data).decode("utf-8", "replace")

    def rss_kb(self):
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def new_sanitizer_reports(self):
        """Sanitizer report lines that appeared in the log since the last
        call."""
        data = self.log()
        new = data[self.scan_offset:]
        self.scan_offset = len(data)
        if not SANITIZER_RE.search(new):
            return None
        lines = new.splitlines()
        idx = [i for i, l in enumerate(lines) if SANITIZER_RE.search(l)]
        first = max(0, idx[0] - 2)
        return b"\n".join(lines[first:first + 60]).decode("utf-8", "replace")


# --------------------------------------------------------------------------
# ZooKeeper inspection


def kazoo_client(zk, timeout=15.0, auth=None, client_cert="zkresp"):
    """A started kazoo client on zk (ZkServer, ZkProxy or address), stopped
    at exit.  auth: digest credentials "user:password" (default: the suite's,
    ZKRESP_TEST_ZK_AUTH; "" for none).  On a TLS-only ZkServer it speaks TLS
    with the client certificate client_cert (a name of make_tls_files'
    clients)."""
    import logging
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    from kazoo.client import KazooClient
    auth = TEST_ZK_AUTH if auth is None else auth
    kw = {}
    if isinstance(zk, ZkServer) and zk.port is None:
        # A TLS-only server: kazoo speaks TLS itself, with the tunnels'
        # client certificate.
        kw = dict(use_ssl=True, verify_certs=True, ca=zk.tls.ca,
                  certfile=zk.tls.path(client_cert + "-client.pem"),
                  keyfile=zk.tls.path(client_cert + "-client.key"))
        hosts = zk.secure_address
    else:
        hosts = _zk_address(zk)
    kz = KazooClient(hosts=hosts, timeout=10.0,
                     connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
                     auth_data=[("digest", auth)] if auth else None, **kw)
    kz.start(timeout=timeout)

    def close():
        try:
            kz.stop()
            kz.close()
        except Exception:
            pass
    register_closer(close)
    kz.close_quietly = close
    return kz


def all_paths(kz, path="/"):
    """Every znode path under path (inclusive), depth first."""
    out = [path]
    try:
        children = kz.get_children(path)
    except Exception:
        return out
    for c in sorted(children):
        p = (path.rstrip("/") + "/" + c)
        out.extend(all_paths(kz, p))
    return out


def key_stat(kz, root, key):
    """(data, stat) of a key's znode, or (None, None)."""
    from kazoo.exceptions import NoNodeError
    try:
        return kz.get(keyenc.node_path(root, key))
    except NoNodeError:
        return None, None


def is_sanitizer_build():
    return "asan" in os.path.basename(zkresp_bin())


def zkresp_env(**extra):
    """The environment zkresp runs with: the harness's own ZKRESP_*
    variables (ZKRESP_BIN...) are not zkresp options; zkresp gets only what
    a test passes (extra)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKRESP_")}
    env.update(extra)
    return env


# libfaketime's preload (Debian's package faketime): moves a process's clocks.
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def faketime_env(stamp_file, monotonic=False):
    """zkresp_env() with libfaketime, which reads the offset in stamp_file
    (e.g. "+660") at each look at a clock; monotonic: CLOCK_MONOTONIC
    moves too, else only the wall clock."""
    env = zkresp_env(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=str(stamp_file), FAKETIME_NO_CACHE="1")
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    if is_sanitizer_build():
        # ASan wants to come first among the libraries; here the preload comes first.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    return env


def log(msg):
    sys.stderr.write("[harness %s] %s\n" % (time.strftime("%H:%M:%S"), msg))


def client_flags(r, client_id):
    """CLIENT LIST's flags of client_id, asked through redis-py client r."""
    (entry,) = r.client_list(client_id=[str(client_id)])
    return entry["flags"]


def metric_value(z, name):
    """The value of the unlabelled metric `name` on z's /metrics (z started
    with --metrics-port, its port in z.metrics_port)."""
    status, text = http_get(z.metrics_port, "/metrics")
    assert status == 200, status
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)
