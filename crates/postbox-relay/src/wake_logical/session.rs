//! One replication session: create the temporary slot, stream the
//! publications, wake the schemas each commit inserted into.

use super::decoder::{Decoder, Touched};
use super::target::ReplicationTarget;
use super::{published, Ended, StreamError};
use crate::wake::WakeTx;
use crate::Config;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(super) struct Session<'a> {
    pub(super) config: &'a Config,
    pub(super) target: &'a ReplicationTarget,
    pub(super) app_name: &'a str,
    pub(super) wakers: &'a HashMap<String, WakeTx>,
    pub(super) shutdown: &'a CancellationToken,
    /// The server accepted START_REPLICATION in this session.
    pub(super) streaming: bool,
}

impl Session<'_> {
    /// Check, connect, create the slot, stream. Returns on shutdown or failure.
    pub(super) async fn run(
        &mut self,
        schemas: &mut Vec<SchemaName>,
    ) -> Result<Ended, StreamError> {
        // Each time: a policy may have changed, and the reason a previous
        // attempt failed may have been fixed.
        let checked = tokio::select! {
            _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
            c = self.check(schemas) => c?,
        };
        *schemas = checked;
        if schemas.is_empty() {
            return Ok(Ended::NothingPublished);
        }
        let slot = format!(
            "postbox_relay_{}_{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let publications: Vec<String> = schemas
            .iter()
            .map(postbox::migrate::publication_name)
            .collect();
        let cfg = self
            .target
            .replication_config(&slot, publications)
            .with_application_name(self.app_name)
            // Applied positions reach the server within a second.
            .with_status_interval(Duration::from_secs(1))
            .with_buffer_size(1024);
        let mut client = ReplicationClient::connect_gated(cfg).await?;
        let result = self.stream(&mut client, &slot, schemas).await;
        match result {
            Ok(Ended::Shutdown) => {
                // CopyDone, then the server ends the session (and drops the slot).
                client.stop();
                if tokio::time::timeout(Duration::from_secs(2), client.shutdown())
                    .await
                    .is_err()
                {
                    client.abort();
                }
            }
            _ => client.abort(),
        }
        result
    }

    /// Which schemas are (still) published; the role and wal_level can stream.
    pub(super) async fn check(
        &self,
        schemas: &[SchemaName],
    ) -> Result<Vec<SchemaName>, StreamError> {
        let opts: sqlx::postgres::PgConnectOptions = self.config.database_url.expose().parse()?;
        let mut conn = PgConnection::connect_with(&opts.application_name(self.app_name)).await?;
        let still = published(&mut conn, schemas).await?;
        let may: bool = sqlx::query_scalar(
            "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
        )
        .fetch_one(&mut conn)
        .await?;
        let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        if still.is_empty() {
            return Ok(still);
        }
        if !may {
            return Err(StreamError::NoReplicationAttribute);
        }
        if wal_level != "logical" {
            return Err(StreamError::WalLevel(wal_level));
        }
        Ok(still)
    }

    pub(super) async fn stream(
        &mut self,
        client: &mut ReplicationClient,
        slot: &str,
        schemas: &[SchemaName],
    ) -> Result<Ended, StreamError> {
        let start = async {
            // On this very session, before START_REPLICATION: a temporary
            // slot lives exactly as long as the session.
            client
                .simple_query(&format!(
                    "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')"
                ))
                .await?;
            client.start().await?;
            client.wait_started().await
        };
        tokio::select! {
            _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
            r = start => r?,
        }
        self.streaming = true;
        tracing::info!(slot, schemas = ?schemas, "logical wake-up streaming");
        // Rows committed while no session streamed (before the first, or
        // between two) must not wait for the poll.
        for s in schemas {
            if let Some(tx) = self.wakers.get(s.as_str()) {
                crate::wake::bump(tx);
            }
        }
        let mut decoder = Decoder::default();
        let mut recheck = Recheck::default();
        loop {
            let event = tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
                names = recheck.due() => {
                    self.bump(names.iter().map(String::as_str));
                    continue;
                }
                e = client.recv() => e?,
            };
            let Some(event) = event else {
                return Err(StreamError::Ended);
            };
            match event {
                ReplicationEvent::Begin { .. } => decoder.begin(),
                ReplicationEvent::XLogData { data, .. } => decoder.change(&data),
                ReplicationEvent::Commit { end_lsn, .. } => {
                    let names = match decoder.commit() {
                        Touched::Schemas(names) => names,
                        Touched::Unknown => self.wakers.keys().cloned().collect(),
                    };
                    self.bump(names.iter().map(String::as_str));
                    recheck.add(names);
                    client.update_applied_lsn(end_lsn);
                }
                // Between transactions everything up to the server's
                // position has been seen: let the slot move on.
                ReplicationEvent::KeepAlive { wal_end, .. }
                    if !decoder.in_transaction() && wal_end > Lsn::ZERO =>
                {
                    client.update_applied_lsn(wal_end);
                }
                _ => {}
            }
        }
    }

    pub(super) fn bump<'n>(&self, names: impl Iterator<Item = &'n str>) {
        for name in names {
            if let Some(tx) = self.wakers.get(name) {
                crate::wake::bump(tx);
            }
        }
    }
}

/// Wake-ups repeated shortly after a commit. The commit record reaches the
/// WAL sender once it is flushed, which is a moment *before* the committing
/// backend makes the transaction visible to other sessions' snapshots: a
/// worker woken at once can claim before the row is visible, find nothing
/// and sleep until the poll. So every woken schema is woken again 10 ms and
/// 100 ms later (a NOTIFY has no such gap: it is sent after visibility). At
/// most 110 extra wake-ups a second per schema while commits flow; each costs
/// an idle worker one claim.
#[derive(Default)]
pub(super) struct Recheck {
    stages: [(Option<tokio::time::Instant>, HashSet<String>); 2],
}

impl Recheck {
    const DELAYS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(100)];

    pub(super) fn add(&mut self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        for ((deadline, pending), delay) in self.stages.iter_mut().zip(Self::DELAYS) {
            pending.extend(names.iter().cloned());
            deadline.get_or_insert(now + delay);
        }
    }

    /// The schemas of the earliest stage, once it is due (pending forever
    /// while nothing waits).
    pub(super) async fn due(&mut self) -> Vec<String> {
        let next = self
            .stages
            .iter_mut()
            .filter(|(d, _)| d.is_some())
            .min_by_key(|(d, _)| *d);
        match next {
            Some((deadline, pending)) => {
                tokio::time::sleep_until(deadline.expect("filtered")).await;
                *deadline = None;
                pending.drain().collect()
            }
            None => std::future::pending().await,
        }
    }
}
