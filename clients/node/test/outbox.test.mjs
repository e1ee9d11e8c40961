// `enqueue` / `enqueueMany` against the real PostgreSQL: the row the Rust
// library writes, in the caller's transaction, refused with advice when the
// schema was never migrated.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Outbox, SchemaNotMigratedError, enqueue } from "@postbox-rs/postbox";
import { dropSchema, migratedSchema, newPool } from "./helpers.mjs";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
let pool, schema, outbox;
before(async () => {
  pool = newPool();
  schema = await migratedSchema("node_outbox");
  outbox = new Outbox(schema);
});
after(async () => {
  await dropSchema(pool, schema);
  await pool.end();
});

async function inTransaction(fn) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const out = await fn(client);
    await client.query("COMMIT");
    return out;
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  } finally {
    client.release();
  }
}

test("enqueue writes the row the relay reads, committed with the caller's transaction", async () => {
  const done = await inTransaction(async (tx) => {
    await tx.query(`CREATE TABLE IF NOT EXISTS ${schema}.orders (id int PRIMARY KEY)`);
    await tx.query(`INSERT INTO ${schema}.orders VALUES (1)`);
    return outbox.enqueue(tx, {
      topic: "orders",
      event: "order.created",
      key: "order:1",
      payload: [1, { a: "b" }],
      headers: { traceparent: TP, "x-tenant": "t1" },
    });
  });
  // Made here, time ordered: a UUIDv7 whose first 48 bits are the time in ms.
  assert.match(done.eventId, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const ms = parseInt(done.eventId.replace(/-/g, "").slice(0, 12), 16);
  assert.ok(Math.abs(ms - Date.now()) < 60_000, `${done.eventId} is not from now`);
  const { rows } = await pool.query(
    `SELECT id::text, event_id::text, topic, event, key, payload, headers, sent_at FROM ${schema}.outbox WHERE id = $1`,
    [done.id],
  );
  assert.deepEqual(rows[0], {
    id: done.id,
    event_id: done.eventId,
    topic: "orders",
    event: "order.created",
    key: "order:1",
    // A JS array stays a jsonb array (node-postgres alone would make it a PostgreSQL array).
    payload: [1, { a: "b" }],
    headers: { traceparent: TP, "x-tenant": "t1" },
    sent_at: null,
  });
});

test("a rolled-back transaction leaves no event", async () => {
  const eventId = "0190d6a4-7a5e-7c1e-9d1e-000000000001";
  await assert.rejects(
    inTransaction(async (tx) => {
      await outbox.enqueue(tx, { topic: "orders", event: "order.created", payload: {}, eventId });
      throw new Error("business rule failed");
    }),
    /business rule failed/,
  );
  const { rowCount } = await pool.query(`SELECT 1 FROM ${schema}.outbox WHERE event_id = $1`, [eventId]);
  assert.equal(rowCount, 0);
});

test("enqueueMany keeps the caller's order in one statement, with the caller's event ids", async () => {
  const events = Array.from({ length: 50 }, (_, i) => ({
    topic: "orders",
    event: "order.line",
    key: `order:${i % 3}`,
    payload: { n: i },
    eventId: i === 7 ? "0190d6a4-7a5e-7c1e-9d1e-000000000007" : undefined,
  }));
  const done = await inTransaction((tx) => outbox.enqueueMany(tx, events));
  assert.equal(done.length, 50);
  assert.equal(done[7].eventId, "0190d6a4-7a5e-7c1e-9d1e-000000000007");
  assert.ok(done.filter((_, i) => i !== 7).every((d) => d.eventId[14] === "7"), "the others are UUIDv7");
  const { rows } = await pool.query(
    `SELECT (payload->>'n')::int AS n FROM ${schema}.outbox WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [done.map((d) => d.id)],
  );
  assert.deepEqual(rows.map((r) => r.n), events.map((_, i) => i));
  assert.deepEqual(await inTransaction((tx) => outbox.enqueueMany(tx, [])), []);
});

test("the default schema and a never-migrated one: advice, not the server's bare error", async () => {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await assert.rejects(
      enqueue(client, { topic: "t", event: "e", payload: {} }, { schema: "node_never_migrated" }),
      (err) =>
        err instanceof SchemaNotMigratedError &&
        err.message.includes("run `postbox migrate --schema node_never_migrated` first"),
    );
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
});

test("an invalid event is refused before any SQL: the transaction stays usable", async () => {
  await inTransaction(async (tx) => {
    await assert.rejects(outbox.enqueue(tx, { topic: "t", event: "e", payload: {}, headers: { traceparent: "x" } }), /not a W3C trace context/);
    await assert.rejects(outbox.enqueue(tx, { topic: "t", event: "e", payload: { big: 1n } }), /payload is not JSON/);
    const ok = await outbox.enqueue(tx, { topic: "t", event: "e", payload: null });
    assert.ok(ok.id);
  });
});

test("enqueueMany names the bad event; enqueue refuses the pool, which is outside any transaction", async () => {
  const good = { topic: "t", event: "e", payload: {} };
  await assert.rejects(
    inTransaction((tx) => outbox.enqueueMany(tx, [good, good, { ...good, payload: () => 1 }])),
    /invalid event: event 2 of 3: payload is not JSON/,
  );
  await assert.rejects(outbox.enqueue(pool, good), (err) => err instanceof TypeError && /not the pool/.test(err.message));
});


test("deliverAt ahead waits in outbox_scheduled until cancelled; a past one goes to the outbox now", async () => {
  const soon = new Date(Date.now() + 3_600_000);
  const later = await inTransaction((tx) =>
    outbox.enqueue(tx, { topic: "reminders", event: "remind", key: "u1", payload: { n: 1 }, deliverAt: soon }),
  );
  const { rows } = await pool.query(
    `SELECT id::text, topic, key, deliver_at FROM ${schema}.outbox_scheduled WHERE event_id = $1`,
    [later.eventId],
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0].id, later.id);
  assert.equal(rows[0].deliver_at.getTime(), soon.getTime());
  const inOutbox = await pool.query(`SELECT 1 FROM ${schema}.outbox WHERE event_id = $1`, [later.eventId]);
  assert.equal(inOutbox.rows.length, 0, "not in the outbox before it is due");

  const past = await inTransaction((tx) =>
    outbox.enqueue(tx, { topic: "reminders", event: "remind", payload: {}, deliverAt: new Date(Date.now() - 1000) }),
  );
  const now = await pool.query(`SELECT 1 FROM ${schema}.outbox WHERE event_id = $1`, [past.eventId]);
  assert.equal(now.rows.length, 1, "a time already past delivers now");

  assert.equal(await inTransaction((tx) => outbox.cancel(tx, later.eventId)), true);
  assert.equal(await inTransaction((tx) => outbox.cancel(tx, later.eventId)), false, "cancelled once");
  assert.equal(await inTransaction((tx) => outbox.cancel(tx, past.eventId)), false, "already in the outbox");

  await assert.rejects(
    inTransaction((tx) =>
      outbox.enqueue(tx, { topic: "t", event: "e", payload: {}, deliverAt: new Date(Date.now() + 400 * 86_400_000) }),
    ),
    /more than 366 days ahead/,
  );
  await assert.rejects(
    inTransaction((tx) => outbox.enqueue(tx, { topic: "t", event: "e", payload: {}, deliverAt: new Date("nope") })),
    /deliverAt must be a valid Date/,
  );
  const near = new Outbox(schema, { maxDelayMs: 60_000 });
  await assert.rejects(
    inTransaction((tx) => near.enqueue(tx, { topic: "t", event: "e", payload: {}, deliverAt: soon })),
    /more than 0 days ahead/,
  );
});
