//! Messages both ways: all shown once, in order per chat, delivered; a deploy
//! of the receiving service in the middle loses nothing.

use crate::support::*;
use std::collections::HashSet;

fn bodies(history: &[serde_json::Value], from: &str) -> Vec<String> {
    history
        .iter()
        .filter(|m| m["from"] == from)
        .map(|m| m["body"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_both_ways_shown_once_in_order() {
    both_ways_once_in_order(Pair::start().await).await;
}

/// The same with the workers service in Node.js (examples/chat/node, on the
/// npm package) and consumers in Rust: the conversation crosses languages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_both_ways_between_a_rust_and_a_node_service() {
    both_ways_once_in_order(Pair::start_with_node(Some("workers")).await).await;
}

async fn both_ways_once_in_order(pair: Pair) {
    const N: usize = 15;
    let mut sent = Vec::new();
    for i in 0..N {
        for chat in [1, 2] {
            pair.consumers.send(chat, &format!("c{chat}-{i}")).await;
            pair.workers.send(chat, &format!("w{chat}-{i}")).await;
            sent.push(chat);
        }
    }
    for chat in [1i64, 2] {
        let want_c: Vec<String> = (0..N).map(|i| format!("c{chat}-{i}")).collect();
        let want_w: Vec<String> = (0..N).map(|i| format!("w{chat}-{i}")).collect();
        for side in [&pair.consumers, &pair.workers] {
            wait_until(LONG, "every message on both sides, delivered", || async {
                let h = side.history(chat).await;
                h.len() == 2 * N && !h.iter().any(|m| m["state"] == "saved")
            })
            .await;
            let h = side.history(chat).await;
            let ids: HashSet<&str> = h.iter().map(|m| m["id"].as_str().unwrap()).collect();
            assert_eq!(
                ids.len(),
                2 * N,
                "a message is shown twice on {}",
                side.service
            );
            assert_eq!(
                bodies(&h, "consumers"),
                want_c,
                "order of consumers' messages on {}",
                side.service
            );
            assert_eq!(
                bodies(&h, "workers"),
                want_w,
                "order of workers' messages on {}",
                side.service
            );
        }
    }
    assert_eq!(pair.count(&pair.workers, "received").await, 2 * N as i64);
    assert_eq!(pair.count(&pair.consumers, "received").await, 2 * N as i64);
    pair.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_deploy_loses_nothing() {
    let mut pair = Pair::start().await;
    pair.consumers.send(1, "before").await;
    pair.workers.stop().await;
    // Sent while workers is down: waits in consumers' outbox / BullMQ.
    pair.consumers.send(1, "during-1").await;
    pair.consumers.send(1, "during-2").await;
    pair.workers.start().await;
    pair.consumers.send(1, "after").await;
    wait_until(LONG, "all four shown on workers", || async {
        pair.workers.history(1).await.len() == 4
    })
    .await;
    assert_eq!(
        bodies(&pair.workers.history(1).await, "consumers"),
        ["before", "during-1", "during-2", "after"]
    );
    wait_until(LONG, "all delivered", || async {
        pair.consumers
            .history(1)
            .await
            .iter()
            .all(|m| m["state"] == "delivered")
    })
    .await;
    pair.finish().await;
}
