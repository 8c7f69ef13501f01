"""Tier 24: Redisson's lock scripts, sent raw, through two zkresp processes.

The scripts below are written for these tests from COMPAT.md's description
("How the clients wait and renew") in the shape of Redisson's own Lua: the
reentrant hash lock (RedissonLock), the batched watchdog renewal over many
KEYS, unlock with its latch key, the fair lock (RedissonFairLock: a list of
waiters and a zset of their timeouts), the read-write lock (`mode` field,
read holders with per-hold timeout keys outside KEYS), the fenced lock
(`{-1, token}`, the token from INCR on a companion key) and the semaphore.

They are sent as Redisson sends them: EVALSHA first, SCRIPT LOAD on NOSCRIPT,
then EVALSHA again, over RESP2, and every reply is compared byte for byte
with the type Redisson decodes: acquire `$-1` on success and the PTTL as an
integer on failure, unlock `:1`/`:0`/`$-1`, renewal `:1`/`:0` (or a list of
them), the fenced lock `*2 :-1 :token`.

PUBLISH answers :0 until pub/sub lands (issue 4): nobody can subscribe yet.
"""

import hashlib
import re
import threading
import time

import pytest

import harness
from redisson_scripts import ACQUIRE, RENEW_ONE, UNLOCK
from history import LockHistory

NULL = b"$-1\r\n"
ONE = b":1\r\n"
ZERO = b":0\r\n"
LEASE = 30000
# A sidecar that did not write a key maps its deadline from the node's mtime
# and errs late by up to the write's reply latency (keyspace.lua, "Time"), so
# its PTTL may exceed the TTL just set by a few ms; Redis never does.  Upper
# bounds on a TTL allow this much.
SKEW = 1000


def sha(script):
    return hashlib.sha1(script.encode()).hexdigest()


def integer(raw, lo=None, hi=None):
    """The value of an integer reply; fails on any other type or bound.
    hi is a TTL: SKEW is allowed above it."""
    m = re.fullmatch(rb":(-?\d+)\r\n", raw)
    assert m, "expected an integer reply, got %r" % raw
    v = int(m.group(1))
    if lo is not None:
        assert v >= lo, raw
    if hi is not None:
        assert v <= hi + SKEW, raw
    return v


def bulk(s):
    s = s if isinstance(s, bytes) else str(s).encode()
    return b"$%d\r\n%s\r\n" % (len(s), s)


class Redisson:
    """One Redisson connection: EVALSHA, SCRIPT LOAD on NOSCRIPT, EVALSHA."""

    def __init__(self, z):
        self.c = z.client(timeout=30)
        self.uuid = harness.unique("uuid")

    def lock_name(self, thread):
        return "%s:%s" % (self.uuid, thread)

    def eval(self, script, keys, args, tryagain=True):
        h = sha(script)
        while True:
            raw = self.c.cmd("EVALSHA", h, str(len(keys)), *keys, *[str(a) for a in args])
            if raw.startswith(b"-NOSCRIPT"):
                assert raw == b"-NOSCRIPT No matching script. Please use EVAL.\r\n", raw
                assert self.c.cmd("SCRIPT", "LOAD", script) == bulk(h)
                continue
            if tryagain and raw.startswith(b"-TRYAGAIN"):
                continue  # nothing was committed; Redisson's retry policy resends
            return raw

    def cmd(self, *args):
        return self.c.cmd(*args)

    def call(self, *args):
        return self.c.call(*args)

    def close(self):
        self.c.close()


@pytest.fixture
def pair(zkresp_pair):
    a, b = zkresp_pair
    ra, rb = Redisson(a), Redisson(b)
    yield ra, rb
    ra.close()
    rb.close()


# ------------------------------------------------------------ the scripts

# The batched renewal of recent versions: up to 100 locks per script.
# KEYS: the locks.  ARGV: lease, then each lock's holder.
RENEW_MANY = """
local result = {};
for i = 1, #KEYS, 1 do
  if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then
    redis.call('pexpire', KEYS[i], ARGV[1]);
    table.insert(result, 1);
  else
    table.insert(result, 0);
  end;
end;
return result;
"""

def acquire(r, name, thread, lease=LEASE):
    return r.eval(ACQUIRE, [name], [lease, r.lock_name(thread)])


