//! `pg-partition`: the network between one relay and PostgreSQL drops every
//! packet (the fault proxy forwards nothing and closes nothing). The server
//! ends the silent sessions after `session_timeout`, which frees their
//! locks; the other relay takes over; the cut-off one resumes once healed.

use super::{Run, Scenario, Setup};
use crate::pg::{wait_owned_by, worker_sessions};
use std::time::{Duration, Instant};

/// The relays give a silent database session up after this.
const SESSION_TIMEOUT: &str = "3s";

pub struct PgPartition;

#[async_trait::async_trait]
impl Scenario for PgPartition {
    fn name(&self) -> &'static str {
        "pg-partition"
    }

    fn about(&self) -> &'static str {
        "the network between one relay and PostgreSQL drops every packet (fault proxy: nothing forwarded, nothing closed); the server ends its silent sessions after session_timeout, the other relay takes over, the cut-off one resumes when healed"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 2,
            relay_flags: vec!["--session-timeout".into(), SESSION_TIMEOUT.into()],
            pg_proxy: true,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        let relays = &run.w.consumers.relays;
        let (cut, other) = (relays[0].pid().unwrap(), relays[1].pid().unwrap());
        run.at(1.5).await;
        let proxy = run.w.pg_proxy.as_ref().expect("proxied");
        proxy.partition();
        let partitioned = Instant::now();
        h.harness("proxy", "relay #0 ↔ PostgreSQL partitioned");
        wait_owned_by(&run.w, other, 64, Duration::from_secs(30)).await?;
        let takeover = partitioned.elapsed();
        // The takeover came from the server ending the silent sessions
        // (their locks went with them), not from anything closing them.
        let left = worker_sessions(&run.w, cut).await?;
        h.harness(
            "relay",
            format!("relay #1 owns all 64 partitions {takeover:.1?} after the cut"),
        );
        println!(
            "takeover: relay #1 owned all 64 partitions {:.1} s after the cut (session_timeout {SESSION_TIMEOUT}); worker sessions of the cut-off relay left on the server: {left}",
            takeover.as_secs_f64()
        );
        run.ok &= left == 0;
        tokio::time::sleep(Duration::from_secs(1)).await;
        run.w.pg_proxy.as_ref().expect("proxied").heal();
        h.harness("proxy", "healed");
        wait_owned_by(&run.w, cut, 1, Duration::from_secs(30)).await?;
        h.harness("relay", "relay #0 owns partitions again");
        Ok(())
    }
}
