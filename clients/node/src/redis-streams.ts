// An ioredis consumer-group reader on the inbox loop (Redis Streams): each
// entry's effect commits with its inbox record before it is XACKed. A
// consumer restarted under the same name reads its own pending entries
// first; entries another consumer left pending for `claimIdleMs` are taken
// over (XAUTOCLAIM). Entries are handled one at a time in stream order, a
// failing one retried in place: one consumer per group keeps per-key order.
import type { Redis } from "ioredis";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { chain } from "./retry.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import {
  CE_CONTENT_TYPE,
  CE_PREFIX,
  FIELD_EVENT,
  FIELD_HEADERS,
  FIELD_ID,
  FIELD_KEY,
  FIELD_PAYLOAD,
} from "./wire.js";

/** Settings of `redisStreamsInboxConsumer`: the inbox's, and the group's. */
export interface RedisStreamsOptions extends InboxOptions {
  /** Consumer group (created at the stream's start, with the stream, if missing). */
  group: string;
  /** This consumer's name in the group; keep it stable across restarts (default: `consumer`). */
  name?: string;
  /** Entries per XREADGROUP (still handled one at a time; default 32). */
  count?: number;
  /** How long one XREADGROUP waits, in ms (default 1000). */
  blockMs?: number;
  /** Take over another consumer's entry pending this long, in ms (default 60000). */
  claimIdleMs?: number;
}

type Entry = [id: string, fields: string[]];

/**
 * The entry as a handler sees it: id = field `id` (the outbox event id),
 * name = `event`, key = `key`, payload = `payload`, headers = the `headers`
 * field's JSON object. An entry with CloudEvents fields is read as a
 * CloudEvent (`readCloudEvent`).
 */
export function messageFromEntry(stream: string, [entryId, fields]: Entry): Message {
  const field = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) field.set(fields[i]!, fields[i + 1]!);
  const message = new Message(field.get(FIELD_ID) ?? `${stream}/${entryId}`, stream);
  message.event = field.get(FIELD_EVENT) ?? null;
  message.key = field.get(FIELD_KEY) ?? null;
  message.payload = Buffer.from(field.get(FIELD_PAYLOAD) ?? "", "utf8");
  try {
    const headers: unknown = JSON.parse(field.get(FIELD_HEADERS) ?? "{}");
    for (const [name, value] of Object.entries(headers as Record<string, unknown>)) {
      if (typeof value === "string") message.headers.push([name, value]);
    }
  } catch {
    /* no headers */
  }
  // CloudEvents fields (`ce-*`, `content-type`) join the headers, and the
  // entry is read as the CloudEvent it then carries.
  for (const [name, value] of field) {
    if (name.startsWith(CE_PREFIX) || name === CE_CONTENT_TYPE) message.headers.push([name, value]);
  }
  message.source = `redis stream ${stream} entry ${entryId}`;
  return readCloudEvent(message);
}

/** A running consumer-group reader; `done` settles when it stops. */
export class RedisStreamsInboxConsumer {
  readonly consumer: InboxConsumer;
  /** Resolves after `close()`; rejects when Redis fails (reconnect and start again). */
  readonly done: Promise<void>;
  /**
   * Resolves once the inbox passed its check and messages are being taken;
   * rejects, with nothing taken, when the consumer cannot use its inbox
   * (`SchemaNotMigratedError`, `SchemaOutdatedError`, a refused role). Await
   * it at start to refuse as a producer does.
   */
  readonly ready: Promise<void>;
  readonly #redis: Redis;
  readonly #stream: string;
  readonly #o: Required<Pick<RedisStreamsOptions, "group" | "name" | "count" | "blockMs" | "claimIdleMs">>;
  readonly #shutdown = new AbortController();
  #replays: Promise<void> = Promise.resolve();

