//! The connection a sink publishes over, made on first use and made again
//! after [`reset`](Reconnecting::reset) or when it is seen closed: the relay
//! starts while its broker is down, and a send cut off mid-way never leaves
//! half-done client state (an AMQP channel's confirm numbering, a producer's
//! sequence) for the next batch.

use crate::SinkError;
use std::future::Future;

/// A broker connection (or client, or producer) held between batches.
///
/// One connect runs at a time: batches that need the connection while it is
/// being made wait for that attempt instead of opening their own.
pub struct Reconnecting<C> {
    held: tokio::sync::Mutex<Option<C>>,
}

impl<C> Default for Reconnecting<C> {
    fn default() -> Self {
        Reconnecting {
            held: tokio::sync::Mutex::new(None),
        }
    }
}

impl<C: Clone> Reconnecting<C> {
    /// Nothing held yet: the first [`get`](Self::get) connects.
    pub fn new() -> Self {
        Self::default()
    }

    /// The held connection, or a new one from `connect`.
    pub async fn get<F, Fut>(&self, connect: F) -> Result<C, SinkError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, SinkError>>,
    {
        self.get_open(|_| true, connect).await
    }

    /// The held connection if `open` says it still is, or a new one from
    /// `connect` (for clients that tell when their connection dropped).
    pub async fn get_open<F, Fut>(
        &self,
        open: impl Fn(&C) -> bool,
        connect: F,
    ) -> Result<C, SinkError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, SinkError>>,
    {
        let mut held = self.held.lock().await;
        if let Some(c) = held.as_ref().filter(|c| open(c)) {
            return Ok(c.clone());
        }
        *held = None;
        let c = connect().await?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// The held connection, if there is one (no connect).
    pub async fn current(&self) -> Option<C> {
        self.held.lock().await.clone()
    }

    /// Drop the held connection, so the next [`get`](Self::get) connects
    /// afresh; the old one is returned for sinks that must close it in a
    /// particular way.
    pub async fn reset(&self) -> Option<C> {
        self.held.lock().await.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn connects_once_then_again_after_a_reset_or_a_close() {
        let made = Arc::new(AtomicUsize::new(0));
        let conn = Reconnecting::<usize>::new();
        let connect = || {
            let made = made.clone();
            async move { Ok(made.fetch_add(1, Ordering::SeqCst) + 1) }
        };
        assert_eq!(conn.get(connect).await.unwrap(), 1);
        assert_eq!(conn.get(connect).await.unwrap(), 1, "held");
        assert_eq!(conn.reset().await, Some(1));
        assert_eq!(conn.current().await, None);
        assert_eq!(conn.get(connect).await.unwrap(), 2, "made again");
        assert_eq!(
            conn.get_open(|c| *c != 2, connect).await.unwrap(),
            3,
            "seen closed"
        );
    }

    #[tokio::test]
    async fn a_failed_connect_holds_nothing_and_the_next_get_tries_again() {
        let conn = Reconnecting::<u8>::new();
        let e = conn
            .get(|| async { Err(SinkError::transient("down")) })
            .await
            .unwrap_err();
        assert!(e.is_transient());
        assert_eq!(conn.current().await, None);
        assert_eq!(conn.get(|| async { Ok(7) }).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn concurrent_gets_share_one_connect() {
        let made = Arc::new(AtomicUsize::new(0));
        let conn = Arc::new(Reconnecting::<usize>::new());
        let gets = (0..8).map(|_| {
            let (conn, made) = (conn.clone(), made.clone());
            async move {
                conn.get(|| async move {
                    tokio::task::yield_now().await;
                    Ok(made.fetch_add(1, Ordering::SeqCst))
                })
                .await
                .unwrap()
            }
        });
        let got = futures::future::join_all(gets).await;
        assert!(got.iter().all(|c| *c == 0), "{got:?}");
        assert_eq!(made.load(Ordering::SeqCst), 1);
    }
}
