// The receiving side of the relay's webhooks: check a request's Standard
// Webhooks signature (with the `standardwebhooks` package; several secrets
// while rotating), turn it into a Message, and run the handler through the
// inbox, so a re-sent event has its effect once. Framework-agnostic: give it
// the request's headers and raw body, answer with the status it returns.
import { Webhook } from "standardwebhooks";
import { ConsumeError } from "./errors.js";
import { InboxConsumer, type Handler, type InboxOptions, type Processed } from "./inbox.js";
import { chain } from "./retry.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { EVENT, KEY, TOPIC, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP } from "./wire.js";

/** Request headers as node:http gives them (lower-case names). */
export type Headers = Record<string, string | string[] | undefined>;

/** What to answer: 204 done (also a duplicate or a dead letter), 401 refused, 503 try again later. */
export interface Received {
  status: 204 | 401 | 503;
  /** What was done, for 204. */
  processed?: Processed;
  /** Why, for 401 and 503 (safe to log; no secret in it). */
  error?: string;
}

const SKIPPED = new Set(["host", "content-length", "content-type", "user-agent", "accept", "accept-encoding", "connection"]);

/** Settings of a receiver: the inbox's, and the sender's secrets. */
export interface WebhookReceiverOptions extends InboxOptions {
  /** `whsec_…` secrets the relay signs with (`webhook.secrets`); several while rotating. */
  secrets: string[];
}

/**
 * How long `receive` lets one delivery of a failing message take (retries
 * and their waits) before keeping it as a consumer dead letter, unless
 * `deadlineMs` is given: within the relay's webhook `timeout` (5 s).
 */
export const RECEIVE_DEADLINE_MS = 4000;

/** Checks and receives the relay's webhooks. */
export class WebhookReceiver {
  readonly consumer: InboxConsumer;
  readonly #keys: Webhook[];

  constructor(options: WebhookReceiverOptions) {
    if (!Array.isArray(options.secrets) || options.secrets.length === 0) {
      throw new TypeError("WebhookReceiver: give at least one `whsec_…` secret in `secrets`");
    }
    this.#keys = options.secrets.map((s) => new Webhook(s));
    // Within the relay's webhook timeout (5 s by default): a handler still
    // retrying when the relay gives up would be sent the event again and
    // start over, forever.
    this.consumer = new InboxConsumer({ deadlineMs: RECEIVE_DEADLINE_MS, ...options });
  }

  /**
   * Whether the receiver can use its inbox (`InboxConsumer.check`): await it
   * before listening, so an unmigrated schema is refused at start
   * (`SchemaNotMigratedError`), not answered 500 at every request.
   */
  check(): Promise<void> {
    return this.consumer.check();
  }

  /**
   * The request as a handler sees it, once its signature and timestamp are
   * checked: id = `webhook-id` (the outbox event id), topic, name and key
   * from the `postbox-topic`, `postbox-event`, `postbox-key` headers; a
   * CloudEvent is read as one (`readCloudEvent`). Throws when no secret
   * verifies it.
   */
  message(headers: Headers, body: Buffer | string): Message {
    const one = (name: string) => {
      const v = headers[name];
      return Array.isArray(v) ? v[0] : v;
    };
    const standard = {
      [WEBHOOK_ID]: one(WEBHOOK_ID) ?? "",
      [WEBHOOK_TIMESTAMP]: one(WEBHOOK_TIMESTAMP) ?? "",
      [WEBHOOK_SIGNATURE]: one(WEBHOOK_SIGNATURE) ?? "",
    };
    let refusal: unknown;
    if (!this.#keys.some((k) => verifies(k, body, standard, (e) => (refusal = e)))) {
      throw new Error(`webhook refused: ${chain(refusal)}`);
    }
    const message = new Message(standard[WEBHOOK_ID], one(TOPIC) ?? "");
    message.event = one(EVENT) ?? null;
    message.key = one(KEY) ?? null;
    message.payload = Buffer.isBuffer(body) ? body : Buffer.from(body, "utf8");
    for (const [name, value] of Object.entries(headers)) {
      if (name.startsWith("webhook-") || SKIPPED.has(name) || value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) message.headers.push([name, v]);
    }
    message.source = `webhook ${message.id}`;
    // A CloudEvent (HTTP binding, either mode) reads as one.
    return readCloudEvent(message, one("content-type") ?? null);
  }

  /** Verify, then run `handler` through the inbox; answer with the returned status. */
  async receive(headers: Headers, body: Buffer | string, handler: Handler, signal?: AbortSignal): Promise<Received> {
    let message: Message;
    try {
      message = this.message(headers, body);
    } catch (err) {
      return { status: 401, error: chain(err) };
    }
    try {
      return { status: 204, processed: await this.consumer.process(message, handler, signal) };
    } catch (err) {
      if (err instanceof ConsumeError) return { status: 503, error: err.message };
      throw err;
    }
  }
}

function verifies(key: Webhook, body: Buffer | string, headers: Record<string, string>, fail: (e: unknown) => void): boolean {
  try {
    key.verify(body, headers);
    return true;
  } catch (err) {
    fail(err);
    return false;
  }
}