  /** `redis` must be a connection of its own: XREADGROUP blocks it. */
  constructor(redis: Redis, stream: string, handler: Handler, options: RedisStreamsOptions) {
    this.#redis = redis;
    this.#stream = stream;
    this.consumer = new InboxConsumer(options);
    this.#o = {
      group: options.group,
      name: options.name ?? options.consumer,
      count: options.count ?? 32,
      blockMs: options.blockMs ?? 1000,
      claimIdleMs: options.claimIdleMs ?? 60_000,
    };
    this.ready = this.consumer.checkAtStart(`Redis Streams inbox consumer on ${stream}`);
    this.done = this.ready.then(() => {
      if (this.#shutdown.signal.aborted) return;
      this.#replays = this.consumer.serveReplays(handler, this.#shutdown.signal);
      return this.#run(handler);
    });
    this.ready.catch(() => {});
    // Awaiting `done` is how a caller learns of a Redis failure; not awaiting
    // it must not crash the process with an unhandled rejection.
    this.done.catch(() => {});
  }

  async #run(handler: Handler): Promise<void> {
    const { group, name, count } = this.#o;
    try {
      await this.#redis.xgroup("CREATE", this.#stream, group, "0", "MKSTREAM");
    } catch (err) {
      if (!chain(err).includes("BUSYGROUP")) throw err;
    }
    // First what this consumer read before and never acknowledged.
    for (;;) {
      const pending = await this.#read("0");
      if (pending.length === 0) break;
      if (!(await this.#handle(pending, handler))) return;
    }
    let nextClaim = 0;
    while (!this.#shutdown.signal.aborted) {
      if (Date.now() >= nextClaim) {
        const claimed = (await this.#redis.call(
          "XAUTOCLAIM", this.#stream, group, name, String(this.#o.claimIdleMs), "0-0", "COUNT", String(count),
        )) as [string, Entry[]];
        // Entries deleted meanwhile come back without fields (Redis 6.2).
        const entries = (claimed[1] ?? []).filter((e) => Array.isArray(e?.[1]));
        if (!(await this.#handle(entries, handler))) return;
        nextClaim = Date.now() + Math.max(this.#o.claimIdleMs / 2, 100);
      }
      if (!(await this.#handle(await this.#read(">"), handler))) return;
    }
  }

  async #read(from: "0" | ">"): Promise<Entry[]> {
    const { group, name, count, blockMs } = this.#o;
    const args = ["GROUP", group, name, "COUNT", String(count)];
    if (from === ">") args.push("BLOCK", String(blockMs));
    const reply: unknown = await this.#redis.call("XREADGROUP", ...args, "STREAMS", this.#stream, from);
    if (!Array.isArray(reply) || reply.length === 0) return [];
    // RESP2: [[stream, entries]]; RESP3 (a map, flattened): [stream, entries].
    const entries: unknown = typeof reply[0] === "string" ? reply[1] : reply[0]?.[1];
    return Array.isArray(entries) ? (entries as Entry[]) : [];
  }

  /** Each entry through the inbox, then XACK. `false` once shut down. */
  async #handle(entries: Entry[], handler: Handler): Promise<boolean> {
    for (const entry of entries) {
      const done = await this.consumer.processInPlace(messageFromEntry(this.#stream, entry), handler, this.#shutdown.signal);
      if (done === null) return false;
      // Only now: the effect is committed, so a redelivery would be skipped.
      await this.#redis.xack(this.#stream, this.#o.group, entry[0]);
    }
    return true;
  }

  /** Stop after the entry in hand (a blocked read returns within `blockMs`); the connection stays open. */
  async close(): Promise<void> {
    this.#shutdown.abort();
    await Promise.allSettled([this.done, this.#replays]);
  }
}

/** Consume `stream` in `options.group` through the inbox. */
export function redisStreamsInboxConsumer(
  redis: Redis,
  stream: string,
  handler: Handler,
  options: RedisStreamsOptions,
): RedisStreamsInboxConsumer {
  return new RedisStreamsInboxConsumer(redis, stream, handler, options);
}
