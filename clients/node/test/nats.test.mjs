// Node producer → `postbox relay` to NATS JetStream (killed mid-way) → the
// package's durable pull consumer: every effect once, in per-key order, every
// message acked after its effect; the stream drops the killed relay's
// re-sends by id.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { consumerConfig, natsInboxConsumer } from "@postbox-rs/postbox/nats";
import { NATS_URL, acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, waitUntil } from "./helpers.mjs";

let pool, schema, subject, nc, jsm;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_nats");
  subject = `${schema}-n`;
  nc = await connect({ servers: NATS_URL });
  jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: schema, subjects: [subject] });
  await jsm.consumers.add(schema, { ...consumerConfig("node-nats"), ack_wait: 2_000_000_000 });
  await effectsTable(pool, schema);
});
after(async () => {
  await jsm.streams.delete(schema);
  await nc.close();
  await dropSchema(pool, schema);
  await pool.end();
});

test("messages cross a relay kill once each, in per-key order, acked after the effect", async () => {
  const r = recorder(pool, schema);
  const consumer = natsInboxConsumer(await jetstream(nc).consumers.get(schema, "node-nats"), r.handler, {
    pool,
    schema,
    consumer: "node-nats",
  });
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  try {
    const sink = ["--sink", "nats", "--nats-url", NATS_URL, "--nats-ack-timeout", "2s"];
    await acrossARelayKill({ pool, schema, topic: subject, sink, count: r.count });
    assert.equal((await jsm.streams.info(schema)).state.messages, 300);
    await waitUntil("every message acked", async () => (await jsm.consumers.info(schema, "node-nats")).num_ack_pending === 0);
  } finally {
    await consumer.close();
  }
  await consumer.done;
});
