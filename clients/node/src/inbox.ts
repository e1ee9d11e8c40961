// The consumer side: each message's effect runs in one transaction with its
// inbox record, so a redelivered message is skipped. The Rust library's inbox
// loop (crates/postbox/src/consume), rule for rule: the handler's failures
// follow a retry policy and end as dead letters an operator can replay; the
// database's failures are waited out; a COMMIT that failed without an answer
// is resolved by looking the message up.
import type { Pool, PoolClient } from "pg";
import { ConsumeError, PermanentError, SchemaNotMigratedError, SchemaOutdatedError, isTransientDatabaseError, isUndefinedTable } from "./errors.js";
import { DEFAULT_SCHEMA, checkSchemaName } from "./identifiers.js";
import { Message } from "./message.js";
import { chain, defaultLogger, delay, retryPolicy, sleep, type Logger, type RetryOptions, type RetryPolicy } from "./retry.js";
import { queries, type Queries } from "./sql.js";

/** Whether a message is new to a consumer. */
export type Receipt = "fresh" | "duplicate";

/** What `process` did; in every case the broker may now be acknowledged. */
export type Processed = "fresh" | "duplicate" | "dead-lettered";

/** A handler: the effect of one message, on the inbox transaction's client. */
export type HandlerFn = (tx: PoolClient, message: Message) => Promise<unknown>;

/** A handler with hooks, like the Rust `Handler` trait. */
export interface HandlerObject {
  /** The effect, on `tx` (do not COMMIT or ROLLBACK it). Throw to fail. */
  handle: HandlerFn;
  /** After the effect committed (e.g. notify a socket). Errors are logged. */
  afterCommit?(message: Message): Promise<void> | void;
  /** When the inbox already had the message. */
  onDuplicate?(message: Message): Promise<void> | void;
}

/** A function, or an object with hooks. */
export type Handler = HandlerFn | HandlerObject;

/** Settings of an inbox consumer. */
export interface InboxOptions {
  /** The pool the inbox transactions run on. */
  pool: Pool;
  /** The consumer name messages are recorded under (one per service and purpose). */
  consumer: string;
  /** The schema of the inbox (default `postbox`). */
  schema?: string;
  /** The handler's retry policy (default `DEFAULT_RETRY`). */
  retry?: RetryOptions;
  /** Give up on a database outage after this many ms (default: never). */
  patienceMs?: number;
  /** How often dead letters an operator asked to replay are looked for (default 2000 ms). */
  replayPollMs?: number;
  /**
   * End each delivery of a failing message within this many ms: a retry whose
   * wait would end past it is not waited for, and the message is kept as a
   * dead letter at once. For a sender that stops waiting and sends again (a
   * webhook's timeout); `WebhookReceiver` sets 4000 unless given. The
   * handler's own run is not cut short. Default: none.
   */
  deadlineMs?: number;
  /** Log lines (default: warnings and errors to the console). */
  logger?: Logger;
}

type Settled = { ok: Processed } | { handler: unknown };
type Attempt = Settled | { database: unknown };

/** The inbox loop of one consumer name on one schema's inbox. */
export class InboxConsumer {
  readonly consumer: string;
  readonly schema: string;
  readonly retry: RetryPolicy;
  readonly #pool: Pool;
  readonly #sql: Queries;
  readonly #patienceMs: number | undefined;
  readonly #replayPollMs: number;
  readonly #deadlineMs: number | undefined;
  readonly #log: Logger;

  constructor(options: InboxOptions) {
    if (typeof options.consumer !== "string" || options.consumer === "") {
      throw new TypeError("InboxConsumer: `consumer` must be a non-empty name");
    }
    this.consumer = options.consumer;
    this.schema = checkSchemaName(options.schema ?? DEFAULT_SCHEMA);
    this.retry = retryPolicy(options.retry, options.logger ?? defaultLogger);
    this.#pool = options.pool;
    this.#sql = queries(this.schema);
    this.#patienceMs = options.patienceMs;
    this.#replayPollMs = options.replayPollMs ?? 2000;
    this.#deadlineMs = options.deadlineMs;
    this.#log = options.logger ?? defaultLogger;
  }

