//! The book's tutorial (`docs/src/tutorial.md`) run as written, so it cannot
//! drift from the binary, the libraries and the Node package.
//!
//! How the page is read:
//! - each ```sh block runs in order (`bash -e`), in one working directory,
//!   with `postbox` on the PATH and `DATABASE_URL`/`REDIS_URL` set to a
//!   database and a Redis database of this test's own;
//! - a ```sh block whose first line is `# in a second terminal` (third…)
//!   starts in the background and is stopped (SIGTERM) at the end;
//! - a block whose first line is `// file: NAME` is saved as NAME first;
//! - a ```sh block followed by a ```text block runs again until every line of
//!   the text appears in its output (a reader waits; so does this test);
//! - a block after `<!-- tutorial: skip … -->` does not run (installing).
//!
//! The Rust tab's `cargo run -- 3 carol` is replaced by running this
//! package's binary, which is the file the page includes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src/tutorial.md");
/// How long a reader would wait for a step before calling it broken.
const LONG: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum Step {
    /// Save `body` as `name`.
    File { name: String, body: String },
    /// Run `script`; with `expect`, until each of its lines is in the output.
    Run {
        script: String,
        expect: Option<String>,
    },
    /// Start `script` in the background.
    Background { script: String },
}

/// The page's steps, in order.
fn steps(page: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut skip_next = false;
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("<!-- tutorial: skip") {
            skip_next = true;
            continue;
        }
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let body = body.join("\n") + "\n";
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let first = body.lines().next().unwrap_or_default();
        if let Some(name) = first
            .strip_prefix("// file: ")
            .or_else(|| first.strip_prefix("-- file: "))
        {
            steps.push(Step::File {
                name: name.trim().to_owned(),
                body,
            });
        } else if info == "sh" && first.starts_with("# in a ") && first.ends_with(" terminal") {
            steps.push(Step::Background { script: body });
        } else if info == "sh" {
            steps.push(Step::Run {
                script: body,
                expect: None,
            });
        } else if info == "text" {
            match steps.last_mut() {
                Some(Step::Run { expect, .. }) if expect.is_none() => *expect = Some(body),
                _ => panic!("an expected output without a command before it:\n{body}"),
            }
        }
    }
    steps
}

/// Each expected line, in the output (trimmed, anywhere).
fn shows(output: &str, expect: &str) -> bool {
    expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .all(|l| output.contains(l))
}

#[test]
fn the_page_has_the_steps_this_test_expects() {
    let steps = steps(&std::fs::read_to_string(PAGE).unwrap());
    let files: Vec<&str> = steps
        .iter()
        .filter_map(|s| match s {
            Step::File { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(files, ["place-order.mjs", "ship.mjs"]);
    assert_eq!(
        steps
            .iter()
            .filter(|s| matches!(s, Step::Background { .. }))
            .count(),
        2,
        "the relay and the consumer"
    );
    assert!(steps.iter().any(|s| matches!(
        s,
        Step::Run {
            expect: Some(_),
            ..
        }
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tutorial_runs_as_written() {
    let page = std::fs::read_to_string(PAGE).unwrap();
    // A database and a Redis database of its own: the page says `shop` and
    // `orders`, as a reader's would.
    let admin = postbox_testkit::pool().await;
    let db = format!("tutorial_{}", postbox_testkit::suffix());
    sqlx::raw_sql(&format!("CREATE DATABASE {db}"))
        .execute(&admin)
        .await
        .unwrap();
    let mut url = url::Url::parse(&postbox_testkit::database_url()).unwrap();
    url.set_path(&format!("/{db}"));
    let database_url = url.to_string();
    let mut redis_url = url::Url::parse(&postbox_testkit::redis_url()).unwrap();
    redis_url.set_path("/13");
    let redis_url = redis_url.to_string();
    let mut r = redis::Client::open(redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("FLUSHDB")
        .query_async::<()>(&mut r)
        .await
        .unwrap();

    // Inside the Node package's directory, so `@postbox-rs/postbox` and its
    // peers resolve to what the test command built and installed.
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/node");
    let postbox = postbox_testkit::workspace_bin("postbox");
    assert!(
        node.join("dist").exists() && node.join("node_modules").exists(),
        "clients/node is not built: run ./scripts/test.sh"
    );
    let dir = node.join(format!(".tutorial-{}", postbox_testkit::suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin_dir = postbox.parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [
        ("PATH", path.as_str()),
        ("DATABASE_URL", database_url.as_str()),
        ("REDIS_URL", redis_url.as_str()),
        ("RUST_LOG", "info"),
    ];
    let bash = |script: &str| {
        let mut c = tokio::process::Command::new("bash");
        c.args(["-e", "-c", script])
            .current_dir(&dir)
            .env_remove("POSTBOX_DATABASE_URL")
            .env_remove("POSTBOX_REDIS_URL")
            .envs(env)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    };

    let mut background = Vec::new();
    let mut transcript = String::new();
    for step in steps(&page) {
        match step {
            Step::File { name, body } => std::fs::write(dir.join(&name), body).unwrap(),
            Step::Background { script } => {
                let child = bash(&script)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                background.push((script, child));
            }
            Step::Run { script, expect } => {
                let deadline = Instant::now() + LONG;
                loop {
                    let out = bash(&script).output().await.unwrap();
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let ok =
                        out.status.success() && expect.as_deref().is_none_or(|e| shows(&text, e));
                    if ok {
                        transcript.push_str(&format!("$ {script}{text}"));
                        break;
                    }
                    if Instant::now() > deadline || (!out.status.success() && expect.is_none()) {
                        let mut logs = String::new();
                        for (_, c) in background.iter_mut() {
                            let _ = c.start_kill();
                        }
                        for (s, c) in background {
                            let out = c.wait_with_output().await.unwrap();
                            logs.push_str(&format!(
                                "--- {s}{}{}\n",
                                String::from_utf8_lossy(&out.stdout),
                                String::from_utf8_lossy(&out.stderr)
                            ));
                        }
                        panic!(
                            "the tutorial's step failed:\n$ {script}{text}\nexpected:\n{}\n\nso far:\n{transcript}\nbackground:\n{logs}",
                            expect.unwrap_or_default()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                // The Rust tab, right after the Node one: its order 3.
                if script.starts_with("node place-order.mjs") {
                    let out =
                        tokio::process::Command::new(postbox_testkit::workspace_bin("place-order"))
                            .args(["3", "carol"])
                            .env("DATABASE_URL", &database_url)
                            .output()
                            .await
                            .unwrap();
                    assert!(
                        out.status.success()
                            && String::from_utf8_lossy(&out.stdout).contains("order 3 placed"),
                        "examples/tutorial: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
    }
    // Ctrl-C for each terminal: both stop cleanly.
    for (script, child) in background {
        let pid = child.id().expect("still running").to_string();
        // bash runs the command as its child, or becomes it (exec): signal
        // the children if there are any (from /proc: no procps needed).
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let targets = if children.trim().is_empty() {
            pid.clone()
        } else {
            children.trim().to_owned()
        };
        std::process::Command::new("bash")
            .args(["-c", &format!("kill -TERM {targets}")])
            .status()
            .unwrap();
        let out = tokio::time::timeout(LONG, child.wait_with_output())
            .await
            .expect("stopped on SIGTERM")
            .unwrap();
        assert!(
            out.status.success(),
            "{script}{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    admin.close().await;
    let admin = postbox_testkit::pool().await;
    sqlx::raw_sql(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
}
