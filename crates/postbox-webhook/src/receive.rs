//! The receiving side: check a request's Standard Webhooks signature and
//! timestamp, turn it into a [`Message`], and run the service's handler
//! through the inbox so a re-sent event (the relay killed before its
//! `COMMIT`, a timeout after the receiver committed) has its effect once.

use crate::signature::SigningKey;
use crate::{
    HEADER_EVENT, HEADER_ID, HEADER_KEY, HEADER_SIGNATURE, HEADER_TIMESTAMP, HEADER_TOPIC,
};
use http::{HeaderMap, StatusCode};
use postbox::{ConsumeError, Handler, InboxConsumer, Message, Processed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// Why a request is not a genuine, fresh webhook.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A Standard Webhooks header is missing or not text.
    #[error("missing or unreadable header {0}")]
    Missing(&'static str),
    /// `webhook-timestamp` is not a number of seconds.
    #[error("webhook-timestamp is not Unix seconds")]
    BadTimestamp,
    /// Signed too long ago or too far ahead (a replay, or a skewed clock).
    #[error("webhook-timestamp is {skew:?} away from now, beyond the {tolerance:?} tolerated")]
    Stale {
        /// How far from now.
        skew: Duration,
        /// The tolerance.
        tolerance: Duration,
    },
    /// No signature matches any of the keys.
    #[error("no webhook-signature matches a configured key")]
    NoMatch,
    /// A configured secret is not a Standard Webhooks key.
    #[error(transparent)]
    Key(#[from] crate::signature::KeyError),
}

/// Checks requests against the sender's keys (several while rotating).
#[derive(Debug, Clone)]
pub struct Verifier {
    keys: Vec<SigningKey>,
    tolerance: Duration,
}

impl Verifier {
    /// From `whsec_…` secrets; requests signed more than 5 minutes from now
    /// are refused.
    pub fn new<S: AsRef<str>>(secrets: &[S]) -> Result<Self, VerifyError> {
        let keys = secrets
            .iter()
            .map(|s| SigningKey::from_secret(s.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Verifier {
            keys,
            tolerance: Duration::from_secs(300),
        })
    }

    /// How far a request's timestamp may be from now.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Check the signature and the timestamp of a request.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let id = text(headers, HEADER_ID)?;
        let timestamp: i64 = text(headers, HEADER_TIMESTAMP)?
            .parse()
            .map_err(|_| VerifyError::BadTimestamp)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let skew = Duration::from_secs(now.abs_diff(timestamp));
        if skew > self.tolerance {
            return Err(VerifyError::Stale {
                skew,
                tolerance: self.tolerance,
            });
        }
        let signatures = text(headers, HEADER_SIGNATURE)?;
        let matched = signatures
            .split_whitespace()
            .filter_map(|s| s.strip_prefix("v1,"))
            .any(|sig| {
                self.keys
                    .iter()
                    .any(|k| k.verifies(id, timestamp, body, sig))
            });
        if matched {
            Ok(())
        } else {
            Err(VerifyError::NoMatch)
        }
    }

    /// The request as the inbox sees it, once verified: id = `webhook-id`,
    /// topic, name and key from the `postbox-*` headers, payload = the body,
    /// headers = the request's own (trace context included), without the
    /// signature's. A CloudEvent (`ce-*` headers, or an
    /// `application/cloudevents+json` body) is read as one
    /// ([`postbox::cloudevents::read`]).
    pub fn message(&self, headers: &HeaderMap, body: &[u8]) -> Result<Message, VerifyError> {
        self.verify(headers, body)?;
        let id = text(headers, HEADER_ID)?;
        let optional = |name| text(headers, name).ok().map(str::to_owned);
        let mut msg = Message::new(id, optional(HEADER_TOPIC).unwrap_or_default());
        msg.event = optional(HEADER_EVENT);
        msg.key = optional(HEADER_KEY);
        msg.payload = body.to_vec();
        for (name, value) in headers {
            let name = name.as_str();
            if name.starts_with("webhook-") || SKIPPED.contains(&name) {
                continue;
            }
            if let Ok(v) = value.to_str() {
                msg.headers.push((name.to_owned(), v.to_owned()));
            }
        }
        msg.source = format!("webhook {id}");
        // A CloudEvent (HTTP binding, either mode) reads as one.
        let content_type = headers.get(http::header::CONTENT_TYPE);
        Ok(postbox::cloudevents::read(
            msg,
            content_type.and_then(|v| v.to_str().ok()),
        ))
    }
}

/// Transport headers that say nothing about the event.
const SKIPPED: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "user-agent",
    "accept",
    "accept-encoding",
    "connection",
];

fn text<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or(VerifyError::Missing(name))
}

/// What became of one received request.
#[derive(Debug)]
pub enum Received {
    /// The effect is committed, was already done, or the message was kept as
    /// a consumer dead letter.
    Done(Processed),
    /// Not genuine or not fresh: the sender dead-letters it (check the secrets).
    Refused(VerifyError),
    /// The database could not take it; the relay sends it again.
    Unavailable(ConsumeError),
}

impl Received {
    /// The status to answer with: 204, 401 or 503.
    pub fn status(&self) -> StatusCode {
        match self {
            Received::Done(_) => StatusCode::NO_CONTENT,
            Received::Refused(_) => StatusCode::UNAUTHORIZED,
            Received::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// How long [`receive`] lets one delivery of a failing message take, unless
/// `inbox` has a [`deadline`](postbox::InboxConsumer::deadline) of its own:
/// within the relay's webhook `timeout` (5 s by default), so a handler that
/// keeps failing ends as a consumer dead letter answered 204, instead of
/// being cut off by the relay, sent again and started over, forever.
pub const RECEIVE_DEADLINE: Duration = Duration::from_secs(4);

/// Verify a webhook and run `handler` on it through `inbox`. Answer with
/// [`Received::status`]. Retries of a failing handler end within
/// [`RECEIVE_DEADLINE`] (or `inbox`'s own deadline), then the message is
/// kept as a consumer dead letter.
pub async fn receive<H: Handler>(
    verifier: &Verifier,
    inbox: &InboxConsumer,
    handler: &H,
    headers: &HeaderMap,
    body: &[u8],
    shutdown: &CancellationToken,
) -> Received {
    let msg = match verifier.message(headers, body) {
        Ok(m) => m,
        Err(e) => return Received::Refused(e),
    };
    let deadline = inbox.delivery_deadline().unwrap_or(RECEIVE_DEADLINE);
    match inbox
        .process_within(&msg, handler, shutdown, Some(deadline))
        .await
    {
        Ok(done) => Received::Done(done),
        Err(e) => Received::Unavailable(e),
    }
}
