//! `pg-read-only`: a cluster of the scenario's own turned read-only
//! (`default_transaction_read_only`, as for maintenance or a full disk) for
//! 2.5 s: producers get errors, relays and consumers retry, and nothing is
//! dead-lettered — a read-only database is the database's trouble, never
//! the events'.

use super::{Postgres, Run, Scenario, Setup};
use crate::pg::read_only;

pub struct PgReadOnly;

#[async_trait::async_trait]
impl Scenario for PgReadOnly {
    fn name(&self) -> &'static str {
        "pg-read-only"
    }

    fn about(&self) -> &'static str {
        "a harness-owned PostgreSQL turned read-only (`default_transaction_read_only`, as for maintenance or a full disk) for 2.5 s: producers get errors, relays and consumers retry, nothing dead-lettered"
    }

    fn setup(&self) -> Setup {
        Setup {
            postgres: Postgres::Own,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        let url = run.cluster.as_ref().expect("own cluster").url();
        run.at(2.0).await;
        read_only(&url, true).await?;
        h.harness("postgres", "read-only");
        run.at(4.5).await;
        read_only(&url, false).await?;
        h.harness("postgres", "writable again");
        Ok(())
    }

    async fn judge(&self, run: &Run) -> Result<bool, chat::Error> {
        let dead: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.outbox_dead_letter",
            run.w.consumers.schema
        ))
        .fetch_one(&run.w.admin)
        .await?;
        println!("dead letters: {dead}");
        Ok(dead == 0)
    }
}
