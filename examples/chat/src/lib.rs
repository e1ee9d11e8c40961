//! The seed's two-service chat (Consumers, Workers) rebuilt on postbox.
//!
//! Each service owns one schema (its messages plus postbox's outbox and
//! inbox), writes a message and its event in one transaction, and learns of
//! the peer's messages only through BullMQ, de-duplicated by its inbox.

pub mod demo;
pub mod http;
pub mod lines;
pub mod model;
pub mod service;
pub mod setup;

/// Errors of the chat binary: each says what went wrong and what to do.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
