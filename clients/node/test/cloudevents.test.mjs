// CloudEvents on the consumer side: what the official SDK (npm `cloudevents`)
// writes, in each binding and mode, reads as the same Message as postbox's
// own format; and what the relay writes with `format = "cloudevents"` reaches
// a consumer of this package with the event id as the inbox's message id.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { CloudEvent, HTTP, Kafka } from "cloudevents";
import { Redis } from "ioredis";
import { Message, Outbox, readCloudEvent } from "@postbox-rs/postbox";
import { messageFromKafka } from "@postbox-rs/postbox/kafkajs";
import { messageFromAmqp } from "@postbox-rs/postbox/amqplib";
import { redisStreamsInboxConsumer } from "@postbox-rs/postbox/redis-streams";
import { REDIS_URL, dropSchema, killRelay, migratedSchema, newPool, startRelay, waitUntil } from "./helpers.mjs";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const event = new CloudEvent({
  id: "e-1",
  source: "//shop/orders",
  type: "order.paid",
  subject: "order-7",
  partitionkey: "order-7",
  traceparent: TP,
  tenant: "acme",
  datacontenttype: "application/json",
  data: { amount: 42, note: "é \"%" },
});

function assertRead(m, what) {
  assert.equal(m.id, "e-1", what);
  assert.equal(m.event, "order.paid", what);
  assert.equal(m.key, "order-7", what);
  assert.deepEqual(m.json(), { amount: 42, note: "é \"%" }, what);
  assert.equal(m.cloudevent("source"), "//shop/orders", what);
  assert.equal(m.cloudevent("tenant"), "acme", what);
  assert.equal(m.header("traceparent"), TP, what);
}

test("the SDK's HTTP messages, binary and structured, read as messages", () => {
  for (const [mode, encode] of [["binary", HTTP.binary], ["structured", HTTP.structured]]) {
    const wire = encode(event);
    const m = new Message("webhook-id", "orders");
    for (const [name, value] of Object.entries(wire.headers)) m.headers.push([name.toLowerCase(), String(value)]);
    m.payload = Buffer.from(typeof wire.body === "string" ? wire.body : JSON.stringify(wire.body));
    assertRead(readCloudEvent(m), `http ${mode}`);
  }
});

test("the SDK's Kafka messages, binary and structured, read as messages", () => {
  for (const [mode, encode] of [["binary", Kafka.binary], ["structured", Kafka.structured]]) {
    const wire = encode(event);
    const headers = Object.fromEntries(Object.entries(wire.headers).map(([k, v]) => [k, Buffer.from(String(v))]));
    const value = Buffer.from(typeof wire.value === "string" ? wire.value : JSON.stringify(wire.value));
    const m = messageFromKafka("orders", 0, { key: Buffer.from(wire.key ?? ""), value, headers, offset: "7" });
    assertRead(m, `kafka ${mode}`);
  }
});

test("AMQP application properties under either prefix read as a message", () => {
  for (const prefix of ["cloudEvents:", "cloudEvents_"]) {
    const headers = {};
    for (const [name, value] of Object.entries(event.toJSON())) {
      if (name !== "data" && name !== "datacontenttype") headers[prefix + name] = String(value);
    }
    const m = messageFromAmqp("orders", {
      content: Buffer.from(JSON.stringify(event.data)),
      fields: { deliveryTag: 1, exchange: "shop", routingKey: "order-7", redelivered: false },
      properties: { contentType: "application/json", headers },
    });
    assertRead(m, prefix);
    assert.equal(m.cloudevent("datacontenttype"), "application/json");
    assert.equal(m.cloudevent("time"), event.time, "an RFC 3339 time as sent");
  }
  const timestamp = new Message("q/1", "q");
  timestamp.headers.push(["cloudEvents:id", "1"], ["cloudEvents:type", "t"], ["cloudEvents:time", "1796637600123"]);
  assert.equal(readCloudEvent(timestamp).cloudevent("time"), "2026-12-07T10:00:00.123Z", "an AMQP timestamp");
});

test("messages that are no CloudEvent pass unchanged", () => {
  const m = new Message("q/1", "q");
  m.payload = Buffer.from('{"id": "x"}');
  m.headers.push(["content-type", "application/cloudevents+json"]);
  assert.equal(readCloudEvent(m), m, "a body without specversion");
  const plain = new Message("q/2", "q");
  plain.headers.push(["ce-type", "t"]);
  assert.equal(readCloudEvent(plain), plain, "no id");
});

let pool, schema, redis;
before(async () => {
  pool = newPool(4);
  schema = await migratedSchema("node_ce");
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
});
after(async () => {
  await redis.del(`${schema}-binary`, `${schema}-structured`);
  redis.disconnect();
  await dropSchema(pool, schema);
  await pool.end();
});

test("the relay's CloudEvents reach the Redis Streams consumer, in both modes", async () => {
  const { rows } = await pool.query("SELECT current_database() AS db");
  for (const mode of ["binary", "structured"]) {
    const stream = `${schema}-${mode}`;
    const client = await pool.connect();
    let ids;
    try {
      await client.query("BEGIN");
      const sent = await new Outbox(schema).enqueueMany(client, [
        { topic: stream, event: "order.paid", key: "k1", payload: { n: 1 }, headers: { traceparent: TP, tenant: "acme" } },
        { topic: stream, event: "order.paid", key: "k2", payload: { n: 2 } },
      ]);
      ids = sent.map((e) => e.eventId);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    const seen = [];
    const handler = { handle: async (_tx, m) => void seen.push(m) };
    const options = { pool, schema, consumer: `ce-${mode}`, group: `ce-${mode}`, blockMs: 200 };
    const consumer = redisStreamsInboxConsumer(redis, stream, handler, options);
    const sink = ["--sink", "redis_streams", "--redis-streams-url", REDIS_URL];
    const ce = ["--redis-streams-format", "cloudevents", "--redis-streams-cloudevents-mode", mode];
    const relay = startRelay(schema, [...sink, ...ce]);
    try {
      await waitUntil(`both ${mode} events`, () => seen.length >= 2);
    } finally {
      await killRelay(relay, "SIGTERM");
      await consumer.close();
    }
    await consumer.done;
    assert.deepEqual(seen.map((m) => m.id).sort(), [...ids].sort(), mode);
    for (const m of seen) {
      assert.equal(m.event, "order.paid");
      assert.equal(m.cloudevent("source"), `//postbox/${rows[0].db}/${schema}`);
      assert.deepEqual(m.json(), { n: m.key === "k1" ? 1 : 2 });
      assert.equal(m.header("traceparent"), m.key === "k1" ? TP : undefined, mode);
      assert.equal(m.cloudevent("tenant"), m.key === "k1" ? "acme" : undefined, mode);
    }
  }
});
