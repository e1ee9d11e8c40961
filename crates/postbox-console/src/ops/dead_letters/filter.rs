//! Which dead letters a request means: the filter both faces take, its checks,
//! and its parameters bound in the order each side's statements expect.

use super::{Action, Side};
use crate::ops::OpsError;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::Postgres;

/// Which dead letters: every given filter must hold. Empty strings count as
/// not given (an HTML form sends every field).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Only this consumer (consumer side only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Only this topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Only this key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Only those dead-lettered more than this many seconds ago.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older_than_seconds: Option<f64>,
    /// Only those dead-lettered less than this many seconds ago.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newer_than_seconds: Option<f64>,
    /// Only those whose last error contains this text (case-insensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only those of this error group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Only these dead-letter ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<i64>,
}

/// A number of seconds as the command line takes it (`1h 30m`).
fn seconds(s: f64) -> String {
    humantime_serde::re::humantime::format_duration(std::time::Duration::from_secs_f64(s))
        .to_string()
}

fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

impl Filter {
    /// Nothing narrows the selection.
    pub fn is_empty(&self) -> bool {
        given(&self.consumer).is_none()
            && given(&self.topic).is_none()
            && given(&self.key).is_none()
            && self.older_than_seconds.is_none()
            && self.newer_than_seconds.is_none()
            && given(&self.error).is_none()
            && given(&self.fingerprint).is_none()
            && self.ids.is_empty()
    }

    /// Refuse what cannot be meant, naming the field.
    pub fn check(&self, side: Side) -> Result<(), OpsError> {
        if side == Side::Relay && given(&self.consumer).is_some() {
            return Err(OpsError::BadInput(
                "consumer filters consumer dead letters only: use side=consumer, or leave it out"
                    .into(),
            ));
        }
        for (name, v) in [
            ("older_than_seconds", self.older_than_seconds),
            ("newer_than_seconds", self.newer_than_seconds),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v <= 0.0 {
                    return Err(OpsError::BadInput(format!(
                        "{name} must be a number of seconds above 0, not {v}"
                    )));
                }
            }
        }
        if let (Some(old), Some(new)) = (self.older_than_seconds, self.newer_than_seconds) {
            if old >= new {
                let (old, new) = (seconds(old), seconds(new));
                return Err(OpsError::BadInput(format!(
                    "older than {old} and newer than {new} select nothing: a dead letter would have to be both. Did you swap them?"
                )));
            }
        }
        if self.ids.len() > 10_000 {
            return Err(OpsError::BadInput(
                "at most 10000 ids at once: select a group or a filter instead".into(),
            ));
        }
        Ok(())
    }

    /// Refuse what cannot be meant, and an act on every dead letter of
    /// `side` unless `all` asks for it by name.
    pub fn check_act(&self, side: Side, action: Action, all: bool) -> Result<(), OpsError> {
        self.check(side)?;
        if self.is_empty() && !all {
            return Err(OpsError::NoFilter {
                action: action.as_str(),
                side: side.as_str(),
            });
        }
        Ok(())
    }

    /// The filter parameters in the order the relay-side statements expect ($1..$7).
    pub(super) fn bind_relay<'q, O>(
        &'q self,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        q.bind(given(&self.topic))
            .bind(given(&self.key))
            .bind(self.older_than_seconds)
            .bind(self.newer_than_seconds)
            .bind(given(&self.error))
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(given(&self.fingerprint))
    }

    /// The filter parameters of the consumer-side statements ($1..$8).
    pub(super) fn bind_consumer<'q, O>(
        &'q self,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        q.bind(given(&self.consumer))
            .bind(given(&self.topic))
            .bind(given(&self.key))
            .bind(self.older_than_seconds)
            .bind(self.newer_than_seconds)
            .bind(given(&self.error))
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(given(&self.fingerprint))
    }

    pub(super) fn bind<'q, O>(
        &'q self,
        side: Side,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        match side {
            Side::Relay => self.bind_relay(q),
            Side::Consumer => self.bind_consumer(q),
        }
    }
}
