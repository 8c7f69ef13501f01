"""Tier 80: operating zkresp (DESIGN "Operating it", issue 6).

  /metrics      Prometheus text format, valid for `promtool check metrics`,
                scraped while traffic runs; its counters move with the traffic
  /healthz      200 whenever the loop runs, ZooKeeper up or down
  /readyz       503 while the ZooKeeper session is down, 200 when it is back;
                503 "shutting down" during the SIGTERM grace period
  the HTTP port GET only, one response per connection, 404 / 405 / 431,
                a silent client does not block the others

SIGTERM's release of held locks at once (exit 0, a client on another sidecar
acquires immediately) is tests/fault/test_50_sidecar_death.py
::test_sigterm_releases_at_once; the SIGTERM test here adds the readiness
side and checks the release again from the other sidecar, briefly.
"""

import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

import harness
from harness import free_port

PROMTOOL = "/usr/bin/promtool"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


http = harness.http


def scrape(port):
    status, headers, body = http(port, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return body.decode()


def parse(text):
    """{(name, frozenset(labels.items())): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, "unparsable sample line %r" % line
        labels = {}
        if m.group(2):
            for part in re.findall(r'(\w+)="([^"]*)"', m.group(2)):
                labels[part[0]] = part[1]
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def promtool_check(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert p.returncode == 0, "promtool check metrics failed:\n%s\n--- input:\n%s" % (
        p.stdout.decode(errors="replace"), text[:4000])


def with_metrics(make_zkresp, **kw):
    mport = free_port()
    extra = list(kw.pop("extra", [])) + ["--metrics-port", mport]
    z = make_zkresp(extra=extra, **kw)
    z.mport = mport
    return z


# ------------------------------------------------------------------ metrics

def test_metrics_valid_and_move_with_traffic(make_zkresp):
    z = with_metrics(make_zkresp)
    before = parse(scrape(z.mport))
    assert val(before, "zkresp_zookeeper_connected") == 1
    assert val(before, "zkresp_zookeeper_sessions_total") >= 1

    nset, nget = 40, 15
    scrapes = []
    with z.client() as c:
        # Scrape while commands are in flight: each batch of SETs is sent
        # pipelined, /metrics is read, then the replies.
        for batch in range(4):
            for i in range(batch * 10, batch * 10 + 10):
                c.send_cmd("SET", "m%d" % i, "v", "NX", "PX", "60000")
            scrapes.append(scrape(z.mport))
            for i in range(10):
                assert c.read_reply(timeout=10) == b"+OK\r\n"
        for i in range(nget):
            assert c.cmd("GET", "m%d" % i) == b"$1\r\nv\r\n"
        assert c.cmd("SET", "onlykey").startswith(b"-ERR wrong number of arguments")
        assert c.cmd("NOSUCHCOMMAND", "x").startswith(b"-ERR unknown command")
        assert c.cmd("PING") == b"+PONG\r\n"
        # Commands with a dot in their name (the native locks) have a label
        # of their own, as Redis's module commands do.
        assert c.cmd("LOCK.ACQUIRE", "m-lock", "o1").startswith(b":")
        assert c.cmd("LOCK.RELEASE", "m-lock", "o1") == b":1\r\n"
        assert c.cmd("LOCK.RELEASE", "m-lock", "o1") == b":0\r\n"
    for text in scrapes[:1] + scrapes[-1:]:
        promtool_check(text)
    # The mid-traffic scrapes saw the SET counter climb.
    mid = [val(parse(t), "zkresp_commands_total", command="set", result="ok") for t in scrapes]
    assert mid == sorted(mid) and mid[-1] > mid[0], mid

    after_text = scrape(z.mport)
    promtool_check(after_text)
    after = parse(after_text)

    def delta(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)

    assert delta("zkresp_commands_total", command="set", result="ok") == nset
    assert delta("zkresp_commands_total", command="set", result="error") == 1
    assert delta("zkresp_commands_total", command="get", result="ok") == nget
    assert delta("zkresp_commands_total", command="unknown", result="error") == 1
    assert delta("zkresp_commands_total", command="ping", result="ok") >= 1
    assert delta("zkresp_commands_total", command="lock.acquire", result="ok") == 1
    assert delta("zkresp_commands_total", command="lock.release", result="ok") == 2
    assert delta("zkresp_command_duration_seconds_count", command="lock.release") == 2
    # The histogram counts every SET, in cumulative buckets.
    assert delta("zkresp_command_duration_seconds_count", command="set") == nset + 1
    assert val(after, "zkresp_command_duration_seconds_bucket", command="set", le="+Inf") == \
        val(after, "zkresp_command_duration_seconds_count", command="set")
    assert val(after, "zkresp_command_duration_seconds_bucket", command="set", le="0.0001") <= \
        val(after, "zkresp_command_duration_seconds_bucket", command="set", le="5")
    assert val(after, "zkresp_command_duration_seconds_sum", command="set") > 0
    assert delta("zkresp_connections_total") >= 1
    assert delta("zkresp_net_input_bytes_total") > nset * 20
    assert delta("zkresp_net_output_bytes_total") >= nset * 5
    assert val(after, "zkresp_zookeeper_session_age_seconds") > 0
    assert val(after, "zkresp_zookeeper_connected") == 1
    assert val(after, "zkresp_ready") == 1
    # Every SET NX PX left an ephemeral key this sidecar owns.
    assert val(after, "zkresp_owned_keys") >= nset
    assert "zkresp_lua_script_commits_total" in after_text
    assert "zkresp_lua_script_retries_total" in after_text
    assert "zkresp_lua_pubsub_published_total" in after_text
    assert "zkresp_lua_zookeeper_watch_events_total" in after_text
    # Label values stay a closed set: the unknown command is not a label.
    assert "nosuchcommand" not in after_text.lower()

    # Gauges follow clients.
    with z.client() as c1, z.client() as c2:
        assert c1.cmd("PING") == b"+PONG\r\n" and c2.cmd("PING") == b"+PONG\r\n"
        during = parse(scrape(z.mport))
        assert val(during, "zkresp_connected_clients") >= 2


POLICY_COMMAND = """
return {
    commands = {
        ["policy.echo"] = { arity = 2, first_key = 0, last_key = 0, step = 0, flags = "fast",
            fn = function(args) return args[2] end },
    },
}
"""


def test_command_added_by_a_policy_reload_has_its_own_label(make_zkresp, tmp_path):
    """A command a reloaded policy adds is counted under its name, not as
    "unknown" (names were registered only at start); once a label, it
    stays one after a reload drops the command (a counter does not vanish),
    and a name no policy defines never becomes a label."""
    policy = tmp_path / "policy.lua"
    policy.write_text("return {}")
    z = with_metrics(make_zkresp, extra=["--policy", str(policy)])
    with z.client() as c:
        assert c.cmd("POLICY.ECHO", "x").startswith(b"-ERR unknown command")
        policy.write_text(POLICY_COMMAND)
        assert c.cmd("POLICY", "RELOAD") == b"+OK\r\n"
        before = parse(scrape(z.mport))
        assert c.cmd("POLICY.ECHO", "hi") == b"$2\r\nhi\r\n"
        assert c.cmd("policy.echo", "ho") == b"$2\r\nho\r\n"
        assert c.cmd("POLICY.ECHO").startswith(b"-ERR wrong number of arguments")
        assert c.cmd("POLICY.NOPE", "x").startswith(b"-ERR unknown command")
        after = parse(scrape(z.mport))
        policy.write_text("return {}")
        assert c.cmd("POLICY", "RELOAD") == b"+OK\r\n"
        assert c.cmd("POLICY.ECHO", "x").startswith(b"-ERR unknown command")
        last = parse(scrape(z.mport))

    def delta(a, b, **labels):
        return val(b, "zkresp_commands_total", **labels) - val(a, "zkresp_commands_total", **labels)

    assert delta(before, after, command="policy.echo", result="ok") == 2
    assert delta(before, after, command="policy.echo", result="error") == 1
    assert delta(before, after, command="unknown", result="error") == 1
    assert delta(after, last, command="policy.echo", result="error") == 1
    assert delta(after, last, command="unknown", result="error") == 0
    assert all("policy.nope" not in dict(k[1]).get("command", "") for k in last)


ZK_OPS = ("get", "exists", "children", "create", "set", "delete", "sync", "multi", "get_acl")


def test_zookeeper_requests_counted_by_operation(make_zkresp, zk):
    """zkresp_zookeeper_requests_total{op} and INFO's zk_requests count
    what the sidecar sends to ZooKeeper, by operation; ZooKeeper's own
    count of requests received bounds their sum."""
    z = with_metrics(make_zkresp, extra=["--zk-group-max", "0"])
    zk_before = zk.mntr()["zk_packets_received"]
    before = parse(scrape(z.mport))
    with z.client() as c:
        for i in range(20):
            c.send_cmd("SET", "ops%d" % i, "v", "NX", "PX", "60000")
        for _ in range(20):
            assert c.read_reply(timeout=10) == b"+OK\r\n"
        for i in range(20):
            assert c.cmd("DELIFEQ", "ops%d" % i, "v") == b":1\r\n"
        assert c.cmd("LOCK.ACQUIRE", "ops:lock", "me").startswith(b":")
        assert c.cmd("LOCK.RELEASE", "ops:lock", "me") == b":1\r\n"
    after_text = scrape(z.mport)
    promtool_check(after_text)
    after = parse(after_text)
    info = dict(kv.split("=") for kv in z.info("zookeeper")["zk_requests"].split(","))
    zk_after = zk.mntr()["zk_packets_received"]

    def delta(op):
        return val(after, "zkresp_zookeeper_requests_total", op=op) - \
            val(before, "zkresp_zookeeper_requests_total", op=op)

    # Each SET NX created its key's node, each DELIFEQ deleted it (or, in a
    # multi, with its checks); the lock's request was created and listed.
    assert delta("create") >= 21, delta("create")
    assert delta("delete") + delta("multi") >= 20, (delta("delete"), delta("multi"))
    assert delta("children") >= 1, delta("children")
    # INFO, read after the scrape, shows the same counters, never fewer.
    assert set(info) == set(ZK_OPS), info
    for op in ZK_OPS:
        assert int(info[op]) >= val(after, "zkresp_zookeeper_requests_total", op=op), (op, info)
    # ZooKeeper received them all (and pings, and the test's own mntr).
    sent = sum(delta(op) for op in ZK_OPS)
    assert 45 <= sent <= zk_after - zk_before, (sent, zk_before, zk_after)


@pytest.mark.parametrize("grouping", [[], ["--zk-group-max", "0"]], ids=["grouped", "alone"])
def test_zookeeper_request_durations_by_operation(make_zkresp, grouping):
    """zkresp_zookeeper_request_duration_seconds{op} times every answered
    request, as many as zkresp_zookeeper_requests_total counts sent (a
    group commit is one multi, with or without grouping), each within its
    buckets."""
    z = with_metrics(make_zkresp, extra=grouping)
    with z.client() as c:
        for i in range(20):
            c.send_cmd("SET", "dur%d" % i, "v", "NX", "PX", "60000")
        for _ in range(20):
            assert c.read_reply(timeout=10) == b"+OK\r\n"
        for i in range(20):
            assert c.cmd("DELIFEQ", "dur%d" % i, "v") == b":1\r\n"
        assert c.cmd("LOCK.ACQUIRE", "dur:lock", "me").startswith(b":")
        assert c.cmd("LOCK.RELEASE", "dur:lock", "me") == b":1\r\n"
    name = "zkresp_zookeeper_request_duration_seconds"
    seen = {}

    def all_answered():
        # background requests (a lock's listing, a guard) may still be out
        samples = parse(scrape(z.mport))
        seen["s"] = samples
        return all(val(samples, name + "_count", op=op) ==
                   val(samples, "zkresp_zookeeper_requests_total", op=op) for op in ZK_OPS)
    harness.wait_for(all_answered, 10, what="every request sent answered and timed")
    text = scrape(z.mport)
    promtool_check(text)
    samples = parse(text)
    if not grouping:  # the pipelined SETs went out as group commits
        assert val(samples, "zkresp_zookeeper_groups_total") >= 1
    for op in ("create", "children"):
        assert val(samples, name + "_count", op=op) >= 1, op
    assert val(samples, name + "_count", op="delete") + val(samples, name + "_count", op="multi") >= 20
    for op in ZK_OPS:
        n = val(samples, name + "_count", op=op)
        if n == 0:
            continue
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                         if k[0] == name + "_bucket" and dict(k[1]).get("op") == op)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1] == (float("inf"), n), (op, buckets)
        total = val(samples, name + "_sum", op=op)
        # a loopback round trip: more than nothing, less than 5 s each on average
        assert 0 < total < 5 * n, (op, total, n)
    # every answer (and watch event) then waited for the loop thread
    wait = "zkresp_zookeeper_answer_wait_seconds"
    answered = sum(val(samples, name + "_count", op=op) for op in ZK_OPS)
    n = val(samples, wait + "_count")
    assert n >= answered, (n, answered)
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items() if k[0] == wait + "_bucket")
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and buckets[-1] == (float("inf"), n), buckets
    assert 0 < val(samples, wait + "_sum") < 5 * n


def test_lua_counters_move(make_zkresp):
    """The Lua layer's counters (M.stats): messages published, script
    commits."""
    z = with_metrics(make_zkresp)
    before = parse(scrape(z.mport))
    c = z.client()
    for i in range(3):
        assert c.cmd("PUBLISH", "ch", "m%d" % i) == b":0\r\n"
    assert c.cmd("EVAL", "redis.call('set', KEYS[1], 'v') return 1", "1", "k") == b":1\r\n"
    after = parse(scrape(z.mport))
    assert val(after, "zkresp_lua_pubsub_published_total") - \
        val(before, "zkresp_lua_pubsub_published_total") == 3
    assert val(after, "zkresp_lua_script_commits_total") - \
        val(before, "zkresp_lua_script_commits_total") >= 1
    # Another sidecar taking over a key this one holds bumps this one's
    # session guard, which this sidecar watches.
    assert c.cmd("SET", "w", "1", "PX", "60000") == b"+OK\r\n"
    other = make_zkresp(root=z.root).client()

    def watched():
        assert other.cmd("SET", "w", "2", "PX", "60000") == b"+OK\r\n"
        now = parse(scrape(z.mport))
        return val(now, "zkresp_lua_zookeeper_watch_events_total") > \
            val(after, "zkresp_lua_zookeeper_watch_events_total")
    harness.wait_for(watched, 10, 0.1, "a watch event counted")


def test_protocol_errors_and_rejections_counted(make_zkresp):
    z = with_metrics(make_zkresp, extra=["--maxclients", "1"])

    def slot_free():
        # A client closed on our side is gone only once the server has seen
        # the close; until then it holds the only slot.
        harness.wait_for(lambda: val(parse(scrape(z.mport)), "zkresp_connected_clients") == 0,
                         5, 0.02, "the previous connection to close")
    slot_free()  # the harness's start-up probe
    before = parse(scrape(z.mport))
    with z.client() as c:
        assert c.cmd("PING") == b"+PONG\r\n"
        with z.client() as refused:
            assert refused.read_reply(timeout=5).startswith(b"-ERR max number of clients")
    slot_free()
    with z.client() as bad:
        bad.send(b"*1\r\n$x\r\n")
        assert bad.read_reply(timeout=5).startswith(b"-ERR Protocol error")
    after = parse(scrape(z.mport))
    assert val(after, "zkresp_rejected_connections_total") - val(before, "zkresp_rejected_connections_total") == 1
    assert val(after, "zkresp_protocol_errors_total") - val(before, "zkresp_protocol_errors_total") == 1


def test_metrics_port_off_by_default(make_zkresp):
    port = free_port()
    z = make_zkresp()
    assert "--metrics-port" not in z.argv()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert "http.listening" not in z.log_tail(400)


# ------------------------------------------------------------------ the HTTP server

def test_http_routes_and_limits(make_zkresp):
    z = with_metrics(make_zkresp)
    assert http(z.mport, "/healthz")[0::2] == (200, b"ok\n")
    assert http(z.mport, "/readyz")[0::2] == (200, b"ok\n")
    assert http(z.mport, "/readyz?verbose=1")[0] == 200
    st, hd, _ = http(z.mport, "/nope")
    assert st == 404 and hd["connection"] == "close"
    assert http(z.mport, "/metrics", method="POST")[0] == 405
    assert http(z.mport, "/metrics", method="HEAD")[0] == 405
    assert http(z.mport, raw=b"garbage\r\n\r\n")[0] == 400
    big = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    try:
        assert http(z.mport, raw=big)[0] == 431
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed while we were still sending: also a refusal
    # A client that sends nothing does not hold up the others.
    silent = socket.create_connection(("127.0.0.1", z.mport), timeout=5)
    try:
        half = socket.create_connection(("127.0.0.1", z.mport), timeout=5)
        half.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert http(z.mport, "/healthz")[0] == 200
        half.close()
    finally:
        silent.close()
    # The Redis port still works and knows nothing of HTTP.
    with z.client() as c:
        assert c.cmd("PING") == b"+PONG\r\n"


# ------------------------------------------------------------------ readiness

def test_readyz_follows_zookeeper_healthz_does_not(make_zk, make_zkresp):
    zk = make_zk()
    z = with_metrics(make_zkresp, zk_target=zk)
    assert http(z.mport, "/readyz")[0] == 200
    health = []
    stop = threading.Event()

    def prober():
        while not stop.is_set():
            try:
                health.append(http(z.mport, "/healthz", timeout=2)[0])
            except OSError as e:
                health.append(repr(e))
            time.sleep(0.05)
    t = threading.Thread(target=prober)
    t.start()
    try:
        zk.stop()
        harness.wait_for(lambda: http(z.mport, "/readyz")[0] == 503, 15, 0.05,
                         "/readyz to answer 503 with ZooKeeper stopped")
        st, _, body = http(z.mport, "/readyz")
        assert st == 503 and b"zookeeper" in body, body
        m = parse(scrape(z.mport))
        assert val(m, "zkresp_zookeeper_connected") == 0
        assert val(m, "zkresp_ready") == 0
        time.sleep(1.0)  # down for a while: healthz keeps answering
        zk.start()
        harness.wait_for(lambda: http(z.mport, "/readyz")[0] == 200, 30, 0.05,
                         "/readyz to answer 200 with ZooKeeper back")
        assert val(parse(scrape(z.mport)), "zkresp_zookeeper_connected") == 1
    finally:
        stop.set()
        t.join(10)
    assert len(health) >= 10
    assert all(h == 200 for h in health), "healthz failed while ZooKeeper was down: %r" % (
        [h for h in health if h != 200][:5],)
    with z.client() as c:
        assert c.cmd("SET", "after", "1") == b"+OK\r\n"


def test_sigterm_not_ready_during_grace_and_lock_released(make_proxy, make_zkresp, zk, kz):
    """SIGTERM with a lock held and a slow command in flight: during the
    grace period /readyz is 503 "shutting down" and /healthz 200; at exit (0)
    the lock is free at once for a client on another sidecar."""
    proxy = make_proxy(zk)
    a = with_metrics(make_zkresp, zk_target=proxy, session_timeout=10000,
                     request_timeout=5000, extra=["--shutdown-grace", "8000"])
    b = make_zkresp(root=a.root, session_timeout=10000)
    c1 = a.client()
    assert c1.cmd("SET", "lock", "tok-a", "NX", "PX", "60000") == b"+OK\r\n"
    assert b.client().cmd("SET", "lock", "tok-b", "NX", "PX", "60000") == b"$-1\r\n"
    proxy.delay(800)
    c2 = a.client()
    c2.send_cmd("SET", "slow", "t", "NX", "PX", "60000")
    time.sleep(0.2)
    a.proc.signal(signal.SIGTERM)
    harness.wait_for(lambda: http(a.mport, "/readyz")[0] == 503, 2, 0.02,
                     "/readyz to answer 503 after SIGTERM")
    st, _, body = http(a.mport, "/readyz")
    assert (st, body) == (503, b"shutting down\n")
    assert http(a.mport, "/healthz")[0] == 200
    assert a.alive(), "exited before the in-flight command finished"
    assert c2.read_reply(timeout=15) == b"+OK\r\n"
    proxy.delay(0)
    assert a.wait(15) == 0
    t_exit = time.monotonic()
    with b.client() as cb:
        harness.wait_for(lambda: cb.cmd("SET", "lock", "tok-b", "NX", "PX", "60000") == b"+OK\r\n",
                         2.0, 0.02, "the lock to be free on the other sidecar")
    assert time.monotonic() - t_exit < 2.0
