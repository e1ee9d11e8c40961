//! `--rate` at work: how many rows the next chunk makes unsent again, and
//! how long the replay pauses after it. Under `--rate auto` that takes the
//! database's word: whether the relay sent the chunk, and how long the live
//! events written meanwhile waited (the rules are in [`super::pace`]).

use super::pace::{self, Follow, Rate};
use crate::CliError;
use postbox::sql::{statement_as, statement_scalar, Queries};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The pace of one replay.
pub(super) struct Pacer {
    rate: Rate,
    chunk: i64,
    start: Instant,
    follow: Follow,
    /// `--rate auto` only.
    live: Option<LiveWatch>,
    said_slow: bool,
}

impl Pacer {
    pub(super) async fn new(
        conn: &mut PgConnection,
        q: &Queries,
        rate: Rate,
        chunk: i64,
    ) -> Result<Self, CliError> {
        let live = match rate {
            Rate::Auto => Some(LiveWatch::start(conn, q).await?),
            Rate::Fixed(_) => None,
        };
        Ok(Pacer {
            rate,
            chunk,
            start: Instant::now(),
            follow: Follow::new(chunk),
            live,
            said_slow: false,
        })
    }

    /// How many rows the next chunk makes unsent again.
    pub(super) fn size(&self) -> i64 {
        match self.rate {
            Rate::Auto => self.follow.size(),
            Rate::Fixed(0) => self.chunk,
            // A tenth of a second's worth at a time: the live events beside
            // it meet no burst of a whole second's.
            Rate::Fixed(rate) => self.chunk.min((rate as i64 / 10).max(1)),
        }
    }

    /// A chunk (`ids`) was made unsent, `replayed` so far: how long to pause
    /// before the next one.
    pub(super) async fn after_chunk(
        &mut self,
        conn: &mut PgConnection,
        q: &Queries,
        schema: &SchemaName,
        ids: &[i64],
        replayed: i64,
        shutdown: &CancellationToken,
    ) -> Result<Duration, CliError> {
        match self.rate {
            Rate::Auto => match until_sent(conn, q, ids, shutdown).await? {
                Some(took) => {
                    let waits = match self.live.as_mut() {
                        Some(watch) => watch.look(conn, q, ids).await?,
                        None => None,
                    };
                    Ok(self.follow.sent(took, waits))
                }
                None => {
                    if !self.said_slow && !shutdown.is_cancelled() {
                        self.said_slow = true;
                        eprintln!("the relay has not sent the replay's last {} event(s) within {}: is a relay running for schema {schema}, or is a key of them held (postbox status)? The replay goes on in smaller chunks", ids.len(), postbox::display_duration(pace::GIVE_UP));
                    }
                    Ok(self.follow.gave_up())
                }
            },
            Rate::Fixed(0) => Ok(Duration::ZERO),
            Rate::Fixed(rate) => {
                let due = self.start + Duration::from_secs_f64(replayed as f64 / rate as f64);
                Ok(due.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// The replay paused for `pause`: under `--rate auto`, what live events
    /// waited meanwhile is what they wait without the replay.
    pub(super) async fn after_pause(
        &mut self,
        conn: &mut PgConnection,
        q: &Queries,
        pause: Duration,
    ) -> Result<(), CliError> {
        if let Some(watch) = self.live.as_mut().filter(|_| !pause.is_zero()) {
            self.follow.paused(watch.look(conn, q, &[]).await?);
        }
        Ok(())
    }

    /// For the progress line.
    pub(super) fn following(&self) -> String {
        match self.rate {
            Rate::Auto => format!(", following the relay in chunks of {}", self.follow.size()),
            Rate::Fixed(_) => String::new(),
        }
    }
}

/// The live events `--rate auto` watches: those written since the replay
/// began, a look at a time (outbox_replay_live_waits.sql).
struct LiveWatch {
    through: i64,
}

impl LiveWatch {
    async fn start(conn: &mut PgConnection, q: &Queries) -> Result<Self, CliError> {
        let mut tx = conn.begin().await?;
        let through: i64 = statement_scalar(&q.outbox_replay_live_start)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(LiveWatch { through })
    }

    /// The longest wait of the live events written since the last look
    /// (`None`: none was), `in_flight` the chunk the relay may still be
    /// sending.
    async fn look(
        &mut self,
        conn: &mut PgConnection,
        q: &Queries,
        in_flight: &[i64],
    ) -> Result<Option<Duration>, CliError> {
        let mut tx = conn.begin().await?;
        let (longest_us, through): (Option<i64>, i64) = statement_as(&q.outbox_replay_live_waits)
            .bind(self.through)
            .bind(in_flight)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        self.through = through;
        Ok(longest_us.map(|us| Duration::from_micros(us.max(0) as u64)))
    }
}

/// Wait until the relay has sent `ids` (or they wait out a backoff): how
/// long that took, or `None` if it did not within [`pace::GIVE_UP`] (or
/// shutdown was asked).
async fn until_sent(
    conn: &mut PgConnection,
    q: &Queries,
    ids: &[i64],
    shutdown: &CancellationToken,
) -> Result<Option<Duration>, CliError> {
    let start = Instant::now();
    while !ids.is_empty() {
        // In a transaction, as every statement here: behind a transaction
        // pooler its parse and execute then reach one session.
        let mut tx = conn.begin().await?;
        let left: i64 = statement_scalar(&q.outbox_replay_unsent)
            .bind(ids)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        if left == 0 {
            break;
        }
        if start.elapsed() >= pace::GIVE_UP {
            return Ok(None);
        }
        tokio::select! {
            _ = tokio::time::sleep(pace::LOOK_EVERY) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
    Ok(Some(start.elapsed()))
}
