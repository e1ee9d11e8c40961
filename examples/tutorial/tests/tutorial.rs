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
//! - a block after `<!-- tutorial: file NAME -->` is saved as NAME, its
//!   `{{#include PATH}}` read from the book's sources;
//! - a block after `<!-- tutorial: skip … -->` does not run.
//!
//! The installs run as written, in a new directory outside the repository:
//! `git clone https://github.com/postbox-rs/postbox` clones this checkout's
//! HEAD (git's `insteadOf`, so commit first to test a change), `cargo install`
//! installs into the directory (not `~/.cargo/bin`), and the builds share a
//! target directory kept between runs (`POSTBOX_TUTORIAL_TARGET`, by default
//! `~/.cache/postbox/tutorial-target`) as a reader's second build would. The
//! time of each install is printed.

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
    let mut save_as = None;
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("<!-- tutorial: skip") {
            skip_next = true;
            continue;
        }
        if let Some(name) = line
            .strip_prefix("<!-- tutorial: file ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            save_as = Some(name.trim().to_owned());
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
        if let Some(name) = save_as.take() {
            steps.push(Step::File {
                name,
                body: included(&body),
            });
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

/// `body` with each `{{#include PATH}}` line replaced by the file (PATH
/// relative to the book's sources, as mdBook reads it).
fn included(body: &str) -> String {
    let src = Path::new(PAGE).parent().unwrap();
    body.lines()
        .map(|l| match l.trim().strip_prefix("{{#include ") {
            Some(rest) => {
                let path = src.join(rest.trim_end_matches("}}").trim());
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            }
            None => format!("{l}\n"),
        })
        .collect()
}

/// The environment of a reader's shell: their PATH, home and toolchain, the
/// page's two URLs, `cargo install` into `dir`, builds in the kept target
/// directory, and the repository's git URL cloning `root`'s HEAD.
fn reader_env(
    dir: &Path,
    root: &Path,
    database_url: &str,
    redis_url: &str,
) -> Vec<(String, String)> {
    let keep = [
        "HOME",
        "USER",
        "LANG",
        "TMPDIR",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
    ];
    let proxies = [
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
    ];
    let mut env: Vec<(String, String)> = keep
        .iter()
        .chain(&proxies)
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    let installed = dir.join(".cargo-install");
    let target = std::env::var("POSTBOX_TUTORIAL_TARGET").unwrap_or_else(|_| {
        format!(
            "{}/.cache/postbox/tutorial-target",
            std::env::var("HOME").unwrap()
        )
    });
    let path = format!(
        "{}/bin:{}",
        installed.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (k, v) in [
        ("PATH", path),
        ("DATABASE_URL", database_url.to_owned()),
        ("REDIS_URL", redis_url.to_owned()),
        ("RUST_LOG", "info".to_owned()),
        ("CARGO_INSTALL_ROOT", installed.display().to_string()),
        ("CARGO_TARGET_DIR", target),
        ("GIT_CONFIG_COUNT", "1".to_owned()),
        (
            "GIT_CONFIG_KEY_0",
            format!("url.file://{}.insteadOf", root.display()),
        ),
        (
            "GIT_CONFIG_VALUE_0",
            "https://github.com/postbox-rs/postbox".to_owned(),
        ),
    ] {
        env.push((k.to_owned(), v));
    }
    env
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
    assert_eq!(
        files,
        ["place-order.mjs", "place-order-rs/src/main.rs", "ship.mjs"]
    );
    let runs: Vec<&str> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Run { script, .. } => Some(script.as_str()),
            _ => None,
        })
        .collect();
    for install in ["git clone", "cargo install", "npm install", "cargo add"] {
        assert!(
            runs.iter().any(|r| r.contains(install)),
            "the page runs `{install}`"
        );
    }
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

    // A new directory outside the repository, as a reader's; at the same
    // path each run, so the kept target directory knows the clone's crates.
    let dir = std::env::temp_dir().join("postbox-tutorial");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let env = reader_env(&dir, &root, &database_url, &redis_url);
    let bash = |script: &str| {
        let mut c = tokio::process::Command::new("bash");
        c.args(["-e", "-c", script])
            .current_dir(&dir)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    };

    let mut background = Vec::new();
    let mut transcript = String::new();
    let begun = Instant::now();
    for step in steps(&page) {
        match step {
            Step::File { name, body } => {
                let path = dir.join(&name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, body).unwrap();
            }
            Step::Background { script } => {
                let child = bash(&script)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                background.push((script, child));
            }
            Step::Run { script, expect } => {
                let started = Instant::now();
                let deadline = started + LONG;
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
                        if started.elapsed() > Duration::from_secs(2) {
                            println!(
                                "tutorial: {:>6.1}s  {}",
                                started.elapsed().as_secs_f64(),
                                script.trim().replace('\n', "; ")
                            );
                        }
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
            }
        }
    }
    println!(
        "tutorial: {:.1}s from the clone to the replayed message",
        begun.elapsed().as_secs_f64()
    );
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
