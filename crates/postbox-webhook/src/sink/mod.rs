//! The relay's webhook sink: one POST per event, signed by the Standard
//! Webhooks rules, `webhook-id` = the event id. The answer decides: 2xx
//! delivered; 408, 429 and 5xx, timeouts and connection failures transient
//! (rows wait, no attempt counted; a 429's `Retry-After` is honoured by not
//! calling that destination again before it); any other status is a
//! rejection with the status and the first bytes of the answer.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave before the next, so a key's next event is POSTed only
//! after the previous one got a 2xx. A wave's requests run at once, at most
//! `concurrency` per destination.

use crate::config::{BodyFormat, Redirects, WebhookConfig};
use crate::signature::{self, SigningKey};
use crate::{
    HEADER_EVENT, HEADER_ID, HEADER_KEY, HEADER_SIGNATURE, HEADER_TIMESTAMP, HEADER_TOPIC,
};
use postbox_relay::cloudevents::{Binding, CloudEvents};
use postbox_relay::{Encoded, OutboxEvent, Sink, SinkError};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Semaphore;

/// How much of a refusing receiver's answer goes into `last_error`.
const ERROR_BODY_BYTES: usize = 256;
/// The longest `Retry-After` taken at its word.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(3600);

/// One event as a request.
#[derive(Debug)]
pub struct Outgoing {
    url: reqwest::Url,
    id: String,
    body: Vec<u8>,
    headers: HeaderMap,
}

/// POSTs outbox events to HTTP receivers.
pub struct WebhookSink {
    config: WebhookConfig,
    client: reqwest::Client,
    keys: Vec<SigningKey>,
    /// In-flight limit per destination.
    limits: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Destinations that asked to be left alone until then (429 Retry-After).
    paused: Mutex<HashMap<String, Instant>>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl WebhookSink {
    /// The sink, with its HTTP client (rustls; the configured CA added).
    pub fn new(config: WebhookConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        let err = |field, reason: String| postbox_relay::ConfigError { field, reason };
        let keys = config
            .secrets
            .iter()
            .map(|s| SigningKey::from_secret(s.expose()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err("webhook.secrets", e.to_string()))?;
        let redirect = match config.redirects {
            Redirects::None => reqwest::redirect::Policy::none(),
            Redirects::Any => reqwest::redirect::Policy::limited(5),
            Redirects::SameHost => reqwest::redirect::Policy::custom(|attempt| {
                let first = attempt
                    .previous()
                    .first()
                    .and_then(|u| u.host_str().map(str::to_owned));
                if attempt.previous().len() > 5 {
                    attempt.error("more than 5 redirects")
                } else if first.as_deref() == attempt.url().host_str() {
                    attempt.follow()
                } else {
                    attempt.error("redirected to another host")
                }
            }),
        };
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(redirect)
            .timeout(config.timeout)
            .user_agent(concat!("postbox/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                err(
                    "webhook.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                err(
                    "webhook.ca_file",
                    format!("{} holds no PEM certificate: {e}", path.display()),
                )
            })?;
            if certs.is_empty() {
                return Err(err(
                    "webhook.ca_file",
                    format!("{} holds no PEM certificate", path.display()),
                ));
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .build()
            .map_err(|e| err("webhook", format!("cannot build the HTTP client: {e}")))?;
        Ok(WebhookSink {
            config,
            client,
            keys,
            limits: Mutex::default(),
            paused: Mutex::default(),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    fn limit(&self, destination: &str) -> Arc<Semaphore> {
        self.limits
            .lock()
            .expect("limits")
            .entry(destination.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.concurrency)))
            .clone()
    }

    async fn post(&self, m: &Outgoing) -> Result<(), SinkError> {
        let destination = m.url.origin().ascii_serialization();
        // What a log may show of the URL: no credentials, no query.
        let shown = format!("{destination}{}", m.url.path());
        if let Some(until) = self.paused.lock().expect("paused").get(&destination) {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return Err(SinkError::transient(format!(
                    "{destination} asked to wait (429 Retry-After): {}s left",
                    left.as_secs()
                )));
            }
        }
        let limit = self.limit(&destination);
        let _permit = limit.acquire().await.expect("never closed");
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let signature = signature::header(&self.keys, &m.id, timestamp, &m.body);
        let sent = self
            .client
            .post(m.url.clone())
            .headers(m.headers.clone())
            .header(HEADER_TIMESTAMP, timestamp.to_string())
            .header(HEADER_SIGNATURE, signature)
            .body(m.body.clone())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return Err(unanswered(e, &shown)),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        if status.as_u16() == 429 {
            if let Some(wait) = retry_after(response.headers()) {
                self.paused.lock().expect("paused").insert(
                    destination.clone(),
                    Instant::now() + wait.min(RETRY_AFTER_MAX),
                );
            }
        }
        let answer = first_bytes(response).await;
        Err(refused(
            status,
            format!("POST {shown}: HTTP {status}: {answer}"),
        ))
    }
}

/// A POST to `shown` that got no answer: a redirect the policy does not
/// follow is a refusal naming the fix; the rest (refused, reset, timed out,
/// DNS, TLS) is transient.
fn unanswered(e: reqwest::Error, shown: &str) -> SinkError {
    if e.is_redirect() {
        SinkError::rejected(format!(
            "{shown} redirected elsewhere ({}); point webhook.url at the final address, or set webhook.redirects = \"any\"",
            e.without_url()
        ))
    } else {
        SinkError::transient(format!("POST {shown}: {}", chain(&e.without_url())))
    }
}

/// A receiver's answer other than 2xx (`message` says which): 408, 429 and
/// 5xx are transient; any other status is a refusal of the event, a
/// redirect's naming the setting that would follow it.
fn refused(status: reqwest::StatusCode, message: String) -> SinkError {
    if status.is_server_error() || matches!(status.as_u16(), 408 | 429) {
        SinkError::transient(message)
    } else if status.is_redirection() {
        SinkError::rejected(format!(
            "{message}; redirects are not followed (webhook.redirects)"
        ))
    } else {
        SinkError::rejected(message)
    }
}

/// An error with its causes (reqwest's own message is terse: "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    (when.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .ok()
}

async fn first_bytes(response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    let mut response = response;
    while bytes.len() < ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(ERROR_BODY_BYTES);
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    if text.is_empty() {
        "(empty answer)".into()
    } else {
        format!("{text:?}")
    }
}

fn header(headers: &mut HeaderMap, name: &str, value: &str) -> Result<(), SinkError> {
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|e| SinkError::rejected(format!("header name {name:?}: {e}")))?;
    let v = HeaderValue::from_str(value)
        .map_err(|e| SinkError::rejected(format!("header {name:?}: {e}")))?;
    headers.insert(n, v);
    Ok(())
}

