//! `broker-down-all-relays`: the world of `broker-cut-one-relay` (three
//! relays, 1,000 events/s beside 24 chats), with every consumers relay's
//! path to Redis cut through the fault proxy for the hold (`--hold`, default
//! 60 s), then healed. No relay can publish, so nobody may move: ownership
//! is sampled from pg_locks every 200 ms, and any partition changing owner
//! between the cut and the heal fails the scenario. After the heal the
//! backlog drains; the judge prints the lag p99 of the events created in the
//! 10 s after the heal against before the outage, and how long the backlog
//! took to drain (printed, not judged: the checker judges that nothing was
//! lost or left unsent).

use super::broker_cut_one_relay::{
    CHATS, FILLER_BATCH, FILLER_KEYS, FILLER_RATE, IN_FLIGHT, SETTLE, UNAVAILABLE_AFTER,
};
use super::measure::{
    changes, chat_latencies, describe, outbox_lag, owners, relay_records, server_now, settled,
    unsent_before, Change, Filler, Sampler, PARTITIONS,
};
use super::{Run, Scenario, Setup};
use std::time::{Duration, Instant};

pub struct BrokerDownAllRelays;

/// Seconds measured before the outage, and after the heal.
const BEFORE: f64 = 5.0;
const AFTER: f64 = 10.0;
const FILLER_TOPIC: &str = "broker-down-filler";

/// What the faults saw, for the judge.
struct Outage {
    /// Server time (seconds since the epoch) of the window before the cut,
    /// of the cut and of the heal.
    before: f64,
    cut: f64,
    healed: f64,
    /// The same on the history's clock.
    before_h: f64,
    cut_h: f64,
    healed_h: f64,
    /// Owner changes sampled between the cut and the heal: (seconds after
    /// the cut, partition, owner before, owner after).
    moved: Vec<Change>,
    samples: usize,
    /// Seconds after the heal the events created before it were all sent.
    drained: Option<f64>,
}

