//! The delivery layer against a fake sink (pure logic; the real brokers are
//! exercised by the CLI's integration tests).

use super::*;
use std::sync::Mutex;
use std::time::Duration;

fn ev(id: i64, key: Option<&str>, topic: &str) -> OutboxEvent {
    OutboxEvent::for_test(id, key, topic)
}

/// Fails the listed ids as told; records every call.
#[derive(Default)]
struct Fake {
    refuse: Vec<i64>,
    reject: Vec<i64>,
    down: Vec<i64>,
    groups: Option<GroupPolicy>,
    group_answer: Mutex<Option<GroupOutcome>>,
    calls: Mutex<Vec<(&'static str, Vec<i64>)>>,
    resets: Mutex<usize>,
    /// How long the broker takes to answer one send.
    answer_after: Duration,
}

/// A deadline no test reaches.
fn later() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

#[async_trait::async_trait]
impl Sink for Fake {
    type Message = i64;
    fn name(&self) -> &'static str {
        "fake"
    }
    fn encode(&self, e: &OutboxEvent) -> Result<i64, SinkError> {
        if self.refuse.contains(&e.id) {
            return Err(SinkError::rejected("refused"));
        }
        Ok(e.id)
    }
    async fn send_wave(&self, wave: Vec<Encoded<'_, i64>>) -> Vec<Result<(), SinkError>> {
        let ids: Vec<i64> = wave.iter().map(|m| m.message).collect();
        self.calls.lock().unwrap().push(("wave", ids.clone()));
        tokio::time::sleep(self.answer_after).await;
        ids.iter()
            .map(|id| {
                if self.reject.contains(id) {
                    Err(SinkError::rejected("no"))
                } else if self.down.contains(id) {
                    Err(SinkError::transient("down"))
                } else {
                    Ok(())
                }
            })
            .collect()
    }
    fn groups(&self) -> Option<GroupPolicy> {
        self.groups
    }
    async fn send_group(&self, group: Vec<Encoded<'_, i64>>) -> GroupOutcome {
        let ids = group.iter().map(|m| m.message).collect();
        self.calls.lock().unwrap().push(("group", ids));
        tokio::time::sleep(self.answer_after).await;
        self.group_answer
            .lock()
            .unwrap()
            .take()
            .unwrap_or(GroupOutcome::Delivered)
    }
    async fn reset(&self) {
        *self.resets.lock().unwrap() += 1;
    }
}

fn summary(out: &[Outcome]) -> String {
    out.iter()
        .map(|o| match o {
            Outcome::Delivered => 'D',
            Outcome::Failed(SinkError::Rejected { .. }) => 'R',
            Outcome::Failed(SinkError::Transient { .. }) => 'T',
            Outcome::Failed(SinkError::NotAttempted) => '-',
            Outcome::Deferred(_) => 'W',
        })
        .collect()
}

#[test]
fn one_event_per_key_per_wave_in_order() {
    let b = vec![
        ev(1, Some("a"), "t"),
        ev(2, Some("b"), "t"),
        ev(3, Some("a"), "t"),
        ev(4, None, "t"),
        ev(5, Some("a"), "t"),
        ev(6, None, "t"),
    ];
    assert_eq!(waves(&b), vec![vec![0, 1, 3, 5], vec![2], vec![4]]);
    assert!(waves(&[]).is_empty());
}

