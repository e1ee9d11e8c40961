//! `chaos soak`: one world (two consumers relays, Redis behind the fault
//! proxy, the first relay's PostgreSQL sessions behind another, on a
//! PostgreSQL cluster of its own) under continuous load for a while, with faults drawn by a seeded
//! RNG a few seconds apart; then it converges and the same checker judges the
//! whole history. The seed fixes the sequence of faults and their lengths.

use crate::infra::Proc;
use crate::pg::{read_only, terminate};
use crate::scenarios::{load, verdict_line};
use crate::world::LOCK_MS;
use crate::world::{Options, World};
use postbox_testkit::PgCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    RelayKill,
    RelayStop,
    RedisKill,
    RedisPartition,
    PgTerminate,
    WorkersDeploy,
    ConsumersDeploy,
    RedisHang,
    RedisLatency,
    WorkerStall,
    PgPartition,
    PgImmediateStop,
    PgReadOnly,
}

const FAULTS: [Fault; 13] = [
    Fault::RelayKill,
    Fault::RelayStop,
    Fault::RedisKill,
    Fault::RedisPartition,
    Fault::PgTerminate,
    Fault::WorkersDeploy,
    Fault::ConsumersDeploy,
    Fault::RedisHang,
    Fault::RedisLatency,
    Fault::WorkerStall,
    Fault::PgPartition,
    Fault::PgImmediateStop,
    Fault::PgReadOnly,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::RelayKill => "relay-kill",
            Fault::RelayStop => "relay-stop",
            Fault::RedisKill => "redis-kill",
            Fault::RedisPartition => "redis-partition",
            Fault::PgTerminate => "pg-terminate",
            Fault::WorkersDeploy => "workers-deploy",
            Fault::ConsumersDeploy => "consumers-deploy",
            Fault::RedisHang => "redis-hang",
            Fault::RedisLatency => "redis-latency",
            Fault::WorkerStall => "worker-stall",
            Fault::PgPartition => "pg-partition",
            Fault::PgImmediateStop => "pg-immediate-stop",
            Fault::PgReadOnly => "pg-read-only",
        }
    }
}

