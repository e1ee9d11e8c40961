//! Health-aware ownership (docs: operations/several-relays.md): a relay that
//! cannot reach its broker gives its partitions to relays that can, takes
//! none from them when it starts that way, and takes its share back when its
//! broker answers; when no relay can publish, nobody moves. Every relay's
//! health shows in `postbox status`, and in the fleet gauge.

use crate::dlq::cli;
use crate::support::*;
use postbox_testkit::Proxy;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The default `unavailable_after` and `health_interval`: the tests run with
/// the defaults, so they measure what a user gets.
const AFTER: Duration = Duration::from_secs(3);
const INTERVAL: Duration = Duration::from_secs(1);

async fn status(ctx: &Ctx) -> Value {
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&[
        "status",
        "--database-url",
        &url,
        "--json",
        "--schema",
        &ctx.schema,
    ])
    .await;
    assert!(ok, "{out}{err}");
    serde_json::from_str::<Value>(&out).unwrap()[0].clone()
}

/// The partitions each relay process owns, by pid.
fn ownership(st: &Value) -> BTreeMap<u64, Vec<i64>> {
    st["relays"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let parts = r["partitions"].as_array()?;
            Some((
                r["process_id"].as_u64()?,
                parts.iter().filter_map(Value::as_i64).collect(),
            ))
        })
        .collect()
}

fn relay_of(st: &Value, pid: u32) -> Option<&Value> {
    st["relays"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["process_id"].as_u64() == Some(u64::from(pid)))
}

/// Whether the relays `pids` (of four workers each) own all 64 partitions
/// between them, in equal shares: the rebalancing is over.
fn split_among(st: &Value, pids: &[u32]) -> bool {
    let own = ownership(st);
    pids.iter()
        .all(|p| own.get(&u64::from(*p)).map_or(0, Vec::len) == 64 / pids.len())
}

/// No partition is owned by another relay than `before` says (one may be
/// between two workers of its relay for a moment).
fn assert_no_move(before: &BTreeMap<u64, Vec<i64>>, now: &BTreeMap<u64, Vec<i64>>, st: &Value) {
    for (pid, parts) in now {
        let had = before.get(pid).cloned().unwrap_or_default();
        assert!(
            parts.iter().all(|p| had.contains(p)),
            "relay {pid} took partitions of another while nobody could publish: {st}"
        );
    }
}

