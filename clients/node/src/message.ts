// A message as a consumer's handler sees it, whatever the broker: the same
// fields as the Rust library's `postbox::Message`.

/** One received message. */
export class Message {
  /**
   * The event type, as the producer's `event` (the outbox's `event` column), when
   * the broker carries one: BullMQ job name, `postbox-event` header, Redis Streams
   * field `event`, AMQP `type` property.
   */
  event: string | null = null;
  /** Ordering key, when the broker carries one. */
  key: string | null = null;
  /** The body as received. */
  payload: Buffer = Buffer.alloc(0);
  /** Headers in arrival order (`traceparent` among them when the producer set one). */
  headers: [string, string][] = [];
  /** Where it came from, for logs (`bullmq queue q job 42`). */
  source = "";

  constructor(
    /** The id the inbox records: the outbox event id the relay sent. */
    readonly id: string,
    /** Queue, topic or stream it came from. */
    readonly topic: string,
  ) {}

  /** @deprecated The same as {@link Message.event}; kept for code written against the first drafts of this package. */
  get name(): string | null {
    return this.event;
  }
  set name(value: string | null) {
    this.event = value;
  }

  /** The first header called `name`. */
  header(name: string): string | undefined {
    return this.headers.find(([n]) => n === name)?.[1];
  }

  /**
   * A CloudEvents attribute (`source`, `time`, `subject`, an extension…) of a
   * message that came as a CloudEvent, in either content mode.
   */
  cloudevent(attribute: string): string | undefined {
    return this.header(`ce-${attribute}`);
  }

  /** The payload parsed as JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.payload.toString("utf8")) as T;
  }
}
