//! A sink as the relay uses it: every publish reports to the sink's health.

use super::SinkHealth;
use crate::{Destination, OutboxEvent, Outcome, SinkError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `sink`, reporting each publish to `health`: acknowledged events, a
/// publish the broker took nothing of, and one still unanswered after
/// `slow` (which asks for a check of the broker at once).
pub(crate) struct Watched {
    sink: Arc<dyn Destination>,
    health: Arc<SinkHealth>,
    slow: Duration,
}

impl Watched {
    pub(crate) fn new(sink: Arc<dyn Destination>, health: Arc<SinkHealth>, slow: Duration) -> Self {
        Watched { sink, health, slow }
    }
}

#[async_trait::async_trait]
impl Destination for Watched {
    fn name(&self) -> &'static str {
        self.sink.name()
    }

    async fn publish(&self, batch: &[OutboxEvent], deadline: tokio::time::Instant) -> Vec<Outcome> {
        let started = Instant::now();
        let publish = self.sink.publish(batch, deadline);
        tokio::pin!(publish);
        let outcomes = tokio::select! {
            o = &mut publish => o,
            () = tokio::time::sleep(self.slow) => {
                self.health.suspected(started);
                publish.await
            }
        };
        let delivered = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Delivered))
            .count();
        let failed = outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Failed(e) if e.is_transient()));
        self.health.published(started, delivered, failed);
        outcomes
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.sink.check().await
    }

    async fn reset(&self) {
        self.sink.reset().await
    }
}
