-- redisson_scripts.lua — the Lua scripts Redisson sends, as the specs send
-- them (redisson/redisson 3.2x: RedissonLock's lock, unlock and watchdog
-- renewal; RedissonReadLock/WriteLock with the unlock latch key;
-- RedissonFairLock, RedissonSemaphore, RedissonPermitExpirableSemaphore,
-- RedissonCountDownLatch).  One home for redisson_rlock_spec,
-- redisson_objects_spec and redisson_fuzz_spec.

local R = {}

R.LOCK = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " ..
             "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " ..
             "return redis.call('pttl', KEYS[1]);"

R.UNLOCK = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; " ..
               "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " ..
               "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; " ..
               "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;"

-- RedissonBaseLock.renewExpirationAsync (the write lock's watchdog tries it
-- first, then READ_RENEW)
R.RENEW = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); " ..
              "return 1; end; return 0;"

R.READ_LOCK = "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
    "if (mode == false) then " ..
      "redis.call('hset', KEYS[1], 'mode', 'read'); " ..
      "redis.call('hset', KEYS[1], ARGV[2], 1); " ..
      "redis.call('set', KEYS[2] .. ':1', 1); " ..
      "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); " ..
      "redis.call('pexpire', KEYS[1], ARGV[1]); " ..
      "return nil; " ..
    "end; " ..
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then " ..
      "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
      "local key = KEYS[2] .. ':' .. ind;" ..
      "redis.call('set', key, 1); " ..
      "redis.call('pexpire', key, ARGV[1]); " ..
      "local remainTime = redis.call('pttl', KEYS[1]); " ..
      "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); " ..
      "return nil; " ..
    "end;" ..
    "return redis.call('pttl', KEYS[1]);"

R.READ_UNLOCK = "local val = redis.call('get', KEYS[5]); " ..
    "if val ~= false then return tonumber(val);end; " ..
    "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
    "if (mode == false) then " ..
        "redis.call(ARGV[3], KEYS[2], ARGV[1]); " ..
        "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " ..
        "return 1; " ..
    "end; " ..
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); " ..
    "if (lockExists == 0) then return nil;end; " ..
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); " ..
    "if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;" ..
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); " ..
    "if (redis.call('hlen', KEYS[1]) > 1) then " ..
        "local maxRemainTime = -3; " ..
        "local keys = redis.call('hkeys', KEYS[1]); " ..
        "for n, key in ipairs(keys) do " ..
            "counter = tonumber(redis.call('hget', KEYS[1], key)); " ..
            "if type(counter) == 'number' then " ..
                "for i=counter, 1, -1 do " ..
                    "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); " ..
                    "maxRemainTime = math.max(remainTime, maxRemainTime);" ..
                "end; " ..
            "end; " ..
        "end; " ..
        "if maxRemainTime > 0 then " ..
            "redis.call('pexpire', KEYS[1], maxRemainTime); " ..
            "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " ..
            "return 0; " ..
        "end;" ..
        "if mode == 'write' then " ..
            "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " ..
            "return 0;" ..
        "end; " ..
    "end; " ..
    "redis.call('del', KEYS[1]); " ..
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); " ..
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " ..
    "return 1; "

R.READ_RENEW = "local counter = redis.call('hget', KEYS[1], ARGV[2]); " ..
    "if (counter ~= false) then " ..
        "redis.call('pexpire', KEYS[1], ARGV[1]); " ..
        "if (redis.call('hlen', KEYS[1]) > 1) then " ..
            "local keys = redis.call('hkeys', KEYS[1]); " ..
            "for n, key in ipairs(keys) do " ..
                "counter = tonumber(redis.call('hget', KEYS[1], key)); " ..
                "if type(counter) == 'number' then " ..
                    "for i=counter, 1, -1 do " ..
                        "redis.call('pexpire', KEYS[2] .. ':' .. key .. ':rwlock_timeout:' .. i, ARGV[1]); " ..
                    "end; " ..
                "end; " ..
            "end; " ..
        "end; " ..
        "return 1; " ..
    "end; " ..
    "return 0;"

