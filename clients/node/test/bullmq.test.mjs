// Node producer → `postbox relay` (killed mid-way) → Node inboxWorker, with
// the real PostgreSQL, Redis and relay binary: every event's effect exactly
// once, in per-key order; a job delivered again is skipped by the inbox.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Queue } from "bullmq";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { inboxWorker, messageFromJob } from "@postbox-rs/postbox/bullmq";
import { DATABASE_URL, acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, redisConnection, waitUntil } from "./helpers.mjs";

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

test("a job's key and headers come back from the relay's _postbox field; the payload's own fields stay", () => {
  const job = {
    id: "e-1",
    name: "order.created",
    data: {
      id: 44,
      _trace: { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" },
      _postbox: { key: "order-44", headers: { "x-producer": "task-0" } },
    },
  };
  const m = messageFromJob("orders", job);
  assert.equal(m.key, "order-44");
  assert.deepEqual(m.headers, [
    ["traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    ["x-producer", "task-0"],
  ]);
  assert.deepEqual(JSON.parse(m.payload.toString()), { id: 44 });
  const plain = messageFromJob("orders", { id: "e-2", name: "x", data: { id: 45 } });
  assert.equal(plain.key, null);
  assert.deepEqual(JSON.parse(plain.payload.toString()), { id: 45 });
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

test("without ioredis installed, the worker says what to install once and closes", async () => {
  // A project whose node_modules holds this package and its peers but not
  // ioredis (bullmq 6 loads it only when it connects): every package is a
  // symlink into ours, resolved where it is linked (--preserve-symlinks), so
  // bullmq cannot reach the ioredis beside it.
  const dir = mkdtempSync(join(tmpdir(), "postbox-no-ioredis-"));
  try {
    const modules = join(dir, "node_modules");
    mkdirSync(join(modules, "@postbox-rs", "postbox"), { recursive: true });
    const ours = fileURLToPath(new URL("..", import.meta.url));
    for (const name of readdirSync(join(ours, "node_modules"))) {
      if (name === "ioredis" || name === ".bin" || name.startsWith(".")) continue;
      symlinkSync(join(ours, "node_modules", name), join(modules, name));
    }
    cpSync(join(ours, "dist"), join(modules, "@postbox-rs", "postbox", "dist"), { recursive: true });
    cpSync(join(ours, "package.json"), join(modules, "@postbox-rs", "postbox", "package.json"));
    writeFileSync(
      join(dir, "main.mjs"),
      `import pg from "pg";
       import { inboxWorker, messageFromJob } from "@postbox-rs/postbox/bullmq";
       const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
       const lines = [];
       const say = (m) => { lines.push(m); console.log(m); };
       const worker = inboxWorker(process.env.QUEUE, async () => {}, {
         pool, schema: process.env.SCHEMA, consumer: "no-ioredis",
         logger: { info: () => {}, warn: say, error: say },
         worker: { connection: { host: "127.0.0.1", port: 6379 } },
       });
       const deadline = Date.now() + 10_000;
       while (lines.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
       await new Promise((r) => setTimeout(r, 1000));
       const started = Date.now();
       await worker.close();
       await pool.end();
       console.log(\`lines \${lines.length}, close \${Date.now() - started} ms\`);
       process.exit(0);`,
    );
    const run = spawnSync(process.execPath, ["--preserve-symlinks", "--preserve-symlinks-main", "main.mjs"], {
      cwd: dir,
      env: { ...process.env, DATABASE_URL, QUEUE: `${queueName}-no-ioredis`, SCHEMA: schema },
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(run.status, 0, `exit ${run.status}\n${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /cannot run without ioredis: npm i bullmq ioredis/);
    const [, lines, closeMs] = run.stdout.match(/lines (\d+), close (\d+) ms/);
    assert.equal(Number(lines), 1, run.stdout);
    assert.ok(Number(closeMs) < 8_000, run.stdout);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
