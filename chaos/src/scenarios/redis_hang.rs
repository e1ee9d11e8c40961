//! `redis-hang`: Redis SIGSTOPped for 2.5 s, then resumed.

use super::{Run, Scenario};

pub struct RedisHang;

#[async_trait::async_trait]
impl Scenario for RedisHang {
    fn name(&self) -> &'static str {
        "redis-hang"
    }

    fn about(&self) -> &'static str {
        "Redis SIGSTOPped for 2.5 s, then resumed"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        run.w.redis.signal("STOP");
        h.harness("redis", "SIGSTOP");
        run.at(4.5).await;
        run.w.redis.signal("CONT");
        h.harness("redis", "SIGCONT");
        Ok(())
    }
}