def unlock(r, name, thread, request=None, lease=LEASE):
    latch = "redisson_unlock_latch:{%s}:%s" % (name, request or harness.unique("req"))
    return r.eval(UNLOCK, [name, "redisson_lock__channel:{%s}" % name, latch],
                  [0, lease, r.lock_name(thread), "publish", 3000])


# RedissonFairLock.tryLockInnerAsync.  KEYS: lock, queue list, timeout zset.
# ARGV: lease, holder, thread wait time, now (ms).
FAIR_ACQUIRE = """
while true do
  local first = redis.call('lindex', KEYS[2], 0);
  if first == false then break; end;
  local timeout = tonumber(redis.call('zscore', KEYS[3], first));
  if timeout <= tonumber(ARGV[4]) then
    redis.call('zrem', KEYS[3], first);
    redis.call('lpop', KEYS[2]);
  else
    break;
  end;
end;
if (redis.call('exists', KEYS[1]) == 0)
   and ((redis.call('exists', KEYS[2]) == 0)
        or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then
  redis.call('lpop', KEYS[2]);
  redis.call('zrem', KEYS[3], ARGV[2]);
  local waiting = redis.call('zrange', KEYS[3], 0, -1);
  for i = 1, #waiting, 1 do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiting[i]);
  end;
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
local mine = redis.call('zscore', KEYS[3], ARGV[2]);
if mine ~= false then
  return mine - tonumber(ARGV[3]) - tonumber(ARGV[4]);
end;
local last = redis.call('lindex', KEYS[2], -1);
local ttl;
if last ~= false and last ~= ARGV[2] then
  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4]);
else
  ttl = redis.call('pttl', KEYS[1]);
end;
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;
"""

# RedissonFairLock.unlockInnerAsync.  KEYS: lock, queue, timeouts, channel
# prefix.  ARGV: message 0, lease, holder, now, publish command.  Wakes the
# first waiter on its own channel.
FAIR_UNLOCK = """
while true do
  local first = redis.call('lindex', KEYS[2], 0);
  if first == false then break; end;
  local timeout = tonumber(redis.call('zscore', KEYS[3], first));
  if timeout <= tonumber(ARGV[4]) then
    redis.call('zrem', KEYS[3], first);
    redis.call('lpop', KEYS[2]);
  else
    break;
  end;
end;
if (redis.call('exists', KEYS[1]) == 0) then
  local nextThread = redis.call('lindex', KEYS[2], 0);
  if nextThread ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. nextThread, ARGV[1]);
  end;
  return 1;
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
  return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  return 0;
end;
redis.call('del', KEYS[1]);
local nextThread = redis.call('lindex', KEYS[2], 0);
if nextThread ~= false then
  redis.call(ARGV[5], KEYS[4] .. ':' .. nextThread, ARGV[1]);
end;
return 1;
"""

# RedissonReadLock.tryLockInnerAsync.  KEYS: lock, this holder's timeout
# prefix.  ARGV: lease, holder, the holder's write-lock name.  The per-hold
# timeout keys (KEYS[2] .. ':' .. n) are not declared in KEYS.
READ_ACQUIRE = """
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'read');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':1', 1);
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1);
  redis.call('pexpire', key, ARGV[1]);
  local remainTime = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);
"""

# RedissonReadLock.unlockInnerAsync.  KEYS: lock, channel, this holder's
# timeout prefix, the key prefix.  ARGV: message 0, holder.
READ_UNLOCK = """
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('publish', KEYS[2], ARGV[1]);
  return 1;
end;
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
if (lockExists == 0) then
  return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter == 0) then
  redis.call('hdel', KEYS[1], ARGV[2]);
end;
redis.call('del', KEYS[3] .. ':' .. (counter + 1));
if (redis.call('hlen', KEYS[1]) > 1) then
  local maxRemainTime = -3;
  local keys = redis.call('hkeys', KEYS[1]);
  for n, key in ipairs(keys) do
    counter = tonumber(redis.call('hget', KEYS[1], key));
    if type(counter) == 'number' then
      for i = counter, 1, -1 do
        local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
        maxRemainTime = math.max(remainTime, maxRemainTime);
      end;
    end;
  end;
  if maxRemainTime > 0 then
    redis.call('pexpire', KEYS[1], maxRemainTime);
    return 0;
  end;
  if mode == 'write' then
    return 0;
  end;
end;
redis.call('del', KEYS[1]);
redis.call('publish', KEYS[2], ARGV[1]);
return 1;
"""

