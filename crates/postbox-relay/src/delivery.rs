//! The delivery layer: per-key order for every sink.
//!
//! A batch (in outbox id order) goes to the broker either as one atomic group,
//! when the sink offers groups and the batch is deep enough to gain from one,
//! or in waves: wave *k* holds the *k*-th event of every key, each wave is
//! awaited before the next, and a key stops at its first failure. So a failed
//! event is never overtaken by a later event of its key, whatever the client
//! does with concurrent requests. A transient failure of a wave in which the
//! broker took nothing means the broker is down: nothing more of the batch is
//! attempted, and the sink is reset. One in a wave where other events went
//! through is about its key alone: that key waits out a backoff
//! ([`Outcome::Deferred`]) and every other key goes on.
//!
//! A batch has a deadline (`publish_timeout`). Waves the broker acknowledged
//! before it count as delivered; the wave it cuts off is a transient failure,
//! and later waves are not attempted. So a slow broker that needs longer than
//! the deadline for a whole batch still takes part of it on every pass, where
//! discarding the acknowledged part would send the same batch again forever.

use crate::sink::{Destination, Encoded, GroupOutcome, GroupPolicy, Outcome, Sink, SinkError};
use crate::OutboxEvent;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use tokio::time::{timeout_at, Instant};

/// A [`Sink`] driven in per-key order: the [`Destination`] the relay uses.
pub struct Delivery<S> {
    sink: S,
}

impl<S: Sink> Delivery<S> {
    /// Deliver through `sink`.
    pub fn new(sink: S) -> Self {
        Delivery { sink }
    }

    /// The sink inside.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The batch as one group, or `None` when it goes in waves instead.
    async fn group(
        &self,
        batch: &[OutboxEvent],
        policy: GroupPolicy,
        deadline: Instant,
    ) -> Option<Vec<Outcome>> {
        if !worth_a_group(batch, policy) {
            return None;
        }
        // An event the sink refuses must stop its key there: only waves can.
        let group = batch
            .iter()
            .map(|event| {
                let message = self.sink.encode(event).ok()?;
                Some(Encoded { event, message })
            })
            .collect::<Option<Vec<_>>>()?;
        let answer = timeout_at(deadline, self.sink.send_group(group))
            .await
            .unwrap_or_else(|_| GroupOutcome::Failed(cut_off()));
        match answer {
            GroupOutcome::Delivered => Some(batch.iter().map(|_| Outcome::Delivered).collect()),
            GroupOutcome::Failed(err) => {
                self.sink.reset().await;
                let mut err = Some(err);
                Some(
                    batch
                        .iter()
                        .map(|_| Outcome::Failed(err.take().unwrap_or(SinkError::NotAttempted)))
                        .collect(),
                )
            }
            GroupOutcome::Unclear => {
                tracing::debug!(
                    sink = self.sink.name(),
                    events = batch.len(),
                    "error inside an atomic group; sending the batch again in waves"
                );
                None
            }
        }
    }

    async fn waves(&self, batch: &[OutboxEvent], deadline: Instant) -> Vec<Outcome> {
        let mut progress = Progress::new(batch);
        for wave in waves(batch) {
            if Instant::now() >= deadline {
                // Out of time between waves: what is left was not attempted
                // and goes with the next batch, which starts at once.
                break;
            }
            let mut sent = Vec::with_capacity(wave.len());
            let mut items = Vec::with_capacity(wave.len());
            for i in wave {
                let event = &batch[i];
                if progress.held(event) {
                    continue;
                }
                match self.sink.encode(event) {
                    Ok(message) => {
                        sent.push(i);
                        items.push(Encoded { event, message });
                    }
                    Err(err) => progress.failed(i, err),
                }
            }
            if items.is_empty() {
                continue;
            }
            let Ok(answers) = timeout_at(deadline, self.sink.send_wave(items)).await else {
                // Cut off: these may or may not have reached the broker.
                for i in sent {
                    progress.failed(i, cut_off());
                }
                break;
            };
            if answers.len() != sent.len() {
                tracing::error!(sink = self.sink.name(), expected = sent.len(), got = answers.len(), "sink broke its contract (wrong number of results); treating the wave as not delivered");
                for i in sent {
                    progress.failed(
                        i,
                        SinkError::transient("sink returned a wrong number of results"),
                    );
                }
                continue;
            }
            let mut delivered = 0;
            let mut unavailable = Vec::new();
            for (i, answer) in sent.into_iter().zip(answers) {
                match answer {
                    Ok(()) => {
                        delivered += 1;
                        progress.results[i] = Some(Outcome::Delivered);
                    }
                    Err(err) if err.is_transient() => unavailable.push((i, err)),
                    Err(err) => progress.failed(i, err),
                }
            }
            // The broker took other events of this wave: what it could not
            // take now is about those keys (a missing partition leader, a
            // topic being created), not the broker. Their keys wait out a
            // backoff; every other key goes on.
            for (i, err) in unavailable {
                if delivered > 0 {
                    progress.deferred(i, err);
                } else {
                    progress.failed(i, err);
                }
            }
        }
        if progress.broker_down {
            // The next attempt starts on a fresh connection: a client's own
            // reconnect backoff would hold delivery back after the broker is up.
            self.sink.reset().await;
        }
        progress.finish()
    }
}

