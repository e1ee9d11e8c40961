//! Amazon SNS beyond the conformance suite (`conformance/sqs.rs`,
//! `conformance/sns.rs`): a standard topic reaches a subscribed queue with
//! every attribute.

use crate::conformance::sqs::{aws_relay_args, boto3_read, topic_with_a_queue};
use crate::support::*;
use postbox_testkit::MotoServer;
use std::collections::HashSet;

fn relay(ctx: &Ctx, moto: &MotoServer, target: &str) -> RelayProcess {
    let mut args = ctx.relay_args();
    args.extend(aws_relay_args(moto, "sns", "--sns-topic-arn", target));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    RelayProcess::spawn(BIN, &args, &MotoServer::env())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_reaches_a_subscribed_queue_with_every_attribute() {
    let ctx = Ctx::new("sns").await;
    let moto = MotoServer::start().await;
    let (topic_arn, queue) = topic_with_a_queue(&moto, &ctx.queue, "").await;
    ctx.produce(
        (1..=20)
            .map(|i| ctx.event(&format!("k{}", i % 4), i))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &moto, &topic_arn);
    wait_until(LONG, "every event published", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = boto3_read(&moto, &queue, 20).await;
    let ids: HashSet<&str> = seen
        .iter()
        .filter_map(|m| m["attributes"]["postbox-event-id"].as_str())
        .collect();
    assert_eq!(ids.len(), 20, "every event, with its attributes: {seen:?}");
    assert!(seen
        .iter()
        .all(|m| m["attributes"]["postbox-key"].is_string()));
    drop(relay);
    ctx.cleanup().await;
}
