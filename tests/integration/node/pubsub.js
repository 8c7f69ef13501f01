// pubsub.js — ioredis (RESP3, its default) subscribers on one zkresp
// sidecar, a publisher on another.
//
//   node pubsub.js <portPublisher> <portSubscriber> <prefix> <count>
//
// On the subscriber's sidecar: one connection SUBSCRIBEs to two channels,
// another PSUBSCRIBEs to a pattern; the subscribed connection also runs
// ordinary commands (RESP3 allows it).  Once a probe publish through the
// publisher's sidecar reaches each of them, `count` numbered messages are
// published to each channel and to channels matching the pattern.  Prints
// one JSON line: the protocol the connections negotiated, every message and
// pmessage received (in arrival order), the PUBLISH replies, the GET done
// while subscribed, and any error.
'use strict';

const path = require('path');
const Redis = require(path.join(__dirname, '..', '..', 'node_modules', 'ioredis'));

const [portPub, portSub, prefix, countArg] = process.argv.slice(2);
const count = Number(countArg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const out = { protocol: [], messages: [], pmessages: [], replies: [], probes: 0,
              subscribeReplies: [], get: null, errors: [] };

function conn(port) {
  const c = new Redis({ host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: 1 });
  c.on('error', (e) => out.errors.push(String(e && e.message || e)));
  return c;
}

async function main() {
  const ch1 = prefix + 'ch1';
  const ch2 = prefix + 'ch2';
  const pattern = prefix + 'p.*';
  const sub = conn(portSub);
  const psub = conn(portSub);
  const pub = conn(portPub);
  sub.on('message', (ch, msg) => { if (!msg.startsWith('probe')) out.messages.push([ch, msg]); });
  psub.on('pmessage', (pat, ch, msg) => { if (!msg.startsWith('probe')) out.pmessages.push([pat, ch, msg]); });
  out.subscribeReplies.push(await sub.subscribe(ch1, ch2));
  out.subscribeReplies.push(await psub.psubscribe(pattern));
  out.protocol = [sub.condition.protocol, psub.condition.protocol, pub.condition.protocol];
  // A RESP3 connection may mix commands with its subscriptions.
  await sub.set(prefix + 'k', 'v-while-subscribed');
  out.get = await sub.get(prefix + 'k');

  // Interest registered on the other sidecar: a probe reaches each subscriber.
  const deadline = Date.now() + 10000;
  for (;;) {
    const n1 = await pub.publish(ch1, 'probe');
    const n2 = await pub.publish(prefix + 'p.probe', 'probe');
    out.probes++;
    if (n1 === 1 && n2 === 1) break;
    if (Date.now() > deadline) {
      out.errors.push('PUBLISH never counted the other sidecar\'s subscribers: ' + n1 + ', ' + n2);
      return;
    }
    await sleep(50);
  }

  for (let i = 0; i < count; i++) {
    out.replies.push(await pub.publish(ch1, 'm' + i));
    out.replies.push(await pub.publish(ch2, 'n' + i));
    out.replies.push(await pub.publish(prefix + 'p.' + i, 'q' + i));
  }
  const until = Date.now() + 15000;
  while ((out.messages.length < 2 * count || out.pmessages.length < count) && Date.now() < until) {
    await sleep(20);
  }
  await sleep(300);   // anything extra (a duplicate) arrives too
  await sub.unsubscribe();
  await psub.punsubscribe();
  await sub.del(prefix + 'k');
  sub.disconnect();
  psub.disconnect();
  pub.disconnect();
}

main().catch((e) => out.errors.push('fatal: ' + String(e && e.stack || e)))
  .finally(() => {
    console.log(JSON.stringify(out));
    process.exit(0);
  });
