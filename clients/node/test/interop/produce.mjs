// Cross-language peer (run by crates/postbox-cli/tests/it/node_package.rs):
// enqueue `count` events with the package, ten per transaction, payload
// {key, seq} as the Rust tests' events carry.
// Usage: node produce.mjs <schema> <topic> <from> <count> <keys>
import pg from "pg";
import { Outbox } from "@postbox-rs/postbox";

const [schema, topic, from, count, keys] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
const outbox = new Outbox(schema);
const end = Number(from) + Number(count);
for (let i = Number(from); i < end; i += 10) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const events = [];
    for (let seq = i; seq < Math.min(i + 10, end); seq++) {
      const key = `k${seq % Number(keys)}`;
      events.push({ topic, event: "test.event", key, payload: { key, seq } });
    }
    await outbox.enqueueMany(client, events);
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}
await pool.end();
console.log(`enqueued ${count}`);
