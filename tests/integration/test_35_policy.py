"""Tier 35: the policy API against a real ZooKeeper (issue 5, README
"Writing a policy").

  loading       --policy FILE; INFO's # Policy section; POLICY STATUS
  reload        SIGHUP and POLICY RELOAD change behaviour for clients that
                stay connected; a broken policy (syntax, a failed self-check)
                leaves the old one in force, and INFO and the log say why
  guard         a hook that raises fails only its command (-ERR policy: ...);
                a hook that loops forever is stopped, and the sidecar keeps
                serving other clients meanwhile and after
  AUTH users    the policy's authenticate hook: AUTH/HELLO AUTH of named
                users with Redis's exact WRONGPASS; --requirepass still
                rules the default user
  authorize     -NOPERM with the policy's reason, for commands and scripts
  commands      a policy's own command, listed by COMMAND, callable from a
                script

The example policies are tests/integration/test_36_policy_examples.py.
"""

import os
import signal
import threading
import time

import pytest
import redis

import harness

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def policy_path():
    d = harness.new_dir("policy")
    return os.path.join(d, "policy.lua")


def info_policy(z):
    return z.info("policy")


def wait_reloads(z, n, timeout=10):
    harness.wait_for(lambda: int(info_policy(z)["policy_reloads"]) + int(info_policy(z)["policy_reload_failures"]) >= n,
                     timeout, what="the policy reload to be processed")


CLAMP = """
return {
    ttl = function(key, ms) return math.min(ms, %d) end,
}
"""


def test_default_policy_in_info(make_zkresp):
    z = make_zkresp()
    i = info_policy(z)
    assert i["policy_file"].endswith("scripts/policy.lua")
    assert i["policy_last_load"] == "ok"
    assert i["policy_hooks"] == ""  # its hooks are comments: the defaults, unguarded
    assert abs(int(i["policy_loaded_at"]) - time.time()) < 120
    assert i["policy_reloads"] == "0"
    r = z.redis()
    # Redis semantics: a TTL kept as given, the key ephemeral.
    assert r.set("lock", "t", nx=True, px=123456)
    assert 120000 < r.pttl("lock") <= 123456
    st = r.execute_command("POLICY", "STATUS")
    assert st[0] == b"file" and st[1].endswith(b"scripts/policy.lua")
    # INFO without a section includes it; INFO policy gives only it.
    with z.admin() as c:
        everything = c.call("INFO")
    assert b"# Policy\r\n" in everything and b"# Zookeeper\r\n" in everything
    with z.admin() as c:
        only = c.call("INFO", "policy")
    assert only.startswith(b"# Policy\r\n") and b"# Server" not in only


def test_sighup_reload_changes_behaviour_for_connected_clients(make_zkresp, policy_path):
    write(policy_path, CLAMP % 5000)
    z = make_zkresp(extra=["--policy", policy_path])
    r = z.redis()
    r.client_setname("keeper")
    raw = z.client()
    my_id = r.client_id()
    r.set("k", "v", px=100000)
    assert 4000 < r.pttl("k") <= 5000
    write(policy_path, CLAMP % 2000)
    z.proc.signal(signal.SIGHUP)
    wait_reloads(z, 1)
    r.set("k", "v", px=100000)
    assert 1000 < r.pttl("k") <= 2000
    # The same connections, still open and usable.
    assert r.client_id() == my_id
    assert r.client_getname() == "keeper"
    assert raw.cmd("PING") == b"+PONG\r\n"
    assert "policy reloaded from" in z.log_tail(200)
    assert info_policy(z)["policy_reloads"] == "1"
    raw.close()


def test_broken_reload_keeps_the_old_policy(make_zkresp, policy_path):
    write(policy_path, CLAMP % 5000)
    z = make_zkresp(extra=["--policy", policy_path])
    r = z.redis()
    # A syntax error, by SIGHUP.
    write(policy_path, "return { ttl = function(key, ms) return ms end")
    z.proc.signal(signal.SIGHUP)
    wait_reloads(z, 1)
    i = info_policy(z)
    assert i["policy_last_load"] == "failed"
    assert "expected" in i["policy_last_error"], i
    assert "policy not reloaded, the old one stays" in z.log_tail(200)
    r.set("k", "v", px=100000)
    assert 4000 < r.pttl("k") <= 5000
    # A policy that loads but fails its self-check, by POLICY RELOAD.
    write(policy_path, "return { lifetime = function() return 'forever' end }")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("POLICY", "RELOAD")
    assert "policy not reloaded" in str(e.value) and "lifetime returned forever" in str(e.value)
    i = info_policy(z)
    assert i["policy_reload_failures"] == "2"
    assert "lifetime returned forever" in i["policy_last_error"]
    r.set("k2", "v", px=100000)
    assert 4000 < r.pttl("k2") <= 5000
    assert r.ttl("k2") > 0
    # Fixed again: in force at once.
    write(policy_path, CLAMP % 3000)
    assert r.execute_command("POLICY", "RELOAD") == b"OK"
    r.set("k3", "v", px=100000)
    assert 2000 < r.pttl("k3") <= 3000
    assert info_policy(z)["policy_last_load"] == "ok"


