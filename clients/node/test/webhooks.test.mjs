// Node producer → `postbox relay` as Standard Webhooks (killed mid-way) → a
// node:http receiver on the package's WebhookReceiver: every effect once, in
// per-key order; a forged or unsigned request is refused with 401.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { Outbox } from "@postbox-rs/postbox";
import { WebhookReceiver } from "@postbox-rs/postbox/webhooks";
import { dropSchema, killRelay, migratedSchema, newPool, startRelay, unsent, waitUntil } from "./helpers.mjs";

const KEYS = 4;
const SECRET = `whsec_${randomBytes(24).toString("base64")}`;
let pool, schema, server, port;
let duplicates = 0;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_hooks");
  await pool.query(`CREATE TABLE ${schema}.effects (event_id text, key text, n int, at bigserial)`);
  const receiver = new WebhookReceiver({ pool, schema, consumer: "node-hooks", secrets: [`whsec_${randomBytes(24).toString("base64")}`, SECRET] });
  const handler = {
    async handle(tx, m) {
      await tx.query(`INSERT INTO ${schema}.effects (event_id, key, n) VALUES ($1, $2, $3)`, [m.id, m.key, m.json().n]);
    },
    onDuplicate: () => void (duplicates += 1),
  };
  server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const done = await receiver.receive(req.headers, Buffer.concat(chunks), handler);
    res.writeHead(done.status, { "content-length": 0 });
    res.end();
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  port = server.address().port;
});
after(async () => {
  await new Promise((r) => server.close(r));
  await dropSchema(pool, schema);
  await pool.end();
});

async function produce(outbox, from, count) {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await outbox.enqueueMany(
      client,
      Array.from({ length: count }, (_, j) => ({ topic: "orders", event: "order.step", key: `k${(from + j) % KEYS}`, payload: { n: from + j } })),
    );
    await client.query("COMMIT");
  } finally {
    client.release();
  }
}

const count = async () => (await pool.query(`SELECT count(*)::int AS n FROM ${schema}.effects`)).rows[0].n;

test("signed webhooks cross a relay kill with one effect each, in per-key order", async () => {
  const outbox = new Outbox(schema);
  const sink = ["--sink", "webhook", "--webhook-url", `http://127.0.0.1:${port}/hooks`, "--webhook-secrets", SECRET, "--webhook-timeout", "2s"];
  await produce(outbox, 0, 150);
  let relay = startRelay(schema, sink);
  await waitUntil("the first effects", async () => (await count()) >= 20).catch((e) => {
    throw new Error(`${e.message}; relay log:\n${relay.log}`);
  });
  await killRelay(relay, "SIGKILL");
  await produce(outbox, 150, 50);
  relay = startRelay(schema, sink);
  try {
    await waitUntil("all 200 effects", async () => (await count()) === 200, 60_000);
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
  assert.equal(new Set(rows.map((r) => r.event_id)).size, 200);
});

test("a request no secret signed is refused and applies nothing", async () => {
  const applied = await count();
  for (const headers of [
    {},
    { "webhook-id": "forged-1", "webhook-timestamp": String(Math.floor(Date.now() / 1000)), "webhook-signature": "v1,AAAA" },
  ]) {
    const res = await fetch(`http://127.0.0.1:${port}/hooks`, { method: "POST", headers, body: JSON.stringify({ n: 1 }) });
    assert.equal(res.status, 401);
  }
  assert.equal(await count(), applied);
});