R.WRITE_LOCK = "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
    "if (mode == false) then " ..
          "redis.call('hset', KEYS[1], 'mode', 'write'); " ..
          "redis.call('hset', KEYS[1], ARGV[2], 1); " ..
          "redis.call('pexpire', KEYS[1], ARGV[1]); " ..
          "return nil; " ..
      "end; " ..
      "if (mode == 'write') then " ..
          "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " ..
              "redis.call('hincrby', KEYS[1], ARGV[2], 1); " ..
              "local currentExpire = redis.call('pttl', KEYS[1]); " ..
              "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); " ..
              "return nil; " ..
          "end; " ..
        "end;" ..
        "return redis.call('pttl', KEYS[1]);"

R.WRITE_UNLOCK = "local val = redis.call('get', KEYS[3]); " ..
    "if val ~= false then return tonumber(val);end; " ..
    "local mode = redis.call('hget', KEYS[1], 'mode'); " ..
    "if (mode == false) then " ..
        "redis.call(ARGV[4], KEYS[2], ARGV[1]); " ..
        "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " ..
        "return 1; " ..
    "end;" ..
    "if (mode == 'write') then " ..
        "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); " ..
        "if (lockExists == 0) then " ..
            "return nil;" ..
        "else " ..
            "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " ..
            "if (counter > 0) then " ..
                "redis.call('pexpire', KEYS[1], ARGV[2]); " ..
                "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " ..
                "return 0; " ..
            "else " ..
                "redis.call('hdel', KEYS[1], ARGV[3]); " ..
                "if (redis.call('hlen', KEYS[1]) == 1) then " ..
                    "redis.call('del', KEYS[1]); " ..
                    "redis.call(ARGV[4], KEYS[2], ARGV[1]); " ..
                "else " ..
                    "redis.call('hset', KEYS[1], 'mode', 'read'); " ..
                "end; " ..
                "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " ..
                "return 1; " ..
            "end; " ..
        "end; " ..
    "end; " ..
    "return nil;"

-- RedissonFairLock (EVAL_LONG acquire, unlock); KEYS: lock, queue, timeouts
-- (, channel prefix).  ARGV of the acquire: lease, holder, wait, now.
R.FAIR_LOCK = "while true do " ..
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);" ..
    "if firstThreadId2 == false then break;end;" ..
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));" ..
    "if timeout <= tonumber(ARGV[4]) then " ..
    "redis.call('zrem', KEYS[3], firstThreadId2);" ..
    "redis.call('lpop', KEYS[2]);" ..
    "else break;end;end;" ..
    "if (redis.call('exists', KEYS[1]) == 0) " ..
    "and ((redis.call('exists', KEYS[2]) == 0) " ..
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then " ..
    "redis.call('lpop', KEYS[2]);" ..
    "redis.call('zrem', KEYS[3], ARGV[2]);" ..
    "local keys = redis.call('zrange', KEYS[3], 0, -1);" ..
    "for i = 1, #keys, 1 do " ..
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);" ..
    "end;" ..
    "redis.call('hset', KEYS[1], ARGV[2], 1);" ..
    "redis.call('pexpire', KEYS[1], ARGV[1]);" ..
    "return nil;" ..
    "end;" ..
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then " ..
    "redis.call('hincrby', KEYS[1], ARGV[2],1);" ..
    "redis.call('pexpire', KEYS[1], ARGV[1]);" ..
    "return nil;" ..
    "end;" ..
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);" ..
    "if timeout ~= false then " ..
    "return timeout - tonumber(ARGV[3]) - tonumber(ARGV[4]);" ..
    "end;" ..
    "local lastThreadId = redis.call('lindex', KEYS[2], -1);" ..
    "local ttl;" ..
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] then " ..
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);" ..
    "else " ..
    "ttl = redis.call('pttl', KEYS[1]);" ..
    "end;" ..
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);" ..
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then " ..
    "redis.call('rpush', KEYS[2], ARGV[2]);" ..
    "end;" ..
    "return ttl;"

