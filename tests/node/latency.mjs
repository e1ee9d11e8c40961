// End-to-end latency of the chat: consumers' HTTP API → outbox → relay →
// BullMQ → workers' inbox → socket.io `message` at a workers client
// (driven by examples/chat/bench.sh).
//
//   node latency.mjs <consumersBase> <workersBase> [count=100] [ratePerSec=10]
//
// A socket.io-client joins chat 1 on the workers service; <count> messages
// are POSTed to the consumers service's /api/chats/1/messages at
// <ratePerSec>; for each, the time from just before its POST to the moment
// its `message` event reaches the workers client. Prints p50/p95/p99/max
// (ms) as a table and one JSON line; exits 1 if any message does not arrive
// within 30 s of the last send.

import { io } from 'socket.io-client';

const [consumersBase, workersBase, countArg = '100', rateArg = '10'] = process.argv.slice(2);
const count = Number(countArg);
const rate = Number(rateArg);
if (!consumersBase || !workersBase || !(Number.isInteger(count) && count > 0) || !(rate > 0)) {
  console.error('usage: node latency.mjs <consumersBase> <workersBase> [count=100] [ratePerSec=10]');
  process.exit(2);
}
const CHAT = 1;
const TAIL_MS = 30000;
const now = () => performance.now();

// Matched by message id (from the POST's answer), which may come before or
// after the event itself.
const sentAt = [];            // i -> ms just before the POST
const idOf = [];              // i -> message id
const arrivedAt = new Map();  // message id -> ms the event reached the workers client
const errors = [];
let settled = 0;
let allArrived;
const done = new Promise((r) => { allArrived = r; });
const check = () => {
  if (settled === count && errors.length) allArrived('failed sends');
  if (settled === count && idOf.filter((id) => arrivedAt.has(id)).length === count) allArrived('ok');
};

const socket = io(workersBase, { transports: ['websocket'], reconnection: false });
await new Promise((resolve, reject) => {
  socket.once('connect', resolve);
  socket.once('connect_error', (e) => reject(new Error(`cannot connect to ${workersBase}: ${e.message}`)));
});
socket.on('message', (m) => {
  if (m.chat_id === CHAT && m.from === 'consumers' && !arrivedAt.has(m.id)) {
    arrivedAt.set(m.id, now());
    check();
  }
});
socket.emit('join', { chat_id: CHAT });

const interval = 1000 / rate;
const t0 = now();
for (let i = 0; i < count; i++) {
  const wait = t0 + i * interval - now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait)); // pacing the sends
  const body = `lat-${i}`;
  sentAt[i] = now();
  fetch(`${consumersBase}/api/chats/${CHAT}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ body }),
  }).then(async (res) => {
    const text = await res.text();
    if (res.status === 201) idOf[i] = JSON.parse(text).id;
    else errors.push(`POST ${body}: HTTP ${res.status} ${text}`);
  }, (e) => errors.push(`POST ${body}: ${e.message}`)).finally(() => { settled++; check(); });
}
const sendSecs = (now() - t0) / 1000;
let timer;
const timedOut = new Promise((r) => { timer = setTimeout(() => r('timeout'), TAIL_MS); });
const outcome = await Promise.race([done, timedOut]);
clearTimeout(timer);
socket.close();

if (errors.length) console.error(errors.slice(0, 5).join('\n'));
if (outcome !== 'ok' || errors.length) {
  const missing = [];
  for (let i = 0; i < count; i++) if (!arrivedAt.has(idOf[i])) missing.push(`lat-${i}`);
  console.error(`latency.mjs: ${missing.length} of ${count} messages did not reach the workers client` +
    ` within ${TAIL_MS / 1000} s of the last send (first missing: ${missing.slice(0, 5).join(', ')})`);
  process.exit(1);
}

const latency = idOf.map((id, i) => arrivedAt.get(id) - sentAt[i]);
const sorted = [...latency].sort((a, b) => a - b);
const pct = (p) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
const r1 = (x) => Math.round(x * 10) / 10;
const stats = {
  count, rate_per_sec: rate, send_secs: r1(sendSecs),
  min_ms: r1(sorted[0]), p50_ms: r1(pct(50)), p95_ms: r1(pct(95)), p99_ms: r1(pct(99)), max_ms: r1(sorted.at(-1)),
  mean_ms: r1(sorted.reduce((a, b) => a + b, 0) / sorted.length),
};
console.log(`POST on consumers → socket.io "message" on workers, ${count} messages at ${rate}/s`);
console.log('  p50 ms   p95 ms   p99 ms   max ms');
console.log('  ' + [stats.p50_ms, stats.p95_ms, stats.p99_ms, stats.max_ms].map((v) => String(v).padStart(6)).join('   '));
console.log(JSON.stringify(stats));
