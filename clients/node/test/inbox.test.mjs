// The inbox loop against the real PostgreSQL: effects once, duplicates
// skipped, the handler's failures retried then kept as dead letters (and
// replayed), the database's failures waited out, a COMMIT whose answer was
// lost resolved by looking the message up.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { ConsumeError, InboxConsumer, Message, PermanentError, receive } from "@postbox-rs/postbox";
import { DATABASE_URL, POSTBOX_BIN, dropSchema, migratedSchema, newPool, waitUntil } from "./helpers.mjs";

const FAST = { attempts: 3, backoffMinMs: 10, backoffMaxMs: 20 };
let pool, schema;
before(async () => {
  pool = newPool();
  schema = await migratedSchema("node_inbox");
  await pool.query(`CREATE TABLE ${schema}.effects (consumer text, message_id text, n int)`);
});
after(async () => {
  await dropSchema(pool, schema);
  await pool.end();
});

const message = (id, payload = { n: 1 }) => {
  const m = new Message(id, "orders");
  m.event = "order.created";
  m.key = "order:1";
  m.payload = Buffer.from(JSON.stringify(payload));
  m.headers = [["x-tenant", "t1"]];
  m.source = `test ${id}`;
  return m;
};
const effect = (consumer) => async (tx, m) => {
  await tx.query(`INSERT INTO ${schema}.effects VALUES ($1, $2, $3)`, [consumer, m.id, m.json().n]);
};
const effects = async (consumer) =>
  (await pool.query(`SELECT message_id FROM ${schema}.effects WHERE consumer = $1 ORDER BY message_id`, [consumer])).rows.map(
    (r) => r.message_id,
  );

test("message.name is the deprecated alias of message.event", () => {
  const m = message("alias");
  assert.equal(m.name, "order.created");
  m.name = "order.paid";
  assert.equal(m.event, "order.paid");
});

test("retry.backoffMs is read as the former name of backoffMinMs, with a warning", () => {
  const warned = [];
  const logger = { info() {}, error() {}, warn: (m) => warned.push(m) };
  const c = new InboxConsumer({ pool, schema, consumer: "renamed", retry: { backoffMs: 250 }, logger });
  assert.equal(c.retry.backoffMinMs, 250);
  assert.equal("backoffMs" in c.retry, false);
  assert.match(warned.join("\n"), /backoffMs is deprecated.*backoffMinMs/);
  const both = new InboxConsumer({ pool, schema, consumer: "both", retry: { backoffMs: 250, backoffMinMs: 50 }, logger });
  assert.equal(both.retry.backoffMinMs, 50, "the current name wins");
});

test("a message's effect commits once; the second delivery is skipped", async () => {
  const c = new InboxConsumer({ pool, schema, consumer: "once" });
  const seen = [];
  const handler = { handle: effect("once"), afterCommit: (m) => seen.push(["committed", m.id]), onDuplicate: (m) => seen.push(["duplicate", m.id]) };
  assert.equal(await c.process(message("m1"), handler), "fresh");
  assert.equal(await c.process(message("m1"), handler), "duplicate");
  assert.deepEqual(await effects("once"), ["m1"]);
  assert.deepEqual(seen, [["committed", "m1"], ["duplicate", "m1"]]);
});

test("receive() on the caller's own transaction", async () => {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    assert.equal(await receive(client, "manual", "m1", { schema }), "fresh");
    assert.equal(await receive(client, "manual", "m1", { schema }), "duplicate");
    await client.query("ROLLBACK");
  } finally {
    client.release();
  }
});

test("a failing handler is retried, then kept whole as a dead letter, and replayed on request", async () => {
  const c = new InboxConsumer({ pool, schema, consumer: "dead", retry: FAST, replayPollMs: 50 });
  let runs = 0;
  const failing = async () => {
    runs += 1;
    throw new Error("payment service said no", { cause: new Error("HTTP 503") });
  };
  assert.equal(await c.process(message("m2"), failing), "dead-lettered");
  assert.equal(runs, 3);
  const { rows } = await pool.query(
    `SELECT topic, name, key, convert_from(payload, 'UTF8') AS payload, headers, source, attempts, last_error
       FROM ${schema}.inbox_dead_letter WHERE consumer = 'dead' AND message_id = 'm2'`,
  );
  assert.deepEqual(rows[0], {
    topic: "orders",
    name: "order.created",
    key: "order:1",
    payload: '{"n":1}',
    headers: [["x-tenant", "t1"]],
    source: "test m2",
    attempts: 3,
    last_error: "payment service said no: HTTP 503",
  });
  assert.deepEqual(await effects("dead"), []);

  // The operator replays it with the CLI; a running consumer applies it once.
  execFileSync(POSTBOX_BIN, ["inbox-dlq", "replay", "--database-url", DATABASE_URL, "--schema", schema, "--consumer", "dead", "--yes"], {
    stdio: "pipe",
  });
  const shutdown = new AbortController();
  const replays = c.serveReplays(effect("dead"), shutdown.signal);
  await waitUntil("the replayed dead letter's effect", async () => (await effects("dead")).length === 1);
  await waitUntil("the dead letter row removed", async () =>
    (await pool.query(`SELECT 1 FROM ${schema}.inbox_dead_letter WHERE consumer = 'dead'`)).rowCount === 0,
  );
  shutdown.abort();
  await replays;
});

