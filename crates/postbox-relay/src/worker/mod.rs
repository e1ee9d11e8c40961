//! One relay worker: a PostgreSQL session that owns some partitions of one
//! schema's outbox and relays them, batch after batch, in id order. This file
//! is its loop; [`ownership`] is how it shares the partitions with the other
//! workers, [`crew`] how many its relay's workers each aim for, [`schedule`]
//! when it rebalances, claims or sleeps, [`batch`] one claim → publish →
//! commit.

mod batch;
mod crew;
mod cursor;
mod ownership;
mod schedule;

pub(crate) use crew::Crew;

use crate::wake::{SchemaSignals, WakeRx};
use crate::{Config, Destination, Stats};
use postbox::{sql::Queries, SchemaName, PARTITIONS};
use schedule::{Drained, Pace, Schedule, Step};
use sqlx::Connection;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub(crate) struct Worker {
    config: Arc<Config>,
    schema: SchemaName,
    q: Queries,
    /// This worker's number in its crew; the first `keeping_up_workers`
    /// hold the crew's share while the crew is consolidated.
    n: usize,
    crew: Arc<Crew>,
    /// What [`Crew::consolidated`] said at this worker's last look: a
    /// change means shares to rebalance.
    consolidated: bool,
    seed: usize,
    sink: Arc<dyn Destination>,
    stats: Arc<Stats>,
    /// New rows may be waiting (NOTIFY, logical decoding, listener restart).
    wake: WakeRx,
    /// Another worker joined, gave partitions back or left.
    rebalance: WakeRx,
    shutdown: CancellationToken,
    /// `application_name` of the session, so operators can tell relays apart.
    app_name: String,
    servers: Arc<postbox::Servers>,
    /// Partitions whose advisory lock this worker's session holds.
    owned: Vec<i16>,
    /// Partitions whose armed lock this worker's session holds (migration
    /// 0009): producers NOTIFY for them. Non-empty only while this worker
    /// sleeps or is about to.
    armed: Vec<i16>,
    /// The claim for the `owned` it was built for (`Queries::outbox_claim`
    /// and `outbox_claim_past`).
    claim_sql: (Vec<i16>, ClaimSql),
    /// The last claim found less than a batch: the next one sorts what the
    /// owned partitions hold (`claim_sorted`) instead of merging a
    /// scan per partition.
    keeping_up: bool,
    /// `Queries::outbox_claim_sorted`, for whichever partitions are owned.
    claim_sorted: ClaimSql,
    /// Where the next claim starts in each owned partition.
    cursor: cursor::Cursor,
    failpoint: crate::failpoint::Failpoint,
    /// This relay's sinks' health and the schema's partition count.
    health: Arc<crate::health::Health>,
    /// Whether this relay takes partitions of the schema (`health`): false
    /// while it stands by for relays that can publish.
    taking: watch::Receiver<bool>,
    /// Whether this worker's session holds the schema's member lock.
    member: bool,
}

/// What every worker of a relay shares.
pub(crate) struct Parts {
    pub sink: Arc<dyn Destination>,
    pub stats: Arc<Stats>,
    /// `postbox-relay:<pid>:<random>`, the prefix of the sessions' application_name.
    pub instance: Arc<str>,
    /// Where to open sessions (follows the primary).
    pub servers: Arc<postbox::Servers>,
    /// The workers of this relay serving the same schema.
    pub crew: Arc<Crew>,
    /// Whether the relay takes partitions (`health`).
    pub health: Arc<crate::health::Health>,
}

/// Why [`Worker::idle`] returned.
enum Woken {
    /// `until` came, or shutdown.
    Time,
    /// New rows may be waiting.
    Rows,
    /// Members or ownership changed.
    Rebalance,
}

/// Whether a signal's sender still exists (it goes only at shutdown); a
/// closed channel would otherwise end every wait at once.
fn sender_alive<T>(rx: &watch::Receiver<T>) -> bool {
    rx.has_changed().is_ok()
}

/// A claim statement in its two forms: with the branches for holes, and
/// without them (`Queries::outbox_claim_past`), for the worker without holes.
#[derive(Default)]
pub(crate) struct ClaimSql {
    pub holes: String,
    pub past: String,
}

