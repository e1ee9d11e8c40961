// The producer side: insert events into the outbox inside the caller's
// transaction, with the same columns and checks as the Rust library.
import { InvalidEventError, SchemaNotMigratedError, isUndefinedTable } from "./errors.js";
import { DEFAULT_SCHEMA, checkSchemaName } from "./identifiers.js";
import { queries, type Queries } from "./sql.js";
import { TRACEPARENT, traceparentProblem } from "./trace.js";

/**
 * What `enqueue` runs its statement on: a `pg` `Client` or `PoolClient`
 * inside your transaction, or an adapter of your query builder's transaction
 * (see the README for knex, Prisma and TypeORM).
 */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

/** An event to enqueue. */
export interface Event {
  /** Destination: BullMQ queue, Kafka topic, ... (what the relay's sink calls it). */
  topic: string;
  /** Event type, e.g. `message.created` (the BullMQ job name). */
  event: string;
  /** Any JSON value (BullMQ needs an object). */
  payload: unknown;
  /** Ordering key: events with the same key are delivered in order. */
  key?: string | null;
  /** String headers; `traceparent` must be a W3C trace context. */
  headers?: Record<string, string>;
  /** Idempotency id (a UUID); when absent, `enqueue` makes a time-ordered UUIDv7. */
  eventId?: string | null;
  /**
   * Deliver at or after this time, not before: the event waits in
   * `outbox_scheduled` until it is due, then is delivered in its key's order
   * like a new event (it holds back none of its key's events before that).
   * A time already past delivers now. `Outbox.cancel` takes it back before.
   */
  deliverAt?: Date | null;
}

/** How far ahead `deliverAt` may be by default (`Outbox` options): a year, as in Rust. */
export const DEFAULT_MAX_DELAY_MS = 366 * 24 * 3600 * 1000;

/** Where an enqueued event landed. */
export interface Enqueued {
  /**
   * Outbox row id (delivery order), a bigint as a decimal string; for an
   * event scheduled ahead, its row id in `outbox_scheduled`.
   */
  id: string;
  /** The event's idempotency id. */
  eventId: string;
}

/** Options of the free functions. */
export interface OutboxOptions {
  /** The schema of the outbox (default `postbox`). */
  schema?: string;
}