  /**
   * Whether this consumer can use its inbox: the tables exist with every
   * column this version writes, and the role may read them (no row is read).
   * Every wrapper awaits it before taking a message, so an unmigrated schema
   * is refused at start: `SchemaNotMigratedError`, `SchemaOutdatedError`, or
   * the database's own error (a role without `postbox grant --as consumer`).
   */
  async check(): Promise<void> {
    try {
      await this.#pool.query(this.#sql.inboxTablesCheck);
    } catch (err) {
      if (isUndefinedTable(err)) throw new SchemaNotMigratedError(this.schema, { cause: err });
      if ((err as { code?: unknown } | null)?.code === "42703") throw new SchemaOutdatedError(this.schema, { cause: err });
      throw err;
    }
  }

  /**
   * `check()` for a wrapper that starts in its constructor: a refusal is
   * logged once, naming the fix, and rejects the wrapper's `ready`.
   */
  async checkAtStart(what: string): Promise<void> {
    try {
      await this.check();
    } catch (err) {
      this.#log.error(`${what} not started: ${chain(err)}`, { consumer: this.consumer, schema: this.schema });
      throw err;
    }
  }

  /** Record `messageId` on `tx` (inside your transaction): `fresh` the first time. */
  receive(tx: Pick<PoolClient, "query">, messageId: string): Promise<Receipt> {
    return record(tx, this.#sql, this.schema, this.consumer, messageId);
  }

  /**
   * Run `message`'s effect exactly once. Resolves when it committed, was
   * already done, or was kept as a dead letter after the retry policy:
   * acknowledge the broker then. Rejects with `ConsumeError` otherwise: do
   * not acknowledge. `signal` cuts waits short (shutdown).
   */
  async process(message: Message, handler: Handler, signal?: AbortSignal): Promise<Processed> {
    const h = asObject(handler);
    const started = performance.now();
    let failures = 0;
    let firstFailure: number | undefined;
    for (;;) {
      const outcome = await this.#transaction(message, h, signal);
      if ("ok" in outcome) return outcome.ok;
      const error = chain(outcome.handler);
      failures += 1;
      firstFailure ??= performance.now();
      const wait = delay(this.retry, failures);
      const outOfTime = this.#deadlineMs !== undefined && performance.now() - started + wait >= this.#deadlineMs;
      if (failures >= this.retry.attempts || outcome.handler instanceof PermanentError || outOfTime) {
        await this.#keepDeadLetter(message, failures, error, (performance.now() - firstFailure) / 1000, signal);
        this.#log.error("message kept as a dead letter after its handler failed", {
          consumer: this.consumer,
          messageId: message.id,
          source: message.source,
          attempts: failures,
          error,
        });
        return "dead-lettered";
      }
      this.#log.warn("handler failed; running it again", {
        consumer: this.consumer,
        messageId: message.id,
        attempt: failures,
        of: this.retry.attempts,
        retryInMs: wait,
        error,
      });
      if (!(await sleep(wait, signal))) throw cancelled();
    }
  }

  /**
   * `process` for brokers whose wrapper holds the message in hand (Kafka):
   * what does not settle it is retried in place, so no later message
   * overtakes it. `null`: shutdown began first; do not acknowledge.
   */
  async processInPlace(message: Message, handler: Handler, signal?: AbortSignal): Promise<Processed | null> {
    let wait = 100;
    for (;;) {
      try {
        return await this.process(message, handler, signal);
      } catch (err) {
        if (err instanceof ConsumeError && err.kind === "cancelled") return null;
        this.#log.warn("message not processed; retrying it in place", {
          messageId: message.id,
          source: message.source,
          retryInMs: wait,
          error: chain(err),
        });
        if (!(await sleep(wait, signal))) return null;
        wait = Math.min(wait * 2, 5000);
      }
    }
  }

  /**
   * Run the dead letters an operator asked to replay (`postbox inbox-dlq
   * replay`) through `handler`, one transaction each, until `signal` aborts.
   * Every consumer wrapper runs this beside its receive loop.
   */
  async serveReplays(handler: Handler, signal: AbortSignal): Promise<void> {
    const h = asObject(handler);
    while (!signal.aborted) {
      try {
        while (!signal.aborted && (await this.#replayOne(h))) {
          /* the next one */
        }
      } catch (err) {
        this.#log.warn("database unavailable while replaying dead letters", {
          consumer: this.consumer,
          error: chain(err),
          retryInMs: this.#replayPollMs,
        });
      }
      await sleep(this.#replayPollMs, signal);
    }
  }

  /** One run of the handler in the inbox transaction, the database retried while it may heal. */
  async #transaction(message: Message, h: HandlerObject, signal?: AbortSignal): Promise<Settled> {
    let outageStart: number | undefined;
    let wait = 100;
    // Set when a COMMIT failed without an answer: it may have gone through.
    const state = { commitInDoubt: false };
    for (;;) {
      const outcome = await this.#attempt(message, h, state);
      if (!("database" in outcome)) return outcome;
      outageStart ??= Date.now();
      const waited = Date.now() - outageStart;
      if (this.#patienceMs !== undefined && waited >= this.#patienceMs) {
        throw new ConsumeError("database", `database unavailable for ${waited} ms: ${chain(outcome.database)}`, {
          cause: outcome.database,
        });
      }
      this.#log.warn("database unavailable; retrying the message's transaction", {
        consumer: this.consumer,
        messageId: message.id,
        error: chain(outcome.database),
        retryInMs: wait,
      });
      if (!(await sleep(wait, signal))) throw cancelled();
      wait = Math.min(wait * 2, 5000);
    }
  }

  async #attempt(message: Message, h: HandlerObject, state: { commitInDoubt: boolean }): Promise<Attempt> {
    let client: PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (err) {
      return classify(err);
    }
    // A connection that failed is destroyed rather than returned to the pool.
    let broken: Error | undefined;
    const fail = (err: unknown) => {
      if (isTransientDatabaseError(err)) broken = err as Error;
    };
    try {
      let receipt: Receipt;
      try {
        await client.query("BEGIN");
        receipt = await this.receive(client, message.id);
      } catch (err) {
        fail(err);
        await rollback(client);
        return err instanceof SchemaNotMigratedError ? { handler: err } : classify(err);
      }
      if (receipt === "duplicate") {
        await rollback(client);
        if (state.commitInDoubt) {
          // Our own earlier COMMIT went through after all: finish its work.
          await this.#hook(h.afterCommit, message);
          return { ok: "fresh" };
        }
        this.#log.info("duplicate delivery skipped by the inbox", { consumer: this.consumer, messageId: message.id });
        await this.#hook(h.onDuplicate, message);
        return { ok: "duplicate" };
      }
      try {
        await h.handle(client, message);
      } catch (err) {
        fail(err);
        await rollback(client);
        return isTransientDatabaseError(err) ? { database: err } : { handler: err };
      }
      try {
        await client.query("COMMIT");
      } catch (err) {
        fail(err);
        state.commitInDoubt = true;
        return classify(err);
      }
      await this.#hook(h.afterCommit, message);
      return { ok: "fresh" };
    } finally {
      client.release(broken);
    }
  }

  async #keepDeadLetter(message: Message, attempts: number, error: string, failingForSeconds: number, signal?: AbortSignal): Promise<void> {
    let wait = 100;
    let outageStart: number | undefined;
    for (;;) {
      try {
        await this.#pool.query(this.#sql.inboxDeadLetterRecord, [
          this.consumer,
          message.id,
          message.topic,
          message.event,
          message.key,
          message.payload,
          JSON.stringify(message.headers),
          message.source,
          attempts,
          error,
          failingForSeconds,
        ]);
        return;
      } catch (err) {
        if (!isTransientDatabaseError(err)) {
          throw new ConsumeError(
            "dead-letter",
            `message ${message.id} failed and cannot be kept as a dead letter: ${chain(err)}. Run \`postbox migrate\` on the inbox's schema (and \`postbox grant --as consumer\` for a consumer role)`,
            { cause: err },
          );
        }
        outageStart ??= Date.now();
        if (this.#patienceMs !== undefined && Date.now() - outageStart >= this.#patienceMs) {
          throw new ConsumeError("database", `database unavailable: ${chain(err)}`, { cause: err });
        }
        if (!(await sleep(wait, signal))) throw cancelled();
        wait = Math.min(wait * 2, 5000);
      }
    }
  }

  /** The oldest dead letter waiting for a replay, run; `false` when none waits. */
  async #replayOne(h: HandlerObject): Promise<boolean> {
    const client = await this.#pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      const { rows } = await client.query(this.#sql.inboxDeadLetterClaim, [this.consumer]);
      const row = rows[0];
      if (!row) {
        await client.query("ROLLBACK");
        return false;
      }
      const message = new Message(row.message_id, row.topic);
      message.event = row.name;
      message.key = row.key;
      message.payload = row.payload;
      message.headers = row.headers;
      message.source = row.source;
      const receipt = await this.receive(client, message.id);
      if (receipt === "fresh") {
        try {
          await h.handle(client, message);
        } catch (err) {
          if (isTransientDatabaseError(err)) throw err;
          await rollback(client);
          const error = chain(err);
          await this.#pool.query(this.#sql.inboxDeadLetterFailedAgain, [row.id, error]);
          this.#log.error("replayed dead letter failed again", { consumer: this.consumer, messageId: message.id, error });
          return true;
        }
      }
      await client.query(this.#sql.inboxDeadLetterDelete, [row.id]);
      await client.query("COMMIT");
      if (receipt === "fresh") await this.#hook(h.afterCommit, message);
      this.#log.info("dead letter replayed", { consumer: this.consumer, messageId: message.id, receipt });
      return true;
    } catch (err) {
      if (isTransientDatabaseError(err)) broken = err as Error;
      await rollback(client);
      throw err;
    } finally {
      client.release(broken);
    }
  }

  async #hook(hook: ((m: Message) => Promise<void> | void) | undefined, message: Message): Promise<void> {
    if (!hook) return;
    try {
      await hook(message);
    } catch (err) {
      this.#log.warn("handler hook failed (the effect is committed)", { messageId: message.id, error: chain(err) });
    }
  }
}

