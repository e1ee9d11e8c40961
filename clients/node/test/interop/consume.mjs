// Cross-language peer (run by crates/postbox-cli/tests/it/node_package.rs):
// an inboxWorker whose effect is a row (event_id, key, seq) in
// <schema>.effects; prints "ready", and closes gracefully on SIGTERM.
// Usage: node consume.mjs <schema> <queue> <consumer>
import pg from "pg";
import { inboxWorker } from "@postbox-rs/postbox/bullmq";

const [schema, queue, consumer] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const redis = new URL(process.env.REDIS_URL ?? "redis://127.0.0.1:6379");
const worker = inboxWorker(
  queue,
  async (tx, message) => {
    const { key, seq } = message.json();
    await tx.query(`INSERT INTO ${schema}.effects (event_id, key, seq) VALUES ($1, $2, $3)`, [message.id, key, seq]);
  },
  {
    pool,
    schema,
    consumer,
    worker: { connection: { host: redis.hostname, port: Number(redis.port || 6379) }, concurrency: 1 },
  },
);
await worker.worker.waitUntilReady();
console.log("ready");
process.on("SIGTERM", async () => {
  await worker.close();
  await pool.end();
  console.log("closed");
  process.exit(0);
});
