//! The services' socket.io endpoint speaks to the real JavaScript client
//! (`socket.io-client`, pinned in tests/node/package.json), over WebSocket and
//! over the default polling → WebSocket upgrade, and keeps rooms apart.
//!
//! Needs `tests/node/node_modules` (`./scripts/test.sh` runs `npm ci` there).

use crate::support::*;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

fn node_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/node"))
}

fn require_socket_io_client() {
    if !node_dir()
        .join("node_modules")
        .join("socket.io-client")
        .is_dir()
    {
        panic!(
            "tests/node/node_modules (with socket.io-client) is missing: run ./scripts/test.sh, \
             which runs `npm ci` in tests/node"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_io_js_client_receives_messages_in_its_room() {
    require_socket_io_client();
    let pair = Pair::start().await;

    let mut child = tokio::process::Command::new("node")
        .arg(node_dir().join("socketio_client.mjs"))
        .args([&pair.workers.base(), "1", "3", "20000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node (is Node installed? ./scripts/test.sh installs it)");
    let mut stderr = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("socketio_client.mjs prints `ready` within 20 s");
    if first.as_ref().ok().and_then(|l| l.as_deref()) != Some("ready") {
        let status = child.wait().await;
        panic!(
            "socketio_client.mjs did not get ready: first line {first:?}, exit {status:?}\nstderr:\n{}",
            stderr.await.unwrap()
        );
    }

    // Chat 2's message goes first and is through (shown on workers) before
    // chat 1's others: were rooms mixed up, the client would get it.
    pair.consumers.send(1, "room-1 first").await;
    pair.consumers.send(2, "room-2 only").await;
    wait_until(LONG, "chat 2's message on workers", || async {
        pair.workers.history(2).await.len() == 1
    })
    .await;
    pair.consumers.send(1, "room-1 second").await;
    pair.consumers.send(1, "room-1 third").await;

    let mut got = Vec::new();
    let read = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            got.push(l);
        }
        child.wait().await.unwrap()
    };
    let status = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("socketio_client.mjs exits within 20 s");
    let stderr = stderr.await.unwrap();
    assert!(
        status.success(),
        "socketio_client.mjs exited with {status}\nstdout:\n{}\nstderr:\n{stderr}",
        got.join("\n")
    );

    let msgs: Vec<serde_json::Value> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let bodies: Vec<&str> = msgs.iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert_eq!(
        bodies,
        ["room-1 first", "room-1 second", "room-1 third"],
        "the client gets exactly chat 1's messages, in order\nstderr:\n{stderr}"
    );
    for m in &msgs {
        assert_eq!(m["from"], "consumers", "{m}");
        assert_eq!(m["mine"], false, "{m}");
        assert_eq!(m["chat_id"], 1, "{m}");
        assert_eq!(m["state"], "received", "{m}");
    }
    pair.finish().await;
}
