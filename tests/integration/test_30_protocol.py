"""Tier 30: the wire protocol and bad input (RELIABILITY 18, 19, 21, 22, 23).

Redis's tests/unit/protocol.tcl cases over a raw socket, compared with
redis-server byte for byte (an error reply, then close; the server keeps
serving others); 1000 pipelined mixed commands; inline commands; POST and
Host: lines; oversized keys and values refused with nothing reaching
ZooKeeper; awkward keys that must round-trip and stay under <root>/k; slow
and stuck clients; maxclients.
"""

import socket
import threading
import time

import pytest

import harness
from harness import RawClient, ZkProxy, keyenc
from resp import encode, decode_one
from differential import assert_same, Raw


def exchange(port, data, quiet=0.5, limit=5.0):
    """Sends data, then collects bytes until the server closes or stays
    quiet for `quiet` seconds.  Returns (bytes, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(data)
    out, closed = b"", False
    end = time.monotonic() + limit
    s.settimeout(quiet)
    try:
        while time.monotonic() < end:
            c = s.recv(65536)
            if not c:
                closed = True
                break
            out += c
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed


# (name, bytes): Redis answers an error and closes.  From protocol.tcl and
# RELIABILITY 18.
CLOSE_CASES = [
    ("out_of_range_multibulk_length", b"*3000000000\r\n"),
    ("non_numeric_multibulk_length", b"*blabla\r\n"),
    ("wrong_multibulk_payload_header", b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
    ("negative_bulk_length", b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n"),
    ("null_bulk_in_request", b"*1\r\n$-1\r\n"),
    ("out_of_range_bulk_length", b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n"),
    ("bulk_over_512MB", b"*1\r\n$536870913\r\n"),
    ("non_numeric_bulk_length", b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n"),
    ("multibulk_not_followed_by_bulk", b"*1\r\nfoo\r\n"),
    ("nested_array", b"*1\r\n*1\r\n$4\r\nPING\r\n"),
    ("integer_in_request", b"*1\r\n:1\r\n"),
    ("unbalanced_quotes", b'set """test-key""" test-value\r\nping\r\n'),
    ("unterminated_quote", b'ECHO "unterminated\r\n'),
    ("quote_followed_by_char", b"ECHO 'it''s'\r\n"),
]

# Requests that must be answered normally, connection kept.
REPLY_CASES = [
    ("empty_query", b"\r\n*1\r\n$4\r\nPING\r\n"),
    ("negative_multibulk_length", b"*-10\r\n*1\r\n$4\r\nPING\r\n"),
    ("zero_multibulk_length", b"*0\r\n*1\r\n$4\r\nPING\r\n"),
    ("blank_lines_between", b"*1\r\n$4\r\nPING\r\n\r\n\r\n*1\r\n$4\r\nPING\r\n"),
    ("generic_wrong_number_of_args", b"PING x y z\r\n"),
    ("empty_command_name", b"*1\r\n$0\r\n\r\n"),
    ("inline_bare_newline", b"PING\n"),
    ("inline_spaces", b"  PING  \r\n"),
    ("inline_escapes", b'ECHO "a\\x41\\n\\t\\"z"\r\n'),
    ("inline_single_quotes", b"ECHO 'a b\\'c'\r\n"),
    ("inline_many", b"PING\r\nECHO one\r\nPING two\r\n"),
    ("inline_then_multibulk", b"PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"),
    ("fragmented_header", b"*2\r\n$4\r\nEC"),
]


@pytest.mark.parametrize("name,data", CLOSE_CASES, ids=[c[0] for c in CLOSE_CASES])
def test_protocol_error_then_close(zkresp, redis_ref, name, data):
    bystander = zkresp.client()
    assert bystander.cmd("PING") == b"+PONG\r\n"
    ref = exchange(redis_ref.port, data)
    got = exchange(zkresp.port, data)
    assert ref[1] and ref[0].startswith(b"-ERR Protocol error"), ("reference", ref)
    assert got == ref, "%s: expected %r then close, got %r (closed=%s)" % (name, ref[0], got[0], got[1])
    # The server keeps serving: an existing connection and a new one.
    assert bystander.cmd("PING") == b"+PONG\r\n"
    assert zkresp.client().cmd("ECHO", "still") == b"$5\r\nstill\r\n"
    assert zkresp.alive()


@pytest.mark.parametrize("name,data", REPLY_CASES, ids=[c[0] for c in REPLY_CASES])
def test_protocol_edge_replies(zkresp, redis_ref, name, data):
    ref = exchange(redis_ref.port, data)
    got = exchange(zkresp.port, data)
    assert not ref[1]
    assert got == ref, "%s: expected %r (open), got %r (closed=%s)" % (name, ref[0], got[0], got[1])


def test_bulk_without_crlf_is_an_error(zkresp):
    # Redis does not check the CRLF after a bulk; RELIABILITY 18 asks for an
    # error reply and a close on missing CRLF.
    out, closed = exchange(zkresp.port, b"*2\r\n$4\r\nECHO\r\n$3\r\nabcde\r\n")
    assert closed and out.startswith(b"-ERR Protocol error"), (out, closed)


def test_bulk_over_configured_cap(zkresp):
    # zkresp's --max-bulk-len (8 MiB by default) is far below Redis's 512 MiB.
    out, closed = exchange(zkresp.port, b"*2\r\n$3\r\nGET\r\n$%d\r\n" % (8 * 1024 * 1024 + 1))
    assert closed and out.startswith(b"-ERR Protocol error"), (out, closed)


@pytest.mark.parametrize("seq", [b"\x00", b"*\x00", b"$\x00"], ids=["nul", "star_nul", "dollar_nul"])
def test_protocol_desync(zkresp, seq):
    """protocol.tcl 'Protocol desync regression test': a request that never
    ends is cut off with a protocol error, after a bounded number of bytes."""
    rss0 = zkresp.rss_kb()
    s = socket.create_connection(("127.0.0.1", zkresp.port), timeout=5)
    got = bytearray()
    done = threading.Event()

    def reader():
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                got.extend(c)
        except OSError:
            pass
        done.set()
    threading.Thread(target=reader, daemon=True).start()
    s.sendall(seq)
    sent = 0
    chunk = b"payload" * 150
    t_end = time.monotonic() + 15
    try:
        while not done.is_set() and time.monotonic() < t_end and sent < (64 << 20):
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    done.wait(5)
    s.close()
    assert done.is_set(), "connection still open after %d bytes without a line end" % sent
    assert b"Protocol error" in got, "closed without a protocol error (%d bytes sent): %r" % (sent, bytes(got[:200]))
    assert sent <= 8 << 20, "accepted %d bytes of one unterminated request" % sent
    assert zkresp.client().cmd("PING") == b"+PONG\r\n"
    assert zkresp.rss_kb() - rss0 < 64 * 1024, "memory grew by %d KiB" % (zkresp.rss_kb() - rss0)


def test_pipelining_1000_mixed(zkresp, redis_ref):
    p = harness.unique("pipe") + ":"
    reqs = []
    for i in range(1000):
        k = "%sk%d" % (p, i % 37)
        op = i % 10
        if op == 0:
            reqs.append(("SET", k, "v%d" % i))
        elif op == 1:
            reqs.append(("GET", k))
        elif op == 2:
            reqs.append(("INCR", p + "ctr"))
        elif op == 3:
            reqs.append(("PING",))
        elif op == 4:
            reqs.append(("EXISTS", k, p + "k1", k))
        elif op == 5:
            reqs.append(("DEL", k))
        elif op == 6:
            reqs.append(("ECHO", "e%d" % i))
        elif op == 7:
            reqs.append(("SET", k, "n%d" % i, "NX"))
        elif op == 8:
            reqs.append(("PTTL", k))
        else:
            reqs.append(("GETDEL", k))
    blob = b"".join(encode(*r) for r in reqs)

    def run(port):
        with RawClient(port, timeout=60) as c:
            c.send(blob)
            return [c.read_reply() for _ in reqs]
    ref = run(redis_ref.port)
    got = run(zkresp.port)
    bad = [(i, reqs[i], ref[i], got[i]) for i in range(len(reqs)) if ref[i] != got[i]]
    assert not bad, "pipelined replies differ (first 5 of %d): %r" % (len(bad), bad[:5])


def _replies_to_end(port, reqs, proto=2):
    """The replies to reqs, pipelined in one write, read up to the reply
    of a final ECHO END (CLIENT REPLY may silence the others)."""
    with RawClient(port, timeout=20) as c:
        if proto == 3:
            assert c.cmd("HELLO", "3").startswith(b"%")
        c.send(b"".join(encode(*r) for r in reqs))
        out = []
        while not out or out[-1] != b"$3\r\nEND\r\n":
            out.append(c.read_reply())
        return out


def test_client_reply_off_skip_on_match_redis(zkresp, redis_ref):
    """CLIENT REPLY OFF silences every reply (errors too) until ON, whose
    +OK is sent; SKIP silences itself and the next command; a bad mode is
    a syntax error; RESET turns replies back on.  The byte stream, pipelined
    and read up to a final ECHO, is Redis's."""
    k = harness.unique("reply")
    reqs = [("CLIENT", "REPLY", "OFF"), ("SET", k, "1"), ("GET", k), ("CLIENT", "REPLY", "foo"),
            ("GETX",), ("CLIENT", "REPLY", "ON"), ("GET", k),
            ("CLIENT", "REPLY", "SKIP"), ("INCR", k), ("GET", k),
            ("CLIENT", "REPLY", "SKIP"), ("CLIENT", "REPLY", "SKIP"), ("PING",), ("ECHO", "after"),
            ("CLIENT", "REPLY", "foo"), ("CLIENT", "REPLY", "OFF"), ("CLIENT", "REPLY", "SKIP"),
            ("PING",), ("RESET",), ("PING",), ("CLIENT", "REPLY", "SKIP"), ("RESET",),
            ("ECHO", "END")]
    ref = _replies_to_end(redis_ref.port, reqs)
    got = _replies_to_end(zkresp.port, reqs)
    assert ref == [b"+OK\r\n", b"$1\r\n1\r\n", b"$1\r\n2\r\n", b"$5\r\nafter\r\n",
                   b"-ERR syntax error\r\n", b"+RESET\r\n", b"+PONG\r\n", b"$3\r\nEND\r\n"], ref
    assert got == ref


