// An amqplib consumer on the inbox loop (RabbitMQ): each message's effect
// commits with its inbox record before the message is acknowledged; one
// message in hand at a time (prefetch 1), retried in place while it cannot be
// settled, so the queue's order — the relay's per-key order — holds.
import type { Channel, ConsumeMessage } from "amqplib";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { KEY } from "./wire.js";

/** The header with the event's ordering key. */
export const HEADER_KEY = KEY;

/**
 * The delivery as a handler sees it: id = the `message_id` property (the
 * outbox event id), name = the `type` property, key = the `postbox-key` header.
 * A CloudEvent (AMQP binding, either mode) is read as one (`readCloudEvent`).
 */
export function messageFromAmqp(queue: string, m: ConsumeMessage): Message {
  const id =
    typeof m.properties.messageId === "string" && m.properties.messageId !== ""
      ? m.properties.messageId
      : `${queue}/${m.fields.deliveryTag}`;
  const message = new Message(id, queue);
  message.event = typeof m.properties.type === "string" ? m.properties.type : null;
  message.payload = m.content;
  for (const [name, value] of Object.entries(m.properties.headers ?? {})) {
    if (typeof value === "string") message.headers.push([name, value]);
    else if (Buffer.isBuffer(value)) message.headers.push([name, value.toString("utf8")]);
  }
  message.key = message.header(HEADER_KEY) ?? null;
  message.source = `rabbitmq queue ${queue} (exchange ${JSON.stringify(m.fields.exchange)}, routing key ${JSON.stringify(m.fields.routingKey)})${m.fields.redelivered ? ", redelivered" : ""}`;
  // A CloudEvent (`cloudEvents:*` headers, or a structured body) reads as one.
  const contentType = typeof m.properties.contentType === "string" ? m.properties.contentType : null;
  return readCloudEvent(message, contentType);
}

/**
 * Declare what the relay publishes to and this consumer reads, with the same
 * arguments as the Rust consumer's `declare` and the relay's `declare = true`:
 * a durable topic exchange, a durable single-active-consumer queue bound with `#`.
 */
export async function declare(channel: Channel, exchange: string, queue: string): Promise<void> {
  await channel.assertExchange(exchange, "topic", { durable: true });
  await channel.assertQueue(queue, { durable: true, arguments: { "x-single-active-consumer": true } });
  await channel.bindQueue(queue, exchange, "#");
}

/** A running amqplib consumer on the inbox loop. */
export class AmqpInboxConsumer {
  readonly consumer: InboxConsumer;
  readonly #channel: Channel;
  readonly #queue: string;
  readonly #shutdown = new AbortController();
  #tag: string | undefined;
  #inFlight: Promise<void> = Promise.resolve();
  #replays: Promise<void> = Promise.resolve();

  constructor(channel: Channel, queue: string, options: InboxOptions) {
    this.#channel = channel;
    this.#queue = queue;
    this.consumer = new InboxConsumer(options);
  }

  /** Start consuming `queue` on the channel (manual acknowledgements, prefetch 1). */
  async run(handler: Handler): Promise<void> {
    // An unmigrated schema is refused here, before any message is taken.
    await this.consumer.check();
    const signal = this.#shutdown.signal;
    this.#replays = this.consumer.serveReplays(handler, signal);
    await this.#channel.prefetch(1);
    const { consumerTag } = await this.#channel.consume(
      this.#queue,
      (m) => {
        if (!m) return; // the queue was deleted: the broker cancelled us
        this.#inFlight = (async () => {
          const done = await this.consumer.processInPlace(messageFromAmqp(this.#queue, m), handler, signal);
          // Not settled at shutdown: left unacknowledged, the broker redelivers it.
          if (done !== null) this.#channel.ack(m);
        })();
      },
      { noAck: false },
    );
    this.#tag = consumerTag;
  }

  /** Stop taking messages; a message in a retry wait stays unacknowledged. The channel stays open. */
  async close(): Promise<void> {
    this.#shutdown.abort();
    if (this.#tag) await this.#channel.cancel(this.#tag);
    await Promise.all([this.#inFlight, this.#replays]);
  }
}

/** Consume `queue` on `channel` through the inbox; returns the running consumer. */
export async function amqpInboxConsumer(
  channel: Channel,
  queue: string,
  handler: Handler,
  options: InboxOptions,
): Promise<AmqpInboxConsumer> {
  const c = new AmqpInboxConsumer(channel, queue, options);
  await c.run(handler);
  return c;
}