# RedissonWriteLock.tryLockInnerAsync.  KEYS: lock.  ARGV: lease, the
# holder's write-lock name ("<uuid>:<tid>:write").
WRITE_ACQUIRE = """
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'write');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'write') then
  if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    local currentExpire = redis.call('pttl', KEYS[1]);
    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]);
    return nil;
  end;
end;
return redis.call('pttl', KEYS[1]);
"""

# RedissonWriteLock.unlockInnerAsync.  KEYS: lock, channel.  ARGV: message,
# lease, write-lock name.
WRITE_UNLOCK = """
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('publish', KEYS[2], ARGV[1]);
  return 1;
end;
if (mode == 'write') then
  local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
  if (lockExists == 0) then
    return nil;
  else
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
    if (counter > 0) then
      redis.call('pexpire', KEYS[1], ARGV[2]);
      return 0;
    else
      redis.call('hdel', KEYS[1], ARGV[3]);
      if (redis.call('hlen', KEYS[1]) == 1) then
        redis.call('del', KEYS[1]);
        redis.call('publish', KEYS[2], ARGV[1]);
      else
        redis.call('hset', KEYS[1], 'mode', 'read');
      end;
      return 1;
    end;
  end;
end;
return nil;
"""

# RedissonFencedLock.tryLockInnerAsync.  KEYS: lock, token counter.
# ARGV: lease, holder.  {-1, token} when held, {pttl, -1} when not.
FENCED_ACQUIRE = """
if (redis.call('exists', KEYS[1]) == 0) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  local token = redis.call('incr', KEYS[2]);
  return {-1, token};
end;
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  local token = redis.call('get', KEYS[2]);
  return {-1, token};
end;
return {redis.call('pttl', KEYS[1]), -1};
"""

# RedissonSemaphore.  KEYS: permits counter, channel.
SEM_TRY_SET = """
local value = redis.call('get', KEYS[1]);
if (value == false) then
  redis.call('set', KEYS[1], ARGV[1]);
  redis.call('publish', KEYS[2], ARGV[1]);
  return 1;
end;
return 0;
"""

SEM_ACQUIRE = """
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
  local val = redis.call('decrby', KEYS[1], ARGV[1]);
  return 1;
end;
return 0;
"""

SEM_RELEASE = """
local value = redis.call('incrby', KEYS[1], ARGV[1]);
redis.call('publish', KEYS[2], value);
"""


# ------------------------------------------------------------------ tests

def test_cluster_probe_answers_null(pair):
    """Redisson's connect-time probe, sent as EVAL."""
    for r in pair:
        assert r.cmd("EVAL", "redis.call('get', KEYS[1]) redis.call('get', KEYS[2])",
                     "2", "test1", "test2") == NULL


def test_loads_on_noscript_then_evalsha(pair):
    # Redisson's flow: EVALSHA, SCRIPT LOAD on NOSCRIPT, EVALSHA again.  The
    # script cache is shared, so the other sidecar knows the script too.
    a, b = pair
    body = "return redis.call('pttl', KEYS[1]) -- %s" % harness.unique("noscript")
    for r in (a, b):
        assert r.cmd("EVALSHA", sha(body), "1", "k") == b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
    assert a.cmd("SCRIPT", "LOAD", body) == bulk(sha(body))
    for r in (a, b):
        assert r.cmd("EVALSHA", sha(body), "1", "k") == b":-2\r\n"
        assert r.cmd("SCRIPT", "EXISTS", sha(body), "0" * 40) == b"*2\r\n:1\r\n:0\r\n"


def test_reentrant_hash_lock(pair):
    a, b = pair
    name = harness.unique("rlock")
    assert acquire(a, name, 1) == NULL
    assert a.cmd("HGET", name, a.lock_name(1)) == bulk("1")
    integer(a.cmd("PTTL", name), LEASE - 2000, LEASE)
    # Reentry by the same thread increments the hold count.
    assert acquire(a, name, 1, lease=LEASE + 5000) == NULL
    assert b.cmd("HGET", name, a.lock_name(1)) == bulk("2")
    integer(b.cmd("PTTL", name), LEASE + 3000, LEASE + 5000)
    # Another thread of the same client and a thread of another client, on
    # the other sidecar: the PTTL as an integer, and no change.
    integer(acquire(a, name, 2), 1, LEASE + 5000)
    integer(acquire(b, name, 1), 1, LEASE + 5000)
    assert b.cmd("HGETALL", name) == b"*2\r\n" + bulk(a.lock_name(1)) + bulk("2")
    assert b.cmd("TYPE", name) == b"+hash\r\n"


