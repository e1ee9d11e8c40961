//! The raw side of a drain row: the rows the relay would claim, built in
//! memory, published through the case's own sink as the relay's workers
//! publish claimed batches, without PostgreSQL. Whatever the sink encodes and
//! awaits (ids, headers, acknowledgements, groups or waves) is the same as in
//! the relay's drain; what is missing is the claim and the mark, so relay /
//! raw is the share of the sink's rate PostgreSQL leaves.

use super::{BODY, EVENT};
use crate::{cpu, BenchError, Ctx, Params};
use postbox_relay::{Destination, OutboxEvent, Outcome, SinkError};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Publish `--events` rows to `topic` through `sink`: one lane per relay
/// worker, each sending its batches of the relay's size in turn, each batch
/// until the broker acknowledged all of it, the lanes at once.
pub(super) async fn rate(
    ctx: &Ctx,
    sink: Arc<dyn Destination>,
    topic: &str,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let lanes = lanes(p, topic);
    // Connection set-up is not the rate.
    sink.check()
        .await
        .map_err(|e| format!("raw {}: broker not reachable: {e}", sink.name()))?;
    let publish_timeout = p.relay.publish_timeout;
    let started = cpu::Window::start();
    let mut running = JoinSet::new();
    for lane in lanes {
        let sink = sink.clone();
        running.spawn(async move {
            for batch in lane {
                send(&*sink, batch, publish_timeout).await?;
            }
            Ok::<(), BenchError>(())
        });
    }
    while let Some(lane) = running.join_next().await {
        lane??;
    }
    Ok(started.finish(p.events as u64))
}

/// Publish `batch` until the broker has all of it. What it did not take in
/// time (a slow broker outlasting `publish_timeout`, a key deferred) goes
/// again at once, as the relay sends it again with its next claim; an event
/// the sink refuses, or three passes in which the broker took nothing, end
/// the run.
async fn send(
    sink: &dyn Destination,
    batch: Vec<OutboxEvent>,
    publish_timeout: Duration,
) -> Result<(), BenchError> {
    let mut left = batch;
    let mut fruitless = 0;
    while !left.is_empty() {
        let outcomes = sink.publish(&left, Instant::now() + publish_timeout).await;
        let sent = left.len();
        let mut why = String::new();
        let mut again = Vec::new();
        for (event, outcome) in left.into_iter().zip(outcomes) {
            match outcome {
                Outcome::Delivered => {}
                Outcome::Failed(SinkError::Rejected { message, .. }) => {
                    let sink = sink.name();
                    return Err(format!("raw {sink}: event {} refused: {message}", event.id).into());
                }
                Outcome::Failed(e) | Outcome::Deferred(e) => {
                    if why.is_empty() {
                        why = e.to_string();
                    }
                    again.push(event);
                }
            }
        }
        fruitless = if again.len() == sent {
            fruitless + 1
        } else {
            0
        };
        if fruitless == 3 {
            let sink = sink.name();
            return Err(
                format!("raw {sink}: the broker took nothing in three passes: {why}").into(),
            );
        }
        left = again;
    }
    Ok(())
}

/// The rows the relay's drain pre-fills (ids from 1, key `key-<id % keys>`,
/// the same event and payload), each key's in one lane of the relay's
/// workers count, in id order, cut in batches of the relay's size. Keys are
/// dealt round-robin over the lanes, as partitions are over the relay's
/// workers: a key's events stay in order in one lane. Built before the clock
/// starts.
fn lanes(p: &Params, topic: &str) -> Vec<Vec<Vec<OutboxEvent>>> {
    let workers = p.relay.workers;
    let created_at = chrono::Utc::now();
    let mut rows: Vec<Vec<OutboxEvent>> = (0..workers).map(|_| Vec::new()).collect();
    for n in 1..=p.events {
        let key = n % p.keys;
        rows[key as usize % workers].push(OutboxEvent {
            id: n,
            event_id: uuid::Uuid::new_v4(),
            topic: topic.to_owned(),
            event: EVENT.to_owned(),
            key: Some(format!("key-{key}")),
            payload: serde_json::json!({ "n": n, "body": BODY }),
            headers: serde_json::json!({}),
            attempts: 0,
            created_at,
            schema: "postbox_bench_raw".to_owned(),
        });
    }
    let batch = p.relay.batch_size as usize;
    rows.into_iter()
        .map(|lane| {
            let mut lane = lane.into_iter().peekable();
            let mut batches = Vec::new();
            while lane.peek().is_some() {
                batches.push(lane.by_ref().take(batch).collect());
            }
            batches
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn lanes_hold_every_row_once_with_each_key_in_one_lane_in_order() {
        let argv = ["bench", "--events", "1000", "--keys", "7", "--workers", "3"];
        let argv = argv.into_iter().chain(["--batch-size", "40"]);
        let (_, p) = Cli::parse_from(argv).args.resolve().unwrap();
        let lanes = lanes(&p, "t");
        assert_eq!(lanes.len(), 3);
        let mut ids = Vec::new();
        let mut lane_of = std::collections::HashMap::new();
        for (i, lane) in lanes.iter().enumerate() {
            assert!(lane.iter().all(|b| !b.is_empty() && b.len() <= 40));
            let rows: Vec<&OutboxEvent> = lane.iter().flatten().collect();
            assert!(
                rows.windows(2).all(|w| w[0].id < w[1].id),
                "lane {i} out of order"
            );
            for r in rows {
                assert_eq!(*lane_of.entry(r.key.clone()).or_insert(i), i, "{r:?}");
                ids.push(r.id);
            }
        }
        ids.sort();
        assert_eq!(ids, (1..=1000).collect::<Vec<i64>>());
        assert_eq!(lane_of.len(), 7);
    }
}
