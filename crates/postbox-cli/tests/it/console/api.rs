//! Every endpoint of the console's API, with bad input and roles.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_a_token_and_show_groups_pages_and_one_dead_letter() {
    let ctx = Ctx::new("con_read").await;
    seed(&ctx).await;
    let console = ConsoleProcess::start(&ctx.schema, &[]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;

    let (status, body) = c.get("/api/v1/schemas", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
    let (status, _) = c
        .get("/api/v1/schemas", Some("not-a-user-token-at-all"))
        .await;
    assert_eq!(status, 401);

    let (status, body) = c.get("/api/v1/schemas", Some(VIEWER)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["schema"], s.as_str());
    assert_eq!(body[0]["dead_letters"], 5);
    assert_eq!(body[0]["consumer_dead_letters"], 1);
    let (status, one) = c.get(&format!("/api/v1/schemas/{s}"), Some(VIEWER)).await;
    assert_eq!(status, 200);
    assert_eq!(one["read_path"], "position");

    // Groups: the error's ids and numbers normalised, largest first.
    let (status, groups) = c
        .get(
            &format!("/api/v1/schemas/{s}/dead-letters/groups"),
            Some(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{groups}");
    let groups = groups.as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0]["count"], 3);
    assert_eq!(groups[1]["count"], 2);
    let fp = groups[0]["fingerprint"].as_str().unwrap().to_owned();
    assert!(fp.contains("(attempt N of N) event <id>"), "{fp}");
    assert_eq!(groups[0]["topics"], json!(["orders"]));

    // A group's dead letters, a page at a time.
    let q = format!(
        "/api/v1/schemas/{s}/dead-letters?fingerprint={}&limit=2",
        urlencode(&fp)
    );
    let (status, page) = c.get(&q, Some(VIEWER)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["matching"], 3);
    let after = page["next_after"].as_i64().expect("a next page");
    let (_, rest) = c.get(&format!("{q}&after={after}"), Some(VIEWER)).await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after"], Value::Null);

    // The consumer side.
    let (status, page) = c
        .get(
            &format!("/api/v1/schemas/{s}/dead-letters?side=consumer&consumer=shipping"),
            Some(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"][0]["message_id"], "m-1");
    assert_eq!(page["items"][0]["payload"], json!({}));

    // One dead letter, whole.
    let (status, d) = c
        .get(
            &format!("/api/v1/schemas/{s}/dead-letters/relay/4"),
            Some(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["topic"], "big");
    assert_eq!(d["payload"], json!({"n": 1}));

    // Deliveries per minute: sixty minutes, none here (no relay ran).
    let (status, minutes) = c
        .get(&format!("/api/v1/schemas/{s}/delivered"), Some(VIEWER))
        .await;
    assert_eq!(status, 200, "{minutes}");
    assert_eq!(minutes.as_array().unwrap().len(), 60);
    assert!(minutes
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["delivered"] == 0));

    // Halted keys: none, then one waiting out a backoff and one blocked.
    let (status, h) = c
        .get(&format!("/api/v1/schemas/{s}/halted-keys"), Some(VIEWER))
        .await;
    assert_eq!((status, h), (200, json!([])));
    ctx.produce(vec![
        ctx.event("h1", 1),
        ctx.event("h1", 2),
        ctx.event("h2", 1),
    ])
    .await;
    sqlx::raw_sql(&format!(
        "UPDATE {s}.outbox SET attempts = 3, last_error = 'broker said no', next_attempt_at = now() + interval '1 hour'
          WHERE key = 'h1' AND id = (SELECT min(id) FROM {s}.outbox WHERE key = 'h1');
         UPDATE {s}.outbox SET attempts = 10, last_error = 'out of attempts', next_attempt_at = 'infinity' WHERE key = 'h2'"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let (status, h) = c
        .get(&format!("/api/v1/schemas/{s}/halted-keys"), Some(VIEWER))
        .await;
    assert_eq!(status, 200, "{h}");
    let h = h.as_array().unwrap();
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(
        (h[0]["key"].clone(), h[0]["blocked"].clone()),
        (json!("h1"), json!(false))
    );
    assert!(h[0]["next_attempt_at"].is_string(), "{h:?}");
    assert_eq!(h[0]["last_error"], "broker said no");
    assert_eq!(
        (h[1]["key"].clone(), h[1]["blocked"].clone()),
        (json!("h2"), json!(true))
    );
    assert!(h[1]["next_attempt_at"].is_null(), "{h:?}");
    let page = c
        .http
        .get(format!("{}/", c.base))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("blocked until an operator acts") && page.contains("broker said no"),
        "{page}"
    );

    // The audit (empty here).
    let (status, a) = c
        .get(&format!("/api/v1/schemas/{s}/audit"), Some(VIEWER))
        .await;
    assert_eq!((status, a), (200, json!([])));
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_the_reason() {
    let ctx = Ctx::new("con_bad").await;
    seed(&ctx).await;
    let console = ConsoleProcess::start(&ctx.schema, &[]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;
    let bad = |path: String, status: u16, needle: &'static str| {
        let c = &c;
        async move {
            let (got, body) = c.get(&path, Some(VIEWER)).await;
            assert_eq!(got, status, "{path}: {body}");
            let e = body["error"].as_str().unwrap_or_default();
            assert!(e.contains(needle), "{path}: {e}");
        }
    };
    bad(
        "/api/v1/schemas/nope".into(),
        404,
        "is not served by this console",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?older_than_seconds=soon"),
        400,
        "older_than_seconds",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?colour=red"),
        400,
        "colour",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?ids=1,x"),
        400,
        "\"x\"",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?limit=0"),
        400,
        "1 to 1000",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?side=broker"),
        400,
        "side",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?consumer=shipping"),
        400,
        "side=consumer",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters?older_than_seconds=60&newer_than_seconds=10"),
        400,
        "swap",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters/relay/999"),
        404,
        "no relay dead letter 999",
    )
    .await;
    bad(
        format!("/api/v1/schemas/{s}/dead-letters/relay/abc"),
        400,
        "not a dead-letter id",
    )
    .await;

    let post = |body: Value, status: u16, needle: &'static str| {
        let c = &c;
        let path = format!("/api/v1/schemas/{s}/dead-letters/replay");
        async move {
            let (got, resp) = c.post(&path, Some(ADMIN), body.clone()).await;
            assert_eq!(got, status, "{body}: {resp}");
            let e = resp["error"].as_str().unwrap_or_default();
            assert!(e.contains(needle), "{body}: {e}");
        }
    };
    post(json!({}), 400, "no filter given").await;
    post(
        json!({"filter": {"topic": "none-such"}}),
        400,
        "nothing to replay",
    )
    .await;
    post(
        json!({"filter": {"topic": "orders"}, "colour": 1}),
        400,
        "colour",
    )
    .await;
    post(
        json!({"filter": {"topic": "orders"}, "confirmed_count": 2}),
        409,
        "3 match now",
    )
    .await;
    // Nothing was done by any of them.
    assert_eq!(ctx.dead_letters().await.len(), 5);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_replays_a_group_and_purges_a_consumer_dead_letter_a_viewer_cannot() {
    let ctx = Ctx::new("con_act").await;
    seed(&ctx).await;
    let console = ConsoleProcess::start(&ctx.schema, &[]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;
    let (_, groups) = c
        .get(
            &format!("/api/v1/schemas/{s}/dead-letters/groups"),
            Some(VIEWER),
        )
        .await;
    let fp = groups[0]["fingerprint"].as_str().unwrap().to_owned();
    let replay = format!("/api/v1/schemas/{s}/dead-letters/replay");

    let (status, body) = c.post(&replay, Some(VIEWER), group_body(&fp, 3)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("admin"), "{body}");

    let (status, body) = c.post(&replay, Some(ADMIN), group_body(&fp, 3)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 3);
    // Back in the outbox, starting over; the other group stays.
    assert_eq!(ctx.unsent().await, 3);
    assert_eq!(ctx.max_attempts().await, 0);
    assert_eq!(ctx.dead_letters().await.len(), 2);

    let (status, body) = c
        .post(
            &format!("/api/v1/schemas/{s}/dead-letters/purge"),
            Some(ADMIN),
            json!({"side": "consumer", "filter": {"consumer": "shipping"}, "confirmed_count": 1}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {s}.inbox_dead_letter"))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);

    // Both recorded, newest first, with who and what.
    let (_, audit) = c
        .get(&format!("/api/v1/schemas/{s}/audit"), Some(VIEWER))
        .await;
    let audit = audit.as_array().unwrap();
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!(audit[0]["action"], "consumer_dead_letters.purge");
    assert_eq!(audit[1]["action"], "dead_letters.replay");
    assert_eq!(audit[1]["actor"], "alice");
    assert_eq!(audit[1]["count"], 3);
    assert_eq!(audit[1]["selection"]["fingerprint"], fp.as_str());
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_answers_an_id_and_logs_the_cause_under_it() {
    let ctx = Ctx::new("con_err").await;
    let console = ConsoleProcess::start(&ctx.schema, &[]).await;
    let c = Client::new(&console);
    let s = &ctx.schema;
    sqlx::query(&format!("DROP TABLE {s}.console_audit"))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let (status, body) = c
        .get(&format!("/api/v1/schemas/{s}/audit"), Some(VIEWER))
        .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        !message.contains("console_audit") && !message.contains("relation"),
        "the database's text stays in the log: {message}"
    );
    let id = message
        .split("error id ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no error id in {message}"))
        .to_owned();
    assert_eq!(id.len(), 16, "{message}");
    wait_until(LONG, "the log to name the id and the cause", || async {
        let log = console.output();
        log.lines()
            .any(|l| l.contains(&id) && l.contains("console_audit"))
    })
    .await;
    ctx.cleanup().await;
}
