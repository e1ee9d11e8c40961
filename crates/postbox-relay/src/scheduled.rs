//! Scheduled events (migration 0012): each waits in `outbox_scheduled` until
//! it is due, then this task moves it into the outbox, where the workers
//! deliver it like any new event. One mover per schema at a time across all
//! relays (a transaction-scoped advisory lock), so events due together enter
//! the outbox in one order. Between passes it sleeps until the next event is
//! due, or `poll_interval` at most: a producer may schedule an earlier one
//! meanwhile and wakes no one.

use crate::Config;
use postbox::{sql::Queries, SchemaName};
use sqlx::{Connection, PgConnection};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Events moved per transaction.
const BATCH: i64 = 1000;

/// Past the next due time, so the server's clock has passed it.
const SLACK: Duration = Duration::from_millis(5);

pub(crate) async fn run(
    config: Arc<Config>,
    servers: Arc<postbox::Servers>,
    schemas: Vec<SchemaName>,
    shutdown: CancellationToken,
) {
    let queries: Vec<(SchemaName, Queries)> = schemas
        .iter()
        .map(|s| (s.clone(), Queries::new(s)))
        .collect();
    let mut conn: Option<PgConnection> = None;
    loop {
        let mut wait = config.poll_interval;
        if conn.is_none() {
            conn = servers
                .connect("postbox-relay:scheduled", config.session_timeout)
                .await
                .ok();
        }
        if let Some(c) = conn.as_mut() {
            match move_due(c, &queries).await {
                Ok(Some(next)) => wait = wait.min(next + SLACK),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "moving due scheduled events into the outbox failed; reconnecting");
                    conn = None;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Move what is due in every schema this relay serves (where no other relay
/// is moving now); how long until the next one is due, if one is scheduled.
async fn move_due(
    c: &mut PgConnection,
    queries: &[(SchemaName, Queries)],
) -> Result<Option<Duration>, sqlx::Error> {
    let mut next: Option<Duration> = None;
    let mut until_next = |s: f64| {
        let d = Duration::from_secs_f64(s.max(0.0));
        next = Some(next.map_or(d, |n: Duration| n.min(d)));
    };
    for (schema, q) in queries {
        // One statement while nothing is due, which is most passes.
        let due_in: Option<f64> = sqlx::query_scalar(&q.outbox_scheduled_next)
            .fetch_one(&mut *c)
            .await?;
        match due_in {
            None => continue,
            Some(s) if s > 0.0 => {
                until_next(s);
                continue;
            }
            Some(_) => {}
        }
        loop {
            let mut tx = c.begin().await?;
            let mover: bool = sqlx::query_scalar(&q.outbox_scheduled_lock)
                .bind(schema.as_str())
                .fetch_one(&mut *tx)
                .await?;
            if !mover {
                tx.commit().await?;
                break;
            }
            let moved: i64 = sqlx::query_scalar(&q.outbox_scheduled_move)
                .bind(BATCH)
                .fetch_one(&mut *tx)
                .await?;
            let due_in: Option<f64> = sqlx::query_scalar(&q.outbox_scheduled_next)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            if moved > 0 {
                tracing::debug!(schema = %schema, moved, "scheduled events due: moved into the outbox");
            }
            if moved < BATCH {
                if let Some(s) = due_in {
                    until_next(s);
                }
                break;
            }
        }
    }
    Ok(next)
}
