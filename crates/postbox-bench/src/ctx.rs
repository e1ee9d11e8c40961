//! [`Ctx`]: what every benchmark of a run shares.

use crate::{BenchError, Params};
use postbox::migrate::WakeUp;
use postbox::SchemaName;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::{Queue, QueueOptions, WorkerOptions};
use postbox_relay::{Config, Secret};
use sqlx::PgPool;
use std::sync::Mutex;
use std::time::Duration;

/// What every benchmark shares: parameters, the pool, and the names it
/// created, so that they are all removed at the end even after an error.
pub(crate) struct Ctx {
    pub p: Params,
    pub pool: PgPool,
    pub cores: usize,
    /// `postbox_bench_<pid>`: prefix of every schema and queue of this run.
    tag: String,
    schemas: Mutex<Vec<SchemaName>>,
    queues: Mutex<Vec<String>>,
}

impl Ctx {
    /// Connect to PostgreSQL for a run with these parameters.
    pub async fn connect(p: Params) -> Result<Ctx, BenchError> {
        let pool = PgPool::connect(&p.database_url).await.map_err(|e| {
            format!(
                "cannot connect to PostgreSQL at {}: {e}",
                Secret::new(p.database_url.clone())
            )
        })?;
        Ok(Ctx {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            tag: format!("postbox_bench_{}", std::process::id()),
            p,
            pool,
            schemas: Mutex::new(Vec::new()),
            queues: Mutex::new(Vec::new()),
        })
    }

    /// A new migrated schema `postbox_bench_<pid>_<what>` with the given wake-up policy.
    pub async fn schema(&self, what: &str, notify: WakeUp) -> Result<SchemaName, BenchError> {
        let schema = SchemaName::new(&format!("{}_{what}", self.tag))?;
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&self.pool)
            .await?;
        self.schemas.lock().unwrap().push(schema.clone());
        let mut conn = self.pool.acquire().await?;
        postbox::migrate::run(&mut conn, &schema, notify).await?;
        Ok(schema)
    }

    /// Drop a schema made by [`Ctx::schema`] now (between repetitions).
    pub async fn drop_schema(&self, schema: &SchemaName) -> Result<(), BenchError> {
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&self.pool)
            .await?;
        self.schemas.lock().unwrap().retain(|s| s != schema);
        Ok(())
    }

    /// A name of this run for a queue or topic: `postbox-bench-<pid>-<what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.tag.replace('_', "-"))
    }

    /// A BullMQ queue name of this run, obliterated at the end.
    pub fn queue_name(&self, what: &str) -> String {
        let name = self.name(what);
        self.queues.lock().unwrap().push(name.clone());
        name
    }

    pub fn redis(&self) -> RedisConnectionOptions {
        RedisConnectionOptions {
            url: self.p.redis_url.clone(),
            ..Default::default()
        }
    }

    pub async fn queue(&self, name: &str) -> Result<Queue, BenchError> {
        let opts = QueueOptions {
            connection: self.redis(),
            ..Default::default()
        };
        Ok(Queue::with_options(name, opts).await?)
    }

    pub fn worker_options(&self, concurrency: usize) -> WorkerOptions {
        WorkerOptions {
            connection: self.redis(),
            concurrency,
            ..Default::default()
        }
    }

    /// Remove a queue's jobs from Redis now (between repetitions, to free memory).
    pub async fn obliterate(&self, name: &str) -> Result<(), BenchError> {
        let q = self.queue(name).await?;
        // The crate calls the script again while keys remain, 5000 a call.
        q.obliterate(true, 5000)
            .await
            .map_err(|e| format!("cannot obliterate BullMQ queue {name}: {e}"))?;
        self.queues.lock().unwrap().retain(|n| n != name);
        Ok(())
    }

    /// Relay settings for `schema`: this run's (its relay flags over the
    /// bench's defaults) with this poll interval.
    pub fn relay_config(&self, schema: &SchemaName, poll_interval: Duration) -> Config {
        Config {
            database_url: Secret::new(self.p.database_url.clone()),
            schemas: vec![schema.to_string()],
            poll_interval,
            ..(*self.p.relay).clone()
        }
    }

    /// Drop every schema and obliterate every queue this run still has.
    pub async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        for s in schemas {
            if let Err(e) = self.drop_schema(&s).await {
                eprintln!("warning: cannot drop bench schema {s}: {e}");
            }
        }
        let queues = std::mem::take(&mut *self.queues.lock().unwrap());
        for q in queues {
            if let Err(e) = self.obliterate(&q).await {
                eprintln!("warning: {e}");
            }
        }
    }
}