@pytest.mark.parametrize("proto", [2, 3])
def test_client_reply_keeps_subscribe_confirmations_as_redis(zkresp, redis_ref, proto):
    """Under CLIENT REPLY OFF or SKIP the subscribe family's confirmations
    are still sent (Redis sends them as pushes), and a SKIP is spent by the
    SUBSCRIBE; the byte stream is Redis's, read up to a final ECHO."""
    ch = harness.unique("rch")
    reqs = [("CLIENT", "REPLY", "OFF"), ("SUBSCRIBE", ch + "a", ch + "b"), ("UNSUBSCRIBE", ch + "a"),
            ("PSUBSCRIBE", ch + "*"), ("PUNSUBSCRIBE",), ("PING",), ("UNSUBSCRIBE",), ("RESET",),
            ("CLIENT", "REPLY", "SKIP"), ("SUBSCRIBE", ch + "c"), ("PING", "x"), ("UNSUBSCRIBE",),
            ("CLIENT", "REPLY", "OFF"), ("SUBSCRIBE",), ("UNSUBSCRIBE",), ("RESET",), ("ECHO", "END")]
    ref = _replies_to_end(redis_ref.port, reqs, proto)
    assert sum(1 for r in ref if b"subscribe\r\n" in r) == 9, ref
    assert _replies_to_end(zkresp.port, reqs, proto) == ref


