//! `poison`: a non-object payload and a 2 MB payload, written with plain SQL,
//! are dead-lettered (after three quick attempts) while the chats keep flowing.

use super::{Run, Scenario, Setup};

pub struct Poison;

#[async_trait::async_trait]
impl Scenario for Poison {
    fn name(&self) -> &'static str {
        "poison"
    }

    fn about(&self) -> &'static str {
        "a non-object payload and a 2 MB payload are dead-lettered while the chats keep flowing"
    }

    fn setup(&self) -> Setup {
        Setup {
            relay_flags: [
                "--max-attempts",
                "3",
                "--retry-min",
                "100ms",
                "--retry-max",
                "300ms",
            ]
            .map(String::from)
            .to_vec(),
            ..Setup::default()
        }
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        run.at(1.0).await;
        sqlx::query(&format!(
            "INSERT INTO {s}.outbox (topic, event, key, payload) VALUES
               ($1, 'message.created', 'poison', '42'),
               ($1, 'message.created', 'poison', jsonb_build_object('pad', repeat('x', 2 * 1024 * 1024)))",
            s = run.w.consumers.schema
        ))
        .bind(format!("chat-to-{}", run.w.workers.schema))
        .execute(&run.w.admin)
        .await?;
        run.history()
            .harness("producer", "two poison rows written with plain SQL");
        Ok(())
    }

    /// Both dead-lettered, each for its own reason.
    async fn judge(&self, run: &Run) -> Result<bool, chat::Error> {
        let reasons: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT last_error FROM {}.outbox_dead_letter ORDER BY id",
            run.w.consumers.schema
        ))
        .fetch_all(&run.w.admin)
        .await?;
        println!(
            "dead letters: {}",
            reasons
                .iter()
                .map(|r| format!("\n  {r}"))
                .collect::<String>()
        );
        Ok(reasons.len() == 2
            && reasons[0].contains("must be a JSON object")
            && reasons[1].contains("over bullmq.max_job_bytes"))
    }
}
