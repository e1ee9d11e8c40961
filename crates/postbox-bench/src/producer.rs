//! Producer overhead: concurrent producers (one connection each) doing a
//! small business insert per transaction; transactions/s with nothing else,
//! with an outbox row, and with an outbox row and each wake-up policy, as a
//! ratio to the business insert alone.

use super::report::Section;
use super::{cpu, relay_ready, Ctx, NullSink};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Event, Outbox, SchemaName};
use postbox_relay::{Config, Relay, SentRows};
use sqlx::{Connection, PgConnection};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const ALONE: &str = "business insert alone";
/// The default wake-up without a relay: what "relay draining" rows lose from.
const ADAPTIVE: &str = "+ outbox row, notify = adaptive";

#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    /// Write an outbox row in the transaction.
    outbox: bool,
    notify: WakeUp,
    /// A relay drains the outbox meanwhile, with delivered rows marked or
    /// deleted (NullSink: PostgreSQL's share only).
    relay: Option<SentRows>,
}

const fn variant(
    name: &'static str,
    outbox: bool,
    notify: WakeUp,
    relay: Option<SentRows>,
) -> Variant {
    Variant {
        name,
        outbox,
        notify,
        relay,
    }
}

const VARIANTS: [Variant; 8] = [
    variant(ALONE, false, WakeUp::Off, None),
    variant("+ outbox row, notify = off", true, WakeUp::Off, None),
    variant(ADAPTIVE, true, WakeUp::Adaptive, None),
    variant(
        "+ outbox row, notify = statement",
        true,
        WakeUp::Statement,
        None,
    ),
    variant(
        "+ outbox row, notify = statement, relay draining",
        true,
        WakeUp::Statement,
        Some(SentRows::Mark),
    ),
    variant(
        "+ outbox row, notify = adaptive, relay draining",
        true,
        WakeUp::Adaptive,
        Some(SentRows::Mark),
    ),
    variant(
        "+ outbox row, notify = adaptive, relay draining, sent = delete",
        true,
        WakeUp::Adaptive,
        Some(SentRows::Delete),
    ),
    // Measured only on a server with wal_level = logical.
    variant(
        "+ outbox row, notify = logical, relay draining",
        true,
        WakeUp::Logical,
        Some(SentRows::Mark),
    ),
];

pub async fn run(ctx: &Ctx) -> Result<Section, BenchError> {
    let p = &ctx.p;
    println!(
        "Producer overhead: {} producers, {:?} per variant, {} cores",
        p.producers, p.producer_duration, ctx.cores
    );
    let logical = super::latency::logical_available(ctx).await?;
    let variants: Vec<Variant> = VARIANTS
        .into_iter()
        .filter(|v| logical || v.notify != WakeUp::Logical)
        .collect();
    let mut tps = vec![Vec::new(); variants.len()];
    for rep in 1..=p.reps {
        for (i, v) in variants.iter().enumerate() {
            let m = measure(ctx, *v).await?;
            println!("  rep {rep}: {:<50} {:>8.0} tps", v.name, m.rate);
            println!("         {}", m.cpu);
            tps[i].push(m.rate);
        }
    }
    let mut s = Section::new(
        &format!("Producer overhead: {} concurrent producers", p.producers),
        "tps",
    );
    for (v, samples) in variants.iter().zip(tps) {
        if v.name == ALONE {
            s.baseline(ALONE, samples);
        } else if v.relay.is_some() && v.notify == WakeUp::Adaptive {
            s.measured(v.name, samples, &[ALONE, ADAPTIVE]);
        } else {
            s.measured(v.name, samples, &[ALONE]);
        }
    }
    s.print();
    Ok(s)
}

async fn measure(ctx: &Ctx, v: Variant) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("producer", v.notify).await?;
    // Bench scaffolding: the "business" table the producers write to.
    sqlx::raw_sql(&format!(
        "CREATE TABLE {schema}.orders (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             customer int NOT NULL,
             amount numeric(12,2) NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now())"
    ))
    .execute(&ctx.pool)
    .await?;
    let shutdown = CancellationToken::new();
    let relay = if let Some(sent) = v.relay {
        let config = Config {
            sent,
            ..ctx.relay_config(&schema, Duration::from_secs(1))
        };
        let relay = Relay::new(config, Arc::new(NullSink))?;
        let stats = relay.stats();
        let task = tokio::spawn(relay.run(shutdown.clone()));
        relay_ready(&stats).await?;
        if v.notify == WakeUp::Logical {
            super::latency::logical_streaming(ctx).await?;
        }
        let before = stats.snapshot();
        Some((task, stats, before))
    } else {
        None
    };
    // Separate connections, all open before the clock starts.
    let mut conns = Vec::new();
    for _ in 0..p.producers {
        conns.push(PgConnection::connect(&p.database_url).await?);
    }
    let window = cpu::Window::start().per("transaction");
    let until = Instant::now() + p.producer_duration;
    let tasks = conns
        .into_iter()
        .enumerate()
        .map(|(i, conn)| tokio::spawn(produce(conn, schema.clone(), v.outbox, i as i32, until)));
    let mut total = 0u64;
    let mut open = Vec::new();
    for t in futures::future::join_all(tasks).await {
        let (n, conn) = t??;
        total += n;
        open.push(conn);
    }
    let measured = window.finish(total);
    // How the relay kept up: small batches are what its work per event is about.
    if let Some((_, stats, before)) = &relay {
        let now = stats.snapshot();
        let (events, batches) = (
            now.published - before.published,
            now.batches - before.batches,
        );
        println!(
            "         relay: {events} events in {batches} batches ({:.1} a batch)",
            events as f64 / batches.max(1) as f64
        );
    }
    for conn in open {
        conn.close().await?;
    }
    shutdown.cancel();
    if let Some((task, ..)) = relay {
        task.await??;
    }
    super::latency::drop_publication(ctx, &schema).await?;
    ctx.drop_schema(&schema).await?;
    Ok(measured)
}

/// One producer: insert an order (and its event) per transaction until `until`.
async fn produce(
    mut conn: PgConnection,
    schema: SchemaName,
    with_outbox: bool,
    customer: i32,
    until: Instant,
) -> Result<(u64, PgConnection), BenchError> {
    let outbox = Outbox::new(schema.as_str())?;
    let insert = format!(
        "INSERT INTO {schema}.orders (customer, amount) VALUES ($1, $2::numeric) RETURNING id"
    );
    let mut n = 0u64;
    while Instant::now() < until {
        let mut tx = conn.begin().await?;
        let (id,): (i64,) = sqlx::query_as(&insert)
            .bind(customer)
            .bind("19.99")
            .fetch_one(&mut *tx)
            .await?;
        if with_outbox {
            let event = Event::new(
                "orders",
                "order.created",
                serde_json::json!({ "id": id, "customer": customer, "amount": "19.99" }),
            )
            .key(format!("customer:{customer}"));
            outbox.enqueue(&mut tx, event).await?;
        }
        tx.commit().await?;
        n += 1;
    }
    // Closed by the caller once the CPU figures are read: a backend that has
    // exited no longer shows its CPU time in /proc.
    Ok((n, conn))
}
