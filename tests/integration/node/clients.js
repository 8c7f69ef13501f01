// clients.js — real Node.js lock clients against two zkresp sidecars.
//
//   node clients.js <scenario> <portA> <portB> <seconds>
//
// Workers, half on each sidecar, contend for one resource for the given
// time.  Every hold is recorded with this process's monotonic clock; the
// script prints a JSON summary and exits 1 if two holds of a mutex
// overlapped (or more than `limit` holders of a semaphore coexisted), if a
// client call failed unexpectedly, or if nobody ever acquired.
'use strict';

const path = require('path');
const modules = path.join(__dirname, '..', '..', 'node_modules');
const Redis = require(path.join(modules, 'ioredis'));
const Redlock = require(path.join(modules, 'redlock')).default;
const { Mutex, Semaphore } = require(path.join(modules, 'redis-semaphore'));

const [scenario, portA, portB, seconds] = process.argv.slice(2);
const WORKERS = 6;
const now = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const holds = [];   // {start, end, worker, ms}
const errors = [];
let attempts = 0;
let aborted = 0;   // EXECs answered null (ioredis-watch)

function client(i) {
  return new Redis({ host: '127.0.0.1', port: Number(i % 2 ? portB : portA),
                     maxRetriesPerRequest: 2, enableOfflineQueue: true });
}

async function hold(i, ms) {
  const h = { start: now(), worker: i, ms };
  await sleep(ms);
  h.end = now();
  holds.push(h);
}

// A worker: repeatedly acquire, hold a little, release, until the deadline.
async function loop(deadline, body) {
  while (now() < deadline) {
    attempts++;
    try {
      await body();
    } catch (e) {
      const msg = String(e && e.message || e);
      // Losing a race is normal for these clients; anything else is not.
      if (!/unable to achieve a quorum|acquire|Timeout|ExecutionError/i.test(msg)) errors.push(msg);
    }
    await sleep(Math.random() * 5);
  }
}

async function ioredisScripts(deadline) {
  const clients = [];
  const run = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = client(i);
    clients.push(c);
    c.defineCommand('lockAcquire', { numberOfKeys: 1,
      lua: "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])" });
    c.defineCommand('lockRelease', { numberOfKeys: 1,
      lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end" });
    const token = 'w' + i + '-' + Math.random().toString(16).slice(2);
    run.push(loop(deadline, async () => {
      const got = await c.lockAcquire('node:ioredis', token, 2000);
      if (got !== 'OK') return;
      await hold(i, 3);
      const released = await c.lockRelease('node:ioredis', token);
      if (released !== 1) errors.push('release answered ' + JSON.stringify(released));
    }));
  }
  await Promise.all(run);
  return clients;
}

// Redis's documented lock and counter without scripts: SET NX PX takes the
// lock; WATCH, GET, MULTI, DEL, EXEC lets it go only while it is still
// ours; and before each try every worker adds 1 to a counter
// optimistically (WATCH, GET, MULTI, SET, EXEC, again while EXEC answers
// null).  No add may be lost: the counter ends at the adds' count.
async function ioredisWatch(deadline) {
  const clients = [];
  const run = [];
  let adds = 0;
  for (let i = 0; i < WORKERS; i++) {
    const c = client(i);
    clients.push(c);
    const token = 'w' + i + '-' + Math.random().toString(16).slice(2);
    run.push(loop(deadline, async () => {
      for (;;) {
        await c.watch('node:counter');
        const n = Number(await c.get('node:counter') || 0);
        if (await c.multi().set('node:counter', n + 1).exec() !== null) break;
        aborted++;
      }
      adds++;
      if (await c.set('node:watchlock', token, 'PX', 2000, 'NX') !== 'OK') return;
      await hold(i, 3);
      await c.watch('node:watchlock');
      if (await c.get('node:watchlock') !== token) {
        await c.unwatch();
        errors.push('lock lost before its release');
        return;
      }
      const r = await c.multi().del('node:watchlock').exec();
      if (r === null || r[0][1] !== 1) errors.push('release answered ' + JSON.stringify(r));
    }));
  }
  await Promise.all(run);
  const counter = Number(await clients[0].get('node:counter'));
  if (counter !== adds) errors.push('counter ' + counter + ' after ' + adds + ' adds');
  return clients;
}

async function redlock(deadline) {
  const clients = [];
  const run = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = client(i);
    clients.push(c);
    const rl = new Redlock([c], { retryCount: 0, automaticExtensionThreshold: 100 });
    run.push(loop(deadline, async () => {
      if (i % 3 === 0) {
        // using(): held past the initial duration, kept by automatic extension.
        await rl.using(['node:redlock'], 300, async (signal) => {
          const h = { start: now(), worker: i };
          await sleep(450);
          if (signal.aborted) throw signal.error;
          h.end = now();
          holds.push(h);
        });
      } else {
        let lock = await rl.acquire(['node:redlock'], 1000);
        const h = { start: now(), worker: i };
        await sleep(3);
        lock = await lock.extend(1000);
        await sleep(3);
        h.end = now();
        holds.push(h);
        await lock.release();
      }
    }));
  }
  await Promise.all(run);
  return clients;
}

