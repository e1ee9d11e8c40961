//! What a consumer runs for each message: a [`Handler`], its effect in the
//! inbox transaction, implemented with plain `async fn`s or made of a closure.

use crate::Message;
use sqlx::PgConnection;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed error source, as handlers return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The effect of a message, run in the inbox transaction. Implement it with
/// plain `async fn`s (no macro needed), or wrap a closure with [`handler_fn`].
///
/// ```
/// use postbox::{BoxError, Handler, Message};
/// use postbox::sqlx::PgConnection;
///
/// struct Orders;
///
/// impl Handler for Orders {
///     async fn handle(&self, tx: &mut PgConnection, msg: &Message) -> Result<(), BoxError> {
///         let order: serde_json::Value = msg.json()?;
///         postbox::sqlx::query("INSERT INTO shipments (order_id) VALUES ($1)")
///             .bind(order["id"].as_i64())
///             .execute(tx)
///             .await?;
///         Ok(())
///     }
/// }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Perform the message's effect on `tx` (the inbox transaction). An error
    /// rolls everything back. A database error the server may heal
    /// (connection lost, serialization failure) is retried at once; any other
    /// counts against the consumer's [`RetryPolicy`](super::RetryPolicy).
    fn handle(
        &self,
        tx: &mut PgConnection,
        msg: &Message,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// After the transaction committed, before the broker is acknowledged: the
    /// place for side effects outside the database (push to a socket).
    fn after_commit(&self, _msg: &Message) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The message was already in the inbox; its effect was skipped.
    fn on_duplicate(&self, _msg: &Message) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A shared handler (the caller keeps a clone to read its state).
impl<T: Handler> Handler for Arc<T> {
    fn handle(
        &self,
        tx: &mut PgConnection,
        msg: &Message,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        (**self).handle(tx, msg)
    }
    fn after_commit(&self, msg: &Message) -> impl Future<Output = ()> + Send {
        (**self).after_commit(msg)
    }
    fn on_duplicate(&self, msg: &Message) -> impl Future<Output = ()> + Send {
        (**self).on_duplicate(msg)
    }
}

/// What a closure given to [`handler_fn`] returns.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;

/// A [`Handler`] made of a closure.
///
/// ```
/// let seen = postbox::handler_fn(|tx, msg| {
///     Box::pin(async move {
///         postbox::sqlx::query("INSERT INTO seen (id) VALUES ($1)")
///             .bind(&msg.id)
///             .execute(tx)
///             .await?;
///         Ok(())
///     })
/// });
/// # fn takes(_: impl postbox::Handler) {}
/// # takes(seen);
/// ```
pub fn handler_fn<F>(f: F) -> FnHandler<F>
where
    F: for<'a> Fn(&'a mut PgConnection, &'a Message) -> HandlerFuture<'a> + Send + Sync + 'static,
{
    FnHandler(f)
}

/// See [`handler_fn`].
pub struct FnHandler<F>(F);

impl<F> Handler for FnHandler<F>
where
    F: for<'a> Fn(&'a mut PgConnection, &'a Message) -> HandlerFuture<'a> + Send + Sync + 'static,
{
    async fn handle(&self, tx: &mut PgConnection, msg: &Message) -> Result<(), BoxError> {
        (self.0)(tx, msg).await
    }
}
