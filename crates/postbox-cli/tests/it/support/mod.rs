//! Helpers shared by the integration tests.

#![allow(dead_code)]

mod redis_view;
mod wake_locks;

pub use redis_view::RedisView;
pub use wake_locks::{armed_partitions, asleep_consolidated};

use postbox::{Event, Outbox};
pub use postbox_testkit::{wait_until, RedisServer, RelayProcess};
use sqlx::PgPool;
use std::time::Duration;

/// Relay flags that dead-letter a refused event after two quick attempts.
pub const FAST_DEAD_LETTER: &[&str] = &[
    "--max-attempts",
    "2",
    "--retry-min",
    "50ms",
    "--retry-max",
    "100ms",
];

/// The `postbox` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_postbox");

/// A migrated schema of its own plus a queue name of its own.
pub struct Ctx {
    pub pool: PgPool,
    pub schema: String,
    pub outbox: Outbox,
    pub queue: String,
}

impl Ctx {
    pub async fn new(prefix: &str) -> Ctx {
        let pool = postbox_testkit::pool().await;
        let schema = postbox_testkit::unique_schema(prefix);
        let mut conn = pool.acquire().await.unwrap();
        postbox::migrate::run(
            &mut conn,
            &postbox::SchemaName::new(&schema).unwrap(),
            Default::default(),
        )
        .await
        .unwrap();
        Ctx {
            outbox: Outbox::new(&schema).unwrap(),
            queue: format!("{schema}-q"),
            schema,
            pool,
        }
    }

    /// Relay args for this schema, fast timings for tests.
    pub fn relay_args(&self) -> Vec<String> {
        vec![
            "--database-url".into(),
            postbox_testkit::database_url(),
            "--schemas".into(),
            self.schema.clone(),
            "--rebalance-interval".into(),
            "200ms".into(),
            "--backoff-max".into(),
            "500ms".into(),
            "--publish-timeout".into(),
            "3s".into(),
        ]
    }

    /// Start a relay on this schema publishing to BullMQ at `redis_url`
    /// (the default sink).
    pub fn relay(&self, redis_url: &str, extra: &[&str], env: &[(&str, &str)]) -> RelayProcess {
        let mut args = vec!["--redis-url", redis_url];
        args.extend_from_slice(extra);
        self.relay_with(&args, env)
    }

    /// Start a relay on this schema with these flags besides the schema's
    /// own: `--sink` and its settings among them.
    pub fn relay_with(&self, extra: &[&str], env: &[(&str, &str)]) -> RelayProcess {
        let mut args = self.relay_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RelayProcess::spawn(BIN, &args, env)
    }

    /// Enqueue and commit one event per transaction.
    pub async fn produce(&self, events: Vec<Event>) {
        for e in events {
            let mut tx = self.pool.begin().await.unwrap();
            self.outbox.enqueue(&mut tx, e).await.unwrap();
            tx.commit().await.unwrap();
        }
    }

    /// An event for this test's queue.
    pub fn event(&self, key: &str, seq: usize) -> Event {
        event(&self.queue, key, seq)
    }

    pub async fn unsent(&self) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.outbox WHERE sent_at IS NULL",
            self.schema
        ))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    pub async fn dead_letters(&self) -> Vec<(String, String)> {
        sqlx::query_as(&format!(
            "SELECT event_id::text, last_error FROM {}.outbox_dead_letter ORDER BY id",
            self.schema
        ))
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    pub async fn cleanup(self) {
        postbox_testkit::drop_schema(&self.pool, &self.schema).await;
    }
}

/// An event for `queue` whose data carries its key and sequence number
/// (what [`RedisView::waiting`] and [`assert_per_key_order`] read).
pub fn event(queue: &str, key: &str, seq: usize) -> Event {
    Event::new(
        queue,
        "test.event",
        serde_json::json!({"key": key, "seq": seq}),
    )
    .key(key)
}

/// Per key, the seqs must be strictly increasing in add order.
pub fn assert_per_key_order(seen: &[(String, String, u64)]) {
    let mut last: std::collections::HashMap<&str, u64> = Default::default();
    for (id, key, seq) in seen {
        if let Some(prev) = last.insert(key, *seq) {
            assert!(
                *seq > prev,
                "key {key}: seq {seq} (job {id}) came after {prev}"
            );
        }
    }
}

