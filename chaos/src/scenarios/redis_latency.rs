//! `redis-latency`: 50 ms added each way on every Redis connection for 3 s.

use super::{Run, Scenario, Setup};
use std::time::Duration;

pub struct RedisLatency;

#[async_trait::async_trait]
impl Scenario for RedisLatency {
    fn name(&self) -> &'static str {
        "redis-latency"
    }

    fn about(&self) -> &'static str {
        "50 ms added each way on every Redis connection for 3 s"
    }

    fn setup(&self) -> Setup {
        Setup {
            redis_proxy: true,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(1.5).await;
        let proxy = run.w.proxy.as_ref().expect("proxied");
        proxy.latency(Duration::from_millis(50));
        h.harness("proxy", "+50 ms each way");
        run.at(4.5).await;
        let proxy = run.w.proxy.as_ref().expect("proxied");
        proxy.pass();
        h.harness("proxy", "latency removed");
        Ok(())
    }
}
