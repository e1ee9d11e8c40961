//! `worker-stall`: the workers service SIGSTOPped longer than its job lock,
//! then resumed: its job is redelivered, and the inbox keeps it once.

use super::{Run, Scenario};
use crate::world::LOCK_MS;
use std::time::Duration;

pub struct WorkerStall;

#[async_trait::async_trait]
impl Scenario for WorkerStall {
    fn name(&self) -> &'static str {
        "worker-stall"
    }

    fn about(&self) -> &'static str {
        "the workers service SIGSTOPped longer than its job lock, then resumed"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        run.w.workers.svc.signal("STOP");
        h.harness("workers", "SIGSTOP");
        tokio::time::sleep(Duration::from_millis(LOCK_MS + 2000)).await;
        run.w.workers.svc.signal("CONT");
        h.harness("workers", "SIGCONT");
        Ok(())
    }
}