function asObject(handler: Handler): HandlerObject {
  return typeof handler === "function" ? { handle: handler } : handler;
}

function classify(err: unknown): Attempt {
  return isTransientDatabaseError(err) ? { database: err } : { handler: err };
}

async function rollback(client: PoolClient): Promise<void> {
  try {
    await client.query("ROLLBACK");
  } catch {
    /* the connection is gone; it is released as broken */
  }
}

function cancelled(): ConsumeError {
  return new ConsumeError("cancelled", "shutting down before the message's effect was committed");
}

/** `InboxConsumer.receive` without a consumer object: record `messageId` for `consumer` on `tx`. */
export function receive(
  tx: Pick<PoolClient, "query">,
  consumer: string,
  messageId: string,
  options?: { schema?: string },
): Promise<Receipt> {
  const schema = checkSchemaName(options?.schema ?? DEFAULT_SCHEMA);
  return record(tx, queries(schema), schema, consumer, messageId);
}

async function record(
  tx: Pick<PoolClient, "query">,
  sql: Queries,
  schema: string,
  consumer: string,
  messageId: string,
): Promise<Receipt> {
  try {
    const res = await tx.query(sql.inboxReceive, [consumer, messageId]);
    return res.rowCount === 1 ? "fresh" : "duplicate";
  } catch (err) {
    if (isUndefinedTable(err)) throw new SchemaNotMigratedError(schema, { cause: err });
    throw err;
  }
}
