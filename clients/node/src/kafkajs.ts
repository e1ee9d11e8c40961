// A kafkajs consumer on the inbox loop: each message's effect commits with its
// inbox record before its offset is committed; a message that cannot be
// settled is retried in place, so no later message of its partition
// overtakes it.
import type { Consumer, KafkaMessage } from "kafkajs";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { EVENT, EVENT_ID } from "./wire.js";

/** The header with the outbox event id (the inbox's message id). */
export const HEADER_EVENT_ID = EVENT_ID;
/** The header with the event type. */
export const HEADER_EVENT = EVENT;

/**
 * The Kafka message as a handler sees it; id = the `postbox-event-id` header,
 * else topic/partition/offset. A CloudEvent is read as one (`readCloudEvent`).
 */
export function messageFromKafka(topic: string, partition: number, m: KafkaMessage): Message {
  const headers: [string, string][] = [];
  for (const [name, value] of Object.entries(m.headers ?? {})) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== undefined) headers.push([name, v.toString()]);
    }
  }
  const id = headers.find(([n]) => n === HEADER_EVENT_ID)?.[1] ?? `${topic}/${partition}/${m.offset}`;
  const message = new Message(id, topic);
  message.headers = headers;
  message.key = m.key ? m.key.toString() : null;
  message.payload = m.value ?? Buffer.alloc(0);
  message.event = message.header(HEADER_EVENT) ?? null;
  message.source = `kafka ${topic}/${partition}@${m.offset}`;
  // A CloudEvent (`ce_*` headers, or a structured value) reads as one.
  return readCloudEvent(message);
}

/** A running kafkajs consumer on the inbox loop. */
export class KafkaInboxConsumer {
  readonly consumer: InboxConsumer;
  readonly #kafka: Consumer;
  readonly #shutdown = new AbortController();
  #replays: Promise<void> = Promise.resolve();

  constructor(kafka: Consumer, options: InboxOptions) {
    this.#kafka = kafka;
    this.consumer = new InboxConsumer(options);
  }

  /** Start consuming (the kafkajs consumer must be connected and subscribed). */
  async run(handler: Handler): Promise<void> {
    // An unmigrated schema is refused here, before any message is taken.
    await this.consumer.check();
    const signal = this.#shutdown.signal;
    this.#replays = this.consumer.serveReplays(handler, signal);
    await this.#kafka.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message, heartbeat, pause }) => {
        const msg = messageFromKafka(topic, partition, message);
        // Retries in place can outlast the session timeout: keep the membership.
        const beat = setInterval(() => void heartbeat().catch(() => {}), 3000);
        try {
          const done = await this.consumer.processInPlace(msg, handler, signal);
          if (done === null) {
            // Shutdown: this message and the partition's next ones stay unacknowledged.
            pause();
            return;
          }
        } finally {
          clearInterval(beat);
        }
        await this.#kafka.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
      },
    });
  }

  /** Stop: a message in a retry wait stays unacknowledged; the consumer disconnects. */
  async close(): Promise<void> {
    this.#shutdown.abort();
    await Promise.all([this.#kafka.disconnect(), this.#replays]);
  }
}

/** Consume with `kafka` (connected and subscribed) through the inbox; returns the running consumer. */
export async function kafkaInboxConsumer(kafka: Consumer, handler: Handler, options: InboxOptions): Promise<KafkaInboxConsumer> {
  const c = new KafkaInboxConsumer(kafka, options);
  await c.run(handler);
  return c;
}