#[async_trait::async_trait]
impl Sink for WebhookSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "webhook"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        let url = self.config.url_for(&e.topic, e.key.as_deref())?;
        let id = e.event_id.to_string();
        let mut headers = HeaderMap::new();
        header(&mut headers, HEADER_ID, &id)?;
        header(&mut headers, HEADER_TOPIC, &e.topic)?;
        let body = if let Some(ce) = &self.cloudevents {
            // The HTTP binding.
            let wire = ce.wire(e, Binding::Http)?;
            for (name, text) in &wire.headers {
                header(&mut headers, name, text)?;
            }
            wire.body
        } else {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            header(&mut headers, HEADER_EVENT, &e.event)?;
            if let Some(key) = &e.key {
                header(&mut headers, HEADER_KEY, key)?;
            }
            // The one rule every sink forwards headers by (bad trace context dropped).
            for (name, text) in postbox_relay::headers::forwarded(e) {
                header(&mut headers, name, &text)?;
            }
            match self.config.body {
                BodyFormat::Payload => serde_json::to_vec(&e.payload),
                BodyFormat::Envelope => serde_json::to_vec(&e.envelope()),
            }
            .expect("JSON values serialise")
        };
        Ok(Outgoing {
            url,
            id,
            body,
            headers,
        })
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        futures::future::join_all(wave.iter().map(|m| self.post(&m.message))).await
    }

    async fn reset(&self) {}

    /// A TCP connection to each receiver whose address is not a template:
    /// enough to name a refused connection or a host that does not resolve,
    /// without a request a receiver would have to answer.
    async fn check(&self) -> Result<(), SinkError> {
        for (host, port) in fixed_hosts(&self.config) {
            tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| SinkError::transient(format!("connecting to {host}:{port}: {e}")))?;
        }
        Ok(())
    }
}

/// Host and port of each configured URL whose host is not a template.
fn fixed_hosts(config: &WebhookConfig) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    let templates = std::iter::once(&config.url)
        .filter(|t| !t.is_empty())
        .chain(config.topics.values());
    for template in templates {
        let authority = template.split_once("://").map_or("", |(_, rest)| {
            rest.split(['/', '?', '#']).next().unwrap_or("")
        });
        if authority.is_empty() || authority.contains('{') {
            continue;
        }
        let Some(url) = crate::config::sample_url(template) else {
            continue;
        };
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            out.push((
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port,
            ));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests;