def test_unusable_policy_at_start_exits_2(make_zkresp, policy_path):
    write(policy_path, "return { key_path = function(k) return 'relative' end }")
    z = make_zkresp(extra=["--policy", policy_path], start=False)
    z.start(wait=False)
    assert z.wait(20) == 2
    assert "self-check" in z.log_tail(20)


HOOKS_THAT_FAIL = """
local policy = {}
function policy.key_path(key)
    if key == "loop" then while true do end end
    if key == "raise" then error("no path for this key") end
    if key == "relative" then return "not/absolute" end
end
function policy.ttl(key, ms)
    if key == "ttl-raise" then error("ttl hook broke") end
    return ms
end
function policy.on_acquire(key, info)
    if key == "bg-loop" then while true do end end
end
return policy
"""


def test_failing_hooks_fail_only_their_command(make_zkresp, policy_path):
    write(policy_path, HOOKS_THAT_FAIL)
    z = make_zkresp(extra=["--policy", policy_path])
    bad = z.redis()
    with pytest.raises(redis.ResponseError) as e:
        bad.set("raise", "v")
    assert str(e.value).startswith("policy: ") and "no path for this key" in str(e.value)
    with pytest.raises(redis.ResponseError) as e:
        bad.set("ttl-raise", "v", px=1000)
    assert "ttl hook broke" in str(e.value)
    assert bad.get("ttl-raise") is None  # nothing was written
    # The connection is fine afterwards.
    assert bad.set("fine", "v") and bad.get("fine") == b"v"
    assert int(info_policy(z)["policy_hook_errors"]) == 2
    assert "policy hook ttl failed" in z.log_tail(200)
    # An answer outside the contract fails the same way, logged and counted.
    with pytest.raises(redis.ResponseError) as e:
        bad.set("relative", "v")
    assert str(e.value) == "policy: key_path must return an absolute znode path or nil"
    assert int(info_policy(z)["policy_hook_errors"]) == 3
    assert "policy hook key_path failed: key_path must return" in z.log_tail(200)
    assert bad.get("fine") == b"v"


def test_a_hook_looping_forever_does_not_stop_the_sidecar(make_zkresp, policy_path):
    write(policy_path, HOOKS_THAT_FAIL)
    z = make_zkresp(extra=["--policy", policy_path])
    others = [z.redis() for _ in range(3)]
    stop = threading.Event()
    done, errors, worst = [0], [], [0.0]

    def worker(r, n):
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                assert r.set("w%d" % n, "v", nx=True, px=5000)
                assert r.delete("w%d" % n) == 1
            except Exception as ex:  # noqa: BLE001 - reported below
                errors.append(repr(ex))
                return
            worst[0] = max(worst[0], time.monotonic() - t0)
            done[0] += 1

    threads = [threading.Thread(target=worker, args=(r, n)) for n, r in enumerate(others)]
    for t in threads:
        t.start()
    try:
        looper = z.redis()
        for _ in range(3):
            t0 = time.monotonic()
            with pytest.raises(redis.ResponseError) as e:
                looper.get("loop")
            assert "key_path ran past its budget" in str(e.value)
            assert time.monotonic() - t0 < 5
        # A notification hook looping in the background: the SET answers.
        assert looper.set("bg-loop", "v", nx=True, px=5000)
        assert looper.get("bg-loop") == b"v"
        before = done[0]
        harness.wait_for(lambda: done[0] > before + 20, 10, what="other clients to go on")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert worst[0] < 5, "a client waited %.1f s" % worst[0]
    assert z.alive()
    assert looper.ping()
    assert int(info_policy(z)["policy_hook_errors"]) >= 4


USERS = """
local USERS = { alice = "alice-pw", bob = "bob-pw" }
return {
    authenticate = function(user, password) return USERS[user] == password end,
    authorize = function(client, command, keys)
        if client.user == "bob" and command ~= "get" and command ~= "eval" then
            return false
        end
        for _, k in ipairs(keys) do
            if k:find("^private:") and client.user ~= "alice" then
                return "only alice may touch " .. k
            end
        end
    end,
}
"""


