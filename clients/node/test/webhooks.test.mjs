// Node producer → `postbox relay` as Standard Webhooks (killed mid-way) → a
// node:http receiver on the package's WebhookReceiver: every effect once, in
// per-key order; a forged or unsigned request is refused with 401.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { WebhookReceiver } from "@postbox-rs/postbox/webhooks";
import { acrossARelayKill, dropSchema, effectsTable, migratedSchema, newPool, recorder } from "./helpers.mjs";

const SECRET = `whsec_${randomBytes(24).toString("base64")}`;
let pool, schema, server, port, r;
before(async () => {
  pool = newPool(6);
  schema = await migratedSchema("node_hooks");
  await effectsTable(pool, schema);
  r = recorder(pool, schema);
  // Two secrets, as while rotating: the relay signs with the second.
  const receiver = new WebhookReceiver({ pool, schema, consumer: "node-hooks", secrets: [`whsec_${randomBytes(24).toString("base64")}`, SECRET] });
  server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const done = await receiver.receive(req.headers, Buffer.concat(chunks), r.handler);
    res.writeHead(done.status, { "content-length": 0 });
    res.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = server.address().port;
});
after(async () => {
  await new Promise((resolve) => server.close(resolve));
  await dropSchema(pool, schema);
  await pool.end();
});

test("signed webhooks cross a relay kill with one effect each, in per-key order", async () => {
  const sink = ["--sink", "webhook", "--webhook-url", `http://127.0.0.1:${port}/hooks`, "--webhook-secrets", SECRET, "--webhook-timeout", "2s"];
  await acrossARelayKill({ pool, schema, topic: "orders", sink, count: r.count, first: 150, second: 50 });
});

test("a request no secret signed is refused and applies nothing", async () => {
  const applied = await r.count();
  for (const headers of [
    {},
    { "webhook-id": "forged-1", "webhook-timestamp": String(Math.floor(Date.now() / 1000)), "webhook-signature": "v1,AAAA" },
  ]) {
    const res = await fetch(`http://127.0.0.1:${port}/hooks`, { method: "POST", headers, body: JSON.stringify({ key: "k1", n: 1 }) });
    assert.equal(res.status, 401);
  }
  assert.equal(await r.count(), applied);
});

test("a default receiver ends a handler that always fails within the relay's timeout, as a consumer dead letter", async () => {
  const { Webhook } = await import("standardwebhooks");
  const receiver = new WebhookReceiver({ pool, schema, consumer: "node-hooks-failing", secrets: [SECRET] });
  const id = "0190d6a4-7a5e-7c1e-9d1e-1a2b3c4d5e6f";
  const body = JSON.stringify({ key: "k-fail", n: 1 });
  const now = new Date();
  const headers = {
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": new Webhook(SECRET).sign(id, now, body),
    "postbox-topic": "orders",
  };
  const started = performance.now();
  const done = await receiver.receive(headers, Buffer.from(body), async () => {
    throw new Error("the handler always fails");
  });
  const took = performance.now() - started;
  // Answered 204 before the relay's 5 s timeout: the key moves on, and the
  // failing message waits in the consumer's dead letters for a replay.
  assert.equal(done.status, 204);
  assert.equal(done.processed, "dead-lettered");
  assert.ok(took < 4500, `took ${took} ms`);
  const { rows } = await pool.query(`SELECT attempts, last_error FROM ${schema}.inbox_dead_letter WHERE consumer = $1 AND message_id = $2`, ["node-hooks-failing", id]);
  assert.equal(rows.length, 1);
  assert.match(rows[0].last_error, /the handler always fails/);
});
