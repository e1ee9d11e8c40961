//! The guarantees every sink keeps, written once and run for each (as River's
//! `riverdrivertest` and apalis's `generic_storage_test!`).
//!
//! Each sink has a file here with its [`BrokerFixture`] (a broker, what a
//! topic needs there, the relay's flags, and a reader that is the broker's
//! own independent client, never postbox's code) and one line,
//!
//! ```ignore
//! conformance!(NatsFixture, killable_broker, inbox_consumer);
//! ```
//!
//! which makes `conformance::nats::<guarantee>` of every guarantee. What
//! not every broker has is a capability of its own, named in that line: a
//! broker the test may kill and restart ([`KillableBroker`]), an inbox
//! consumer ([`ConsumerFixture`]). The fixtures' traits are in `fixture.rs`;
//! the guarantees in one file per concern (`delivery.rs`, `refusals.rs`,
//! `outage.rs`, `consumer.rs`, `replay.rs`), each re-exported here for the `tests!` list.
//! A guarantee added there runs for every sink that has what it needs; what
//! only one sink does stays in its own test file (`kafka.rs`, `nats.rs`…).
//!
//! The suite lives beside the integration tests rather than in
//! `postbox-testkit`: it runs the `postbox` binary this test crate is built
//! with, shares [`Ctx`] and the Node and Python readers with the other tests,
//! and its consumer tests use every broker crate's consumer, which the
//! testkit (a dependency of the chaos harness and the bench) must not pull in.

mod bullmq;
mod kafka;
pub(crate) mod nats;
pub(crate) mod rabbitmq;
pub(crate) mod redis_streams;
mod sns;
pub(crate) mod sqs;
mod webhook;

mod cloudevents;
mod consumer;
mod delivery;
mod fixture;
mod outage;
mod refusals;
mod replay;

pub use cloudevents::{
    cloudevents_binary_arrive_in_postbox_consumers,
    cloudevents_binary_parse_with_the_official_sdks,
    cloudevents_structured_arrive_in_postbox_consumers,
    cloudevents_structured_parse_with_the_official_sdks,
};
pub use consumer::{
    inbox_consumer_applies_each_message_once_across_a_crash,
    inbox_consumer_refuses_an_unmigrated_schema,
    inbox_consumer_skips_the_re_send_of_a_relay_killed_before_its_commit,
    inbox_consumer_survives_a_postgresql_crash,
};
pub use delivery::{
    events_arrive_once_and_in_key_order_through_relay_kills,
    headers_arrive_as_text_and_a_malformed_trace_context_is_dropped,
};
pub use fixture::*;
pub use outage::a_killed_broker_costs_no_attempts_and_loses_nothing;
pub use refusals::{
    refusals_are_dead_lettered_when_sent_rows_are_deleted,
    refusals_are_dead_lettered_while_other_keys_flow,
};
pub use replay::{
    a_replay_to_a_topic_of_its_own_leaves_the_live_one_alone,
    replayed_events_arrive_again_with_their_ids,
};

use crate::support::*;
use postbox::Handler;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A test of every guarantee for a fixture: `conformance!(Fixture)`, then
/// the capabilities it has (`killable_broker`, `inbox_consumer`).
macro_rules! conformance {
    ($fixture:ty $(, $capability:ident)* $(,)?) => {
        $crate::conformance::tests!(core, $fixture);
        $crate::conformance::tests!(headers, $fixture);
        $($crate::conformance::tests!($capability, $fixture);)*
    };
}
pub(crate) use conformance;

