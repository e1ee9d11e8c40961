//! One pass of a worker: claim a batch of its partitions (marking or deleting
//! it), publish it and commit, in one transaction; when the broker did not
//! take every event, each event's outcome is written in a second one.

use super::cursor::{Held, Pos, Snapshot, Taken};
use super::{ClaimSql, Pass, Worker};
use crate::plan::{plan, Plan};
use crate::{Backoff, OutboxEvent, Outcome, SinkError};
use sqlx::{Connection, PgConnection};
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A claimed row with where it stands in the claim order and the claim
/// statement's snapshot (`outbox_claim_batch.sql`).
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    event: OutboxEvent,
    #[sqlx(try_from = "Xid8")]
    xid: i64,
    partition_id: i16,
    snapshot: String,
}

/// An `xid8` column read as PostgreSQL sends it (binary: a big-endian
/// 64-bit integer), so the claim returns `xid` as it is stored rather than
/// converting it to text and back for every row.
struct Xid8(i64);

/// `xid8`'s fixed OID (PostgreSQL 13 and later).
const XID8_OID: sqlx::postgres::types::Oid = sqlx::postgres::types::Oid(5069);

impl sqlx::Type<sqlx::Postgres> for Xid8 {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_oid(XID8_OID)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for Xid8 {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let xid = match value.format() {
            sqlx::postgres::PgValueFormat::Binary => {
                u64::from_be_bytes(value.as_bytes()?.try_into()?)
            }
            sqlx::postgres::PgValueFormat::Text => value.as_str()?.parse()?,
        };
        Ok(Xid8(i64::try_from(xid)?))
    }
}

impl From<Xid8> for i64 {
    fn from(x: Xid8) -> i64 {
        x.0
    }
}

/// A claim slower than this is logged (sqlx's own warning is off: it prints
/// the whole statement).
const SLOW_CLAIM: Duration = Duration::from_secs(1);

/// What a claim read, for the worker's positions once its batch is committed.
struct Claim {
    taken: Vec<Taken>,
    snapshot: Option<Snapshot>,
}

