// One chat service in Node.js on the postbox npm package: what `chat serve`
// does in Rust (examples/chat/src/service.rs, receiver.rs) — the HTTP API and
// page, socket.io rooms, the message and its event in one transaction, and
// the inbox worker for the peer's messages and receipts — with the same SQL
// files and the same lines on stdout, so `chat demo --node <service>` and the
// chaos harness can run either service in either language.
//
// Usage: node service.mjs --service workers --peer consumers --database-url URL
//          [--schema S] [--peer-schema S] [--listen 127.0.0.1:8082]
//          [--redis-url redis://127.0.0.1:6379] [--lock-duration-ms 30000]
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import pg from "pg";
import { Server } from "socket.io";
import { Outbox, checkSchemaName, isTransientDatabaseError } from "@postbox-rs/postbox";
import { inboxWorker } from "@postbox-rs/postbox/bullmq";

const MAX_BODY_CHARS = 2000;
const CREATED = "message.created";
const RECEIVED = "message.received";
const queueFor = (schema) => `chat-to-${schema}`;

const { values: a } = parseArgs({
  options: {
    service: { type: "string" },
    peer: { type: "string" },
    schema: { type: "string" },
    "peer-schema": { type: "string" },
    "database-url": { type: "string", default: process.env.DATABASE_URL },
    listen: { type: "string", default: "127.0.0.1:8081" },
    broker: { type: "string", default: "bullmq" },
    "redis-url": { type: "string", default: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" },
    "lock-duration-ms": { type: "string", default: "30000" },
    mode: { type: "string", default: "v2" },
    // Accepted for the same command line as `chat serve`; BullMQ only here.
    "rabbitmq-url": { type: "string" },
    "nats-url": { type: "string" },
  },
  strict: true,
});
const fail = (why) => {
  console.error(`error: ${why}`);
  process.exit(2);
};
if (!a.service || !a.peer) fail("--service and --peer are required");
if (!a["database-url"]) fail("--database-url (or DATABASE_URL) is required");
if (a.broker !== "bullmq") fail(`the Node service runs over BullMQ only, not --broker ${a.broker}`);
if (a.mode !== "v2") fail("the Node service is postbox's (v2) only; the naive v1 runs in Rust");

const service = a.service;
const schema = a.schema ?? service;
const outbox = new Outbox(schema); // validates the name before it reaches any SQL
const peerTopic = queueFor(checkSchemaName(a["peer-schema"] ?? a.peer));
const sqlFile = (name) =>
  readFileSync(new URL(`../sql/${name}.sql`, import.meta.url), "utf8").replaceAll("{schema}", schema);
const q = {
  list: sqlFile("chat_list"),
  exists: sqlFile("chat_exists"),
  insert: sqlFile("message_insert"),
  history: sqlFile("message_history"),
  received: sqlFile("received_insert"),
  delivered: sqlFile("message_mark_delivered"),
};
const shown = (what) => console.log(`${service}: ${what}`);
const pool = new pg.Pool({ connectionString: a["database-url"], max: 10 });
pool.on("error", () => {}); // an idle client lost: the pool replaces it
const redis = new URL(a["redis-url"]);
const connection = {
  host: redis.hostname,
  port: Number(redis.port || 6379),
  ...(redis.password ? { password: decodeURIComponent(redis.password) } : {}),
  maxRetriesPerRequest: null,
};

// --- HTTP API and page ------------------------------------------------------
class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function sendJson(res, status, value) {
  const body = Buffer.from(JSON.stringify(value));
  res.writeHead(status, { "content-type": "application/json", "content-length": body.length });
  res.end(body);
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const c of req) {
    size += c.length;
    if (size > 64 * 1024) throw new ApiError(413, "request body over 64 KiB");
    chunks.push(c);
  }
  try {
    const v = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    if (typeof v?.body !== "string") throw new Error("no string field body");
    return v.body;
  } catch (e) {
    throw new ApiError(400, `expected a JSON object {"body": "..."}: ${e.message}`);
  }
}

async function chatExists(client, id) {
  const { rows } = await client.query(q.exists, [id]);
  if (!rows[0].exists) throw new ApiError(404, `chat ${id} does not exist`);
}

const asMessage = (row, mine, state) => ({
  id: row.id,
  chat_id: Number(row.chat_id),
  body: row.body,
  from: service,
  mine,
  created_at: row.created_at.toISOString(),
  state,
});

async function send(id, req) {
  const body = (await readBody(req)).trim();
  if (body === "") throw new ApiError(422, "message body is empty");
  const chars = [...body].length;
  if (chars > MAX_BODY_CHARS) {
    throw new ApiError(413, `message body is ${chars} characters; the limit is ${MAX_BODY_CHARS}`);
  }
  // The message and its event: one transaction, both or neither.
  const tx = await pool.connect();
  let msg;
  try {
    await tx.query("BEGIN");
    await chatExists(tx, id);
    const { rows } = await tx.query(q.insert, [id, body]);
    msg = asMessage(rows[0], true, "saved");
    const created = { id: msg.id, chat_id: msg.chat_id, body: msg.body, sender: service, created_at: msg.created_at };
    await outbox.enqueue(tx, { topic: peerTopic, event: CREATED, key: `chat:${msg.chat_id}`, payload: created, eventId: msg.id });
    await tx.query("COMMIT");
  } catch (e) {
    await tx.query("ROLLBACK").catch(() => {});
    throw e;
  } finally {
    tx.release();
  }
  io.to(`chat:${msg.chat_id}`).emit("message", msg);
  shown(`saved ${JSON.stringify(msg.body)} in chat ${msg.chat_id}`);
  return msg;
}

