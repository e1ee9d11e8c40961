//! The seed scenario, end to end, as CI runs it: v1 loses what sat in memory,
//! v2 loses nothing and its inbox skips the redelivery; then the fast fault
//! scenarios and a short seeded soak.

use std::process::Command;

/// Run `chaos <args> --admin-url <test database>`; its stdout, after asserting it succeeded.
fn chaos(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(args)
        .args(["--admin-url", &postbox_testkit::database_url()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chaos {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The seed's v2 verdict: nothing lost, the one redelivery skipped, the checker clean.
fn assert_seed_clean(stdout: &str) {
    assert!(
        stdout.contains("saved by consumers: 10   received by workers: 10   duplicates skipped: 1\nlost: none\nunsent in outbox: 0\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "checker: lost 0, unexpected 0, duplicated deliveries 0, reordered 0, unsent 0"
        ),
        "{stdout}"
    );
}

#[test]
fn seed_scenario_v1_loses_v2_does_not() {
    let bin = env!("CARGO_BIN_EXE_chaos");
    let dir = std::path::Path::new(bin).parent().unwrap();
    for sibling in ["chat", "postbox"] {
        assert!(
            dir.join(sibling).exists(),
            "{sibling} is not built next to chaos: run the workspace build (./scripts/test.sh does)"
        );
    }
    let stdout = chaos(&["seed", "--version", "both"]);
    let (v1, v2) = stdout
        .split_once("== seed scenario, v2")
        .expect("both runs printed");
    assert!(
        v1.contains("received by workers: 8   duplicates skipped: 0"),
        "{v1}"
    );
    assert!(v1.contains("lost: msg 7, msg 8"), "{v1}");
    assert_seed_clean(v2);
    assert!(
        v2.contains("msg 2 again, already in inbox, skipped"),
        "{v2}"
    );
}

/// The same experiment with RabbitMQ and then NATS JetStream between the
/// services (own node and server, taken down during messages 7–8): nothing
/// lost, the redelivery after the crash skipped by the inbox.
#[test]
fn seed_scenario_over_rabbitmq_and_nats_loses_nothing() {
    for (broker, title) in [
        ("rabbitmq", "over RabbitMQ"),
        ("nats", "over NATS JetStream"),
    ] {
        let stdout = chaos(&["seed", "--broker", broker, "--version", "v2"]);
        assert!(
            stdout.contains(&format!("== seed scenario, v2 (postbox) {title}")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("{broker}:")),
            "the broker went down: {stdout}"
        );
        assert_seed_clean(&stdout);
    }
}

/// The experiment with the receiving service (workers) in Node.js on the npm
/// package (examples/chat/node), the sender in Rust: the Node inbox skips the
/// redelivery after its own crash, and nothing is lost.
#[test]
fn seed_scenario_with_a_node_service_loses_nothing() {
    let stdout = chaos(&["seed", "--node", "workers", "--version", "v2"]);
    assert!(
        stdout.contains("== seed scenario, v2 (postbox), workers in Node.js"),
        "{stdout}"
    );
    assert!(
        stdout.contains("crashed after recording"),
        "the Node service crashed after its inbox commit: {stdout}"
    );
    assert_seed_clean(&stdout);
}

#[test]
fn fast_fault_scenarios_lose_nothing() {
    let stdout = chaos(&["run", "fast"]);
    for name in [
        "relay-kill",
        "redis-kill",
        "pg-terminate",
        "poison",
        "redis-partition",
        "pg-immediate-stop",
        "pg-partition",
        "pg-failover",
        "pooler",
        "broker-cut-one-relay",
        "broker-down-all-relays",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("scenario {name}:")))
            .unwrap_or_else(|| panic!("no verdict for {name}:\n{stdout}"));
        assert!(
            line.contains("lost 0, unexpected 0, duplicated 0, reordered 0, unsent 0 → ok"),
            "{line}"
        );
    }
    assert!(
        stdout.contains("answers other than 201 outside the outage: 0"),
        "{stdout}"
    );
}

/// A long snapshot and an idle writer beside a 1,000 events/s filler: the
/// checker is clean, the filler's lag stays in bounds, and the idle writer's
/// own event is delivered once it commits (nothing unsent).
#[test]
fn long_transactions_hold_nothing_back() {
    let stdout = chaos(&["run", "long-snapshot", "idle-writer", "--hold", "20s"]);
    for name in ["long-snapshot", "idle-writer"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("scenario {name}:")))
            .unwrap_or_else(|| panic!("no verdict for {name}:\n{stdout}"));
        assert!(
            line.contains("lost 0, unexpected 0, duplicated 0, reordered 0, unsent 0 → ok"),
            "{line}\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("{name}: before the hold: lag p99")),
            "{stdout}"
        );
    }
}

#[test]
fn short_soak_loses_nothing() {
    let bin = env!("CARGO_BIN_EXE_chaos");
    let out = Command::new(bin)
        .args(["soak", "--duration", "20s", "--seed", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chaos soak failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("soak 20s seed 1: saved"))
        .unwrap_or_else(|| panic!("no verdict:\n{stdout}"));
    assert!(
        line.contains("lost 0, unexpected 0, duplicated 0, reordered 0, unsent 0 → ok"),
        "{line}"
    );
    let faults = stdout
        .lines()
        .find(|l| l.starts_with("faults: "))
        .unwrap_or_else(|| panic!("no fault counts:\n{stdout}"));
    let injected: usize = faults["faults: ".len()..]
        .split(", ")
        .filter_map(|f| f.rsplit_once(' ')?.1.parse::<usize>().ok())
        .sum();
    assert!(injected >= 2, "{faults}");
}
