//! A batch as one Kafka transaction (`publish = "transaction"`).
//!
//! In waves, a batch sixteen events deep per key takes sixteen awaited rounds
//! of produce requests. In a transaction every event of the batch is produced
//! at once (the idempotent producer keeps each partition's order) and the
//! broker makes them visible together or not at all, so a `read_committed`
//! consumer never sees a later event of a key whose earlier event failed: a
//! failed transaction is aborted and the delivery layer sends the batch again
//! in waves, which find the event at fault.
//!
//! A transactional producer runs one transaction at a time, so the sink keeps
//! a pool of them, one per batch in flight, each with a transactional id of
//! its own (`<prefix>-<random>-<n>`): relays never share an id, so they never
//! fence each other. `transaction.timeout.ms` is the relay's
//! `publish_timeout`: a relay that dies mid-transaction holds
//! `read_committed` consumers of those partitions back at most that long,
//! until the broker aborts it.

use postbox_relay::{GroupOutcome, SinkError};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the sink sends in waves after the broker refused transactions
/// before it asks again (an ACL may have been granted meanwhile).
const REFUSED_FOR: Duration = Duration::from_secs(300);

/// The sink's transactional producers.
pub(crate) struct Transactions {
    config: ClientConfig,
    /// The user's prefix, as ACLs name it.
    prefix: String,
    /// `<prefix>-<random>`: this sink's ids, `-<n>` appended.
    id_prefix: String,
    timeout: Duration,
    next_id: AtomicU64,
    idle: Arc<Mutex<Vec<FutureProducer>>>,
    refused_at: Mutex<Option<Instant>>,
}

/// A transactional producer could not be had.
enum Unavailable {
    /// The broker refused transactions themselves: send in waves.
    Refused,
    /// The broker could not be reached.
    Down(SinkError),
}

impl Transactions {
    /// Producers made from `config` (the sink's own settings), each with a
    /// transactional id starting with `prefix`, whose transactions the broker
    /// aborts after `timeout`.
    pub(crate) fn new(config: ClientConfig, prefix: &str, timeout: Duration) -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Transactions {
            config,
            prefix: prefix.to_owned(),
            id_prefix: format!("{prefix}-{}", &random[..12]),
            timeout,
            next_id: AtomicU64::new(0),
            idle: Default::default(),
            refused_at: Mutex::new(None),
        }
    }

    /// A transactional producer's settings.
    fn config_for(&self, id: &str) -> ClientConfig {
        let mut config = self.config.clone();
        config.set("transactional.id", id).set(
            "transaction.timeout.ms",
            self.timeout.as_millis().to_string(),
        );
        config
    }

    /// Send in waves for a while: the broker (or librdkafka) will not run
    /// this relay's transactions.
    fn refuse(&self, id: &str, e: &KafkaError) {
        *self.refused_at.lock().expect("refusal lock") = Some(Instant::now());
        tracing::warn!(
            error = %e,
            transactional_id = %id,
            "Kafka transactions refused: sending batches in waves for the next {}s; grant the relay Write on TransactionalId prefix {:?}, or set kafka.publish = \"waves\"",
            REFUSED_FOR.as_secs(),
            self.prefix,
        );
    }

    /// Whether the broker refused transactions lately.
    pub(crate) fn refused(&self) -> bool {
        let mut at = self.refused_at.lock().expect("refusal lock");
        match *at {
            Some(t) if t.elapsed() < REFUSED_FOR => true,
            Some(_) => {
                *at = None;
                false
            }
            None => false,
        }
    }

    /// Produce `records` in one transaction and commit it. Anything that
    /// fails once the transaction is open aborts it and leaves the batch to
    /// waves, which tell a refused event from a key whose partition is
    /// unavailable, so one stuck key does not hold the others back.
    pub(crate) async fn send(&self, records: Vec<FutureRecord<'_, str, [u8]>>) -> GroupOutcome {
        let n = records.len();
        let producer = match self.take().await {
            Ok(p) => p,
            Err(Unavailable::Refused) => return GroupOutcome::Unclear,
            Err(Unavailable::Down(e)) => return GroupOutcome::Failed(e),
        };
        if let Err(e) = producer.begin_transaction() {
            discard(producer);
            return GroupOutcome::Failed(SinkError::transient(format!(
                "beginning a Kafka transaction of {n} events: {e}"
            )));
        }
        let open = Open {
            producer: Some(producer),
            idle: self.idle.clone(),
        };
        let mut reports: Vec<DeliveryFuture> = Vec::with_capacity(n);
        for record in records {
            match open.producer().send_result(record) {
                Ok(report) => reports.push(report),
                Err((e, _)) => {
                    tracing::debug!(error = %e, "producing in a Kafka transaction failed; sending the batch in waves");
                    let _ = open.end(false).await;
                    return GroupOutcome::Unclear;
                }
            }
        }
        // Await the delivery reports here rather than in the commit: the
        // commit's own flush polls on its thread in 100 ms steps while the
        // producer's thread takes the reports, so it waited about 100 ms a
        // batch. The first failure ends the wait: the batch is aborted.
        for report in reports {
            let failed = match report.await {
                Ok(Ok(_)) => continue,
                Ok(Err((e, _))) => e,
                Err(_) => KafkaError::Canceled,
            };
            tracing::debug!(error = %failed, "a message of a Kafka transaction failed; sending the batch in waves");
            let _ = open.end(false).await;
            return GroupOutcome::Unclear;
        }
        match open.end(true).await {
            Ok(()) => GroupOutcome::Delivered,
            Err(e) => GroupOutcome::Failed(SinkError::transient(format!(
                "committing a Kafka transaction of {n} events: {e}"
            ))),
        }
    }

    /// An idle producer, or a new one with its transactions initialised.
    async fn take(&self) -> Result<FutureProducer, Unavailable> {
        if self.refused() {
            return Err(Unavailable::Refused);
        }
        if let Some(p) = self.idle.lock().expect("pool lock").pop() {
            return Ok(p);
        }
        let id = format!("{}-{}", self.id_prefix, self.next_id.fetch_add(1, Relaxed));
        let producer = match self.config_for(&id).create::<FutureProducer>() {
            Ok(p) => p,
            Err(e) => {
                // A setting librdkafka will not combine with transactions
                // would fail every batch: send in waves, and say why.
                self.refuse(&id, &e);
                return Err(Unavailable::Refused);
            }
        };
        let init = producer.clone();
        let timeout = self.timeout;
        let ready = tokio::task::spawn_blocking(move || init.init_transactions(timeout)).await;
        match ready {
            Ok(Ok(())) => Ok(producer),
            Ok(Err(e)) => {
                discard(producer);
                if refuses_transactions(&e) {
                    self.refuse(&id, &e);
                    Err(Unavailable::Refused)
                } else {
                    Err(Unavailable::Down(SinkError::transient(format!(
                        "starting Kafka transactions ({id}): {e}"
                    ))))
                }
            }
            Err(join) => Err(Unavailable::Down(SinkError::transient(format!(
                "starting Kafka transactions ({id}): {join}"
            )))),
        }
    }

    /// Drop every idle producer (after an outage: fresh ones start clean).
    pub(crate) fn clear(&self) {
        for p in self.idle.lock().expect("pool lock").drain(..) {
            discard(p);
        }
    }
}

