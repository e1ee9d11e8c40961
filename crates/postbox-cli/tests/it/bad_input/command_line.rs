//! Bad settings, flags and environment: named clearly, with what to do.

use super::*;

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

/// CloudEvents settings: an unknown format or mode names the choices; a
/// `source` that is no URI reference, and a body format beside
/// `format = "cloudevents"`, name the setting and the fix. Nothing starts.
#[test]
fn cloudevents_settings_are_checked_by_name() {
    let db = ["--database-url", "postgres://127.0.0.1:1/db"];
    let run = |args: &[&str]| {
        let all: Vec<&str> = db.iter().chain(args).copied().collect();
        let (ok, out) = relay_output(&all, &[]);
        assert!(!ok, "{args:?} started: {out}");
        out
    };
    let out = run(&["--sink", "nats", "--nats-format", "cloud_events"]);
    assert!(
        out.contains("postbox") && out.contains("cloudevents"),
        "{out}"
    );
    let out = run(&["--sink", "nats", "--nats-cloudevents-mode", "binery"]);
    assert!(
        out.contains("binary") && out.contains("structured"),
        "{out}"
    );
    for source in ["", "//postbox/{db}/{schema}", "//a b/{schema}"] {
        let out = run(&[
            "--sink",
            "nats",
            "--nats-format",
            "cloudevents",
            "--cloudevents-source",
            source,
        ]);
        assert!(
            out.contains("cloudevents_source") && out.contains("//postbox/{database}/{schema}"),
            "{source:?}: {out}"
        );
    }
    let out = run(&["--cloudevents-sources", "salse=urn:sales"]);
    assert!(
        out.contains("cloudevents_sources") && out.contains("\"salse\""),
        "{out}"
    );
    for (sink, setting) in [("kafka", "value"), ("webhook", "body")] {
        let mut args = vec!["--sink", sink, "--kafka-value", "envelope"];
        if sink == "webhook" {
            args = vec![
                "--sink",
                "webhook",
                "--webhook-url",
                "https://h.example/{topic}",
                "--webhook-secrets",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "--webhook-body",
                "envelope",
            ];
        }
        let flag = format!("--{sink}-format");
        args.extend([flag.as_str(), "cloudevents"]);
        let out = run(&args);
        assert!(
            out.contains(&format!("{sink}.{setting}")) && out.contains("leave"),
            "{out}"
        );
    }
}