/// Soak for `duration`; prints the verdict and the faults; true if clean.
pub async fn run(duration: Duration, seed: Option<u64>) -> Result<bool, chat::Error> {
    let seed = seed.unwrap_or_else(rand::random);
    let label = format!(
        "soak {} seed {seed}",
        humantime_serde::re::humantime::format_duration(duration)
    );
    println!("{label}: starting");
    let mut rng = StdRng::seed_from_u64(seed);
    // PostgreSQL is stopped and made read-only below: a cluster of our own,
    // dropped (stopped, removed) last.
    let cluster = PgCluster::start().await?;
    let mut w = World::start(
        &cluster.url(),
        Options {
            v2: true,
            consumers_relays: 2,
            relay_flags: vec!["--session-timeout".into(), "3s".into()],
            redis_proxy: true,
            pg_proxy: true,
            db_hosts: None,
            ..Default::default()
        },
    )
    .await?;
    w.consumers.start(&[]).await?;
    w.workers.start(&[]).await?;
    let h = w.history.clone();
    let load_task = tokio::spawn(load(w.sender(), duration));
    let end = Instant::now() + duration;
    let mut counts: BTreeMap<&str, usize> = FAULTS.iter().map(|f| (f.name(), 0)).collect();
    let mut next = Instant::now() + Duration::from_millis(rng.random_range(1000..2500));
    // Leave the last second of load fault-free.
    while next + Duration::from_secs(1) < end {
        tokio::time::sleep_until(next.into()).await;
        let fault = FAULTS[rng.random_range(0..FAULTS.len())];
        inject(&mut w, &cluster, fault, &mut rng).await?;
        *counts.get_mut(fault.name()).unwrap() += 1;
        next = Instant::now() + Duration::from_millis(rng.random_range(2000..5000));
    }
    load_task.await??;
    w.converge(Duration::from_secs(90)).await?;
    // A process that died on its own (not by our hand) is a finding too.
    let died: Vec<String> = [&mut w.consumers, &mut w.workers]
        .into_iter()
        .flat_map(|s| std::iter::once(&mut s.svc).chain(s.relays.iter_mut()))
        .filter_map(|p| p.exited().map(|s| format!("{} ({s})", p.name)))
        .collect();
    let unsent = w.unsent().await?;
    // Looked up while the schemas still exist; judged once every process has stopped.
    let explained = w.explain(&h.verdict(unsent)).await;
    w.finish().await?;
    let v = h.verdict(unsent);
    let ok = v.clean() && died.is_empty();
    println!("{}", verdict_line(&label, &v, ok));
    println!(
        "faults: {}",
        counts
            .iter()
            .map(|(f, n)| format!("{f} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !died.is_empty() {
        println!("exited on their own: {}", died.join(", "));
    }
    if !ok || std::env::var("CHAOS_TIMELINE").is_ok() {
        print!("{}", h.timeline());
    }
    if !v.clean() {
        print!("{}", v.summary());
        print!("{explained}");
    }
    drop(cluster);
    Ok(ok)
}

/// Every relay process: the consumers' two, then the workers' one.
fn relays(w: &mut World) -> Vec<&mut Proc> {
    w.consumers
        .relays
        .iter_mut()
        .chain(w.workers.relays.iter_mut())
        .collect()
}

fn hold(rng: &mut StdRng, ms: std::ops::Range<u64>) -> Duration {
    Duration::from_millis(rng.random_range(ms))
}

async fn inject(
    w: &mut World,
    cluster: &PgCluster,
    fault: Fault,
    rng: &mut StdRng,
) -> Result<(), chat::Error> {
    let h = w.history.clone();
    let n_relays = relays(w).len();
    match fault {
        Fault::RelayKill => {
            let i = rng.random_range(0..n_relays);
            let r = &mut relays(w)[i];
            r.signal("KILL");
            r.wait_exit(Duration::from_secs(5)).await?;
            r.start(&[])?;
            h.harness("soak", format!("{} SIGKILLed and restarted", r.name));
        }
        Fault::RelayStop => {
            let i = rng.random_range(0..n_relays);
            let pause = hold(rng, 1000..3000);
            let (name, pid) = {
                let r = &relays(w)[i];
                (r.name.clone(), r.pid())
            };
            relays(w)[i].signal("STOP");
            // Its sessions end, as a network timeout would end them: the others take over.
            let n = terminate(w, &pid.into_iter().collect::<Vec<_>>()).await?;
            h.harness(
                "soak",
                format!("{name} SIGSTOPped, {n} sessions terminated"),
            );
            tokio::time::sleep(pause).await;
            relays(w)[i].signal("CONT");
            h.harness("soak", format!("{name} SIGCONT"));
        }
        Fault::RedisKill => {
            let pause = hold(rng, 300..2000);
            w.redis.kill().await?;
            h.harness("redis", "SIGKILL");
            tokio::time::sleep(pause).await;
            w.redis.up().await?;
            h.harness("redis", "up");
        }
        Fault::RedisPartition => {
            let pause = hold(rng, 1000..4000);
            let proxy = w.proxy.as_ref().expect("soak runs behind the proxy");
            proxy.partition();
            h.harness("proxy", "Redis partitioned");
            tokio::time::sleep(pause).await;
            proxy.heal();
            h.harness("proxy", "healed");
        }
        Fault::PgTerminate => {
            let pids: Vec<u32> = relays(w).iter().filter_map(|r| r.pid()).collect();
            let n = terminate(w, &pids).await?;
            h.harness("postgres", format!("terminated {n} relay sessions"));
        }
        Fault::WorkersDeploy => {
            w.workers.stop().await?;
            h.harness("deploy", "workers stopped");
            w.workers.start(&[]).await?;
            h.harness("deploy", "workers started");
        }
        Fault::ConsumersDeploy => {
            w.consumers.stop().await?;
            h.harness("deploy", "consumers stopped");
            w.consumers.start(&[]).await?;
            h.harness("deploy", "consumers started");
        }
        Fault::RedisHang => {
            let pause = hold(rng, 500..3000);
            w.redis.signal("STOP");
            h.harness("redis", "SIGSTOP");
            tokio::time::sleep(pause).await;
            w.redis.signal("CONT");
            h.harness("redis", "SIGCONT");
        }
        Fault::RedisLatency => {
            let pause = hold(rng, 1000..3000);
            let proxy = w.proxy.as_ref().expect("soak runs behind the proxy");
            proxy.latency(Duration::from_millis(rng.random_range(10..80)));
            h.harness("proxy", "latency added");
            tokio::time::sleep(pause).await;
            proxy.latency(Duration::ZERO);
            h.harness("proxy", "latency removed");
        }
        Fault::WorkerStall => {
            w.workers.svc.signal("STOP");
            h.harness("workers", "SIGSTOP");
            tokio::time::sleep(Duration::from_millis(LOCK_MS + rng.random_range(200..1500))).await;
            w.workers.svc.signal("CONT");
            h.harness("workers", "SIGCONT");
        }
        Fault::PgPartition => {
            // Longer than the relays' session_timeout (3s) half of the time.
            let pause = hold(rng, 1000..6000);
            let proxy = w
                .pg_proxy
                .as_ref()
                .expect("soak proxies relay #0's PostgreSQL");
            proxy.partition();
            h.harness("proxy", "relay #0 ↔ PostgreSQL partitioned");
            tokio::time::sleep(pause).await;
            proxy.heal();
            h.harness("proxy", "relay #0 ↔ PostgreSQL healed");
        }
        Fault::PgImmediateStop => {
            let pause = hold(rng, 300..2000);
            cluster.stop_immediate().await?;
            h.harness("postgres", "stopped (immediate)");
            tokio::time::sleep(pause).await;
            cluster.up().await?;
            h.harness("postgres", "up (recovered)");
        }
        Fault::PgReadOnly => {
            let pause = hold(rng, 1000..3000);
            read_only(&cluster.url(), true).await?;
            h.harness("postgres", "read-only");
            tokio::time::sleep(pause).await;
            read_only(&cluster.url(), false).await?;
            h.harness("postgres", "writable again");
        }
    }
    Ok(())
}
