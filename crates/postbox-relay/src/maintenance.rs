//! Maintenance: retention of sent outbox rows, inbox rows and dead letters in
//! small batches (one runner per schema at a time, by advisory lock), the
//! pending/lag gauges, the relays' fleet gauge (`postbox_relays{schema,
//! state}`, from their health records), and the delivered counts the
//! console charts.

use crate::stats::Stats;
use crate::Config;
use postbox::{sql::Queries, SchemaName};
use sqlx::{Connection, PgConnection};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) async fn run(
    config: Arc<Config>,
    servers: Arc<postbox::Servers>,
    schemas: Vec<SchemaName>,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
) {
    let queries: Vec<(SchemaName, Queries)> = schemas
        .iter()
        .map(|s| (s.clone(), Queries::new(s)))
        .collect();
    let mut conn: Option<PgConnection> = None;
    let mut next_retention = Instant::now();
    loop {
        if conn.is_none() {
            conn = servers
                .connect("postbox-relay:maintenance", config.session_timeout)
                .await
                .ok();
        }
        if let Some(c) = conn.as_mut() {
            let mut result = gauges(c, &queries).await;
            if result.is_ok() {
                result = record_delivered(c, &queries, &stats).await;
            }
            if result.is_ok() && Instant::now() >= next_retention {
                next_retention = Instant::now() + config.maintenance_interval;
                for (schema, q) in &queries {
                    result = retention(c, &config, schema, q).await;
                    if result.is_err() {
                        break;
                    }
                }
            }
            if let Err(e) = result {
                tracing::warn!(error = %e, "maintenance failed; reconnecting");
                conn = None;
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(config.stats_interval) => {}
        }
    }
}

/// Add what the workers delivered since the last call to each schema's
/// `outbox_delivered`; on failure the counts wait for the next call.
async fn record_delivered(
    c: &mut PgConnection,
    queries: &[(SchemaName, Queries)],
    stats: &Stats,
) -> Result<(), sqlx::Error> {
    let mut all = stats.take_delivered();
    let mut failed: Option<sqlx::Error> = None;
    for (schema, q) in queries {
        let Some(topics) = all.remove(schema.as_str()) else {
            continue;
        };
        if failed.is_none() {
            let (names, counts): (Vec<&str>, Vec<i64>) = topics
                .iter()
                .map(|(t, n)| (t.as_str(), i64::try_from(*n).unwrap_or(i64::MAX)))
                .unzip();
            match sqlx::query(&q.outbox_delivered_record)
                .bind(&names)
                .bind(&counts)
                .execute(&mut *c)
                .await
            {
                Ok(_) => continue,
                Err(e) => failed = Some(e),
            }
        }
        put_back(stats, schema.as_str(), topics);
    }
    failed.map_or(Ok(()), Err)
}

fn put_back(stats: &Stats, schema: &str, topics: std::collections::HashMap<String, u64>) {
    let counts: Vec<(&str, u64)> = topics.iter().map(|(t, n)| (t.as_str(), *n)).collect();
    stats.delivered(schema, &counts);
}

async fn gauges(
    c: &mut PgConnection,
    queries: &[(SchemaName, Queries)],
) -> Result<(), sqlx::Error> {
    for (schema, q) in queries {
        let rows: Vec<(String, i64, f64)> = sqlx::query_as(&q.outbox_pending_stats)
            .fetch_all(&mut *c)
            .await?;
        let mut total = 0;
        for (topic, pending, age) in rows {
            total += pending;
            metrics::gauge!("postbox_pending_events", "schema" => schema.to_string(), "topic" => topic.clone()).set(pending as f64);
            metrics::gauge!("postbox_oldest_pending_seconds", "schema" => schema.to_string(), "topic" => topic).set(age);
        }
        metrics::gauge!("postbox_schema_pending_events", "schema" => schema.to_string())
            .set(total as f64);
        let states: Vec<(String, i64)> = sqlx::query_as(&q.relay_health_states)
            .fetch_all(&mut *c)
            .await?;
        for state in ["publishing", "cannot_publish", "standing_by", "stale"] {
            let n = states
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n);
            metrics::gauge!("postbox_relays", "schema" => schema.to_string(), "state" => state)
                .set(n as f64);
        }
        // Deprecated: a gauge named like a counter. Kept for one release.
        metrics::gauge!("postbox_pending_events_total", "schema" => schema.to_string())
            .set(total as f64);
    }
    Ok(())
}

/// Delete in batches of `retention_batch`, each in its own short transaction
/// holding the schema's maintenance lock; stop if another runner holds it.
async fn retention(
    c: &mut PgConnection,
    config: &Config,
    schema: &SchemaName,
    q: &Queries,
) -> Result<(), sqlx::Error> {
    // A day of per-minute counts, and the records of relays gone for an
    // hour: small, so one statement each, no lock.
    sqlx::query(&q.outbox_delivered_retention_delete)
        .execute(&mut *c)
        .await?;
    sqlx::query(&q.relay_health_retention_delete)
        .execute(&mut *c)
        .await?;
    for (table, sql, keep) in [
        (
            "outbox",
            &q.outbox_retention_delete,
            config.outbox_retention,
        ),
        ("inbox", &q.inbox_retention_delete, config.inbox_retention),
        (
            "outbox_dead_letter",
            &q.dead_letter_retention_delete,
            config.dead_letter_retention,
        ),
        (
            "inbox_dead_letter",
            &q.inbox_dead_letter_retention_delete,
            config.dead_letter_retention,
        ),
    ] {
        loop {
            let mut tx = c.begin().await?;
            let ours: bool = sqlx::query_scalar(&q.maintenance_try_lock)
                .bind(schema.as_str())
                .fetch_one(&mut *tx)
                .await?;
            if !ours {
                return Ok(());
            }
            let deleted = sqlx::query(sql)
                .bind(keep.as_secs_f64())
                .bind(config.retention_batch)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            if deleted > 0 {
                metrics::counter!("postbox_retention_deleted_total", "schema" => schema.to_string(), "table" => table).increment(deleted);
                tracing::debug!(%schema, table, deleted, "retention");
            }
            if (deleted as i64) < config.retention_batch {
                break;
            }
            // Let the relay's own work in between batches.
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}
