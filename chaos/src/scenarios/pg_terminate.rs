//! `pg-terminate`: `pg_terminate_backend` on every relay session, every second.

use super::{Run, Scenario};
use crate::pg::terminate;

pub struct PgTerminate;

#[async_trait::async_trait]
impl Scenario for PgTerminate {
    fn name(&self) -> &'static str {
        "pg-terminate"
    }

    fn about(&self) -> &'static str {
        "pg_terminate_backend on every relay session, every second"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        for i in 1..=5 {
            run.at(i as f64).await;
            let pids: Vec<u32> = run
                .w
                .consumers
                .relays
                .iter()
                .chain(&run.w.workers.relays)
                .filter_map(|r| r.pid())
                .collect();
            let n = terminate(&run.w, &pids).await?;
            h.harness("postgres", format!("terminated {n} relay sessions"));
        }
        Ok(())
    }
}
