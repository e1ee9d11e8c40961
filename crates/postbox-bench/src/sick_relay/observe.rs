//! What the sick-relay benchmark does to relay B's path to Redis (cuts,
//! added latency) and what it watches meanwhile: each relay's partitions
//! and the stand-bys their health records show.

use super::*;

/// What the monitor saw: the partitions each relay owned (when it changed),
/// and the stand-bys in the health records.
#[derive(Default)]
pub(super) struct Seen {
    owned: Vec<(Instant, i64, i64)>,
    /// B's and A's `taking_partitions` going from true to false.
    pub(super) recorded: [u64; 2],
}

impl Seen {
    /// Times relay B (`b`) or A stopped owning partitions: a stand-by (two
    /// relays sharing 64 partitions never leave one with none otherwise).
    /// Counted from the relays' own counters, as the health records show
    /// the decision an interval later and miss one that ends a run.
    pub(super) fn drops(&self, b: bool) -> u64 {
        let owned = |o: &(Instant, i64, i64)| if b { o.2 } else { o.1 };
        let w = self.owned.windows(2);
        w.filter(|p| owned(&p[0]) > 0 && owned(&p[1]) == 0).count() as u64
    }

    /// First change at or after `from` satisfying `f(a, b)`, as time since `from`.
    pub(super) fn first(&self, from: Instant, f: impl Fn(i64, i64) -> bool) -> Option<Duration> {
        self.owned
            .iter()
            .find(|(t, a, b)| *t >= from && f(*a, *b))
            .map(|(t, ..)| *t - from)
    }

    /// How long B owned nothing, until `end`.
    pub(super) fn idle(&self, end: Instant) -> Duration {
        let mut total = Duration::ZERO;
        for (i, (t, _, b)) in self.owned.iter().enumerate() {
            let next = self.owned.get(i + 1).map_or(end, |n| n.0);
            if *b == 0 {
                total += next.saturating_duration_since(*t);
            }
        }
        total
    }
}

/// Sample both relays' partitions every 10 ms and the health records every
/// `RECORDS_EVERY` until `stop`.
pub(super) async fn monitor(
    ctx: &Ctx,
    schema: &SchemaName,
    relays: [Arc<Stats>; 2],
    a_instance: &[String],
    stop: CancellationToken,
) -> Result<Seen, BenchError> {
    let mut seen = Seen::default();
    let mut taking: HashMap<String, bool> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut records_at = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return Ok(seen),
        }
        let now = Instant::now();
        let owned = relays.clone().map(|s| s.snapshot().owned_partitions);
        if seen
            .owned
            .last()
            .is_none_or(|l| (l.1, l.2) != (owned[0], owned[1]))
        {
            seen.owned.push((now, owned[0], owned[1]));
        }
        if now < records_at {
            continue;
        }
        records_at = now + RECORDS_EVERY;
        for (instance, now_taking) in instances(ctx, schema).await? {
            if taking.insert(instance.clone(), now_taking) == Some(true) && !now_taking {
                seen.recorded[usize::from(a_instance.contains(&instance))] += 1;
            }
        }
    }
}

/// Apply workload `w` to B's proxy from `start`; a cut returns when it was
/// cut and healed, the others last until `stop`.
pub(super) async fn fault(
    w: Workload,
    proxy: &Proxy,
    ctx: &Ctx,
    start: tokio::time::Instant,
    stop: CancellationToken,
) -> Option<(Instant, Instant)> {
    let p = &ctx.p;
    match w {
        Workload::NoFault => None,
        Workload::Cut => {
            tokio::time::sleep_until(start + settle(ctx)).await;
            proxy.partition();
            let cut = Instant::now();
            tokio::time::sleep_until(start + settle(ctx) + p.cut_hold).await;
            proxy.heal();
            Some((cut, Instant::now()))
        }
        Workload::Steady => {
            proxy.latency(p.steady_latency);
            stop.cancelled().await;
            None
        }
        Workload::Bursts => {
            let mut at = start;
            loop {
                proxy.latency(p.burst_latency);
                tokio::select! {
                    () = tokio::time::sleep_until(at + BURST_ON) => {}
                    () = stop.cancelled() => return None,
                }
                proxy.latency(Duration::ZERO);
                at += BURST_EVERY;
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = stop.cancelled() => return None,
                }
            }
        }
    }
}
