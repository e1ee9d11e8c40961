//! The seed's two-service chat (Consumers, Workers) rebuilt on postbox.
//!
//! Each service owns one schema (its messages plus postbox's outbox and
//! inbox), writes a message and its event in one transaction, and learns of
//! the peer's messages only through the broker (BullMQ, RabbitMQ or NATS
//! JetStream), de-duplicated by its inbox.

mod api;
pub mod broker;
mod consume;
pub mod demo;
pub mod http;
pub mod lines;
pub mod model;
mod naive;
pub mod node;
mod receiver;
pub mod service;
pub mod setup;

/// Errors of the chat binary: each says what went wrong and what to do.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
