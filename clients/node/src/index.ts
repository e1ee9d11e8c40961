// postbox for Node.js: the producer (`enqueue` in your transaction) and the
// consumer's inbox loop. Broker wrappers, one entry point each:
// `@postbox-rs/postbox/bullmq`, `/kafkajs`, `/amqplib`, `/nats`,
// `/redis-streams`, `/sqs`, `/webhooks`.
export {
  ConsumeError,
  InvalidEventError,
  InvalidIdentifierError,
  PermanentError,
  SchemaNotMigratedError,
  SchemaOutdatedError,
  isTransientDatabaseError,
} from "./errors.js";
export { DEFAULT_SCHEMA, checkSchemaName } from "./identifiers.js";
export {
  InboxConsumer,
  receive,
  type Handler,
  type HandlerFn,
  type HandlerObject,
  type InboxOptions,
  type Processed,
  type Receipt,
} from "./inbox.js";
export { DEFAULT_RETRY, type Logger, type RetryOptions, type RetryPolicy } from "./retry.js";
export { Message } from "./message.js";
export { readCloudEvent } from "./cloudevents.js";
export {
  DEFAULT_MAX_DELAY_MS,
  Outbox,
  enqueue,
  enqueueMany,
  validateEvent,
  type Enqueued,
  type Event,
  type OutboxOptions,
  type OutboxSettings,
  type Queryable,
} from "./outbox.js";
export { TRACEPARENT, TRACESTATE, traceparentProblem } from "./trace.js";
