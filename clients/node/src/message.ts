// A message as a consumer's handler sees it, whatever the broker: the same
// fields as the Rust library's `postbox::Message`.

/** One received message. */
export class Message {
  /** Name of the message (job name, `postbox-event` header), when the broker carries one. */
  name: string | null = null;
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

  /** The first header called `name`. */
  header(name: string): string | undefined {
    return this.headers.find(([n]) => n === name)?.[1];
  }

  /** The payload parsed as JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.payload.toString("utf8")) as T;
  }
}
