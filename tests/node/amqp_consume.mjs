// Reads at least N messages from a RabbitMQ queue with amqplib (an
// independent AMQP client), then whatever else arrives until the queue has
// been quiet for 500 ms (duplicates), and prints them as one JSON array: what
// the relay published, as a Node service would see it.
// Usage: node amqp_consume.mjs <url> <queue> <n> <timeout-s>
import amqp from "amqplib";

const [url, queue, n, timeoutS] = process.argv.slice(2);
const want = Number(n);
const conn = await amqp.connect(url);
const ch = await conn.createChannel();
await ch.checkQueue(queue);
await ch.prefetch(50);
const seen = [];
let quiet;
const timer = setTimeout(() => {
  console.error(`timed out with ${seen.length} of ${want} messages`);
  process.exit(2);
}, Number(timeoutS) * 1000);
await new Promise((resolve) => {
  ch.consume(queue, (m) => {
    const p = m.properties;
    seen.push({
      messageId: p.messageId,
      type: p.type,
      contentType: p.contentType,
      deliveryMode: p.deliveryMode,
      timestamp: p.timestamp,
      headers: p.headers,
      exchange: m.fields.exchange,
      routingKey: m.fields.routingKey,
      body: JSON.parse(m.content.toString("utf8")),
    });
    ch.ack(m);
    if (seen.length >= want) {
      clearTimeout(quiet);
      quiet = setTimeout(resolve, 500);
    }
  });
});
clearTimeout(timer);
console.log(JSON.stringify(seen));
await ch.close();
await conn.close();
