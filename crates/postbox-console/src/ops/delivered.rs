//! Events delivered per minute over the last hour, from the counts relays
//! add to `outbox_delivered` (migration 0011) every `stats_interval`.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use postbox::sql::{statement_as, Queries};
use serde::Serialize;
use sqlx::{Connection, PgConnection};

/// One minute's deliveries.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Minute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Events the relays delivered in it (all topics).
    pub delivered: i64,
}

/// The last 60 minutes, oldest first, the current one last; minutes without
/// deliveries are 0.
pub async fn last_hour(
    conn: &mut PgConnection,
    q: &Queries,
) -> Result<Vec<Minute>, crate::OpsError> {
    let mut tx = conn.begin().await?;
    let rows: Vec<(DateTime<Utc>, i64)> = statement_as(&q.outbox_delivered_last_hour)
        .fetch_all(&mut *tx)
        .await?;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(fill(now, &rows))
}

/// Sixty minutes ending with `now`'s, each with its count from `rows` or 0.
fn fill(now: DateTime<Utc>, rows: &[(DateTime<Utc>, i64)]) -> Vec<Minute> {
    let current = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    (0..60)
        .rev()
        .map(|ago| {
            let minute = current - TimeDelta::minutes(ago);
            let delivered = rows.iter().find(|(m, _)| *m == minute).map_or(0, |r| r.1);
            Minute { minute, delivered }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixty_minutes_with_the_gaps_as_zero() {
        let now: DateTime<Utc> = "2026-12-06T10:30:42Z".parse().unwrap();
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let rows = [
            (at("2026-12-06T09:31:00Z"), 5),
            (at("2026-12-06T10:30:00Z"), 7),
        ];
        let m = fill(now, &rows);
        assert_eq!(m.len(), 60);
        assert_eq!(
            m[0],
            Minute {
                minute: at("2026-12-06T09:31:00Z"),
                delivered: 5
            }
        );
        assert_eq!(
            m[59],
            Minute {
                minute: at("2026-12-06T10:30:00Z"),
                delivered: 7
            }
        );
        assert_eq!(m.iter().map(|m| m.delivered).sum::<i64>(), 12);
    }
}
