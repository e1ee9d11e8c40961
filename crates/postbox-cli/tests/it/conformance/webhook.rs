//! HTTP webhooks: a receiver of each test's own that checks every signature
//! with the Standard Webhooks reference package (Node `standardwebhooks`).

use super::*;
use crate::webhook::SECRET;
use postbox_testkit::WebhookReceiver;

conformance!(HookFixture, killable_broker, cloudevents);

/// A receiver of the test's own: `/ok/` for every topic, `/gone/` (410)
/// and `/moved/` (307 to another host) for two of its own.
struct HookFixture {
    rx: WebhookReceiver,
    queue: String,
}

impl BrokerFixture for HookFixture {
    const NAME: &'static str = "hook";
    const KILL_EVENTS: usize = 400;
    const DROPS_RESENDS: bool = false;

    async fn start(queue: &str, _: Broker) -> Self {
        let rx = WebhookReceiver::start(SECRET, None).await;
        let queue = queue.to_owned();
        HookFixture { rx, queue }
    }

    async fn create_topic(&self, _: &str) {}

    fn relay_args(&self) -> Vec<String> {
        let base = format!("http://127.0.0.1:{}", self.rx.port);
        let url = format!("{base}/ok/{{topic}}/{{key}}");
        let mut args = [
            "--sink",
            "webhook",
            "--webhook-url",
            &url,
            "--webhook-secrets",
            SECRET,
        ]
        .map(String::from)
        .to_vec();
        args.extend(["--webhook-timeout".into(), "1s".into()]);
        for mode in ["gone", "moved"] {
            args.push("--webhook-topics".into());
            let topic = format!("{}-{mode}", self.queue);
            args.push(format!("{topic}={base}/{mode}/{{topic}}/{{key}}"));
        }
        args
    }

    /// What the receiver was asked at `/ok/<topic>/` (each request verified
    /// by the reference package), once at least `n` requests came. A
    /// redirect followed would show as another topic.
    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        let of_topic = || {
            let prefix = format!("/ok/{topic}/");
            self.rx
                .seen("ok")
                .into_iter()
                .filter(move |r| r["path"].as_str().is_some_and(|p| p.starts_with(&prefix)))
        };
        let what = format!("{n} requests to /ok/{topic}/");
        wait_until(LONG, &what, || async { of_topic().count() >= n }).await;
        of_topic()
            .map(|r| Arrived {
                id: r["id"].as_str().unwrap().to_owned(),
                key: r["key"].as_str().map(str::to_owned),
                event: r["headers"]["postbox-event"].as_str().map(str::to_owned),
                payload: serde_json::from_str(r["body"].as_str().unwrap()).unwrap(),
                headers: r["headers"].as_object().unwrap().clone(),
                raw: r,
            })
            .collect()
    }

    async fn read_wire(&self, _: &str, n: usize) -> Vec<Value> {
        let seen = self.rx.wait_for("ok", n, LONG).await;
        seen.into_iter()
            .map(|r| {
                assert_eq!(r["verified"], true, "signed: {r}");
                serde_json::json!({"binding": "http", "headers": r["headers"], "body": r["body"]})
            })
            .collect()
    }

    fn check(&self, m: &Arrived, row: &Row) {
        assert_eq!(m.raw["verified"], true, "signed: {m:?}");
        assert_eq!(m.raw["headers"]["postbox-topic"], row.topic.as_str());
    }

    /// A 410 and a redirect to another host (not followed).
    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let topic = |mode: &str| format!("{queue}-{mode}");
        vec![
            Refusal::new(
                &topic("gone"),
                "g",
                0,
                &["HTTP 410", "this hook was removed"],
            ),
            Refusal::new(&topic("moved"), "m", 0, &["redirected elsewhere"]),
        ]
    }
}

impl KillableBroker for HookFixture {
    fn kill(&mut self) {
        self.rx.kill();
    }

    async fn restart(&mut self) {
        self.rx.restart().await;
    }
}
