// Reads the first N messages of a JetStream stream with the NATS maintainers'
// own JavaScript client (an ordered consumer), and prints one JSON object:
// {stored, messages: [{subject, headers, body}]} — what the relay published,
// as a Node service would see it, and how many messages the stream holds.
// Usage: node nats_consume.mjs <url> <stream> <n> <timeout-s>
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";

const [url, stream, n, timeoutS] = process.argv.slice(2);
const want = Number(n);
const nc = await connect({ servers: url });
const timer = setTimeout(() => {
  console.error(`timed out with ${seen.length} of ${want} messages`);
  process.exit(2);
}, Number(timeoutS) * 1000);
const seen = [];
const consumer = await jetstream(nc).consumers.get(stream);
const messages = await consumer.consume();
for await (const m of messages) {
  const headers = {};
  for (const k of m.headers ? m.headers.keys() : []) headers[k] = m.headers.get(k);
  seen.push({ subject: m.subject, headers, body: m.json() });
  if (seen.length >= want) break;
}
clearTimeout(timer);
const info = await (await jetstreamManager(nc)).streams.info(stream);
console.log(JSON.stringify({ stored: info.state.messages, messages: seen }));
await nc.close();
