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

test("errors of one module format are instances of the other's classes", async () => {
  const esm = await import("@postbox-rs/postbox");
  const cjs = require("@postbox-rs/postbox");
  const fromEsm = (() => {
    try {
      esm.validateEvent({ topic: "", event: "e", payload: {} });
    } catch (err) {
      return err;
    }
  })();
  const fromCjs = (() => {
    try {
      cjs.checkSchemaName("Bad-Name");
    } catch (err) {
      return err;
    }
  })();
  assert.ok(fromEsm instanceof cjs.InvalidEventError && fromEsm instanceof esm.InvalidEventError);
  assert.ok(fromCjs instanceof esm.InvalidIdentifierError && fromCjs instanceof cjs.InvalidIdentifierError);
  assert.ok(!(fromEsm instanceof cjs.InvalidIdentifierError), "each class its own errors");
  assert.ok(fromEsm instanceof Error);
});
