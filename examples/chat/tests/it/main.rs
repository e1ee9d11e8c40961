//! Chat integration tests: both services as real processes over the real
//! PostgreSQL and Redis, each test with its own schemas, roles and queues.

mod support;

mod browser;
mod e2e;
mod input;
mod isolation;
mod socketio;