impl ClaimSql {
    /// Without holes (almost always), the statement without their branches.
    pub(crate) fn pick(&self, holes: &[String]) -> &str {
        if holes.is_empty() {
            &self.past
        } else {
            &self.holes
        }
    }
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
        signals: SchemaSignals,
        shutdown: CancellationToken,
    ) -> Self {
        let Parts {
            sink,
            stats,
            instance,
            servers,
            crew,
            health,
        } = parts;
        let q = Queries::new(&schema);
        let taking = health.standing(schema.as_str()).taking.subscribe();
        Worker {
            claim_sorted: ClaimSql {
                holes: q.outbox_claim_sorted(config.sent.take()),
                past: q.outbox_claim_sorted_past(config.sent.take()),
            },
            q,
            n,
            crew,
            consolidated: false,
            // Spread the workers' first choices over the partition ring.
            seed: n * (PARTITIONS as usize / config.workers.max(1)) + std::process::id() as usize,
            config,
            schema,
            sink,
            stats,
            wake: signals.wake.subscribe(),
            rebalance: signals.rebalance.subscribe(),
            shutdown,
            owned: Vec::new(),
            armed: Vec::new(),
            claim_sql: (Vec::new(), ClaimSql::default()),
            // A relay starting may face a backlog.
            keeping_up: false,
            cursor: cursor::Cursor::default(),
            app_name: format!("{instance}:worker"),
            servers,
            failpoint: crate::failpoint::Failpoint::from_env(),
            health,
            taking,
            member: false,
        }
    }

    pub(crate) async fn run(mut self) -> Result<(), crate::RelayError> {
        self.failpoint.worker_started();
        let pace = Pace::of(&self.config);
        let mut failures = 0u32;
        let silent = self.config.session_timeout;
        while !self.shutdown.is_cancelled() {
            let (mut conn, backend) = match answered(silent, "connecting", self.connect()).await {
                Ok(c) => c,
                Err(e) => {
                    if let Some(pooled) = self.pooled(&e) {
                        return Err(pooled);
                    }
                    tracing::warn!(schema = %self.schema, error = %e, "relay worker cannot reach PostgreSQL; retrying");
                    self.pause(pace.backoff.delay(failures)).await;
                    failures += 1;
                    continue;
                }
            };
            failures = 0;
            self.crew.online(self.n, true);
            let mut schedule = Schedule::connected(pace, Instant::now());
            // A new session holds no armed locks: arm again before sleeping.
            self.armed.clear();
            // The backend this session answered from later, if not `backend`.
            let mut moved = None;
            let result: Result<(), sqlx::Error> = async {
                while !self.shutdown.is_cancelled() {
                    // Checked between batches, so a worker draining a backlog
                    // still gives partitions back within one batch.
                    let consolidated = self.crew.consolidated();
                    if self.rebalance.has_changed().unwrap_or(false)
                        || self.taking.has_changed().unwrap_or(false)
                        || consolidated != self.consolidated
                    {
                        schedule.rebalance_soon();
                    }
                    self.consolidated = consolidated;
                    match schedule.step(Instant::now()) {
                        Step::Rebalance => {
                            self.rebalance.borrow_and_update();
                            let r =
                                answered(silent, "rebalancing", self.rebalance(&mut conn, backend))
                                    .await?;
                            if let ownership::Rebalanced::SessionMoved { now } = r {
                                moved = Some(now);
                                break;
                            }
                            let acquired = matches!(r, ownership::Rebalanced::Acquired);
                            schedule.rebalanced(Instant::now(), acquired);
                        }
                        Step::Idle(until) => match self.idle(until).await {
                            Woken::Rows => schedule.rows_waiting(),
                            Woken::Rebalance => schedule.rebalance_soon(),
                            Woken::Time => {}
                        },
                        Step::Claim => {
                            // Mark wake-ups seen *before* claiming: a NOTIFY that lands
                            // during the claim makes the next idle return at once.
                            self.wake.borrow_and_update();
                            schedule.claiming();
                            self.claim_and_pace(&mut conn, &mut schedule).await?;
                        }
                    }
                }
                Ok(())
            }
            .await;
            self.crew.online(self.n, false);
            if let Some(after) = moved {
                // Nothing more through this session: through a pooler, even
                // a release would reach another client's backend.
                drop(conn);
                self.forget_owned();
                return Err(crate::RelayError::SessionMoved {
                    worker: format!("{}#{}", self.schema, self.n),
                    before: backend,
                    after,
                });
            }
            match result {
                Ok(()) => {
                    // Closing the session would release the locks too, but the
                    // others would only notice at their next tick.
                    if let Err(e) = answered(silent, "leaving", self.leave(&mut conn)).await {
                        tracing::debug!(schema = %self.schema, error = %e, "could not announce leaving; the others rebalance at their next tick");
                    }
                    self.forget_owned();
                    self.cursor.owned(&[], &self.crew.handover);
                    let _ = conn.close().await;
                }
                Err(e) => {
                    // Dropped, not closed: a session that stopped answering
                    // would not answer a close either. The server ends it
                    // after session_timeout of silence, which frees its locks.
                    drop(conn);
                    if let Some(pooled) = self.pooled(&e) {
                        self.forget_owned();
                        return Err(pooled);
                    }
                    tracing::warn!(schema = %self.schema, error = %e, "relay worker lost its database session; partitions released, reconnecting");
                    self.forget_owned();
                    self.cursor.owned(&[], &self.crew.handover);
                    self.pause(pace.backoff.delay(0)).await;
                }
            }
        }
        Ok(())
    }

    /// One claim → publish → commit, and what the schedule makes of it.
    async fn claim_and_pace(
        &mut self,
        conn: &mut sqlx::PgConnection,
        schedule: &mut Schedule,
    ) -> Result<(), sqlx::Error> {
        let silent = self.config.session_timeout;
        let pass = if self.owned.is_empty() {
            Pass::Drained { found: 0 }
        } else {
            let limit = self.config.publish_timeout + silent;
            answered(limit, "relaying a batch", self.pass(conn)).await?
        };
        match pass {
            // Drain without waiting while batches come back full.
            Pass::Full => schedule.full(Instant::now()),
            Pass::Drained { found } => {
                let look_by = self.cursor.next_look().filter(|_| !self.owned.is_empty());
                let all_armed = self.owned.iter().all(|p| self.armed.contains(p));
                if schedule.drained(Instant::now(), found, all_armed, look_by) == Drained::Arm {
                    let all = answered(silent, "arming wake-ups", self.arm(conn)).await?;
                    schedule.armed(Instant::now(), all, look_by);
                }
            }
            Pass::BrokerDown => {
                let delay = schedule.broker_down();
                // A relay that stands by gives its partitions back now,
                // not after the backoff.
                let shutdown = self.shutdown.clone();
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = tokio::time::sleep(delay) => {}
                    _ = self.taking.changed(), if sender_alive(&self.taking) => schedule.rebalance_soon(),
                }
            }
        }
        Ok(())
    }

    /// The session is gone or going: its partitions are no longer this worker's.
    fn forget_owned(&mut self) {
        self.count_owned(-(self.owned.len() as i64));
        self.owned.clear();
        self.member = false;
    }

    /// This worker took (`n` > 0) or gave back partitions: the relay's count
    /// and the schema's.
    fn count_owned(&self, n: i64) {
        self.stats.owned.fetch_add(n, Relaxed);
        self.health
            .standing(self.schema.as_str())
            .owned
            .fetch_add(n, Relaxed);
    }

    /// Sleep, but wake early on shutdown.
    async fn pause(&self, d: Duration) {
        tokio::select! {
            _ = self.shutdown.cancelled() => {}
            _ = tokio::time::sleep(d) => {}
        }
    }

    /// Wait for a wake-up or a rebalance signal of this schema, `until`, or shutdown.
    async fn idle(&mut self, until: Instant) -> Woken {
        tokio::select! {
            _ = self.shutdown.cancelled() => Woken::Time,
            _ = tokio::time::sleep_until(until.into()) => Woken::Time,
            r = self.wake.changed(), if sender_alive(&self.wake) => if r.is_ok() { Woken::Rows } else { Woken::Time },
            r = self.rebalance.changed(), if sender_alive(&self.rebalance) => if r.is_ok() { Woken::Rebalance } else { Woken::Time },
            r = self.taking.changed(), if sender_alive(&self.taking) => if r.is_ok() { Woken::Rebalance } else { Woken::Time },
        }
    }
}

/// What a statement's failure shows of a session shared with other clients:
/// a prepared statement this session made is missing (26000), or one it is
/// about to make already exists (42P05). Only a pooler in transaction mode
/// does that to a session; the backend pid check at the rebalance tick may
/// never get to run, since every statement of the worker is prepared.
fn shared_session(e: &sqlx::Error) -> Option<String> {
    let db = e.as_database_error()?;
    matches!(db.code().as_deref(), Some("26000") | Some("42P05")).then(|| {
        format!(
            "{} on a session it had prepared its statements on",
            db.message()
        )
    })
}

impl Worker {
    /// The relay's error when `e` shows this worker's session shared by a
    /// transaction pooler ([`shared_session`]).
    fn pooled(&self, e: &sqlx::Error) -> Option<crate::RelayError> {
        shared_session(e).map(|evidence| crate::RelayError::Pooled {
            url: self.config.database_url.redacted(),
            evidence: format!("relay worker {}#{}: {evidence}", self.schema, self.n),
        })
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
