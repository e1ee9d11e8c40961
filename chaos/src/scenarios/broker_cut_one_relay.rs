//! `broker-cut-one-relay`: three relays for the consumers schema, a filler
//! writing 1,000 events/s on 256 keys beside the chats (24 of them here, so
//! that some land on every relay's partitions), and the first relay's path
//! to Redis cut through a fault proxy of its own (nothing forwarded, nothing
//! closed) for the hold (`--hold`, default 60 s), then healed; the other
//! relays, the services and the harness reach Redis directly.
//!
//! A relay that cannot publish must not hold its partitions' events
//! hostage: after `unavailable_after` it gives its partitions back, the two
//! relays that can publish take them, and it takes a share again once its
//! broker answers. Besides the checker, the judge reads which partitions the
//! cut relay held at the cut (pg_locks) and compares the lag of the events
//! on them (`sent_at − created_at` in the outbox; and send → shown for the
//! chats among them) during the cut (with those created in the second before
//! it, which may be in flight at it) with before it. It fails if the lag p99
//! during the cut exceeds [`bound`] (`unavailable_after`, plus the broker
//! check and the takeover), or if the others did not own every partition
//! within that bound, or if the cut relay took no partition again once healed.

use super::measure::{
    changes, chat_latencies, chats_on, describe, outbox_lag, owned_by, owners, relay_records,
    server_now, settled, Filler, Sampler, PARTITIONS,
};
use super::{Run, Scenario, Setup};
use crate::latency::pct;
use crate::pg::wait_owned_by;
use std::time::{Duration, Instant};

pub struct BrokerCutOneRelay;

/// The relays' `--unavailable-after`.
pub const UNAVAILABLE_AFTER: Duration = Duration::from_secs(3);
/// What the bound allows beyond `unavailable_after`: the broker check that
/// finds it down and the takeover by the others.
pub const SLACK: Duration = Duration::from_secs(5);
/// The chats the load goes round.
pub const CHATS: i64 = 24;
/// The filler: events per second, to a statement, on keys.
pub const FILLER_RATE: u64 = 1000;
pub const FILLER_BATCH: u64 = 4;
pub const FILLER_KEYS: u64 = 256;
/// Seconds of the load: the relays settle within `SETTLE`, then `BEFORE`
/// is measured, then the hold, then `AFTER`.
pub const SETTLE: f64 = 4.0;
pub const BEFORE: f64 = 5.0;
pub const AFTER: f64 = 10.0;
/// Events created this long before a cut may be in flight at it, and wait
/// for the takeover like those created during it: they are counted with the
/// cut's, not as before it.
pub const IN_FLIGHT: f64 = 1.0;

const FILLER_TOPIC: &str = "broker-cut-filler";

/// The lag p99 the events on the cut relay's partitions may reach during the cut.
pub fn bound() -> Duration {
    UNAVAILABLE_AFTER + SLACK
}

/// What the faults saw, for the judge.
struct Cut {
    /// Server time (seconds since the epoch) of the window before the cut,
    /// of the cut and of the heal.
    before: f64,
    cut: f64,
    healed: f64,
    /// The same on the history's clock.
    before_h: f64,
    cut_h: f64,
    healed_h: f64,
    /// The partitions relay #0 held at the cut.
    partitions: Vec<i16>,
    /// Seconds after the cut: relay #0 owned nothing, the others owned all.
    gave_up: Option<f64>,
    taken: Option<f64>,
    /// Owner changes sampled during the cut.
    handovers: usize,
    /// Seconds after the heal relay #0 owned a partition again.
    rejoined: Option<f64>,
}

