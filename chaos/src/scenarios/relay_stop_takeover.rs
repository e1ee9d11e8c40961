//! `relay-stop-takeover`: a relay SIGSTOPped past its ownership (its
//! sessions terminated, as a network timeout would end them), the other
//! takes over, then SIGCONT.

use super::{Run, Scenario, Setup};
use crate::pg::{terminate, wait_owned_by};
use std::time::Duration;

pub struct RelayStopTakeover;

#[async_trait::async_trait]
impl Scenario for RelayStopTakeover {
    fn name(&self) -> &'static str {
        "relay-stop-takeover"
    }

    fn about(&self) -> &'static str {
        "a relay SIGSTOPped past its ownership (its sessions terminated), the other takes over, then SIGCONT"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 2,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(1.5).await;
        let relays = &run.w.consumers.relays;
        let (a, b) = (relays[0].pid().unwrap(), relays[1].pid().unwrap());
        relays[0].signal("STOP");
        h.harness("relay", "relay #0 SIGSTOPped");
        // Its sessions end (as a network timeout would end them): the locks go with them.
        terminate(&run.w, &[a]).await?;
        wait_owned_by(&run.w, b, 64, Duration::from_secs(10)).await?;
        h.harness("relay", "relay #1 owns all 64 partitions");
        run.at(4.0).await;
        run.w.consumers.relays[0].signal("CONT");
        h.harness("relay", "relay #0 SIGCONT");
        Ok(())
    }
}
