//! What the inbox loop says about failures. Through `tracing` when the
//! application installed a subscriber, else on stderr: a handler failure must
//! never pass unseen because a service did not set up logging.

use crate::Message;
use std::error::Error as StdError;
use std::time::Duration;

/// `e` and its sources, `: `-separated.
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

fn subscribed() -> bool {
    tracing::dispatcher::has_been_set()
}

pub(crate) fn handler_failed(
    consumer: &str,
    msg: &Message,
    failure: u32,
    attempts: u32,
    error: &str,
    retry_in: Duration,
) {
    if subscribed() {
        tracing::warn!(consumer, message_id = %msg.id, source = %msg.source, attempt = failure, attempts, retry_in = %crate::display_duration(retry_in), error, "handler failed; the message will be retried");
    } else {
        eprintln!("postbox: consumer {consumer}: handler failed on message {} ({}), attempt {failure} of {attempts}: {error}; retrying in {}", msg.id, msg.source, crate::display_duration(retry_in));
    }
}

pub(crate) fn dead_lettered(consumer: &str, msg: &Message, attempts: u32, error: &str) {
    if subscribed() {
        tracing::error!(consumer, message_id = %msg.id, source = %msg.source, attempts, error, "handler failed; the message is a dead letter now (`postbox inbox-dlq list` shows it, `replay` runs it again)");
    } else {
        eprintln!("postbox: consumer {consumer}: handler failed {attempts} time(s) on message {} ({}): {error}; kept as a dead letter (`postbox inbox-dlq list` shows it, `replay` runs it again)", msg.id, msg.source);
    }
}

pub(crate) fn replayed(consumer: &str, msg: &Message, outcome: &str) {
    if subscribed() {
        tracing::info!(consumer, message_id = %msg.id, outcome, "dead letter replayed");
    } else {
        eprintln!(
            "postbox: consumer {consumer}: dead letter {} replayed: {outcome}",
            msg.id
        );
    }
}

pub(crate) fn replay_failed(consumer: &str, msg: &Message, error: &str) {
    if subscribed() {
        tracing::error!(consumer, message_id = %msg.id, error, "replayed dead letter failed again; it stays a dead letter");
    } else {
        eprintln!("postbox: consumer {consumer}: replayed dead letter {} failed again: {error}; it stays a dead letter", msg.id);
    }
}

pub(crate) fn database_unavailable(consumer: &str, what: &str, error: &str, retry_in: Duration) {
    if subscribed() {
        tracing::warn!(consumer, what, error, retry_in = %crate::display_duration(retry_in), "database unavailable; retrying");
    } else {
        eprintln!("postbox: consumer {consumer}: database unavailable ({what}): {error}; retrying in {retry_in:?}");
    }
}
