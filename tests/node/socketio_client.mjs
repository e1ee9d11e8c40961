// A real `socket.io-client` against a chat service's socket.io endpoint
// (driven by examples/chat/tests/it/socketio.rs).
//
//   node socketio_client.mjs <baseUrl> <chatId> <count> [timeoutMs=20000]
//
// Two clients join room `chat:<chatId>` (event `join` {chat_id}):
//   - one WebSocket-only (`transports: ['websocket']`),
//   - one with the default transports, which starts on HTTP long-polling and
//     must upgrade to WebSocket before we go on.
// Prints `ready` on its own line once both are connected, joined and the
// second one has upgraded; then one JSON line per `message` event the
// WebSocket-only client receives. Exits 0 once both clients have received
// <count> messages, the same ones in the same order; 1 on a timeout or a
// mismatch (details on stderr); 2 on bad usage.

import { io } from 'socket.io-client';

const [baseUrl, chatArg, countArg, timeoutArg] = process.argv.slice(2);
const chatId = Number(chatArg);
const count = Number(countArg);
const timeoutMs = timeoutArg === undefined ? 20000 : Number(timeoutArg);
if (!baseUrl || !Number.isInteger(chatId) || !Number.isInteger(count) || count < 0 || !(timeoutMs > 0)) {
  console.error('usage: node socketio_client.mjs <baseUrl> <chatId> <count> [timeoutMs]');
  process.exit(2);
}

const log = (...a) => console.error('socketio_client:', ...a);
const opts = { reconnection: false, forceNew: true, timeout: timeoutMs };
const clients = {
  websocket: io(baseUrl, { ...opts, transports: ['websocket'] }),
  upgrade: io(baseUrl, opts), // default: polling first, then upgrade
};
const got = { websocket: [], upgrade: [] };
let phase = 'connecting';
let finished = false;

function finish(code, why) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  if (why) log(why);
  for (const c of Object.values(clients)) c.close();
  // Let stdout drain before exiting.
  process.stdout.write('', () => process.exit(code));
}

const timer = setTimeout(() => {
  finish(1, `timed out after ${timeoutMs} ms while ${phase}: ` +
    `websocket client got ${got.websocket.length}/${count}, ` +
    `upgrading client got ${got.upgrade.length}/${count} messages ` +
    `(upgrading client transport: ${clients.upgrade.io.engine?.transport?.name ?? 'none'})`);
}, timeoutMs);

function connected(name, socket) {
  return new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('connect_error', (e) => reject(new Error(`${name} client cannot connect to ${baseUrl}: ${e.message}`)));
  });
}

// The default client's Engine.IO connection opens on polling and then upgrades.
function upgraded(socket) {
  return new Promise((resolve, reject) => {
    const engine = socket.io.engine;
    const first = engine.transport.name;
    if (first !== 'polling') {
      reject(new Error(`default client opened on ${first}, expected polling`));
      return;
    }
    engine.once('upgrade', (t) => resolve(t.name));
    engine.once('upgradeError', (e) => reject(new Error(`upgrade to websocket failed: ${e.message}`)));
  });
}

function check() {
  if (got.websocket.length < count || got.upgrade.length < count) return;
  const a = got.websocket.map((m) => m.id).join(',');
  const b = got.upgrade.map((m) => m.id).join(',');
  if (got.websocket.length !== got.upgrade.length || a !== b) {
    finish(1, `the two clients got different messages:\n  websocket: ${a}\n  upgrade:   ${b}`);
  } else {
    finish(0);
  }
}

for (const [name, socket] of Object.entries(clients)) {
  socket.on('message', (m) => {
    got[name].push(m);
    if (name === 'websocket') process.stdout.write(JSON.stringify(m) + '\n');
    check();
  });
  socket.on('disconnect', (reason) => {
    if (!finished) finish(1, `${name} client disconnected: ${reason}`);
  });
}

try {
  const upgradeDone = upgraded(clients.upgrade);
  upgradeDone.catch(() => {}); // awaited below
  await Promise.all(Object.entries(clients).map(([n, s]) => connected(n, s)));
  phase = 'joining';
  for (const s of Object.values(clients)) s.emit('join', { chat_id: chatId });
  phase = 'waiting for the polling → websocket upgrade';
  const transport = await upgradeDone;
  log(`connected; default client upgraded polling → ${transport}`);
  phase = 'waiting for messages';
  process.stdout.write('ready\n');
  check(); // count may be 0
} catch (e) {
  finish(1, e.message);
}
