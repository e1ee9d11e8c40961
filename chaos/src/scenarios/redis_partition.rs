//! `redis-partition`: every Redis connection of the services and relays cut
//! off for 3 s through the fault proxy (nothing forwarded, nothing closed),
//! then healed.

use super::{Run, Scenario, Setup};

pub struct RedisPartition;

#[async_trait::async_trait]
impl Scenario for RedisPartition {
    fn name(&self) -> &'static str {
        "redis-partition"
    }

    fn about(&self) -> &'static str {
        "every Redis connection of the services and relays partitioned for 3 s (through the fault proxy: nothing forwarded, nothing closed), then healed"
    }

    fn setup(&self) -> Setup {
        Setup {
            redis_proxy: true,
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        run.at(2.0).await;
        let proxy = run.w.proxy.as_ref().expect("proxied");
        proxy.partition();
        h.harness("proxy", "Redis partitioned");
        run.at(5.0).await;
        let proxy = run.w.proxy.as_ref().expect("proxied");
        proxy.heal();
        h.harness("proxy", "healed");
        Ok(())
    }
}