def test_unlock_with_latch(pair):
    a, b = pair
    name = harness.unique("rlock")
    assert acquire(a, name, 7) == NULL
    assert acquire(a, name, 7) == NULL
    # Not the holder: null, nothing changes.
    assert unlock(b, name, 7) == NULL
    assert unlock(a, name, 8) == NULL
    # One of two holds: 0, the lease renewed, the latch records the answer.
    assert unlock(b, name, 7, request="r1") == NULL  # b's uuid is not a's
    assert unlock(a, name, 7, request="r1", lease=40000) == ZERO
    assert a.cmd("HGET", name, a.lock_name(7)) == bulk("1")
    integer(a.cmd("PTTL", name), 38000, 40000)
    assert b.cmd("GET", "redisson_unlock_latch:{%s}:r1" % name) == bulk("0")
    integer(b.cmd("PTTL", "redisson_unlock_latch:{%s}:r1" % name), 1, 3000)
    # The same request resent (a retry after a timeout) answers the same.
    assert unlock(a, name, 7, request="r1") == ZERO
    assert a.cmd("HGET", name, a.lock_name(7)) == bulk("1")
    # The last hold: 1, the lock deleted, the unlock message published.
    assert unlock(a, name, 7, request="r2") == ONE
    assert b.cmd("EXISTS", name) == ZERO
    assert b.cmd("GET", "redisson_unlock_latch:{%s}:r2" % name) == bulk("1")
    assert unlock(b, name, 7, request="r2") == ONE  # b sees a's latch
    assert unlock(a, name, 7, request="r3") == NULL
    # Free again, for a holder on the other sidecar.
    assert acquire(b, name, 1) == NULL


def test_unlock_publishes_through_spublish_too(pair):
    a, _ = pair
    name = harness.unique("rlock")
    assert acquire(a, name, 1) == NULL
    latch = "redisson_unlock_latch:{%s}:x" % name
    assert a.eval(UNLOCK, [name, "redisson_lock__channel:{%s}" % name, latch],
                  [0, LEASE, a.lock_name(1), "spublish", 3000]) == ONE
    assert a.cmd("PUBLISH", "redisson_lock__channel:{%s}" % name, "0") == ZERO


def test_watchdog_renewal(pair):
    a, b = pair
    name = harness.unique("rlock")
    assert acquire(a, name, 1, lease=5000) == NULL
    assert b.eval(RENEW_ONE, [name], [LEASE, a.lock_name(1)]) == ONE
    integer(a.cmd("PTTL", name), LEASE - 2000, LEASE)
    assert b.eval(RENEW_ONE, [name], [LEASE, a.lock_name(2)]) == ZERO
    assert b.eval(RENEW_ONE, [name + "-none"], [LEASE, a.lock_name(1)]) == ZERO
    assert b.cmd("EXISTS", name + "-none") == ZERO


def batched_renewal(pair, count):
    """count locks: 8 in 10 held by a's thread 1 (renewed), 1 in 10 by b's
    (not a's: left alone), 1 in 10 missing (not created)."""
    a, b = pair
    base = harness.unique("wd")
    names = ["%s:%d" % (base, i) for i in range(count)]
    for i, n in enumerate(names):
        if i % 10 == 3:
            assert acquire(b, n, 1, lease=5000) == NULL
        elif i % 10 != 7:
            assert acquire(a, n, 1, lease=5000) == NULL
    raw = b.eval(RENEW_MANY, names, [LEASE] + [a.lock_name(1)] * count)
    want = b"*%d\r\n" % count + b"".join(ZERO if i % 10 in (3, 7) else ONE for i in range(count))
    assert raw == want
    for i, n in enumerate(names):
        p = integer(a.cmd("PTTL", n))
        if i % 10 == 7:
            assert p == -2, (n, p)
        elif i % 10 == 3:
            assert 0 < p <= 5000 + SKEW, (n, p)
        else:
            assert LEASE - 5000 <= p <= LEASE + SKEW, (n, p)


def test_batched_watchdog_renewal(pair):
    batched_renewal(pair, 10)


# A commit of a hundred operations: once l_zk_multi left every operation on
# the Lua stack and corrupted the heap of the release build (ASan's layout
# hid it); see also test_large_del below.
def test_batched_watchdog_renewal_over_100_keys(pair):
    """Recent Redisson renews up to 100 locks in one script."""
    batched_renewal(pair, 100)


