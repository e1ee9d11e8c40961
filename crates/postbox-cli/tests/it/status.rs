//! `postbox status`: backlog per topic and partition ownership per relay instance.

use crate::dlq::cli;
use crate::support::*;
use serde_json::Value;
use sqlx::Connection;

/// `postbox status --json` for `schemas`.
async fn status_json(schemas: &[&str]) -> Value {
    let url = postbox_testkit::database_url();
    let mut args = vec!["status", "--database-url", &url, "--json"];
    for s in schemas {
        args.extend(["--schema", s]);
    }
    let (ok, out, err) = cli(&args).await;
    assert!(ok, "postbox {args:?} failed:\n{out}{err}");
    serde_json::from_str(&out).unwrap()
}

/// Whether the relays of `st` are exactly the processes `pids`, owning all
/// partitions between them, each some, none twice.
fn split_between(st: &Value, pids: &[u32]) -> bool {
    let relays = st["relays"].as_array().unwrap();
    let mut procs: Vec<u64> = relays
        .iter()
        .filter_map(|r| r["process_id"].as_u64())
        .collect();
    procs.sort_unstable();
    let mut want: Vec<u64> = pids.iter().map(|&p| u64::from(p)).collect();
    want.sort_unstable();
    let mut all: Vec<i64> = relays
        .iter()
        .flat_map(|r| r["partitions"].as_array().unwrap())
        .map(|p| p.as_i64().unwrap())
        .collect();
    all.sort_unstable();
    procs == want
        && relays
            .iter()
            .all(|r| !r["partitions"].as_array().unwrap().is_empty())
        && all == (0..64).collect::<Vec<i64>>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_two_relays_sharing_the_partitions() {
    let ctx = Ctx::new("stlive").await;
    let redis = postbox_testkit::redis_url();
    let r1 = ctx.relay(&redis, &[], &[]);
    let r2 = ctx.relay(&redis, &["--workers", "2"], &[]);
    let pids = [r1.pid(), r2.pid()];
    wait_until(LONG, "two relays owning all 64 partitions", || async {
        split_between(&status_json(&[&ctx.schema]).await[0], &pids)
    })
    .await;
    let st = &status_json(&[&ctx.schema]).await[0];
    assert_eq!(st["partitions_owned"], 64);
    assert_eq!(st["partitions_unowned"], "");
    for r in st["relays"].as_array().unwrap() {
        let name = r["instance"].as_str().unwrap();
        let pid = r["process_id"].as_u64().unwrap();
        assert!(name.starts_with(&format!("postbox-relay:{pid}:")), "{r}");
        let sessions = if pid == u64::from(r2.pid()) { 2 } else { 4 };
        assert_eq!(r["sessions"], sessions, "{r}");
        assert_eq!(r["backend_pids"].as_array().unwrap().len(), sessions);
        assert!(r["session_start"].is_string(), "{r}");
        assert!(r["last_active"].is_string(), "{r}");
        assert_eq!(r["version"], env!("CARGO_PKG_VERSION"), "{r}");
        assert!(!r["partition_ranges"].as_str().unwrap().is_empty(), "{r}");
    }

    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("postbox-relay:{}:", r1.pid()))
            && out.contains(&format!("postbox-relay:{}:", r2.pid()))
            && out.contains("64 of 64 partitions owned"),
        "{out}"
    );
    drop((r1, r2));
    ctx.cleanup().await;
}

