// Schema names are spliced into SQL text (PostgreSQL cannot bind them), so
// this check — the Rust library's, rule for rule — is what keeps that safe.
import { InvalidIdentifierError } from "./errors.js";

const RESERVED = new Set(["pg_catalog", "information_schema", "pg_toast", "public"]);

/** The schema the functions use when none is named (the Rust library's default). */
export const DEFAULT_SCHEMA = "postbox";

/** Return `name` if it is a plain lower-case identifier; throw otherwise. */
export function checkSchemaName(name: string): string {
  const refuse = (reason: string): never => {
    throw new InvalidIdentifierError("schema name", name, reason);
  };
  if (typeof name !== "string" || name.length === 0) refuse("it is empty");
  if (Buffer.byteLength(name) > 63) {
    refuse("it is longer than 63 characters (PostgreSQL would truncate it)");
  }
  if (!/^[a-z_]/.test(name)) refuse("it must start with a lower-case letter or _");
  if (!/^[a-z0-9_]+$/.test(name)) {
    refuse("it may contain only a-z, 0-9 and _ (no upper case, quotes, spaces or punctuation)");
  }
  if (name.startsWith("pg_") || RESERVED.has(name)) {
    refuse("it is a PostgreSQL system schema or reserved; pick a schema of your own");
  }
  return name;
}
