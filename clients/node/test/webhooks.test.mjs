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
