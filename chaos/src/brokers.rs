//! The broker of a world other than BullMQ's Redis: a RabbitMQ node or a
//! NATS server of the harness's own, so a scenario can take it down.

use chat::broker::{Broker, BrokerArgs};
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
            // supports it is the advice of docs/src/sinks/nats.md; 2.9 has no such setting,
            // and a clean stop (what `down` does) flushes the store.
            Broker::Nats => Some(Node::Nats(NatsServer::start("").await)),
        }
    }

    /// The chat's broker flags for this node, with the world's Redis URL
    /// (the services keep their chat history there whichever the broker):
    /// the services and the relays get them from the chat's own
    /// `BrokerArgs`, so the flags are spelled in one place.
    pub fn broker_args(node: Option<&Node>, redis_url: &str) -> BrokerArgs {
        let mut args = BrokerArgs {
            broker: Broker::Bullmq,
            redis_url: redis_url.to_owned(),
            rabbitmq_url: String::new(),
            nats_url: String::new(),
        };
        match node {
            None => {}
            Some(Node::Rabbitmq(r)) => {
                args.broker = Broker::Rabbitmq;
                args.rabbitmq_url = r.url();
            }
            Some(Node::Nats(n)) => {
                args.broker = Broker::Nats;
                args.nats_url = n.url();
            }
        }
        args
    }

    /// The relay flags for `args`: the chat's, and for NATS a PubAck
    /// timeout under the harness relays' 2 s publish_timeout.
    pub fn relay_args(args: &BrokerArgs) -> Vec<String> {
        let mut flags = args.relay_args();
        if args.broker == Broker::Nats {
            flags.extend(["--nats-ack-timeout".to_owned(), "1s".to_owned()]);
        }
        flags
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
