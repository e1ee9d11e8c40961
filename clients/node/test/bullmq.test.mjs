// Node producer → `postbox relay` (killed mid-way) → Node inboxWorker, with
// the real PostgreSQL, Redis and relay binary: every event's effect exactly
// once, in per-key order; a job delivered again is skipped by the inbox.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Queue } from "bullmq";
import { inboxWorker } from "@postbox-rs/postbox/bullmq";
import { acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, redisConnection, waitUntil } from "./helpers.mjs";

let pool, schema, queueName, queue;
before(async () => {
  pool = newPool(8);
  schema = await migratedSchema("node_bullmq");
  queueName = `${schema}-q`;
  queue = new Queue(queueName, { connection: redisConnection() });
  await effectsTable(pool, schema);
});
after(async () => {
  await queue.obliterate({ force: true });
  await queue.close();
  await dropSchema(pool, schema);
  await pool.end();
});

test("events cross a relay kill once each, in per-key order; a re-sent job is skipped", async () => {
  const r = recorder(pool, schema);
  const worker = inboxWorker(queueName, r.handler, {
    pool,
    schema,
    consumer: "node-orders",
    worker: { connection: redisConnection(), concurrency: 1 },
  });
  try {
    const sink = []; // the default sink: BullMQ on startRelay's --redis-url
    const rows = await acrossARelayKill({ pool, schema, topic: queueName, sink, count: r.count, first: 300, keys: 6 });

    // The same job id again (the relay re-sending after a lost acknowledgement):
    // BullMQ runs it, the inbox skips its effect.
    const id = rows[5].event_id;
    const job = await queue.getJob(id);
    const data = job.data;
    await job.remove();
    await queue.add("order.step", data, { jobId: id });
    const result = await waitUntil("the re-sent job to complete", async () => (await queue.getJob(id))?.returnvalue);
    assert.deepEqual(result, { inbox: "duplicate" });
    assert.equal(await r.count(), 400);
  } finally {
    await worker.close();
  }
});
