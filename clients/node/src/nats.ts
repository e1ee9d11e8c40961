// A JetStream durable pull consumer (@nats-io/jetstream) on the inbox loop:
// each message's effect commits with its inbox record before it is acked. A
// consumer that dies in between leaves it unacked: JetStream redelivers it
// after `ack_wait`, and the inbox skips its effect. Messages are handled one
// at a time in stream order, a failing one retried in place: one instance
// per durable consumer keeps per-key order.
import { AckPolicy, type Consumer, type ConsumerConfig, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { EVENT, KEY } from "./wire.js";

/** The header with the event type. */
export const HEADER_EVENT = EVENT;
/** The header with the event's ordering key. */
export const HEADER_KEY = KEY;

/**
 * The settings of a durable pull consumer the inbox needs: explicit acks,
 * redelivery after 60 s, never given up on (`max_deliver` unlimited: the
 * inbox's retry policy and dead letters decide), one message unacked at a
 * time (`max_ack_pending` 1: with more, a consumer that dies leaves what it
 * was handed waiting out `ack_wait` while later messages take effect first
 * at its successor). For `jsm.consumers.add`.
 */
export function consumerConfig(durable: string): Partial<ConsumerConfig> {
  return {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: 60_000_000_000,
    max_deliver: -1,
    max_ack_pending: 1,
  };
}

/**
 * The message as a handler sees it: id = `Nats-Msg-Id` (the outbox event id;
 * else `stream/sequence`), topic = subject, name and key = the
 * `postbox-event` and `postbox-key` headers, every header (first value). A
 * CloudEvent is read as one (`readCloudEvent`).
 */
export function messageFromJetStream(m: JsMsg): Message {
  const headers: [string, string][] = [];
  for (const name of m.headers?.keys() ?? []) headers.push([name, m.headers!.get(name)]);
  const id = headers.find(([n]) => n === "Nats-Msg-Id")?.[1] || `${m.info.stream}/${m.info.streamSequence}`;
  const message = new Message(id, m.subject);
  message.headers = headers;
  message.payload = Buffer.from(m.data);
  message.event = message.header(HEADER_EVENT) ?? null;
  message.key = message.header(HEADER_KEY) ?? null;
  message.source = `nats stream ${m.info.stream} seq ${m.info.streamSequence} (delivery ${m.info.deliveryCount})`;
  // A CloudEvent (`ce-*` headers, or a structured body) reads as one.
  return readCloudEvent(message);
}

/** A running JetStream consumer on the inbox loop; `done` settles when it stops. */
export class NatsInboxConsumer {
  readonly consumer: InboxConsumer;
  /** Resolves after `close()`; rejects when the message stream fails. */
  readonly done: Promise<void>;
  /**
   * Resolves once the inbox passed its check and messages are being taken;
   * rejects, with nothing taken, when the consumer cannot use its inbox
   * (`SchemaNotMigratedError`, `SchemaOutdatedError`, a refused role). Await
   * it at start to refuse as a producer does.
   */
  readonly ready: Promise<void>;
  readonly #shutdown = new AbortController();
  #messages: ConsumerMessages | undefined;
  #replays: Promise<void> = Promise.resolve();

  constructor(consumer: Consumer, handler: Handler, options: InboxOptions) {
    this.consumer = new InboxConsumer(options);
    this.ready = this.consumer.checkAtStart("JetStream inbox consumer");
    this.done = this.ready.then(() => {
      if (this.#shutdown.signal.aborted) return;
      this.#replays = this.consumer.serveReplays(handler, this.#shutdown.signal);
      return this.#run(consumer, handler);
    });
    this.ready.catch(() => {});
    // Awaiting `done` is how a caller learns of a failure; not awaiting it
    // must not crash the process with an unhandled rejection.
    this.done.catch(() => {});
  }

  async #run(consumer: Consumer, handler: Handler): Promise<void> {
    this.#messages = await consumer.consume();
    for await (const m of this.#messages) {
      const done = await this.consumer.processInPlace(messageFromJetStream(m), handler, this.#shutdown.signal);
      // Not settled at shutdown: left unacked, JetStream redelivers it.
      if (done === null) return;
      // Only now: the effect is committed, so a redelivery would be skipped.
      m.ack();
    }
  }

  /** Stop after the message in hand; one in a retry wait stays unacked. */
  async close(): Promise<void> {
    this.#shutdown.abort();
    await this.#messages?.close();
    await Promise.allSettled([this.done, this.#replays]);
  }
}

/** Consume with the durable pull `consumer` (from `jetstream(nc).consumers.get(stream, durable)`) through the inbox. */
export function natsInboxConsumer(consumer: Consumer, handler: Handler, options: InboxOptions): NatsInboxConsumer {
  return new NatsInboxConsumer(consumer, handler, options);
}
