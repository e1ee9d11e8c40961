//! The broker of a world other than BullMQ's Redis: a RabbitMQ node or a
//! NATS server of the harness's own, so a scenario can take it down.

use chat::service::Broker;
use postbox_testkit::{NatsServer, RabbitmqServer};

/// A RabbitMQ node or a JetStream server on free ports.
pub enum Node {
    Rabbitmq(RabbitmqServer),
    Nats(NatsServer),
}

impl Node {
    /// The node for `broker`, started; `None` for BullMQ (the world's Redis).
    pub async fn start(broker: Broker) -> Option<Node> {
        match broker {
            Broker::Bullmq => None,
            Broker::Rabbitmq => Some(Node::Rabbitmq(RabbitmqServer::start("").await)),
            // Every write flushed before it is acknowledged where the server
            // supports it is the README's advice; 2.9 has no such setting,
            // and a clean stop (what `down` does) flushes the store.
            Broker::Nats => Some(Node::Nats(NatsServer::start("").await)),
        }
    }

    /// The chat service's flags for this broker.
    pub fn service_args(&self) -> Vec<String> {
        match self {
            Node::Rabbitmq(r) => vec![
                "--broker".into(),
                "rabbitmq".into(),
                "--rabbitmq-url".into(),
                r.url(),
            ],
            Node::Nats(n) => vec![
                "--broker".into(),
                "nats".into(),
                "--nats-url".into(),
                n.url(),
            ],
        }
    }

    /// The relay's flags for this broker. The RabbitMQ relays declare the
    /// exchange and queue the consuming service declares too (same
    /// arguments), so neither has to start first.
    pub fn relay_args(&self) -> Vec<String> {
        match self {
            Node::Rabbitmq(r) => vec![
                "--sink".into(),
                "rabbitmq".into(),
                "--rabbitmq-url".into(),
                r.url(),
                "--rabbitmq-declare".into(),
                "true".into(),
            ],
            // Under the harness relays' 2 s publish_timeout.
            Node::Nats(n) => vec![
                "--sink".into(),
                "nats".into(),
                "--nats-url".into(),
                n.url(),
                "--nats-ack-timeout".into(),
                "1s".into(),
            ],
        }
    }

    /// A clean stop, as an outage or maintenance would be.
    pub fn down(&mut self) {
        match self {
            Node::Rabbitmq(r) => r.stop(),
            Node::Nats(n) => n.stop(),
        }
    }

    /// Start it again on the same port and store.
    pub async fn up(&mut self) {
        match self {
            Node::Rabbitmq(r) => r.restart().await,
            Node::Nats(n) => n.restart().await,
        }
    }
}
