// zklock.js — zkresp's native locks (LOCK.ACQUIRE / LOCK.RELEASE) for
// ioredis: run an async function while holding a lock.
//
//   const Redis = require('ioredis');
//   const { withLock, LockTimeoutError } = require('./zklock');
//
//   const redis = new Redis(6379);
//   const result = await withLock(redis, 'orders', async (token) => {
//     // the lock is held; token is its fencing token
//     return 42;
//   }, { mode: 'EX', px: 30000, wait: 10000 });
//
// fn runs while the lock is held and withLock returns what it returns; the
// hold is released when fn settles, also when it throws.  If the lock is
// not granted within `wait` ms, withLock rejects with LockTimeoutError and
// fn does not run.
//
//   owner  who holds the lock: a string unique to this holder (default: a
//          fresh one per call; pass the same owner to re-enter)
//   mode   NL CR CW PR PW EX (SHARED = PR, EXCLUSIVE = EX), default EX
//   px     the lease in ms (default 30000): zkresp ends a hold that runs
//          longer (LOCK.RENEW key owner PX ms renews it)
//   wait   how long to wait for the grant, in ms (default 10000; 0: once)
//
// A waiting LOCK.ACQUIRE is one command on the connection: commands sent
// after it on the same client wait behind it, so give each concurrent
// locker its own client (and no commandTimeout shorter than `wait`).
'use strict';

const crypto = require('crypto');
const os = require('os');

class LockTimeoutError extends Error {
  constructor(key, mode, wait) {
    super(`lock ${JSON.stringify(key)} (mode ${mode}) not granted within ${wait} ms`);
    this.name = 'LockTimeoutError';
    this.key = key;
    this.mode = mode;
    this.wait = wait;
  }
}

async function withLock(redis, key, fn, opts = {}) {
  const mode = opts.mode || 'EX';
  const px = opts.px === undefined ? 30000 : opts.px;
  const wait = opts.wait === undefined ? 10000 : opts.wait;
  const owner = opts.owner ||
    `${os.hostname()}:${process.pid}:${crypto.randomBytes(12).toString('hex')}`;
  const token = await redis.call('LOCK.ACQUIRE', key, owner, 'MODE', mode,
                                 'PX', String(px), 'WAIT', String(wait));
  if (token === null || token === undefined) throw new LockTimeoutError(key, mode, wait);
  let failed = false;
  try {
    return await fn(token);
  } catch (e) {
    failed = true;
    throw e;
  } finally {
    try {
      await redis.call('LOCK.RELEASE', key, owner);
    } catch (e) {
      // A failed release must not hide fn's own error; the lease ends the
      // hold in any case.
      if (!failed) throw e;
    }
  }
}

module.exports = { withLock, LockTimeoutError };
