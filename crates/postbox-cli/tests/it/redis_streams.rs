//! Redis Streams: the relay's sink (a batch with deep keys as one script, else
//! XADD pipelined per wave) against a real Redis, read back by an independent
//! client (Node `ioredis`), Redis killed with AOF on, a key of the wrong type,
//! and the consumer-group inbox reader.

use crate::node_interop::node;
use crate::support::*;
use redis::AsyncCommands;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

fn relay(ctx: &Ctx, url: &str, extra: &[&str]) -> RelayProcess {
    let mut args = vec!["--sink", "redis_streams", "--redis-streams-url", url];
    args.extend_from_slice(extra);
    ctx.relay("redis://127.0.0.1:1", &args, &[])
}

/// The stream's entries as ioredis reads them: (entry id, fields).
async fn ioredis_read(url: &str, stream: &str) -> Vec<Value> {
    let lines = node("stream_read.mjs", &[url, stream]).await;
    serde_json::from_str(lines.last().expect("one JSON line")).unwrap()
}

async fn del(url: &str, keys: &[&str]) {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = c.del(keys).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_events_arrive_intact_and_in_key_order_through_relay_kills() {
    let ctx = Ctx::new("rstream").await;
    let url = postbox_testkit::redis_url();
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e{i:06x}-00f067aa0ba902b7-01");
    const N: usize = 1000;
    let mut seq: HashMap<String, usize> = HashMap::new();
    let mut events = Vec::new();
    for i in 0..N {
        let key = format!("k{}", i % 16);
        let s = seq.entry(key.clone()).or_default();
        *s += 1;
        events.push(ctx.event(&key, *s).traceparent(tp(i)));
    }
    ctx.produce(events).await;
    let args = ["--batch-size", "50"];
    let mut doomed = relay(&ctx, &url, &args);
    let r2 = relay(&ctx, &url, &args);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (N as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &url, &args);
    wait_until(LONG, "every event relayed", || async {
        ctx.unsent().await == 0
    })
    .await;

    let seen = ioredis_read(&url, &ctx.queue).await;
    let rows = ctx.rows_by_event_id().await;
    let mut first = FirstOccurrences::default();
    for e in &seen {
        let f = &e["fields"];
        let id = f["id"].as_str().unwrap();
        let (key, s) = rows.get(id).expect("field id = an outbox event id");
        assert_eq!(f["event"], "test.event");
        assert_eq!(f["key"], key.as_str());
        let payload: Value = serde_json::from_str(f["payload"].as_str().unwrap()).unwrap();
        assert_eq!(payload["seq"], *s, "payload intact");
        let headers: Value = serde_json::from_str(f["headers"].as_str().unwrap()).unwrap();
        assert!(headers["traceparent"].as_str().unwrap().starts_with("00-"));
        first.see(id, key, *s);
    }
    assert_eq!(first.distinct(), N, "every event at least once");
    println!(
        "redis streams order/kill: {N} events, {} entries read, {} duplicates (Redis Streams does not de-duplicate; the inbox does)",
        seen.len(),
        seen.len() - N
    );
    drop((r2, r3));
    del(&url, &[&ctx.queue]).await;
    ctx.cleanup().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_killed_with_aof_loses_nothing_and_costs_no_attempts() {
    let ctx = Ctx::new("rstreamkill").await;
    // appendonly yes, appendfsync always: SIGKILL loses nothing acknowledged.
    let mut redis = RedisServer::start().await;
    let url = redis.url();
    let relay = relay(&ctx, &url, &[]);
    survives_a_killed_broker(&ctx, &relay, &mut redis).await;
    let seen = ioredis_read(&url, &ctx.queue).await;
    let ids: HashSet<&str> = seen
        .iter()
        .filter_map(|e| e["fields"]["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 200, "every event in the stream after the kill");
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_wrong_type_key_is_dead_lettered_while_other_keys_flow() {
    wrong_type_key_is_dead_lettered("rstreambad", "mark").await;
}

/// With `sent = "delete"` the claim deletes every row it takes: the refused
/// ones must come back (the batch is rolled back, then the good ones deleted)
/// to be retried and dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_wrong_type_key_is_dead_lettered_with_sent_rows_deleted() {
    wrong_type_key_is_dead_lettered("rstreambaddel", "delete").await;
}

async fn wrong_type_key_is_dead_lettered(name: &str, sent: &str) {
    let ctx = Ctx::new(name).await;
    let url = postbox_testkit::redis_url();
    let taken = format!("{}-taken", ctx.queue);
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Where the topic's stream should be, somebody keeps a string.
    let _: () = c.set(&taken, "not a stream").await.unwrap();
    let mut events = Vec::new();
    for i in 1..=5 {
        for k in ["a", "b", "c", "d"] {
            events.push(ctx.event(k, i));
        }
        events.push(event(&taken, "x", i));
    }
    ctx.produce(events).await;
    let mut args = FAST_DEAD_LETTER.to_vec();
    args.extend(["--sent", sent]);
    let relay = relay(&ctx, &url, &args);
    wait_until(
        LONG,
        "the good events sent and the refused ones dead",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    let dead = ctx.dead_letters().await;
    assert_eq!(
        dead.len(),
        5,
        "the five events for the string key: {dead:?}"
    );
    assert!(
        dead.iter().all(|d| d
            .1
            .contains(&format!("key {taken:?} holds a value of another type"))),
        "{dead:?}"
    );
    let seen = ioredis_read(&url, &ctx.queue).await;
    assert_eq!(seen.len(), 20, "every good event once");
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let expected = if sent == "delete" { 0 } else { 20 };
    assert_eq!(rows, expected, "outbox rows left with sent = {sent}");
    drop(relay);
    del(&url, &[&ctx.queue, &taken]).await;
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_inbox_consumer_applies_each_message_once_across_a_crash() {
    let ctx = Ctx::new("rstreamin").await;
    let url = postbox_testkit::redis_url();
    ctx.twenty_events_and_an_effects_table().await;
    let relay = relay(&ctx, &url, &[]);
    let fifth = ctx.fifth_event_once_sent().await;
    let client = redis::Client::open(url.as_str()).unwrap();
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let key = |m: &postbox::Message| m.key.clone();
    // Consumer "one" dies after the inbox commit of the 5th entry, before its XACK.
    let first = Effects::new(&ctx.schema, key, Some(fifth));
    {
        let (inbox, e, c, stream) = (
            inbox.clone(),
            first.clone(),
            client.clone(),
            ctx.queue.clone(),
        );
        let task = tokio::spawn(async move {
            let options = postbox_redis_streams::ConsumerOptions::new("effects", "one");
            postbox_redis_streams::inbox_consumer(
                &inbox,
                &c,
                &stream,
                &*e,
                options,
                Default::default(),
            )
            .await
        });
        tokio::time::timeout(LONG, first.hung.notified())
            .await
            .expect("consumer reached the 5th entry");
        task.abort();
        let _ = task.await;
    }
    // Consumer "two" of the same group takes the stalled entry over once it
    // has been idle long enough, and the inbox skips it.
    let second = Effects::new(&ctx.schema, key, None);
    let stop = postbox_redis_streams::CancellationToken::new();
    let mut options = postbox_redis_streams::ConsumerOptions::new("effects", "two");
    options.claim_idle = Duration::from_millis(500);
    options.block = Duration::from_millis(200);
    let consume = postbox_redis_streams::inbox_consumer(
        &inbox,
        &client,
        &ctx.queue,
        &*second,
        options,
        stop.clone(),
    );
    recovers_once(&ctx, &second, 20, &stop, consume).await;
    drop(relay);
    del(&url, &[&ctx.queue]).await;
    ctx.cleanup().await;
}
