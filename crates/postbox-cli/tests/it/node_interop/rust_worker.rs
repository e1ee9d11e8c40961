//! The Rust inbox worker processes the jobs Node's `queue.add` made, each
//! once, the jobId added twice one job.

use super::*;

/// Records each job in `<schema>.node_jobs` inside the inbox transaction.
struct Recorder {
    table: String,
}

impl postbox_bullmq::Handler for Recorder {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        job: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        sqlx::query(&format!(
            "INSERT INTO {} (job_id, name, data) VALUES ($1, $2, $3)",
            self.table
        ))
        .bind(&job.id)
        .bind(job.event())
        .bind(sqlx::types::Json(job.json::<Value>()?))
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_inbox_worker_processes_node_jobs() {
    require_node_modules();
    let ctx = Ctx::new("node_b").await;
    let table = format!("{}.node_jobs", ctx.schema);
    // No unique constraint: a job processed twice would show as two rows.
    sqlx::raw_sql(&format!(
        "CREATE TABLE {table} (job_id text NOT NULL, name text NOT NULL, data jsonb NOT NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();

    // 20 adds, the last one reusing the jobId of the 6th with other data.
    let mut jobs: Vec<Value> = (0..19)
        .map(|i| {
            let key = ["k1", "k2", "ключ"][i % 3];
            json!({"name": format!("node.job.{}", i % 4), "data": payload(key, i), "jobId": format!("node-{i}-{}", postbox_testkit::suffix())})
        })
        .collect();
    let dup_id = jobs[5]["jobId"].as_str().unwrap().to_owned();
    jobs.push(json!({"name": "node.job.dup", "data": {"should": "be ignored"}, "jobId": dup_id}));

    let (ids, counts) = node_produce(&ctx.queue, &Value::Array(jobs.clone())).await;
    let sent: Vec<&str> = jobs.iter().map(|j| j["jobId"].as_str().unwrap()).collect();
    assert_eq!(
        ids, sent,
        "queue.add returns the given jobId, also when it already exists"
    );
    assert_eq!(ids[19], ids[5]);
    assert_eq!(
        count_of(&counts, "waiting"),
        19,
        "the jobId added twice is one job: {counts}"
    );

    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            postbox::Inbox::new(&ctx.schema).unwrap(),
            "node-interop",
        ),
        &ctx.queue,
        Arc::new(Recorder {
            table: table.clone(),
        }),
        worker_options(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();

    let (count_sql, pool) = (&format!("SELECT count(*) FROM {table}"), &ctx.pool);
    wait_until(
        WAIT,
        "the Rust inbox worker to process the 19 Node jobs",
        move || async move {
            sqlx::query_scalar::<_, i64>(count_sql)
                .fetch_one(pool)
                .await
                .unwrap()
                >= 19
        },
    )
    .await;
    worker.worker().close(5000).await.unwrap();

    // Exactly once each, name and data as Node added them (the first add wins).
    let rows: Vec<(String, String, Value, i64)> = sqlx::query_as(&format!(
        "SELECT job_id, min(name), (array_agg(data))[1], count(*) FROM {table} GROUP BY job_id"
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let got: BTreeMap<String, (String, Value, i64)> = rows
        .into_iter()
        .map(|(id, n, d, c)| (id, (n, d, c)))
        .collect();
    let expected: BTreeMap<String, (String, Value, i64)> = jobs[..19]
        .iter()
        .map(|j| {
            (
                j["jobId"].as_str().unwrap().to_owned(),
                (j["name"].as_str().unwrap().to_owned(), j["data"].clone(), 1),
            )
        })
        .collect();
    assert_eq!(got, expected);

    let inbox: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT message_id FROM {}.inbox WHERE consumer = 'node-interop' ORDER BY message_id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(
        inbox,
        expected.keys().cloned().collect::<Vec<_>>(),
        "one inbox row per job"
    );
    let others: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.inbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(others, 19);

    // Node sees them completed by the Rust worker.
    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "completed"),
        19,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "waiting"), 0, "{counts}");
    assert_eq!(count_of(&counts, "active"), 0, "{counts}");
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    ctx.cleanup().await;
}
