//! One relay worker: a PostgreSQL session that owns some partitions of one
//! schema's outbox and relays them, batch after batch, in id order.

use crate::partitions::{candidates, target_share};
use crate::plan::{plan, Plan};
use crate::wake::WakeRx;
use crate::{Backoff, Config, Destination, OutboxEvent, Outcome, SinkError, Stats};
use postbox::{sql::Queries, SchemaName, PARTITIONS};
use sqlx::{Connection, PgConnection};
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub(crate) struct Worker {
    config: Arc<Config>,
    schema: SchemaName,
    q: Queries,
    seed: usize,
    sink: Arc<dyn Destination>,
    stats: Arc<Stats>,
    wake: WakeRx,
    shutdown: CancellationToken,
    /// `application_name` of the session, so operators can tell relays apart.
    app_name: String,
    servers: Arc<postbox::Servers>,
    /// Partitions whose advisory lock this worker's session holds.
    owned: Vec<i16>,
    /// Whether all `owned` partitions are armed in `outbox_wakeup` (producers
    /// NOTIFY for them): true only while this worker sleeps or is about to.
    armed: bool,
    failpoint: crate::failpoint::Failpoint,
}

/// What every worker of a relay shares.
pub(crate) struct Parts {
    pub sink: Arc<dyn Destination>,
    pub stats: Arc<Stats>,
    /// `postbox-relay:<pid>:<random>`, the prefix of the sessions' application_name.
    pub instance: Arc<str>,
    /// Where to open sessions (follows the primary).
    pub servers: Arc<postbox::Servers>,
}

/// What one pass of the loop found.
enum Pass {
    /// The batch came back full: claim again at once.
    Full,
    /// Less than a full batch (`found` events): poll again soon, or sleep.
    Drained { found: usize },
    /// The broker failed transiently: back off.
    BrokerDown,
}

impl Worker {
    pub(crate) fn new(
        config: Arc<Config>,
        schema: SchemaName,
        n: usize,
        parts: Parts,
        wake: WakeRx,
        shutdown: CancellationToken,
    ) -> Self {
        let Parts {
            sink,
            stats,
            instance,
            servers,
        } = parts;
        Worker {
            q: Queries::new(&schema),
            // Spread the workers' first choices over the partition ring.
            seed: n * (PARTITIONS as usize / config.workers.max(1)) + std::process::id() as usize,
            config,
            schema,
            sink,
            stats,
            wake,
            shutdown,
            owned: Vec::new(),
            armed: false,
            app_name: format!("{instance}:worker"),
            servers,
            failpoint: crate::failpoint::Failpoint::from_env(),
        }
    }

