"""Tier 00: connection commands, server commands, real clients, the README
example.  Exact replies are compared with redis-server 7.0 where Redis 7.0
defines them (started with --databases 1, as zkresp has only db 0)."""

import re
import subprocess
import time

import pytest

import harness
from harness import RawClient, RedisServer, keyenc
from resp import decode_one, Err
from differential import assert_same, Either

CONNECTION_COMMAND_STEPS = [
    "PING", "PING hello", "PING a b", "ECHO", "ECHO hi", "ECHO a b",
    "SELECT 0", "SELECT 16", "SELECT -1", "SELECT abc", "SELECT",
    "CLIENT GETNAME", "CLIENT SETNAME", "CLIENT SETNAME 'a b'", "CLIENT SETNAME 'a\nb'",
    "CLIENT SETNAME myname", "CLIENT GETNAME", "CLIENT SETNAME ''", "CLIENT GETNAME",
    "CLIENT NOSUCHSUB", "HELLO 4", "HELLO 1", "HELLO abc", "HELLO 3 FOO",
    "WAIT 0 0", "WAIT", "DBSIZE x",
    "TIME x", "QUIT",
]


def test_ping_echo(zkresp):
    c = zkresp.client()
    assert c.cmd("PING") == b"+PONG\r\n"
    assert c.cmd("PING", "hello") == b"$5\r\nhello\r\n"
    assert c.cmd("ECHO", b"a\x00b\r\n") == b"$5\r\na\x00b\r\n\r\n"
    assert c.cmd("ping") == b"+PONG\r\n"
    assert c.cmd("PiNg") == b"+PONG\r\n"


@pytest.mark.parametrize("proto", [2, 3])
def test_connection_commands_match_redis(zkresp, redis_ref, proto):
    assert_same(redis_ref.port, zkresp.port, CONNECTION_COMMAND_STEPS, proto, harness.unique("cc") + ":")