def test_inline_commands_match_redis(zkresp, redis_ref):
    p = harness.unique("inl") + ":"
    k = p.encode() + b"k"
    steps = [
        Raw(b"PING\r\n"), Raw(b"SET " + k + b" \"a b\"\r\n"), Raw(b"GET " + k + b"\r\n"),
        Raw(b"set " + k + b" 'x\\'y'\r\n"), Raw(b"GET " + k + b"\r\n"),
        Raw(b"EXISTS " + k + b" " + k + b"\r\n"), Raw(b"INCR " + k + b"\r\n"),
        Raw(b"PTTL " + k + b"\r\n"), Raw(b"DEL " + k + b"\r\n"), Raw(b"ECHO \"\\xff\\x00\"\r\n"),
        Raw(b"NOSUCH a b\r\n"),
    ]
    for proto in (2, 3):
        assert_same(redis_ref.port, zkresp.port, steps, proto, p)


# ---------------------------------------------------------------- POST / Host:

@pytest.mark.parametrize("data", [
    b"POST / HTTP/1.1\r\n",
    b"Host: example.com\r\n",
    b"*1\r\n$4\r\nPOST\r\n",
    b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
], ids=["post", "host", "post_multibulk", "http_get_with_host"])
def test_http_lines_close_at_once(zkresp, redis_ref, data):
    ref = exchange(redis_ref.port, data, quiet=1.0)
    t0 = time.monotonic()
    got = exchange(zkresp.port, data, quiet=2.0)
    assert got == (b"", True) == ref, "expected a silent close, got %r" % (got,)
    assert time.monotonic() - t0 < 1.0


