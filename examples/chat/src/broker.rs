//! Which broker the services talk through, and how to reach it: one set of
//! flags for `chat serve` and `chat demo`, and what they mean for the
//! relay (embedded or `postbox relay`).

use crate::Error;
use postbox_relay::{Secret, SinkConfig};
use std::sync::Arc;

/// The broker between the services.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Broker {
    /// BullMQ queues in Redis (the seed's).
    #[default]
    Bullmq,
    /// RabbitMQ: an exchange and a queue per service.
    Rabbitmq,
    /// NATS JetStream: a stream per service.
    Nats,
}

/// The broker flags.
#[derive(clap::Args, Clone, Debug)]
pub struct BrokerArgs {
    /// The broker the services talk through (`rabbitmq` and `nats` need `--mode v2`).
    #[arg(long, value_enum, default_value = "bullmq")]
    pub broker: Broker,
    /// Redis URL, with `--broker bullmq`.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// AMQP URL, with `--broker rabbitmq`.
    #[arg(
        long,
        env = "RABBITMQ_URL",
        hide_env_values = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub rabbitmq_url: String,
    /// NATS URL, with `--broker nats`.
    #[arg(
        long,
        env = "NATS_URL",
        hide_env_values = true,
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
}

impl BrokerArgs {
    /// The same flags, for a `chat serve` child.
    pub fn serve_args(&self) -> Vec<String> {
        let broker = match self.broker {
            Broker::Bullmq => "bullmq",
            Broker::Rabbitmq => "rabbitmq",
            Broker::Nats => "nats",
        };
        [
            "--broker",
            broker,
            "--redis-url",
            &self.redis_url,
            "--rabbitmq-url",
            &self.rabbitmq_url,
            "--nats-url",
            &self.nats_url,
        ]
        .map(String::from)
        .to_vec()
    }

    /// The `postbox relay` flags for this broker. RabbitMQ relays declare
    /// the exchange and queue the consuming service declares too (same
    /// arguments), so neither has to start first.
    pub fn relay_args(&self) -> Vec<String> {
        let args: &[&str] = match self.broker {
            Broker::Bullmq => &["--redis-url", &self.redis_url],
            Broker::Rabbitmq => &[
                "--sink",
                "rabbitmq",
                "--rabbitmq-url",
                &self.rabbitmq_url,
                "--rabbitmq-declare",
                "true",
            ],
            Broker::Nats => &["--sink", "nats", "--nats-url", &self.nats_url],
        };
        args.iter().map(|s| s.to_string()).collect()
    }

    /// The embedded relay's destination: the broker's sink with its defaults
    /// (RabbitMQ declaring, as `relay_args`).
    pub fn relay_sink(&self) -> Result<Arc<dyn postbox_relay::Destination>, Error> {
        let relay = postbox_relay::Config::default();
        Ok(match self.broker {
            Broker::Bullmq => postbox_bullmq::BullmqConfig {
                redis_url: Secret::new(self.redis_url.clone()),
                ..Default::default()
            }
            .build(&relay)?,
            Broker::Rabbitmq => postbox_rabbitmq::RabbitmqConfig {
                url: Secret::new(self.rabbitmq_url.clone()),
                declare: true,
                ..Default::default()
            }
            .build(&relay)?,
            Broker::Nats => postbox_nats::NatsConfig {
                url: Secret::new(self.nats_url.clone()),
                ..Default::default()
            }
            .build(&relay)?,
        })
    }
}
