// Errors of the package: each says what was refused and what to do, and
// whether running the same transaction again may succeed (`isTransient`).

// An application can load both the ESM and the CommonJS copy of the package
// (one dependency imports it, another requires it): `instanceof` then checks
// a brand registered under a global symbol, shared by both copies, instead of
// the class object.
const BRAND = Symbol.for("@postbox-rs/postbox.error");

function brand(err: Error, name: string): void {
  Object.defineProperty(err, BRAND, { value: name, enumerable: false });
}

function branded(v: unknown, name: string): boolean {
  return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[BRAND] === name;
}

/** A schema name failed validation; no SQL was run. */
export class InvalidIdentifierError extends Error {
  override readonly name = "InvalidIdentifierError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "InvalidIdentifierError");
  }
  constructor(
    /** Which identifier ("schema name"). */
    readonly what: string,
    /** The refused value (never put into SQL). */
    readonly value: string,
    /** Why it was refused. */
    readonly reason: string,
  ) {
    super(
      `invalid ${what} ${JSON.stringify(value)}: ${reason}; use 1-63 characters of a-z, 0-9 and _, not starting with a digit`,
    );
    brand(this, "InvalidIdentifierError");
  }
}

/** An event was refused before it reached the database. Never transient. */
export class InvalidEventError extends Error {
  override readonly name = "InvalidEventError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "InvalidEventError");
  }
  constructor(readonly reason: string) {
    super(`invalid event: ${reason}`);
    brand(this, "InvalidEventError");
  }
}

/**
 * Throw it from a handler when running the message again cannot succeed (a
 * payload that will never parse, a reference to something that does not
 * exist): the message becomes a dead letter at once, without the retry
 * policy's further runs and waits. Any other error is retried.
 *
 *     throw new PermanentError("order has no id", { cause: err });
 */
export class PermanentError extends Error {
  override readonly name = "PermanentError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "PermanentError");
  }
  constructor(message: string, options?: ErrorOptions) {
    super(`permanent failure (not retried): ${message}`, options);
    brand(this, "PermanentError");
  }
}

/** The schema has no postbox tables. */
export class SchemaNotMigratedError extends Error {
  override readonly name = "SchemaNotMigratedError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "SchemaNotMigratedError");
  }
  constructor(
    readonly schema: string,
    options?: ErrorOptions,
  ) {
    super(
      `schema ${JSON.stringify(schema)} has no postbox tables; run \`postbox migrate --schema ${schema}\` first`,
      options,
    );
    brand(this, "SchemaNotMigratedError");
  }
}

/** The schema's inbox lacks a column this version writes: migrate it. */
export class SchemaOutdatedError extends Error {
  override readonly name = "SchemaOutdatedError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "SchemaOutdatedError");
  }
  constructor(
    readonly schema: string,
    options?: ErrorOptions,
  ) {
    const detail = (options?.cause as { message?: unknown } | undefined)?.message;
    super(
      `schema ${JSON.stringify(schema)} lacks what this postbox writes${typeof detail === "string" ? ` (${detail})` : ""}; run \`postbox migrate --schema ${schema}\` first`,
      options,
    );
    brand(this, "SchemaOutdatedError");
  }
}

/** Why a message is neither committed nor kept as a dead letter: do not acknowledge it. */
export class ConsumeError extends Error {
  override readonly name = "ConsumeError";
  static override [Symbol.hasInstance](v: unknown): boolean {
    return branded(v, "ConsumeError");
  }
  constructor(
    /**
     * `database`: unreachable for longer than the consumer's patience;
     * `cancelled`: shutdown began before the effect committed;
     * `dead-letter`: the message failed and cannot be kept as a dead letter.
     */
    readonly kind: "database" | "cancelled" | "dead-letter",
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    brand(this, "ConsumeError");
  }
}

// SQLSTATE classes and codes where the database, not the statement, is at
// fault: connection (08), resources (53), shutdown (57P01-03), serialization
// and deadlock (40001, 40P01), read-only server (25006). Same list as the Rust
// library's.
const TRANSIENT_SQLSTATE = new Set(["57P01", "57P02", "57P03", "40001", "40P01", "25006"]);
const TRANSIENT_SOCKET = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);
// node-postgres reports a lost or unusable connection without a code.
const TRANSIENT_PG_MESSAGE =
  /Connection terminated|connection error|not queryable|timeout exceeded when trying to connect|Client was closed|Connection ended|the database system is (starting up|shutting down)/i;

/**
 * Whether `err`, thrown by node-postgres, means the database was unreachable
 * or lost a race, so the whole transaction may succeed when run again.
 */
export function isTransientDatabaseError(err: unknown): boolean {
  if (typeof err !== "object" || err === null) return false;
  const e = err as { code?: unknown; message?: unknown; errors?: unknown };
  if (typeof e.code === "string") {
    if (/^[0-9A-Z]{5}$/.test(e.code)) {
      return e.code.startsWith("08") || e.code.startsWith("53") || TRANSIENT_SQLSTATE.has(e.code);
    }
    if (TRANSIENT_SOCKET.has(e.code)) return true;
  }
  // An AggregateError (several addresses refused).
  if (Array.isArray(e.errors) && e.errors.length > 0) {
    return e.errors.every(isTransientDatabaseError);
  }
  return typeof e.message === "string" && TRANSIENT_PG_MESSAGE.test(e.message);
}

/** "Undefined table" or "undefined schema": the schema was never migrated. */
export function isUndefinedTable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "42P01" || code === "3F000";
}
