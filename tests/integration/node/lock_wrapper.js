// lock_wrapper.js — scripts/examples/zklock.js (withLock over ioredis)
// against two zkresp sidecars.
//
//   node lock_wrapper.js <path of zklock.js> <portA> <portB> <key>
//
// Workers, half on each sidecar, each with its own client, enter withLock
// on one key a few times each; every entry is logged with the number of
// workers inside.  Then: withLock returns fn's result, releases after fn
// throws, and rejects with LockTimeoutError (fn not run) while another
// owner holds the lock.  Prints one JSON summary line; exits 1 when a check
// failed.
'use strict';

const path = require('path');
const modules = path.join(__dirname, '..', '..', 'node_modules');
const Redis = require(path.join(modules, 'ioredis'));

const [wrapperPath, portA, portB, key] = process.argv.slice(2);
const { withLock, LockTimeoutError } = require(path.resolve(wrapperPath));

const WORKERS = 4;
const ROUNDS = 5;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client(port) {
  return new Redis({ host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: 1 });
}

// LOCK.INFO as {holders, waiters}: a RESP2 flat array, or what ioredis
// makes of a RESP3 map.
function info(reply) {
  if (Array.isArray(reply)) {
    const out = {};
    for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = reply[i + 1];
    return out;
  }
  if (reply instanceof Map) return Object.fromEntries(reply);
  return reply;
}

async function main() {
  const summary = { entries: 0, max_inside: 0, tokens: [], results_ok: true,
                    released_after_throw: null, timeout_error: null, timeout_fn_ran: false,
                    errors: [] };
  const clients = [];
  for (let i = 0; i < WORKERS; i++) clients.push(client(i % 2 ? portB : portA));
  let inside = 0;
  try {
    await Promise.all(clients.map(async (c, i) => {
      for (let n = 0; n < ROUNDS; n++) {
        const got = await withLock(c, key, async (token) => {
          inside++;
          summary.max_inside = Math.max(summary.max_inside, inside);
          summary.entries++;
          summary.tokens.push(Number(token));
          await sleep(10 + Math.random() * 10);
          inside--;
          return `w${i}:${n}:${token}`;
        }, { wait: 20000, px: 10000 });
        if (!/^w\d+:\d+:\d+$/.test(got) || !got.startsWith(`w${i}:${n}:`)) {
          summary.results_ok = false;
          summary.errors.push(`withLock returned ${JSON.stringify(got)}`);
        }
      }
    }));

    // fn throws: the error comes out of withLock and the lock is free.
    const [a, b] = clients;
    let thrown = null;
    try {
      await withLock(a, key, async () => { throw new Error('boom'); }, { wait: 1000 });
    } catch (e) {
      thrown = e.message;
    }
    if (thrown !== 'boom') summary.errors.push(`withLock after a throwing fn: ${thrown}`);
    const inf = info(await b.call('LOCK.INFO', key));
    const holders = inf.holders || [];
    const tok = await b.call('LOCK.ACQUIRE', key, 'probe', 'MODE', 'EX', 'WAIT', '0');
    summary.released_after_throw = holders.length === 0 && tok !== null;
    if (tok !== null) await b.call('LOCK.RELEASE', key, 'probe');

    // Held by another owner: LockTimeoutError, fn never runs.
    await b.call('LOCK.ACQUIRE', key, 'blocker', 'MODE', 'EX');
    const t0 = Date.now();
    try {
      await withLock(a, key, async () => { summary.timeout_fn_ran = true; }, { wait: 300 });
      summary.timeout_error = 'none';
    } catch (e) {
      summary.timeout_error = e instanceof LockTimeoutError ? 'LockTimeoutError' : String(e);
      summary.timeout_ms = Date.now() - t0;
    }
    await b.call('LOCK.RELEASE', key, 'blocker');
  } catch (e) {
    summary.errors.push(String(e && e.stack || e));
  } finally {
    for (const c of clients) c.disconnect();
  }
  console.log(JSON.stringify(summary));
  const ok = summary.errors.length === 0 && summary.max_inside === 1 &&
    summary.entries === WORKERS * ROUNDS && summary.results_ok &&
    summary.released_after_throw === true && summary.timeout_error === 'LockTimeoutError' &&
    !summary.timeout_fn_ran;
  process.exit(ok ? 0 : 1);
}

main();
