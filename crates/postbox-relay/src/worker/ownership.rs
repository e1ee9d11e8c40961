//! A worker's share of the partitions: joining the schema's members, taking
//! and giving back partitions, leaving, and arming wake-ups for what it owns.
//!
//! Every change of membership or ownership is announced on the relays' LISTEN
//! channel (`relay_rebalance_signal.sql`), so the other workers of the schema,
//! in this relay and in others, rebalance at once: a partition given back is
//! taken within milliseconds rather than at the next `rebalance_interval`
//! tick, which remains only for what cannot announce itself (a relay that
//! died).

use super::Worker;
use crate::partitions::{candidates, target_share};
use crate::wake::rebalance_payload;
use postbox::PARTITIONS;
use sqlx::PgConnection;

/// What a rebalance tick found.
pub(super) enum Rebalanced {
    /// Partitions were taken over: they may hold a backlog.
    Acquired,
    /// Nothing new to claim from.
    Unchanged,
    /// The session answered from another backend than it started with.
    SessionMoved { now: i32 },
}

impl Worker {
    /// A session that counts as a member of the schema's relays (unless the
    /// relay stands by), the others told to make room for it.
    /// Also returns the session's backend pid, which a session of its own
    /// keeps (`session_check.rs`).
    pub(super) async fn connect(&mut self) -> Result<(PgConnection, i32), sqlx::Error> {
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
        self.member = false;
        let backend = if *self.taking.borrow_and_update() {
            self.join(&mut conn).await?
        } else {
            sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut conn)
                .await?
        };
        Ok((conn, backend))
    }

    /// Count as a member of the schema's relays, and tell the others to make
    /// room. Returns the session's backend pid.
    async fn join(&mut self, conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
        let (_, backend): (bool, i32) = sqlx::query_as(&self.q.relay_member_join)
            .bind(self.schema.as_str())
            .fetch_one(&mut *conn)
            .await?;
        self.member = true;
        self.signal_rebalance(conn).await?;
        Ok(backend)
    }

    /// Hold this worker's share of the partitions: give back the excess (we
    /// are between batches, so nothing of them is in flight), take free ones.
    /// First, before any lock is taken or given back, check that the session
    /// still answers from `backend` (`session_check.rs`).
    pub(super) async fn rebalance(
        &mut self,
        conn: &mut PgConnection,
        backend: i32,
    ) -> Result<Rebalanced, sqlx::Error> {
        let (members, now): (i64, i32) = sqlx::query_as(&self.q.relay_member_count)
            .bind(self.schema.as_str())
            .fetch_one(&mut *conn)
            .await?;
        if now != backend {
            return Ok(Rebalanced::SessionMoved { now });
        }
        let taking = *self.taking.borrow_and_update();
        if !taking {
            if self.member {
                // Standing by: everything back, out of the members, the
                // others told; between batches, as when stopping.
                self.leave(conn).await?;
                tracing::info!(schema = %self.schema, worker = self.n, "standing by: partitions given back");
            }
            return Ok(Rebalanced::Unchanged);
        }
        if !self.member {
            self.join(conn).await?;
        }
        let target = self
            .crew
            .share(self.n, target_share(PARTITIONS as usize, members as usize));
        if self.owned.len() > target {
            self.count_owned(-((self.owned.len() - target) as i64));
            let extra = self.owned.split_off(target);
            // Another relay may send these before they come back here.
            self.cursor.owned(&self.owned, &self.crew.handover);
            // Armed partitions given back would make their new owner's
            // producers NOTIFY until this session ends.
            self.disarm(conn, Some(&extra)).await?;
            let extra: Vec<i32> = extra.into_iter().map(i32::from).collect();
            sqlx::query(&self.q.partition_release)
                .bind(self.schema.as_str())
                .bind(&extra)
                .execute(&mut *conn)
                .await?;
            tracing::debug!(schema = %self.schema, released = ?extra, members, "partitions released");
            self.signal_rebalance(conn).await?;
        } else if self.owned.len() < target {
            let want = (target - self.owned.len()) as i64;
            let got: Vec<i16> = sqlx::query_scalar(&self.q.partition_try_acquire)
                .bind(self.schema.as_str())
                .bind(candidates(PARTITIONS as usize, self.seed, &self.owned))
                .bind(want)
                .fetch_all(&mut *conn)
                .await?;
            if !got.is_empty() {
                tracing::debug!(schema = %self.schema, acquired = ?got, members, "partitions acquired");
                self.count_owned(got.len() as i64);
                // Not armed yet: the worker arms them before it sleeps.
                self.owned.extend(got);
                // Taken over from a worker that left, they may hold a backlog.
                self.keeping_up = false;
                return Ok(Rebalanced::Acquired);
            }
        }
        Ok(Rebalanced::Unchanged)
    }

    /// Stopping cleanly: give everything back, then tell the others, so they
    /// take the partitions now rather than when the server has ended this
    /// session and their next tick comes.
    pub(super) async fn leave(&mut self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        self.count_owned(-(self.owned.len() as i64));
        self.owned.clear();
        self.cursor.owned(&[], &self.crew.handover);
        sqlx::query(&self.q.relay_member_leave)
            .execute(&mut *conn)
            .await?;
        // Every advisory lock of the session went, armed ones too.
        self.armed.clear();
        self.member = false;
        self.signal_rebalance(conn).await
    }

    async fn signal_rebalance(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        sqlx::query(&self.q.relay_rebalance_signal)
            .bind(postbox::NOTIFY_CHANNEL)
            .bind(rebalance_payload(self.schema.as_str()))
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// About to sleep: ask producers to NOTIFY for this worker's partitions
    /// by holding their armed locks. Returns whether all are armed: a lock a
    /// producer's commit holds right now is not waited for (a worker arming
    /// in turn would stall its partitions for as many commits), the caller
    /// polls again soon and finds that row instead.
    pub(super) async fn arm(&mut self, conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        let new: Vec<i32> = self
            .owned
            .iter()
            .filter(|p| !self.armed.contains(p))
            .map(|&p| i32::from(p))
            .collect();
        let got: Vec<i16> = sqlx::query_scalar(&self.q.outbox_wakeup_arm)
            .bind(self.schema.as_str())
            .bind(&new)
            .fetch_all(&mut *conn)
            .await?;
        let all = got.len() == new.len();
        self.armed.extend(got);
        Ok(all)
    }

    /// Release the armed locks of `only` (all when `None`): producers of those
    /// partitions skip the NOTIFY again.
    pub(super) async fn disarm(
        &mut self,
        conn: &mut PgConnection,
        only: Option<&[i16]>,
    ) -> Result<(), sqlx::Error> {
        let (gone, kept): (Vec<i16>, Vec<i16>) = std::mem::take(&mut self.armed)
            .into_iter()
            .partition(|p| only.is_none_or(|o| o.contains(p)));
        self.armed = kept;
        if gone.is_empty() {
            return Ok(());
        }
        let gone: Vec<i32> = gone.into_iter().map(i32::from).collect();
        sqlx::query(&self.q.outbox_wakeup_disarm)
            .bind(self.schema.as_str())
            .bind(&gone)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
}
