// Node producer → `postbox relay` to an SQS FIFO queue (killed mid-way) →
// the package's SQS receiver, against moto (a local SQS, the test venv's
// moto_server) with the real PostgreSQL and relay binary: every effect once,
// in per-key order, every message deleted after its effect.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from "@aws-sdk/client-sqs";
import { Outbox } from "@postbox-rs/postbox";
import { sqsInboxConsumer } from "@postbox-rs/postbox/sqs";
import { dropSchema, killRelay, migratedSchema, newPool, startRelay, unsent, waitUntil } from "./helpers.mjs";

const KEYS = 4;
const MOTO = new URL("../../../tests/python/.venv/bin/moto_server", import.meta.url).pathname;
const AWS = { AWS_ACCESS_KEY_ID: "test", AWS_SECRET_ACCESS_KEY: "test", AWS_REGION: "us-east-1" };
let pool, schema, moto, endpoint, sqs, queueUrl;

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_sqs");
  const port = await freePort();
  endpoint = `http://127.0.0.1:${port}`;
  moto = spawn(MOTO, ["-H", "127.0.0.1", "-p", String(port)], { stdio: "ignore" });
  sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId: "test", secretAccessKey: "test" } });
  queueUrl = await waitUntil("moto_server to create a queue", async () => {
    try {
      return (await sqs.send(new CreateQueueCommand({ QueueName: `${schema}.fifo`, Attributes: { FifoQueue: "true" } }))).QueueUrl;
    } catch {
      return undefined;
    }
  });
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text, key text, n int, at bigserial)`);
});
after(async () => {
  moto.kill();
  sqs.destroy();
  await dropSchema(pool, schema);
  await pool.end();
});

async function produce(outbox, from, count) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await outbox.enqueueMany(
      client,
      Array.from({ length: count }, (_, j) => ({ topic: schema, event: "order.step", key: `k${(from + j) % KEYS}`, payload: { n: from + j } })),
    );
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}

const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n;

test("FIFO messages cross a relay kill once each, in per-key order, deleted after the effect", async () => {
  const outbox = new Outbox(schema);
  const consumer = sqsInboxConsumer(
    sqs,
    queueUrl,
    async (tx, m) => {
      assert.equal(m.name, "order.step");
      await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, m.key, m.json().n]);
    },
    { pool, schema, consumer: "node-sqs", waitSeconds: 1 },
  );
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  // moto answers a batch in tens of milliseconds: small batches, a long publish timeout.
  const sink = ["--sink", "sqs", "--sqs-queue-url", `${endpoint}/123456789012/{topic}.fifo`, "--sqs-region", "us-east-1",
    "--sqs-endpoint-url", endpoint, "--batch-size", "20", "--publish-timeout", "20s"];
  Object.assign(process.env, AWS); // the relay's credentials for moto
  try {
    await produce(outbox, 0, 80);
    let relay = startRelay(schema, sink);
    await waitUntil("the first effects", async () => (await count()) >= 10, 30_000).catch((e) => {
      throw new Error(`${e.message}; relay log:\n${relay.log}`);
    });
    await killRelay(relay, "SIGKILL");
    await produce(outbox, 80, 40);
    relay = startRelay(schema, sink);
    try {
      await waitUntil("all 120 effects", async () => (await count()) === 120, 60_000);
      await waitUntil("the outbox drained", async () => (await unsent(pool, schema)) === 0);
    } finally {
      await killRelay(relay, "SIGTERM");
    }
    const { rows } = await pool.query(`SELECT event_id, key, n FROM ${schema}.effects ORDER BY at`);
    const last = new Map();
    for (const { key, n } of rows) {
      assert.ok((last.get(key) ?? -1) < n, `key ${key}: ${n} after ${last.get(key)}`);
      last.set(key, n);
    }
    assert.equal(new Set(rows.map((r) => r.event_id)).size, 120);
    await waitUntil("every message deleted", async () => {
      const { Attributes: a } = await sqs.send(
        new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"] }),
      );
      return a.ApproximateNumberOfMessages === "0" && a.ApproximateNumberOfMessagesNotVisible === "0";
    });
  } finally {
    await consumer.close();
  }
  await consumer.done;
});
