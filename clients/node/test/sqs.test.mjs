// Node producer → `postbox relay` to an SQS FIFO queue (killed mid-way) →
// the package's SQS receiver, against moto (a local SQS, the test venv's
// moto_server) with the real PostgreSQL and relay binary: every effect once,
// in per-key order, every message deleted after its effect.
import { after, before, test } from "node:test";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from "@aws-sdk/client-sqs";
import { sqsInboxConsumer } from "@postbox-rs/postbox/sqs";
import { acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, waitUntil } from "./helpers.mjs";

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
  await effectsTable(pool, schema);
});
after(async () => {
  moto.kill();
  sqs.destroy();
  await dropSchema(pool, schema);
  await pool.end();
});

test("FIFO messages cross a relay kill once each, in per-key order, deleted after the effect", async () => {
  const r = recorder(pool, schema);
  const consumer = sqsInboxConsumer(sqs, queueUrl, r.handler, { pool, schema, consumer: "node-sqs", waitSeconds: 1 });
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  // moto answers a batch in tens of milliseconds: small batches, a long publish timeout.
  const sink = ["--sink", "sqs", "--sqs-queue-url", `${endpoint}/123456789012/{topic}.fifo`, "--sqs-region", "us-east-1",
    "--sqs-endpoint-url", endpoint, "--batch-size", "20", "--publish-timeout", "20s"];
  Object.assign(process.env, AWS); // the relay's credentials for moto
  try {
    await acrossARelayKill({ pool, schema, topic: schema, sink, count: r.count, first: 80, second: 40 });
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