#[tokio::test]
async fn a_rejection_stops_its_key_only() {
    let d = Delivery::new(Fake {
        reject: vec![1],
        refuse: vec![4],
        ..Fake::default()
    });
    let b = vec![
        ev(1, Some("a"), "t"),
        ev(2, Some("b"), "t"),
        ev(3, Some("a"), "t"),
        ev(4, Some("c"), "t"),
        ev(5, Some("b"), "t"),
        ev(6, Some("c"), "t"),
    ];
    let out = d.publish(&b, later()).await;
    assert_eq!(summary(&out), "RD-RD-");
    let calls = d.sink().calls.lock().unwrap().clone();
    // The refused event never reaches the broker; key a's second event is not sent.
    assert_eq!(calls, vec![("wave", vec![1, 2]), ("wave", vec![5])]);
    assert_eq!(*d.sink().resets.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_broker_outage_stops_the_rest_of_the_batch_and_resets() {
    let b = vec![
        ev(1, Some("a"), "t"),
        ev(2, Some("b"), "t"),
        ev(3, Some("a"), "t"),
        ev(4, Some("c"), "t"),
    ];
    // Nothing of wave 0 (1, 2, 4) went through: the broker is down.
    let down = Delivery::new(Fake {
        down: vec![1, 2, 4],
        ..Fake::default()
    });
    assert_eq!(summary(&down.publish(&b, later()).await), "TT-T");
    assert_eq!(down.sink().calls.lock().unwrap().len(), 1);
    assert_eq!(*down.sink().resets.lock().unwrap(), 1);
    // 4 went through in the same wave: 1 and 2 are their keys' trouble.
    let d = Delivery::new(Fake {
        down: vec![1, 2],
        ..Fake::default()
    });
    assert_eq!(summary(&d.publish(&b, later()).await), "WW-D");
    assert_eq!(*d.sink().resets.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_key_the_broker_cannot_take_now_waits_alone() {
    let d = Delivery::new(Fake {
        down: vec![1],
        ..Fake::default()
    });
    let b = vec![
        ev(1, Some("a"), "missing"),
        ev(2, Some("b"), "t"),
        ev(3, Some("a"), "missing"),
        ev(4, Some("b"), "t"),
        ev(5, Some("c"), "t"),
    ];
    // The broker took b and c in the same wave: only a waits, b's second
    // event still goes in this batch, and the sink is not reset.
    assert_eq!(summary(&d.publish(&b, later()).await), "WD-DD");
    let calls = d.sink().calls.lock().unwrap().clone();
    assert_eq!(calls, vec![("wave", vec![1, 2, 5]), ("wave", vec![4])]);
    assert_eq!(*d.sink().resets.lock().unwrap(), 0);
}

#[tokio::test]
async fn deep_batches_go_as_one_group() {
    let d = Delivery::new(Fake {
        groups: Some(GroupPolicy { min_key_depth: 3 }),
        ..Fake::default()
    });
    let shallow = vec![
        ev(1, Some("a"), "t"),
        ev(2, Some("a"), "t"),
        ev(3, None, "t"),
    ];
    assert_eq!(summary(&d.publish(&shallow, later()).await), "DDD");
    let deep = vec![
        ev(4, Some("a"), "t"),
        ev(5, Some("a"), "t"),
        ev(6, Some("a"), "t"),
    ];
    assert_eq!(summary(&d.publish(&deep, later()).await), "DDD");
    let calls = d.sink().calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![
            ("wave", vec![1, 3]),
            ("wave", vec![2]),
            ("group", vec![4, 5, 6])
        ]
    );
}

#[tokio::test]
async fn groups_fall_back_to_waves_when_unclear_split_or_refused() {
    let deep = |topic2: &str| {
        vec![
            ev(1, Some("a"), "t"),
            ev(2, Some("a"), "t"),
            ev(3, Some("a"), topic2),
        ]
    };
    let policy = Some(GroupPolicy { min_key_depth: 3 });
    // An error inside the group: waves find out which event it was.
    let d = Delivery::new(Fake {
        groups: policy,
        reject: vec![2],
        group_answer: Mutex::new(Some(GroupOutcome::Unclear)),
        ..Fake::default()
    });
    assert_eq!(summary(&d.publish(&deep("t"), later()).await), "DR-");
    assert_eq!(d.sink().calls.lock().unwrap()[0].0, "group");
    // A key over two topics, or an event the sink refuses: never a group.
    let d = Delivery::new(Fake {
        groups: policy,
        ..Fake::default()
    });
    d.publish(&deep("other"), later()).await;
    let d2 = Delivery::new(Fake {
        groups: policy,
        refuse: vec![3],
        ..Fake::default()
    });
    assert_eq!(summary(&d2.publish(&deep("t"), later()).await), "DDR");
    for calls in [&d.sink().calls, &d2.sink().calls] {
        assert!(calls.lock().unwrap().iter().all(|c| c.0 == "wave"));
    }
    // A connection failure: the whole group is undelivered, the sink reset.
    let d = Delivery::new(Fake {
        groups: policy,
        group_answer: Mutex::new(Some(GroupOutcome::Failed(SinkError::transient("gone")))),
        ..Fake::default()
    });
    assert_eq!(summary(&d.publish(&deep("t"), later()).await), "T--");
    assert_eq!(*d.sink().resets.lock().unwrap(), 1);
}

// Paused clock: the sleeps below take no real time.
#[tokio::test(start_paused = true)]
async fn a_slow_broker_keeps_what_it_acknowledged_before_the_deadline() {
    let d = Delivery::new(Fake {
        answer_after: Duration::from_millis(10),
        ..Fake::default()
    });
    let b = vec![
        ev(1, Some("a"), "t"),
        ev(2, Some("b"), "t"),
        ev(3, Some("a"), "t"),
        ev(4, Some("a"), "t"),
        ev(5, Some("a"), "t"),
    ];
    // Waves answered at 10 and 20 ms count; the third is cut off at 25 ms
    // (the broker may have it: transient, the sink is reset); the fourth is
    // never sent.
    let deadline = Instant::now() + Duration::from_millis(25);
    assert_eq!(summary(&d.publish(&b, deadline).await), "DDDT-");
    assert_eq!(d.sink().calls.lock().unwrap().len(), 3);
    assert_eq!(*d.sink().resets.lock().unwrap(), 1);
    // Out of time before the first wave: nothing sent, nothing to reset.
    let d = Delivery::new(Fake::default());
    assert_eq!(summary(&d.publish(&b, Instant::now()).await), "-----");
    assert!(d.sink().calls.lock().unwrap().is_empty());
    assert_eq!(*d.sink().resets.lock().unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_group_cut_off_by_the_deadline_is_undelivered() {
    let d = Delivery::new(Fake {
        groups: Some(GroupPolicy { min_key_depth: 2 }),
        answer_after: Duration::from_millis(10),
        ..Fake::default()
    });
    let b = vec![ev(1, Some("a"), "t"), ev(2, Some("a"), "t")];
    let deadline = Instant::now() + Duration::from_millis(5);
    assert_eq!(summary(&d.publish(&b, deadline).await), "T-");
    assert_eq!(*d.sink().resets.lock().unwrap(), 1);
}
