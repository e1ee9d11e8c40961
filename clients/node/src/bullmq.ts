// A BullMQ Worker on the inbox loop: the handler runs inside the inbox
// transaction and the job completes only after it commits (or after the
// message was kept as a dead letter by the retry policy). A job delivered
// twice — the worker died before completing it, or the relay sent it again —
// finds its id in the inbox and completes without running the effect again.
import { DelayedError, Worker, type Job, type WorkerOptions } from "bullmq";
import { ConsumeError } from "./errors.js";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { RepeatedErrors, chain, defaultLogger, sleep } from "./retry.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { TRACEPARENT, TRACESTATE, traceparentProblem } from "./trace.js";
import { BULLMQ_META_FIELD, BULLMQ_META_HEADERS, BULLMQ_META_KEY, CE_STRUCTURED_CONTENT_TYPE } from "./wire.js";

/** The job-data field where the relay puts the producer's trace context. */
export const TRACE_FIELD = "_trace";

/**
 * The job as a handler sees it: id = job id (the relay sets it to the outbox
 * event id), topic = queue, name = job name, key and headers from the relay's
 * `_postbox` field, payload = the job's data as JSON without the relay's fields;
 * the trace field's context becomes `traceparent`/`tracestate` headers. Job
 * data that is a CloudEvent (an object with `specversion`) is read as one
 * (`readCloudEvent`).
 */