/// The delivery lag of each event: when the claim that sent it committed,
/// minus when it was written (`sent = "mark"` keeps both).
async fn lags(ctx: &Ctx) -> Vec<f64> {
    sqlx::query_scalar(&format!(
        "SELECT extract(epoch FROM sent_at - created_at)::float8 FROM {}.outbox WHERE sent_at IS NOT NULL ORDER BY 1",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

/// 30 orders, one per transaction, each with a key of its own.
async fn thirty_orders(ctx: &Ctx, prefix: &str) {
    ctx.produce(
        (0..30)
            .map(|i| ctx.event(&format!("{prefix}-{i}"), 1))
            .collect(),
    )
    .await;
}

/// Redis's address, for a proxy in front of it.
fn redis_addr() -> std::net::SocketAddr {
    let url = url::Url::parse(&postbox_testkit::redis_url()).unwrap();
    format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(6379))
        .parse()
        .unwrap()
}

async fn metrics(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The reproduction: two relays deliver; a third starts with a
/// broker address where nothing listens. It takes none of the partitions,
/// 30 orders are all delivered within the detection bound plus a second, and
/// status, the console's data and the metrics show it for what it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_cannot_reach_its_broker_takes_nothing_from_healthy_ones() {
    let ctx = Ctx::new("sick_start").await;
    let redis = postbox_testkit::redis_url();
    let gauges = postbox_testkit::free_port();
    let a = ctx.relay(
        &redis,
        &[
            "--admin-listen",
            &format!("127.0.0.1:{gauges}"),
            "--stats-interval",
            "200ms",
        ],
        &[],
    );
    let b = ctx.relay(&redis, &[], &[]);
    wait_until(LONG, "two relays own the 64 partitions", || async {
        split_among(&status(&ctx).await, &[a.pid(), b.pid()])
    })
    .await;
    let nowhere = format!("redis://127.0.0.1:{}/7", postbox_testkit::free_port());
    let own = postbox_testkit::free_port();
    let sick = ctx.relay(
        &nowhere,
        &["--admin-listen", &format!("127.0.0.1:{own}")],
        &[],
    );
    wait_until(LONG, "the third relay's record: standing by", || async {
        relay_of(&status(&ctx).await, sick.pid()).is_some_and(|r| r["state"] == "standing_by")
    })
    .await;
    thirty_orders(&ctx, "order").await;
    wait_until(LONG, "30 orders delivered", || async {
        ctx.unsent().await == 0
    })
    .await;
    let lags = lags(&ctx).await;
    let worst = lags.last().copied().unwrap();
    println!("30 orders beside a sick relay: lag max {worst:.3}s");
    assert!(
        worst <= (AFTER + INTERVAL + Duration::from_secs(1)).as_secs_f64(),
        "an order waited {worst:.3}s"
    );

    let st = status(&ctx).await;
    assert!(split_among(&st, &[a.pid(), b.pid()]), "{st}");
    let r = relay_of(&st, sick.pid()).unwrap();
    assert_eq!(r["partitions"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["health"]["owned_partitions"], 0, "{r}\n{}", sick.output());
    assert_eq!(r["health"]["sinks"][0]["sink"], "bullmq", "{r}");
    assert_eq!(r["health"]["sinks"][0]["state"], "unavailable", "{r}");
    assert!(
        r["summary"].as_str().unwrap().contains("standing by")
            && r["summary"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("refused"),
        "{r}"
    );
    for healthy in [a.pid(), b.pid()] {
        assert_eq!(relay_of(&st, healthy).unwrap()["state"], "publishing");
    }
    assert!(
        !sick.output().contains("partitions given back"),
        "it took partitions at some point:\n{}",
        sick.output()
    );
    // The text an on-call engineer reads.
    let url = postbox_testkit::database_url();
    let (ok, text, err) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(ok, "{err}");
    assert!(
        text.contains("standing by") && text.contains("bullmq unavailable"),
        "{text}"
    );
    // Its own gauge, and the fleet's from a healthy relay.
    let schema = &ctx.schema;
    assert!(
        metrics(own).await.contains(&format!(
            "postbox_relay_taking_partitions{{schema=\"{schema}\"}} 0"
        )),
        "{}",
        metrics(own).await
    );
    wait_until(
        LONG,
        "the fleet gauge counts one relay standing by",
        || async {
            metrics(gauges).await.contains(&format!(
                "postbox_relays{{schema=\"{schema}\",state=\"standing_by\"}} 1"
            ))
        },
    )
    .await;
    drop((a, b, sick));
    ctx.cleanup().await;
}

/// One relay's path to the broker cut (nothing forwarded, nothing closed)
/// while another serves: its partitions pass to the other within the
/// detection bound plus a takeover, per-key order holds, and it takes its
/// share back once the path heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_cut_off_from_its_broker_hands_its_partitions_over() {
    let ctx = Ctx::new("sick_cut").await;
    let redis = postbox_testkit::redis_url();
    let proxy = Proxy::start(redis_addr()).await.unwrap();
    let a = ctx.relay(&redis, &[], &[]);
    let cut = ctx.relay(&format!("redis://127.0.0.1:{}", proxy.port()), &[], &[]);
    wait_until(LONG, "two relays own the 64 partitions", || async {
        split_among(&status(&ctx).await, &[a.pid(), cut.pid()])
    })
    .await;
    // Every key ten times, so order has something to prove.
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    ctx.produce(keys.iter().map(|k| ctx.event(k, 1)).collect())
        .await;
    wait_until(LONG, "the first round delivered", || async {
        ctx.unsent().await == 0
    })
    .await;
    proxy.partition();
    for seq in 2..=5 {
        ctx.produce(keys.iter().map(|k| ctx.event(k, seq)).collect())
            .await;
    }
    wait_until(LONG, "everything delivered during the cut", || async {
        ctx.unsent().await == 0
    })
    .await;
    let lags = lags(&ctx).await;
    let worst = lags.last().copied().unwrap();
    let p99 = lags[(lags.len() * 99 / 100).min(lags.len() - 1)];
    println!("one relay cut off: lag p99 {p99:.3}s, max {worst:.3}s");
    assert!(
        worst <= (AFTER + INTERVAL + Duration::from_secs(2)).as_secs_f64(),
        "an event waited {worst:.3}s"
    );
    let st = status(&ctx).await;
    assert_eq!(
        relay_of(&st, cut.pid()).unwrap()["state"],
        "standing_by",
        "{st}"
    );
    assert_eq!(ownership(&st)[&u64::from(a.pid())].len(), 64, "{st}");
    let view = RedisView::new(&redis, &ctx.queue).await;
    assert_per_key_order(&view.waiting().await);

    proxy.heal();
    wait_until(LONG, "the healed relay takes its share back", || async {
        split_among(&status(&ctx).await, &[a.pid(), cut.pid()])
    })
    .await;
    ctx.produce(keys.iter().map(|k| ctx.event(k, 6)).collect())
        .await;
    wait_until(LONG, "delivered by both", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = view.waiting().await;
    assert_per_key_order(&seen);
    let distinct: std::collections::HashSet<_> = seen.iter().map(|(_, k, s)| (k, s)).collect();
    assert_eq!(distinct.len(), keys.len() * 6, "every event once at least");
    drop((a, cut));
    ctx.cleanup().await;
}

/// The broker gone for every relay: nobody moves (each keeps exactly the
/// partitions it had), nothing is lost, and everything goes once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_no_relay_can_publish_nobody_moves() {
    let ctx = Ctx::new("sick_all").await;
    let mut redis = RedisServer::start().await;
    let url = redis.url();
    // The defaults: the backlog that builds up must not spread the crews
    // either (partitions a worker gives back for its crew-mates may be taken
    // by the other relay first).
    let a = ctx.relay(&url, &[], &[]);
    let b = ctx.relay(&url, &[], &[]);
    wait_until(LONG, "two relays own the 64 partitions", || async {
        split_among(&status(&ctx).await, &[a.pid(), b.pid()])
    })
    .await;
    let before = ownership(&status(&ctx).await);
    redis.kill();
    thirty_orders(&ctx, "down").await;
    // A backlog of more than a batch, which spreads a crew that can publish.
    ctx.produce(
        (0..600)
            .map(|i| ctx.event(&format!("more-{}", i % 50), i))
            .collect(),
    )
    .await;
    // Well past the bound, for both: each would have moved by now.
    let past = AFTER.as_secs_f64() + 3.0;
    wait_until(LONG, "both relays unavailable past the bound", || async {
        let st = status(&ctx).await;
        assert_no_move(&before, &ownership(&st), &st);
        [a.pid(), b.pid()].iter().all(|p| {
            relay_of(&st, *p).is_some_and(|r| {
                r["state"] == "cannot_publish"
                    && r["health"]["unavailable_seconds"].as_f64().unwrap_or(0.0) > past
            })
        })
    })
    .await;
    let st = status(&ctx).await;
    assert_no_move(&before, &ownership(&st), &st);
    assert_eq!(ctx.unsent().await, 630);
    let url = postbox_testkit::database_url();
    let (_, text, _) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(text.contains("CANNOT PUBLISH"), "{text}");
    redis.restart().await;
    wait_until(
        LONG,
        "everything delivered once the broker is back",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    // Once it is back the backlog spreads the crews, and partitions may
    // change relays as they do under any backlog.
    drop((a, b));
    ctx.cleanup().await;
}

/// A relay with two sinks (routes) of which one cannot be reached counts as
/// unable to publish: partitions hold every route's keys, so only handing
/// them all over frees the cut route's events. The alternative, keeping
/// partitions while any sink works (as `--unavailable-after 0s` does here),
/// leaves that route's events on the relay's partitions waiting for as long
/// as the outage lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_route_down_hands_over_every_key_of_the_relay() {
    for (after, bounded) in [("3s", true), ("0s", false)] {
        let ctx = Ctx::new("sick_route").await;
        let redis = postbox_testkit::redis_url();
        let config = |streams: &str| {
            let path = std::env::temp_dir()
                .join(format!("postbox-route-{}.toml", postbox_testkit::suffix()));
            std::fs::write(
                &path,
                format!(
                    "sink = \"bullmq\"\n\n[redis_streams]\nurl = \"{streams}\"\nstream = \"{}:{{topic}}\"\n\n[[routes]]\ntopic = \"pay.*\"\nsink = \"redis_streams\"\n",
                    ctx.schema
                ),
            )
            .unwrap();
            path
        };
        let good = config(&redis);
        let bad = config(&format!(
            "redis://127.0.0.1:{}",
            postbox_testkit::free_port()
        ));
        let a = ctx.relay(
            &redis,
            &[
                "--config",
                good.to_str().unwrap(),
                "--unavailable-after",
                after,
                "--consolidate-after",
                "0s",
            ],
            &[],
        );
        wait_until(LONG, "the first relay owns all 64", || async {
            split_among(&status(&ctx).await, &[a.pid()])
        })
        .await;
        let b = ctx.relay(
            &redis,
            &[
                "--config",
                bad.to_str().unwrap(),
                "--unavailable-after",
                after,
                "--consolidate-after",
                "0s",
            ],
            &[],
        );
        if !bounded {
            // Ownership ignores health: b takes its share.
            wait_until(LONG, "both own partitions", || async {
                split_among(&status(&ctx).await, &[a.pid(), b.pid()])
            })
            .await;
        } else {
            wait_until(LONG, "b's record", || async {
                relay_of(&status(&ctx).await, b.pid()).is_some_and(|r| r["state"] == "standing_by")
            })
            .await;
        }
        let mut events = Vec::new();
        for i in 0..20 {
            events.push(ctx.event(&format!("c{i}"), 1));
            events.push(
                postbox::Event::new("pay.done", "pay.done", serde_json::json!({"i": i}))
                    .key(format!("p{i}")),
            );
        }
        ctx.produce(events).await;
        let bound = AFTER + INTERVAL + Duration::from_secs(1);
        // Within the bound and some, or not: the outer timeout ends the wait
        // before wait_until's own would fail the test.
        let delivered = tokio::time::timeout(
            bound + Duration::from_secs(5),
            wait_until(LONG, "all 40 delivered", || async {
                ctx.unsent().await == 0
            }),
        )
        .await
        .is_ok();
        let unsent = ctx.unsent().await;
        let lags = lags(&ctx).await;
        println!(
            "one route down on one relay, unavailable_after {after}: {} of 40 delivered within {:?}, lag max {:.3}s",
            40 - unsent,
            bound + Duration::from_secs(5),
            lags.iter().copied().fold(0.0, f64::max),
        );
        if bounded {
            assert!(delivered, "{unsent} events still unsent");
            let worst = lags.last().copied().unwrap();
            assert!(worst <= bound.as_secs_f64(), "an event waited {worst:.3}s");
        } else {
            // The test tells the two apart: without health-aware ownership
            // the cut route's events on b's partitions wait.
            assert!(
                !delivered && unsent > 0,
                "nothing waited with ownership ignoring health\n{}",
                b.output()
            );
        }
        drop((a, b));
        let _ = std::fs::remove_file(good);
        let _ = std::fs::remove_file(bad);
        ctx.cleanup().await;
    }
}
