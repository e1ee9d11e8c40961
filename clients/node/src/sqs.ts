// An SQS long-polling receiver (@aws-sdk/client-sqs) on the inbox loop: each
// message's effect commits with its inbox record before it is deleted; its
// visibility is renewed while the handler runs, so no other receiver gets it
// meanwhile. One message at a time in the order received: with a FIFO queue
// (group = the event's key) and one receiver, per-key order holds.
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  type Message as SqsMessage,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { InboxConsumer, type Handler, type InboxOptions } from "./inbox.js";
import { chain } from "./retry.js";
import { readCloudEvent } from "./cloudevents.js";
import { Message } from "./message.js";
import { CE_CONTENT_TYPE, CE_PREFIX, EVENT, EVENT_ID, HEADERS, KEY } from "./wire.js";

/** Message attribute with the outbox event id (the inbox's message id). */
export const ATTR_EVENT_ID = EVENT_ID;
/** Message attribute with the event type. */
export const ATTR_EVENT = EVENT;
/** Message attribute with the ordering key. */
export const ATTR_KEY = KEY;
/** Message attribute with the event's headers as a JSON object. */
export const ATTR_HEADERS = HEADERS;

/** Settings of `sqsInboxConsumer`: the inbox's, and the receive calls'. */
export interface SqsOptions extends InboxOptions {
  /** Messages per receive call, 1–10 (default 10; still handled one at a time). */
  maxMessages?: number;
  /** Long-poll wait per call, in seconds, up to 20 (default 20). */
  waitSeconds?: number;
  /** Visibility timeout while a message is in hand, renewed at half (default 30 s). */
  visibilitySeconds?: number;
}

/**
 * The message as a handler sees it: id = the `postbox-event-id` attribute
 * (else SQS's MessageId), topic = the queue's name, name, key and headers
 * from the `postbox-*` attributes (key: else the FIFO group). A CloudEvent
 * (`ce-*` attributes, or a structured body) is read as one (`readCloudEvent`).
 */
export function messageFromSqs(queueUrl: string, m: SqsMessage): Message {
  const attr = (name: string) => m.MessageAttributes?.[name]?.StringValue;
  const queue = queueUrl.slice(queueUrl.lastIndexOf("/") + 1);
  const message = new Message(attr(ATTR_EVENT_ID) ?? m.MessageId ?? "", queue);
  message.event = attr(ATTR_EVENT) ?? null;
  message.key = attr(ATTR_KEY) ?? m.Attributes?.MessageGroupId ?? null;
  message.payload = Buffer.from(m.Body ?? "", "utf8");
  try {
    for (const [name, value] of Object.entries(JSON.parse(attr(ATTR_HEADERS) ?? "{}") as Record<string, unknown>)) {
      if (typeof value === "string") message.headers.push([name, value]);
    }
  } catch {
    /* no headers */
  }
  // CloudEvents attributes (`ce-*`, `content-type`) join the headers, and the
  // message is read as the CloudEvent it then carries.
  for (const [name, value] of Object.entries(m.MessageAttributes ?? {})) {
    const text = value?.StringValue;
    if ((name.startsWith(CE_PREFIX) || name === CE_CONTENT_TYPE) && text !== undefined) {
      message.headers.push([name, text]);
    }
  }
  message.source = `sqs ${queue} message ${m.MessageId ?? "?"} (receive ${m.Attributes?.ApproximateReceiveCount ?? "?"})`;
  return readCloudEvent(message);
}

/** A running SQS receiver on the inbox loop; `done` settles when it stops. */
export class SqsInboxConsumer {
  readonly consumer: InboxConsumer;
  /** Resolves after `close()`; rejects when SQS fails (start again). */
  readonly done: Promise<void>;
  /**
   * Resolves once the inbox passed its check and messages are being taken;
   * rejects, with nothing taken, when the consumer cannot use its inbox
   * (`SchemaNotMigratedError`, `SchemaOutdatedError`, a refused role). Await
   * it at start to refuse as a producer does.
   */
  readonly ready: Promise<void>;
  readonly #shutdown = new AbortController();
  #replays: Promise<void> = Promise.resolve();

  constructor(client: SQSClient, queueUrl: string, handler: Handler, options: SqsOptions) {
    this.consumer = new InboxConsumer(options);
    this.ready = this.consumer.checkAtStart(`SQS inbox consumer on ${queueUrl}`);
    this.done = this.ready.then(() => {
      if (this.#shutdown.signal.aborted) return;
      this.#replays = this.consumer.serveReplays(handler, this.#shutdown.signal);
      return this.#run(client, queueUrl, handler, options);
    });
    this.ready.catch(() => {});
    // Awaiting `done` is how a caller learns of a failure; not awaiting it
    // must not crash the process with an unhandled rejection.
    this.done.catch(() => {});
  }

  async #run(client: SQSClient, queueUrl: string, handler: Handler, o: SqsOptions): Promise<void> {
    const signal = this.#shutdown.signal;
    const visibility = Math.max(1, Math.floor(o.visibilitySeconds ?? 30));
    while (!signal.aborted) {
      let received;
      try {
        received = await client.send(
          new ReceiveMessageCommand({
            QueueUrl: queueUrl,
            MaxNumberOfMessages: Math.min(Math.max(o.maxMessages ?? 10, 1), 10),
            WaitTimeSeconds: Math.min(o.waitSeconds ?? 20, 20),
            VisibilityTimeout: visibility,
            MessageAttributeNames: ["All"],
            MessageSystemAttributeNames: ["All"],
          }),
          { abortSignal: signal },
        );
      } catch (err) {
        if (signal.aborted) return;
        throw new Error(`receiving from ${queueUrl}: ${chain(err)}`, { cause: err });
      }
      for (const m of received.Messages ?? []) {
        // Kept invisible while the handler runs.
        const renew = setInterval(() => {
          client
            .send(new ChangeMessageVisibilityCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: visibility }))
            .catch(() => {});
        }, (visibility * 1000) / 2);
        let done;
        try {
          done = await this.consumer.processInPlace(messageFromSqs(queueUrl, m), handler, signal);
        } finally {
          clearInterval(renew);
        }
        // Not settled at shutdown: it becomes visible again and is redelivered.
        if (done === null) return;
        // Only now: the effect is committed, so a redelivery would be skipped.
        await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle }));
      }
    }
  }

  /** Stop: a long poll in progress is cut short; the message in hand finishes. */
  async close(): Promise<void> {
    this.#shutdown.abort();
    await Promise.allSettled([this.done, this.#replays]);
  }
}

/** Receive from `queueUrl` with `client` through the inbox. */
export function sqsInboxConsumer(client: SQSClient, queueUrl: string, handler: Handler, options: SqsOptions): SqsInboxConsumer {
  return new SqsInboxConsumer(client, queueUrl, handler, options);
}
