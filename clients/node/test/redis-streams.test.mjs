// Node producer → `postbox relay` to Redis Streams (killed mid-way) → the
// package's consumer-group reader, with the real PostgreSQL, Redis and relay
// binary: every effect once, in per-key order, though the killed relay's
// re-sends are real duplicate entries (Redis Streams keeps no ids).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Outbox } from "@postbox-rs/postbox";
import { redisStreamsInboxConsumer } from "@postbox-rs/postbox/redis-streams";
import { REDIS_URL, dropSchema, killRelay, migratedSchema, newPool, startRelay, unsent, waitUntil } from "./helpers.mjs";

const KEYS = 4;
let pool, schema, stream, redis;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_streams");
  stream = `${schema}-s`;
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text, key text, n int, at bigserial)`);
});
after(async () => {
  await redis.del(stream);
  redis.disconnect();
  await dropSchema(pool, schema);
  await pool.end();
});

async function produce(outbox, from, count) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await outbox.enqueueMany(
      client,
      Array.from({ length: count }, (_, j) => ({ topic: stream, event: "order.step", key: `k${(from + j) % KEYS}`, payload: { n: from + j } })),
    );
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}

const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n;

test("entries cross a relay kill once each, in per-key order, acknowledged after the effect", async () => {
  const outbox = new Outbox(schema);
  let duplicates = 0;
  const consumer = redisStreamsInboxConsumer(
    redis,
    stream,
    {
      async handle(tx, m) {
        assert.equal(m.name, "order.step");
        await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, m.key, m.json().n]);
      },
      onDuplicate: () => void (duplicates += 1),
    },
    { pool, schema, consumer: "node-streams", group: "node-streams", blockMs: 200 },
  );
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  const sink = ["--sink", "redis_streams", "--redis-streams-url", REDIS_URL];
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
    // Every entry acknowledged, the re-sent ones included.
    const entries = await redis.xlen(stream);
    assert.equal(entries, 300 + duplicates);
    await waitUntil("nothing pending", async () => (await redis.xpending(stream, "node-streams"))[0] === 0);
  } finally {
    await consumer.close();
  }
  await consumer.done;
});
