//! The drain table: one [`Case`] per row the relay drains into, each with
//! its sink's bench file's [`Broker`]. A new sink adds one entry to [`table`]
//! and its file.

use super::broker::Broker;
use super::{bullmq, kafka, nats, rabbitmq, redis_streams, sqs, webhook};
use crate::Params;
use postbox_relay::SentRows;

/// One row of the drain table.
pub(crate) struct Case {
    /// The row label (kept across runs, so that figures stay comparable).
    pub name: &'static str,
    /// The label of its raw baseline: the same events through the same sink
    /// settings without PostgreSQL. Cases naming one label share one run of it,
    /// made with the first one's sink.
    pub raw: Option<&'static str>,
    /// Delivered rows marked or deleted: the SQL-only baseline of the same
    /// kind is its other comparison.
    pub sent: SentRows,
    /// Where its events go, or the flag whose absence skips it.
    pub broker: Result<Box<dyn Broker>, &'static str>,
}

/// Every row of the drain, in the order it runs and prints.
pub(crate) fn table(p: &Params) -> Vec<Case> {
    use SentRows::{Delete, Mark};
    vec![
        Case {
            name: "relay → BullMQ (transaction)",
            raw: Some("raw BullMQ (transaction), no PostgreSQL"),
            sent: Mark,
            broker: bullmq::broker(p, bullmq::PublishMode::Transaction),
        },
        Case {
            name: "relay → BullMQ (waves)",
            raw: Some("raw BullMQ (waves), no PostgreSQL"),
            sent: Mark,
            broker: bullmq::broker(p, bullmq::PublishMode::Waves),
        },
        Case {
            name: "relay → BullMQ (transaction, sent = delete)",
            // What the sink sends does not depend on how PostgreSQL forgets rows.
            raw: Some("raw BullMQ (transaction), no PostgreSQL"),
            sent: Delete,
            broker: bullmq::broker(p, bullmq::PublishMode::Transaction),
        },
        Case {
            name: "relay → Redis Streams (script)",
            raw: Some("raw Redis Streams (script), no PostgreSQL"),
            sent: Mark,
            broker: redis_streams::broker(p, redis_streams::PublishMode::Script, None),
        },
        Case {
            name: "relay → Redis Streams (script, CloudEvents binary)",
            raw: Some("raw Redis Streams (script, CloudEvents binary), no PostgreSQL"),
            sent: Mark,
            broker: redis_streams::broker(
                p,
                redis_streams::PublishMode::Script,
                Some(redis_streams::Mode::Binary),
            ),
        },
        Case {
            name: "relay → Redis Streams (script, CloudEvents structured)",
            raw: Some("raw Redis Streams (script, CloudEvents structured), no PostgreSQL"),
            sent: Mark,
            broker: redis_streams::broker(
                p,
                redis_streams::PublishMode::Script,
                Some(redis_streams::Mode::Structured),
            ),
        },
        Case {
            name: "relay → Redis Streams (waves)",
            raw: Some("raw Redis Streams (waves), no PostgreSQL"),
            sent: Mark,
            broker: redis_streams::broker(p, redis_streams::PublishMode::Waves, None),
        },
        Case {
            name: "relay → webhook",
            raw: Some("raw webhook, no PostgreSQL"),
            sent: Mark,
            broker: webhook::broker(),
        },
        Case {
            name: "relay → Kafka (transaction)",
            raw: Some("raw Kafka (transaction), no PostgreSQL"),
            sent: Mark,
            broker: kafka::broker(p, kafka::PublishMode::Transaction),
        },
        Case {
            name: "relay → Kafka (waves)",
            raw: Some("raw Kafka (waves), no PostgreSQL"),
            sent: Mark,
            broker: kafka::broker(p, kafka::PublishMode::Waves),
        },
        Case {
            name: "relay → RabbitMQ",
            raw: Some("raw RabbitMQ, no PostgreSQL"),
            sent: Mark,
            broker: rabbitmq::broker(p),
        },
        Case {
            name: "relay → SQS FIFO",
            raw: Some("raw SQS FIFO, no PostgreSQL"),
            sent: Mark,
            broker: sqs::broker(p),
        },
        Case {
            name: "relay → NATS JetStream",
            raw: Some("raw NATS JetStream, no PostgreSQL"),
            sent: Mark,
            broker: nats::broker(p),
        },
    ]
}