#[async_trait::async_trait]
impl Scenario for BrokerDownAllRelays {
    fn name(&self) -> &'static str {
        "broker-down-all-relays"
    }

    fn about(&self) -> &'static str {
        "three relays under 1,000 events/s; every relay's path to Redis cut (fault proxy) for the hold (--hold, default 60 s), then healed: no partition changes owner while no relay can publish (pg_locks sampled every 200 ms), nothing is lost, and the lag after the heal is printed against before"
    }

    fn setup(&self) -> Setup {
        Setup {
            relays: 3,
            relay_flags: vec![
                "--unavailable-after".into(),
                humantime_serde::re::humantime::format_duration(UNAVAILABLE_AFTER).to_string(),
            ],
            relay_redis_proxy: 3,
            chats: CHATS,
            ..Setup::default()
        }
    }

    fn default_hold(&self, fast: bool) -> Duration {
        // In `fast`, still well past `unavailable_after`: a relay that moved
        // would have done so by then.
        Duration::from_secs(if fast { 10 } else { 60 })
    }

    fn load(&self, hold: Duration) -> Duration {
        Duration::from_secs_f64(SETTLE + BEFORE + AFTER + 2.0) + hold
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
            "broker-down-all-relays: the three relays own {each:?} of the {PARTITIONS} partitions {:.1} s after the start",
            started.elapsed().as_secs_f64()
        );
        run.at(SETTLE).await;
        let (before, before_h) = (server_now(&run.w).await?, h.elapsed());
        tokio::time::sleep(Duration::from_secs_f64(BEFORE)).await;

        let at_cut = owners(&run.w).await?;
        run.w.relay_proxy.as_ref().expect("proxied").partition();
        let (cut, cut_h) = (server_now(&run.w).await?, h.elapsed());
        let cut_at = Instant::now();
        h.harness("proxy", "every consumers relay ↔ Redis partitioned");
        tokio::time::sleep(run.hold / 2).await;
        let records = relay_records(&run.w).await;
        tokio::time::sleep_until((cut_at + run.hold).into()).await;
        let at_heal = owners(&run.w).await?;
        let healed_h = h.elapsed();
        run.w.relay_proxy.as_ref().expect("proxied").heal();
        let healed = server_now(&run.w).await?;
        let healed_at = Instant::now();
        h.harness("proxy", "healed");
        let mut drained = None;
        while healed_at.elapsed() < Duration::from_secs(60) {
            if unsent_before(&run.w, healed).await? == 0 {
                drained = Some(healed_at.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep_until((healed_at + Duration::from_secs_f64(AFTER)).into()).await;
        run.loaded().await;
        let written = filler.stop().await?;
        let samples = sampler.stop().await;

        let mut during = vec![(cut_h, at_cut)];
        during.extend(
            samples
                .into_iter()
                .filter(|(at, _)| *at > cut_h && *at < healed_h),
        );
        during.push((healed_h, at_heal));
        let moved = changes(&during)
            .into_iter()
            .map(|(at, p, a, b)| (at - cut_h, p, a, b))
            .collect();
        print!(
            "broker-down-all-relays: filler wrote {written} events; relay records half-way through the outage:\n{records}"
        );
        run.measured = Some(Box::new(Outage {
            before,
            cut,
            healed,
            before_h,
            cut_h,
            healed_h,
            moved,
            samples: during.len(),
            drained,
        }));
        Ok(())
    }

    async fn judge(&self, run: &Run) -> Result<bool, chat::Error> {
        let o: &Outage = run
            .measured
            .as_ref()
            .and_then(|m| m.downcast_ref())
            .ok_or("no measurement of the outage")?;
        let w = &run.w;
        println!(
            "broker-down-all-relays: partition handovers during the {} s outage: {} ({} ownership samples)",
            (o.healed_h - o.cut_h).round(),
            o.moved.len(),
            o.samples
        );
        print!("{}", describe_changes(&o.moved));
        // Events created just before the cut may be in flight at it: not
        // part of the baseline.
        let before = outbox_lag(w, o.before, o.cut - IN_FLIGHT, None).await?;
        let after = outbox_lag(w, o.healed, o.healed + AFTER, None).await?;
        let backlog = outbox_lag(w, o.cut, o.healed, None).await?;
        println!(
            "broker-down-all-relays: lag of the events created before the outage {before}; in the {AFTER:.0} s after the heal {after}; the {} events of the outage drained {} after the heal",
            backlog.events,
            o.drained
                .map_or("not within 60 s".to_owned(), |s| format!("{s:.1} s"))
        );
        let h = run.history();
        let chat_before = chat_latencies(&h, None, o.before_h, o.cut_h - IN_FLIGHT);
        let chat_after = chat_latencies(&h, None, o.healed_h, o.healed_h + AFTER);
        println!(
            "broker-down-all-relays: send → shown of the chats: before the outage {}; in the {AFTER:.0} s after the heal {}",
            describe(&chat_before),
            describe(&chat_after)
        );
        if !o.moved.is_empty() {
            println!(
                "broker-down-all-relays: FAILED: {} partition owner changes while no relay could publish",
                o.moved.len()
            );
        }
        Ok(o.moved.is_empty())
    }
}

/// The changes, one line per sample and move: `4.4 s after the cut: 7
/// partitions from relay 123 to relay 456 (8, 9, …)`.
fn describe_changes(moved: &[Change]) -> String {
    let mut groups: std::collections::BTreeMap<(u64, Option<u32>, Option<u32>), Vec<i16>> =
        Default::default();
    for (at, p, a, b) in moved {
        groups
            .entry(((at * 10.0).round() as u64, *a, *b))
            .or_default()
            .push(*p);
    }
    let who = |x: &Option<u32>| x.map_or("nobody".to_owned(), |p| format!("relay {p}"));
    groups
        .into_iter()
        .map(|((tenths, a, b), ps)| {
            format!(
                "  {:.1} s after the cut: {} partitions from {} to {} ({})\n",
                tenths as f64 / 10.0,
                ps.len(),
                who(&a),
                who(&b),
                ps.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect()
}
