//! Bad input gets a clear error and loses nothing.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

pub(crate) fn relay_output(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("relay")
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("POSTBOX_DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn malformed_config_file_is_named() {
    let path = std::env::temp_dir().join(format!("postbox-bad-{}.toml", postbox_testkit::suffix()));
    std::fs::write(&path, "[relay]\nbatch_size = \"lots\"\n").unwrap();
    let (ok, out) = relay_output(&["--config", path.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(
        out.contains("invalid config file") && out.contains("batch_size"),
        "{out}"
    );

    std::fs::write(&path, "[relay]\nbatch_sise = 5\n").unwrap();
    let (ok, out) = relay_output(&["--config", path.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(
        out.contains("unknown field") && out.contains("batch_sise"),
        "{out}"
    );

    let (ok, out) = relay_output(
        &["--database-url", "postgres://h/db", "--batch-size", "0"],
        &[],
    );
    assert!(!ok);
    assert!(
        out.contains("batch_size") && out.contains("1..=100000"),
        "{out}"
    );

    let (ok, out) = relay_output(
        &["--database-url", "postgres://h/db", "--schemas", "Nope"],
        &[],
    );
    assert!(!ok);
    assert!(out.contains("invalid schema name"), "{out}");

    let (ok, out) = relay_output(&[], &[]);
    assert!(!ok);
    assert!(
        out.contains("database_url") && out.contains("DATABASE_URL"),
        "{out}"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn unreachable_database_and_unknown_schema_exit_non_zero() {
    let canary = "canary-pw-7731";
    let url = format!(
        "postgres://someone:{canary}@127.0.0.1:{}/db",
        postbox_testkit::free_port()
    );
    let (ok, out) = relay_output(&["--database-url", &url], &[]);
    assert!(!ok);
    assert!(out.contains("cannot connect to PostgreSQL"), "{out}");
    assert!(!out.contains(canary), "password leaked: {out}");

    let (ok, out) = relay_output(
        &[
            "--database-url",
            &postbox_testkit::database_url(),
            "--schemas",
            "no_such_schema_here",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        out.contains("has no postbox tables") && out.contains("postbox migrate"),
        "{out}"
    );

    let (ok, out) = relay_output(&["--database-url", &url, "--print-config"], &[]);
    assert!(ok);
    assert!(!out.contains(canary) && out.contains("***"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_that_is_not_an_object_is_dead_lettered_and_others_flow() {
    let ctx = Ctx::new("poison").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, FAST_DEAD_LETTER, &[]);

    // A non-Rust producer wrote a bare number, then more events on the same key and others.
    ctx.produce(vec![ctx.event("p", 1)]).await;
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '42')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    ctx.produce(vec![
        ctx.event("p", 3),
        ctx.event("q", 1),
        ctx.event("q", 2),
    ])
    .await;

    wait_until(
        LONG,
        "the poison row dead-lettered and the rest sent",
        || async { ctx.unsent().await == 0 && ctx.dead_letters().await.len() == 1 },
    )
    .await;
    let dl = ctx.dead_letters().await;
    assert!(
        dl[0].1.contains("must be a JSON object") && dl[0].1.contains("attempt 2 of 2"),
        "{}",
        dl[0].1
    );
    let view = RedisView::new(&redis, &ctx.queue).await;
    let seen = view.waiting().await;
    let p: Vec<u64> = seen.iter().filter(|s| s.1 == "p").map(|s| s.2).collect();
    assert_eq!(
        p,
        vec![1, 3],
        "the key moved on past its dead letter, in order"
    );
    assert_eq!(seen.len(), 4);
    assert!(relay.output().contains("dead-lettered"));
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poison_row_holds_back_its_key_only() {
    let ctx = Ctx::new("hold").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(
        &redis,
        &["--max-attempts", "100", "--retry-min", "30s"],
        &[],
    );
    sqlx::query(&format!("INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '\"str\"')", ctx.schema))
        .bind(&ctx.queue)
        .execute(&ctx.pool)
        .await
        .unwrap();
    ctx.produce(vec![ctx.event("p", 2), ctx.event("q", 1)])
        .await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "other keys flow", || async {
        view.wait_len().await == 1
    })
    .await;
    relay.wait_for_line("will retry", LONG).await;
    // The line is logged just before the relay commits the failure.
    let failure = || async {
        sqlx::query_as::<_, (i32, Option<String>)>(&format!(
            "SELECT attempts, last_error FROM {}.outbox WHERE key = 'p' ORDER BY id LIMIT 1",
            ctx.schema
        ))
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
    };
    wait_until(LONG, "the failure committed", || async {
        failure().await.1.is_some()
    })
    .await;
    let (attempts, err) = failure().await;
    let err = err.unwrap();
    assert_eq!(attempts, 1);
    assert!(err.contains("a string"), "{err}");
    // p:2 waits behind the poison row for its whole backoff.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        view.waiting().await.iter().filter(|s| s.1 == "p").count(),
        0
    );
    drop(relay);
    ctx.cleanup().await;
}

/// A retry comes when the log says it will, even sooner than the poll
/// interval: the worker sleeps until the next waiting row is due. (It once
/// waited for the next poll, so `--retry-min 100ms` retried every second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_shorter_than_the_poll_interval_come_on_time() {
    let ctx = Ctx::new("retry_due").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(
        &redis,
        &[
            "--max-attempts",
            "5",
            "--retry-min",
            "100ms",
            "--retry-max",
            "100ms",
            "--poll-interval",
            "10s",
        ],
        &[],
    );
    sqlx::query(&format!("INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '\"str\"')", ctx.schema))
        .bind(&ctx.queue)
        .execute(&ctx.pool)
        .await
        .unwrap();
    let took = || async {
        sqlx::query_scalar::<_, Option<f64>>(&format!(
            "SELECT extract(epoch FROM dead_at - created_at)::float8 FROM {}.outbox_dead_letter",
            ctx.schema
        ))
        .fetch_optional(&ctx.pool)
        .await
        .unwrap()
        .flatten()
    };
    wait_until(LONG, "the row dead-lettered after 5 attempts", || async {
        took().await.is_some()
    })
    .await;
    // Four retries 100 ms apart, not four polls 10 s apart.
    let took = took().await.unwrap();
    assert!(
        took < 5.0,
        "5 attempts took {took:.1}s:\n{}",
        relay.output()
    );
    drop(relay);
    ctx.cleanup().await;
}

#[test]
fn settings_layer_file_then_env_then_flags() {
    let path = std::env::temp_dir().join(format!("postbox-ok-{}.toml", postbox_testkit::suffix()));
    std::fs::write(
        &path,
        "[relay]\ndatabase_url = \"postgres://u:filepw@h/db\"\nschemas = [\"from_file\"]\nbatch_size = 7\nworkers = 3\n\n[bullmq]\nprefix = \"custom\"\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let (ok, out) = relay_output(&["--config", file, "--print-config"], &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("batch_size = 7")
            && out.contains("workers = 3")
            && out.contains("\"from_file\""),
        "{out}"
    );
    assert!(
        out.contains("prefix = \"custom\"") && !out.contains("filepw"),
        "{out}"
    );

    let (ok, out) = relay_output(
        &["--config", file, "--print-config"],
        &[("POSTBOX_BATCH_SIZE", "9")],
    );
    assert!(
        ok && out.contains("batch_size = 9") && out.contains("workers = 3"),
        "{out}"
    );

    let (ok, out) = relay_output(
        &["--config", file, "--print-config", "--batch-size", "11"],
        &[("POSTBOX_BATCH_SIZE", "9")],
    );
    assert!(ok && out.contains("batch_size = 11"), "{out}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn help_documents_every_option_with_its_default() {
    let out = Command::new(BIN)
        .args(["relay", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--database-url",
        "--schemas",
        "--workers",
        "--batch-size",
        "--poll-interval",
        "--rebalance-interval",
        "--publish-timeout",
        "--backoff-min",
        "--backoff-max",
        "--max-attempts",
        "--retry-min",
        "--retry-max",
        "--bullmq-redis-url",
        "--bullmq-prefix",
        "--bullmq-payload",
        "--bullmq-max-job-bytes",
        "--sink",
        "--kafka-brokers",
        "--kafka-value",
        "--kafka-message-timeout",
    ] {
        // The option's block: its line and what follows up to the next option.
        let mut lines = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(&format!("{opt} ")));
        let first = lines.next().unwrap_or_default();
        let rest: Vec<&str> = lines
            .take_while(|l| !l.trim_start().starts_with("--"))
            .collect();
        let block = format!("{first} {}", rest.join(" "));
        assert!(
            block.contains("default") || opt == "--database-url",
            "{opt} has no default in --help: {block}"
        );
        assert!(
            block.contains("env: POSTBOX_"),
            "{opt} does not show its env var: {block}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_policy_holds_the_key_until_an_operator_acts() {
    let ctx = Ctx::new("block").await;
    let redis = postbox_testkit::redis_url();
    let blocked = format!("{}*", ctx.queue);
    let relay = ctx.relay(
        &redis,
        &[FAST_DEAD_LETTER, &["--block-topics", &blocked]].concat(),
        &[],
    );
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '7')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    ctx.produce(vec![ctx.event("p", 2), ctx.event("q", 1)])
        .await;
    relay.wait_for_line("its key is blocked", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "the other key flows", || async {
        view.wait_len().await == 1
    })
    .await;
    assert!(
        ctx.dead_letters().await.is_empty(),
        "block, not dead-letter"
    );
    let (attempts, blocked): (i32, bool) = sqlx::query_as(&format!("SELECT attempts, next_attempt_at = 'infinity' FROM {}.outbox WHERE key = 'p' ORDER BY id LIMIT 1", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!((attempts, blocked), (2, true));
    // The operator fixes the row and releases it: the key resumes, in order.
    sqlx::query(&format!(
        "UPDATE {}.outbox SET payload = '{{\"key\":\"p\",\"seq\":1}}', next_attempt_at = NULL WHERE key = 'p' AND next_attempt_at = 'infinity'",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(LONG, "the blocked key delivered after the fix", || async {
        ctx.unsent().await == 0
    })
    .await;
    let p: Vec<u64> = view
        .waiting()
        .await
        .iter()
        .filter(|s| s.1 == "p")
        .map(|s| s.2)
        .collect();
    assert_eq!(p, vec![1, 2]);
    drop(relay);
    ctx.cleanup().await;
}

/// Logs written to a pipe or a file carry no terminal colour codes.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let url = format!("postgres://u@127.0.0.1:{}/db", postbox_testkit::free_port());
    let (ok, out) = relay_output(&["--database-url", &url], &[]);
    assert!(!ok);
    assert!(out.contains("starting relay"), "{out}");
    assert!(
        !out.contains('\u{1b}'),
        "ANSI escape in piped logs: {out:?}"
    );
}

/// `postbox bench` is no command of this binary: clap refuses it and names
/// the binary the benchmarks moved to.
#[test]
fn bench_names_the_binary_it_moved_to() {
    let out = Command::new(BIN).args(["bench", "drain"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized subcommand 'bench'") && stderr.contains("postbox-bench"),
        "{stderr}"
    );
}

/// Every command outside the relay takes the database from the same flag as
/// the relay: `--database-url`, else `POSTBOX_DATABASE_URL`, else
/// `DATABASE_URL`; with none, it says all three. (Each loser below points at
/// a port nothing listens on, so the error shows which one was used.)
#[test]
fn every_command_finds_the_database_the_same_way() {
    let dead = "postgres://postgres@127.0.0.1:1/none";
    let good = postbox_testkit::database_url();
    let run = |cmd: &[&str], flag: Option<&str>, ours: Option<&str>, conventional: Option<&str>| {
        let mut c = Command::new(BIN);
        c.args(cmd)
            .env_remove("DATABASE_URL")
            .env_remove("POSTBOX_DATABASE_URL");
        if let Some(u) = flag {
            c.args(["--database-url", u]);
        }
        if let Some(u) = ours {
            c.env("POSTBOX_DATABASE_URL", u);
        }
        if let Some(u) = conventional {
            c.env("DATABASE_URL", u);
        }
        let out = c.output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let commands: [&[&str]; 5] = [
        &["status", "--schema", "no_such_schema"],
        &["migrate", "--schema", "no_such_schema", "--notify", "off"],
        &[
            "grant",
            "--schema",
            "no_such_schema",
            "--role",
            "nobody",
            "--as",
            "producer",
        ],
        &["dlq", "list", "--schema", "no_such_schema"],
        &["inbox-dlq", "list", "--schema", "no_such_schema"],
    ];
    for cmd in commands {
        let none = run(cmd, None, None, None);
        assert!(
            none.contains(
                "no database: pass --database-url or set POSTBOX_DATABASE_URL or DATABASE_URL"
            ),
            "{cmd:?}: {none}"
        );
        // The flag wins over both variables, ours over the conventional one.
        for out in [
            run(cmd, Some(dead), Some(&good), Some(&good)),
            run(cmd, None, Some(dead), Some(&good)),
            run(cmd, None, None, Some(dead)),
        ] {
            assert!(out.contains("127.0.0.1:1"), "{cmd:?}: {out}");
        }
        if cmd[0] != "migrate" {
            // (migrate would create the schema there.)
            let used = run(cmd, Some(&good), Some(dead), Some(dead));
            assert!(!used.contains("127.0.0.1:1"), "{cmd:?}: {used}");
        }
    }
}
