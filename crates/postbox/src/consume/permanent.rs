//! A handler's failure that no retry can fix.

use super::BoxError;

/// Return it (or any error it wraps, with `?`) from a handler when running the
/// message again cannot succeed — a payload that will never deserialize, a
/// reference to something that does not exist: the message becomes a dead
/// letter at once, without the retry policy's further runs and waits, and the
/// queue behind it moves on. Any other error is retried by the
/// [`RetryPolicy`](super::RetryPolicy), which is right for what may pass (a
/// peer service restarting, a lock timeout).
///
/// ```
/// # use postbox::{BoxError, Handler, Message, Permanent};
/// # struct Orders;
/// # #[derive(serde::Deserialize)] struct Order { id: i64 }
/// impl Handler for Orders {
///     async fn handle(&self, tx: &mut postbox::sqlx::PgConnection, msg: &Message) -> Result<(), BoxError> {
///         let order: Order = msg.json().map_err(Permanent::new)?; // never valid: no retry
///         # let _ = (tx, order.id);
///         Ok(())
///     }
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("permanent failure (not retried)")]
pub struct Permanent(#[source] BoxError);

impl Permanent {
    /// `cause`, marked as not worth retrying.
    pub fn new(cause: impl Into<BoxError>) -> Self {
        Permanent(cause.into())
    }

    /// Whether `e` is a permanent failure.
    pub(crate) fn is(e: &BoxError) -> bool {
        e.downcast_ref::<Permanent>().is_some()
    }
}
