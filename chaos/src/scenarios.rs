//! Named fault scenarios beyond the seed, each under the same load and judged
//! by the same checker: lost, unexpected, duplicated deliveries, reordered
//! within a chat, unsent in the outbox — all must be zero.

use crate::history::{Kind, Verdict};
use crate::pg::{read_only, sync_standby, terminate, wait_owned_by, worker_sessions};
use crate::world::{Options, Sender, World, LOCK_MS};
use postbox_testkit::PgCluster;
use std::time::{Duration, Instant};

/// Name and one-line description of every scenario.
pub const ALL: &[(&str, &str)] = &[
    ("relay-kill", "two relays; one SIGKILLed and restarted every 600 ms (often between publish and mark)"),
    ("relay-stop-takeover", "a relay SIGSTOPped past its ownership (its sessions terminated), the other takes over, then SIGCONT"),
    ("rolling-deploy", "relay versions overlap: start the new one, SIGTERM the old, twice, under load"),
    ("redis-kill", "Redis SIGKILLed mid-stream and restarted from its AOF"),
    ("redis-hang", "Redis SIGSTOPped for 2.5 s, then resumed"),
    ("pg-terminate", "pg_terminate_backend on every relay session, every second"),
    ("worker-stall", "the workers service SIGSTOPped longer than its job lock, then resumed"),
    ("poison", "a non-object payload and a 2 MB payload are dead-lettered while the chats keep flowing"),
    ("redis-partition", "every Redis connection of the services and relays partitioned for 3 s (through the fault proxy: nothing forwarded, nothing closed), then healed"),
    ("redis-latency", "50 ms added each way on every Redis connection for 3 s"),
    ("pg-immediate-stop", "a harness-owned PostgreSQL stopped with `pg_ctl -m immediate`, restarted 1.5 s later; 5xx answers are indeterminate"),
    ("pg-read-only", "a harness-owned PostgreSQL turned read-only (`default_transaction_read_only`, as for maintenance or a full disk) for 2.5 s: producers get errors, relays and consumers retry, nothing dead-lettered"),
    ("backlog-1m", "the consumers relay stopped while 1,000,000 events pile up in the outbox; a new relay drains them with its resident memory flat and the pending gauge showing the lag, and the chats come through"),
    ("pg-failover", "a harness-owned primary with a synchronous streaming standby; the primary is killed (`pg_ctl -m immediate`) and the standby promoted; services and relays on a two-host URL with target_session_attrs=read-write move to it"),
    ("long-snapshot", "a repeatable-read snapshot held (as pg_dump holds one) while a filler writes 1,000 events/s beside the chats; the relay's lag and CPU per event must not grow with the dead rows it keeps (--hold, default 30 s)"),
    ("idle-writer", "a transaction writes an outbox row and sits idle in transaction, its xid holding the horizon, while a filler writes 1,000 events/s beside the chats; the others' events keep flowing, its own arrives when it commits (--hold, default 30 s)"),
    ("pooler", "services through PgBouncer in transaction mode (unnamed statements), two relays through PgBouncer in session mode; both poolers killed under load and restarted 1 s later"),
    ("pg-partition", "the network between one relay and PostgreSQL drops every packet (fault proxy: nothing forwarded, nothing closed); the server ends its silent sessions after session_timeout, the other relay takes over, the cut-off one resumes when healed"),
];

/// The fast subset CI runs next to the seed scenario.
pub const FAST: &[&str] = &[
    "relay-kill",
    "redis-kill",
    "pg-terminate",
    "poison",
    "redis-partition",
    "pg-immediate-stop",
    "pg-partition",
    "pg-failover",
    "pooler",
];

const CHATS: i64 = 3; // the chat seeds chats 1..=3
const RATE: u64 = 40; // messages per second
const LOAD: Duration = Duration::from_secs(6);

/// Send messages round-robin over the chats at RATE for `duration`; each
/// chat's messages are sent one after the other, so their order is causal.
pub async fn load(sender: Sender, duration: Duration) -> Result<(), chat::Error> {
    let every = Duration::from_micros(1_000_000 / RATE);
    let total = duration.as_millis() as u64 * RATE / 1000;
    let mut next = Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        sender.send_next(1 + (i as i64 % CHATS)).await?;
    }
    Ok(())
}

async fn at(start: Instant, secs: f64) {
    tokio::time::sleep_until((start + Duration::from_secs_f64(secs)).into()).await;
}

