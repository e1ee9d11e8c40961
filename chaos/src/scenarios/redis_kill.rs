//! `redis-kill`: Redis SIGKILLed mid-stream and restarted from its AOF.

use super::{Run, Scenario};

pub struct RedisKill;

#[async_trait::async_trait]
impl Scenario for RedisKill {
    fn name(&self) -> &'static str {
        "redis-kill"
    }

    fn about(&self) -> &'static str {
        "Redis SIGKILLed mid-stream and restarted from its AOF"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        run.w.redis.kill().await?;
        h.harness("redis", "SIGKILL");
        run.at(3.5).await;
        run.w.redis.up().await?;
        h.harness("redis", "up");
        Ok(())
    }
}
