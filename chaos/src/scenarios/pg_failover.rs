//! `pg-failover`: a primary of the scenario's own with a synchronous
//! streaming standby; the primary is killed (`pg_ctl -m immediate`) and the
//! standby promoted. Services and relays, on a two-host URL with
//! `target_session_attrs=read-write`, move to it.

use super::{Postgres, Run, Scenario, Setup};
use crate::pg::wait_owned_by;
use std::time::{Duration, Instant};

pub struct PgFailover;

#[async_trait::async_trait]
impl Scenario for PgFailover {
    fn name(&self) -> &'static str {
        "pg-failover"
    }

    fn about(&self) -> &'static str {
        "a harness-owned primary with a synchronous streaming standby; the primary is killed (`pg_ctl -m immediate`) and the standby promoted; services and relays on a two-host URL with target_session_attrs=read-write move to it"
    }

    fn setup(&self) -> Setup {
        Setup {
            postgres: Postgres::WithStandby,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        let primary = run.cluster.as_ref().expect("own cluster");
        primary.stop_immediate().await?;
        let killed = Instant::now();
        h.harness("postgres", "primary killed (immediate)");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let standby = run.standby.as_ref().expect("a standby");
        standby.promote().await?;
        h.harness("postgres", "standby promoted");
        // The harness's own checks read the new primary from now on.
        run.w.admin = sqlx::PgPool::connect(&standby.url()).await?;
        let relay = run.w.consumers.relays[0].pid().unwrap();
        wait_owned_by(&run.w, relay, 64, Duration::from_secs(30)).await?;
        println!(
            "failover: the relay owned all 64 partitions on the new primary {:.1} s after the old one died (promotion took 0.5 s)",
            killed.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