async function semaphoreMutex(deadline) {
  const clients = [];
  const run = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = client(i);
    clients.push(c);
    run.push(loop(deadline, async () => {
      // Every third worker holds past lockTimeout: only the library's
      // refresh (every 80 ms) keeps the lock, so an overlap would show a
      // refresh that did not work.
      const long = i % 3 === 0;
      const m = new Mutex(c, 'node:mutex', { lockTimeout: long ? 300 : 2000, acquireTimeout: 2000,
                                            retryInterval: 5, refreshInterval: long ? 80 : 200 });
      await m.acquire();
      await hold(i, long ? 700 : 3);
      await m.release();
    }));
  }
  await Promise.all(run);
  return clients;
}

const LIMIT = 2;
async function semaphore(deadline) {
  const clients = [];
  const run = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = client(i);
    clients.push(c);
    run.push(loop(deadline, async () => {
      // The semaphore is one key whose TTL is set by whoever touched it last,
      // so a long holder's 600 ms lockTimeout (shorter than its 700 ms hold:
      // only refreshes keep it) bounds every holder's refresh gap: all of
      // them refresh every 80 ms, as they would have to on Redis.  (300 ms
      // lost the key once under ASan, a refresh 220 ms late.)
      const long = i % 3 === 0;
      const s = new Semaphore(c, 'node:sem', LIMIT, { lockTimeout: long ? 600 : 2000, acquireTimeout: 2000,
                                                     retryInterval: 5, refreshInterval: 80 });
      await s.acquire();
      await hold(i, long ? 700 : 5);
      await s.release();
    }));
  }
  await Promise.all(run);
  return clients;
}

// The most holds that coexisted at any instant.
function maxConcurrent() {
  const ev = [];
  for (const h of holds) { ev.push([h.start, 1]); ev.push([h.end, -1]); }
  ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let cur = 0, max = 0;
  for (const [, d] of ev) { cur += d; max = Math.max(max, cur); }
  return max;
}

(async () => {
  const scenarios = { 'ioredis-script': ioredisScripts, 'ioredis-watch': ioredisWatch, redlock,
                      mutex: semaphoreMutex, semaphore };
  const fn = scenarios[scenario];
  if (!fn) { console.error('unknown scenario ' + scenario); process.exit(2); }
  const limit = scenario === 'semaphore' ? LIMIT : 1;
  const clients = await fn(now() + Number(seconds) * 1000);
  const workers = new Set(holds.map((h) => h.worker % 2));
  const summary = { scenario, holds: holds.length, attempts, max_concurrent: maxConcurrent(),
                    refreshed_holds: holds.filter((h) => h.ms >= 700).length,
                    limit, sidecars_that_held: workers.size, aborted, errors: errors.slice(0, 5) };
  console.log(JSON.stringify(summary));
  for (const c of clients) c.disconnect();
  const ok = holds.length > 0 && summary.max_concurrent <= limit && errors.length === 0 &&
             workers.size === 2;
  process.exit(ok ? 0 : 1);
})().catch((e) => { console.error(e); process.exit(1); });