def test_commands_after_post_not_executed(zkresp):
    c = zkresp.client()
    c.send(b"POST / HTTP/1.1\r\nSET smuggled 1\r\n*3\r\n$3\r\nSET\r\n$3\r\nsm2\r\n$1\r\n1\r\n")
    assert c.is_closed(2.0) and c.buf == b""
    assert zkresp.client().cmd("EXISTS", "smuggled", "sm2") == b":0\r\n"


# ---------------------------------------------------------------- size caps

@pytest.fixture
def proxied(make_proxy, make_zkresp, zk):
    """A zkresp behind a ZkProxy, so that every ZooKeeper request it makes
    is counted."""
    proxy = make_proxy(zk)
    z = make_zkresp(zk_target=proxy)
    return z, proxy


def test_oversized_key_and_value_refused_locally(proxied, kz):
    z, proxy = proxied
    c = z.client()
    long_key = b"k" * 1025
    big = b"v" * 262145
    assert c.cmd("SET", "warm", "up") == b"+OK\r\n"
    assert proxy.requests_containing(b"/k/warm"), "the proxy does not see zkresp's requests"
    # A new sidecar makes its session guard and its pub/sub inbox in the
    # background after it starts: count from when they are there.
    harness.wait_for(lambda: kz.exists(z.root + "/g") and kz.get_children(z.root + "/g") and
                     kz.exists(z.root + "/ps/i") and kz.get_children(z.root + "/ps/i"),
                     10, 0.05, "the sidecar's guard and inbox")
    # The keyspace's nodes (ZooKeeper's own znode count would also see other
    # sessions' background nodes come and go: one appeared once in CI).
    before_keys = set(kz.get_children(z.root + "/k"))
    refused = [
        (("SET", long_key, "v"), b"-ERR key too long\r\n"),
        (("SET", long_key, "v", "NX", "PX", "30000"), b"-ERR key too long\r\n"),
        (("GET", long_key), b"-ERR key too long\r\n"),
        (("DEL", "bigval", long_key), b"-ERR key too long\r\n"),
        (("EXISTS", long_key), b"-ERR key too long\r\n"),
        (("PEXPIRE", long_key, "100"), b"-ERR key too long\r\n"),
        (("INCR", long_key), b"-ERR key too long\r\n"),
        (("SET", "bigval", big), b"-ERR value too large\r\n"),
        (("SET", "bigval", big, "NX", "PX", "30000"), b"-ERR value too large\r\n"),
    ]
    for args, want in refused:
        got = c.cmd(*args)
        assert got == want, (args[0], args[1][:20], got)
    time.sleep(0.2)
    for needle in (long_key, b"/k/bigval", big[:1000]):
        sent = proxy.requests_containing(needle)
        assert not sent, "a refused command reached ZooKeeper: %r" % [(op, f[:80]) for op, f in sent]
    assert set(kz.get_children(z.root + "/k")) == before_keys
    assert kz.exists(keyenc.node_path(z.root, long_key)) is None
    assert kz.exists(keyenc.node_path(z.root, "bigval")) is None
    # The connection and other clients are unaffected; the caps are inclusive.
    assert c.cmd("PING") == b"+PONG\r\n"
    at_key, at_val = b"k" * 1024, b"v" * 262144
    assert z.client().cmd("SET", at_key, at_val) == b"+OK\r\n"
    assert c.cmd("GET", at_key) == b"$262144\r\n" + at_val + b"\r\n"
    assert kz.exists(keyenc.node_path(z.root, at_key)) is not None