def test_fair_lock_queue(pair):
    a, b = pair
    name = harness.unique("fair")
    queue, timeouts = "redisson_lock_queue:{%s}" % name, "redisson_lock_timeout:{%s}" % name
    wait = 5000
    keys = [name, queue, timeouts]

    def fair(r, t, now=None):
        now = int(time.time() * 1000) if now is None else now
        return r.eval(FAIR_ACQUIRE, keys, [LEASE, r.lock_name(t), wait, now])

    def fair_unlock(r, t, now=None):
        now = int(time.time() * 1000) if now is None else now
        return r.eval(FAIR_UNLOCK, keys + ["redisson_lock__channel:{%s}" % name],
                      [0, LEASE, r.lock_name(t), now, "publish"])

    assert fair(a, 1) == NULL
    assert a.cmd("EXISTS", queue) == ZERO
    # Two waiters on the other sidecar queue up, each answered with a TTL.
    t2 = integer(fair(b, 2), LEASE - 3000, LEASE)
    now = int(time.time() * 1000)
    s2 = float(b.call("ZSCORE", timeouts, b.lock_name(2)))
    assert now + LEASE + wait - 3000 <= s2 <= now + LEASE + wait + SKEW, (now, s2)
    t3 = integer(fair(b, 3), t2 + wait - 3000, t2 + wait + 3000)
    assert a.call("LRANGE", queue, "0", "-1") == [b.lock_name(2).encode(), b.lock_name(3).encode()]
    assert a.cmd("ZCARD", timeouts) == b":2\r\n"
    # A waiter already queued gets its remaining time, and stays queued once.
    integer(fair(b, 2), 1, LEASE)
    assert a.cmd("LLEN", queue) == b":2\r\n"
    # Reentry by the holder.
    assert fair(a, 1) == NULL
    assert b.cmd("HGET", name, a.lock_name(1)) == bulk("2")
    # Unlock: not the holder -> null; one of two holds -> 0; the last -> 1.
    assert fair_unlock(b, 2) == NULL
    assert fair_unlock(a, 1) == ZERO
    assert fair_unlock(a, 1) == ONE
    assert b.cmd("EXISTS", name) == ZERO
    # The second in line may not jump the queue; the first takes the lock,
    # leaves the queue, and the others' timeouts drop by the wait time.
    integer(fair(b, 3), 1, t3 + wait)
    assert b.cmd("EXISTS", name) == ZERO
    s3_before = float(a.call("ZSCORE", timeouts, b.lock_name(3)))
    assert fair(b, 2) == NULL
    assert a.call("LRANGE", queue, "0", "-1") == [b.lock_name(3).encode()]
    assert a.cmd("ZSCORE", timeouts, b.lock_name(2)) == NULL
    assert float(a.call("ZSCORE", timeouts, b.lock_name(3))) == s3_before - wait
    # A waiter whose timeout passed is dropped by the next attempt.
    far = int(time.time() * 1000) + 10 * (LEASE + wait)
    integer(fair(a, 4, now=far), 0, 10 ** 13)
    assert a.call("LRANGE", queue, "0", "-1") == [a.lock_name(4).encode()]
    assert fair_unlock(b, 2) == ONE
    assert fair_unlock(b, 2) == ONE  # no lock: 1, and the next waiter is woken
    assert fair(a, 4) == NULL
    assert a.cmd("EXISTS", queue) == ZERO
    assert a.cmd("EXISTS", timeouts) == ZERO