#[tokio::test]
async fn status_counts_pending_retrying_and_dead_letters_per_topic() {
    // No relay on this schema: what is inserted stays put.
    let ctx = Ctx::new("stidle").await;
    let s = ctx.schema.as_str();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload, created_at, attempts, next_attempt_at, sent_at) VALUES
            ('t1', 'e', 'a', '{{}}', now() - interval '90 seconds', 0, NULL, NULL),
            ('t1', 'e', 'b', '{{}}', now() - interval '30 seconds', 0, NULL, NULL),
            ('t1', 'e', 'a', '{{}}', now(), 0, NULL, NULL),
            ('t1', 'e', 'c', '{{}}', now() - interval '1 hour', 0, NULL, now()),
            ('t2', 'e', 'd', '{{}}', now() - interval '5 seconds', 2, now() + interval '1 hour', NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox_dead_letter
                (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
         VALUES (1000, gen_random_uuid(), 't1', 'e', 'x', '1', '{{}}', now(), 3, 'boom'),
                (1001, gen_random_uuid(), 't3', 'e', 'x', '1', '{{}}', now(), 3, 'boom')"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    // The consumers' dead letters count too, per consumer.
    sqlx::query(&format!(
        "INSERT INTO {s}.inbox_dead_letter
                (consumer, message_id, topic, payload, headers, source, attempts, last_error, replay_at)
         VALUES ('shipping', 'm1', 't1', '\\x', '[]', 'q', 3, 'boom', NULL),
                ('shipping', 'm2', 't1', '\\x', '[]', 'q', 3, 'boom', now()),
                ('billing', 'm1', 't1', '\\x', '[]', 'q', 3, 'boom', NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();

    let st = &status_json(&[s]).await[0];
    assert_eq!(st["schema"], s);
    assert_eq!(st["read_path"], "position");
    assert_eq!(st["wake_up"], "adaptive");
    assert_eq!(st["consumer_dead_letters"], 3);
    assert_eq!(
        st["consumers"],
        serde_json::json!([
            {"consumer": "billing", "dead_letters": 1, "replay_waiting": 0},
            {"consumer": "shipping", "dead_letters": 2, "replay_waiting": 1}
        ])
    );
    assert_eq!(
        (&st["pending"], &st["retrying"], &st["dead_letters"]),
        (&4.into(), &1.into(), &2.into())
    );
    let topics = st["topics"].as_array().unwrap();
    let names: Vec<&str> = topics
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["t1", "t2", "t3"]);
    let age = |t: &Value| t["oldest_pending_age_seconds"].as_f64().unwrap();
    assert_eq!(
        (
            &topics[0]["pending"],
            &topics[0]["retrying"],
            &topics[0]["dead_letters"]
        ),
        (&3.into(), &0.into(), &1.into())
    );
    assert!((90.0..120.0).contains(&age(&topics[0])), "{}", topics[0]);
    assert_eq!(
        (
            &topics[1]["pending"],
            &topics[1]["retrying"],
            &topics[1]["dead_letters"]
        ),
        (&1.into(), &1.into(), &0.into())
    );
    assert!((5.0..35.0).contains(&age(&topics[1])), "{}", topics[1]);
    assert_eq!(topics[2]["pending"], 0);
    assert!(topics[2]["oldest_pending_age_seconds"].is_null());
    assert!((90.0..120.0).contains(&st["oldest_pending_age_seconds"].as_f64().unwrap()));
    assert_eq!(st["relays"], serde_json::json!([]));
    assert_eq!(st["partitions_unowned"], "0-63");

    // Several schemas at once, in the order given; tables by default.
    let other = Ctx::new("stidle2").await;
    let both = status_json(&[s, &other.schema]).await;
    assert_eq!(both.as_array().unwrap().len(), 2);
    assert_eq!(both[1]["schema"], other.schema.as_str());
    assert_eq!(both[1]["pending"], 0);
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", s]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("schema {s}: 4 pending (oldest 1m3"))
            && out.contains("2 dead letter(s), 3 consumer dead letter(s)")
            && out.contains("wake-up: adaptive")
            && out.contains("relays: none"),
        "{out}"
    );

    // An unknown schema says what to do.
    let (ok, _, err) = cli(&[
        "status",
        "--database-url",
        &url,
        "--schema",
        s,
        "--schema",
        "t_no_such_schema_st",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.contains("t_no_such_schema_st") && err.contains("postbox migrate"),
        "{err}"
    );
    other.cleanup().await;
    ctx.cleanup().await;
}

/// A schema one migration behind (mid-upgrade) is still reported, with the
/// read path its old relays use and the command that moves it on.
#[tokio::test]
async fn status_names_the_read_path_of_a_schema_before_0010() {
    let ctx = Ctx::new("stpath").await;
    sqlx::query(&format!(
        "DELETE FROM {}.postbox_migrations WHERE version >= 10",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(status_json(&[&ctx.schema]).await[0]["read_path"], "head");
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(ok, "{err}");
    assert!(out.contains("run `postbox migrate` (0010)"), "{out}");
    ctx.cleanup().await;
}

/// A relay's health record written by hand (what a relay writes every
/// `health_interval`, migration 0013), so these tests do not depend on a
/// relay's own.
pub(crate) struct FakeRelay<'a> {
    /// `postbox-relay:<pid>:<id>`.
    pub(crate) instance: &'a str,
    pub(crate) host: &'a str,
    /// Its one sink.
    pub(crate) sink: &'a str,
    /// Its sink unavailable for three minutes, with this error.
    pub(crate) error: Option<&'a str>,
    /// The record two minutes old, and expired.
    pub(crate) stale: bool,
    /// Sent in its last second.
    pub(crate) sent: i64,
    /// Partitions whose locks a session holds under the relay's
    /// application_name, as its workers would.
    pub(crate) partitions: std::ops::Range<i32>,
}

impl FakeRelay<'_> {
    /// Write its record on `schema`, and take its partitions: the session
    /// that holds them, when there are any (closing it ends them).
    pub(crate) async fn write(&self, schema: &str) -> Option<sqlx::PgConnection> {
        let pool = postbox_testkit::pool().await;
        sqlx::query(&format!(
            "INSERT INTO {schema}.outbox_relays
                    (instance, version, host, started_at, reported_at, expires_at, taking_partitions,
                     owned_partitions, unavailable_since, last_publish_at, confirmed_at, sent_last_interval,
                     interval_ms, sinks)
             SELECT $1, '0.1.0', $2, now() - interval '1 hour', reported, expires, $3::text IS NULL,
                    $4, down, now() - interval '200 seconds',
                    CASE WHEN $3::text IS NULL THEN reported END, $5, 1000,
                    jsonb_build_array(jsonb_build_object(
                        'sink', $7::text,
                        'state', CASE WHEN $3::text IS NULL THEN 'publishing' ELSE 'unavailable' END,
                        'since', down, 'error', $3::text,
                        'last_publish_at', now() - interval '200 seconds'))
               FROM (SELECT CASE WHEN $6 THEN now() - interval '2 minutes' ELSE now() END AS reported,
                            CASE WHEN $6 THEN now() - interval '110 seconds' ELSE now() + interval '1 hour' END AS expires,
                            CASE WHEN $3::text IS NULL THEN NULL ELSE now() - interval '3 minutes' END AS down) t"
        ))
        .bind(self.instance)
        .bind(self.host)
        .bind(self.error)
        .bind(self.partitions.len() as i32)
        .bind(self.sent)
        .bind(self.stale)
        .bind(self.sink)
        .execute(&pool)
        .await
        .unwrap();
        if self.partitions.is_empty() {
            return None;
        }
        let opts: sqlx::postgres::PgConnectOptions =
            postbox_testkit::database_url().parse().unwrap();
        let app = format!("{}@0.1.0:worker", self.instance);
        let mut session = sqlx::PgConnection::connect_with(&opts.application_name(&app))
            .await
            .unwrap();
        sqlx::query(
            "SELECT pg_advisory_lock(hashtext('postbox.partition.' || $1), p)
               FROM generate_series($2::int, $3::int) p",
        )
        .bind(schema)
        .bind(self.partitions.start)
        .bind(self.partitions.end - 1)
        .execute(&mut session)
        .await
        .unwrap();
        Some(session)
    }
}

/// A relay publishing through one `bullmq` sink, owning nothing.
pub(crate) fn fake<'a>(instance: &'a str, host: &'a str) -> FakeRelay<'a> {
    FakeRelay {
        instance,
        host,
        sink: "bullmq",
        error: None,
        stale: false,
        sent: 0,
        partitions: 0..0,
    }
}

/// Relays in trouble, from their health records: one owning partitions
/// while its sink cannot publish, one standing by, one whose record went
/// stale, beside one that publishes. `postbox status` (text and JSON) and the
/// console's overview name each one's state, host and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_the_console_show_relays_that_cannot_publish_stand_by_or_went_stale() {
    let ctx = Ctx::new("sthealth").await;
    let s = ctx.schema.as_str();
    let refused = "Connection refused (os error 111)";
    let cannot = FakeRelay {
        error: Some(refused),
        partitions: 0..16,
        ..fake("postbox-relay:4242:c0ffee", "web-1")
    }
    .write(s)
    .await;
    // What a broker answers reaches the page: maud escapes it.
    let html_error = "<img src=x onerror=alert(1)> refused";
    FakeRelay {
        error: Some(html_error),
        ..fake("postbox-relay:4343:beef", "web-2")
    }
    .write(s)
    .await;
    FakeRelay {
        stale: true,
        ..fake("postbox-relay:4444:dead", "web-3")
    }
    .write(s)
    .await;
    let publishing = FakeRelay {
        sent: 250,
        partitions: 16..64,
        ..fake("postbox-relay:4545:abcd", "web-4")
    }
    .write(s)
    .await;

    // --json: each relay's state, summary and own report.
    let st = &status_json(&[s]).await[0];
    assert_eq!(st["relays_cannot_publish"], 1, "{st}");
    assert_eq!(st["relays_stale"], 1, "{st}");
    assert_eq!(st["partitions_owned"], 64, "{st}");
    let relays = st["relays"].as_array().unwrap();
    let names: Vec<&str> = relays
        .iter()
        .map(|r| r["instance"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "postbox-relay:4242:c0ffee@0.1.0",
            "postbox-relay:4343:beef",
            "postbox-relay:4444:dead",
            "postbox-relay:4545:abcd@0.1.0"
        ],
        "{st}"
    );
    let states: Vec<&str> = relays
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["cannot_publish", "standing_by", "stale", "publishing"],
        "{st}"
    );
    let [c, b, d, p] = [&relays[0], &relays[1], &relays[2], &relays[3]];
    assert_eq!(
        (&c["sessions"], &c["partition_ranges"]),
        (&1.into(), &"0-15".into()),
        "{c}"
    );
    assert_eq!(c["health"]["host"], "web-1", "{c}");
    assert_eq!(c["health"]["sinks"][0]["state"], "unavailable", "{c}");
    assert_eq!(c["health"]["sinks"][0]["error"], refused, "{c}");
    assert!(c["health"]["unavailable_since"].is_string(), "{c}");
    let summary = c["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("CANNOT PUBLISH for 3m")
            && summary.contains("bullmq unavailable since ")
            && summary.contains(&format!(" UTC ({refused}). Its 16 partition(s) wait")),
        "{summary}"
    );
    assert_eq!(
        (&b["sessions"], &b["partitions"]),
        (&0.into(), &serde_json::json!([])),
        "{b}"
    );
    assert!(
        b["summary"]
            .as_str()
            .unwrap()
            .starts_with("standing by for 3m"),
        "{b}"
    );
    assert_eq!(d["health"]["stale"], true, "{d}");
    assert!(
        d["summary"]
            .as_str()
            .unwrap()
            .starts_with("stale: last reported 2m"),
        "{d}"
    );
    assert_eq!(
        p["summary"], "publishing: 250 events/s, owns 48 partition(s)",
        "{p}"
    );
    assert!(p["health"]["last_publish_at"].is_string(), "{p}");

    // The text: the headline counts them, the table has their state and
    // host, and under it one line per relay in trouble, the most urgent first.
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", s]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "  relays: 4 instance(s), 64 of 64 partitions owned, 1 cannot publish, 1 stale\n"
        ),
        "{out}"
    );
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("  {name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{out}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(out.contains("  INSTANCE  "), "{out}");
    assert_eq!(
        row("postbox-relay:4242:c0ffee@0.1.0")[1..6],
        ["cannot_publish", "web-1", "1", "16", "0-15"]
    );
    assert_eq!(
        row("postbox-relay:4343:beef")[1..],
        ["standing_by", "web-2", "0", "0", "-", "-", "-"]
    );
    assert_eq!(
        row("postbox-relay:4444:dead")[1..],
        ["stale", "web-3", "0", "0", "-", "-", "-"]
    );
    assert_eq!(
        row("postbox-relay:4545:abcd@0.1.0")[1..6],
        ["publishing", "web-4", "1", "48", "16-63"]
    );
    let line = |start: &str| {
        out.find(start)
            .unwrap_or_else(|| panic!("no line {start:?}:\n{out}"))
    };
    let first = line("  ! postbox-relay:4242:c0ffee@0.1.0 CANNOT PUBLISH for 3m");
    let second = line("  ! postbox-relay:4444:dead stale: last reported 2m");
    let third = line("  ! postbox-relay:4343:beef standing by for 3m");
    assert!(first < second && second < third, "{out}");
    assert!(
        out.contains(&format!(" UTC ({refused}). Its 16 partition(s) wait: ")),
        "{out}"
    );
    assert!(!out.contains("! postbox-relay:4545"), "{out}");

    // The console: a banner at the top of the schema, a badge per relay,
    // its host, last publish and summary; the broker's words escaped.
    let console = crate::console::ConsoleProcess::start(s, &[]).await;
    let page = |console: &crate::console::ConsoleProcess| {
        let base = console.base.clone();
        async move {
            reqwest::Client::new()
                .get(format!("{base}/"))
                .bearer_auth(crate::console::VIEWER)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let html = page(&console).await;
    let banner = html
        .split(r#"data-figure="relay-alert""#)
        .nth(1)
        .unwrap_or_else(|| panic!("no banner:\n{html}"));
    let banner = &banner[..banner.find("</div>").unwrap()];
    assert!(
        banner.contains("1 relay(s) cannot publish, 1 relay(s) stale")
            && banner.contains("postbox-relay:4242:c0ffee@0.1.0")
            && banner.contains("postbox-relay:4444:dead")
            && !banner.contains("postbox-relay:4343:beef"),
        "{banner}"
    );
    assert!(
        html.find(r#"data-figure="relay-alert""#) < html.find(r#"data-figure="pending""#),
        "the banner comes first:\n{html}"
    );
    for (name, state, words, host, summary) in [
        (
            "postbox-relay:4242:c0ffee@0.1.0",
            "cannot_publish",
            "cannot publish",
            "web-1",
            "CANNOT PUBLISH for 3m",
        ),
        (
            "postbox-relay:4343:beef",
            "standing_by",
            "standing by",
            "web-2",
            "standing by for 3m",
        ),
        (
            "postbox-relay:4444:dead",
            "stale",
            "stale",
            "web-3",
            "stale: last reported 2m",
        ),
        (
            "postbox-relay:4545:abcd@0.1.0",
            "publishing",
            "publishing",
            "web-4",
            "publishing: 250 events/s",
        ),
    ] {
        let rest = html
            .split(&format!(r#"<tr data-relay="{name}" data-state="{state}">"#))
            .nth(1)
            .unwrap_or_else(|| panic!("no {state} row for {name}:\n{html}"));
        let (row, rest) = rest.split_once("</tr>").unwrap();
        assert!(
            row.contains(&format!(
                r#"<span class="badge state-{state}">{words}</span>"#
            )) && row.contains(&format!("<td>{host}</td>"))
                // Its last publish, 200 s before the record was written.
                && row.contains("<td>3m")
                && row.contains("s ago</td>"),
            "{row}"
        );
        // Under its row, what it is doing in words.
        let under =
            format!(r#"<tr class="summary" data-state="{state}"><td colspan="10">{summary}"#);
        assert!(rest.starts_with(&under), "{under}\n{rest}");
    }
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt; refused") && !html.contains("<img src=x"),
        "{html}"
    );

    // Every relay publishing again: no banner, no line under the table.
    cannot.unwrap().close().await.unwrap();
    sqlx::query(&format!(
        "DELETE FROM {s}.outbox_relays WHERE instance <> 'postbox-relay:4545:abcd'"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let html = page(&console).await;
    assert!(
        !html.contains("relay-alert") && html.contains(r#"data-state="publishing""#),
        "{html}"
    );
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", s]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("  relays: 1 instance(s), 48 of 64 partitions owned (unowned: 0-15)\n")
            && !out.contains("  ! "),
        "{out}"
    );
    publishing.unwrap().close().await.unwrap();
    drop(console);
    ctx.cleanup().await;
}

/// Without `--schema`, every schema of the database that postbox migrated
/// (text and `--json`).
#[tokio::test]
async fn status_without_a_schema_reports_every_migrated_one() {
    let a = Ctx::new("stall_a").await;
    let b = Ctx::new("stall_b").await;
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--json"]).await;
    assert!(ok, "{err}");
    let all: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["schema"].as_str())
        .collect();
    assert!(
        names.contains(&a.schema.as_str()) && names.contains(&b.schema.as_str()),
        "{names:?}"
    );
    let (ok, text, err) = cli(&["status", "--database-url", &url]).await;
    assert!(ok, "{err}");
    assert!(
        text.contains(&format!("schema {}:", a.schema))
            && text.contains(&format!("schema {}:", b.schema)),
        "{text}"
    );
    a.cleanup().await;
    b.cleanup().await;
}