def test_configured_caps(make_zkresp):
    z = make_zkresp(extra=["--max-key-len", "16", "--max-value-len", "100"])
    c = z.client()
    assert c.cmd("SET", "k" * 16, "v" * 100) == b"+OK\r\n"
    assert c.cmd("SET", "k" * 17, "v") == b"-ERR key too long\r\n"
    assert c.cmd("SET", "k", "v" * 101) == b"-ERR value too large\r\n"
    assert c.cmd("GET", "k" * 16) == b"$100\r\n" + b"v" * 100 + b"\r\n"


# ---------------------------------------------------------------- awkward keys

AWKWARD_KEYS = [
    b"a/b", b"/", b"//", b"/a/../b", b".", b"..", b"../../escape", b"a\x00b", b"\x00", b"zookeeper",
    b"/zookeeper", b"zookeeper/quota", b"\x01\x02\x1f\x7f", b"\xff\xfe", b"\xc3\x28", "é€".encode(),
    b"%", b"%25", b"%2F", b"%%", b"a b", b"*", b"?", b"\r\n", b"\t", b"-_:{}@=+,!", b"", b"k",
    b"K", b"x" * 1024, b"\x00" * 1024, b"/" * 1024,
]


def test_awkward_keys_round_trip_and_stay_under_root(zkresp, kz):
    before = set(harness.all_paths(kz, "/"))
    zk_tree_before = set(harness.all_paths(kz, "/zookeeper"))
    c = zkresp.client()
    for i, k in enumerate(AWKWARD_KEYS):
        args = ("SET", k, b"value-%d" % i) + (("PX", "60000") if i % 3 == 0 else ())
        assert c.cmd(*args) == b"+OK\r\n", k[:40]
    for i, k in enumerate(AWKWARD_KEYS):
        want = b"value-%d" % i
        assert c.cmd("GET", k) == b"$%d\r\n%s\r\n" % (len(want), want), k[:40]
        assert c.cmd("EXISTS", k) == b":1\r\n", k[:40]
    assert c.cmd("DBSIZE") == b":%d\r\n" % len(AWKWARD_KEYS)
    children = kz.get_children(zkresp.root + "/k")
    assert sorted(children) == sorted(keyenc.encode(k) for k in AWKWARD_KEYS), \
        "the key nodes are not exactly the encoded keys"
    assert sorted(keyenc.decode(n) for n in children) == sorted(AWKWARD_KEYS)
    new = set(harness.all_paths(kz, "/")) - before
    outside = [p for p in new if p != zkresp.root and not p.startswith(zkresp.root + "/")]
    assert not outside, "nodes created outside the root: %r" % outside[:10]
    assert set(harness.all_paths(kz, "/zookeeper")) == zk_tree_before
    # Every key node is a direct child of <root>/k (nothing deeper).
    assert all(len(kz.get_children(zkresp.root + "/k/" + n)) == 0 for n in children)
    for k in AWKWARD_KEYS:
        assert c.cmd("DEL", k) == b":1\r\n", k[:40]
    assert kz.get_children(zkresp.root + "/k") == []