const page = readFileSync(new URL("../static/index.html", import.meta.url));
const server = createServer(async (req, res) => {
  const url = new URL(req.url, "http://localhost");
  const chat = url.pathname.match(/^\/api\/chats\/(-?\d+)\/messages$/);
  try {
    if (req.method === "GET" && url.pathname === "/") {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8", "content-length": page.length });
      res.end(page);
    } else if (req.method === "GET" && url.pathname === "/healthz") {
      res.writeHead(200, { "content-type": "text/plain", "content-length": 2 });
      res.end("ok");
    } else if (req.method === "GET" && url.pathname === "/api/info") {
      sendJson(res, 200, { service, peer: a.peer, max_body_chars: MAX_BODY_CHARS });
    } else if (req.method === "GET" && url.pathname === "/api/chats") {
      const { rows } = await pool.query(q.list);
      sendJson(res, 200, rows.map((r) => ({ id: Number(r.id), title: r.title })));
    } else if (chat && req.method === "GET") {
      const id = Number(chat[1]);
      await chatExists(pool, id);
      const { rows } = await pool.query(q.history, [id, service]);
      sendJson(
        res,
        200,
        rows.map((r) => ({ ...asMessage(r, r.mine, r.state), from: r.sender })),
      );
    } else if (chat && req.method === "POST") {
      sendJson(res, 201, await send(Number(chat[1]), req));
    } else {
      sendJson(res, 404, { error: `no route ${req.method} ${url.pathname}` });
    }
  } catch (e) {
    if (e instanceof ApiError) return sendJson(res, e.status, { error: e.message });
    const transient = isTransientDatabaseError(e);
    console.error(`${service}: ${transient ? "database unavailable" : "request failed"}: ${e.message}`);
    sendJson(res, transient ? 503 : 500, {
      error: transient ? "database unavailable, try again" : "could not store the message",
    });
  }
});

// --- socket.io rooms ----------------------------------------------------------
const io = new Server(server, { serveClient: false });
io.on("connection", (socket) => {
  // Acknowledged once joined: the page loads the chat's history only then.
  socket.on("join", (d, ack) => {
    if (Number.isInteger(d?.chat_id)) socket.join(`chat:${d.chat_id}`);
    if (typeof ack === "function") ack(true);
  });
  socket.on("leave", (d) => {
    if (Number.isInteger(d?.chat_id)) socket.leave(`chat:${d.chat_id}`);
  });
});

// --- the inbox worker: the peer's messages and receipts ---------------------------
const crashAfterInbox = (process.env.CHAT_FAILPOINT ?? "").startsWith("crash_after_inbox:")
  ? process.env.CHAT_FAILPOINT.slice("crash_after_inbox:".length)
  : null;
const receiver = {
  async handle(tx, job) {
    if (job.event === CREATED) {
      const m = job.json();
      await tx.query(q.received, [m.id, m.chat_id, m.body, m.sender, m.created_at]);
      // The receipt leaves in the same transaction as the record.
      await outbox.enqueue(tx, {
        topic: peerTopic,
        event: RECEIVED,
        key: `chat:${m.chat_id}`,
        payload: { id: m.id, chat_id: m.chat_id },
      });
    } else if (job.event === RECEIVED) {
      await tx.query(q.delivered, [job.json().id]);
    } else {
      throw new Error(`unknown event ${JSON.stringify(job.event)}`);
    }
  },
  afterCommit(job) {
    if (job.event === CREATED) {
      const m = job.json();
      io.to(`chat:${m.chat_id}`).emit("message", {
        id: m.id,
        chat_id: m.chat_id,
        body: m.body,
        from: m.sender,
        mine: false,
        created_at: m.created_at,
        state: "received",
      });
      shown(`shown ${JSON.stringify(m.body)} in chat ${m.chat_id} (from ${m.sender})`);
      if (crashAfterInbox === m.body) {
        // Committed in the inbox, not acknowledged: BullMQ redelivers the job
        // once its lock expires, and the inbox must skip it.
        shown(`crashed after recording ${JSON.stringify(m.body)}`);
        process.exit(101);
      }
    } else if (job.event === RECEIVED) {
      const r = job.json();
      io.to(`chat:${r.chat_id}`).emit("status", { id: r.id, chat_id: r.chat_id, state: "delivered" });
    }
  },
  onDuplicate(job) {
    if (job.event === CREATED) shown(`${JSON.stringify(job.json().body)} again, already in inbox, skipped`);
  },
};
const worker = inboxWorker(queueFor(schema), receiver, {
  pool,
  schema,
  consumer: `chat-${service}`,
  worker: {
    connection,
    lockDuration: Number(a["lock-duration-ms"]),
    // A crashed worker's job is redelivered within one lock duration, as in Rust.
    stalledInterval: Math.min(Number(a["lock-duration-ms"]), 30_000),
    concurrency: 1,
  },
  logger: {
    info() {},
    warn: (m, f) => console.error(`${service}: ${m} ${f ? JSON.stringify(f) : ""}`),
    error: (m, f) => console.error(`${service}: ${m} ${f ? JSON.stringify(f) : ""}`),
  },
});

// --- start and stop -----------------------------------------------------------
const [host, port] = [a.listen.slice(0, a.listen.lastIndexOf(":")), Number(a.listen.slice(a.listen.lastIndexOf(":") + 1))];
await new Promise((resolve, reject) => {
  server.once("error", (e) => reject(new Error(`cannot listen on ${a.listen}: ${e.message}`)));
  server.listen(port, host, resolve);
});
const addr = server.address();
shown(`listening on http://${addr.address}:${addr.port}`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  io.close();
  await Promise.all([new Promise((r) => server.close(r)), worker.close()]);
  await pool.end();
  shown("stopped");
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
