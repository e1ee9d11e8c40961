//! `pooler`: the services reach PostgreSQL through PgBouncer in transaction
//! mode (a small pool handed out in turn, so their transactions land on
//! shared server sessions; they run with `--statements unnamed`), the two
//! consumers relays through PgBouncer in session mode, as a hosted
//! database's pooled and session URLs. Both PgBouncers are killed under
//! load and restarted a second later. Outside that outage (and a second
//! after it) every request must be answered 201: a statement the pooler
//! broke — a named one on a shared session — would show as a 5xx there.

use super::{Run, Scenario, Setup};

pub struct Pooler;

#[async_trait::async_trait]
impl Scenario for Pooler {
    fn name(&self) -> &'static str {
        "pooler"
    }

    fn about(&self) -> &'static str {
        "services through PgBouncer in transaction mode (unnamed statements), two relays through PgBouncer in session mode; both poolers killed under load and restarted 1 s later"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 2,
            pooler: true,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        // Before the kill: a request it breaks may be answered before kill() returns.
        let down = h.elapsed();
        let p = run.w.poolers.as_mut().expect("poolers");
        p.services.kill();
        p.relays.kill();
        h.harness("pgbouncer", "both poolers killed");
        run.at(3.0).await;
        let p = run.w.poolers.as_mut().expect("poolers");
        p.services.restart().await;
        p.relays.restart().await;
        let up = h.elapsed();
        h.harness("pgbouncer", "both poolers up");
        run.outage = Some((down, up + 1.0));
        Ok(())
    }
}
