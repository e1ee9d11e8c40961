// Node producer → `postbox relay` to Redis Streams (killed mid-way) → the
// package's consumer-group reader: every effect once, in per-key order,
// though the killed relay's re-sends are real duplicate entries (Redis
// Streams keeps no ids); every entry acknowledged.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { redisStreamsInboxConsumer } from "@postbox-rs/postbox/redis-streams";
import { REDIS_URL, acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder, waitUntil } from "./helpers.mjs";

let pool, schema, stream, redis;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_streams");
  stream = `${schema}-s`;
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  await effectsTable(pool, schema);
});
after(async () => {
  await redis.del(stream);
  redis.disconnect();
  await dropSchema(pool, schema);
  await pool.end();
});

test("entries cross a relay kill once each, in per-key order, acknowledged after the effect", async () => {
  const r = recorder(pool, schema);
  const options = { pool, schema, consumer: "node-streams", group: "node-streams", blockMs: 200 };
  const consumer = redisStreamsInboxConsumer(redis, stream, r.handler, options);
  consumer.done.catch((e) => console.log("consumer stopped:", e));
  try {
    const sink = ["--sink", "redis_streams", "--redis-streams-url", REDIS_URL];
    await acrossARelayKill({ pool, schema, topic: stream, sink, count: r.count });
    assert.equal(await redis.xlen(stream), 300 + r.duplicates);
    await waitUntil("nothing pending", async () => (await redis.xpending(stream, "node-streams"))[0] === 0);
  } finally {
    await consumer.close();
  }
  await consumer.done;
});
