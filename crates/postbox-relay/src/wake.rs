//! LISTEN for the outbox trigger's NOTIFY and wake the workers of that schema;
//! on the same channel, relay workers tell each other to rebalance.
//!
//! A wake-up is a counter bump on a `watch` channel, so a worker busy with a
//! batch when the NOTIFY arrives still sees it when it next waits: no lost
//! wake-ups. When the listener connection drops, notifications in the gap are
//! lost, so once LISTEN is back in force every worker is woken to rescan and
//! to rebalance.

use crate::Backoff;
use sqlx::postgres::PgListener;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub(crate) type WakeTx = watch::Sender<u64>;
pub(crate) type WakeRx = watch::Receiver<u64>;

pub(crate) fn bump(tx: &WakeTx) {
    tx.send_modify(|n| *n = n.wrapping_add(1));
}

/// The NOTIFY payload that asks a schema's relay workers to rebalance is this
/// prefix and the schema's name. A schema name has no `:`, so it cannot be
/// mistaken for the trigger's payload (the bare schema name); relays of an
/// older version ignore it.
const REBALANCE_PREFIX: &str = "rebalance:";

/// The payload of `relay_rebalance_signal.sql` for `schema`.
pub(crate) fn rebalance_payload(schema: &str) -> String {
    format!("{REBALANCE_PREFIX}{schema}")
}

/// What the listener raises for one schema.
#[derive(Clone)]
pub(crate) struct SchemaSignals {
    /// New rows may be waiting: claim.
    pub wake: WakeTx,
    /// A worker joined, released partitions or left: count members again.
    pub rebalance: WakeTx,
}

impl SchemaSignals {
    pub(crate) fn new() -> Self {
        SchemaSignals {
            wake: watch::channel(0).0,
            rebalance: watch::channel(0).0,
        }
    }
}

/// Listen for wake-ups of every schema in `wakers` until `shutdown`. The
/// session is asked a question every `silent / 2` and given up when it does
/// not answer within `silent` (`session_timeout`): a LISTEN session only
/// reads, so one whose server vanished without a close (host gone, network
/// cut, a failover to another host) would otherwise wait for good while the
/// workers fall back to their poll interval. A lost session is so noticed
/// within 1.5 × `silent`.
pub(crate) async fn listen(
    servers: Arc<postbox::Servers>,
    app_name: String,
    wakers: HashMap<String, SchemaSignals>,
    silent: Duration,
    shutdown: CancellationToken,
) {
    let backoff = Backoff {
        min: Duration::from_millis(100),
        max: Duration::from_secs(5),
    };
    let mut failures = 0u32;
    'connect: while !shutdown.is_cancelled() {
        let listener = async {
            let opts = servers.options();
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(opts.application_name(&app_name));
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(postbox::NOTIFY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        };
        let mut listener = tokio::select! {
            _ = shutdown.cancelled() => return,
            l = listener => match l {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "relay listener cannot connect; polling meanwhile");
                    let delay = backoff.delay(failures);
                    failures += 1;
                    tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                    continue 'connect;
                }
            }
        };
        failures = 0;
        tracing::debug!("relay listening on {}", postbox::NOTIFY_CHANNEL);
        // Rows committed, or members changed, before LISTEN took effect must
        // not wait for the poll or the rebalance tick.
        for s in wakers.values() {
            bump(&s.wake);
            bump(&s.rebalance);
        }
        let every = silent / 2;
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                // try_recv keeps a message it has half read when dropped.
                n = listener.try_recv() => n,
                _ = beat.tick() => {
                    let asked = sqlx::query("SELECT 1").execute(&mut listener);
                    match tokio::time::timeout(silent, asked).await {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "relay listener's session failed; reconnecting");
                        }
                        Err(_) => {
                            tracing::warn!(
                                session_timeout = %postbox::display_duration(silent),
                                "relay listener's session did not answer within session_timeout; reconnecting"
                            );
                        }
                    }
                    continue 'connect;
                }
            };
            match next {
                Ok(Some(n)) => {
                    let payload = n.payload();
                    if let Some(s) = payload.strip_prefix(REBALANCE_PREFIX) {
                        if let Some(s) = wakers.get(s) {
                            bump(&s.rebalance);
                        }
                    } else if let Some(s) = wakers.get(payload) {
                        bump(&s.wake);
                    }
                }
                Ok(None) => {
                    // Reconnect here rather than inside sqlx, so the rescan
                    // wake-up happens only once LISTEN is in force again.
                    tracing::warn!("relay listener connection lost; reconnecting");
                    continue 'connect;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "relay listener failed; reconnecting");
                    continue 'connect;
                }
            }
        }
    }
}