def _hello_fields(raw, proto):
    v = decode_one(raw)
    if proto == 3:
        assert raw.startswith(b"%7\r\n"), raw
        assert isinstance(v, dict)
        return v
    assert raw.startswith(b"*14\r\n"), raw
    assert isinstance(v, list) and len(v) == 14
    keys = v[0::2]
    assert keys == [b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"], keys
    return dict(zip(keys, v[1::2]))


@pytest.mark.parametrize("proto", [2, 3])
def test_hello_fields(zkresp, proto):
    c = zkresp.client()
    cid = decode_one(c.cmd("CLIENT", "ID"))
    f = _hello_fields(c.cmd("HELLO", str(proto)), proto)
    assert set(f) == {b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"}
    assert f[b"proto"] == proto
    assert f[b"id"] == cid
    assert f[b"mode"] == b"standalone"
    assert f[b"role"] == b"master"
    assert f[b"modules"] == []
    assert isinstance(f[b"server"], bytes) and f[b"server"]
    assert re.match(rb"^\d+\.\d+\.\d+", f[b"version"]), f[b"version"]
    # The protocol really switched: a null is '_' in RESP3, '$-1' in RESP2.
    null = b"_\r\n" if proto == 3 else b"$-1\r\n"
    assert c.cmd("CLIENT", "GETNAME") == null


def test_hello_without_version_and_setname(zkresp):
    c = zkresp.client()
    f = _hello_fields(c.cmd("HELLO"), 2)
    assert f[b"proto"] == 2
    f = _hello_fields(c.cmd("HELLO", "3", "SETNAME", "locker"), 3)
    assert f[b"proto"] == 3
    assert c.cmd("CLIENT", "GETNAME") == b"$6\r\nlocker\r\n"
    assert c.cmd("HELLO", "4") == b"-NOPROTO unsupported protocol version\r\n"
    # A refused HELLO leaves the protocol as it was.
    assert c.cmd("GET", "nokey") == b"_\r\n"


def test_client_subcommands(zkresp):
    a, b = zkresp.client(), zkresp.client()
    ida = decode_one(a.cmd("CLIENT", "ID"))
    idb = decode_one(b.cmd("CLIENT", "ID"))
    assert isinstance(ida, int) and isinstance(idb, int) and ida != idb
    assert decode_one(a.cmd("CLIENT", "ID")) == ida
    assert a.cmd("CLIENT", "SETNAME", "worker-a") == b"+OK\r\n"
    assert a.cmd("CLIENT", "GETNAME") == b"$8\r\nworker-a\r\n"
    assert b.cmd("CLIENT", "GETNAME") == b"$-1\r\n"
    assert a.cmd("CLIENT", "SETINFO", "LIB-NAME", "redis-py") == b"+OK\r\n"
    assert a.cmd("CLIENT", "SETINFO", "LIB-VER", "5.0.1") == b"+OK\r\n"
    bad = a.cmd("CLIENT", "SETINFO", "BADATTR", "x")
    assert bad.startswith(b"-ERR "), bad
    info = decode_one(a.cmd("CLIENT", "INFO"))
    assert isinstance(info, bytes), info
    assert re.search(rb"(^| )id=%d( |$)" % ida, info), info
    assert re.search(rb"(^| )name=worker-a( |$)", info), info
    lst = decode_one(a.cmd("CLIENT", "LIST"))
    assert isinstance(lst, bytes), lst
    lines = [l for l in lst.split(b"\n") if l.strip()]
    ids = {int(m.group(1)) for l in lines for m in [re.search(rb"(?:^| )id=(\d+)", l)] if m}
    assert {ida, idb} <= ids, lst
    assert any(b"name=worker-a" in l for l in lines)


CLIENT_ERROR_STEPS = [
    "CLIENT KILL ID 0", "CLIENT KILL ID abc", "CLIENT KILL TYPE foo", "CLIENT KILL SKIPME maybe",
    "CLIENT KILL ID 5 ADDR", "CLIENT KILL ID 999999", "CLIENT KILL MAXAGE 5",
    "CLIENT KILL TYPE master", "CLIENT KILL ADDR 1.2.3.4:5", "CLIENT KILL 1.2.3.4:5",
    "CLIENT LIST TYPE foo", "CLIENT LIST ID 0", "CLIENT LIST ID abc", "CLIENT LIST foo",
    "CLIENT LIST TYPE normal x", "CLIENT LIST ID 999999", "CLIENT LIST TYPE master",
    "CLIENT NO-EVICT maybe", "CLIENT NO-EVICT on", "CLIENT NO-EVICT OFF",
    # an integer with a NUL inside is no integer
    ["SELECT", "1\x00junk"], ["CLIENT", "KILL", "ID", "999\x00"], ["CLIENT", "LIST", "ID", "1\x00"],
    ["HELLO", "3\x00x"], "CLIENT LIST ID 999999 999998 0",
]


def test_client_kill_and_list_errors_match_redis(zkresp, redis_ref):
    assert_same(redis_ref.port, zkresp.port, CLIENT_ERROR_STEPS, 2, harness.unique("ck") + ":")


def test_client_kill_filters_and_list_filters(zkresp):
    """The filter form spares the caller unless SKIPME no, and answers how
    many it killed; TYPE pubsub is any client with a subscription; CLIENT
    LIST takes TYPE or a list of IDs."""
    a, b, sub = zkresp.client(), zkresp.client(), zkresp.client()
    ida = decode_one(a.cmd("CLIENT", "ID"))
    idb = decode_one(b.cmd("CLIENT", "ID"))
    ids = decode_one(sub.cmd("CLIENT", "ID"))
    assert sub.cmd("SUBSCRIBE", "ck-ch").startswith(b"*3\r\n")

    def listed(*args):
        out = decode_one(a.cmd("CLIENT", "LIST", *args))
        return {int(m.group(1)) for m in re.finditer(rb"(?m)(?:^| )id=(\d+)", out)}
    assert listed("TYPE", "pubsub") == {ids}
    assert {ida, idb} <= listed("TYPE", "normal") and ids not in listed("TYPE", "normal")
    assert listed("ID", str(idb), str(ids), "999999") == {idb, ids}
    assert listed("TYPE", "master") == set()
    assert a.cmd("CLIENT", "KILL", "ID", str(ida)) == b":0\r\n"
    assert a.cmd("PING") == b"+PONG\r\n"
    assert a.cmd("CLIENT", "KILL", "TYPE", "pubsub", "SKIPME", "yes") == b":1\r\n"
    assert sub.is_closed(5.0)
    assert a.cmd("CLIENT", "KILL", "ID", str(idb), "USER", "someone") == b":0\r\n"
    assert a.cmd("CLIENT", "KILL", "ID", str(idb), "USER", "default") == b":1\r\n"
    assert b.is_closed(5.0)
    assert a.cmd("CLIENT", "KILL", "ID", str(ida), "SKIPME", "no") == b":1\r\n"
    assert a.is_closed(5.0)
    assert zkresp.client().cmd("PING") == b"+PONG\r\n"


def test_info_sections(zkresp, kz):
    c = zkresp.client()
    assert c.cmd("SET", "k1", "v") == b"+OK\r\n"
    full = decode_one(c.cmd("INFO"))
    assert isinstance(full, bytes)
    for needle in (b"# Server", b"redis_version:", b"# Clients", b"connected_clients:", b"# Stats",
                   b"# Keyspace", b"# Zookeeper", b"zk_state:connected", b"loading:0",
                   b"connected_slaves:0", b"zk_session_id:0x", b"zk_session_timeout:", b"zk_server:"):
        assert needle in full, "INFO lacks %r:\n%s" % (needle, full.decode(errors="replace"))
    zkonly = decode_one(c.cmd("INFO", "zookeeper"))
    assert b"# Zookeeper" in zkonly and b"# Server" not in zkonly, zkonly
    server = decode_one(c.cmd("INFO", "server"))
    assert b"# Server" in server and b"# Zookeeper" not in server, server
    keyspace = decode_one(c.cmd("INFO", "keyspace"))
    assert re.search(rb"db0:keys=1[,\r]", keyspace), keyspace
    info = zkresp.info("zookeeper")
    assert info["zk_session_timeout"] == "2000", info
    assert info["zk_server"].endswith(":%d" % zkresp.zk.port) or str(zkresp.zk.port) in info["zk_server"], info
    # The session id is the one ZooKeeper knows for this client.
    sid = zkresp.session_id()
    cons = zkresp.zk.four_letter("cons")
    assert ("sid=0x%x" % sid) in cons, (hex(sid), cons)


def test_command_count_docs_info(zkresp, redis_ref):
    c = zkresp.client()
    names = ["get", "set", "del", "unlink", "exists", "getdel", "expire", "pexpire", "expireat",
             "pexpireat", "ttl", "pttl", "persist", "incr", "incrby", "decr", "decrby", "type",
             "ping", "echo", "hello", "auth", "select", "client", "info", "command", "wait",
             "time", "dbsize", "quit", "reset"]
    got = decode_one(c.cmd("COMMAND", "INFO", *names))
    with redis_ref.client() as r:
        ref = decode_one(r.cmd("COMMAND", "INFO", *names))
    assert isinstance(got, list) and len(got) == len(names), got
    for name, g, e in zip(names, got, ref):
        assert g is not None, "COMMAND INFO %s: zkresp does not know it" % name
        # name, arity, first key, last key, step: what clients use.
        assert [g[0], g[1], g[3], g[4], g[5]] == [e[0], e[1], e[3], e[4], e[5]], (name, g[:6], e[:6])
    assert c.cmd("COMMAND", "INFO", "nosuchcommand") == b"*1\r\n$-1\r\n"
    n = decode_one(c.cmd("COMMAND", "COUNT"))
    assert isinstance(n, int) and n >= len(names), \
        "COMMAND COUNT is %r but zkresp answers at least the %d commands %s" % (n, len(names), names)
    listed = decode_one(c.cmd("COMMAND"))
    assert isinstance(listed, list) and len(listed) == n, "COMMAND lists %d entries, COUNT says %d" % (len(listed), n)


def test_command_docs(zkresp):
    """COMMAND DOCS <name> answers the command's doc map, as Redis 7 does
    (RESP2: a flat [name, doc] array; RESP3: a map)."""
    c = zkresp.client()
    docs = decode_one(c.cmd("COMMAND", "DOCS", "get"))
    assert isinstance(docs, list) and len(docs) == 2 and docs[0] == b"get", \
        "COMMAND DOCS get answered %r" % (docs,)
    c.cmd("HELLO", "3")
    docs3 = c.cmd("COMMAND", "DOCS", "set")
    assert docs3.startswith(b"%1\r\n$3\r\nset\r\n"), docs3[:80]
    assert c.cmd("COMMAND", "DOCS", "nosuchcommand") == b"%0\r\n"


def test_wait_waitaof(zkresp):
    c = zkresp.client()
    assert c.cmd("WAIT", "0", "0") == b":0\r\n"
    assert c.cmd("WAIT", "1", "10") == b":0\r\n"
    # Issue 2 / COMPAT.md say ":0"; a real Redis 7.2 answers [0, 0].  Either
    # is accepted by the clients that probe it; anything else is a bug.
    r = c.cmd("WAITAOF", "0", "0", "0")
    assert r in (b":0\r\n", b"*2\r\n:0\r\n:0\r\n"), r


def test_time(zkresp):
    c = zkresp.client()
    v = decode_one(c.cmd("TIME"))
    assert isinstance(v, list) and len(v) == 2 and all(isinstance(x, bytes) for x in v), v
    secs, usecs = int(v[0]), int(v[1])
    assert abs(secs - time.time()) < 5
    assert 0 <= usecs < 1000000


def test_dbsize(zkresp):
    c = zkresp.client()
    assert c.cmd("DBSIZE") == b":0\r\n"
    for i in range(3):
        assert c.cmd("SET", "k%d" % i, "v") == b"+OK\r\n"
    assert c.cmd("SET", "t", "v", "PX", "60000") == b"+OK\r\n"
    assert c.cmd("DBSIZE") == b":4\r\n"
    assert c.cmd("DEL", "k0", "t") == b":2\r\n"
    assert c.cmd("DBSIZE") == b":2\r\n"


def test_quit(zkresp):
    c = zkresp.client()
    assert c.cmd("QUIT") == b"+OK\r\n"
    assert c.is_closed(2.0)
    assert zkresp.client().cmd("PING") == b"+PONG\r\n"


def test_reset(zkresp):
    c = zkresp.client()
    c.cmd("HELLO", "3")
    assert c.cmd("CLIENT", "SETNAME", "x") == b"+OK\r\n"
    assert c.cmd("RESET") == b"+RESET\r\n"
    # Back to RESP2, no name.
    assert c.cmd("CLIENT", "GETNAME") == b"$-1\r\n"
    assert c.cmd("GET", "missing") == b"$-1\r\n"


# ---------------------------------------------------------------- AUTH

@pytest.fixture(scope="module")
def redis_auth():
    srv = RedisServer("--databases", "1", "--requirepass", "s3cret-pw").start()
    yield srv
    srv.close()


HELLO_NOAUTH_72 = (b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                   b"HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                   b"select the RESP protocol version at the same time\r\n")

AUTH_STEPS = [
    "GET @k", "PING", "SET @k v", "CLIENT ID", Either("HELLO 3", HELLO_NOAUTH_72),
    "AUTH wrong", "AUTH default wrong", "AUTH nouser s3cret-pw", "AUTH a b c",
    "GET @k", "AUTH s3cret-pw", "GET @k", "PING", "AUTH default s3cret-pw", "SET @k v", "GET @k",
    "RESET", "GET @k", "HELLO 2 AUTH default wrong", "GET @k",
    "HELLO 2 AUTH default s3cret-pw SETNAME n1", "CLIENT GETNAME", "GET @k",
    # user names are case-sensitive; a bad SETNAME fails HELLO before its AUTH
    "RESET", "AUTH DEFAULT s3cret-pw", "GET @k", "HELLO 2 AUTH default s3cret-pw SETNAME 'a b'",
    "GET @k", "QUIT",
]


def test_auth_matches_redis(make_zkresp, redis_auth):
    z = make_zkresp(extra=["--requirepass", "s3cret-pw"])
    # HELLO 2 with AUTH answers a map whose id differs: compare the rest.
    steps = [s for s in AUTH_STEPS if not (isinstance(s, str) and s.startswith("HELLO 2 AUTH default s3cret"))]
    assert_same(redis_auth.port, z.port, steps, 2, harness.unique("au") + ":")


def test_auth_details(make_zkresp):
    z = make_zkresp(extra=["--requirepass", "s3cret-pw"])
    c = z.client()
    assert c.cmd("GET", "k") == b"-NOAUTH Authentication required.\r\n"
    assert c.cmd("AUTH", "bad") == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    f = _hello_fields(c.cmd("HELLO", "3", "AUTH", "default", "s3cret-pw", "SETNAME", "n1"), 3)
    assert f[b"proto"] == 3
    assert c.cmd("CLIENT", "GETNAME") == b"$2\r\nn1\r\n"
    assert c.cmd("GET", "k") == b"_\r\n"
    # redis-py with a password works end to end.
    r = z.redis(password="s3cret-pw")
    assert r.set("k", "v", nx=True, px=30000) is True
    assert r.get("k") == b"v"
    assert z.client().cmd("PING") == b"-NOAUTH Authentication required.\r\n"
    # Never a password in the log.
    assert b"s3cret-pw" not in z.log(), "the password appears in zkresp's log"


def test_unauthenticated_limits(make_zkresp, redis_auth):
    """RELIABILITY 20: tight argument limits before authentication, as Redis:
    more than 10 arguments or a bulk over 16 KiB is a protocol error."""
    z = make_zkresp(extra=["--requirepass", "s3cret-pw"])
    for header, error in ((b"*20\r\n", b"-ERR Protocol error: unauthenticated multibulk length\r\n"),
                          (b"*1\r\n$100000\r\n", b"-ERR Protocol error: unauthenticated bulk length\r\n")):
        with z.client() as u:
            u.send(header)
            try:
                data = u.read_until_close(3)
            except OSError:
                raise AssertionError("unauthenticated %r: connection still open after 3 s, nothing answered "
                                     "(expected %r then close)" % (header, error))
            assert data == error, (header, data)
    # Ten arguments and 16 KiB are still fine.
    with z.client() as u:
        assert u.cmd(*(["PING"] + ["x"] * 9)).startswith(b"-NOAUTH"), "10 arguments refused"
        assert u.cmd("PING", "x" * 16384).startswith(b"-NOAUTH")


def test_limits_after_pipelined_auth_match_redis(make_zkresp, redis_auth):
    """A request sent in the same write as the AUTH before it is read under
    the limits that AUTH leaves, as Redis reads one request at a time: more
    than 10 arguments pass after a good password, and after a bad one they
    are the unauthenticated protocol error."""
    from resp import encode
    z = make_zkresp(extra=["--requirepass", "s3cret-pw"])
    key = harness.unique("pa") + ":l"
    for password in ("s3cret-pw", "wrong"):
        wire = (encode("AUTH", password) + encode("RPUSH", key, *["v%d" % i for i in range(11)])
                + encode("DEL", key))
        got = []
        for port in (redis_auth.port, z.port):
            with RawClient(port) as c:
                c.send(wire)
                got.append(c.read_until_close(3) if password == "wrong" else
                           b"".join(c.read_reply() for _ in range(3)))
        assert got[1] == got[0], (password, got)
    assert got[0].endswith(b"-ERR Protocol error: unauthenticated multibulk length\r\n"), got[0]


def test_auth_without_password_configured(zkresp, redis_ref):
    steps = ["AUTH x", "AUTH default x", "AUTH default ''", "PING"]
    assert_same(redis_ref.port, zkresp.port, steps, 2, harness.unique("np") + ":")
    # With no password, the default user accepts any password in HELLO.
    assert zkresp.client().cmd("HELLO", "3", "AUTH", "default", "x").startswith(b"%7\r\n")


# ---------------------------------------------------------------- real clients

def _cli(z, *args, resp3=False):
    cmd = ["redis-cli", "-h", "127.0.0.1", "-p", str(z.port), "--no-raw"]
    if resp3:
        cmd.append("-3")
    p = subprocess.run(cmd + list(args), capture_output=True, timeout=20)
    assert p.returncode == 0, p
    return p.stdout.decode().strip()


def test_readme_example_redis_cli(zkresp, kz):
    assert _cli(zkresp, "SET", "lock:order-42", "tok-1", "NX", "PX", "30000") == "OK"
    assert _cli(zkresp, "SET", "lock:order-42", "tok-2", "NX", "PX", "30000") == "(nil)"
    m = re.fullmatch(r"\(integer\) (\d+)", _cli(zkresp, "PTTL", "lock:order-42"))
    assert m and 29000 <= int(m.group(1)) <= 30000, m
    assert _cli(zkresp, "GET", "lock:order-42") == '"tok-1"'
    # The lock is an ephemeral znode of this sidecar's session, under the root.
    data, stat = harness.key_stat(kz, zkresp.root, "lock:order-42")
    assert stat is not None, "no znode at %s" % keyenc.node_path(zkresp.root, "lock:order-42")
    assert stat.ephemeralOwner == zkresp.session_id()
    assert b"tok-1" in data
    assert _cli(zkresp, "DEL", "lock:order-42") == "(integer) 1"
    assert _cli(zkresp, "GET", "lock:order-42") == "(nil)"
    assert harness.key_stat(kz, zkresp.root, "lock:order-42") == (None, None)
    assert _cli(zkresp, "GET", "lock:order-42", resp3=True) == "(nil)"
    assert "zk_state:connected" in _cli(zkresp, "INFO", "zookeeper")


def test_redis_py_client(zkresp):
    import redis
    r = zkresp.redis(client_name="pyclient")
    assert r.ping() is True
    assert r.client_getname() == "pyclient"
    assert r.set("lk", "tok", nx=True, px=30000) is True
    assert r.set("lk", "tok2", nx=True, px=30000) is None
    assert r.get("lk") == b"tok"
    assert 29000 <= r.pttl("lk") <= 30000
    assert r.info()["redis_version"]
    assert r.info("zookeeper")["zk_state"] == "connected"
    p = r.pipeline(transaction=False)
    p.set("a", "1").incr("a").get("a").exists("a", "a", "nope").delete("a").get("a")
    assert p.execute() == [True, 2, b"2", 2, 1, None]
    lock = r.lock("rl", timeout=5, blocking=False)
    assert lock.acquire() is True
    other = r.lock("rl", timeout=5, blocking=False)
    assert other.acquire() is False
    assert r.get("rl") == lock.local.token
    assert r.delete("rl") == 1
    assert other.acquire() is True
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "x")
