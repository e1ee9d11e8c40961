//! RabbitMQ: the shared server (or a node of the test's own), read back by an
//! independent client (Node `amqplib`); the inbox consumer.

use super::*;
use crate::node_interop::node;
use postbox_rabbitmq::lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use postbox_rabbitmq::lapin::types::FieldTable;
use postbox_rabbitmq::lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use postbox_testkit::RabbitmqServer;
use serde_json::Value;
use std::sync::Mutex;

conformance!(
    RabbitFixture,
    killable_broker,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// The shared server (or a node of the test's own): per topic a durable
/// topic exchange and a durable queue of the same name bound to every key.
struct RabbitFixture {
    node: Option<RabbitmqServer>,
    url: String,
    channel: (Connection, Channel),
    /// Exchanges and queues made, removed by `cleanup`.
    made: Mutex<Vec<String>>,
    /// The queues of `create_topic`, which a restart waits for.
    queues: Mutex<Vec<String>>,
}

async fn channel(url: &str) -> (Connection, Channel) {
    postbox_testkit::connect_retrying("RabbitMQ", || async {
        let conn = Connection::connect(url, ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        Ok::<_, postbox_rabbitmq::lapin::Error>((conn, ch))
    })
    .await
}

/// Messages read by amqplib, in queue order (at least `n`, then what else
/// arrives until the queue is quiet).
pub(crate) async fn amqplib_read(url: &str, queue: &str, n: usize) -> Vec<Value> {
    let lines = node("amqp_consume.mjs", &[url, queue, &n.to_string(), "15"]).await;
    serde_json::from_str(lines.last().expect("one JSON line")).unwrap()
}

impl RabbitFixture {
    async fn exchange(&self, name: &str) {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let ch = &self.channel.1;
        ch.exchange_declare(
            name.into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .unwrap();
        self.made.lock().unwrap().push(name.to_owned());
    }
}

impl BrokerFixture for RabbitFixture {
    const NAME: &'static str = "rabbit";
    const DROPS_RESENDS: bool = false;

    async fn start(_: &str, broker: Broker) -> Self {
        let node = match broker {
            Broker::Shared => None,
            Broker::Own => Some(RabbitmqServer::start("").await),
        };
        let url = node
            .as_ref()
            .map_or_else(postbox_testkit::rabbitmq_url, |n| n.url());
        RabbitFixture {
            channel: channel(&url).await,
            node,
            url,
            made: Mutex::default(),
            queues: Mutex::default(),
        }
    }

    async fn create_topic(&self, topic: &str) {
        self.exchange(topic).await;
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let ch = &self.channel.1;
        ch.queue_declare(topic.into(), durable, FieldTable::default())
            .await
            .unwrap();
        self.queues.lock().unwrap().push(topic.to_owned());
        ch.queue_bind(
            topic.into(),
            topic.into(),
            "#".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }

    fn relay_args(&self) -> Vec<String> {
        ["--sink", "rabbitmq", "--rabbitmq-url", &self.url]
            .map(String::from)
            .to_vec()
    }

    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        amqplib_read(&self.url, topic, n)
            .await
            .into_iter()
            .map(|m| Arrived {
                id: m["messageId"].as_str().unwrap().to_owned(),
                key: m["headers"]["postbox-key"].as_str().map(str::to_owned),
                event: m["type"].as_str().map(str::to_owned),
                payload: m["body"].clone(),
                headers: m["headers"].as_object().cloned().unwrap_or_default(),
                raw: m,
            })
            .collect()
    }

    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value> {
        amqplib_read(&self.url, topic, n)
            .await
            .into_iter()
            .map(|m| {
                let body = m["body"].to_string();
                serde_json::json!({"binding": "amqp", "headers": m["headers"], "content_type": m["contentType"], "body": body})
            })
            .collect()
    }

    fn check(&self, m: &Arrived, row: &Row) {
        let m = &m.raw;
        assert_eq!(m["contentType"], "application/json");
        assert_eq!(m["deliveryMode"], 2, "persistent");
        assert_eq!(m["exchange"], row.topic.as_str());
        assert_eq!(
            m["routingKey"],
            row.key.as_str(),
            "routing key = the event key"
        );
        assert!(m["timestamp"].as_u64().unwrap() > 1_700_000_000);
    }

    /// An exchange nobody bound a queue to (its events unroutable), an
    /// exchange that does not exist, and a message over the sink's
    /// `max_message_bytes`. RabbitMQ's acks may cover several messages: each
    /// return must land on its own event.
    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let unbound = format!("{queue}-unbound");
        self.exchange(&unbound).await;
        let absent = format!("{queue}-absent");
        let exchange = format!("exchange {unbound:?}");
        let mut refusals = Vec::new();
        for k in ["u", "v", "w", "u", "v", "w"] {
            let key = format!("routing key \"{k}\"");
            refusals.push(Refusal::new(
                &unbound,
                k,
                0,
                &["unroutable", &exchange, &key],
            ));
        }
        let missing = format!("exchange {absent:?} does not exist");
        refusals.push(Refusal::new(&absent, "x", 0, &[&missing]));
        refusals.push(Refusal::new(
            queue,
            "big",
            2000,
            &["rabbitmq.max_message_bytes"],
        ));
        refusals
    }

    fn refusal_flags(&self) -> Vec<String> {
        vec!["--rabbitmq-max-message-bytes".into(), "1000".into()]
    }

    async fn cleanup(self) {
        let ch = &self.channel.1;
        let made = self.made.lock().unwrap().clone();
        for n in made {
            let _ = ch
                .queue_delete(n.as_str().into(), QueueDeleteOptions::default())
                .await;
            let _ = ch
                .exchange_delete(n.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
}

impl KillableBroker for RabbitFixture {
    fn kill(&mut self) {
        self.node.as_mut().expect("a node of its own").kill();
    }

    async fn restart(&mut self) {
        self.node
            .as_mut()
            .expect("a node of its own")
            .restart()
            .await;
        self.channel = channel(&self.url).await;
        // A node accepts connections before it has recovered every durable
        // queue after a SIGKILL; until then its exchanges route nowhere
        // (312 NO_ROUTE). Wait until each queue answers a passive declare.
        let queues = self.queues.lock().unwrap().clone();
        for queue in queues {
            let conn = &self.channel.0;
            wait_until(
                LONG,
                "the restarted RabbitMQ node to recover its queues",
                || async {
                    let Ok(ch) = conn.create_channel().await else {
                        return false;
                    };
                    let passive = QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    };
                    let found = ch
                        .queue_declare(queue.as_str().into(), passive, FieldTable::default())
                        .await
                        .is_ok();
                    let _ = ch.close(200, "checked".into()).await;
                    found
                },
            )
            .await;
        }
    }
}

impl ConsumerFixture for RabbitFixture {
    const KEEPS_ORDER: bool = false;

    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let (url, queue) = (self.url.clone(), topic.to_owned());
        // A connection of its own: when a consumer dies, its unacknowledged
        // deliveries go back to the queue.
        Box::pin(async move {
            let (_conn, ch) = channel(&url).await;
            let mut options = postbox_rabbitmq::ConsumerOptions::default();
            if c.n > 1 {
                options.prefetch = 4;
            }
            let (inbox, h) = (&c.inbox, &c.handler);
            postbox_rabbitmq::inbox_consumer(inbox, &ch, &queue, h, options, c.stop).await
        })
    }
}
