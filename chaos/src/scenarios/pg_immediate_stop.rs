//! `pg-immediate-stop`: a cluster of the scenario's own stopped with
//! `pg_ctl -m immediate` and restarted 1.5 s later; requests answered 5xx
//! meanwhile are indeterminate.

use super::{Postgres, Run, Scenario, Setup};
use std::time::Duration;

pub struct PgImmediateStop;

#[async_trait::async_trait]
impl Scenario for PgImmediateStop {
    fn name(&self) -> &'static str {
        "pg-immediate-stop"
    }

    fn about(&self) -> &'static str {
        "a harness-owned PostgreSQL stopped with `pg_ctl -m immediate`, restarted 1.5 s later; 5xx answers are indeterminate"
    }

    fn setup(&self) -> Setup {
        Setup {
            postgres: Postgres::Own,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        let cluster = run.cluster.as_ref().expect("own cluster");
        run.at(2.0).await;
        cluster.stop_immediate().await?;
        h.harness("postgres", "stopped (immediate)");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.up().await?;
        h.harness("postgres", "up (recovered)");
        Ok(())
    }
}
