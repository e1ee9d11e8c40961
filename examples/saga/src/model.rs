//! The saga's vocabulary: services, the names a deployment derives from its
//! prefix (schemas, topics, inbox consumers), events and their payload.

use postbox::SchemaName;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub const ORDER_CREATED: &str = "order.created";
pub const INVENTORY_RESERVED: &str = "inventory.reserved";
pub const INVENTORY_REJECTED: &str = "inventory.rejected";
pub const INVENTORY_RELEASED: &str = "inventory.released";
pub const PAYMENT_COMPLETED: &str = "payment.completed";
pub const PAYMENT_FAILED: &str = "payment.failed";

/// A card the payments service charges.
pub const CARD_OK: &str = "tok_visa";
/// A card the payments service declines (as a provider's test card would).
pub const CARD_DECLINED: &str = "tok_chargeDeclined";

/// Why an order was cancelled.
pub const REASON_OUT_OF_STOCK: &str = "out_of_stock";
pub const REASON_PAYMENT_DECLINED: &str = "payment_declined";

pub const PENDING: &str = "PENDING";
pub const CONFIRMED: &str = "CONFIRMED";
pub const CANCELLED: &str = "CANCELLED";

/// One of the three services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Service {
    Orders,
    Inventory,
    Payments,
}

impl Service {
    pub const ALL: [Service; 3] = [Service::Orders, Service::Inventory, Service::Payments];

    pub fn name(self) -> &'static str {
        match self {
            Service::Orders => "orders",
            Service::Inventory => "inventory",
            Service::Payments => "payments",
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The broker the services talk over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Broker {
    Kafka,
    Bullmq,
}

impl std::fmt::Display for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Broker::Kafka => "kafka",
            Broker::Bullmq => "bullmq",
        })
    }
}

/// Names of one deployment of the saga, all derived from one prefix so that
/// runs and tests side by side never share a schema, topic or queue.
#[derive(Clone, Debug)]
pub struct Names {
    prefix: String,
    schemas: [SchemaName; 3],
}

impl Names {
    /// `prefix` must make valid schema names (`<prefix>_orders`, ...); the
    /// topics (`<prefix>-orders`, ...) then hold only `[a-z0-9_-]`, valid for
    /// Kafka topics and BullMQ queues alike.
    pub fn new(prefix: &str) -> Result<Self, postbox::InvalidIdentifier> {
        let schema = |s: Service| SchemaName::new(&format!("{prefix}_{}", s.name()));
        Ok(Names {
            prefix: prefix.to_owned(),
            schemas: [
                schema(Service::Orders)?,
                schema(Service::Inventory)?,
                schema(Service::Payments)?,
            ],
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The service's own schema (its tables, outbox and inbox).
    pub fn schema(&self, s: Service) -> &SchemaName {
        &self.schemas[s as usize]
    }

    /// The service's inbound topic (Kafka) or queue (BullMQ). Events are
    /// addressed to the service that reacts to them, because a BullMQ queue
    /// has competing consumers, not fan-out: an event two services need is
    /// written as two outbox rows, one per inbound topic, on both brokers.
    pub fn topic(&self, s: Service) -> String {
        format!("{}-{}", self.prefix, s.name())
    }

    /// The service's inbox consumer name.
    pub fn consumer(&self, s: Service) -> String {
        format!("saga-{}", s.name())
    }

    /// The service's Kafka consumer group.
    pub fn group(&self, s: Service) -> String {
        format!("{}-saga-{}", self.prefix, s.name())
    }
}

/// An order as a customer places it.
#[derive(Clone, Debug)]
pub struct NewOrder {
    pub sku: String,
    pub qty: i32,
    pub amount_cents: i64,
    pub card: String,
}

/// The payload of every saga event: the order travels with each step, so no
/// service needs to read another's tables.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OrderEvent {
    pub order_id: Uuid,
    pub sku: String,
    pub qty: i32,
    pub amount_cents: i64,
    pub card: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
