//! `rolling-deploy`: relay versions overlap as in a rolling deploy: the new
//! one starts, then the old one gets SIGTERM, twice, under load.

use super::{Run, Scenario};
use crate::pg::wait_owned_by;
use std::time::Duration;

pub struct RollingDeploy;

#[async_trait::async_trait]
impl Scenario for RollingDeploy {
    fn name(&self) -> &'static str {
        "rolling-deploy"
    }

    fn about(&self) -> &'static str {
        "relay versions overlap: start the new one, SIGTERM the old, twice, under load"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        for (round, start_at) in [(1, 1.5), (2, 3.5)] {
            run.at(start_at).await;
            let mut next = run
                .w
                .new_consumers_relay(&format!("relay(consumers v{})", round + 1), &[]);
            next.start(&[])?;
            let pid = next.pid().unwrap();
            wait_owned_by(&run.w, pid, 1, Duration::from_secs(10)).await?;
            h.harness("deploy", format!("relay v{} overlaps v{round}", round + 1));
            let mut old = std::mem::replace(&mut run.w.consumers.relays[0], next);
            old.stop().await?;
            h.harness("deploy", format!("relay v{round} stopped"));
        }
        Ok(())
    }
}
