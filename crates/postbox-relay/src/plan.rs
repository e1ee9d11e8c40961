//! What a worker writes back after a publish: the destination's answers
//! turned into marks, rejections and deferrals, with per-key order enforced
//! whatever the destination did.

use crate::{OutboxEvent, Outcome, SinkError};
use std::collections::HashSet;

/// What to write back after a publish.
pub(crate) struct Plan<'a> {
    pub(crate) sent: Vec<i64>,
    pub(crate) rejected: Vec<(&'a OutboxEvent, SinkError)>,
    /// Transient failures of single keys, while others went through.
    pub(crate) deferred: Vec<(&'a OutboxEvent, SinkError)>,
    pub(crate) transient: Option<SinkError>,
}

/// Turn the sink's answers into marks, enforcing per-key order whatever the
/// sink did: after the first failure of a key, later events of that key are
/// left unsent (not even marked if the sink claims it delivered them).
pub(crate) fn plan(batch: &[OutboxEvent], deliveries: Vec<Outcome>) -> Plan<'_> {
    let mut stopped: HashSet<&str> = HashSet::new();
    let mut out = Plan {
        sent: Vec::new(),
        rejected: Vec::new(),
        deferred: Vec::new(),
        transient: None,
    };
    for (event, delivery) in batch.iter().zip(deliveries) {
        let key = event.key.as_deref();
        if key.is_some_and(|k| stopped.contains(k)) {
            continue;
        }
        match delivery {
            Outcome::Delivered => out.sent.push(event.id),
            Outcome::Deferred(e) => {
                if let Some(k) = key {
                    stopped.insert(k);
                }
                out.deferred.push((event, e));
            }
            Outcome::Failed(e) => {
                if let Some(k) = key {
                    stopped.insert(k);
                }
                match e {
                    SinkError::Rejected { .. } => out.rejected.push((event, e)),
                    SinkError::NotAttempted => {}
                    SinkError::Transient { .. } => {
                        out.transient.get_or_insert(e);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, key: Option<&str>) -> OutboxEvent {
        OutboxEvent::for_test(id, key, "t")
    }

    #[test]
    fn a_deferred_event_holds_its_key_only() {
        let b = vec![ev(1, Some("a")), ev(2, Some("a")), ev(3, Some("b"))];
        let d = vec![
            Outcome::Deferred(SinkError::transient("no leader")),
            Outcome::Delivered,
            Outcome::Delivered,
        ];
        let p = plan(&b, d);
        assert_eq!(p.sent, vec![3]);
        assert_eq!(p.deferred.len(), 1);
        assert!(p.transient.is_none() && p.rejected.is_empty());
    }

    #[test]
    fn a_failure_stops_its_key_only() {
        let b = vec![
            ev(1, Some("a")),
            ev(2, Some("b")),
            ev(3, Some("a")),
            ev(4, None),
            ev(5, Some("b")),
        ];
        let d = vec![
            Outcome::Failed(SinkError::transient("down")),
            Outcome::Delivered,
            // A sink that wrongly reports a later event of a failed key: not marked.
            Outcome::Delivered,
            Outcome::Failed(SinkError::rejected("too big")),
            Outcome::Delivered,
        ];
        let p = plan(&b, d);
        assert_eq!(p.sent, vec![2, 5]);
        assert_eq!(p.rejected.len(), 1);
        assert_eq!(p.rejected[0].0.id, 4);
        assert!(p.transient.is_some());
    }
}
