use super::*;
use clap::Parser;
use postbox_relay::Config;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn resolve(flags: &[&str]) -> Result<(Vec<Which>, Params), String> {
    let argv = std::iter::once("postbox-bench").chain(flags.iter().copied());
    Cli::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .args
        .resolve()
}

#[test]
fn without_a_benchmark_the_four_quick_ones_run_at_full_size() {
    let (which, p) = resolve(&[]).unwrap();
    assert_eq!(
        which,
        [
            Which::Drain,
            Which::Latency,
            Which::Producer,
            Which::Consumer
        ]
    );
    assert_eq!((p.reps, p.events, p.jobs), (3, 100_000, 20_000));
    assert_eq!(p.duration, Duration::from_secs(30));
    assert_eq!(
        p.relay.busy_poll_interval,
        Config::default().busy_poll_interval
    );
    // The relay's defaults but the batch size (crate::relay::defaults says why).
    assert_eq!(
        (p.relay.batch_size, Config::default().batch_size),
        (1000, 500)
    );
    assert_eq!(p.relay.workers, Config::default().workers);
}

#[test]
fn relay_flags_are_the_relays_fields_and_checks() {
    let (_, p) = resolve(&[
        "--batch-size",
        "250",
        "--workers",
        "2",
        "--consolidate-after",
        "0s",
        "--keeping-up-workers",
        "2",
    ])
    .unwrap();
    let c = &*p.relay;
    assert_eq!((c.batch_size, c.workers, c.keeping_up_workers), (250, 2, 2));
    assert_eq!(c.consolidate_after, Duration::ZERO);
    // The JSON report shows them under the keys it always had, nothing else of the relay's.
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["batch_size"], 250);
    assert_eq!(json["consolidate_after"], "0s");
    assert_eq!(json["busy_poll_interval"], "1ms");
    assert!(json.get("database_url").is_none() && json.get("publish_timeout").is_none());
    // What the relay refuses, the bench refuses before it starts, naming the flag.
    for (flags, error) in [
        (&["--workers", "65"][..], "--workers: 65 is outside 1..=64"),
        (
            &["--batch-size", "200000"],
            "--batch-size: 200000 is outside 1..=100000",
        ),
        (&["--workers=-1"], "--workers: invalid value: integer `-1`"),
    ] {
        let e = resolve(flags).unwrap_err();
        assert!(e.starts_with(error), "{flags:?}: {e}");
    }
    let e = resolve(&["--busy-poll-interval", "soon"]).unwrap_err();
    assert!(
        e.contains("--busy-poll-interval") && e.contains("500ms"),
        "{e}"
    );
}

#[test]
fn quick_shrinks_what_was_not_given() {
    let (_, p) = resolve(&["--quick", "--events", "500"]).unwrap();
    assert_eq!((p.reps, p.events, p.jobs), (1, 500, 1000));
    assert_eq!(p.health_duration, Duration::from_secs(3));
    assert_eq!(p.unavailable_afters, [Duration::from_secs(1)]);
    assert_eq!(p.cut_hold, Duration::from_secs(3));
}

#[test]
fn sick_relay_measures_each_unavailable_after() {
    let (which, p) = resolve(&["sick-relay"]).unwrap();
    assert_eq!(which, [Which::SickRelay]);
    let secs: Vec<u64> = p.unavailable_afters.iter().map(|d| d.as_secs()).collect();
    assert_eq!(secs, [1, 2, 3, 5, 10]);
    assert_eq!(p.cut_hold, Duration::from_secs(15));
    let (_, p) = resolve(&["sick-relay", "--unavailable-afters", "0s,500ms"]).unwrap();
    assert_eq!(
        p.unavailable_afters,
        [Duration::ZERO, Duration::from_millis(500)]
    );
    assert_eq!(
        resolve(&["sick-relay", "--cut-hold", "0s"]).unwrap_err(),
        "--cut-hold must be longer than 0"
    );
}

#[test]
fn all_and_table_health_choose_the_benchmarks() {
    assert_eq!(resolve(&["all"]).unwrap().0.len(), 10);
    let (which, p) = resolve(&["--table-health", "2m"]).unwrap();
    assert_eq!(which, [Which::Health]);
    assert_eq!(p.health_duration, Duration::from_secs(120));
}

#[test]
fn a_zero_size_or_duration_is_refused_by_name() {
    for (flags, error) in [
        (&["--workers", "0"][..], "--workers must be at least 1"),
        (&["--rates", "100,0"], "--rates must be at least 1"),
        (
            &["--load-duration", "0s"],
            "--load-duration must be longer than 0",
        ),
        (
            &["--rates", "200000"],
            "--rates 200000: at most 100000 messages/s",
        ),
    ] {
        assert_eq!(resolve(flags).unwrap_err(), error, "{flags:?}");
    }
}