def test_auth_users_from_the_policy(make_zkresp, policy_path):
    write(policy_path, USERS)
    z = make_zkresp(extra=["--policy", policy_path, "--requirepass", "default-pw"])
    c = z.client()
    assert c.cmd("GET", "x").startswith(b"-NOAUTH")
    assert c.cmd("AUTH", "alice", "wrong") == ("-%s\r\n" % WRONGPASS).encode()
    assert c.cmd("AUTH", "mallory", "alice-pw") == ("-%s\r\n" % WRONGPASS).encode()
    assert c.cmd("AUTH", "alice", "alice-pw") == b"+OK\r\n"
    assert c.cmd("SET", "private:1", "v") == b"+OK\r\n"
    info = c.call("CLIENT", "INFO")
    assert b" user=alice " in info
    # The default user is --requirepass's.
    assert c.cmd("AUTH", "default", "alice-pw") == ("-%s\r\n" % WRONGPASS).encode()
    assert c.cmd("AUTH", "default-pw") == b"+OK\r\n"
    assert b" user=default " in c.call("CLIENT", "INFO")
    assert c.cmd("GET", "private:1").startswith(b"-NOPERM only alice may touch private:1")
    c.close()
    # HELLO AUTH, and redis-py with a username.
    c = z.client()
    hello = c.call("HELLO", "3", "AUTH", "bob", "bob-pw")
    assert isinstance(hello, dict) and hello[b"proto"] == 3
    assert c.cmd("HELLO", "2", "AUTH", "bob", "nope").startswith(b"-WRONGPASS")
    c.close()
    bob = z.redis(username="bob", password="bob-pw")
    assert bob.get("k") is None
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        bob.set("k", "v")
    assert str(e.value) == "User bob has no permissions to run the 'set' command"
    # From a script too: the script fails with the NOPERM error.
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        bob.eval("return redis.call('set', KEYS[1], 'v')", 1, "k")
    assert "User bob has no permissions to run the 'set' command" in str(e.value)
    alice = z.redis(username="alice", password="alice-pw")
    assert alice.get("private:1") == b"v"
    # RESET drops the user.
    c = z.client()
    assert c.cmd("AUTH", "alice", "alice-pw") == b"+OK\r\n"
    assert c.cmd("RESET") == b"+RESET\r\n"
    assert c.cmd("GET", "x").startswith(b"-NOAUTH")
    c.close()
    assert "alice-pw" not in z.log_tail(2000)


def test_named_users_without_an_authenticate_hook(make_zkresp):
    z = make_zkresp(extra=["--requirepass", "pw"])
    c = z.client()
    assert c.cmd("AUTH", "alice", "pw") == ("-%s\r\n" % WRONGPASS).encode()
    assert c.cmd("AUTH", "default", "pw") == b"+OK\r\n"
    c.close()


COMMANDS = """
local T = require "txn"
return {
    commands = {
        holder = { arity = 2, first_key = 1, last_key = 1, step = 1, flags = "readonly fast",
            fn = function(args)
                return T.run({ args[2] }, function(t)
                    local rec = t:read(args[2])
                    if not rec.live then return host.null end
                    return { rec.value, rec.node.czxid }
                end)
            end },
    },
}
"""


def test_policy_commands_are_listed_and_callable(make_zkresp, policy_path):
    write(policy_path, COMMANDS)
    z = make_zkresp(extra=["--policy", policy_path])
    r = z.redis()
    with z.client() as c:
        info = c.call("COMMAND", "INFO", "holder")
        names = [e[0] for e in c.call("COMMAND")]
        count = c.call("COMMAND", "COUNT")
    assert info[0][0] == b"holder" and info[0][1] == 2 and info[0][3:6] == [1, 1, 1], info
    assert b"holder" in names and b"policy" in names
    assert count == len(names)
    assert r.execute_command("HOLDER", "l") is None
    r.set("l", "tok", nx=True, px=10000)
    value, token = r.execute_command("HOLDER", "l")
    assert value == b"tok" and token > 0
    assert r.eval("return redis.call('holder', KEYS[1])", 1, "l")[0] == b"tok"
    # Gone with a reload that drops it.
    write(policy_path, "return {}")
    assert r.execute_command("POLICY", "RELOAD") == b"OK"
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("HOLDER", "l")
    assert "unknown command 'HOLDER'" in str(e.value)
