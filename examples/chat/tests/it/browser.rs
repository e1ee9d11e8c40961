//! The chat page in a real browser: headless Chromium (Debian's, driven by
//! the pinned `playwright-core` in tests/node) opens both services' pages,
//! sends a message from the consumers page and a reply from the workers page,
//! and sees each arrive on the other page and turn "delivered".
//!
//! Needs /usr/bin/chromium and `tests/node/node_modules` (`./scripts/test.sh`
//! installs both). Screenshots go to `target/test-artifacts/chat-browser/`.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CHROMIUM: &str = "/usr/bin/chromium";

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn require_browser() {
    if !Path::new(CHROMIUM).exists() {
        panic!("{CHROMIUM} is missing: run ./scripts/test.sh, which installs Debian's chromium");
    }
    let pw = workspace().join("tests/node/node_modules/playwright-core");
    if !pw.is_dir() {
        panic!(
            "tests/node/node_modules (with playwright-core) is missing: run ./scripts/test.sh, \
             which runs `npm ci` in tests/node"
        );
    }
}

fn has(history: &[serde_json::Value], from: &str, body: &str) -> bool {
    history
        .iter()
        .any(|m| m["from"] == from && m["body"] == body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_message_travels_both_ways() {
    require_browser();
    let artifacts = workspace().join("target/test-artifacts/chat-browser");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shots = ["consumers.png", "workers.png"].map(|f| artifacts.join(f));
    for s in &shots {
        let _ = std::fs::remove_file(s);
    }
    let pair = Pair::start().await;

    let run = tokio::process::Command::new("node")
        .arg(workspace().join("tests/node/browser.mjs"))
        .arg(pair.consumers.base())
        .arg(pair.workers.base())
        .arg(&artifacts)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("browser.mjs finishes within 60 s")
        .expect("run node (is Node installed? ./scripts/test.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser.mjs exited with {}\nstdout:\n{stdout}\nstderr:\n{stderr}\n\
         consumers service:\n{}\nworkers service:\n{}",
        out.status,
        pair.consumers.output(),
        pair.workers.output()
    );
    for s in &shots {
        let len = std::fs::metadata(s)
            .unwrap_or_else(|e| panic!("screenshot {} missing: {e}", s.display()))
            .len();
        assert!(len > 0, "screenshot {} is empty", s.display());
    }
    let summary: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary from browser.mjs:\n{stdout}"));
    assert_eq!(summary["ok"], true, "{summary}");
    let hello = summary["hello"].as_str().expect("summary.hello");
    let reply = summary["reply"].as_str().expect("summary.reply");

    // The pages showed both; the services stored both.
    for side in [&pair.consumers, &pair.workers] {
        let h = side.history(1).await;
        assert!(
            has(&h, "consumers", hello),
            "{hello:?} not stored on {}: {h:?}",
            side.service
        );
        assert!(
            has(&h, "workers", reply),
            "{reply:?} not stored on {}: {h:?}",
            side.service
        );
    }
    pair.finish().await;
}
