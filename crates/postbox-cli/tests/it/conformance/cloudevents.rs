//! `format = "cloudevents"`: what a sink writes, in either content mode,
//! parses with the official CloudEvents SDKs (npm `cloudevents` 10, PyPI
//! `cloudevents` 2.2), each by the broker's protocol binding, with every
//! attribute as the row says; and the broker crate's inbox consumer reads it
//! back as the same message postbox's own format gives.

use super::*;
use postbox::{BoxError, CancellationToken, InboxConsumer, Message};
use std::sync::{Arc, Mutex};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub async fn cloudevents_binary_parse_with_the_official_sdks<F: BrokerFixture>() {
    sdks_parse::<F>("binary").await;
}

pub async fn cloudevents_structured_parse_with_the_official_sdks<F: BrokerFixture>() {
    sdks_parse::<F>("structured").await;
}

pub async fn cloudevents_binary_arrive_in_postbox_consumers<F: ConsumerFixture>() {
    consumers_read::<F>("binary").await;
}

pub async fn cloudevents_structured_arrive_in_postbox_consumers<F: ConsumerFixture>() {
    consumers_read::<F>("structured").await;
}

/// Two events relayed as CloudEvents in `mode`: `k1` with a trace context
/// and a header named as an extension may be (`tenant`), `k2` with neither.
/// Returns the relay, once both are sent, and the `source` they carry.
async fn relayed<F: BrokerFixture>(ctx: &Ctx, fx: &F, mode: &str) -> (RelayProcess, String) {
    for (key, seq, headers) in [
        (
            "k1",
            1,
            serde_json::json!({"traceparent": TRACEPARENT, "tracestate": "a=b", "tenant": "acme"}),
        ),
        ("k2", 2, serde_json::json!({})),
    ] {
        sqlx::query(&format!(
            "INSERT INTO {}.outbox (topic, event, key, payload, headers) VALUES ($1, 'test.event', $2, $3, $4)",
            ctx.schema
        ))
        .bind(&ctx.queue)
        .bind(key)
        .bind(serde_json::json!({"key": key, "seq": seq, "text": "é \"%"}))
        .bind(headers)
        .execute(&ctx.pool)
        .await
        .unwrap();
    }
    let args = fx.relay_args();
    let sink = args[args.iter().position(|a| a == "--sink").unwrap() + 1].replace('_', "-");
    let mut flags = vec![format!("--{sink}-format"), "cloudevents".into()];
    if sink != "bullmq" {
        flags.extend([format!("--{sink}-cloudevents-mode"), mode.to_owned()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let relay = relay(ctx, fx, &flags, &[]);
    all_sent(ctx, &[&relay]).await;
    assert!(ctx.dead_letters().await.is_empty());
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    (relay, format!("//postbox/{database}/{}", ctx.schema))
}

async fn sdks_parse<F: BrokerFixture>(mode: &str) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let (relay, source) = relayed(&ctx, &fx, mode).await;
    let wires = fx.read_wire(&ctx.queue, 2).await;
    assert_eq!(wires.len(), 2, "{wires:?}");
    let file = std::env::temp_dir().join(format!("postbox-ce-{}.json", ctx.schema));
    std::fs::write(&file, serde_json::to_vec(&wires).unwrap()).unwrap();
    let path = file.to_str().unwrap();
    let node_out = crate::node_interop::node("cloudevents_parse.mjs", &[path]).await;
    let python_out = python("cloudevents_parse.py", &[path]).await;
    let rows = rows(&ctx).await;
    for (sdk, out) in [("node", node_out.join("")), ("python", python_out)] {
        let parsed: Vec<Value> = serde_json::from_str(&out).expect("the SDK's JSON");
        assert_eq!(parsed.len(), 2, "{sdk}: {out}");
        for event in parsed {
            check_event::<F>(sdk, mode, &event, &rows, &source);
        }
    }
    println!("{} {mode}: both SDKs read every attribute", F::NAME);
    let _ = std::fs::remove_file(&file);
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// One event as an SDK read it, against its row: the attributes exactly,
/// the time to the millisecond (Node's `Date`), the data as JSON.
fn check_event<F: BrokerFixture>(
    sdk: &str,
    mode: &str,
    event: &Value,
    rows: &HashMap<String, Row>,
    source: &str,
) {
    let mut attributes = event["attributes"].as_object().unwrap().clone();
    let id = attributes["id"].as_str().unwrap().to_owned();
    let row = rows.get(&id).unwrap_or_else(|| panic!("{sdk}: id {id}"));
    let created = row.created_at;
    let time = attributes.remove("time").expect("time");
    let time = chrono::DateTime::parse_from_rfc3339(time.as_str().unwrap()).unwrap();
    let off = (time.with_timezone(&chrono::Utc) - created)
        .num_microseconds()
        .unwrap();
    assert!(off.abs() < 1000, "{sdk}: time {time} for {created}");
    let mut expected = serde_json::json!({
        "specversion": "1.0", "id": id, "source": source, "type": "test.event",
        "datacontenttype": "application/json", "subject": row.key,
    });
    if mode == "structured" || F::CE_BINARY_PARTITIONKEY {
        expected["partitionkey"] = row.key.clone().into();
    }
    if row.key == "k1" {
        expected["traceparent"] = TRACEPARENT.into();
        expected["tracestate"] = "a=b".into();
        expected["tenant"] = "acme".into();
    }
    assert_eq!(Value::Object(attributes), expected, "{sdk} {mode}: {event}");
    assert_eq!(event["data"], row.payload, "{sdk} {mode}: data");
}

/// Every message the handler was given.
#[derive(Default)]
struct Seen(Mutex<Vec<Message>>);

impl Handler for Seen {
    async fn handle(&self, _: &mut sqlx::PgConnection, msg: &Message) -> Result<(), BoxError> {
        self.0.lock().unwrap().push(msg.clone());
        Ok(())
    }
}

/// The broker crate's inbox consumer reads the CloudEvents as it reads
/// postbox's format: id = the event id (so its inbox recognises them),
/// event type, key, payload and trace context; the other attributes under
/// `Message::cloudevent`.
async fn consumers_read<F: ConsumerFixture>(mode: &str) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let (relay, source) = relayed(&ctx, &fx, mode).await;
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "cloudevents",
    );
    let seen = Arc::new(Seen::default());
    let stop = CancellationToken::new();
    let consume = Consume {
        inbox,
        handler: seen.clone(),
        n: 1,
        stop: stop.clone(),
    };
    let task = tokio::spawn(fx.consume(&ctx.queue, consume));
    wait_until(LONG, "the consumer took both events", || async {
        seen.0.lock().unwrap().len() >= 2
    })
    .await;
    stop.cancel();
    let _ = tokio::time::timeout(LONG, task).await;
    let rows = rows(&ctx).await;
    for m in seen.0.lock().unwrap().iter() {
        let row = rows
            .get(&m.id)
            .unwrap_or_else(|| panic!("an event id: {m:?}"));
        assert_eq!(m.event(), "test.event", "{m:?}");
        assert_eq!(m.key.as_deref(), Some(row.key.as_str()), "{m:?}");
        assert_eq!(m.json::<Value>().unwrap(), row.payload, "{m:?}");
        assert_eq!(m.cloudevent("source"), Some(source.as_str()), "{m:?}");
        assert_eq!(m.cloudevent("specversion"), Some("1.0"), "{m:?}");
        let traced = m.trace_context().map(|tc| tc.traceparent);
        if row.key == "k1" {
            assert_eq!(traced.as_deref(), Some(TRACEPARENT), "{m:?}");
            assert_eq!(m.cloudevent("tenant"), Some("acme"), "{m:?}");
        } else {
            assert_eq!(traced, None, "{m:?}");
        }
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}