/// Run one scenario; prints its verdict; true if clean.
pub async fn run(admin_url: &str, name: &str, hold: Duration) -> Result<bool, chat::Error> {
    let (relays, flags): (usize, Vec<String>) = match name {
        "relay-kill" | "relay-stop-takeover" | "pooler" => (2, vec![]),
        "pg-partition" => (
            2,
            vec!["--session-timeout".into(), PARTITION_SESSION_TIMEOUT.into()],
        ),
        "poison" => (
            1,
            [
                "--max-attempts",
                "3",
                "--retry-base",
                "100ms",
                "--retry-max",
                "300ms",
            ]
            .map(String::from)
            .to_vec(),
        ),
        _ if ALL.iter().any(|(n, _)| *n == name) => (1, vec![]),
        _ => {
            return Err(format!(
                "unknown scenario {name:?}; known: {}",
                ALL.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            )
            .into())
        }
    };
    // Stopped hard below, so not the machine's shared server: one of our own
    // (declared first, so it is dropped — stopped and removed — last).
    let cluster = if matches!(name, "pg-immediate-stop" | "pg-read-only" | "pg-failover") {
        Some(PgCluster::start().await?)
    } else {
        None
    };
    // pg-failover: a synchronous streaming standby of that cluster.
    let standby = match (&cluster, name) {
        (Some(primary), "pg-failover") => Some(sync_standby(primary).await?),
        _ => None,
    };
    let admin_url = cluster
        .as_ref()
        .map_or_else(|| admin_url.to_owned(), |c| c.url());
    let mut w = World::start(
        &admin_url,
        Options {
            v2: true,
            consumers_relays: relays,
            relay_flags: flags.clone(),
            redis_proxy: matches!(name, "redis-partition" | "redis-latency"),
            pg_proxy: name == "pg-partition",
            pooler: name == "pooler",
            db_hosts: standby
                .as_ref()
                .zip(cluster.as_ref())
                .map(|(s, p)| format!("127.0.0.1:{},127.0.0.1:{}", p.port(), s.port())),
            ..Default::default()
        },
    )
    .await?;
    w.consumers.start(&[]).await?;
    w.workers.start(&[]).await?;
    let h = w.history.clone();
    let load_task = tokio::spawn(load(w.sender(), LOAD));
    let t0 = Instant::now();
    let mut extra_ok = true;
    let mut outage = None;

    match name {
        "relay-kill" => {
            let mut i = 0;
            while t0.elapsed() < LOAD {
                at(t0, 0.6 * (i + 1) as f64).await;
                let r = &mut w.consumers.relays[i % 2];
                r.signal("KILL");
                r.wait_exit(Duration::from_secs(5)).await?;
                r.start(&[])?;
                i += 1;
            }
            h.harness("relay", format!("{i} SIGKILLs"));
        }
        "relay-stop-takeover" => {
            at(t0, 1.5).await;
            let (a, b) = (
                w.consumers.relays[0].pid().unwrap(),
                w.consumers.relays[1].pid().unwrap(),
            );
            w.consumers.relays[0].signal("STOP");
            h.harness("relay", "relay #0 SIGSTOPped");
            // Its sessions end (as a network timeout would end them): the locks go with them.
            terminate(&w, &[a]).await?;
            wait_owned_by(&w, b, 64, Duration::from_secs(10)).await?;
            h.harness("relay", "relay #1 owns all 64 partitions");
            at(t0, 4.0).await;
            w.consumers.relays[0].signal("CONT");
            h.harness("relay", "relay #0 SIGCONT");
        }
        "rolling-deploy" => {
            for (round, start_at) in [(1, 1.5), (2, 3.5)] {
                at(t0, start_at).await;
                let mut next =
                    w.new_consumers_relay(&format!("relay(consumers v{})", round + 1), &flags);
                next.start(&[])?;
                let pid = next.pid().unwrap();
                wait_owned_by(&w, pid, 1, Duration::from_secs(10)).await?;
                h.harness("deploy", format!("relay v{} overlaps v{round}", round + 1));
                let mut old = std::mem::replace(&mut w.consumers.relays[0], next);
                old.stop().await?;
                h.harness("deploy", format!("relay v{round} stopped"));
            }
        }
        "redis-kill" => {
            at(t0, 2.0).await;
            w.redis.kill().await?;
            h.harness("redis", "SIGKILL");
            at(t0, 3.5).await;
            w.redis.up().await?;
            h.harness("redis", "up");
        }
        "redis-hang" => {
            at(t0, 2.0).await;
            w.redis.signal("STOP");
            h.harness("redis", "SIGSTOP");
            at(t0, 4.5).await;
            w.redis.signal("CONT");
            h.harness("redis", "SIGCONT");
        }
        "pg-terminate" => {
            for i in 1..=5 {
                at(t0, i as f64).await;
                let pids: Vec<u32> = w
                    .consumers
                    .relays
                    .iter()
                    .chain(&w.workers.relays)
                    .filter_map(|r| r.pid())
                    .collect();
                let n = terminate(&w, &pids).await?;
                h.harness("postgres", format!("terminated {n} relay sessions"));
            }
        }
        "worker-stall" => {
            at(t0, 2.0).await;
            w.workers.svc.signal("STOP");
            h.harness("workers", "SIGSTOP");
            tokio::time::sleep(Duration::from_millis(LOCK_MS + 2000)).await;
            w.workers.svc.signal("CONT");
            h.harness("workers", "SIGCONT");
        }
        "poison" => {
            at(t0, 1.0).await;
            sqlx::query(&format!(
                "INSERT INTO {s}.outbox (topic, event, key, payload) VALUES
                   ($1, 'message.created', 'poison', '42'),
                   ($1, 'message.created', 'poison', jsonb_build_object('pad', repeat('x', 2 * 1024 * 1024)))",
                s = w.consumers.schema
            ))
            .bind(format!("chat-to-{}", w.workers.schema))
            .execute(&w.admin)
            .await?;
            h.harness("producer", "two poison rows written with plain SQL");
        }
        "redis-partition" => {
            let proxy = w.proxy.as_ref().expect("proxied");
            at(t0, 2.0).await;
            proxy.partition();
            h.harness("proxy", "Redis partitioned");
            at(t0, 5.0).await;
            proxy.heal();
            h.harness("proxy", "healed");
        }
        "redis-latency" => {
            let proxy = w.proxy.as_ref().expect("proxied");
            at(t0, 1.5).await;
            proxy.latency(Duration::from_millis(50));
            h.harness("proxy", "+50 ms each way");
            at(t0, 4.5).await;
            proxy.pass();
            h.harness("proxy", "latency removed");
        }
        "pg-immediate-stop" => {
            let cluster = cluster.as_ref().expect("own cluster");
            at(t0, 2.0).await;
            cluster.stop_immediate().await?;
            h.harness("postgres", "stopped (immediate)");
            tokio::time::sleep(Duration::from_millis(1500)).await;
            cluster.up().await?;
            h.harness("postgres", "up (recovered)");
        }
        "pg-read-only" => {
            let cluster = cluster.as_ref().expect("own cluster");
            at(t0, 2.0).await;
            read_only(&cluster.url(), true).await?;
            h.harness("postgres", "read-only");
            at(t0, 4.5).await;
            read_only(&cluster.url(), false).await?;
            h.harness("postgres", "writable again");
        }
        "pg-partition" => {
            let proxy = w.pg_proxy.as_ref().expect("proxied");
            let (cut, other) = (
                w.consumers.relays[0].pid().unwrap(),
                w.consumers.relays[1].pid().unwrap(),
            );
            at(t0, 1.5).await;
            proxy.partition();
            let partitioned = Instant::now();
            h.harness("proxy", "relay #0 ↔ PostgreSQL partitioned");
            wait_owned_by(&w, other, 64, Duration::from_secs(30)).await?;
            let takeover = partitioned.elapsed();
            // The takeover came from the server ending the silent sessions
            // (their locks went with them), not from anything closing them.
            let left = worker_sessions(&w, cut).await?;
            h.harness(
                "relay",
                format!("relay #1 owns all 64 partitions {takeover:.1?} after the cut"),
            );
            println!(
                "takeover: relay #1 owned all 64 partitions {:.1} s after the cut (session_timeout {PARTITION_SESSION_TIMEOUT}); worker sessions of the cut-off relay left on the server: {left}",
                takeover.as_secs_f64()
            );
            extra_ok = left == 0;
            tokio::time::sleep(Duration::from_secs(1)).await;
            proxy.heal();
            h.harness("proxy", "healed");
            wait_owned_by(&w, cut, 1, Duration::from_secs(30)).await?;
            h.harness("relay", "relay #0 owns partitions again");
        }
        "pooler" => {
            at(t0, 2.0).await;
            let p = w.poolers.as_mut().expect("poolers");
            p.services.kill();
            p.relays.kill();
            let down = h.elapsed();
            h.harness("pgbouncer", "both poolers killed");
            at(t0, 3.0).await;
            p.services.restart().await;
            p.relays.restart().await;
            let up = h.elapsed();
            h.harness("pgbouncer", "both poolers up");
            // Outside the outage every answer is a 201: a 5xx there would be
            // a statement the pooler broke (a named one on a shared session).
            outage = Some((down, up + 1.0));
        }
        "long-snapshot" | "idle-writer" => {
            at(t0, 0.5).await;
            extra_ok = crate::horizon::run(&w, name == "idle-writer", hold).await?;
        }
        "backlog-1m" => {
            at(t0, 0.5).await;
            let port = crate::backlog::pile_up(&mut w).await?;
            extra_ok = crate::backlog::watch_drain(&w, port, Duration::from_secs(900)).await?;
        }
        "pg-failover" => {
            let (primary, standby) = (cluster.as_ref().unwrap(), standby.as_ref().unwrap());
            at(t0, 2.0).await;
            primary.stop_immediate().await?;
            let killed = Instant::now();
            h.harness("postgres", "primary killed (immediate)");
            tokio::time::sleep(Duration::from_millis(500)).await;
            standby.promote().await?;
            h.harness("postgres", "standby promoted");
            // The harness's own checks read the new primary from now on.
            w.admin = sqlx::PgPool::connect(&standby.url()).await?;
            wait_owned_by(
                &w,
                w.consumers.relays[0].pid().unwrap(),
                64,
                Duration::from_secs(30),
            )
            .await?;
            println!(
                "failover: the relay owned all 64 partitions on the new primary {:.1} s after the old one died (promotion took 0.5 s)",
                killed.elapsed().as_secs_f64()
            );
        }
        _ => unreachable!(),
    }
    load_task.await??;
    w.converge(Duration::from_secs(60)).await?;

    if let Some((from, to)) = outage {
        let outside = h
            .entries()
            .iter()
            .filter(|e| matches!(e.kind, Kind::Indeterminate(_)) && (e.at < from || e.at > to))
            .count();
        println!("answers other than 201 outside the pooler outage: {outside}");
        extra_ok = outside == 0;
    }

    if name == "pg-read-only" {
        // A read-only database is the database's trouble, never the events'.
        let dead: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.outbox_dead_letter",
            w.consumers.schema
        ))
        .fetch_one(&w.admin)
        .await?;
        extra_ok = dead == 0;
        println!("dead letters: {dead}");
    }
    if name == "poison" {
        let reasons: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT last_error FROM {}.outbox_dead_letter ORDER BY id",
            w.consumers.schema
        ))
        .fetch_all(&w.admin)
        .await?;
        extra_ok = reasons.len() == 2
            && reasons[0].contains("must be a JSON object")
            && reasons[1].contains("over bullmq.max_job_bytes");
        println!(
            "dead letters: {}",
            reasons
                .iter()
                .map(|r| format!("\n  {r}"))
                .collect::<String>()
        );
    }
    let unsent = w.unsent().await?;
    if unsent.unwrap_or(0) > 0 {
        print!("{}", w.unsent_rows().await?);
    }
    // Looked up while the schemas still exist; judged once every process has stopped.
    let explained = w.explain(&h.verdict(unsent).lost).await;
    w.finish().await?;
    let v = h.verdict(unsent);
    let ok = v.clean() && extra_ok;
    println!("{}", verdict_line(&format!("scenario {name}"), &v, ok));
    if !ok || std::env::var("CHAOS_TIMELINE").is_ok() {
        print!("{}", h.timeline());
    }
    if !v.clean() {
        print!("{}", v.summary());
        if !explained.is_empty() {
            print!("where the lost messages are:\n{explained}");
        }
    }
    drop(cluster);
    Ok(ok)
}

/// `<label>: saved …, lost 0, unexpected 0, duplicated 0, reordered 0, unsent 0 → ok`,
/// then the indeterminate messages, if any.
pub fn verdict_line(label: &str, v: &Verdict, ok: bool) -> String {
    let mut line = format!(
        "{label}: saved {}, shown {}, lost {}, unexpected {}, duplicated {}, reordered {}, unsent {} → {}",
        v.saved,
        v.received,
        v.lost.len(),
        v.unexpected.len(),
        v.duplicated.len(),
        v.reordered,
        v.unsent.unwrap_or(0),
        if ok { "ok" } else { "FAILED" }
    );
    if v.indeterminate > 0 {
        line.push_str(&format!(
            " (indeterminate {}, {} delivered)",
            v.indeterminate, v.indeterminate_delivered
        ));
    }
    line
}

/// The scenario's relays give a silent database session up after this.
const PARTITION_SESSION_TIMEOUT: &str = "3s";
