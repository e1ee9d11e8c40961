// Shared by the package's tests: the real PostgreSQL, Redis and `postbox`
// binary the test command set up (DATABASE_URL, REDIS_URL, POSTBOX_BIN).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import assert from "node:assert/strict";
import pg from "pg";
import { Outbox } from "@postbox-rs/postbox";

export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres:postgres@127.0.0.1:5432/postbox_test";
export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? "amqp://guest:guest@127.0.0.1:5672/%2f";
export const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
export const POSTBOX_BIN = process.env.POSTBOX_BIN ?? new URL("../../../target/debug/postbox", import.meta.url).pathname;

export function redisConnection() {
  const u = new URL(REDIS_URL);
  return { host: u.hostname, port: Number(u.port || 6379), maxRetriesPerRequest: null };
}

/** A schema of this test's own, migrated by the `postbox` binary; dropped by `drop`. */
export async function migratedSchema(prefix) {
  const schema = `${prefix}_${randomBytes(4).toString("hex")}`;
  execFileSync(POSTBOX_BIN, ["migrate", "--schema", schema, "--database-url", DATABASE_URL], { stdio: "pipe" });
  return schema;
}

export async function dropSchema(pool, schema) {
  await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
}

export function newPool(max = 5) {
  return new pg.Pool({ connectionString: DATABASE_URL, max });
}

/** Wait until `check()` is truthy, polling; fail after `timeoutMs` naming `what`. */
export async function waitUntil(what, check, timeoutMs = 20_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** `postbox relay` on `schema` publishing to BullMQ on REDIS_URL; its stderr is kept. */
export function startRelay(schema, extra = []) {
  const env = { ...process.env, RUST_LOG: "info", NO_COLOR: "1" };
  delete env.POSTBOX_CONFIG;
  const child = spawn(
    POSTBOX_BIN,
    [
      "relay",
      "--database-url", DATABASE_URL,
      "--schemas", schema,
      "--redis-url", REDIS_URL,
      "--rebalance-interval", "200ms",
      "--backoff-max", "500ms",
      ...extra,
    ],
    { stdio: ["ignore", "ignore", "pipe"], env },
  );
  child.log = "";
  child.stderr.on("data", (d) => (child.log += d));
  child.exited = new Promise((r) => child.on("exit", r));
  return child;
}

export async function killRelay(child, signal = "SIGKILL") {
  if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  await child.exited;
}

export async function unsent(pool, schema) {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${schema}.outbox WHERE sent_at IS NULL`);
  return rows[0].n;
}

// --- The relay-kill experiment every broker's consumer test runs -------------

/** `<schema>.effects` with no unique constraint: an effect applied twice would show. */
export async function effectsTable(pool, schema) {
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text, key text, n int, at bigserial)`);
}

/**
 * The handler the broker tests give their consumer: records each effect,
 * checks the event type, counts the deliveries the inbox skipped.
 */
export function recorder(pool, schema) {
  const r = {
    duplicates: 0,
    handler: {
      async handle(tx, m) {
        if (m.event !== null && m.event !== "order.step") throw new Error(`unexpected event type ${m.event}`);
        const { key, n } = m.json();
        await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, key, n]);
      },
      onDuplicate: () => void (r.duplicates += 1),
    },
    count: async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n,
  };
  return r;
}

/** Enqueue events `from`..`from+count` in one transaction: key `k<n % keys>`, payload `{key, n}`. */
export async function produce(pool, schema, topic, from, count, keys = 4) {
  const outbox = new Outbox(schema);
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const events = Array.from({ length: count }, (_, j) => {
      const n = from + j;
      return { topic, event: "order.step", key: `k${n % keys}`, payload: { key: `k${n % keys}`, n } };
    });
    await outbox.enqueueMany(client, events);
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}

/**
 * `first` events relayed by a relay started with `sink`, SIGKILLed once a
 * tenth of them were applied, `second` more enqueued, a new relay started:
 * waits for every effect and an empty outbox, then checks each effect once
 * and each key in order. Returns the effects' rows.
 */
export async function acrossARelayKill({ pool, schema, topic, sink, count, first = 200, second = 100, keys = 4 }) {
  await produce(pool, schema, topic, 0, first, keys);
  let relay = startRelay(schema, sink);
  await waitUntil("the first effects", async () => (await count()) >= first / 10, 30_000).catch((e) => {
    throw new Error(`${e.message}; relay log:\n${relay.log}`);
  });
  await killRelay(relay, "SIGKILL");
  await produce(pool, schema, topic, first, second, keys);
  relay = startRelay(schema, sink);
  const total = first + second;
  try {
    await waitUntil(`all ${total} effects`, async () => (await count()) === total, 60_000);
    await waitUntil("the outbox drained", async () => (await unsent(pool, schema)) === 0);
  } finally {
    await killRelay(relay, "SIGTERM");
  }
  const { rows } = await pool.query(`SELECT event_id, key, n FROM ${schema}.effects ORDER BY at`);
  const last = new Map();
  for (const { key, n } of rows) {
    assert.ok((last.get(key) ?? -1) < n, `key ${key}: ${n} applied after ${last.get(key)}`);
    last.set(key, n);
  }
  assert.equal(new Set(rows.map((r) => r.event_id)).size, total, "one effect per event");
  return rows;
}
