//! Per-key ordering helpers shared by sinks.

use crate::OutboxEvent;
use std::collections::HashMap;

/// Split a batch (in id order) into waves: wave k holds the k-th event of every
/// key, so a wave has at most one event per key. A sink that publishes one wave
/// at a time, each wave concurrently, and stops a key at its first failure,
/// keeps per-key order whatever its client does with concurrent requests.
/// Events without a key have no ordering constraint and all go in wave 0.
pub fn waves(batch: &[OutboxEvent]) -> Vec<Vec<usize>> {
    let mut depth: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, e) in batch.iter().enumerate() {
        let w = match &e.key {
            None => 0,
            Some(k) => {
                let d = depth.entry(k.as_str()).or_insert(0);
                *d += 1;
                *d - 1
            }
        };
        if out.len() <= w {
            out.resize_with(w + 1, Vec::new);
        }
        out[w].push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, key: Option<&str>) -> OutboxEvent {
        OutboxEvent {
            id,
            event_id: uuid::Uuid::new_v4(),
            topic: "t".into(),
            event: "e".into(),
            key: key.map(Into::into),
            payload: serde_json::json!({}),
            headers: serde_json::json!({}),
            attempts: 0,
            created_at: chrono::Utc::now(),
            schema: "s".into(),
        }
    }

    #[test]
    fn one_event_per_key_per_wave_in_order() {
        let b = vec![
            ev(1, Some("a")),
            ev(2, Some("b")),
            ev(3, Some("a")),
            ev(4, None),
            ev(5, Some("a")),
            ev(6, None),
        ];
        assert_eq!(waves(&b), vec![vec![0, 1, 3, 5], vec![2], vec![4]]);
        assert!(waves(&[]).is_empty());
    }
}