/** Options of an `Outbox`. */
export interface OutboxSettings {
  /** How far ahead `deliverAt` may be, in milliseconds (default a year): further is refused. */
  maxDelayMs?: number;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Throw `InvalidEventError` unless `e` is an event the Rust library would accept. */
export function validateEvent(e: Event): void {
  const refuse = (reason: string): never => {
    throw new InvalidEventError(reason);
  };
  if (typeof e !== "object" || e === null) refuse("an event must be an object");
  if (typeof e.topic !== "string" || e.topic.trim() === "") refuse("topic is empty");
  if (typeof e.event !== "string" || e.event.trim() === "") {
    refuse(`event type is empty (topic ${JSON.stringify(e.topic)})`);
  }
  if (e.key !== undefined && e.key !== null && typeof e.key !== "string") {
    refuse(`key must be a string, got ${kind(e.key)}`);
  }
  if (e.payload === undefined) refuse("payload is missing (use null for none)");
  // JSON.stringify gives undefined for a function or a symbol, which would
  // reach PostgreSQL as a NULL payload and abort the caller's transaction.
  let text: string | undefined;
  try {
    text = JSON.stringify(e.payload);
  } catch (err) {
    refuse(`payload is not JSON: ${(err as Error).message}`);
  }
  if (text === undefined) refuse(`payload is not JSON: got ${kind(e.payload)}`);
  const changed = jsonChange(e.payload, "payload");
  if (changed) refuse(changed);
  if (e.headers !== undefined) {
    if (typeof e.headers !== "object" || e.headers === null || Array.isArray(e.headers)) {
      refuse(`headers must be a JSON object, got ${kind(e.headers)}`);
    }
    for (const [name, value] of Object.entries(e.headers)) {
      if (typeof value !== "string") refuse(`header ${name} must be a string, got ${kind(value)}`);
    }
    const tp = e.headers[TRACEPARENT];
    if (tp !== undefined) {
      if (typeof tp !== "string") refuse(`header traceparent must be a string, got ${kind(tp)}`);
      const problem = traceparentProblem(tp);
      if (problem) {
        refuse(
          `traceparent ${JSON.stringify(tp)} is not a W3C trace context (${problem}); expected 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
        );
      }
    }
  }
  if (e.eventId !== undefined && e.eventId !== null && !(typeof e.eventId === "string" && UUID.test(e.eventId))) {
    refuse(`eventId must be a UUID, got ${JSON.stringify(e.eventId)}`);
  }
  if (e.deliverAt !== undefined && e.deliverAt !== null) {
    if (!(e.deliverAt instanceof Date) || Number.isNaN(e.deliverAt.getTime())) {
      refuse(`deliverAt must be a valid Date, got ${e.deliverAt instanceof Date ? "an invalid Date" : kind(e.deliverAt)}`);
    }
  }
}

/** Containers JSON.stringify turns into `{}`, losing what they hold. */
const EMPTIED: ReadonlyArray<[abstract new (...args: never[]) => unknown, string]> = [
  [Map, "a Map"],
  [Set, "a Set"],
  [WeakMap, "a WeakMap"],
  [WeakSet, "a WeakSet"],
  [RegExp, "a RegExp"],
  [Promise, "a Promise"],
];

/**
 * Where JSON.stringify would store something other than what `v` holds, as
 * a reason naming the path (`payload.items[2].price`), or undefined: a
 * function, symbol or undefined property is dropped (null in an array), NaN
 * and ±Infinity become null, a Map or Set becomes `{}`. A value with its own
 * `toJSON` (a Date, a Buffer) says how it is stored, and is left to it.
 */
function jsonChange(v: unknown, path: string, seen = new Set<object>()): string | undefined {
  const t = typeof v;
  if (t === "function" || t === "symbol" || v === undefined) {
    return `${path} is ${kind(v)}, which JSON cannot hold (JSON.stringify would drop it, or store null in an array); leave it out or store null`;
  }
  if (t === "number" && !Number.isFinite(v as number)) {
    return `${path} is ${String(v)}, which JSON cannot hold (JSON.stringify would store null); store null or a string`;
  }
  if (t !== "object" || v === null || seen.has(v as object)) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.toJSON === "function") return undefined;
  for (const [type, name] of EMPTIED) {
    if (o instanceof type) {
      return `${path} is ${name}, which JSON.stringify stores as {} (its contents lost); convert it (e.g. Object.fromEntries, Array.from) first`;
    }
  }
  seen.add(o);
  if (Array.isArray(o)) {
    for (let i = 0; i < o.length; i++) {
      const found = jsonChange(o[i], `${path}[${i}]`, seen);
      if (found) return found;
    }
    return undefined;
  }
  for (const [name, value] of Object.entries(o)) {
    const at = /^[A-Za-z_$][\w$]*$/.test(name) ? `${path}.${name}` : `${path}[${JSON.stringify(name)}]`;
    const found = jsonChange(value, at, seen);
    if (found) return found;
  }
  return undefined;
}

function kind(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  switch (typeof v) {
    case "boolean":
      return "a boolean";
    case "number":
    case "bigint":
      return "a number";
    case "string":
      return "a string";
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
    case "undefined":
      return "undefined";
    default:
      return "an object";
  }
}

/** The outbox of one schema; create once and share. */
export class Outbox {
  readonly schema: string;
  readonly #sql: Queries;
  readonly #maxDelayMs: number;

  /** The outbox in `schema` (validated here; the tables come from `postbox migrate`). */
  constructor(schema: string = DEFAULT_SCHEMA, settings: OutboxSettings = {}) {
    this.schema = checkSchemaName(schema);
    this.#sql = queries(this.schema);
    this.#maxDelayMs = settings.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  }

  /** When `e` waits in `outbox_scheduled` (a `deliverAt` still ahead), else null. */
  #scheduled(e: Event): Date | null {
    const at = e.deliverAt;
    if (at === undefined || at === null || at.getTime() <= Date.now()) return null;
    if (at.getTime() > Date.now() + this.#maxDelayMs) {
      throw new InvalidEventError(
        `deliverAt ${at.toISOString()} is more than ${Math.floor(this.#maxDelayMs / 86_400_000)} days ahead; schedule it nearer, or raise maxDelayMs if it is meant`,
      );
    }
    return at;
  }

  /**
   * Take back a scheduled event that is not yet due, in your transaction:
   * true when it was waiting and is gone (it will never be delivered); false
   * when no such event waits (unknown, cancelled, or already due).
   */
  async cancel(client: Queryable, eventId: string): Promise<boolean> {
    refusePool(client);
    if (!(typeof eventId === "string" && UUID.test(eventId))) {
      throw new InvalidEventError(`eventId must be a UUID, got ${JSON.stringify(eventId)}`);
    }
    const res = await this.#run(client, this.#sql.outboxScheduledCancel, [eventId]);
    return res.rows.length > 0;
  }

  /**
   * Insert `event` on `client`, which must be inside your transaction: the
   * event commits, or rolls back, with your business rows.
   */
  async enqueue(client: Queryable, event: Event): Promise<Enqueued> {
    refusePool(client);
    validateEvent(event);
    const at = this.#scheduled(event);
    const values: unknown[] = [
      event.eventId ?? uuidv7(),
      event.topic,
      event.event,
      event.key ?? null,
      json(event.payload),
      json(event.headers ?? {}),
    ];
    const res = at
      ? await this.#run(client, this.#sql.outboxSchedule, [...values, at])
      : await this.#run(client, this.#sql.outboxInsert, values);
    return enqueued(res.rows[0]);
  }

  /** Insert several events in one statement, in the given order. */
  async enqueueMany(client: Queryable, events: readonly Event[]): Promise<Enqueued[]> {
    refusePool(client);
    if (events.length === 0) return [];
    events.forEach((e, i) => {
      try {
        validateEvent(e);
      } catch (err) {
        if (!(err instanceof InvalidEventError)) throw err;
        throw new InvalidEventError(`event ${i} of ${events.length}: ${err.reason}`);
      }
    });
    let scheduled = false;
    events.forEach((e, i) => {
      try {
        scheduled = this.#scheduled(e) !== null || scheduled;
      } catch (err) {
        if (!(err instanceof InvalidEventError)) throw err;
        throw new InvalidEventError(`event ${i} of ${events.length}: ${err.reason}`);
      }
    });
    if (scheduled) {
      // One statement an event, in the batch's order.
      const out: Enqueued[] = [];
      for (const e of events) out.push(await this.enqueue(client, e));
      return out;
    }
    const res = await this.#run(client, this.#sql.outboxInsertMany, [
      events.map((e) => e.eventId ?? uuidv7()),
      events.map((e) => e.topic),
      events.map((e) => e.event),
      events.map((e) => e.key ?? null),
      events.map((e) => json(e.payload)),
      events.map((e) => json(e.headers ?? {})),
    ]);
    return res.rows.map(enqueued).sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
  }

  async #run(client: Queryable, text: string, values: unknown[]) {
    try {
      return await client.query(text, values);
    } catch (err) {
      if (isUndefinedTable(err)) throw new SchemaNotMigratedError(this.schema, { cause: err });
      throw err;
    }
  }
}

/**
 * A `pg.Pool` runs each query on whichever connection is free, outside the
 * caller's transaction: the event would commit on its own. Refuse it.
 */
function refusePool(client: Queryable): void {
  const c = client as unknown as Record<string, unknown>;
  if (typeof c.connect === "function" && "totalCount" in c && "idleCount" in c) {
    throw new TypeError(
      "enqueue needs the client of your transaction (const client = await pool.connect(); BEGIN), not the pool: the pool would run the insert outside your transaction",
    );
  }
}

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, then random
 * bits. Ids made in time order keep the outbox's unique index on `event_id`
 * growing at its right edge, and the database need not make one.
 */
export function uuidv7(): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  let ms = Date.now();
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = 0x70 | (b[6]! & 0x0f);
  b[8] = 0x80 | (b[8]! & 0x3f);
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// Passed as JSON text: node-postgres would turn a JS array into a PostgreSQL
// array literal, not a jsonb array.
function json(v: unknown): string {
  try {
    return JSON.stringify(v === undefined ? null : v);
  } catch (err) {
    throw new InvalidEventError(`payload or headers are not JSON: ${(err as Error).message}`);
  }
}

function enqueued(row: Record<string, unknown> | undefined): Enqueued {
  if (!row) throw new Error("the outbox INSERT returned no row");
  return { id: String(row.id), eventId: String(row.event_id) };
}

const outboxes = new Map<string, Outbox>();
function outbox(options?: OutboxOptions): Outbox {
  const schema = options?.schema ?? DEFAULT_SCHEMA;
  let o = outboxes.get(schema);
  if (!o) {
    o = new Outbox(schema);
    outboxes.set(schema, o);
  }
  return o;
}

/** `Outbox.enqueue` on the schema of `options` (default `postbox`). */
export function enqueue(client: Queryable, event: Event, options?: OutboxOptions): Promise<Enqueued> {
  return outbox(options).enqueue(client, event);
}

/** `Outbox.enqueueMany` on the schema of `options` (default `postbox`). */
export function enqueueMany(
  client: Queryable,
  events: readonly Event[],
  options?: OutboxOptions,
): Promise<Enqueued[]> {
  return outbox(options).enqueueMany(client, events);
}
