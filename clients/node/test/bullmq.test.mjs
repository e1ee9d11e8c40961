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

test("an unreachable Redis is logged once per 30 s, not per reconnect, and close() still finishes", async () => {
  const lines = [];
  const logger = { info: () => {}, warn: (m) => lines.push(m), error: (m) => lines.push(m) };
  const worker = inboxWorker(`${queueName}-nowhere`, async () => {}, {
    pool,
    schema,
    consumer: "node-nowhere",
    logger,
    // A port nothing listens on; the client reconnects every 20 ms, then gives
    // up after a few seconds so this test file can end (BullMQ keeps trying a
    // connection that never came up even after close()).
    worker: {
      connection: { host: "127.0.0.1", port: 1, maxRetriesPerRequest: null, retryStrategy: (n) => (n > 150 ? null : 20) },
      concurrency: 1,
    },
  });
  await waitUntil("the first error logged", () => lines.length > 0);
  await new Promise((r) => setTimeout(r, 1000));
  assert.ok(lines.length <= 2, `logged ${lines.length} lines in a second:\n${lines.slice(0, 5).join("\n")}`);
  assert.match(lines[0], /bullmq worker on queue .*-nowhere: .*ECONNREFUSED/);
  const started = Date.now();
  await worker.close();
  assert.ok(Date.now() - started < 10_000, `close() took ${Date.now() - started} ms`);
});

test("the same error is logged again after its window, with how many were left out", async () => {
  const { RepeatedErrors } = await import("../dist/esm/retry.js");
  const r = new RepeatedErrors(1000);
  assert.equal(r.line("boom", 0), "boom");
  assert.equal(r.line("boom", 10), null);
  assert.equal(r.line("boom", 20), null);
  assert.equal(r.line("other", 30), "other");
  assert.equal(r.line("boom", 1500), "boom (and 2 times more in 1 s)");
});