macro_rules! tests {
    (core, $f:ty) => {
        $crate::conformance::tests!($f: events_arrive_once_and_in_key_order_through_relay_kills,
            refusals_are_dead_lettered_while_other_keys_flow,
            refusals_are_dead_lettered_when_sent_rows_are_deleted,
            replayed_events_arrive_again_with_their_ids,
            a_replay_to_a_topic_of_its_own_leaves_the_live_one_alone);
    };
    (headers, $f:ty) => {
        $crate::conformance::tests!($f: headers_arrive_as_text_and_a_malformed_trace_context_is_dropped);
    };
    (killable_broker, $f:ty) => {
        $crate::conformance::tests!($f: a_killed_broker_costs_no_attempts_and_loses_nothing);
    };
    (inbox_consumer, $f:ty) => {
        $crate::conformance::tests!($f: inbox_consumer_applies_each_message_once_across_a_crash,
            inbox_consumer_skips_the_re_send_of_a_relay_killed_before_its_commit,
            inbox_consumer_survives_a_postgresql_crash,
            inbox_consumer_refuses_an_unmigrated_schema);
    };
    (cloudevents, $f:ty) => {
        $crate::conformance::tests!($f: cloudevents_binary_parse_with_the_official_sdks,
            cloudevents_structured_parse_with_the_official_sdks);
    };
    (cloudevents_structured, $f:ty) => {
        $crate::conformance::tests!($f: cloudevents_structured_parse_with_the_official_sdks);
    };
    (cloudevents_consumer, $f:ty) => {
        $crate::conformance::tests!($f: cloudevents_binary_arrive_in_postbox_consumers,
            cloudevents_structured_arrive_in_postbox_consumers);
    };
    (cloudevents_structured_consumer, $f:ty) => {
        $crate::conformance::tests!($f: cloudevents_structured_arrive_in_postbox_consumers);
    };
    ($f:ty: $($name:ident),+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $crate::conformance::$name::<$f>().await;
        }
    )+};
}
pub(crate) use tests;

/// A relay on the fixture's broker.
pub(super) fn relay<F: BrokerFixture>(
    ctx: &Ctx,
    fx: &F,
    extra: &[&str],
    env: &[(&str, &str)],
) -> RelayProcess {
    let mut args = fx.relay_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut all_env = fx.relay_env();
    all_env.extend_from_slice(env);
    ctx.relay_with(&args, &all_env)
}

/// A valid W3C trace parent, different for each `i`.
pub fn traceparent(i: usize) -> String {
    format!("00-4bf92f3577b34da6a3ce929d0e{i:06x}-00f067aa0ba902b7-01")
}

/// Outbox rows by event id.
pub(super) async fn rows(ctx: &Ctx) -> HashMap<String, Row> {
    type Columns = (
        String,
        String,
        String,
        Value,
        Value,
        chrono::DateTime<chrono::Utc>,
    );
    sqlx::query_as::<_, Columns>(&format!(
        "SELECT event_id::text, topic, key, payload, headers, created_at FROM {}.outbox",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(id, topic, key, payload, headers, created_at)| {
        let seq = payload["seq"].as_i64().unwrap_or(0);
        let row = Row {
            topic,
            key,
            seq,
            payload,
            headers,
            created_at,
        };
        (id, row)
    })
    .collect()
}

/// What every sink carries: the key, the event type, the payload intact,
/// and each of the row's headers as text; then the fixture's own mapping.
pub(super) fn check<F: BrokerFixture>(fx: &F, m: &Arrived, row: &Row) {
    assert_eq!(m.key.as_deref(), Some(row.key.as_str()), "key: {m:?}");
    assert_eq!(m.event.as_deref(), Some("test.event"), "event: {m:?}");
    assert_eq!(m.payload, row.payload, "payload intact: {m:?}");
    for (name, value) in row.headers.as_object().into_iter().flatten() {
        assert_eq!(m.headers.get(name), Some(value), "header {name}: {m:?}");
    }
    fx.check(m, row);
}

/// Wait until every row is sent, showing the relays' output if they do not.
pub(super) async fn all_sent(ctx: &Ctx, relays: &[&RelayProcess]) {
    let deadline = Instant::now() + LONG;
    while ctx.unsent().await > 0 {
        if Instant::now() > deadline {
            let out: Vec<String> = relays.iter().map(|r| r.output()).collect();
            panic!(
                "every row sent within {LONG:?}: {} unsent, {:?} dead, failing {:?}\n{}",
                ctx.unsent().await,
                ctx.dead_letters().await,
                ctx.failing().await,
                out.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
