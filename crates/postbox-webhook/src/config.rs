//! Settings of the webhook sink (`[webhook]` in the relay's config file).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Webhook sink settings (`[webhook]` in the config file).
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// URL each event is POSTed to: `{topic}` and `{key}` are replaced by the
    /// event's (URL-encoded), e.g. `https://hooks.example.com/{topic}`.
    pub url: String,
    /// Per-topic URLs (`[webhook.topics] orders = "https://…/orders"`),
    /// templates like `url`.
    pub topics: BTreeMap<String, String>,
    /// Standard Webhooks signing secrets (`whsec_` + base64). Every request
    /// is signed with each: add the new one, let receivers learn it, then
    /// drop the old one. Required.
    pub secrets: Vec<postbox_relay::Secret>,
    /// The request body: `payload` (the event's payload as is) or `envelope`
    /// (`{"type", "timestamp", "key", "data": payload}`).
    pub body: BodyFormat,
    /// How long one request may take, connecting included; must be shorter
    /// than the relay's `publish_timeout` (half of its default).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "postbox_relay::HumanDuration")]
    pub timeout: Duration,
    /// Requests in flight at once per destination (scheme, host and port).
    pub concurrency: usize,
    /// PEM file of CA certificates to trust besides the public roots (an
    /// internal CA for `https://` receivers).
    pub ca_file: Option<std::path::PathBuf>,
    /// Redirects: `none`, `same_host` (followed only within the URL's own
    /// host) or `any`.
    pub redirects: Redirects,
    /// `postbox` (the `postbox-*` headers, `body` as the body) or
    /// `cloudevents` (CloudEvents 1.0 by its HTTP binding; `body` must then be
    /// left at `payload`).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce-*`
    /// headers, the payload as the body) or `structured` (the whole event as
    /// an `application/cloudevents+json` body).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

/// What a request's body is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BodyFormat {
    /// The event's payload, as is.
    #[default]
    Payload,
    /// `{"id", "type", "key", "timestamp", "data": payload}`: the envelope
    /// of the wire contract, the same on every sink that offers one.
    Envelope,
}

/// Which redirects are followed (at most 5).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Redirects {
    /// None: a 3xx answer is a rejection.
    None,
    /// Within the URL's own host only; elsewhere is a rejection.
    #[default]
    SameHost,
    /// Anywhere (the signature then reaches whoever the receiver points to).
    Any,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            url: String::new(),
            topics: BTreeMap::new(),
            secrets: Vec::new(),
            body: BodyFormat::Payload,
            timeout: Duration::from_secs(5),
            concurrency: 16,
            ca_file: None,
            redirects: Redirects::SameHost,
            format: Default::default(),
            cloudevents_mode: Default::default(),
        }
    }
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &self.url)
            .field("topics", &self.topics)
            .field("secrets", &format!("{} (hidden)", self.secrets.len()))
            .field("body", &self.body)
            .field("timeout", &self.timeout)
            .field("concurrency", &self.concurrency)
            .field("ca_file", &self.ca_file)
            .field("redirects", &self.redirects)
            .field("format", &self.format)
            .field("cloudevents_mode", &self.cloudevents_mode)
            .finish()
    }
}

impl postbox_relay::Section for WebhookConfig {
    const NAME: &'static str = "webhook";
}

impl postbox_relay::SinkConfig for WebhookConfig {
    type Sink = crate::WebhookSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::WebhookSink::new(self)?.with_cloudevents(ce))
    }

    fn client_timeout(&self) -> Option<(&'static str, std::time::Duration)> {
        Some(("webhook.timeout", self.timeout))
    }

    fn describe(&self) -> String {
        format!("webhooks to {}", self.url)
    }
}

impl WebhookConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
        URL.validate(&self.url, &self.topics)?;
        if self.secrets.is_empty() {
            return err(
                "webhook.secrets",
                "no signing secret: receivers could not tell these requests from forged ones; add one (`echo whsec_$(openssl rand -base64 32)`)".into(),
            );
        }
        for s in &self.secrets {
            if let Err(e) = crate::SigningKey::from_secret(s.expose()) {
                return err("webhook.secrets", e.to_string());
            }
        }
        if self.format == postbox_relay::cloudevents::Format::Cloudevents
            && self.body == BodyFormat::Envelope
        {
            return err(
                "webhook.body",
                "\"envelope\" and format = \"cloudevents\" both say what the body is: leave body at \"payload\" (cloudevents_mode = \"structured\" sends the whole event as the body)".into(),
            );
        }
        if self.concurrency == 0 {
            return err("webhook.concurrency", "must be at least 1".into());
        }
        if self.timeout < Duration::from_millis(100) {
            return err(
                "webhook.timeout",
                format!("{:?} is too short (at least 100ms)", self.timeout),
            );
        }
        Ok(())
    }

    /// The URL an event goes to.
    pub fn url_for(
        &self,
        topic: &str,
        key: Option<&str>,
    ) -> Result<reqwest::Url, postbox_relay::TargetError> {
        let url = URL.fill(&self.url, &self.topics, topic, key)?;
        Ok(reqwest::Url::parse(&url).expect("checked by URL.check"))
    }
}

/// `template` filled in with a sample topic and key, if that is a URL.
pub(crate) fn sample_url(template: &str) -> Option<reqwest::Url> {
    let url = URL
        .fill(template, &BTreeMap::new(), "topic", Some("key"))
        .ok()?;
    reqwest::Url::parse(&url).ok()
}

/// The URL setting, in the vocabulary every sink's destination has.
const URL: postbox_relay::Template = postbox_relay::Template {
    setting: "webhook.url",
    per_topic: "webhook.topics",
    what: "URL",
    key: true,
    escape: path_segment,
    check: |u| match reqwest::Url::parse(u) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(_) => Err("not an http:// or https:// URL with a host".into()),
        Err(e) => Err(e.to_string()),
    },
    example: "https://hooks.example.com/{topic}",
};

/// `s` percent-encoded as one URL path segment.
fn path_segment(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~');
    if s.bytes().all(plain) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_from_templates_and_bad_settings_named() {
        let mut c = WebhookConfig {
            url: "https://h.example/{topic}/{key}".into(),
            secrets: vec![postbox_relay::Secret::new(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            )],
            ..Default::default()
        };
        assert!(c.validate().is_ok());
        assert_eq!(
            c.url_for("orders", Some("a b/c")).unwrap().as_str(),
            "https://h.example/orders/a%20b%2Fc"
        );
        assert!(c
            .url_for("orders", None)
            .unwrap_err()
            .to_string()
            .contains("no key"));
        c.topics
            .insert("audit".into(), "http://audit.example/in".into());
        assert_eq!(
            c.url_for("audit", None).unwrap().as_str(),
            "http://audit.example/in"
        );
        c.url = "ftp://x/{topic}".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("webhook.url"));
        c.url = "https://h.example/{topic}".into();
        c.secrets = vec![postbox_relay::Secret::new("whsec_canary!")];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("webhook.secrets") && !e.contains("canary"),
            "{e}"
        );
        assert!(!format!("{c:?}").contains("canary"));
        c.secrets.clear();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("webhook.secrets"));
    }
}