    pub(crate) async fn run(mut self) {
        self.failpoint.worker_started();
        let transient = Backoff {
            base: self.config.backoff_min,
            max: self.config.backoff_max,
        };
        let mut failures = 0u32;
        let silent = self.config.session_timeout;
        while !self.shutdown.is_cancelled() {
            let mut conn = match answered(silent, "connecting", self.connect()).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(schema = %self.schema, error = %e, "relay worker cannot reach PostgreSQL; retrying");
                    self.pause(transient.delay(failures)).await;
                    failures += 1;
                    continue;
                }
            };
            failures = 0;
            let mut broker_failures = 0u32;
            let mut next_rebalance = Instant::now();
            // Claim at once on (re)connect: rows may have waited while we were away.
            let mut claim_now = true;
            let mut next_poll = Instant::now();
            // Flags may be stale from an earlier session: arm again before sleeping.
            self.armed = false;
            let mut last_activity = Instant::now();
            let result: Result<(), sqlx::Error> = async {
                while !self.shutdown.is_cancelled() {
                    if Instant::now() >= next_rebalance {
                        // Newly taken partitions may hold a backlog: claim now.
                        claim_now |=
                            answered(silent, "rebalancing", self.rebalance(&mut conn)).await?;
                        next_rebalance = Instant::now() + self.config.rebalance_interval;
                    }
                    if !(claim_now || Instant::now() >= next_poll) {
                        claim_now = self.idle(next_poll.min(next_rebalance)).await;
                        continue;
                    }
                    // Mark wake-ups seen *before* claiming: a NOTIFY that lands
                    // during the claim makes the next idle return at once.
                    self.wake.borrow_and_update();
                    claim_now = false;
                    let pass = if self.owned.is_empty() {
                        Pass::Drained { found: 0 }
                    } else {
                        let limit = self.config.publish_timeout + silent;
                        answered(limit, "relaying a batch", self.pass(&mut conn)).await?
                    };
                    match pass {
                        // Drain without waiting while batches come back full.
                        Pass::Full => {
                            broker_failures = 0;
                            claim_now = true;
                            last_activity = Instant::now();
                        }
                        Pass::Drained { found } => {
                            broker_failures = 0;
                            let now = Instant::now();
                            if found > 0 {
                                last_activity = now;
                            }
                            if now < last_activity + self.config.busy_poll_for {
                                // Events just flowed: more are likely. A short
                                // poll serves them without any NOTIFY.
                                next_poll = now + self.config.busy_poll_interval;
                            } else if !self.armed && !self.owned.is_empty() {
                                answered(silent, "arming wake-ups", self.arm(&mut conn)).await?;
                                claim_now = true;
                            } else {
                                next_poll = now + self.config.poll_interval;
                            }
                        }
                        Pass::BrokerDown => {
                            self.pause(transient.delay(broker_failures)).await;
                            broker_failures += 1;
                            claim_now = true;
                        }
                    }
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) => {
                    // Closing the session releases every partition lock at once.
                    self.stats.owned.fetch_sub(self.owned.len() as i64, Relaxed);
                    self.owned.clear();
                    let _ = conn.close().await;
                }
                Err(e) => {
                    // Dropped, not closed: a session that stopped answering
                    // would not answer a close either. The server ends it
                    // after session_timeout of silence, which frees its locks.
                    drop(conn);
                    tracing::warn!(schema = %self.schema, error = %e, "relay worker lost its database session; partitions released, reconnecting");
                    self.stats.owned.fetch_sub(self.owned.len() as i64, Relaxed);
                    self.owned.clear();
                    self.pause(transient.delay(0)).await;
                }
            }
        }
    }

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        let mut conn = self
            .servers
            .connect(&self.app_name, self.config.session_timeout)
            .await?;
        sqlx::query(&self.q.relay_session_limits)
            .bind(
                self.config
                    .session_timeout
                    .as_millis()
                    .min(i32::MAX as u128) as i32,
            )
            .execute(&mut conn)
            .await?;
        sqlx::query(&self.q.relay_member_join)
            .bind(self.schema.as_str())
            .execute(&mut conn)
            .await?;
        Ok(conn)
    }

    /// Hold this worker's share of the partitions: give back the excess (we
    /// are between batches, so nothing of them is in flight), take free ones.
    /// Returns whether partitions were acquired.
    async fn rebalance(&mut self, conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        let members: i64 = sqlx::query_scalar(&self.q.relay_member_count)
            .bind(self.schema.as_str())
            .fetch_one(&mut *conn)
            .await?;
        let target = target_share(PARTITIONS as usize, members as usize);
        if self.owned.len() > target {
            self.stats
                .owned
                .fetch_sub((self.owned.len() - target) as i64, Relaxed);
            let extra: Vec<i32> = self
                .owned
                .split_off(target)
                .into_iter()
                .map(i32::from)
                .collect();
            sqlx::query(&self.q.partition_release)
                .bind(self.schema.as_str())
                .bind(&extra)
                .execute(&mut *conn)
                .await?;
            tracing::debug!(schema = %self.schema, released = ?extra, "partitions released");
        } else if self.owned.len() < target {
            let want = (target - self.owned.len()) as i64;
            let got: Vec<i16> = sqlx::query_scalar(&self.q.partition_try_acquire)
                .bind(self.schema.as_str())
                .bind(candidates(PARTITIONS as usize, self.seed, &self.owned))
                .bind(want)
                .fetch_all(&mut *conn)
                .await?;
            if !got.is_empty() {
                tracing::debug!(schema = %self.schema, acquired = ?got, "partitions acquired");
                self.stats.owned.fetch_add(got.len() as i64, Relaxed);
                self.owned.extend(got);
                // The new partitions' flags are unknown: arm all before sleeping.
                self.armed = false;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// About to sleep: ask producers to NOTIFY for this worker's partitions,
    /// and wait out those that may have read the flag unset (the caller then
    /// looks once more for rows committed before that).
    async fn arm(&mut self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query(&self.q.outbox_wakeup_arm)
            .bind(&self.owned)
            .execute(&mut *conn)
            .await?;
        let mut fence = conn.begin().await?;
        sqlx::query(&self.q.outbox_wakeup_fence)
            .bind(self.schema.as_str())
            .execute(&mut *fence)
            .await?;
        fence.commit().await?;
        self.armed = true;
        Ok(())
    }

    /// Claim → publish → write back → commit, once.
    async fn pass(&mut self, conn: &mut PgConnection) -> Result<Pass, sqlx::Error> {
        let started = Instant::now();
        let mut tx = conn.begin().await?;
        let batch = self.claim(&mut tx).await?;
        if batch.is_empty() {
            tx.commit().await?;
            return Ok(Pass::Drained { found: 0 });
        }
        let full = batch.len() as i64 >= self.config.batch_size;
        self.failpoint.before_publish(batch.len()).await;
        let outcomes = self.publish(&batch).await;
        self.failpoint.after_publish(batch.len()).await;
        let plan = plan(&batch, outcomes);
        self.mark_sent(&mut tx, &plan.sent).await?;
        for (event, error) in &plan.rejected {
            self.record_rejection(&mut tx, event, error).await?;
        }
        for (event, error) in &plan.deferred {
            self.defer(&mut tx, event, error).await?;
        }
        if self.armed {
            // Awake and working: producers of these partitions may skip the
            // NOTIFY until this worker arms them again before sleeping.
            sqlx::query(&self.q.outbox_wakeup_disarm)
                .bind(&self.owned)
                .execute(&mut *tx)
                .await?;
            self.armed = false;
        }
        tx.commit().await?;
        self.report(&batch, &plan, started);
        if let Some(e) = plan.transient {
            self.stats.transient_errors.fetch_add(1, Relaxed);
            tracing::warn!(schema = %self.schema, sink = self.sink.name(), error = %e, unsent = batch.len() - plan.sent.len(), "broker unavailable; rows stay in the outbox");
            return Ok(Pass::BrokerDown);
        }
        Ok(if full {
            Pass::Full
        } else {
            Pass::Drained { found: batch.len() }
        })
    }

    /// The next batch of this worker's partitions, locked until the commit.
    async fn claim(&self, tx: &mut PgConnection) -> Result<Vec<OutboxEvent>, sqlx::Error> {
        let mut batch: Vec<OutboxEvent> = sqlx::query_as(&self.q.outbox_claim_batch)
            .bind(&self.owned)
            .bind(self.config.batch_size)
            .fetch_all(&mut *tx)
            .await?;
        for e in &mut batch {
            e.schema = self.schema.to_string();
        }
        Ok(batch)
    }

    /// The destination's answer per event; no answer within `publish_timeout`,
    /// or a wrong number of answers, is a transient failure of the batch.
    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Outcome> {
        let all_failed = |why: String| {
            batch
                .iter()
                .map(|_| Outcome::Failed(SinkError::transient(why.clone())))
                .collect()
        };
        match tokio::time::timeout(self.config.publish_timeout, self.sink.publish(batch)).await {
            Ok(d) if d.len() == batch.len() => d,
            Ok(d) => {
                tracing::error!(sink = self.sink.name(), expected = batch.len(), got = d.len(), "sink broke its contract (wrong number of results); treating the batch as not delivered");
                all_failed("sink returned a wrong number of results".into())
            }
            Err(_) => {
                // The cut-off send may have left the client half-way (the
                // delivery layer never saw an answer, so it did not reset).
                self.sink.reset().await;
                all_failed(format!(
                    "no acknowledgement within publish_timeout ({:?})",
                    self.config.publish_timeout
                ))
            }
        }
    }

    async fn mark_sent(&self, tx: &mut PgConnection, sent: &[i64]) -> Result<(), sqlx::Error> {
        if sent.is_empty() {
            return Ok(());
        }
        let done = match self.config.sent {
            crate::SentRows::Mark => &self.q.outbox_mark_sent,
            crate::SentRows::Delete => &self.q.outbox_delete_sent,
        };
        sqlx::query(done).bind(sent).execute(&mut *tx).await?;
        Ok(())
    }

    /// A poison failure: retry later with backoff, or, out of attempts,
    /// dead-letter the row (its key moves on) or block its key (`block_topics`).
    async fn record_rejection(
        &self,
        tx: &mut PgConnection,
        event: &OutboxEvent,
        error: &SinkError,
    ) -> Result<(), sqlx::Error> {
        let reason = format!(
            "{} (attempt {} of {})",
            error,
            event.attempts + 1,
            self.config.max_attempts
        );
        let out_of_attempts = event.attempts + 1 >= self.config.max_attempts;
        let blocks = self
            .config
            .block_topics
            .iter()
            .any(|p| crate::TopicPattern::new(p.as_str()).matches(&event.topic));
        if out_of_attempts && blocks {
            sqlx::query(&self.q.outbox_block_key)
                .bind(event.id)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
            metrics::counter!("postbox_blocked_keys_total", "schema" => self.schema.to_string())
                .increment(1);
            tracing::error!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = ?event.key, error = %reason, "event out of attempts; its key is blocked until an operator fixes the row and sets next_attempt_at = NULL");
        } else if out_of_attempts {
            sqlx::query(&self.q.outbox_dead_letter_move)
                .bind(event.id)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
            self.stats.dead_lettered.fetch_add(1, Relaxed);
            metrics::counter!("postbox_dead_letters_total", "schema" => self.schema.to_string())
                .increment(1);
            tracing::error!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = ?event.key, error = %reason, "event dead-lettered");
        } else {
            let retry = Backoff {
                base: self.config.retry_base,
                max: self.config.retry_max,
            };
            let delay = retry.delay(event.attempts as u32);
            sqlx::query(&self.q.outbox_record_failure)
                .bind(event.id)
                .bind(&reason)
                .bind(delay.as_millis() as f64)
                .execute(&mut *tx)
                .await?;
            tracing::warn!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = ?event.key, error = %reason, retry_in = ?delay, "event rejected by the broker; will retry");
        }
        Ok(())
    }

    /// A transient failure of one key while the broker took the others: the
    /// row waits `backoff_max` (no attempt counted), holding back its key only.
    async fn defer(
        &self,
        tx: &mut PgConnection,
        event: &OutboxEvent,
        error: &SinkError,
    ) -> Result<(), sqlx::Error> {
        let delay = self.config.backoff_max;
        sqlx::query(&self.q.outbox_defer)
            .bind(event.id)
            .bind(error.to_string())
            .bind(delay.as_millis() as f64)
            .execute(&mut *tx)
            .await?;
        tracing::warn!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = ?event.key, error = %error, retry_in = ?delay, "event not taken by the broker while other keys were; its key waits, the others go on");
        Ok(())
    }

    /// Metrics and counters of a committed batch.
    fn report(&self, batch: &[OutboxEvent], plan: &Plan<'_>, started: Instant) {
        let schema = self.schema.to_string();
        let sink = self.sink.name();
        metrics::counter!("postbox_events_published_total", "schema" => schema.clone(), "sink" => sink).increment(plan.sent.len() as u64);
        metrics::histogram!("postbox_batch_size", "schema" => schema.clone())
            .record(batch.len() as f64);
        metrics::histogram!("postbox_batch_duration_seconds", "schema" => schema.clone())
            .record(started.elapsed().as_secs_f64());
        let now = chrono::Utc::now();
        let sent: HashSet<i64> = plan.sent.iter().copied().collect();
        // One handle per batch: resolving the labelled histogram per event was
        // a measurable share of the relay's CPU.
        let latency =
            metrics::histogram!("postbox_publish_latency_seconds", "schema" => schema.clone());
        for e in batch.iter().filter(|e| sent.contains(&e.id)) {
            // The producer's commit → marked sent: how long a consumer waits for the relay.
            let lag = (now - e.created_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
            latency.record(lag.max(0.0));
        }
        if !plan.rejected.is_empty() {
            metrics::counter!("postbox_publish_errors_total", "schema" => schema.clone(), "class" => "rejected").increment(plan.rejected.len() as u64);
        }
        if !plan.deferred.is_empty() {
            metrics::counter!("postbox_publish_errors_total", "schema" => schema.clone(), "class" => "deferred").increment(plan.deferred.len() as u64);
        }
        if plan.transient.is_some() {
            metrics::counter!("postbox_publish_errors_total", "schema" => schema, "class" => "transient").increment(1);
        }
        self.stats
            .published
            .fetch_add(plan.sent.len() as u64, Relaxed);
        self.stats
            .rejected
            .fetch_add(plan.rejected.len() as u64, Relaxed);
        self.stats.batches.fetch_add(1, Relaxed);
        tracing::debug!(schema = %self.schema, claimed = batch.len(), sent = plan.sent.len(), elapsed = ?started.elapsed(), "batch committed");
    }

    /// Sleep, but wake early on shutdown.
    async fn pause(&self, d: Duration) {
        tokio::select! {
            _ = self.shutdown.cancelled() => {}
            _ = tokio::time::sleep(d) => {}
        }
    }

    /// Wait for a NOTIFY of this schema, `until`, or shutdown. True if woken by a NOTIFY.
    async fn idle(&mut self, until: Instant) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            _ = tokio::time::sleep_until(until.into()) => false,
            r = self.wake.changed() => r.is_ok(),
        }
    }
}

/// `fut`'s result, or an error if PostgreSQL has not answered within `limit`
/// (the caller then gives the session up, its partitions with it).
async fn answered<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer from PostgreSQL within {} while {what} (session_timeout)",
                humantime_serde::re::humantime::format_duration(limit)
            ),
        ))),
    }
}