impl Worker {
    /// Claim (taking the rows) → publish → commit, once; or, when the
    /// broker did not take every event, roll back and write each outcome.
    pub(super) async fn pass(&mut self, conn: &mut PgConnection) -> Result<Pass, sqlx::Error> {
        let started = Instant::now();
        self.cursor.owned(&self.owned, &self.crew.handover);
        if self.cursor.needs_held(Instant::now()) {
            self.read_held(conn).await?;
        }
        let mut tx = conn.begin().await?;
        let (batch, claim) = self.claim(&mut tx).await?;
        let _busy = self.crew.claimed(batch.len());
        if batch.is_empty() {
            tx.commit().await?;
            return Ok(Pass::Drained { found: 0 });
        }
        let full = batch.len() as i64 >= self.config.batch_size;
        self.failpoint.before_publish(batch.len()).await;
        let outcomes = self.publish_unless_standing_by(&batch).await;
        self.failpoint.after_publish(batch.len()).await;
        let plan = plan(&batch, outcomes);
        if plan.sent.len() < batch.len() {
            // The claim marked (or deleted) every row. Undo that and write
            // what happened to each, in a transaction of its own: this
            // worker's partition locks keep other relays off these rows.
            tx.rollback().await?;
            tx = conn.begin().await?;
            self.mark_sent(&mut tx, &plan.sent).await?;
            for (event, error) in &plan.rejected {
                self.record_rejection(&mut tx, event, error).await?;
            }
            for (event, error) in &plan.deferred {
                self.defer(&mut tx, event, error).await?;
            }
        }
        if !self.armed.is_empty() {
            // Awake and working: producers of these partitions may skip the
            // NOTIFY until this worker arms them again before sleeping.
            self.disarm(&mut tx, None).await?;
        }
        tx.commit().await?;
        if plan.sent.len() == batch.len() {
            match &claim.snapshot {
                Some(snapshot) => self
                    .cursor
                    .claimed(&self.owned, &claim.taken, snapshot, full),
                None => {
                    tracing::warn!(schema = %self.schema, "the claim's snapshot could not be read; positions stay where they were")
                }
            }
        } else if !plan.rejected.is_empty() || !plan.deferred.is_empty() {
            self.cursor.rows_held();
        }
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

    /// The next batch of this worker's partitions in claim order ((xid, id),
    /// see `cursor`), taken (marked sent or deleted) in `tx` and locked until
    /// it ends.
    async fn claim(
        &mut self,
        tx: &mut PgConnection,
    ) -> Result<(Vec<OutboxEvent>, Claim), sqlx::Error> {
        let holes: Vec<String> = self.cursor.holes().map(|x| x.to_string()).collect();
        let started = Instant::now();
        let mut rows: Vec<ClaimedRow> = if self.keeping_up {
            let from = self.cursor.lowest(&self.owned);
            let mut query = sqlx::query_as(self.claim_sorted.pick(&holes))
                .bind(self.config.batch_size)
                .bind(&self.owned)
                .bind(from.xid.to_string())
                .bind(from.id);
            if !holes.is_empty() {
                query = query.bind(&holes);
            }
            query.fetch_all(&mut *tx).await?
        } else {
            // Built again only when ownership changed, not at every busy poll.
            if self.claim_sql.0 != self.owned {
                let take = self.config.sent.take();
                self.claim_sql = (
                    self.owned.clone(),
                    ClaimSql {
                        holes: self.q.outbox_claim(&self.owned, take),
                        past: self.q.outbox_claim_past(&self.owned, take),
                    },
                );
            }
            let (xids, ids): (Vec<String>, Vec<i64>) = (0..postbox::PARTITIONS)
                .map(|p| {
                    let at = self.cursor.after(p);
                    (at.xid.to_string(), at.id)
                })
                .unzip();
            let mut query = sqlx::query_as(self.claim_sql.1.pick(&holes))
                .bind(self.config.batch_size)
                .bind(&xids)
                .bind(&ids);
            if !holes.is_empty() {
                query = query.bind(&holes);
            }
            query.fetch_all(&mut *tx).await?
        };
        let took = started.elapsed();
        if took >= SLOW_CLAIM {
            tracing::warn!(
                schema = %self.schema,
                statement = if self.keeping_up { "outbox_claim_batch (sorted)" } else { "outbox_claim_batch (merge)" },
                took = %postbox::display_duration(took),
                rows = rows.len(),
                partitions = self.owned.len(),
                "slow claim; see `postbox status` for the backlog and pg_stat_activity for what holds the database"
            );
        }
        // A full batch may mean a backlog, which the sorted claim would read
        // whole at every pass; the merge reads about a batch.
        self.keeping_up = (rows.len() as i64) < self.config.batch_size;
        rows.sort_unstable_by_key(|r| (r.xid, r.event.id));
        let claim = Claim {
            taken: rows
                .iter()
                .map(|r| Taken {
                    partition: r.partition_id,
                    pos: Pos {
                        xid: r.xid,
                        id: r.event.id,
                    },
                })
                .collect(),
            snapshot: rows.first().and_then(|r| Snapshot::parse(&r.snapshot)),
        };
        let batch = rows
            .into_iter()
            .map(|r| OutboxEvent {
                schema: self.schema.to_string(),
                ..r.event
            })
            .collect();
        Ok((batch, claim))
    }

    /// The rows of the owned partitions that wait out a backoff or are
    /// blocked: the claims pass them, and the worker's positions come back
    /// to each once it may go again.
    async fn read_held(&mut self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let rows: Vec<(i16, i64, i64, Option<f64>)> = sqlx::query_as(&self.q.outbox_held_list)
            .bind(&self.owned)
            .fetch_all(&mut *conn)
            .await?;
        let held = rows
            .into_iter()
            .map(|(partition, xid, id, due_in)| Held {
                partition,
                xid,
                id,
                due_in: due_in.map(|s| Duration::from_secs_f64(s.max(0.0))),
            })
            .collect();
        self.cursor
            .held(held, Instant::now(), self.config.poll_interval);
        Ok(())
    }

    /// The destination's answer per event, by `publish_timeout`: what the
    /// broker acknowledged before it is marked even when the rest is cut off
    /// (see the delivery layer); a wrong number of answers is a transient
    /// failure of the batch.
    /// [`Self::publish`], cut off when the relay stands by meanwhile (its
    /// broker stopped answering and another relay can publish): the batch
    /// is then not delivered, as when `publish_timeout` cuts it, so its
    /// partitions go to that relay now rather than after the timeout.
    async fn publish_unless_standing_by(&self, batch: &[OutboxEvent]) -> Vec<Outcome> {
        let mut taking = self.taking.clone();
        let standing_by = async move { taking.wait_for(|t| !*t).await.is_ok() };
        tokio::select! {
            outcomes = self.publish(batch) => outcomes,
            true = standing_by => {
                // What the cancelled send left half-done goes with its connections.
                self.sink.reset().await;
                tracing::info!(schema = %self.schema, events = batch.len(), "publish cut off: this relay stands by; the events stay in the outbox for the relay that takes their partitions");
                batch
                    .iter()
                    .map(|_| {
                        Outcome::Failed(SinkError::transient(
                            "cut off: the relay stands by while its broker does not answer",
                        ))
                    })
                    .collect()
            }
        }
    }

    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Outcome> {
        let deadline = tokio::time::Instant::now() + self.config.publish_timeout;
        let outcomes = self.sink.publish(batch, deadline).await;
        if outcomes.len() == batch.len() {
            return outcomes;
        }
        tracing::error!(sink = self.sink.name(), expected = batch.len(), got = outcomes.len(), "sink broke its contract (wrong number of results); treating the batch as not delivered");
        batch
            .iter()
            .map(|_| {
                Outcome::Failed(SinkError::transient(
                    "sink returned a wrong number of results",
                ))
            })
            .collect()
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
            tracing::error!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = event.key.as_deref(), error = %reason, "event out of attempts; its key is blocked until an operator fixes the row and sets next_attempt_at = NULL");
        } else if out_of_attempts {
            sqlx::query(&self.q.outbox_dead_letter_move)
                .bind(event.id)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
            self.stats.dead_lettered.fetch_add(1, Relaxed);
            metrics::counter!("postbox_dead_letters_total", "schema" => self.schema.to_string())
                .increment(1);
            tracing::error!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = event.key.as_deref(), error = %reason, "event dead-lettered");
        } else {
            let retry = Backoff {
                min: self.config.retry_min,
                max: self.config.retry_max,
            };
            let delay = retry.delay(event.attempts as u32);
            sqlx::query(&self.q.outbox_record_failure)
                .bind(event.id)
                .bind(&reason)
                .bind(delay.as_millis() as f64)
                .execute(&mut *tx)
                .await?;
            tracing::warn!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = event.key.as_deref(), error = %reason, retry_in = %postbox::display_duration(delay), "event rejected by the broker; will retry");
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
        tracing::warn!(schema = %self.schema, event_id = %event.event_id, topic = %event.topic, key = event.key.as_deref(), error = %error, retry_in = %postbox::display_duration(delay), "event not taken by the broker while other keys were; its key waits, the others go on");
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
        // Per topic, for the console's chart (a batch holds few topics).
        let mut by_topic: Vec<(&str, u64)> = Vec::new();
        for e in batch.iter().filter(|e| sent.contains(&e.id)) {
            // The producer's commit → marked sent: how long a consumer waits for the relay.
            let lag = (now - e.created_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
            latency.record(lag.max(0.0));
            match by_topic.iter_mut().find(|(t, _)| *t == e.topic) {
                Some(c) => c.1 += 1,
                None => by_topic.push((&e.topic, 1)),
            }
        }
        if !by_topic.is_empty() {
            self.stats.delivered(self.schema.as_str(), &by_topic);
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
}
