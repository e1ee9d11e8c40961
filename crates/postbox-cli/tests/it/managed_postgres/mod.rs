//! PostgreSQL behind a pooler in transaction mode (Debian's PgBouncer, as
//! most hosted PostgreSQL serves its default URL): producers (Rust and
//! Node), the inbox consumer and its dead-letter replay, and the command
//! line work through it; a relay refuses it, and a read-only server, with a
//! message that names the cause and the fix. Also the server's timeouts a
//! hosted database sets, and a server that vanishes without a close.

mod pooler;
mod timeouts;
mod vanished;
