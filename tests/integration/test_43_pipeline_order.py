"""Tier 43: a connection's pipeline order (scripts/queue.lua's Q.turn).

A connection's pipelined commands run side by side, in arrival order on each
key; a command without keys (KEYS, DBSIZE, FLUSHDB, PUBLISH, a script with no
KEYS, EXEC...) runs once every earlier command of its connection is done and
before any later one starts, as Redis runs a pipeline one command after
another.  Pipelines sent in one write to redis-server and to zkresp must get
the same replies; a command without keys pipelined behind a blocking
LOCK.ACQUIRE waits for it, and does not run at all once its client has gone.
"""

import time

import pytest

import harness
from resp import RawClient, encode


def pipelined(port, cmds, proto=2):
    """Sends cmds (lists of words) in one write; their raw replies."""
    with RawClient(port) as c:
        if proto == 3:
            c.send_cmd("HELLO", "3")
            c.read_reply()
        c.send(b"".join(encode(*cmd) for cmd in cmds))
        return [c.read_reply() for _ in cmds]


def sets(prefix, n):
    return [["SET", "%s%d" % (prefix, i), "v"] for i in range(n)]


PIPELINES = {
    # writes, then commands that list or count the keyspace
    "count_after_writes": lambda p: [["FLUSHDB"]] + sets(p, 40) + [
        ["DBSIZE"], ["EXISTS"] + ["%s%d" % (p, i) for i in range(40)],
        ["EVAL", "return #redis.call('keys', ARGV[1])", "0", p + "*"]],
    # a flush, then writes that must land after it
    "writes_after_flush": lambda p: [["SET", p + "a", "0"], ["FLUSHDB"], ["SET", p + "a", "1"],
                                     ["INCR", p + "n"], ["GET", p + "a"], ["DBSIZE"]],
    # a script with no KEYS reading what was pipelined before it
    "script_without_keys": lambda p: [["SET", p + "k", "1"], ["INCR", p + "k"],
                                      ["EVAL", "return redis.call('get', ARGV[1])", "0", p + "k"],
                                      ["EVAL", "return redis.call('incr', ARGV[1])", "0", p + "k"],
                                      ["GET", p + "k"]],
    # a transaction counting, then a flush and a count
    "exec_after_writes": lambda p: [["FLUSHDB"]] + sets(p, 20) + [
        ["MULTI"], ["DBSIZE"], ["EXEC"], ["FLUSHDB"], ["SET", p + "x", "1"], ["DBSIZE"]],
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_same_as_redis(name, proto, zkr, redis_ref):
    for round_ in range(5):
        p = harness.unique("%s%d" % (name, round_)) + ":"
        cmds = PIPELINES[name](p)
        ref = pipelined(redis_ref.port, cmds, proto)
        got = pipelined(zkr().port, cmds, proto)
        bad = ["%r: redis-server %r, zkresp %r" % (cmd, r, g)
               for cmd, r, g in zip(cmds, ref, got) if r != g]
        assert not bad, "round %d:\n%s" % (round_, "\n".join(bad))


@pytest.mark.parametrize("sub,pub", [("SUBSCRIBE", "PUBLISH"), ("SSUBSCRIBE", "SPUBLISH")])
def test_publish_keeps_the_order_of_a_script_that_publishes(zkr, sub, pub):
    """A PUBLISH pipelined behind a script that publishes is delivered
    after the script's message (the README said they might swap); so is an
    SPUBLISH (its channel is a key for cluster routing, not of the
    keyspace: it runs alone in its pipeline, as PUBLISH does)."""
    z = zkr()
    ch = harness.unique("ord-ch")
    rounds = 30
    with RawClient(z.port) as s, RawClient(z.port) as p:
        s.send_cmd(sub, ch)
        assert s.read_reply().startswith(b"*3\r\n$%d\r\n%s\r\n" % (len(sub), sub.lower().encode()))
        batch = b"".join(
            encode("EVAL", "redis.call('set', KEYS[1], ARGV[2]) "
                   "return redis.call(ARGV[3], ARGV[1], ARGV[2])",
                   "1", ch + ":k", ch, "s%d" % i, pub.lower()) + encode(pub, ch, "p%d" % i)
            for i in range(rounds))
        p.send(batch)
        for _ in range(2 * rounds):
            assert p.read_reply() == b":1\r\n"
        got = [s.read_reply().rsplit(b"\r\n", 2)[-2].decode() for _ in range(2 * rounds)]
        assert got == [m for i in range(rounds) for m in ("s%d" % i, "p%d" % i)]


def hold_lock(z, lock):
    with RawClient(z.port) as c:
        c.send_cmd("LOCK.ACQUIRE", lock, "holder", "PX", "30000")
        assert c.read_reply().startswith(b":")


def test_behind_a_blocking_acquire(zkr):
    """FLUSHDB pipelined behind a LOCK.ACQUIRE that waits runs after the
    acquire's reply, not while it waits."""
    z = zkr()
    lock, mark = harness.unique("ord-lock"), harness.unique("ord-mark")
    hold_lock(z, lock)
    with RawClient(z.port) as c, RawClient(z.port) as probe:
        probe.send_cmd("SET", mark, "v")
        assert probe.read_reply() == b"+OK\r\n"
        c.send(encode("LOCK.ACQUIRE", lock, "waiter", "WAIT", "1500") + encode("FLUSHDB"))
        time.sleep(0.5)  # (the acquire still waits: it times out at 1.5 s)
        probe.send_cmd("GET", mark)
        assert probe.read_reply() == b"$1\r\nv\r\n"
        assert c.read_reply() == b"$-1\r\n"  # (not granted within its WAIT)
        assert c.read_reply() == b"+OK\r\n"
        probe.send_cmd("EXISTS", mark)
        assert probe.read_reply() == b":0\r\n"
    with RawClient(z.port) as c:
        c.send_cmd("LOCK.RELEASE", lock, "holder")
        assert c.read_reply() == b":1\r\n"


def test_not_run_once_its_client_left(zkr):
    """A command waiting for its turn behind a blocking LOCK.ACQUIRE does
    not run once its client has closed the connection (Redis drops what it
    had not run)."""
    z = zkr()
    lock, mark = harness.unique("ord-lock2"), harness.unique("ord-mark2")
    hold_lock(z, lock)
    with RawClient(z.port) as probe:
        probe.send_cmd("SET", mark, "v")
        assert probe.read_reply() == b"+OK\r\n"
        c = RawClient(z.port)
        c.send(encode("LOCK.ACQUIRE", lock, "w-gone", "WAIT", "10000") + encode("FLUSHDB"))
        # (the waiter is in the lock's queue before the connection closes)
        deadline = time.time() + 10
        while True:
            probe.send_cmd("LOCK.INFO", lock)
            if b"w-gone" in probe.read_reply():
                break
            assert time.time() < deadline, "the acquire never queued"
            time.sleep(0.02)
        c.close()
        while True:
            probe.send_cmd("LOCK.INFO", lock)
            if b"w-gone" not in probe.read_reply():
                break
            assert time.time() < deadline, "the waiter never left the queue"
            time.sleep(0.02)
        probe.send_cmd("LOCK.RELEASE", lock, "holder")
        assert probe.read_reply() == b":1\r\n"
        time.sleep(0.3)  # (time for a FLUSHDB that would wrongly run)
        probe.send_cmd("GET", mark)
        assert probe.read_reply() == b"$1\r\nv\r\n"


# ------------------------------------------- found by a review of the first version


def test_key_order_kept_when_a_woken_turn_is_overtaken(zkr, redis_ref):
    """DBSIZE runs alone; SET k 1 and 30 keyed commands wait for their
    turn.  DBSIZE's end wakes them (they resume on the next loop turn) and
    its reply widens the client's window, so SET k 2 is read meanwhile: it
    must not start before the woken ones (a review found k ending as 1)."""
    for round_ in range(3):
        k = harness.unique("ovt%d" % round_)
        cmds = ([["DBSIZE"], ["SET", k, "1"]] +
                [["GET", "%s:f%d" % (k, i)] for i in range(30)] +
                [["SET", k, "2"], ["GET", k]])
        for port in (redis_ref.port, zkr().port):
            pipelined(port, cmds)
        with RawClient(redis_ref.port) as r, RawClient(zkr().port) as z:
            r.send_cmd("GET", k)
            z.send_cmd("GET", k)
            assert z.read_reply() == r.read_reply() == b"$1\r\n2\r\n", "round %d" % round_


def test_multi_queue_not_lost_when_a_woken_turn_is_overtaken(zkr, redis_ref):
    """The same inside MULTI: a MULTI queues as it is read (no turn), so a
    command queued after it is never lost to it (EXEC answered 30 replies
    for 31 QUEUEDs)."""
    k = harness.unique("ovtm")
    cmds = ([["DBSIZE"], ["MULTI"]] +
            [["GET", "%s:f%d" % (k, i)] for i in range(30)] +
            [["SET", k, "2"], ["EXEC"], ["GET", k]])
    ref = pipelined(redis_ref.port, cmds)
    got = pipelined(zkr().port, cmds)
    assert got[1:] == ref[1:]


def read_all(c, until=b"+PONG\r\n", limit=20):
    out = []
    while len(out) < limit:
        r = c.read_reply(timeout=5)
        out.append(r)
        if r == until:
            break
    return out


@pytest.mark.parametrize("after", [["UNSUBSCRIBE", "@"], ["RESET"], ["HELLO", "2"]])
def test_after_publish_to_self_resp3(zkr, redis_ref, after):
    """RESP3, subscribed to ch: SET; PUBLISH ch m; then UNSUBSCRIBE ch,
    RESET or HELLO 2; PING.  Redis runs PUBLISH first: the message reaches
    this client, as a RESP3 push, and PUBLISH counts it (:1).  Here PUBLISH
    waits for its turn behind SET, and the gateway holds the next command
    back until nothing else of its connection runs (a first version lost
    the message, or sent it in RESP2 after HELLO 2)."""
    pong2 = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"

    def run(port, ch):
        with RawClient(port) as c:
            c.send_cmd("HELLO", "3")
            c.read_reply()
            c.send_cmd("SUBSCRIBE", ch)
            c.read_reply()
            c.send(encode("SET", ch + ":k", "v") + encode("PUBLISH", ch, "m") +
                   encode(*[ch if a == "@" else a for a in after]) + encode("PING"))
            out = read_all(c, until=pong2 if after[0] == "HELLO" else b"+PONG\r\n")
            return [r for r in out if not r.startswith((b"%", b"*14"))]  # (HELLO's map)
    ch = harness.unique("self-ch")
    assert run(zkr().port, ch) == run(redis_ref.port, ch)


def test_subscribe_after_publish_resp2(zkr, redis_ref):
    """SET; PUBLISH ch; SUBSCRIBE ch; PING: Redis publishes to nobody (:0)
    before the subscription."""
    def run(port, ch):
        with RawClient(port) as c:
            c.send(encode("SET", ch + ":k", "v") + encode("PUBLISH", ch, "m") +
                   encode("SUBSCRIBE", ch) + encode("PING"))
            return read_all(c, until=b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")
    ch = harness.unique("sub-ch")
    assert run(zkr().port, ch) == run(redis_ref.port, ch)


def test_reset_after_a_waiting_multi_leaves_no_queue(make_zkresp):
    """DBSIZE; MULTI; SET; RESET: the gateway drops the MULTI queue at
    RESET (read time); a MULTI that waited for its turn behind DBSIZE
    would open it afterwards, for good (zkresp_lua_multi_queues 1)."""
    port = harness.free_port()
    z = make_zkresp(extra=["--metrics-port", port])
    z.metrics_port = port
    k = harness.unique("rst")
    with RawClient(z.port) as c:
        c.send(encode("DBSIZE") + encode("MULTI") + encode("SET", k, "v") + encode("RESET"))
        got = [c.read_reply() for _ in range(4)]
        assert got[1:] == [b"+OK\r\n", b"+QUEUED\r\n", b"+RESET\r\n"]
    time.sleep(0.5)
    assert harness.metric_value(z, "zkresp_lua_multi_queues") == 0


POLICY = r'''
local policy = {}
function policy.authenticate(user, password) return password == user .. "-pw" end
-- (README's key_path example, from scripts/policy.lua)
function policy.key_path(key, client)
    if client and client.user ~= "default" then
        return host.config.root .. "/t/" .. client.user .. "/" .. host.key_encode(key)
    end
end
return policy
'''


def test_delayed_command_keeps_its_user(make_zkresp, tmp_path):
    """As alice: DBSIZE; SET k v; RESET.  Redis runs SET as alice; here SET
    waits for its turn behind DBSIZE, and keeps the client it was read
    under (the policy's key_path sees alice, not the default user RESET
    made the connection)."""
    pol = tmp_path / "pol.lua"
    pol.write_text(POLICY)
    z = make_zkresp(extra=["--policy", str(pol)])
    k = harness.unique("who")
    with RawClient(z.port) as c:
        assert c.cmd("AUTH", "alice", "alice-pw") == b"+OK\r\n"
        c.send(encode("DBSIZE") + encode("SET", k, "v") + encode("RESET"))
        assert [c.read_reply() for _ in range(3)][1:] == [b"+OK\r\n", b"+RESET\r\n"]
        assert c.cmd("GET", k) == b"$-1\r\n"  # (default's keyspace: untouched)
        assert c.cmd("AUTH", "alice", "alice-pw") == b"+OK\r\n"
        assert c.cmd("GET", k) == b"$1\r\nv\r\n"


def test_closed_with_a_subscribe_held_back(zkr):
    """A SUBSCRIBE read while a command of its connection runs waits in the
    gateway; a connection closed meanwhile frees it (the ASan pass checks)
    and the sidecar serves on."""
    z = zkr()
    lock = harness.unique("held-lock")
    hold_lock(z, lock)
    for i in range(20):
        c = RawClient(z.port)
        c.send(encode("LOCK.ACQUIRE", lock, "w%d" % i, "WAIT", "200") +
               encode("SUBSCRIBE", lock + ":ch") + encode("PING"))
        c.close()
    with RawClient(z.port) as c:
        c.send(encode("LOCK.ACQUIRE", lock, "w", "WAIT", "50") + encode("SUBSCRIBE", lock + ":ch") +
               encode("PING"))
        assert c.read_reply() == b"$-1\r\n"
        assert c.read_reply().startswith(b"*3\r\n$9\r\nsubscribe\r\n")
        assert c.read_reply() == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    with RawClient(z.port) as c:
        c.send_cmd("LOCK.RELEASE", lock, "holder")
        assert c.read_reply() == b":1\r\n"


# ------------------------------------------------ found by a second review
@pytest.mark.parametrize("script", [
    "local i = 0 while true do i = i + 1 end",                     # time limit
    "local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(100) .. i end",  # memory limit
    "return redis.call('nosuchcommand')",
    "error('boom')",
    "return {err = 'x'}" ,
])
def test_connection_serves_after_a_failing_script(make_zkresp, script):
    """EVAL without KEYS (alone), DBSIZE, then later commands on the same
    connection: every one is answered."""
    z = make_zkresp(extra=["--script-time-limit", "300", "--script-memory-limit", "8388608"])
    with RawClient(z.port, timeout=15) as c:
        c.send(encode("EVAL", script, "0") + encode("DBSIZE") + encode("PING"))
        c.read_reply(timeout=15)
        assert c.read_reply(timeout=5).startswith(b":")
        assert c.read_reply(timeout=5) == b"+PONG\r\n"
        assert c.cmd("DBSIZE", timeout=5).startswith(b":")


RAISING_POLICY = r'''
local policy = {}
policy.commands = {
    boom = { fn = function(args) error("boom: a bug in a policy command") end, arity = 1 },
    boomk = { fn = function(args) error("boom: a bug in a policy command") end, arity = 2,
              first_key = 1, last_key = 1, step = 1 },
}
return policy
'''


@pytest.mark.parametrize("cmd", [["BOOM"], ["BOOMK", "k"]])
def test_connection_serves_after_an_internal_error(make_zkresp, tmp_path, cmd):
    """A command whose body raises (here a policy command's bug) is
    answered -ERR internal error; the connection's later commands, DBSIZE
    (alone) included, are still answered: the turn, a <close> variable of
    M.dispatch outside its xpcall, is closed when the error ends the
    coroutine (Lua 5.4 closes a dead coroutine's to-be-closed variables
    only when the host resets the thread)."""
    pol = tmp_path / "pol.lua"
    pol.write_text(RAISING_POLICY)
    z = make_zkresp(extra=["--policy", str(pol)])
    with RawClient(z.port, timeout=10) as c:
        assert c.cmd(*cmd).startswith(b"-ERR internal error")
        assert c.cmd("DBSIZE", timeout=5).startswith(b":")
        assert c.cmd("SET", harness.unique("after-boom"), "v", timeout=5) == b"+OK\r\n"


def test_info_keyspace_after_flush_and_sets(make_zkresp):
    """INFO keyspace, answered in C, waits for the FLUSHALL and SETs
    pipelined ahead of it (held back by the gateway)."""
    z = make_zkresp()
    p = harness.unique("ik")
    with RawClient(z.port) as c:
        c.send(encode("FLUSHALL") + b"".join(encode("SET", "%s%d" % (p, i), "v") for i in range(30)) +
               encode("INFO", "keyspace"))
        got = [c.read_reply() for _ in range(32)]
    assert b"db0:keys=30," in got[-1], got[-1]
