// The checks `enqueue` makes before the database, against the vectors the
// Rust library is tested with too (tests/vectors/), so both refuse the same.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { InvalidEventError, InvalidIdentifierError, checkSchemaName, validateEvent } from "@postbox-rs/postbox";

const vectors = (name) => JSON.parse(readFileSync(new URL(`../../../tests/vectors/${name}`, import.meta.url), "utf8"));

test("events: the shared vectors are accepted or refused as the Rust library does", () => {
  for (const v of vectors("events.json")) {
    const e = { topic: v.topic, event: v.event, payload: v.payload ?? {}, key: v.key, headers: v.headers };
    if (v.refused) {
      assert.throws(() => validateEvent(e), (err) => err instanceof InvalidEventError && err.message.includes(v.refused), v.name);
    } else {
      assert.doesNotThrow(() => validateEvent(e), v.name);
    }
  }
});

test("schema names: the shared vectors", () => {
  for (const v of vectors("schema_names.json")) {
    if (v.refused) {
      assert.throws(() => checkSchemaName(v.name), (err) => err instanceof InvalidIdentifierError && err.message.includes(v.refused), v.name);
    } else {
      assert.equal(checkSchemaName(v.name), v.name);
    }
  }
});

test("what only the Node API can be given is refused too", () => {
  const base = { topic: "t", event: "e", payload: {} };
  assert.throws(() => validateEvent({ ...base, key: 7 }), /key must be a string, got a number/);
  assert.throws(() => validateEvent({ ...base, payload: undefined }), /payload is missing/);
  assert.throws(() => validateEvent({ ...base, eventId: "nope" }), /eventId must be a UUID/);
  assert.doesNotThrow(() => validateEvent({ ...base, eventId: "0190d6a4-7a5e-7c1e-9d1e-1a2b3c4d5e6f" }));
  // Before any SQL: a payload JSON cannot hold, a header that is not a string.
  assert.throws(() => validateEvent({ ...base, payload: () => 1 }), (err) => err instanceof InvalidEventError && /payload is not JSON: got a function/.test(err.message));
  assert.throws(() => validateEvent({ ...base, payload: 1n }), /payload is not JSON/);
  assert.throws(() => validateEvent({ ...base, headers: { n: 1 } }), /header n must be a string, got a number/);
});

test("a payload JSON.stringify would change is refused, naming the path", () => {
  const base = { topic: "t", event: "e" };
  const refused = (payload, re) =>
    assert.throws(() => validateEvent({ ...base, payload }), (err) => err instanceof InvalidEventError && re.test(err.message), String(re));
  // The example: stored as {} without a word before.
  refused({ f() {}, m: new Map(), n: NaN, i: Infinity }, /payload\.f is a function/);
  refused({ m: new Map([["a", 1]]) }, /payload\.m is a Map, which JSON\.stringify stores as \{\}/);
  refused({ s: new Set([1]) }, /payload\.s is a Set/);
  refused({ n: NaN }, /payload\.n is NaN, which JSON cannot hold \(JSON\.stringify would store null\)/);
  refused({ deep: { list: [1, { x: -Infinity }] } }, /payload\.deep\.list\[1\]\.x is -Infinity/);
  refused({ gone: undefined }, /payload\.gone is undefined/);
  refused([1, undefined], /payload\[1\] is undefined/);
  refused({ "odd key": Symbol("s") }, /payload\["odd key"\] is a symbol/);
  refused(Infinity, /payload is Infinity/);
  // What JSON holds as given, and what says how it is stored, passes.
  for (const payload of [null, 0, -1.5, "x", true, [], {}, { at: new Date(0) }, { b: Buffer.from("hi") }, { a: [1, "2", null, { c: false }] }]) {
    assert.doesNotThrow(() => validateEvent({ ...base, payload }), JSON.stringify(payload));
  }
  // A value shared twice is no cycle.
  const shared = { v: 1 };
  assert.doesNotThrow(() => validateEvent({ ...base, payload: { a: shared, b: shared } }));
});
