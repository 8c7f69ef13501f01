"""Tier 40: databases (SELECT, --databases) and what lock libraries' test
suites send around their tests (issue 19, items 3 and 4): FLUSHDB,
FLUSHALL, CONFIG GET, DEBUG SLEEP, MEMORY USAGE, and the refusal of MOVE
and SWAPDB.

Differential against a redis-server of its own with 16 databases (the
shared redis_ref has one) and DEBUG enabled, in RESP2 and RESP3; the
cross-sidecar cases (a flush through one sidecar seen by the other) and
what Redis cannot show (the znode layout, another client served during
DEBUG SLEEP, the tenant policy) are checked directly.
"""

import threading
import time

import pytest
import redis

import harness
from differential import assert_same, Ignore
from resp import RawClient, Err

BULK = 536870912  # Redis's proto-max-bulk-len, so that CONFIG GET agrees


@pytest.fixture(scope="module")
def ref16():
    srv = harness.RedisServer("--databases", "16", "--enable-debug-command", "yes").start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def z16(zk):
    z = harness.Zkresp(zk, extra=["--max-bulk-len", BULK]).start()
    yield z
    z.close()


SEQUENCES = {
    "select": [
        "SELECT 0", "SELECT 15", "SELECT 16", "SELECT -1", "SELECT 1.5", "SELECT abc", "SELECT ''",
        "SELECT 01", "SELECT 99999999999999999999", "SELECT", "SELECT 1 2", "select 3", "SELECT 0",
    ],
    "per_database": [
        "SELECT 3", "FLUSHDB", "SET @a three", "GET @a", "SELECT 0", "GET @a", "SET @a zero",
        "SELECT 3", "GET @a", "EXISTS @a", "DBSIZE", "KEYS @a", "SELECT 4", "FLUSHDB", "DBSIZE",
        "KEYS *", "GET @a", "HSET @h f v", "SELECT 3", "HGET @h f", "TYPE @h", "SELECT 4", "HGET @h f",
        "DEL @h", "SELECT 3", "DEL @a", "DBSIZE", "SELECT 0", "GET @a", "DEL @a",
    ],
    "flush": [
        "SELECT 7", "SET @x 1", "SET @y 2 PX 100000", "SELECT 8", "FLUSHDB", "SET @x 8", "SELECT 7",
        "FLUSHDB", "DBSIZE", "EXISTS @x @y", "SET @y again NX", "GET @y", "SELECT 8", "GET @x",
        "FLUSHDB ASYNC", "GET @x", "FLUSHDB SYNC", "flushdb async", "FLUSHDB x", "FLUSHDB ASYNC x",
        "FLUSHALL x", "FLUSHALL SYNC x", "SELECT 7", "DEL @y",
    ],
    "flushall": [
        "SELECT 9", "SET @a 9", "SELECT 10", "SET @a 10 PX 100000", "SELECT 0", "SET @a 0",
        "FLUSHALL", "DBSIZE", "GET @a", "SELECT 9", "DBSIZE", "GET @a", "SELECT 10", "GET @a",
        "FLUSHALL ASYNC", "FLUSHALL sync",
    ],
    "config_get": [
        "CONFIG GET databases", "CONFIG GET DATABASES", "CONFIG GET maxmemory",
        "CONFIG GET maxmemory-policy", "CONFIG GET timeout", "CONFIG GET save", "CONFIG GET appendonly",
        "CONFIG GET notify-keyspace-events", "CONFIG GET busy-reply-threshold", "CONFIG GET lua-time-limit",
        "CONFIG GET Lua-Time-Limit", "CONFIG GET proto-max-bulk-len", "CONFIG GET maxclients",
        "CONFIG GET cluster-enabled", "CONFIG GET no-such-parameter", "CONFIG GET busy*", "CONFIG GET lua*",
        "CONFIG GET Data*", "CONFIG GET maxmemory-p?licy", "CONFIG GET databases databases",
        "CONFIG GET databases DATABASES", "CONFIG GET", "CONFIG", "CONFIG FOO", "CONFIG RESETSTAT x",
        "CONFIG SET maxmemory", "CONFIG REWRITE x",
    ],
    "debug": [
        "DEBUG SLEEP 0", "DEBUG SLEEP abc", "DEBUG SLEEP -1", "DEBUG sleep 0.01", "DEBUG SLEEP",
        "DEBUG SLEEP 1 2", "DEBUG",
    ],
    "client_unblock": [
        "CLIENT UNBLOCK abc", "CLIENT UNBLOCK 1 foo", "CLIENT UNBLOCK abc foo", "CLIENT UNBLOCK 99999999",
        "CLIENT UNBLOCK 1 TIMEOUT extra", "CLIENT UNBLOCK", "CLIENT UNBLOCK -1", "CLIENT UNBLOCK 0 ERROR",
        "client unblock 99999999 Error", "CLIENT UNBLOCK 1 timeout", "CLIENT UNBLOCK 1.5",
        "CLIENT UNBLOCK 99999999999999999999", "CLIENT UNBLOCK '' TIMEOUT", "client unblock 1 timeout x",
        "CLIENT Unblock 1 x y",
    ],
    "memory_usage": [
        "MEMORY USAGE @none", "MEMORY USAGE @none SAMPLES 5", "MEMORY USAGE @k SAMPLES x",
        "MEMORY USAGE @k SAMPLES -1", "MEMORY USAGE @k FOO", "MEMORY USAGE @k SAMPLES", "MEMORY USAGE",
        "MEMORY", "MEMORY PURGE",
    ],
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_differential(ref16, z16, name, proto):
    assert_same(ref16.port, z16.port, SEQUENCES[name], proto, harness.unique("d40") + ":")


@pytest.mark.parametrize("proto", [2, 3])
def test_memory_usage_shape(ref16, z16, proto):
    """An integer for a key that exists (not Redis's number: zkresp counts
    the znode), the null of the protocol for one that does not."""
    k = harness.unique("mu")
    for port in (ref16.port, z16.port):
        with RawClient(port) as c:
            if proto == 3:
                c.call("HELLO", "3")
            assert c.cmd("SET", k, "x" * 100) == b"+OK\r\n"
            n = c.call("MEMORY", "USAGE", k)
            assert isinstance(n, int) and n >= 100, (port, n)
            assert c.call("MEMORY", "USAGE", k, "SAMPLES", "0") == n
            assert c.cmd("HSET", k + "h", "f", "v") == b":1\r\n"
            assert isinstance(c.call("MEMORY", "USAGE", k + "h"), int)
            assert c.cmd("MEMORY", "USAGE", k + "none") == (b"_\r\n" if proto == 3 else b"$-1\r\n")
            c.cmd("DEL", k, k + "h")


@pytest.mark.parametrize("proto", [2, 3])
def test_config_get_patterns(ref16, z16, proto):
    """Several patterns, answered as one map (a flat array in RESP2) of
    every parameter matched once; Redis's order is its dict's, so compared
    as maps."""
    def get(port, *pats):
        with RawClient(port) as c:
            if proto == 3:
                c.call("HELLO", "3")
            v = c.call("CONFIG", "GET", *pats)
        if proto == 2:
            assert isinstance(v, list)
            v = dict(zip(v[::2], v[1::2]))
        assert isinstance(v, dict)
        return {(k.decode() if isinstance(k, bytes) else k): (x.decode() if isinstance(x, bytes) else x)
                for k, x in v.items()}
    for pats in (("databases", "maxmemory", "save", "appendonly"), ("timeout", "maxclients", "DataBases"),
                 ("maxmemory-policy", "lua-time-limit", "busy-reply-threshold", "cluster-enabled")):
        assert get(z16.port, *pats) == get(ref16.port, *pats), pats
    # Patterns: zkresp knows fewer parameters; those it answers agree.
    for pats in (("maxmemory*",), ("*lua*", "busy*", "cluster-enabled"), ("*", "databases")):
        got, ref = get(z16.port, *pats), get(ref16.port, *pats)
        assert got and set(got) <= set(ref), pats
        assert {k: ref[k] for k in got if k not in ("port", "bind", "proto-max-bulk-len")} == \
               {k: v for k, v in got.items() if k not in ("port", "bind", "proto-max-bulk-len")}, pats
    # What zkresp knows of itself: its port and bind address.
    mine = get(z16.port, "port", "bind")
    assert mine == {"port": str(z16.port), "bind": "127.0.0.1"}


def test_config_set_and_move_swapdb_refused(z16):
    r = z16.redis()
    for args, text in ((("CONFIG", "SET", "maxmemory", "0"), "CONFIG SET"),
                       (("CONFIG", "REWRITE"), "CONFIG SET, REWRITE and RESETSTAT"),
                       (("CONFIG", "RESETSTAT"), "RESETSTAT"),
                       (("MOVE", "k", "1"), "MOVE is not supported"),
                       (("SWAPDB", "0", "1"), "SWAPDB is not supported"),
                       (("DEBUG", "OBJECT", "k"), "DEBUG OBJECT is not supported"),
                       (("EVAL", "return redis.call('select', '1')", "0"), "SELECT is not supported in scripts")):
        with pytest.raises(redis.exceptions.ResponseError) as e:
            r.execute_command(*args)
        assert text in str(e.value), (args, str(e.value))
    assert r.ping()


def test_select_is_per_connection_and_pipelined(z16, kz):
    k = harness.unique("iso")
    with RawClient(z16.port) as a, RawClient(z16.port) as b:
        assert a.cmd("SELECT", "5") == b"+OK\r\n"
        assert a.cmd("SET", k, "in5") == b"+OK\r\n"
        assert b.cmd("GET", k) == b"$-1\r\n"
        assert b.cmd("SET", k, "in0") == b"+OK\r\n"
        assert a.cmd("GET", k) == b"$3\r\nin5\r\n"
        # Pipelined: each command runs in the database selected before it.
        a.send(b"".join(harness_encode(*c) for c in (("SET", k, "p5"), ("SELECT", "0"), ("GET", k),
                                                      ("SELECT", "5"), ("GET", k), ("SELECT", "6"),
                                                      ("GET", k))))
        got = [a.read_reply() for _ in range(7)]
        assert got == [b"+OK\r\n", b"+OK\r\n", b"$3\r\nin0\r\n", b"+OK\r\n", b"$2\r\np5\r\n",
                       b"+OK\r\n", b"$-1\r\n"]
        # CLIENT INFO / LIST say the database; RESET goes back to 0.
        assert b" db=6 " in a.call("CLIENT", "INFO")
        assert b" db=0 " in b.call("CLIENT", "INFO")
        assert a.cmd("RESET") == b"+RESET\r\n"
        assert b" db=0 " in a.call("CLIENT", "INFO")
        assert a.cmd("GET", k) == b"$3\r\nin0\r\n"
    # Database 0 keeps <root>/k; database 5 is <root>/db/5/k.
    assert kz.exists(z16.root + "/k/" + k)
    assert kz.exists(z16.root + "/db/5/k/" + k)
    with RawClient(z16.port) as c:
        c.cmd("DEL", k)
        c.cmd("SELECT", "5")
        c.cmd("DEL", k)


def harness_encode(*args):
    from resp import encode
    return encode(*args)


def test_redis_py_url_database(z16):
    k = harness.unique("url")
    r = redis.Redis.from_url("redis://127.0.0.1:%d/2" % z16.port)
    assert r.set(k, "two")
    assert r.get(k) == b"two"
    assert z16.redis().get(k) is None
    assert z16.redis(db=2).get(k) == b"two"
    with RawClient(z16.port) as c:
        assert c.call("HELLO", "3")[b"proto"] == 3
        assert c.cmd("SELECT", "2") == b"+OK\r\n"
        assert c.cmd("GET", k) == b"$3\r\ntwo\r\n"
    assert r.delete(k) == 1
    with pytest.raises(redis.exceptions.ResponseError) as e:
        redis.Redis.from_url("redis://127.0.0.1:%d/16" % z16.port).ping()
    assert str(e.value) == "DB index is out of range"


def test_databases_option(make_zkresp):
    z = make_zkresp(extra=["--databases", "2"])
    with RawClient(z.port) as c:
        assert c.cmd("SELECT", "1") == b"+OK\r\n"
        assert c.cmd("SELECT", "2") == b"-ERR DB index is out of range\r\n"
        assert c.call("CONFIG", "GET", "databases") == [b"databases", b"2"]


def test_flush_across_sidecars(zkresp_pair, kz):
    """Keys written (and owned, cached) through A, flushed through B: gone
    on A, and A's owned-key cache knows it (SET NX wins at once)."""
    a, b = zkresp_pair
    ra, rb = a.redis(), b.redis()
    ra2, rb2 = a.redis(db=2), b.redis(db=2)
    for i in range(30):
        assert ra.set("lock:%d" % i, "tok", nx=True, px=60000)
        assert ra.set("plain:%d" % i, "v")
    assert ra2.set("lock:0", "db2", nx=True, px=60000)
    assert rb.dbsize() == 60 and rb2.dbsize() == 1
    assert rb.flushdb() is True
    assert ra.dbsize() == 0 and rb.dbsize() == 0
    assert ra.get("lock:3") is None and ra.pttl("lock:3") == -2
    assert ra.set("lock:3", "new", nx=True, px=60000)
    assert rb.get("lock:3") == b"new"
    # Another database is left alone by FLUSHDB, taken by FLUSHALL.
    assert ra2.get("lock:0") == b"db2"
    assert rb.flushall(asynchronous=True) is True
    assert ra2.get("lock:0") is None and ra.get("lock:3") is None
    assert ra2.set("lock:0", "again", nx=True, px=60000)
    assert kz.get_children(a.root + "/k") == []
    assert kz.get_children(a.root + "/db/2/k") == ["lock:0"]


def test_debug_sleep_serves_others(z16):
    k = harness.unique("ds")
    done = {}

    def sleeper():
        with RawClient(z16.port) as c:
            t0 = time.monotonic()
            done["reply"] = c.cmd("DEBUG", "SLEEP", "1.5")
            done["took"] = time.monotonic() - t0
    t = threading.Thread(target=sleeper)
    t.start()
    time.sleep(0.2)
    r = z16.redis()
    t0 = time.monotonic()
    assert r.set(k, "v") and r.get(k) == b"v" and r.ping()
    assert time.monotonic() - t0 < 1.0
    t.join()
    assert done["reply"] == b"+OK\r\n"
    assert done["took"] >= 1.4
    r.delete(k)


def test_tenant_policy_refuses_flush(make_zkresp):
    import os
    z = make_zkresp(extra=["--policy", os.path.join(harness.SCRIPTS_DIR, "examples", "tenants.lua"),
                           "--requirepass", "pw"])
    admin = z.redis(username="admin", password="admin-secret")
    assert admin.set("k", "v")
    for cmd in ("FLUSHDB", "FLUSHALL"):
        with pytest.raises(redis.exceptions.NoPermissionError) as e:
            admin.execute_command(cmd)
        assert "FLUSHDB and FLUSHALL are off in this policy" in str(e.value)
    assert admin.get("k") == b"v"


def test_info_keyspace_per_database(ref16, z16):
    """INFO keyspace has a line per database with keys, in order, as
    Redis's (keys without a TTL, so that expires=0 on both)."""
    def keyspace(port):
        with RawClient(port) as c:
            assert c.cmd("FLUSHALL") == b"+OK\r\n"
            for db, n in ((0, 1), (3, 2), (12, 3)):
                assert c.cmd("SELECT", str(db)) == b"+OK\r\n"
                for i in range(n):
                    assert c.cmd("SET", "k%d" % i, "v") == b"+OK\r\n"
            c.cmd("SELECT", "5")
            c.cmd("SET", "gone", "v")
            c.cmd("DEL", "gone")
            info = c.call("INFO", "keyspace")
            c.cmd("FLUSHALL")
            return info
    got, ref = keyspace(z16.port), keyspace(ref16.port)
    assert got == ref == (b"# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"
                          b"db3:keys=2,expires=0,avg_ttl=0\r\ndb12:keys=3,expires=0,avg_ttl=0\r\n")


def test_database_directories_carry_the_acl(make_zk, make_zkresp):
    """With ZooKeeper credentials, a database's directory and keys get the
    same creator-only ACL as every node zkresp creates."""
    from kazoo.security import make_digest_acl_credential
    creds = "zkresp-dbs:pw-40"
    zk = make_zk()
    z = make_zkresp(zk_target=zk, zk_auth=creds)
    with RawClient(z.port) as c:
        assert c.cmd("SELECT", "4") == b"+OK\r\n"
        assert c.cmd("SET", "lock:a", "t", "NX", "PX", "60000") == b"+OK\r\n"
        assert c.cmd("FLUSHDB") == b"+OK\r\n"
        assert c.cmd("SET", "lock:a", "t2", "NX", "PX", "60000") == b"+OK\r\n"
    insider = harness.kazoo_client(zk, auth=creds)
    expected = make_digest_acl_credential(*creds.split(":", 1))
    for p in (z.root + "/db", z.root + "/db/4", z.root + "/db/4/k", z.root + "/db/4/k/lock:a"):
        acls, _ = insider.get_acls(p)
        assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [(31, "digest", expected)], p
    insider.stop()


# The subcommands each container command's HELP names, as the registry
# lists them (scripts/registry.lua and the commands' own tables).
HELP_SUBCOMMANDS = {
    "CLIENT": ["GETNAME", "ID", "INFO", "KILL", "LIST", "NO-EVICT", "NO-TOUCH", "REPLY", "SETINFO", "SETNAME",
               "UNBLOCK"],
    "COMMAND": ["COUNT", "DOCS", "INFO"],
    "MEMORY": ["PURGE", "USAGE"],
    "SCRIPT": ["EXISTS", "FLUSH", "KILL", "LOAD"],
    "CONFIG": ["GET", "SET", "RESETSTAT", "REWRITE"],
    "DEBUG": ["SLEEP"],
    "OBJECT": ["ENCODING", "FREQ", "IDLETIME", "REFCOUNT"],
    "PUBSUB": ["CHANNELS", "NUMPAT", "NUMSUB", "SHARDCHANNELS", "SHARDNUMSUB"],
    "POLICY": ["RELOAD", "STATUS"],
}


def help_lines(raw):
    """The lines of a HELP reply, which must be an array of status lines."""
    parts = raw.split(b"\r\n")
    assert parts[0].startswith(b"*") and parts[-1] == b"", raw[:200]
    lines = parts[1:-1]
    assert len(lines) == int(parts[0][1:]), raw[:200]
    assert all(line.startswith(b"+") for line in lines), raw[:200]
    return [line[1:].decode() for line in lines]


@pytest.mark.parametrize("proto", [2, 3])
def test_help_of_every_container_command(ref16, z16, proto):
    """`<CMD> HELP` answers what Redis's does for every command whose
    unknown-subcommand error says "Try <CMD> HELP.": status lines, a header
    naming the command, each subcommand zkresp takes, HELP last (CLIENT,
    COMMAND, MEMORY, SCRIPT, CONFIG and DEBUG answered that error before).
    Redis's lines are compared by shape only: its subcommands are more."""
    with RawClient(z16.port) as c, RawClient(ref16.port) as ref:
        if proto == 3:
            c.call("HELLO", "3")
            ref.call("HELLO", "3")
        for cmd, subs in HELP_SUBCOMMANDS.items():
            lines = help_lines(c.cmd(cmd, "help"))
            assert lines[0] == cmd + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", lines
            assert lines[-2:] == ["HELP", "    Prints this help."], (cmd, lines)
            named = {line.split(" ")[0] for line in lines[1:-2]
                     if not line.startswith((" ", "(no subcommand)"))}
            assert named == set(subs), (cmd, named)
            # each subcommand followed by its description, indented
            body = lines[1:-2]
            assert all(body[i + 1].startswith("    ") for i, line in enumerate(body)
                       if not line.startswith(" ")), (cmd, lines)
            wrong = c.cmd(cmd, "HELP", "x")
            if cmd == "DEBUG":
                assert wrong == b"-ERR unknown subcommand or wrong number of arguments for 'HELP'. " \
                                b"Try DEBUG HELP.\r\n"
            else:
                assert wrong == ("-ERR wrong number of arguments for '%s|help' command\r\n"
                                 % cmd.lower()).encode(), (cmd, wrong)
            if cmd != "POLICY":
                theirs = help_lines(ref.cmd(cmd, "HELP"))
                assert theirs[0] == lines[0] and theirs[-2:] == lines[-2:], (cmd, theirs[:3])
        # Redis's own text where zkresp takes every subcommand Redis has.
        for cmd in ("OBJECT", "PUBSUB"):
            assert help_lines(c.cmd(cmd, "HELP")) == help_lines(ref.cmd(cmd, "HELP")), cmd
        # The refusal still names HELP, which now answers.
        assert c.cmd("CLIENT", "NOPE") == b"-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n"
        # ... and "help" as an argument of a command without subcommands is
        # that command's argument (a review found ECHO HELP refused)
        for args in (("ECHO", "HELP"), ("ECHO", "help"), ("PING", "help"), ("SELECT", "help"),
                     ("WAIT", "help", "0")):
            assert c.cmd(*args) == ref.cmd(*args), args


def test_info_sections_of_redis(ref16, z16):
    """The sections Redis's INFO has that clients and fixtures read: cluster
    (its bytes), cpu, modules and errorstats in the default INFO,
    commandstats only when asked (or with all/everything), each counting
    calls, time and failed calls per command as Redis's lines do."""
    def section(port, *names):
        with RawClient(port) as c:
            return c.call("INFO", *names)
    assert section(z16.port, "cluster") == section(ref16.port, "cluster") == b"# Cluster\r\ncluster_enabled:0\r\n"
    with RawClient(z16.port) as c:
        assert c.cmd("SET", "cmdstat:k", "v") == b"+OK\r\n"
        assert c.cmd("INCR", "cmdstat:k").startswith(b"-ERR")
        cpu = c.call("INFO", "cpu").decode()
        default, everything = c.call("INFO").decode(), c.call("INFO", "everything").decode()
        stats = c.call("INFO", "commandstats").decode()
    assert cpu.startswith("# CPU\r\n") and "used_cpu_user:" in cpu and "used_cpu_sys:" in cpu, cpu
    for name in ("# CPU", "# Modules", "# Errorstats", "# Cluster", "# Server", "# Keyspace"):
        assert name in default and name in everything, name
    assert "# Commandstats" not in default and "# Commandstats" in everything
    lines = dict(line.split(":", 1) for line in stats.splitlines()[1:] if line)
    incr = dict(kv.split("=") for kv in lines["cmdstat_incr"].split(","))
    assert int(incr["calls"]) >= 1 and int(incr["failed_calls"]) >= 1 and incr["rejected_calls"] == "0", incr
    assert set(incr) == {"calls", "usec", "usec_per_call", "rejected_calls", "failed_calls"}
    ref_line = section(ref16.port, "commandstats").decode().splitlines()[1]
    assert set(kv.split("=")[0] for kv in ref_line.split(":", 1)[1].split(",")) == set(incr), ref_line