def test_keys_do_not_collide(zkresp):
    c = zkresp.client()
    keys = [b"", b"%", b"%25", b"%%25", b"a%2Fb", b"a/b", b".", b"%2E", b"\x00", b"%00", b"\x00\x00", b"0"]
    for i, k in enumerate(keys):
        assert c.cmd("SET", k, str(i)) == b"+OK\r\n"
    for i, k in enumerate(keys):
        assert decode_one(c.cmd("GET", k)) == str(i).encode(), k


# ---------------------------------------------------------------- slow clients

def test_idle_client_closed_by_timeout(make_zkresp):
    z = make_zkresp(extra=["--timeout", "1"])
    idle = z.client()
    busy = z.client()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        assert busy.cmd("PING") == b"+PONG\r\n"    # activity keeps a client alive
        time.sleep(0.2)
    assert idle.is_closed(3.0), "an idle client was not closed after --timeout 1"
    assert time.monotonic() - t0 >= 0.9
    assert busy.cmd("PING") == b"+PONG\r\n"


def test_half_sent_command_cut_off(make_zkresp):
    z = make_zkresp(extra=["--stall-timeout", "1000"])
    c = z.client()
    c.send(b"*2\r\n$3\r\nGET\r\n$5\r\nab")
    t0 = time.monotonic()
    other = z.client()
    assert other.cmd("PING") == b"+PONG\r\n"
    assert c.is_closed(5.0), "a half-sent command was not cut off"
    elapsed = time.monotonic() - t0
    assert 0.8 <= elapsed <= 4.0, elapsed
    assert other.cmd("PING") == b"+PONG\r\n"


def test_pipeline_behind_a_blocking_command_is_not_a_stall(make_zkresp):
    """Requests pipelined behind a LOCK.ACQUIRE that waits (more than the
    window lets run, so the rest wait unparsed-for) wait on the sidecar, not
    on the client: no stall close, however long the wait; every reply
    comes, in order."""
    z = make_zkresp(extra=["--stall-timeout", "1000"])
    key = harness.unique("stall")
    holder = z.client()
    assert holder.cmd("LOCK.ACQUIRE", key, "h").startswith(b":")
    c = z.client(timeout=20)
    c.send(encode("LOCK.ACQUIRE", key, "w", "WAIT", "3000") + encode("PING") * 100)
    time.sleep(3.5)
    assert not c.is_closed(), "closed as stalled while the sidecar held its requests"
    assert c.read_reply() in (b"$-1\r\n", b"*-1\r\n")
    assert [c.read_reply() for _ in range(100)] == [b"+PONG\r\n"] * 100
    assert holder.cmd("LOCK.RELEASE", key, "h") == b":1\r\n"


def test_nothing_runs_after_quit_while_earlier_replies_are_owed(zkresp, redis_ref):
    """GET, QUIT, SET pipelined in one write, the GET still waiting on
    ZooKeeper when QUIT is read: the GET's reply and +OK come, the
    connection closes and the SET never runs (Redis's order)."""
    for port in (redis_ref.port, zkresp.port):
        k = harness.unique("quit")
        with RawClient(port) as c:
            c.send(encode("GET", k) + encode("QUIT") + encode("SET", k, "v"))
            assert c.read_until_close() == b"$-1\r\n+OK\r\n", port
        with RawClient(port) as c:
            assert c.cmd("EXISTS", k) == b":0\r\n", port


