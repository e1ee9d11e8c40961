//! Integration tests: real PostgreSQL and Redis, each test in its own schema
//! and queue, running in parallel. One test binary keeps link time down.

mod support;

mod bad_input;
mod broker_unavailable;
mod claim;
mod cloudevents_sdks;
mod commit_order;
mod conformance;
mod console;
mod consumer_failures;
mod deploy;
mod dlq;
mod failpoint;
mod fuzz_seeds;
mod inbox;
mod kafka;
mod logical;
mod managed_postgres;
mod migrate;
mod nats;
mod node_interop;
mod node_package;
mod ops;
mod outbox_row;
mod producer;
mod publish_modes;
mod rabbitmq;
mod redis_outage;
mod redis_streams;
mod relay_health;
mod relay_order;
mod replay;
mod scheduled;
mod settings;
mod sqs;
mod status;
mod vectors;
mod webhook;
