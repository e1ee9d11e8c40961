// Every consumer wrapper refuses a schema it cannot use before it takes a
// message: not migrated (SchemaNotMigratedError), or missing a column this
// version writes (SchemaOutdatedError). Real PostgreSQL, Redis, RabbitMQ and
// NATS; the Kafka and SQS clients are real ones that are never reached (the
// refusal comes first).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import amqp from "amqplib";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { Kafka, logLevel } from "kafkajs";
import { SQSClient } from "@aws-sdk/client-sqs";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { SchemaNotMigratedError, SchemaOutdatedError, InboxConsumer } from "@postbox-rs/postbox";
import { inboxWorker } from "@postbox-rs/postbox/bullmq";
import { amqpInboxConsumer } from "@postbox-rs/postbox/amqplib";
import { kafkaInboxConsumer } from "@postbox-rs/postbox/kafkajs";
import { consumerConfig, natsInboxConsumer } from "@postbox-rs/postbox/nats";
import { redisStreamsInboxConsumer } from "@postbox-rs/postbox/redis-streams";
import { sqsInboxConsumer } from "@postbox-rs/postbox/sqs";
import { WebhookReceiver } from "@postbox-rs/postbox/webhooks";
import { NATS_URL, RABBITMQ_URL, dropSchema, migratedSchema, newPool, redisConnection, REDIS_URL } from "./helpers.mjs";

const quiet = { info() {}, warn() {}, error() {} };
const never = async () => {
  throw new Error("a refused consumer ran its handler");
};
let pool, missing, outdated, logged;
const options = (schema) => ({ pool, schema, consumer: "refusal", logger: { ...quiet, error: (m) => logged.push(m) } });

before(async () => {
  pool = newPool(4);
  missing = `node_unmigrated_${randomBytes(4).toString("hex")}`;
  outdated = await migratedSchema("node_outdated");
  // As a schema migrated by an older postbox would be.
  await pool.query(`ALTER TABLE ${outdated}.inbox_dead_letter DROP COLUMN replay_at`);
});
after(async () => {
  await dropSchema(pool, outdated);
  await pool.end();
});

test("the inbox check names the fix", async () => {
  logged = [];
  await assert.rejects(new InboxConsumer(options(missing)).check(), (err) => {
    assert.ok(err instanceof SchemaNotMigratedError);
    assert.match(err.message, new RegExp(`postbox migrate --schema ${missing}`));
    return true;
  });
  await assert.rejects(new InboxConsumer(options(outdated)).check(), (err) => {
    assert.ok(err instanceof SchemaOutdatedError, String(err));
    assert.match(err.message, /replay_at/);
    assert.match(err.message, new RegExp(`postbox migrate --schema ${outdated}`));
    return true;
  });
});

test("bullmq: ready rejects, the waiting job stays waiting, one error line", async () => {
  logged = [];
  const name = `${missing}-q`;
  const queue = new Queue(name, { connection: redisConnection() });
  try {
    await queue.add("order.placed", { id: 1 }, { jobId: "j1" });
    const worker = inboxWorker(name, never, { ...options(missing), worker: { connection: redisConnection() } });
    await assert.rejects(worker.ready, SchemaNotMigratedError);
    const counts = await queue.getJobCounts("waiting", "active", "failed", "completed");
    assert.deepEqual(counts, { waiting: 1, active: 0, failed: 0, completed: 0 });
    assert.equal(logged.length, 1, logged.join("\n"));
    assert.match(logged[0], /not started: schema .* has no postbox tables; run `postbox migrate/);
    await worker.close();
  } finally {
    await queue.obliterate({ force: true });
    await queue.close();
  }
});

test("amqplib and kafkajs: the start rejects before the broker is used", async () => {
  const conn = await amqp.connect(RABBITMQ_URL);
  try {
    const channel = await conn.createChannel();
    const q = `${missing}-amqp`;
    await channel.assertQueue(q, { autoDelete: true });
    await assert.rejects(amqpInboxConsumer(channel, q, never, options(missing)), SchemaNotMigratedError);
    assert.equal((await channel.checkQueue(q)).consumerCount, 0);
    await channel.deleteQueue(q);
  } finally {
    await conn.close();
  }
  const kafka = new Kafka({ brokers: ["127.0.0.1:1"], logLevel: logLevel.NOTHING }).consumer({ groupId: "refusal" });
  await assert.rejects(kafkaInboxConsumer(kafka, never, options(outdated)), SchemaOutdatedError);
});

test("nats, redis streams, sqs: ready and done reject", async () => {
  logged = [];
  const nc = await connect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  const stream = `${missing}_s`;
  const redis = new Redis(REDIS_URL);
  try {
    await jsm.streams.add({ name: stream, subjects: [`${stream}.x`] });
    await jsm.consumers.add(stream, consumerConfig("refusal"));
    const consumers = [
      natsInboxConsumer(await jetstream(nc).consumers.get(stream, "refusal"), never, options(missing)),
      redisStreamsInboxConsumer(redis, `${missing}-rs`, never, { ...options(missing), group: "refusal" }),
      sqsInboxConsumer(new SQSClient({ region: "us-east-1", endpoint: "http://127.0.0.1:1" }), "http://127.0.0.1:1/q", never, options(missing)),
    ];
    for (const c of consumers) {
      await assert.rejects(c.ready, SchemaNotMigratedError);
      await assert.rejects(c.done, SchemaNotMigratedError);
      await c.close();
    }
    assert.equal(logged.length, 3, logged.join("\n"));
    // The stream group was never made: nothing was read.
    assert.equal(await redis.exists(`${missing}-rs`), 0);
  } finally {
    await jsm.streams.delete(stream).catch(() => {});
    await nc.close();
    redis.disconnect();
  }
});

test("webhooks: check() refuses before the server listens", async () => {
  const receiver = new WebhookReceiver({ ...options(missing), secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] });
  await assert.rejects(receiver.check(), SchemaNotMigratedError);
});