def test_client_that_never_reads(make_zkresp):
    z = make_zkresp(extra=["--max-output", "4m", "--stall-timeout", "2000"])
    big = b"x" * 200000
    assert z.client().cmd("SET", "big", big) == b"+OK\r\n"
    rss0 = z.rss_kb()
    s = socket.create_connection(("127.0.0.1", z.port))
    s.setblocking(False)
    req = encode("GET", "big") * 50
    sent, stalled_since = 0, None
    t_end = time.monotonic() + 20
    while sent < 2000 and time.monotonic() < t_end:
        try:
            s.send(req)
            sent += 50
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 1.0:
                break
            time.sleep(0.01)
        except OSError:
            break   # closed by the server
    # Others are served meanwhile, promptly.
    other = z.client(timeout=2)
    t0 = time.monotonic()
    assert other.cmd("PING") == b"+PONG\r\n"
    r = other.cmd("GET", "big")
    assert r[:10] == b"$200000\r\nx", (r[:200], time.monotonic() - t0)
    waited = time.monotonic() - t0
    assert waited < (3.0 if harness.is_sanitizer_build() else 1.0), \
        "another client waited %.2f s behind a client that never reads" % waited
    rss = z.rss_kb()
    limit = (450 if harness.is_sanitizer_build() else 150) * 1024
    assert rss - rss0 < limit, "zkresp grew by %d KiB for a client that never reads" % (rss - rss0)
    # The stuck client is held by backpressure (its window of requests and
    # the output soft limit), then cut off by the output cap or, once it has
    # read nothing for --stall-timeout (checked once a second), the stall
    # timeout: what is left to read is bounded and ends with EOF.
    time.sleep(3.5)
    s.setblocking(True)
    s.settimeout(10)
    drained = 0
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            drained += len(c)
            assert drained < 16 << 20, "more than 16 MiB of replies queued for a client that never read"
    except socket.timeout:
        raise AssertionError("a client that never reads was never cut off (%d bytes drained)" % drained)
    except ConnectionResetError:
        pass
    s.close()
    assert z.client().cmd("PING") == b"+PONG\r\n"


def test_maxclients(make_zkresp):
    z = make_zkresp(extra=["--maxclients", "4"])
    # The harness's readiness probe has just disconnected; zkresp frees its
    # slot when the close completes (a loop iteration later).
    time.sleep(0.2)
    clients = [z.client() for _ in range(4)]
    for c in clients:
        assert c.cmd("PING") == b"+PONG\r\n"
    extra = z.client()
    assert extra.read_until_close(3) == b"-ERR max number of clients reached\r\n"
    clients.pop().close()
    def admitted():
        with z.client(timeout=1) as c:
            return c.cmd("PING") == b"+PONG\r\n"
    harness.wait_for(admitted, 3, 0.05, "a slot to free up")
    for c in clients:
        assert c.cmd("PING") == b"+PONG\r\n"


def test_reply_larger_than_max_output_is_an_error_not_a_crash(make_zkresp):
    """One reply is never built past --max-output: a script returning one
    string many times over, or an MGET of one big value repeated, answers
    -ERR reply too large on a connection that stays open, and a lock another
    client holds is still there (before: the whole reply was built, and a
    reply of gigabytes killed the process and every lock of its session)."""
    z = make_zkresp(extra=["--max-output", "1m"])
    holder = z.client()
    assert holder.cmd("SET", "lk", "tok", "NX", "PX", "60000") == b"+OK\r\n"
    c = z.client()
    script = "local s = string.rep('x', 65536) local t = {} " \
             "for i = 1, 64 do t[i] = s end return t"
    r = c.cmd("EVAL", script, "0")
    assert r.startswith(b"-ERR reply too large (more than 1048576 bytes"), r[:200]
    assert c.cmd("SET", "big", b"y" * 65536) == b"+OK\r\n"
    r = c.cmd("MGET", *(["big"] * 40))
    assert r.startswith(b"-ERR reply too large"), r[:200]
    # Under the limit, the same reply is answered whole, on the same connection.
    r = c.cmd("MGET", *(["big"] * 10))
    assert r.startswith(b"*10\r\n$65536\r\nyyy"), r[:200]
    assert holder.cmd("GET", "lk") == b"$3\r\ntok\r\n"
    assert z.proc.alive()
