//! The operator console at scale: a schema of 1,000,000 outbox rows (10,000
//! unsent, 1,000 waiting out a backoff) and 100,000 relay dead letters of 20
//! error groups beside 10,000 consumer dead letters; every page and API
//! endpoint requested `REQUESTS` times in turn, p50 and p95, against the
//! same HTTP stack answering without the database (`/api/v1/openapi.json`).
//! `--quick`: a hundredth of the rows.

use super::Ctx;
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox_console::auth::Users;
use postbox_console::{Console, Options};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bench-token-0123456789abcdef";
/// Requests per endpoint and repetition.
const REQUESTS: usize = 40;

async fn seed(ctx: &Ctx, schema: &str, rows: i64) -> Result<(), BenchError> {
    let dead = rows / 10;
    sqlx::raw_sql(&format!(
        "INSERT INTO {schema}.outbox (event_id, topic, event, key, payload, headers, created_at, sent_at)
         SELECT gen_random_uuid(), 'orders-' || (i % 10), 'order.placed', 'k' || (i % 50000),
                jsonb_build_object('n', i), '{{}}', now() - interval '30 minutes',
                CASE WHEN i > {rows} / 100 THEN now() - interval '20 minutes' END
           FROM generate_series(1, {rows}) AS i;
         UPDATE {schema}.outbox SET next_attempt_at = now() + interval '1 hour', attempts = 2,
                last_error = 'broker refused: 503 (attempt 2 of 10)'
          WHERE sent_at IS NULL AND id % 10 = 0;
         INSERT INTO {schema}.outbox_dead_letter (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error, dead_at)
         SELECT i, gen_random_uuid(), 'orders-' || (i % 10), 'order.placed', 'k' || (i % 50000),
                jsonb_build_object('n', i), '{{}}', now() - interval '2 hours', 10,
                'failure kind ' || (i % 20) || ' for event ' || gen_random_uuid() || ' (attempt 10 of 10)',
                now() - make_interval(secs => i % 86400)
           FROM generate_series(1, {dead}) AS i;
         INSERT INTO {schema}.inbox_dead_letter (consumer, message_id, topic, name, key, payload, headers, source, attempts, last_error)
         SELECT 'consumer-' || (i % 3), 'm-' || i, 'orders', 'order.placed', 'k' || i, '\\x7b7d', '[]', 'bench', 5,
                'handler failed on ' || i || ': kind ' || (i % 5)
           FROM generate_series(1, {dead} / 10) AS i;
         ANALYZE {schema}.outbox; ANALYZE {schema}.outbox_dead_letter; ANALYZE {schema}.inbox_dead_letter;"
    ))
    .execute(&ctx.pool)
    .await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn run(ctx: &Ctx) -> Result<(), BenchError> {
    let rows: i64 = if ctx.p.events < 10_000 {
        10_000
    } else {
        1_000_000
    };
    let schema = ctx.schema("console", WakeUp::Statement).await?;
    println!(
        "console: {rows} outbox rows ({} unsent), {} relay dead letters, {} consumer dead letters; {REQUESTS} requests per endpoint, {} repetition(s)",
        rows / 100,
        rows / 10,
        rows / 100,
        ctx.p.reps
    );
    let seeded = Instant::now();
    seed(ctx, schema.as_str(), rows).await?;
    println!("  seeded in {:.1} s", seeded.elapsed().as_secs_f64());
    let console = Console::new(
        ctx.pool.clone(),
        Options {
            schemas: vec![schema.clone()],
            users: Users::parse(&format!("bench viewer {TOKEN}"))?,
            base_path: String::new(),
        },
    )?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let stop = CancellationToken::new();
    let server = {
        let (console, stop) = (console.clone(), stop.clone());
        tokio::spawn(async move { console.serve(listener, stop).await })
    };
    let http = reqwest::Client::new();
    let s = schema.as_str();
    let fingerprint = "failure kind N for event <id> (attempt N of N)";
    let endpoints: Vec<(&str, String)> = vec![
        (
            "baseline: openapi.json (no database)",
            "/api/v1/openapi.json".into(),
        ),
        ("API schema status", format!("/api/v1/schemas/{s}")),
        (
            "API halted keys",
            format!("/api/v1/schemas/{s}/halted-keys"),
        ),
        (
            "API dead-letter groups",
            format!("/api/v1/schemas/{s}/dead-letters/groups"),
        ),
        (
            "API dead letters, first page",
            format!("/api/v1/schemas/{s}/dead-letters"),
        ),
        (
            "API dead letters of a group",
            format!(
                "/api/v1/schemas/{s}/dead-letters?fingerprint={}",
                fingerprint
                    .replace(' ', "%20")
                    .replace('<', "%3C")
                    .replace('>', "%3E")
                    .replace('(', "%28")
                    .replace(')', "%29")
            ),
        ),
        (
            "API dead letters, a later page",
            format!("/api/v1/schemas/{s}/dead-letters?after={}", rows / 20),
        ),
        (
            "API one dead letter",
            format!("/api/v1/schemas/{s}/dead-letters/relay/{}", rows / 20),
        ),
        (
            "API consumer groups",
            format!("/api/v1/schemas/{s}/dead-letters/groups?side=consumer"),
        ),
        ("page overview", "/".into()),
        (
            "page dead-letter groups",
            format!("/schemas/{s}/dead-letters"),
        ),
        (
            "page a group's dead letters",
            format!(
                "/schemas/{s}/dead-letters/list?side=relay&fingerprint={}",
                fingerprint
                    .replace(' ', "%20")
                    .replace('<', "%3C")
                    .replace('>', "%3E")
                    .replace('(', "%28")
                    .replace(')', "%29")
            ),
        ),
    ];
    let mut baseline_p95 = Duration::ZERO;
    println!(
        "  {:<40} {:>9} {:>9} {:>12}",
        "endpoint", "p50 ms", "p95 ms", "p95 ÷ base"
    );
    for (name, path) in &endpoints {
        let mut times = Vec::with_capacity(REQUESTS * ctx.p.reps);
        for _ in 0..ctx.p.reps {
            for _ in 0..REQUESTS {
                let t = Instant::now();
                let resp = http
                    .get(format!("{base}{path}"))
                    .bearer_auth(TOKEN)
                    .send()
                    .await?;
                let status = resp.status();
                let _ = resp.bytes().await?;
                times.push(t.elapsed());
                if !status.is_success() {
                    return Err(format!("{path}: {status}").into());
                }
            }
        }
        times.sort();
        let (p50, p95) = (percentile(&times, 0.5), percentile(&times, 0.95));
        if baseline_p95.is_zero() {
            baseline_p95 = p95;
        }
        println!(
            "  {name:<40} {:>9.2} {:>9.2} {:>11.1}×",
            p50.as_secs_f64() * 1e3,
            p95.as_secs_f64() * 1e3,
            p95.as_secs_f64() / baseline_p95.as_secs_f64()
        );
    }
    stop.cancel();
    server.await??;
    ctx.drop_schema(&schema).await?;
    Ok(())
}
