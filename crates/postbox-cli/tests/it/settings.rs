//! Each setting is defined once: its flag, variable, default and reference
//! come from the typed sections, and rules between settings are checked at
//! start-up.

use crate::bad_input::relay_output;
use crate::support::*;
use std::process::Command;

/// `docs/settings.toml` is the generated reference; it must match the binary.
#[test]
fn the_settings_reference_in_the_docs_is_current() {
    let out = Command::new(BIN)
        .args(["relay", "--print-config", "--defaults"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/settings.toml");
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        generated == checked_in,
        "docs/settings.toml is out of date: run\n  cargo run -p postbox-cli -- relay --print-config --defaults > docs/settings.toml"
    );
    // Every section, and every sink's flags with their variables.
    for needle in [
        "[relay]",
        "[bullmq]",
        "[kafka]",
        "--kafka-message-timeout, POSTBOX_KAFKA_MESSAGE_TIMEOUT",
        "message_timeout = \"5s\"",
        "--bullmq-redis-url, --redis-url, POSTBOX_BULLMQ_REDIS_URL, POSTBOX_REDIS_URL, REDIS_URL",
        "--database-url, POSTBOX_DATABASE_URL, DATABASE_URL",
    ] {
        assert!(generated.contains(needle), "{needle} missing:\n{generated}");
    }
}

/// The docs book's configuration page is generated from the same fields.
#[test]
fn the_configuration_page_of_the_book_is_current() {
    let out = Command::new(BIN)
        .args(["relay", "--print-config", "--defaults", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/reference/configuration.md"
    );
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        generated == checked_in,
        "docs/src/reference/configuration.md is out of date: run\n  cargo run -p postbox-cli -- relay --print-config --defaults --markdown > docs/src/reference/configuration.md"
    );
    for needle in [
        "## Relay [relay]",
        "| `batch_size` | `500` | `--batch-size`, `POSTBOX_BATCH_SIZE` |",
        "## Amazon SQS sink [sqs]",
    ] {
        assert!(generated.contains(needle), "{needle} missing:\n{generated}");
    }
}

/// `postbox --version`: the release and the commit it was built from.
#[test]
fn version_names_the_release_and_the_commit() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = format!("postbox {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&expected), "{text}");
    let commit = text
        .trim_end()
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .unwrap();
    assert!(
        commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "a 12-digit commit from the checkout's git: {text}"
    );
}

#[test]
fn kafka_message_timeout_must_be_shorter_than_the_publish_timeout() {
    let url = postbox_testkit::database_url();
    let (ok, out) = relay_output(
        &[
            "--database-url",
            &url,
            "--sink",
            "kafka",
            "--kafka-message-timeout",
            "10s",
            "--publish-timeout",
            "5s",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        out.contains("kafka.message_timeout") && out.contains("publish_timeout (5s)"),
        "{out}"
    );
    let (ok, out) = relay_output(&["--kafka-message-timeout", "5000"], &[]);
    assert!(!ok && out.contains("write it like 500ms"), "{out}");
}

#[test]
fn unknown_sinks_and_tables_are_named_with_the_known_ones() {
    let url = postbox_testkit::database_url();
    let (ok, out) = relay_output(&["--database-url", &url, "--sink", "carrier-pigeon"], &[]);
    assert!(
        !ok && out.contains("unknown sink \"carrier-pigeon\"") && out.contains("bullmq, kafka"),
        "{out}"
    );

    let path =
        std::env::temp_dir().join(format!("postbox-tables-{}.toml", postbox_testkit::suffix()));
    std::fs::write(&path, "[smtp]\nurl = \"smtp://x\"\n").unwrap();
    let (ok, out) = relay_output(&["--config", path.to_str().unwrap(), "--print-config"], &[]);
    assert!(
        !ok && out.contains("unknown setting `smtp`") && out.contains("[kafka]"),
        "{out}"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn sink_settings_come_from_file_env_and_flags_with_their_defaults() {
    let (ok, out) = relay_output(
        &[
            "--print-config",
            "--sink",
            "kafka",
            "--kafka-topic-map",
            "a=b,c=d",
        ],
        &[
            ("POSTBOX_KAFKA_BROKERS", "k1:9092,k2:9092"),
            ("POSTBOX_KAFKA_PROPERTIES", "sasl.password=canary"),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("brokers = \"k1:9092,k2:9092\"")
            && out.contains("a = \"b\"")
            && out.contains("message_timeout = \"5s\"")
            && !out.contains("canary"),
        "{out}"
    );
    // The sink not in use is not printed; the one in use gets its defaults.
    let (ok, out) = relay_output(&["--print-config"], &[("POSTBOX_BULLMQ_PREFIX", "mine")]);
    assert!(
        ok && out.contains("prefix = \"mine\"") && !out.contains("[kafka]"),
        "{out}"
    );
}

#[test]
fn every_command_reads_postbox_database_url_and_takes_schemas_one_way() {
    // A closed port: the command must try it (not complain that no URL was given).
    let unreachable = "postgres://postbox@127.0.0.1:1/none";
    for args in [
        vec!["migrate", "--schema", "a,b"],
        vec!["status", "--schemas", "a"],
        vec!["dlq", "list", "--schema", "a"],
        vec![
            "grant", "--schema", "a,b", "--role", "r", "--as", "producer",
        ],
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("DATABASE_URL")
            .env("POSTBOX_DATABASE_URL", unreachable)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("127.0.0.1:1"), "{args:?}: {err}");
    }
    // Dead letters are one schema's: several are refused, saying so.
    for cmd in ["dlq", "inbox-dlq"] {
        let out = Command::new(BIN)
            .args([cmd, "list", "--schema", "a,b"])
            .env("POSTBOX_DATABASE_URL", unreachable)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("one schema at a time"),
            "{cmd}: {err}"
        );
    }
    let grants = Command::new(BIN)
        .args([
            "grant", "--schema", "one,two", "--role", "r", "--as", "relay", "--print",
        ])
        .output()
        .unwrap();
    let grants = String::from_utf8_lossy(&grants.stdout);
    assert!(
        grants.contains("ON SCHEMA one TO r") && grants.contains("ON SCHEMA two TO r"),
        "{grants}"
    );
    let out = Command::new(BIN)
        .args([
            "migrate", "--schema", "one,two", "--schema", "three", "--print",
        ])
        .output()
        .unwrap();
    let sql = String::from_utf8_lossy(&out.stdout);
    for s in ["one", "two", "three"] {
        assert!(
            sql.contains(&format!("CREATE SCHEMA IF NOT EXISTS {s};")),
            "{sql}"
        );
    }
}

/// A setting's former name (`relay.retry_base`, `kafka.topic_map`) still
/// works for one release, in the file, as a flag and as a variable, with a
/// warning naming what to write instead; both names at once is refused.
#[test]
fn former_setting_names_still_work_with_a_warning() {
    let dir = std::env::temp_dir().join(format!("postbox-renamed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("relay.toml");
    std::fs::write(
        &file,
        "sink = \"kafka\"\n[relay]\nretry_base = \"2s\"\n[kafka.topic_map]\n\"payment.completed\" = \"payments\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let (ok, out) = relay_output(&["--config", file, "--print-config"], &[]);
    assert!(ok, "{out}");
    for needle in [
        "retry_min = \"2s\"",
        "[kafka.topics]",
        "\"payment.completed\" = \"payments\"",
        "setting relay.retry_base is deprecated and will be removed: write relay.retry_min (--retry-min, POSTBOX_RETRY_MIN)",
        "setting kafka.topic_map is deprecated and will be removed: write kafka.topics",
    ] {
        assert!(out.contains(needle), "{needle} missing:\n{out}");
    }
    assert!(!out.contains("retry_base ="), "{out}");

    let (ok, out) = relay_output(&["--print-config", "--retry-base", "3s"], &[]);
    assert!(
        ok && out.contains("retry_min = \"3s\"") && out.contains("deprecated"),
        "{out}"
    );
    let (ok, out) = relay_output(&["--print-config"], &[("POSTBOX_RETRY_BASE", "4s")]);
    assert!(
        ok && out.contains("retry_min = \"4s\"") && out.contains("deprecated"),
        "{out}"
    );
    let (ok, out) = relay_output(
        &["--print-config", "--retry-base", "3s", "--retry-min", "5s"],
        &[],
    );
    assert!(
        ok && out.contains("retry_min = \"5s\""),
        "the current name wins: {out}"
    );

    let both = dir.join("both.toml");
    std::fs::write(&both, "[relay]\nretry_base = \"2s\"\nretry_min = \"3s\"\n").unwrap();
    let (ok, out) = relay_output(&["--config", both.to_str().unwrap(), "--print-config"], &[]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("sets both retry_base and retry_min") && out.contains("keep only retry_min"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
