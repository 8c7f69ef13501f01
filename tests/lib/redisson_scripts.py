"""Redisson's RedissonLock scripts as Redisson sends them, for the suites
that drive them raw (test_24_redisson.py) and the lock checker
(lockload.py)."""

# RedissonLock.tryLockInnerAsync.  KEYS: lock.  ARGV: lease ms, "<uuid>:<tid>".
ACQUIRE = """
if ((redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);
"""

# The watchdog renewal of one lock (older versions).  ARGV: lease, holder.
RENEW_ONE = """
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return 1;
end;
return 0;
"""

# RedissonLock.unlockInnerAsync with its latch (the answer of a repeated
# request is kept under KEYS[3]).  KEYS: lock, channel, latch.
# ARGV: message 0, lease, holder, publish command, latch ttl.
UNLOCK = """
local val = redis.call('get', KEYS[3]);
if val ~= false then
  return tonumber(val);
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
  return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;
"""