/// A transaction begun and not yet ended. It always ends: committed or
/// aborted by [`end`](Open::end), or aborted when dropped (the relay stopped
/// waiting at `publish_timeout`), on a blocking thread that runs to the end
/// either way. A transaction left open would hold `read_committed` consumers
/// of its partitions back until the broker timed it out.
struct Open {
    producer: Option<FutureProducer>,
    idle: Arc<Mutex<Vec<FutureProducer>>>,
}

impl Open {
    fn producer(&self) -> &FutureProducer {
        self.producer.as_ref().expect("open transaction")
    }

    /// Commit (`commit`) or abort; a failed commit is aborted. The producer
    /// goes back to the pool, or is dropped if it could not end the transaction.
    async fn end(mut self, commit: bool) -> Result<(), String> {
        let (producer, idle) = (self.producer.take(), self.idle.clone());
        let ended = tokio::task::spawn_blocking(move || finish(producer, &idle, commit)).await;
        ended.unwrap_or_else(|e| Err(e.to_string()))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(producer) = self.producer.take() {
            let idle = self.idle.clone();
            tokio::task::spawn_blocking(move || finish(Some(producer), &idle, false));
        }
    }
}

fn finish(
    producer: Option<FutureProducer>,
    idle: &Mutex<Vec<FutureProducer>>,
    commit: bool,
) -> Result<(), String> {
    let Some(producer) = producer else {
        return Err("no open transaction".into());
    };
    let committed = if commit {
        producer
            .commit_transaction(Timeout::Never)
            .map_err(|e| e.to_string())
    } else {
        Err("aborted".to_owned())
    };
    let ended = committed.is_ok()
        || {
            let aborted = producer.abort_transaction(Timeout::Never);
            if let Err(e) = &aborted {
                tracing::debug!(error = %e, "aborting a Kafka transaction failed; dropping its producer");
            }
            aborted.is_ok()
        };
    if ended {
        idle.lock().expect("pool lock").push(producer);
    }
    committed
}

/// Destroying a librdkafka handle may block while it purges: not on the runtime.
pub(crate) fn discard(producer: FutureProducer) {
    tokio::task::spawn_blocking(move || drop(producer));
}

/// The broker will not run transactions for this relay at all (as opposed
/// to being unreachable).
fn refuses_transactions(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::TransactionalIdAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::UnsupportedVersion
                | C::UnsupportedFeature
                | C::InvalidTransactionTimeout
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_of_transactions_is_told_from_an_outage() {
        for code in [
            C::TransactionalIdAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::UnsupportedVersion,
            C::UnsupportedFeature,
            C::InvalidTransactionTimeout,
        ] {
            assert!(refuses_transactions(&KafkaError::Global(code)), "{code:?}");
        }
        for code in [
            C::AllBrokersDown,
            C::MessageTimedOut,
            C::CoordinatorNotAvailable,
        ] {
            assert!(!refuses_transactions(&KafkaError::Global(code)), "{code:?}");
        }
    }

    #[test]
    fn ids_are_the_prefix_and_a_random_part_of_their_own() {
        let a = Transactions::new(ClientConfig::new(), "orders", Duration::from_secs(10));
        let b = Transactions::new(ClientConfig::new(), "orders", Duration::from_secs(10));
        assert!(a.id_prefix.starts_with("orders-"));
        assert_ne!(a.id_prefix, b.id_prefix, "two relays never share an id");
        assert!(!a.refused());
    }
}
