//! The inbox: Fresh once, Duplicate after; the Rust worker skips redeliveries.

use crate::support::*;
use postbox::{Inbox, Receipt};

#[tokio::test]
async fn receive_is_fresh_once_then_duplicate() {
    let ctx = Ctx::new("inbox").await;
    let inbox = Inbox::new(&ctx.schema).unwrap();
    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c1", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.commit().await.unwrap();

    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c1", "m1").await.unwrap(),
        Receipt::Duplicate
    );
    // Another consumer has its own inbox rows.
    assert_eq!(
        inbox.receive(&mut tx, "c2", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.rollback().await.unwrap();

    // A rolled-back receive leaves no trace: the message is fresh again.
    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c2", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.commit().await.unwrap();

    // Concurrent receivers of one message: exactly one is Fresh.
    let mut a = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut a, "c3", "m9").await.unwrap(),
        Receipt::Fresh
    );
    let (pool, inbox2) = (ctx.pool.clone(), inbox.clone());
    let b = tokio::spawn(async move {
        let mut b = pool.begin().await.unwrap();
        let r = inbox2.receive(&mut b, "c3", "m9").await.unwrap();
        b.commit().await.unwrap();
        r
    });
    a.commit().await.unwrap();
    assert_eq!(b.await.unwrap(), Receipt::Duplicate);
    ctx.cleanup().await;
}