R.FAIR_UNLOCK = "while true do " ..
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);" ..
    "if firstThreadId2 == false then break;end; " ..
    "local timeout = tonumber(redis.call('zscore', KEYS[3], firstThreadId2));" ..
    "if timeout <= tonumber(ARGV[4]) then " ..
    "redis.call('zrem', KEYS[3], firstThreadId2); " ..
    "redis.call('lpop', KEYS[2]); " ..
    "else break;end; end;" ..
    "if (redis.call('exists', KEYS[1]) == 0) then " ..
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); " ..
    "if nextThreadId ~= false then " ..
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); " ..
    "end; " ..
    "return 1; " ..
    "end;" ..
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " ..
    "return nil;" ..
    "end; " ..
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " ..
    "if (counter > 0) then " ..
    "redis.call('pexpire', KEYS[1], ARGV[2]); " ..
    "return 0; " ..
    "end; " ..
    "redis.call('del', KEYS[1]); " ..
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); " ..
    "if nextThreadId ~= false then " ..
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); " ..
    "end; " ..
    "return 1; "

-- RedissonSemaphore; KEYS: permits, channel.
R.SEM_SET = "local value = redis.call('get', KEYS[1]); " ..
    "if (value == false) then redis.call('set', KEYS[1], ARGV[1]); " ..
    "redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return 0;"

R.SEM_ACQUIRE = "local value = redis.call('get', KEYS[1]); " ..
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then " ..
    "local val = redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; return 0;"

R.SEM_RELEASE = "local value = redis.call('incrby', KEYS[1], ARGV[1]); " ..
    "redis.call('publish', KEYS[2], value);"

-- RedissonPermitExpirableSemaphore; KEYS: permits, timeouts zset, channel.
-- ARGV of the acquire: permits, timeout date, id, now, the no-expiry date.
R.PSEM_ACQUIRE = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[4], 'limit', 0, ARGV[1]); " ..
    "if #expiredIds > 0 then " ..
        "redis.call('zrem', KEYS[2], unpack(expiredIds)); " ..
        "local value = redis.call('incrby', KEYS[1], #expiredIds); " ..
        "if tonumber(value) > 0 then redis.call('publish', KEYS[3], value); end;" ..
    "end; " ..
    "local value = redis.call('get', KEYS[1]); " ..
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then " ..
        "redis.call('decrby', KEYS[1], ARGV[1]); " ..
        "redis.call('zadd', KEYS[2], ARGV[2], ARGV[3]); " ..
        "return ARGV[3]; " ..
    "end; " ..
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); " ..
    "if v[1] ~= nil and v[2] ~= ARGV[5] then return ':' .. tostring(v[2]); end " ..
    "return nil;"

-- KEYS: permits, channel, timeouts.  ARGV: id, 1.
R.PSEM_RELEASE = "local removed = redis.call('zrem', KEYS[3], ARGV[1]);" ..
    "if tonumber(removed) ~= 1 then return 0;end;" ..
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); " ..
    "redis.call('publish', KEYS[2], value); return 1;"

-- KEYS: permits, timeouts, channel.  ARGV: now.
R.PSEM_AVAILABLE = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); " ..
    "if #expiredIds > 0 then " ..
        "redis.call('zrem', KEYS[2], unpack(expiredIds)); " ..
        "local value = redis.call('incrby', KEYS[1], #expiredIds); " ..
        "if tonumber(value) > 0 then redis.call('publish', KEYS[3], value); end;" ..
        "return value; " ..
    "end; " ..
    "local ret = redis.call('get', KEYS[1]); return ret == false and 0 or ret;"

-- RedissonCountDownLatch; KEYS: latch, channel.
R.LATCH_SET = "if redis.call('exists', KEYS[1]) == 0 then " ..
    "redis.call('set', KEYS[1], ARGV[2]); redis.call(ARGV[3], KEYS[2], ARGV[1]); return 1 " ..
    "else return 0 end"

R.LATCH_DOWN = "local v = redis.call('decr', KEYS[1]);" ..
    "if v <= 0 then redis.call('del', KEYS[1]) end;" ..
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;"

return R