def test_read_write_lock(pair):
    a, b = pair
    name = harness.unique("rw")
    channel = "redisson_rwlock:{%s}" % name

    def prefix(r, t):
        return "{%s}:%s:rwlock_timeout" % (name, r.lock_name(t))

    def read(r, t):
        return r.eval(READ_ACQUIRE, [name, prefix(r, t)],
                      [LEASE, r.lock_name(t), r.lock_name(t) + ":write"])

    def read_unlock(r, t):
        return r.eval(READ_UNLOCK, [name, channel, prefix(r, t), "{%s}" % name], [0, r.lock_name(t)])

    def write(r, t):
        return r.eval(WRITE_ACQUIRE, [name], [LEASE, r.lock_name(t) + ":write"])

    def write_unlock(r, t):
        return r.eval(WRITE_UNLOCK, [name, channel], [0, LEASE, r.lock_name(t) + ":write"])

    # Two readers on two sidecars share it; a writer gets the PTTL.
    assert read(a, 1) == NULL
    assert b.cmd("HGET", name, "mode") == bulk("read")
    assert read(b, 1) == NULL
    assert read(a, 1) == NULL  # reentry: hold 2, a second timeout key
    assert b.cmd("HGET", name, a.lock_name(1)) == bulk("2")
    integer(b.cmd("PTTL", prefix(a, 1) + ":2"), LEASE - 3000, LEASE)
    integer(write(b, 2), 1, LEASE)
    # Unlocking one read hold while others remain: 0.
    assert read_unlock(a, 1) == ZERO
    assert b.cmd("EXISTS", prefix(a, 1) + ":2") == ZERO
    assert read_unlock(a, 1) == ZERO
    assert b.cmd("HEXISTS", name, a.lock_name(1)) == ZERO
    assert read_unlock(a, 1) == NULL  # no longer a holder
    assert read_unlock(b, 1) == ONE  # the last reader deletes the lock
    assert a.cmd("EXISTS", name) == ZERO
    assert read_unlock(b, 1) == ONE  # nothing held: 1, as Redisson expects
    # A writer; reentry adds its lease to the remaining time.
    assert write(b, 2) == NULL
    assert a.cmd("HGET", name, "mode") == bulk("write")
    assert write(b, 2) == NULL
    integer(a.cmd("PTTL", name), 2 * LEASE - 5000, 2 * LEASE)
    integer(read(a, 3), 1, 2 * LEASE)  # another thread may not read
    integer(write(a, 3), 1, 2 * LEASE)
    assert read(b, 2) == NULL  # the writer may also read (downgrade)
    assert write_unlock(a, 3) == NULL
    assert write_unlock(b, 2) == ZERO
    assert write_unlock(b, 2) == ONE  # its read hold remains: mode is read
    assert a.cmd("HGET", name, "mode") == bulk("read")
    assert read(a, 3) == NULL
    assert read_unlock(b, 2) == ZERO
    assert read_unlock(a, 3) == ONE
    assert b.cmd("EXISTS", name) == ZERO


def test_fenced_lock_tokens_increase_across_sidecars(pair):
    a, b = pair
    name = harness.unique("fenced")
    token_key = "redisson_lock_token:{%s}" % name
    tokens = []
    for i in range(8):
        r, other = (a, b) if i % 2 == 0 else (b, a)
        raw = r.eval(FENCED_ACQUIRE, [name, token_key], [LEASE, r.lock_name(1)])
        m = re.fullmatch(rb"\*2\r\n:-1\r\n:(\d+)\r\n", raw)
        assert m, raw
        tokens.append(int(m.group(1)))
        # Reentry: the current token, read with GET (a bulk string).
        assert r.eval(FENCED_ACQUIRE, [name, token_key], [LEASE, r.lock_name(1)]) == \
            b"*2\r\n:-1\r\n" + bulk(tokens[-1])
        # Another holder: {pttl, -1}.
        raw = other.eval(FENCED_ACQUIRE, [name, token_key], [LEASE, other.lock_name(1)])
        m = re.fullmatch(rb"\*2\r\n:(\d+)\r\n:-1\r\n", raw)
        assert m and 0 < int(m.group(1)) <= LEASE + SKEW, raw
        assert unlock(r, name, 1) == ZERO
        assert unlock(r, name, 1) == ONE
    assert tokens == list(range(1, 9))
    assert a.cmd("GET", token_key) == bulk("8")


def test_semaphore(pair):
    a, b = pair
    name = harness.unique("sem")
    keys = [name, "redisson_sc:{%s}" % name]
    assert a.eval(SEM_ACQUIRE, keys, [1]) == ZERO  # no permits set yet
    assert a.eval(SEM_TRY_SET, keys, [3]) == ONE
    assert b.eval(SEM_TRY_SET, keys, [5]) == ZERO
    assert a.eval(SEM_ACQUIRE, keys, [2]) == ONE
    assert b.eval(SEM_ACQUIRE, keys, [2]) == ZERO
    assert b.eval(SEM_ACQUIRE, keys, [1]) == ONE
    assert a.cmd("GET", name) == bulk("0")
    assert b.eval(SEM_RELEASE, keys, [2]) == NULL  # EVAL_VOID: no return value
    assert a.cmd("GET", name) == bulk("2")
    assert b.eval(SEM_ACQUIRE, keys, [2]) == ONE
    assert a.eval(SEM_RELEASE, keys, [3]) == NULL
    assert b.cmd("GET", name) == bulk("3")


