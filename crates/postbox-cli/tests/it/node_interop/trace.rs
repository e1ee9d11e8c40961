//! The trace context reaches Node and Rust consumers.

use super::*;

/// Captures what the handler sees of each job's trace context.
struct TraceRecorder {
    seen: std::sync::Mutex<Vec<(String, Option<postbox::TraceContext>, Value)>>,
}

impl postbox_bullmq::Handler for TraceRecorder {
    async fn handle(
        &self,
        _tx: &mut sqlx::PgConnection,
        job: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        self.seen
            .lock()
            .unwrap()
            .push((job.id.clone(), job.trace_context(), job.json::<Value>()?));
        Ok(())
    }
}

/// The row's `traceparent`/`tracestate` reach a Node `Worker` (as `job.data._trace`)
/// and the Rust inbox handler (`trace_context(&job)`); rows without one, and
/// payloads that already use the field, arrive unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_reaches_node_and_rust_consumers() {
    require_node_modules();
    let ctx = Ctx::new("node_trace").await;
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04x}-00f067aa0ba902b7-01");
    let events = vec![
        Event::new(&ctx.queue, "traced", json!({"n": 0}))
            .key("t")
            .traceparent(tp(0))
            .header("tracestate", "congo=t61rcWkgMzE"),
        Event::new(&ctx.queue, "traced", json!({"n": 1}))
            .key("t")
            .traceparent(tp(1)),
        Event::new(&ctx.queue, "untraced", json!({"n": 2})).key("t"),
        // The payload owns `_trace`: left alone.
        Event::new(&ctx.queue, "own-field", json!({"n": 3, "_trace": "mine"}))
            .key("t")
            .traceparent(tp(3)),
    ];
    ctx.produce(events).await;
    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let c = &ctx;
    wait_until(WAIT, "relay to publish every event", move || async move {
        c.unsent().await == 0
    })
    .await;
    drop(relay);

    let data: Vec<Value> = node_consume(&ctx.queue, 4)
        .await
        .into_iter()
        .map(|j| j["data"].clone())
        .collect();
    assert_eq!(
        data,
        // Beside the payload's fields: the key under `_postbox`, the trace
        // context under `_trace` unless the payload has a `_trace` of its own.
        vec![
            json!({"n": 0, "_trace": {"traceparent": tp(0), "tracestate": "congo=t61rcWkgMzE"}, "_postbox": {"key": "t"}}),
            json!({"n": 1, "_trace": {"traceparent": tp(1)}, "_postbox": {"key": "t"}}),
            json!({"n": 2, "_postbox": {"key": "t"}}),
            json!({"n": 3, "_trace": "mine", "_postbox": {"key": "t"}}),
        ]
    );

    // The same jobs, re-added under a second queue by Node, seen by the Rust worker.
    let queue2 = format!("{}-rust", ctx.queue);
    let jobs: Vec<Value> = data
        .iter()
        .enumerate()
        .map(|(i, d)| json!({"name": "x", "data": d, "jobId": format!("j{i}")}))
        .collect();
    node_produce(&queue2, &Value::Array(jobs)).await;
    let handler = Arc::new(TraceRecorder {
        seen: Default::default(),
    });
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            postbox::Inbox::new(&ctx.schema).unwrap(),
            "trace",
        ),
        &queue2,
        handler.clone(),
        worker_options(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let h = &handler;
    wait_until(WAIT, "the Rust worker to see 4 jobs", move || async move {
        h.seen.lock().unwrap().len() >= 4
    })
    .await;
    worker.worker().close(5000).await.unwrap();
    let mut seen = handler.seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let tc0 = seen[0].1.clone().expect("j0 has a trace context");
    assert_eq!(tc0.traceparent, tp(0));
    assert_eq!(tc0.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    assert_eq!(
        seen[1].1.as_ref().map(|t| t.traceparent.clone()),
        Some(tp(1))
    );
    assert_eq!(seen[2].1, None);
    assert_eq!(seen[3].1, None);
    // The payload the handler reads: the relay's trace field taken out, a
    // payload's own `_trace` left in.
    let payloads: Vec<Value> = seen.iter().map(|s| s.2.clone()).collect();
    assert_eq!(
        payloads,
        vec![
            json!({"n": 0}),
            json!({"n": 1}),
            json!({"n": 2}),
            json!({"n": 3, "_trace": "mine"})
        ]
    );
    ctx.cleanup().await;
}