test("a PermanentError is dead-lettered after one run, though the policy allows more", async () => {
  const c = new InboxConsumer({ pool, schema, consumer: "permanent", retry: { attempts: 5, backoffMinMs: 60_000, backoffMaxMs: 60_000 } });
  let runs = 0;
  const neverValid = async () => {
    runs += 1;
    throw new PermanentError("order has no id", { cause: new Error("missing field id") });
  };
  assert.equal(await c.process(message("m-perm"), neverValid), "dead-lettered");
  assert.equal(runs, 1);
  const { rows } = await pool.query(
    `SELECT attempts, last_error FROM ${schema}.inbox_dead_letter WHERE consumer = 'permanent' AND message_id = 'm-perm'`,
  );
  assert.deepEqual(rows[0], { attempts: 1, last_error: "permanent failure (not retried): order has no id: missing field id" });
});

test("a transient database error inside the handler is waited out, not counted as a failure", async () => {
  const c = new InboxConsumer({ pool, schema, consumer: "transient", retry: { ...FAST, attempts: 1 } });
  let runs = 0;
  const handler = async (tx, m) => {
    runs += 1;
    if (runs <= 2) {
      const err = new Error("could not serialize access due to concurrent update");
      err.code = "40001";
      throw err;
    }
    await effect("transient")(tx, m);
  };
  // attempts = 1: a counted failure would dead-letter it at once.
  assert.equal(await c.process(message("m3"), handler), "fresh");
  assert.equal(runs, 3);
  assert.deepEqual(await effects("transient"), ["m3"]);
});

test("a COMMIT that went through but whose answer was lost counts as committed, not as a duplicate", async () => {
  let lose = true;
  // The real pool, with the first COMMIT's answer replaced by a lost connection.
  const lossy = {
    query: (...a) => pool.query(...a),
    connect: async () => {
      const client = await pool.connect();
      return {
        query: async (text, values) => {
          const res = await client.query(text, values);
          if (text === "COMMIT" && lose) {
            lose = false;
            throw new Error("Connection terminated unexpectedly");
          }
          return res;
        },
        release: (err) => client.release(err),
      };
    },
  };
  const c = new InboxConsumer({ pool: lossy, schema, consumer: "doubt" });
  const after = [];
  const outcome = await c.process(message("m4"), {
    handle: effect("doubt"),
    afterCommit: (m) => after.push(m.id),
    onDuplicate: (m) => after.push(`duplicate ${m.id}`),
  });
  assert.equal(outcome, "fresh");
  assert.deepEqual(after, ["m4"]);
  assert.deepEqual(await effects("doubt"), ["m4"]);
});

test("shutdown during a retry wait: the message is not acknowledged", async () => {
  const c = new InboxConsumer({ pool, schema, consumer: "stop", retry: { attempts: 5, backoffMinMs: 60_000, backoffMaxMs: 60_000 } });
  const shutdown = new AbortController();
  const done = c.process(message("m5"), async () => {
    setImmediate(() => shutdown.abort());
    throw new Error("fails");
  }, shutdown.signal);
  await assert.rejects(done, (err) => err instanceof ConsumeError && err.kind === "cancelled");
  const { rowCount } = await pool.query(`SELECT 1 FROM ${schema}.inbox_dead_letter WHERE consumer = 'stop'`);
  assert.equal(rowCount, 0);
});

test("an unreachable database past the patience: ConsumeError, the message not acknowledged", async () => {
  const down = {
    query: async () => {
      throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    },
    connect: async () => {
      throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    },
  };
  const c = new InboxConsumer({ pool: down, schema, consumer: "down", patienceMs: 300, logger: { info() {}, warn() {}, error() {} } });
  await assert.rejects(c.process(message("m6"), effect("down")), (err) => err instanceof ConsumeError && err.kind === "database");
});
