//! `relay-kill`: two relays; one SIGKILLed and restarted every 600 ms, often
//! between publish and mark.

use super::{Run, Scenario, Setup};
use std::time::Duration;

pub struct RelayKill;

#[async_trait::async_trait]
impl Scenario for RelayKill {
    fn name(&self) -> &'static str {
        "relay-kill"
    }

    fn about(&self) -> &'static str {
        "two relays; one SIGKILLed and restarted every 600 ms (often between publish and mark)"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 2,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let mut i = 0;
        while run.loading() {
            run.at(0.6 * (i + 1) as f64).await;
            let r = &mut run.w.consumers.relays[i % 2];
            r.signal("KILL");
            r.wait_exit(Duration::from_secs(5)).await?;
            r.start(&[])?;
            i += 1;
        }
        run.history().harness("relay", format!("{i} SIGKILLs"));
        Ok(())
    }
}
