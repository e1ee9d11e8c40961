// Node producer → `postbox relay` to NATS JetStream (killed mid-way) → the
// package's durable pull consumer, with the real PostgreSQL, NATS server and
// relay binary: every effect once, in per-key order, every message acked
// after its effect; the stream drops the killed relay's re-sends by id.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Outbox } from "@postbox-rs/postbox";
import { consumerConfig, natsInboxConsumer } from "@postbox-rs/postbox/nats";
import { NATS_URL, dropSchema, killRelay, migratedSchema, newPool, startRelay, unsent, waitUntil } from "./helpers.mjs";

const KEYS = 4;
let pool, schema, subject, nc, jsm;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_nats");
  subject = `${schema}-n`;
  nc = await connect({ servers: NATS_URL });
  jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: schema, subjects: [subject] });
  await jsm.consumers.add(schema, { ...consumerConfig("node-nats"), ack_wait: 2_000_000_000 });
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text, key text, n int, at bigserial)`);
});
after(async () => {
  await jsm.streams.delete(schema);
  await nc.close();
  await dropSchema(pool, schema);
  await pool.end();
});

async function produce(outbox, from, count) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await outbox.enqueueMany(
      client,
      Array.from({ length: count }, (_, j) => ({ topic: subject, event: "order.step", key: `k${(from + j) % KEYS}`, payload: { n: from + j } })),
    );
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}

const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n;

test("messages cross a relay kill once each, in per-key order, acked after the effect", async () => {
  const outbox = new Outbox(schema);
  let duplicates = 0;
  const handler = {
    async handle(tx, m) {
      assert.equal(m.name, "order.step");
      await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, m.key, m.json().n]);
    },
    onDuplicate: () => void (duplicates += 1),
  };
  const consumer = natsInboxConsumer(await jetstream(nc).consumers.get(schema, "node-nats"), handler, { pool, schema, consumer: "node-nats" });
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  const sink = ["--sink", "nats", "--nats-url", NATS_URL, "--nats-ack-timeout", "2s"];
  try {
    await produce(outbox, 0, 200);
    let relay = startRelay(schema, sink);
    await waitUntil("the first effects", async () => (await count()) >= 20).catch((e) => {
      throw new Error(`${e.message}; relay log:\n${relay.log}`);
    });
    await killRelay(relay, "SIGKILL");
    await produce(outbox, 200, 100);
    relay = startRelay(schema, sink);
    try {
      await waitUntil("all 300 effects", async () => (await count()) === 300, 60_000);
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
    assert.equal(new Set(rows.map((r) => r.event_id)).size, 300);
    // The stream dropped the killed relay's re-sends by Nats-Msg-Id.
    assert.equal((await jsm.streams.info(schema)).state.messages, 300);
    await waitUntil("every message acked", async () => (await jsm.consumers.info(schema, "node-nats")).num_ack_pending === 0);
  } finally {
    await consumer.close();
  }
  await consumer.done;
});
