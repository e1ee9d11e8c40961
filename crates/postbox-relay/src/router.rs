//! Route events to sinks by topic pattern, so one relay feeds BullMQ and Kafka at once.

use crate::{Destination, OutboxEvent, Outcome, SinkError};
use std::sync::Arc;

/// A topic pattern: `*` matches any run of characters (`payment.*`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPattern(String);

impl TopicPattern {
    /// A pattern.
    pub fn new(p: impl Into<String>) -> Self {
        TopicPattern(p.into())
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        glob(self.0.as_bytes(), topic.as_bytes())
    }
}

fn glob(p: &[u8], t: &[u8]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some((b'*', rest)) => (0..=t.len()).any(|i| glob(rest, &t[i..])),
        Some((c, rest)) => t.first() == Some(c) && glob(rest, &t[1..]),
    }
}

/// Which events a route takes: a topic pattern, a schema, or both.
#[derive(Debug, Clone, Default)]
pub struct RouteMatch {
    /// Topic pattern (`None`: any topic).
    pub topic: Option<TopicPattern>,
    /// Outbox schema (`None`: any schema).
    pub schema: Option<String>,
}

impl RouteMatch {
    fn matches(&self, e: &OutboxEvent) -> bool {
        self.topic.as_ref().is_none_or(|p| p.matches(&e.topic))
            && self.schema.as_ref().is_none_or(|s| *s == e.schema)
    }
}

impl From<TopicPattern> for RouteMatch {
    fn from(p: TopicPattern) -> Self {
        RouteMatch {
            topic: Some(p),
            schema: None,
        }
    }
}

/// The first route that matches an event (by topic pattern and/or schema)
/// gets it; the rest go to the default sink. Each sink keeps per-key order
/// for what it gets.
pub struct Router {
    routes: Vec<(RouteMatch, Arc<dyn Destination>)>,
    default: Arc<dyn Destination>,
}

impl Router {
    /// A router with a default sink.
    pub fn new(default: Arc<dyn Destination>) -> Self {
        Router {
            routes: Vec::new(),
            default,
        }
    }

    /// Add a route (checked in the order added).
    pub fn route(mut self, m: impl Into<RouteMatch>, sink: Arc<dyn Destination>) -> Self {
        self.routes.push((m.into(), sink));
        self
    }

    fn sink_for(&self, e: &OutboxEvent) -> usize {
        self.routes
            .iter()
            .position(|(m, _)| m.matches(e))
            .unwrap_or(self.routes.len())
    }

    fn sink(&self, i: usize) -> &Arc<dyn Destination> {
        self.routes.get(i).map(|r| &r.1).unwrap_or(&self.default)
    }
}

#[async_trait::async_trait]
impl Destination for Router {
    fn name(&self) -> &'static str {
        "router"
    }

    async fn publish(&self, batch: &[OutboxEvent], deadline: tokio::time::Instant) -> Vec<Outcome> {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.routes.len() + 1];
        for (i, e) in batch.iter().enumerate() {
            groups[self.sink_for(e)].push(i);
        }
        let calls = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(s, g)| {
                let sub: Vec<OutboxEvent> = g.iter().map(|i| batch[*i].clone()).collect();
                let sink = self.sink(s).clone();
                async move { (s, sink.publish(&sub, deadline).await) }
            });
        let mut results: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
        for (s, deliveries) in futures::future::join_all(calls).await {
            for (i, d) in groups[s].iter().zip(deliveries) {
                results[*i] = Some(d);
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or(Outcome::Failed(SinkError::transient(
                    "sink returned too few results",
                )))
            })
            .collect()
    }

    /// Every sink in use, the first failure named after its sink.
    async fn check(&self) -> Result<(), SinkError> {
        for s in std::iter::once(&self.default).chain(self.routes.iter().map(|(_, s)| s)) {
            s.check().await.map_err(|e| match e {
                SinkError::Transient { message, source } => SinkError::Transient {
                    message: format!("{}: {message}", s.name()),
                    source,
                },
                SinkError::Rejected { message, source } => SinkError::Rejected {
                    message: format!("{}: {message}", s.name()),
                    source,
                },
                other => other,
            })?;
        }
        Ok(())
    }

    async fn reset(&self) {
        self.default.reset().await;
        for (_, s) in &self.routes {
            s.reset().await;
        }
    }

    fn with_sinks_wrapped(
        &self,
        wrap: &mut dyn FnMut(Arc<dyn Destination>) -> Arc<dyn Destination>,
    ) -> Option<Arc<dyn Destination>> {
        Some(Arc::new(Router {
            routes: self
                .routes
                .iter()
                .map(|(m, s)| (m.clone(), wrap(s.clone())))
                .collect(),
            default: wrap(self.default.clone()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let p = TopicPattern::new("payment.*");
        assert!(p.matches("payment.completed") && p.matches("payment."));
        assert!(!p.matches("payments") && !p.matches("order.payment.x"));
        assert!(TopicPattern::new("*").matches("anything"));
        assert!(TopicPattern::new("a*c*e").matches("abcde"));
        assert!(
            TopicPattern::new("orders").matches("orders")
                && !TopicPattern::new("orders").matches("orders2")
        );
    }

    struct Named(&'static str, std::sync::Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl Destination for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        async fn check(&self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn publish(&self, batch: &[OutboxEvent], _: tokio::time::Instant) -> Vec<Outcome> {
            self.1
                .lock()
                .unwrap()
                .extend(batch.iter().map(|e| e.topic.clone()));
            batch.iter().map(|_| Outcome::Delivered).collect()
        }
    }

    #[tokio::test]
    async fn splits_by_topic_and_keeps_positions() {
        let kafka = Arc::new(Named("kafka", Default::default()));
        let bull = Arc::new(Named("bullmq", Default::default()));
        let r = Router::new(bull.clone()).route(TopicPattern::new("payment.*"), kafka.clone());
        let ev = |t: &str| OutboxEvent::for_test(1, None, t);
        let out = r
            .publish(
                &[ev("chat"), ev("payment.completed"), ev("chat")],
                tokio::time::Instant::now() + std::time::Duration::from_secs(60),
            )
            .await;
        assert_eq!(out.len(), 3);
        assert_eq!(*kafka.1.lock().unwrap(), vec!["payment.completed"]);
        assert_eq!(*bull.1.lock().unwrap(), vec!["chat", "chat"]);
    }
}