pub const LONG: Duration = Duration::from_secs(60);

/// A consumer's effect for the crash tests of every broker: records each
/// message in `<schema>.effects` ([`Ctx::effects_table`]) inside the inbox
/// transaction, counts the duplicates the inbox skipped, and can hang after
/// the commit of one message (a consumer dying between its inbox commit and
/// its acknowledgement).
pub struct Effects {
    insert: String,
    pub duplicates: std::sync::atomic::AtomicUsize,
    hang_on: Option<String>,
    pub hung: tokio::sync::Notify,
}

impl Effects {
    /// Hangs after the commit of the message `hang_on`, if any.
    pub fn new(schema: &str, hang_on: Option<String>) -> std::sync::Arc<Effects> {
        std::sync::Arc::new(Effects {
            insert: format!(
                "INSERT INTO {schema}.effects (message_id, key, traceparent) VALUES ($1, $2, $3)"
            ),
            duplicates: Default::default(),
            hang_on,
            hung: tokio::sync::Notify::new(),
        })
    }

    /// Duplicates skipped so far.
    pub fn duplicates(&self) -> usize {
        self.duplicates.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl postbox::Handler for Effects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        msg: &postbox::Message,
    ) -> Result<(), postbox::BoxError> {
        sqlx::query(&self.insert)
            .bind(&msg.id)
            .bind(&msg.key)
            .bind(msg.trace_context().map(|t| t.traceparent))
            .execute(tx)
            .await?;
        Ok(())
    }
    async fn after_commit(&self, msg: &postbox::Message) {
        if self.hang_on.as_deref() == Some(msg.id.as_str()) {
            self.hung.notify_one();
            std::future::pending::<()>().await;
        }
    }
    async fn on_duplicate(&self, _msg: &postbox::Message) {
        self.duplicates
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The second half of a consumer-crash test: run `consume` (a fresh consumer
/// after the first died between its inbox commit and its ack) until all `n`
/// effects are recorded and the redelivery was skipped, then stop it, and
/// check each effect is there once with its key, `key` (`None` where the
/// broker does not carry keys).
pub async fn recovers_once<F>(
    ctx: &Ctx,
    second: &Effects,
    n: i64,
    key: Option<&str>,
    stop: &tokio_util::sync::CancellationToken,
    consume: F,
) where
    F: std::future::Future<Output = Result<(), postbox::BoxError>>,
{
    let judge = async {
        wait_until(LONG, "every effect and the redelivery skipped", || async {
            ctx.effects().await == n && second.duplicates() >= 1
        })
        .await;
        stop.cancel();
    };
    let (consumed, ()) = tokio::join!(consume, judge);
    consumed.unwrap();
    let distinct: i64 = sqlx::query_scalar(&format!(
        "SELECT count(DISTINCT message_id) FROM {}.effects WHERE key IS NOT DISTINCT FROM $1",
        ctx.schema
    ))
    .bind(key)
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(distinct, n, "each effect once, the key carried");
}

impl Ctx {
    /// The highest `attempts` of any row (0: no failure was counted).
    /// Unsent rows with a failure recorded (attempts, last error, retry due
    /// in seconds), the first few: what a timeout's message shows.
    pub async fn failing(&self) -> Vec<(String, i32, Option<String>, Option<f64>)> {
        sqlx::query_as(&format!(
            "SELECT event_id::text, attempts, last_error,
                    extract(epoch FROM next_attempt_at - now())::float8
               FROM {}.outbox WHERE sent_at IS NULL AND (attempts > 0 OR last_error IS NOT NULL)
              ORDER BY id LIMIT 5",
            self.schema
        ))
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    pub async fn max_attempts(&self) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT coalesce(max(attempts), 0)::bigint FROM {}.outbox",
            self.schema
        ))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}

/// Per-key order of first occurrences: feed each message read, in the order
/// read, as (event id, key, seq); re-sends are skipped, and each key's first
/// occurrences must be 1, 2, 3…. Returns how many distinct events were seen.
#[derive(Default)]
pub struct FirstOccurrences {
    seen: std::collections::HashSet<String>,
    last: std::collections::HashMap<String, i64>,
}

impl FirstOccurrences {
    pub fn see(&mut self, id: &str, key: &str, seq: i64) {
        if self.seen.insert(id.to_owned()) {
            let prev = self.last.insert(key.to_owned(), seq).unwrap_or(0);
            assert_eq!(
                seq,
                prev + 1,
                "key {key}: first occurrences in outbox order"
            );
        }
    }

    pub fn distinct(&self) -> usize {
        self.seen.len()
    }

    /// `key`'s first occurrences continue after `seq` (what came before was lost).
    pub fn after(&mut self, key: &str, seq: i64) {
        self.last.insert(key.to_owned(), seq);
    }
}

impl Ctx {
    /// `<schema>.effects`, what [`Effects`] records: each message's id, key
    /// and traceparent, in the order applied (`n`).
    pub async fn effects_table(&self) {
        sqlx::raw_sql(&format!(
            "CREATE TABLE {}.effects (message_id text NOT NULL, key text, traceparent text, n bigserial)",
            self.schema
        ))
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// Effects recorded.
    pub async fn effects(&self) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {}.effects", self.schema))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Messages with an effect.
    pub async fn distinct_effects(&self) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT count(DISTINCT message_id) FROM {}.effects",
            self.schema
        ))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    /// The `n`-th event's id (1-based, outbox order).
    pub async fn nth_event_id(&self, n: i64) -> String {
        sqlx::query_scalar(&format!(
            "SELECT event_id::text FROM {}.outbox ORDER BY id OFFSET $1 LIMIT 1",
            self.schema
        ))
        .bind(n - 1)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}

impl Ctx {
    /// The first `n` rows made unsent again, as after a relay that
    /// published them and died before its COMMIT: the next relay sends them
    /// again. With a new xid, past the relays' positions, as a replay by hand
    /// must (docs: "How the relay reads the outbox").
    pub async fn mark_first_unsent(&self, n: i64) {
        sqlx::query(&format!(
            "UPDATE {0}.outbox SET sent_at = NULL, xid = pg_current_xact_id()
              WHERE id IN (SELECT id FROM {0}.outbox ORDER BY id LIMIT $1)",
            self.schema
        ))
        .bind(n)
        .execute(&self.pool)
        .await
        .unwrap();
    }
}

/// `postbox <args>` against the test database (its URL in `DATABASE_URL`):
/// (success, stdout and stderr together).
pub async fn postbox(args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env("DATABASE_URL", postbox_testkit::database_url())
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `python tests/python/<script> <args>` with the test command's Python (its
/// venv holds the pinned peers): its stdout, or a panic with its stderr.
pub async fn python(script: &str, args: &[&str]) -> String {
    let python = std::env::var("POSTBOX_TEST_PYTHON")
        .expect("POSTBOX_TEST_PYTHON is not set: run the tests through ./scripts/test.sh");
    let path = format!("{}/../../tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

impl Ctx {
    /// A login role of this test given `postbox grant --as <what>` on its
    /// schema, and the database URL that logs in as it; [`drop_role`] after.
    pub async fn granted_role(&self, what: &str) -> (String, String) {
        let role = format!("r{}_{what}", postbox_testkit::suffix());
        sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN PASSWORD 'postbox-test'"))
            .execute(&self.pool)
            .await
            .unwrap();
        let url = postbox_testkit::database_url();
        let (ok, out) = postbox(&[
            "grant",
            "--database-url",
            &url,
            "--schema",
            &self.schema,
            "--role",
            &role,
            "--as",
            what,
        ])
        .await;
        assert!(ok, "{out}");
        let mut as_role = url::Url::parse(&url).unwrap();
        as_role.set_username(&role).unwrap();
        as_role.set_password(Some("postbox-test")).unwrap();
        (role, as_role.to_string())
    }
}

/// Drop a role made by [`Ctx::granted_role`] (after its schema is gone).
pub async fn drop_role(role: &str) {
    let _ = sqlx::raw_sql(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .execute(&postbox_testkit::pool().await)
        .await;
}
