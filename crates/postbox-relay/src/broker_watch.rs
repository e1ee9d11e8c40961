//! Says which broker cannot be reached, and why, as soon as it happens: the
//! relay checks its sink at start-up and then every few seconds, and logs
//! each change between reachable and unreachable once, with the broker's
//! address (password hidden) and the cause the client gave (connection
//! refused, a name that does not resolve, TLS, authentication). Without it an
//! idle relay said nothing about a broker it could not reach, and a busy one
//! only that batches were not acknowledged in time.
//!
//! The check is the sink's own (`Destination::check`: a PING, a metadata
//! request, a channel, a TCP connect). Workers keep retrying by their
//! backoff whatever it says; what it finds goes to the sink's health
//! (`health`), where a relay that cannot reach its broker decides to give
//! its partitions to relays that can. Each sink of a relay with routes is
//! checked on its own. The gauge `postbox_broker_reachable{sink}` is 1 or 0
//! after each check.

use crate::health::SinkHealth;
use crate::{Destination, SinkError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the last check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    Up,
    Down(String),
}

impl Reach {
    /// What a check that had `timeout` to answer found.
    fn of(
        answer: Result<Result<(), SinkError>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Reach {
        match answer {
            Ok(Ok(())) => Reach::Up,
            Ok(Err(e)) => Reach::Down(cause(&e)),
            Err(_) => Reach::Down(format!(
                "no answer within {}",
                humantime_serde::re::humantime::format_duration(timeout)
            )),
        }
    }

    /// As the sink's health takes it.
    fn as_result(&self) -> Result<(), String> {
        match self {
            Reach::Up => Ok(()),
            Reach::Down(cause) => Err(cause.clone()),
        }
    }
}

/// The log line for a change from `before` (None at start-up) to `now`, if
/// any: start-up and every transition, never a repeat.
pub(crate) fn transition(
    before: Option<&Reach>,
    now: &Reach,
    sink: &str,
    target: &str,
    down_for: Option<Duration>,
) -> Option<(tracing::Level, String)> {
    use tracing::Level;
    match (before, now) {
        (Some(Reach::Up), Reach::Up) | (Some(Reach::Down(_)), Reach::Down(_)) => None,
        (None, Reach::Up) => Some((Level::INFO, format!("{sink} reachable: {target}"))),
        (Some(Reach::Down(_)), Reach::Up) => Some((
            Level::INFO,
            format!(
                "{sink} reachable again after {}: {target}",
                humantime_serde::re::humantime::format_duration(Duration::from_secs(
                    down_for.unwrap_or_default().as_secs()
                ))
            ),
        )),
        (_, Reach::Down(cause)) => Some((
            Level::WARN,
            format!(
                "{sink} unavailable: {cause} ({target}); events stay in the outbox until it answers. Check the address, that the broker runs, and its credentials"
            ),
        )),
    }
}

/// How often a broker is checked: `up` while it answers, `down` while it
/// does not; at once when a publish fails or is slow.
pub(crate) struct Every {
    pub up: Duration,
    pub down: Duration,
    /// A check unanswered this long fails.
    pub timeout: Duration,
    /// A check unanswered this long counts as a failure for the sink's
    /// health already (`unavailable_after` decides soon), while the check
    /// goes on to `timeout` for the cause the log names.
    pub verdict: Duration,
}

/// Check one sink until `shutdown`, logging each change (see the module) and
/// telling its health what each check found.
pub(crate) async fn watch(
    tracked: Arc<SinkHealth>,
    sink: Arc<dyn Destination>,
    target: Arc<str>,
    every: Every,
    shutdown: CancellationToken,
) {
    let name = sink.name();
    let mut last: Option<Reach> = None;
    let mut down_since: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // The check is dropped at the end of this block, before anything
        // below: a timed-out check may hold a lock of the sink (its
        // connection, mid-connect) that `reset` takes.
        let answer = {
            let check = tokio::time::timeout(every.timeout, sink.check());
            tokio::pin!(check);
            tokio::select! {
                r = &mut check => r,
                () = tokio::time::sleep(every.verdict) => {
                    tracked.checked(started, Err(format!(
                        "no answer within {}",
                        humantime_serde::re::humantime::format_duration(every.verdict)
                    )));
                    tokio::select! {
                        r = &mut check => r,
                        () = shutdown.cancelled() => return,
                    }
                }
                () = shutdown.cancelled() => return,
            }
        };
        let now = Reach::of(answer, every.timeout);
        tracked.checked(started, now.as_result());
        metrics::gauge!("postbox_broker_reachable", "sink" => name).set(if now == Reach::Up {
            1.0
        } else {
            0.0
        });
        let down_for = down_since.map(|t| t.elapsed());
        if let Some((level, line)) = transition(last.as_ref(), &now, name, &target, down_for) {
            if level == tracing::Level::WARN {
                tracing::warn!(sink = name, "{line}");
            } else {
                tracing::info!(sink = name, "{line}");
            }
        }
        match now {
            Reach::Up => down_since = None,
            Reach::Down(_) => {
                down_since.get_or_insert_with(Instant::now);
                // A connection the sink keeps may be dead for good: the next
                // check (and publish) connects afresh, as after a failed publish.
                sink.reset().await;
            }
        }
        let pause = if now == Reach::Up {
            every.up
        } else {
            every.down
        };
        last = Some(now);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = tracked.suspect.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Check every sink once, so the first health round knows whether this
/// relay can publish.
pub(crate) async fn first_checks(health: &crate::health::Health, config: &crate::Config) {
    let timeout = check_pace(config).verdict;
    let checks = health.sinks.iter().map(|t| async move {
        let started = std::time::Instant::now();
        let result = Reach::of(tokio::time::timeout(timeout, t.sink.check()).await, timeout);
        t.health.checked(started, result.as_result());
    });
    futures::future::join_all(checks).await;
}

/// How often the relay checks each broker. While it answers, every
/// `unavailable_after` (15 s when that is off): a relay that sits idle still
/// shows the others, within that, that it could take their partitions.
/// While it does not, every `health_interval`, so its return is seen at once.
/// A check unanswered within `unavailable_after` less one `health_interval`
/// (1 to 5 s) counts as a failure for the sink's health: a publish
/// unanswered for a `health_interval` asks for a check, so a broker that
/// swallows requests is found unavailable within `unavailable_after`, as one
/// that refuses them. The check itself goes on to 5 s (less than
/// `publish_timeout`) for the cause the log names: some clients retry a
/// refused connection for seconds before they say so.
pub(crate) fn check_pace(config: &crate::Config) -> Every {
    use std::time::Duration;
    let after = config.unavailable_after;
    let timeout = Duration::from_secs(5).min(config.publish_timeout);
    let (up, verdict) = if after.is_zero() {
        (Duration::from_secs(15), timeout)
    } else {
        let verdict = after.saturating_sub(config.health_interval);
        (
            after,
            verdict.clamp(Duration::from_secs(1), Duration::from_secs(5)),
        )
    };
    Every {
        up,
        down: config.health_interval,
        timeout,
        verdict: verdict.min(timeout),
    }
}

/// The cause without the class prefix `SinkError`'s display adds (the log
/// line says "unavailable" already), with its sources.
fn cause(e: &SinkError) -> String {
    let mut text = match e {
        SinkError::Transient { message, .. } | SinkError::Rejected { message, .. } => {
            message.clone()
        }
        other => other.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn start_up_and_each_change_are_logged_once() {
        let down = |c: &str| Reach::Down(c.to_owned());
        let t = |b: Option<&Reach>, n: &Reach| {
            transition(
                b,
                n,
                "redis_streams",
                "redis://h:1",
                Some(Duration::from_secs(7)),
            )
        };
        let (level, line) = t(None, &down("connection refused")).unwrap();
        assert_eq!(level, Level::WARN);
        assert!(
            line.starts_with("redis_streams unavailable: connection refused (redis://h:1)"),
            "{line}"
        );
        assert_eq!(t(None, &Reach::Up).unwrap().0, Level::INFO);
        assert_eq!(t(Some(&Reach::Up), &Reach::Up), None);
        // Another cause while down is the same outage.
        assert_eq!(t(Some(&down("a")), &down("b")), None);
        let (level, line) = t(Some(&down("a")), &Reach::Up).unwrap();
        assert_eq!(level, Level::INFO);
        assert!(line.contains("reachable again after 7s"), "{line}");
        assert_eq!(t(Some(&Reach::Up), &down("x")).unwrap().0, Level::WARN);
    }
}