export function messageFromJob(queue: string, job: Job): Message {
  const id = job.id ?? "";
  const message = new Message(id, queue);
  message.event = job.name;
  message.source = `bullmq queue ${queue} job ${id}`;
  let data: unknown = job.data;
  if (isObject(data) && typeof data.specversion === "string") {
    // A CloudEvent (`bullmq.format = "cloudevents"`, or another producer's):
    // the job data is the JSON-format event.
    message.payload = Buffer.from(JSON.stringify(data));
    return readCloudEvent(message, CE_STRUCTURED_CONTENT_TYPE);
  }
  const trace = traceOf(data);
  if (trace && isObject(data)) {
    // The field is the relay's only when it holds a trace context; a payload's
    // own `_trace` stays in the payload.
    const { [TRACE_FIELD]: _dropped, ...rest } = data;
    data = rest;
    message.headers.push([TRACEPARENT, trace.traceparent]);
    if (trace.tracestate) message.headers.push([TRACESTATE, trace.tracestate]);
  }
  // The event's key and headers, which the relay puts beside the payload's fields.
  const meta = isObject(data) ? data[BULLMQ_META_FIELD] : undefined;
  if (isObject(data) && isObject(meta)) {
    const { [BULLMQ_META_FIELD]: _meta, ...rest } = data;
    data = rest;
    const key = meta[BULLMQ_META_KEY];
    if (typeof key === "string") message.key = key;
    const headers = meta[BULLMQ_META_HEADERS];
    if (isObject(headers)) {
      for (const [name, value] of Object.entries(headers)) {
        if (typeof value === "string") message.headers.push([name, value]);
      }
    }
  }
  message.payload = Buffer.from(JSON.stringify(data ?? null));
  return message;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function traceOf(data: unknown): { traceparent: string; tracestate?: string } | null {
  if (typeof data !== "object" || data === null) return null;
  const t = (data as Record<string, unknown>)[TRACE_FIELD];
  if (typeof t !== "object" || t === null) return null;
  const { traceparent, tracestate } = t as Record<string, unknown>;
  if (typeof traceparent !== "string" || traceparentProblem(traceparent)) return null;
  return { traceparent, tracestate: typeof tracestate === "string" ? tracestate : undefined };
}

/** Settings of `inboxWorker`: the inbox's, and the BullMQ worker's. */
export interface InboxWorkerOptions extends InboxOptions {
  /** Passed to `new Worker` (`connection` is required; `concurrency` 1 keeps queue order). */
  worker: WorkerOptions;
}

/** How long `close()` waits for BullMQ's own clean close. */
const CLOSE_WAIT_MS = 5_000;

/** What a completed job returns. */
export interface InboxJobResult {
  inbox: "processed" | "duplicate" | "dead-lettered";
}

/** A running BullMQ worker on the inbox loop. */
export class InboxWorker {
  readonly worker: Worker<unknown, InboxJobResult>;
  readonly consumer: InboxConsumer;
  /**
   * Resolves once the inbox passed its check and the worker takes jobs;
   * rejects, with no job taken, when the consumer cannot use its inbox
   * (`SchemaNotMigratedError`, `SchemaOutdatedError`, a refused role). Await
   * it at start to refuse as a producer does.
   */
  readonly ready: Promise<void>;
  readonly #shutdown = new AbortController();
  #replays: Promise<void> = Promise.resolve();

  constructor(queue: string, handler: Handler, options: InboxWorkerOptions) {
    this.consumer = new InboxConsumer(options);
    const signal = this.#shutdown.signal;
    const log = options.logger;
    this.worker = new Worker<unknown, InboxJobResult>(
      queue,
      async (job, token) => {
        const message = messageFromJob(queue, job);
        try {
          const done = await this.consumer.process(message, handler, signal);
          return { inbox: done === "fresh" ? "processed" : done };
        } catch (err) {
          if (err instanceof ConsumeError && err.kind === "cancelled" && token) {
            // Back to the queue, neither failed nor an attempt used.
            await job.moveToDelayed(Date.now(), token);
            throw new DelayedError();
          }
          throw err;
        }
      },
      // Started once the inbox passed its check (below).
      { ...options.worker, autorun: false },
    );
    // Without a listener an 'error' event would throw: BullMQ reconnects by
    // itself, and says so on every attempt; the same error is logged once
    // per 30 s. Without ioredis (an optional peer of bullmq 6) it can never
    // connect: say what to install and stop.
    const repeated = new RepeatedErrors();
    this.worker.on("error", (err) => {
      // Closing a worker whose connection never came up makes bullmq trip
      // over its missing client: nothing the user can act on.
      if (signal.aborted) return;
      const text = chain(err);
      // Node's own message when bullmq imports ioredis eagerly, bullmq 6's
      // when it loads it on connecting.
      if (/Cannot find (module|package) ['"]ioredis['"]|could not load the optional ['"]ioredis['"]/.test(text)) {
        if (repeated.line("ioredis") !== null) {
          (log ?? defaultLogger).error(`bullmq worker on queue ${queue} cannot run without ioredis: npm i bullmq ioredis (${text})`);
          void this.close();
        }
        return;
      }
      const line = repeated.line(text);
      if (line !== null) (log ?? defaultLogger).warn(`bullmq worker on queue ${queue}: ${line}`);
    });
    this.ready = this.consumer.checkAtStart(`bullmq inbox worker on queue ${queue}`).then(
      () => {
        if (signal.aborted) return;
        this.#replays = this.consumer.serveReplays(handler, signal);
        // Resolves when the worker closes.
        this.worker.run().catch((err: unknown) => (log ?? defaultLogger).error(`bullmq worker on queue ${queue} stopped: ${chain(err)}`));
      },
      async (err: unknown) => {
        await this.close();
        throw err;
      },
    );
    this.ready.catch(() => {});
  }

  /**
   * Stop: waits between retries end at once (their jobs go back to the
   * queue), a transaction in progress finishes, then the worker closes.
   */
  async close(): Promise<void> {
    this.#shutdown.abort();
    // A worker whose connection never came up can wait for it forever: give
    // the clean close a few seconds, then force it and drop the connection.
    const closed = this.worker.close().then(
      () => true,
      () => true,
    );
    if (!(await Promise.race([closed, sleep(CLOSE_WAIT_MS).then(() => false)]))) {
      await Promise.race([this.worker.close(true).catch(() => {}), sleep(1000)]);
      await Promise.race([this.worker.disconnect().catch(() => {}), sleep(1000)]);
    }
    await this.#replays;
  }
}

/**
 * Start a BullMQ worker on `queue` whose jobs go through the inbox before
 * `handler` sees them. A committed, duplicate or dead-lettered job completes
 * with `{ inbox: "processed" | "duplicate" | "dead-lettered" }`; a database
 * outage is waited out inside the job.
 */
export function inboxWorker(queue: string, handler: Handler, options: InboxWorkerOptions): InboxWorker {
  return new InboxWorker(queue, handler, options);
}
