// Node producer → `postbox relay` to RabbitMQ (killed mid-way) → the
// package's amqplib consumer: every effect once, in per-key order; a
// re-published message is skipped by the inbox.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import amqp from "amqplib";
import { amqpInboxConsumer, declare } from "@postbox-rs/postbox/amqplib";
import { RABBITMQ_URL, acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, waitUntil } from "./helpers.mjs";

let pool, schema, topic, conn, channel;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_amqp");
  topic = `${schema}-x`;
  conn = await amqp.connect(RABBITMQ_URL);
  channel = await conn.createChannel();
  await declare(channel, topic, topic);
  await effectsTable(pool, schema);
});
after(async () => {
  await channel.deleteQueue(topic);
  await channel.deleteExchange(topic);
  await conn.close();
  await dropSchema(pool, schema);
  await pool.end();
});

test("events cross a relay kill once each, in per-key order; a re-published message is skipped", async () => {
  const r = recorder(pool, schema);
  const consumer = await amqpInboxConsumer(channel, topic, r.handler, { pool, schema, consumer: "node-amqp" });
  try {
    const sink = ["--sink", "rabbitmq", "--rabbitmq-url", RABBITMQ_URL];
    const rows = await acrossARelayKill({ pool, schema, topic, sink, count: r.count });
    // RabbitMQ keeps no ids: what the killed relay had sent but not marked
    // came again, and the inbox skipped it. Once more by hand:
    const skipped = r.duplicates;
    channel.publish(topic, rows[1].key, Buffer.from(JSON.stringify({ key: rows[1].key, n: rows[1].n })), {
      messageId: rows[1].event_id,
      type: "order.step",
      headers: { "postbox-key": rows[1].key },
    });
    await waitUntil("the re-sent message skipped", async () => r.duplicates === skipped + 1);
    assert.equal(await r.count(), 300);
  } finally {
    await consumer.close();
  }
});