/// What the waves of one batch found so far.
struct Progress<'a> {
    batch: &'a [OutboxEvent],
    results: Vec<Option<Outcome>>,
    /// Keys with a failed event: their later events are not attempted.
    stopped: HashSet<&'a str>,
    /// A transient failure: nothing more of the batch is attempted.
    broker_down: bool,
}

impl<'a> Progress<'a> {
    fn new(batch: &'a [OutboxEvent]) -> Self {
        Progress {
            batch,
            results: batch.iter().map(|_| None).collect(),
            stopped: HashSet::new(),
            broker_down: false,
        }
    }

    /// Whether `event` must wait for a later batch.
    fn held(&self, event: &OutboxEvent) -> bool {
        self.broker_down
            || event
                .key
                .as_deref()
                .is_some_and(|k| self.stopped.contains(k))
    }

    fn failed(&mut self, i: usize, err: SinkError) {
        if let Some(k) = self.batch[i].key.as_deref() {
            self.stopped.insert(k);
        }
        self.broker_down |= err.is_transient();
        self.results[i] = Some(Outcome::Failed(err));
    }

    fn deferred(&mut self, i: usize, err: SinkError) {
        if let Some(k) = self.batch[i].key.as_deref() {
            self.stopped.insert(k);
        }
        self.results[i] = Some(Outcome::Deferred(err));
    }

    fn finish(self) -> Vec<Outcome> {
        self.results
            .into_iter()
            .map(|r| r.unwrap_or(Outcome::Failed(SinkError::NotAttempted)))
            .collect()
    }
}

#[async_trait::async_trait]
impl<S: Sink> Destination for Delivery<S> {
    fn name(&self) -> &'static str {
        self.sink.name()
    }

    async fn publish(&self, batch: &[OutboxEvent], deadline: Instant) -> Vec<Outcome> {
        if let Some(policy) = self.sink.groups() {
            if let Some(outcomes) = self.group(batch, policy, deadline).await {
                return outcomes;
            }
        }
        self.waves(batch, deadline).await
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.sink.check().await
    }

    async fn reset(&self) {
        self.sink.reset().await
    }
}

/// A send the deadline cut off: the broker may or may not have it.
fn cut_off() -> SinkError {
    SinkError::transient("no acknowledgement within publish_timeout")
}

/// Whether `batch` goes as one group: some key is at least
/// `min_key_depth` events deep, and no key's events go to two topics. An
/// atomic unit keeps order only within one destination: a key spread over
/// two could see a later event land where an earlier one failed.
fn worth_a_group(batch: &[OutboxEvent], policy: GroupPolicy) -> bool {
    let mut keys: HashMap<&str, (&str, usize)> = HashMap::with_capacity(batch.len());
    let mut depth = 1;
    for e in batch {
        let Some(k) = e.key.as_deref() else { continue };
        match keys.entry(k) {
            Entry::Vacant(v) => {
                v.insert((e.topic.as_str(), 1));
            }
            Entry::Occupied(mut o) if o.get().0 == e.topic => {
                o.get_mut().1 += 1;
                depth = depth.max(o.get().1);
            }
            Entry::Occupied(_) => return false,
        }
    }
    depth >= policy.min_key_depth
}

/// Split a batch (in id order) into waves: wave k holds the k-th event of every
/// key, so a wave has at most one event per key. Events without a key have no
/// ordering constraint and all go in wave 0.
fn waves(batch: &[OutboxEvent]) -> Vec<Vec<usize>> {
    let mut depth: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, e) in batch.iter().enumerate() {
        let w = match &e.key {
            None => 0,
            Some(k) => {
                let d = depth.entry(k.as_str()).or_insert(0);
                *d += 1;
                *d - 1
            }
        };
        if out.len() <= w {
            out.resize_with(w + 1, Vec::new);
        }
        out[w].push(i);
    }
    out
}

#[cfg(test)]
mod tests;
