// Shared by the package's tests: the real PostgreSQL, Redis and `postbox`
// binary the test command set up (DATABASE_URL, REDIS_URL, POSTBOX_BIN).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";

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
