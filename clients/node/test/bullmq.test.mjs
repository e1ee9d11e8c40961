// Node producer → `postbox relay` (killed mid-way) → Node inboxWorker, with
// the real PostgreSQL, Redis and relay binary: every event's effect exactly
// once, in per-key order; a job delivered again is skipped by the inbox.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Queue } from "bullmq";
import { Outbox } from "@postbox-rs/postbox";
import { inboxWorker } from "@postbox-rs/postbox/bullmq";
import { dropSchema, killRelay, migratedSchema, newPool, redisConnection, startRelay, unsent, waitUntil } from "./helpers.mjs";

const KEYS = 6;
let pool, schema, queueName, queue;
before(async () => {
  pool = newPool(8);
  schema = await migratedSchema("node_bullmq");
  queueName = `${schema}-q`;
  queue = new Queue(queueName, { connection: redisConnection() });
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text PRIMARY KEY, key text, n int, at bigserial)`);
});
after(async () => {
  await queue.obliterate({ force: true });
  await queue.close();
  await dropSchema(pool, schema);
  await pool.end();
});

async function produce(outbox, from, count) {
  for (let i = from; i < from + count; i += 10) {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await outbox.enqueueMany(
        client,
        Array.from({ length: Math.min(10, from + count - i) }, (_, j) => ({
          topic: queueName,
          event: "order.step",
          key: `k${(i + j) % KEYS}`,
          payload: { n: i + j },
        })),
      );
      await client.query("COMMIT");
    } finally {
      client.release();
    }
  }
}

const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n;

test("events cross a relay kill once each, in per-key order; a re-sent job is skipped", async () => {
  const outbox = new Outbox(schema);
  const worker = inboxWorker(
    queueName,
    async (tx, m) => {
      const { n } = m.json();
      await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, `k${n % KEYS}`, n]);
    },
    { pool, schema, consumer: "node-orders", worker: { connection: redisConnection(), concurrency: 1 } },
  );
  try {
    await produce(outbox, 0, 300);
    let relay = startRelay(schema);
    await waitUntil("the first effects", async () => (await count()) >= 30).catch((e) => {
      throw new Error(`${e.message}; relay log:\n${relay.log}`);
    });
    await killRelay(relay, "SIGKILL");
    await produce(outbox, 300, 100);
    relay = startRelay(schema);
    try {
      await waitUntil("all 400 effects", async () => (await count()) === 400, 60_000);
      await waitUntil("the outbox drained", async () => (await unsent(pool, schema)) === 0);
    } finally {
      await killRelay(relay, "SIGTERM");
    }
    const { rows } = await pool.query(`SELECT key, n FROM ${schema}.effects ORDER BY at`);
    const last = new Map();
    for (const { key, n } of rows) {
      assert.ok((last.get(key) ?? -1) < n, `key ${key}: ${n} after ${last.get(key)}`);
      last.set(key, n);
    }
    assert.deepEqual(new Set(rows.map((r) => r.n)).size, 400);

    // The same job id again (the relay re-sending after a lost acknowledgement):
    // BullMQ runs it, the inbox skips its effect.
    const { rows: one } = await pool.query(`SELECT event_id FROM ${schema}.effects WHERE n = 5`);
    const id = one[0].event_id;
    const job = await queue.getJob(id);
    const data = job.data;
    await job.remove();
    await queue.add("order.step", data, { jobId: id });
    const result = await waitUntil("the re-sent job to complete", async () => (await queue.getJob(id))?.returnvalue);
    assert.deepEqual(result, { inbox: "duplicate" });
    assert.equal(await count(), 400);
  } finally {
    await worker.close();
  }
});
