//! Test hooks, chosen by `POSTBOX_FAILPOINT`, compiled only with the
//! `failpoints` cargo feature (the integration tests enable it; a release
//! build has none of this).

/// The failpoint this process was started with, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct Failpoint(#[allow(dead_code)] Option<String>);

impl Failpoint {
    #[cfg(feature = "failpoints")]
    pub(crate) fn from_env() -> Self {
        Failpoint(std::env::var("POSTBOX_FAILPOINT").ok())
    }

    #[cfg(not(feature = "failpoints"))]
    pub(crate) fn from_env() -> Self {
        Failpoint(None)
    }

    #[cfg(feature = "failpoints")]
    fn is(&self, name: &str) -> bool {
        self.0.as_deref() == Some(name)
    }

    /// `panic_worker`: a worker task panics before its first batch, to prove
    /// the relay then exits non-zero.
    pub(crate) fn worker_started(&self) {
        #[cfg(feature = "failpoints")]
        if self.is("panic_worker") {
            panic!("postbox failpoint panic_worker");
        }
    }

    /// `slow_publish`: a batch stays in flight for a second (e.g. to SIGTERM it).
    pub(crate) async fn before_publish(&self, _events: usize) {
        #[cfg(feature = "failpoints")]
        if self.is("slow_publish") {
            eprintln!("postbox failpoint slow_publish: holding {_events} events for 1s");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    /// `after_publish`: the batch is at the broker, not yet marked; the worker
    /// hangs so the test can SIGKILL it and prove the republish is absorbed.
    pub(crate) async fn after_publish(&self, _events: usize) {
        #[cfg(feature = "failpoints")]
        if self.is("after_publish") {
            eprintln!("postbox failpoint after_publish: {_events} events published, not committed");
            std::future::pending::<()>().await;
        }
    }
}
