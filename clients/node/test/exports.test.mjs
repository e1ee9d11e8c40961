// Both module formats load, from the package's own exports, with the same names.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

test("every entry loads as ESM and as CommonJS with the same exports", async () => {
  for (const entry of ["", "/bullmq", "/kafkajs", "/amqplib", "/redis-streams", "/webhooks", "/nats", "/sqs"]) {
    const esm = await import(`@postbox-rs/postbox${entry}`);
    const cjs = require(`@postbox-rs/postbox${entry}`);
    assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).filter((k) => k !== "default").sort(), entry || "main");
  }
  const { Outbox, InboxConsumer } = require("@postbox-rs/postbox");
  assert.equal(new Outbox("shop").schema, "shop");
  assert.equal(typeof InboxConsumer, "function");
});
