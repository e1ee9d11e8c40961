//! A choreography saga over postbox (seed 004, "Saga Pattern"): three services
//! — orders, inventory, payments — each with its own schema, each writing its
//! state change and its next event in one transaction, talking only through
//! Kafka (or BullMQ) and consuming through its inbox.
//!
//! `order.created` → `inventory.reserved` → `payment.completed` → CONFIRMED;
//! a declined card compensates (`payment.failed` → reservation released →
//! `inventory.released` → CANCELLED), a shortage cancels at once
//! (`inventory.rejected`). [`run`] places many orders while it kills relays and
//! restarts the broker, then [`check`] judges the final state.

pub mod check;
pub mod infra;
pub mod model;
pub mod run;
pub mod services;
pub mod setup;
pub mod transport;

/// Errors of the saga binary and library: each says what went wrong.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
