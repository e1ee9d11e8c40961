//! The recorder: every `health_interval`, write this relay's health record in
//! each schema's `outbox_relays`, read what the others' say, and decide
//! whether this relay takes partitions (`decide`); a change wakes the
//! schema's workers to rebalance.

use super::{decide, wall, Health, Peers};
use crate::wake::{bump, SchemaSignals};
use crate::Config;
use postbox::{sql::Queries, SchemaName};
use serde_json::json;
use sqlx::{Connection, PgConnection};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A record's lifetime in intervals: one not renewed within it is stale.
const LIFETIME: u32 = 3;

pub(crate) struct Recorder {
    config: Arc<Config>,
    servers: Arc<postbox::Servers>,
    schemas: Vec<(SchemaName, Queries)>,
    health: Arc<Health>,
    signals: HashMap<String, SchemaSignals>,
    /// `postbox-relay:<pid>:<id>`.
    instance: String,
    host: String,
    started_at: chrono::DateTime<chrono::Utc>,
    conn: Option<PgConnection>,
    /// Events sent, as of the last round, and when it was.
    sent: (u64, Instant),
}

impl Recorder {
    pub(crate) fn new(
        config: Arc<Config>,
        servers: Arc<postbox::Servers>,
        health: Arc<Health>,
        signals: HashMap<String, SchemaSignals>,
        instance: &str,
    ) -> Self {
        let schemas = config
            .schemas
            .iter()
            .filter_map(|s| SchemaName::new(s).ok())
            .map(|s| {
                let q = Queries::new(&s);
                (s, q)
            })
            .collect();
        Recorder {
            config,
            servers,
            schemas,
            health,
            signals,
            // The record's key is the instance without the version.
            instance: instance.split('@').next().unwrap_or(instance).to_owned(),
            host: host_name(),
            started_at: chrono::Utc::now(),
            conn: None,
            sent: (0, Instant::now()),
        }
    }

    /// One round: record, read, decide, for every schema. A database error
    /// leaves every decision as it was (the workers cannot work either).
    pub(crate) async fn round(&mut self) {
        if self.conn.is_none() {
            let app = format!("{}:health", self.instance);
            match self
                .servers
                .connect(&app, self.config.session_timeout)
                .await
            {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot record the relay's health");
                    return;
                }
            }
        }
        let now = Instant::now();
        let sent = self.health.sent();
        let interval = now
            .saturating_duration_since(self.sent.1)
            .max(Duration::from_millis(1));
        let sent_last = sent.saturating_sub(self.sent.0);
        self.sent = (sent, now);
        for i in 0..self.schemas.len() {
            match tokio::time::timeout(
                self.config.session_timeout,
                self.record(i, now, sent_last, interval),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot record the relay's health; ownership stays as it is");
                    self.conn = None;
                    return;
                }
                Err(_) => {
                    tracing::warn!("no answer from PostgreSQL while recording the relay's health");
                    self.conn = None;
                    return;
                }
            }
        }
    }

    async fn record(
        &mut self,
        i: usize,
        now: Instant,
        sent_last: u64,
        interval: Duration,
    ) -> Result<(), sqlx::Error> {
        let (schema, q) = &self.schemas[i];
        let standing = self.health.standing(schema.as_str());
        let taking = *standing.taking.borrow();
        let down_for = self.health.down_for(now);
        let reports: Vec<_> = self
            .health
            .sinks
            .iter()
            .map(|s| s.health.report(now))
            .collect();
        let sinks: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| {
                json!({
                    "sink": r.name,
                    "state": if r.down_for.is_some() { "unavailable" } else { "publishing" },
                    "since": r.down_for.map(wall),
                    "error": r.error,
                    "last_publish_at": r.last_publish.map(wall),
                })
            })
            .collect();
        let last_publish = reports.iter().filter_map(|r| r.last_publish).min();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let lifetime = self.config.health_interval * LIFETIME;
        let conn = self.conn.as_mut().expect("connected");
        let (can_publish, owning, _): (i64, i64, i64) = sqlx::query_as(&q.relay_health_record)
            .bind(&self.instance)
            .bind(env!("CARGO_PKG_VERSION"))
            .bind(&self.host)
            .bind(self.started_at)
            .bind(ms(lifetime))
            .bind(taking)
            .bind(standing.owned.load(Relaxed) as i32)
            .bind(down_for.map(ms))
            .bind(last_publish.map(ms))
            .bind(self.health.confirmed(now).map(ms))
            .bind(i64::try_from(sent_last).unwrap_or(i64::MAX))
            .bind(ms(interval) as i32)
            .bind(serde_json::Value::Array(sinks))
            .fetch_one(&mut *conn)
            .await?;
        let peers = Peers {
            can_publish,
            owning,
        };
        let now_taking = decide(taking, down_for, self.config.unavailable_after, peers);
        metrics::gauge!("postbox_relay_taking_partitions", "schema" => schema.to_string())
            .set(if now_taking { 1.0 } else { 0.0 });
        if now_taking != taking {
            self.announce(schema, now_taking, down_for, peers, &reports);
            standing.taking.send_replace(now_taking);
            if let Some(s) = self.signals.get(schema.as_str()) {
                bump(&s.rebalance);
            }
        }
        Ok(())
    }

    fn announce(
        &self,
        schema: &SchemaName,
        taking: bool,
        down_for: Option<Duration>,
        peers: Peers,
        reports: &[super::SinkReport],
    ) {
        let down: Vec<String> = reports
            .iter()
            .filter_map(|r| Some(format!("{} ({})", r.name, r.error.as_deref()?)))
            .collect();
        let down = down.join(", ");
        match (taking, down_for) {
            (false, Some(d)) => tracing::warn!(
                %schema,
                "standing by: {down} unavailable for {} and {} other relay(s) can publish; this relay's partitions of {schema} go to them, and it takes its share back when its broker answers",
                postbox::display_duration(d),
                peers.can_publish
            ),
            (true, Some(d)) => tracing::warn!(
                %schema,
                "taking partitions of {schema} although {down} is unavailable (for {}): no other relay serves them",
                postbox::display_duration(d)
            ),
            (true, None) => {
                tracing::info!(%schema, "every sink publishes: taking a share of the partitions of {schema}")
            }
            (false, None) => {}
        }
    }

    /// Stopping cleanly: take the records away, so nobody reads this relay
    /// as stale.
    async fn forget(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        for (_, q) in &self.schemas {
            let delete = sqlx::query(&q.relay_health_delete)
                .bind(&self.instance)
                .execute(&mut *conn);
            if tokio::time::timeout(Duration::from_secs(2), delete)
                .await
                .is_err()
            {
                break;
            }
        }
        if let Some(c) = self.conn.take() {
            let _ = c.close().await;
        }
    }
}

/// Record every `health_interval` until `shutdown`, then take the records away.
pub(crate) async fn run(mut recorder: Recorder, shutdown: CancellationToken) {
    let every = recorder.config.health_interval;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        recorder.round().await;
    }
    recorder.forget().await;
}

/// The host's name (a pod's name in Kubernetes), for operators.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
