//! The seam a sink's bench file implements for the drain and replay tables
//! (drain/cases.rs): ready a destination of its own for one run, build the
//! sink from the relay's settings type, remove the destination. The broker
//! files depend on this file only, and the table on them.

use crate::{BenchError, Ctx};
use futures::future::BoxFuture;
use postbox_relay::Destination;
use std::sync::Arc;

/// A broker (or receiver) a case writes to.
#[async_trait::async_trait]
pub(crate) trait Broker: Send + Sync {
    /// Ready a destination of its own named after `what` (a topic, stream or
    /// queue, and what else the broker needs) and build the sink that
    /// publishes there, through the sink's settings type
    /// ([`postbox_relay::SinkConfig::build`] with the run's relay settings,
    /// as the relay builds it).
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError>;
}

/// A destination readied for one run.
pub(crate) struct Opened<'a> {
    /// The topic the events carry.
    pub topic: String,
    /// The sink, in the delivery layer, as the relay drives it.
    pub sink: Arc<dyn Destination>,
    /// Removes what [`Broker::open`] made (after the run, failed or not).
    pub close: BoxFuture<'a, Result<(), BenchError>>,
}

/// `url` when given, else the flag that gives it (the case is skipped).
pub(super) fn given(url: &Option<String>, flag: &'static str) -> Result<String, &'static str> {
    url.clone().ok_or(flag)
}