def test_semaphore_under_contention(pair, zkresp_pair):
    za, zb = zkresp_pair
    name = harness.unique("sem")
    keys = [name, "redisson_sc:{%s}" % name]
    permits = 2
    assert pair[0].eval(SEM_TRY_SET, keys, [permits]) == ONE
    state = {"in": 0, "max": 0, "got": 0}
    lock = threading.Lock()
    errors = []

    def worker(z):
        r = Redisson(z)
        try:
            got = 0
            while got < 8:
                raw = r.eval(SEM_ACQUIRE, keys, [1])
                if raw == ZERO:
                    time.sleep(0.002)
                    continue
                if raw != ONE:
                    errors.append(raw)
                    return
                with lock:
                    state["in"] += 1
                    state["max"] = max(state["max"], state["in"])
                    state["got"] += 1
                time.sleep(0.002)
                with lock:
                    state["in"] -= 1
                raw = r.eval(SEM_RELEASE, keys, [1])
                if raw != NULL:
                    errors.append(raw)
                    return
                got += 1
        finally:
            r.close()
    ts = [threading.Thread(target=worker, args=((za, zb)[i % 2],)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]
    assert state["got"] == 48
    assert 1 <= state["max"] <= permits
    assert pair[1].cmd("GET", name) == bulk(permits)


@pytest.mark.parametrize("kind", ["hash", "fenced"])
def test_no_two_holders_across_sidecars(zkresp_pair, kind):
    """Threads on both sidecars take and give back one lock through the
    scripts, with a reentrant hold in the middle; the recorded holds never
    overlap, and the fenced lock's tokens increase in acquisition order."""
    za, zb = zkresp_pair
    name = harness.unique("contended")
    token_key = "redisson_lock_token:{%s}" % name
    hist = LockHistory()
    errors = []
    rounds = 6

    def worker(z, thread):
        r = Redisson(z)
        try:
            done = 0
            while done < rounds:
                if kind == "hash":
                    raw = acquire(r, name, thread)
                    ok, fence = raw == NULL, None
                    if not ok:
                        integer(raw, 1, LEASE)
                else:
                    raw = r.eval(FENCED_ACQUIRE, [name, token_key], [LEASE, r.lock_name(thread)])
                    m = re.fullmatch(rb"\*2\r\n:(-?\d+)\r\n:(-?\d+)\r\n", raw)
                    assert m, raw
                    ok, fence = m.group(1) == b"-1", int(m.group(2))
                    if not ok:
                        assert fence == -1 and 0 < int(m.group(1)) <= LEASE + SKEW, raw
                if not ok:
                    time.sleep(0.003)
                    continue
                hold = hist.acquired(name, r.lock_name(thread), None, hist.now(), fence=fence)
                # Reentry, then the two unlocks: 0, then 1.
                again = acquire(r, name, thread)
                if again != NULL:
                    hist.violation("reentry by %s answered %r" % (r.lock_name(thread), again))
                first = unlock(r, name, thread)
                if first != ZERO:
                    hist.violation("first unlock by %s answered %r" % (r.lock_name(thread), first))
                hist.released(hold, hist.now())
                last = unlock(r, name, thread)
                if last != ONE:
                    hist.violation("last unlock by %s answered %r" % (r.lock_name(thread), last))
                done += 1
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(repr(e))
        finally:
            r.close()
    ts = [threading.Thread(target=worker, args=((za, zb)[i % 2], i)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]
    assert hist.count(name) == 6 * rounds
    hist.check()
    with za.client() as c:
        assert c.cmd("EXISTS", name) == ZERO
        if kind == "fenced":
            assert c.cmd("GET", token_key) == bulk(6 * rounds)


def test_large_del_is_one_multi(zkresp_pair):
    """DEL of many keys is one ZooKeeper multi of as many deletes."""
    a, b = zkresp_pair
    ca, cb = a.client(), b.client()
    keys = ["bulk:%d" % i for i in range(300)]
    for k in keys:
        assert ca.cmd("SET", k, "v") == b"+OK\r\n"
    assert cb.cmd("DEL", *keys) == b":300\r\n"
    assert ca.cmd("EXISTS", *keys) == b":0\r\n"