#[async_trait::async_trait]
impl Scenario for BrokerCutOneRelay {
    fn name(&self) -> &'static str {
        "broker-cut-one-relay"
    }

    fn about(&self) -> &'static str {
        "three relays under 1,000 events/s; one relay's path to Redis cut (fault proxy: nothing forwarded, nothing closed) for the hold (--hold, default 60 s), then healed: the other two take its partitions within unavailable_after + 5 s, its events' lag p99 stays under that bound, it takes a share again once healed"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 3,
            relay_flags: vec![
                "--unavailable-after".into(),
                humantime_serde::re::humantime::format_duration(UNAVAILABLE_AFTER).to_string(),
            ],
            relay_redis_proxy: 1,
            chats: CHATS,
            ..Setup::default()
        }
    }

    fn default_hold(&self, fast: bool) -> Duration {
        Duration::from_secs(if fast { 10 } else { 60 })
    }

    fn load(&self, hold: Duration) -> Duration {
        Duration::from_secs_f64(SETTLE + BEFORE + AFTER) + hold
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        let h = run.history();
        // The services never lose Redis: every answer must be a 201.
        run.outage = Some((0.0, 0.0));
        let pids: Vec<u32> = run
            .w
            .consumers
            .relays
            .iter()
            .map(|r| r.pid().ok_or("relay not running"))
            .collect::<Result<_, _>>()?;
        let filler = Filler::start(&run.w, FILLER_TOPIC, FILLER_KEYS, FILLER_RATE, FILLER_BATCH);
        let sampler = Sampler::start(&run.w, Duration::from_millis(200));
        let started = Instant::now();
        let each = settled(&run.w, &pids, Duration::from_secs(30)).await?;
        println!(
            "broker-cut-one-relay: the three relays own {each:?} of the {PARTITIONS} partitions {:.1} s after the start",
            started.elapsed().as_secs_f64()
        );
        run.at(SETTLE).await;
        let (before, before_h) = (server_now(&run.w).await?, h.elapsed());
        tokio::time::sleep(Duration::from_secs_f64(BEFORE)).await;

        let at_cut = owners(&run.w).await?;
        let proxy = run.w.relay_proxy.as_ref().expect("proxied");
        proxy.partition();
        let (cut, cut_h) = (server_now(&run.w).await?, h.elapsed());
        let cut_at = Instant::now();
        let partitions: Vec<i16> = at_cut
            .iter()
            .filter(|(_, pid)| **pid == pids[0])
            .map(|(p, _)| *p)
            .collect();
        h.harness(
            "proxy",
            format!(
                "relay #0 ↔ Redis partitioned; it holds {} partitions",
                partitions.len()
            ),
        );
        // Half-way through, what each relay says of itself.
        tokio::time::sleep(run.hold / 2).await;
        let records = relay_records(&run.w).await;
        tokio::time::sleep_until((cut_at + run.hold).into()).await;
        let healed_h = h.elapsed();
        run.w.relay_proxy.as_ref().expect("proxied").heal();
        let healed = server_now(&run.w).await?;
        let healed_at = Instant::now();
        h.harness("proxy", "healed");
        let rejoined = match wait_owned_by(&run.w, pids[0], 1, Duration::from_secs(30)).await {
            Ok(()) => {
                h.harness("relay", "relay #0 owns partitions again");
                Some(healed_at.elapsed().as_secs_f64())
            }
            Err(e) => {
                println!("broker-cut-one-relay: {e}");
                None
            }
        };
        run.loaded().await;
        let written = filler.stop().await?;
        let samples = sampler.stop().await;

        let after_cut = |f: &dyn Fn(&super::measure::Owners) -> bool| {
            samples
                .iter()
                .find(|(at, o)| *at > cut_h && *at <= healed_h && f(o))
                .map(|(at, _)| at - cut_h)
        };
        let gave_up = after_cut(&|o| owned_by(o, pids[0]) == 0);
        let taken = after_cut(&|o| {
            o.len() == PARTITIONS as usize && o.values().all(|p| pids[1..].contains(p))
        });
        let mut during: Vec<_> = vec![(cut_h, at_cut)];
        during.extend(
            samples
                .into_iter()
                .filter(|(at, _)| *at > cut_h && *at <= healed_h),
        );
        let handovers = changes(&during).len();
        print!(
            "broker-cut-one-relay: filler wrote {written} events; relay records half-way through the cut:\n{records}"
        );
        run.measured = Some(Box::new(Cut {
            before,
            cut,
            healed,
            before_h,
            cut_h,
            healed_h,
            partitions,
            gave_up,
            taken,
            handovers,
            rejoined,
        }));
        Ok(())
    }

    async fn judge(&self, run: &Run) -> Result<bool, chat::Error> {
        let c: &Cut = run
            .measured
            .as_ref()
            .and_then(|m| m.downcast_ref())
            .ok_or("no measurement of the cut")?;
        let w = &run.w;
        let bound = bound();
        let bound_ms = bound.as_secs_f64() * 1000.0;
        let secs = |x: Option<f64>| x.map_or("never".to_owned(), |s| format!("{s:.1} s"));
        println!(
            "broker-cut-one-relay: relay #0 held {} partitions at the cut ({} s hold); it owned none {} after the cut, the other two owned all {PARTITIONS} {} after it ({} owner changes sampled during the cut); it owned partitions again {} after the heal",
            c.partitions.len(),
            (c.healed_h - c.cut_h).round(),
            secs(c.gave_up),
            secs(c.taken),
            c.handovers,
            secs(c.rejoined),
        );
        let (cut, cut_h) = (c.cut - IN_FLIGHT, c.cut_h - IN_FLIGHT);
        let before = outbox_lag(w, c.before, cut, Some(&c.partitions)).await?;
        let during = outbox_lag(w, cut, c.healed, Some(&c.partitions)).await?;
        println!(
            "broker-cut-one-relay: lag of the events on its partitions: before the cut {before}; during the cut (created from {IN_FLIGHT} s before it to the heal) {during}; bound: unavailable_after {} s + {} s (broker check and takeover) = {} s",
            UNAVAILABLE_AFTER.as_secs(),
            SLACK.as_secs(),
            bound.as_secs()
        );
        let chats = chats_on(w, &c.partitions).await?;
        let h = run.history();
        let chat_before = chat_latencies(&h, Some(&chats), c.before_h, cut_h);
        let chat_during = chat_latencies(&h, Some(&chats), cut_h, c.healed_h);
        println!(
            "broker-cut-one-relay: send → shown of the chats on its partitions ({chats:?}): before the cut {}; during the cut {}",
            describe(&chat_before),
            describe(&chat_during)
        );
        let mut ok = true;
        if c.partitions.is_empty() {
            println!("broker-cut-one-relay: FAILED: relay #0 held no partition at the cut");
            ok = false;
        }
        if during.p99_ms > bound_ms {
            println!(
                "broker-cut-one-relay: FAILED: lag p99 during the cut {:.0} ms > {bound_ms:.0} ms",
                during.p99_ms
            );
            ok = false;
        }
        if !chat_during.is_empty() && pct(&chat_during, 99.0) > bound_ms {
            println!(
                "broker-cut-one-relay: FAILED: send → shown p99 during the cut {:.0} ms > {bound_ms:.0} ms",
                pct(&chat_during, 99.0)
            );
            ok = false;
        }
        if c.taken.is_none_or(|t| t > bound.as_secs_f64()) {
            println!(
                "broker-cut-one-relay: FAILED: the other relays did not own every partition within {} s of the cut",
                bound.as_secs()
            );
            ok = false;
        }
        if c.rejoined.is_none() {
            println!(
                "broker-cut-one-relay: FAILED: relay #0 took no partition within 30 s of the heal"
            );
            ok = false;
        }
        Ok(ok)
    }
}
