//! The checks `enqueue` and `SchemaName::new` make before any SQL, against the
//! vectors in tests/vectors/ that the Node package is tested with too: both
//! languages accept and refuse the same events and names, with the same words.

use postbox::{EnqueueError, Event, Outbox, SchemaName};
use serde_json::Value;

fn vectors(name: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/");
    let text = std::fs::read_to_string(format!("{path}{name}")).expect("vector file");
    serde_json::from_str(&text).expect("vector file is JSON")
}

#[tokio::test]
async fn events_are_accepted_or_refused_as_the_shared_vectors_say() {
    let pool = postbox_testkit::pool().await;
    // Never migrated: an event that passes the checks reaches the database and
    // is refused there for the missing table, which tells the two cases apart.
    let outbox = Outbox::new("vectors_never_migrated").unwrap();
    for v in vectors("events.json") {
        let name = v["name"].as_str().unwrap();
        let mut e = Event::new(
            v["topic"].as_str().unwrap(),
            v["event"].as_str().unwrap(),
            v.get("payload").cloned().unwrap_or(serde_json::json!({})),
        );
        if let Some(k) = v["key"].as_str() {
            e = e.key(k);
        }
        if let Some(h) = v.get("headers") {
            e.headers = h.clone();
        }
        let mut tx = pool.begin().await.unwrap();
        let err = outbox.enqueue(&mut tx, e).await.unwrap_err();
        match v["refused"].as_str() {
            Some(words) => {
                assert!(
                    matches!(err, EnqueueError::InvalidEvent(_)),
                    "{name}: {err:?}"
                );
                assert!(err.to_string().contains(words), "{name}: {err}");
            }
            None => assert!(
                matches!(err, EnqueueError::SchemaNotMigrated { .. }),
                "{name}: {err:?}"
            ),
        }
    }
}

#[test]
fn schema_names_are_accepted_or_refused_as_the_shared_vectors_say() {
    for v in vectors("schema_names.json") {
        let name = v["name"].as_str().unwrap();
        match (SchemaName::new(name), v["refused"].as_str()) {
            (Ok(_), None) => {}
            (Err(e), Some(words)) => assert!(e.to_string().contains(words), "{name:?}: {e}"),
            (got, want) => panic!("{name:?}: got {got:?}, the vector says refused = {want:?}"),
        }
    }
}
