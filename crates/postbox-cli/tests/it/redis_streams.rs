//! Redis Streams beyond the conformance suite (`conformance/redis_streams.rs`):
//! a batch with a deep key as one script, and waves for a user who may not
//! run scripts.

use crate::conformance::redis_streams::ioredis_read;
use crate::support::*;
use serde_json::Value;
use std::collections::HashMap;

fn relay(ctx: &Ctx, url: &str, extra: &[&str]) -> RelayProcess {
    let mut args = vec!["--sink", "redis_streams", "--redis-streams-url", url];
    args.extend_from_slice(extra);
    ctx.relay_with(&args, &[])
}

/// Calls of each command since the server started (`INFO commandstats`).
async fn command_calls(url: &str) -> HashMap<String, u64> {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    // cmdstat_xadd:calls=200,usec=…
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// The `seq` of each entry of `key`, in stream order.
fn seqs_of(entries: &[Value], key: &str) -> Vec<i64> {
    entries
        .iter()
        .filter(|e| e["fields"]["key"] == key)
        .map(|e| {
            let payload = e["fields"]["payload"].as_str().unwrap();
            serde_json::from_str::<Value>(payload).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_sends_a_deep_key_as_one_script_in_order() {
    let ctx = Ctx::new("rstreamdeep").await;
    // A server of its own: its command counts are this test's alone.
    let redis = RedisServer::start().await;
    let url = redis.url();
    const N: usize = 300;
    let mut events: Vec<_> = (1..=N).map(|i| ctx.event("hot", i)).collect();
    events.push(ctx.event("cold", 1));
    ctx.produce(events).await;
    let relay = relay(&ctx, &url, &["--batch-size", "1000", "--workers", "1"]);
    wait_until(LONG, "every event relayed", || async {
        ctx.unsent().await == 0
    })
    .await;
    let calls = command_calls(&url).await;
    let seen = ioredis_read(&url, &ctx.queue).await;
    assert_eq!(
        seqs_of(&seen, "hot"),
        (1..=N as i64).collect::<Vec<_>>(),
        "once each, in order"
    );
    assert_eq!(seen.len(), N + 1);
    // A script a batch (an EVALSHA refused before the script is loaded
    // counts too), where waves would have sent 300 pipelines and no script.
    let scripts =
        calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0);
    assert!(
        (1..=4).contains(&scripts),
        "the batch as a script: {calls:?}"
    );
    assert_eq!(calls.get("xadd").copied(), Some(N as u64 + 1), "{calls:?}");
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_user_without_scripting_gets_every_event_in_waves() {
    let ctx = Ctx::new("rstreamacl").await;
    let redis = RedisServer::start().await;
    let mut admin = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Least privilege for the waves: connect and XADD, no scripts.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "relay",
            "on",
            ">relay-secret",
            "~*",
            "+@connection",
            "+xadd",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://relay:relay-secret@127.0.0.1:{}", redis.port());
    const N: usize = 50;
    ctx.produce((1..=N).map(|i| ctx.event("hot", i)).collect())
        .await;
    let relay = relay(&ctx, &url, &["--workers", "1"]);
    wait_until(LONG, "every event relayed", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = ioredis_read(&redis.url(), &ctx.queue).await;
    assert_eq!(
        seqs_of(&seen, "hot"),
        (1..=N as i64).collect::<Vec<_>>(),
        "once each, in order"
    );
    assert_eq!(seen.len(), N);
    assert!(ctx.dead_letters().await.is_empty());
    drop(relay);
    ctx.cleanup().await;
}
