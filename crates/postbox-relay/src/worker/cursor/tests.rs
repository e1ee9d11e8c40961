//! The cursor's unit tests: positions, holes and waiting rows, and a
//! partition handed over between workers.

use super::*;

fn snap(text: &str) -> Snapshot {
    Snapshot::parse(text).unwrap()
}

fn taken(partition: i16, xid: i64, id: i64) -> Taken {
    Taken {
        partition,
        pos: Pos { xid, id },
    }
}

#[test]
fn parses_snapshots() {
    assert_eq!(
        snap("10:20:"),
        Snapshot {
            xmax: 20,
            open: BTreeSet::new()
        }
    );
    assert_eq!(snap("10:20:10,15").open, BTreeSet::from([10, 15]));
    assert!(Snapshot::parse("10:20").is_none());
    assert!(Snapshot::parse("10:x:").is_none());
    assert!(Snapshot::parse("1:2:3:4").is_none());
}

#[test]
fn new_partitions_start_at_their_head_and_ask_for_waiting_rows() {
    let mut c = Cursor::default();
    c.owned(&[1, 2], &Handover::default());
    assert_eq!(c.after(1), HEAD);
    assert!(c.needs_held(Instant::now()));
    c.held(Vec::new(), Instant::now(), Duration::from_secs(1));
    assert!(!c.needs_held(Instant::now()));
    let handover = Handover::default();
    c.owned(&[2], &handover);
    assert!(!c.needs_held(Instant::now()), "nothing new");
    c.owned(&[2, 3], &handover);
    assert!(c.needs_held(Instant::now()));
}

#[test]
fn a_batch_that_is_not_full_moves_every_partition_to_the_snapshots_end() {
    let mut c = Cursor::default();
    c.owned(&[1, 2], &Handover::default());
    c.claimed(&[1, 2], &[taken(1, 50, 7)], &snap("48:60:48,55"), false);
    let end = Pos {
        xid: 59,
        id: i64::MAX,
    };
    assert_eq!((c.after(1), c.after(2)), (end, end));
    assert_eq!(c.holes().collect::<Vec<_>>(), vec![48, 55]);
    // 48 ended (55 did not), and the claim took all there was.
    c.claimed(&[1, 2], &[taken(2, 61, 9)], &snap("55:70:55"), false);
    assert_eq!(c.holes().collect::<Vec<_>>(), vec![55]);
}

#[test]
fn a_full_batch_moves_each_partition_to_its_last_row() {
    let mut c = Cursor::default();
    c.owned(&[1, 2, 3], &Handover::default());
    c.claimed(
        &[1, 2, 3],
        &[taken(1, 10, 1), taken(2, 10, 2), taken(1, 12, 3)],
        &snap("10:20:11,13"),
        true,
    );
    assert_eq!(c.after(1), Pos { xid: 12, id: 3 });
    assert_eq!(c.after(2), Pos { xid: 10, id: 2 });
    assert_eq!(c.after(3), HEAD);
    // 11 is below a position; 13 is past them all and found by the scan.
    assert_eq!(c.holes().collect::<Vec<_>>(), vec![11]);
    assert_eq!(c.lowest(&[1, 2, 3]), HEAD);
    // A full batch keeps an ended hole whose rows may lie past its end...
    c.claimed(&[1, 2, 3], &[taken(1, 9, 4)], &snap("13:20:13"), true);
    assert_eq!(c.holes().collect::<Vec<_>>(), vec![11]);
    // ...and drops it once the batch went past it; 13, still open, is
    // now below partition 1's position.
    c.claimed(
        &[1, 2, 3],
        &[taken(1, 11, 5), taken(1, 14, 6)],
        &snap("13:20:13"),
        true,
    );
    assert_eq!(c.holes().collect::<Vec<_>>(), vec![13]);
}

#[test]
fn waiting_rows_move_the_position_back_when_they_may_go() {
    let now = Instant::now();
    let mut c = Cursor::default();
    c.owned(&[1], &Handover::default());
    let waiting = Held {
        partition: 1,
        xid: 30,
        id: 4,
        due_in: Some(Duration::from_secs(2)),
    };
    c.held(vec![waiting], now, Duration::from_secs(1));
    c.claimed(&[1], &[taken(1, 31, 5)], &snap("40:40:"), false);
    assert_eq!(c.after(1).xid, 39);
    assert!(!c.needs_held(now + Duration::from_secs(1)));
    assert!(c.needs_held(now + Duration::from_secs(3)));
    // Due now: back to just before it.
    c.held(
        vec![Held {
            due_in: Some(Duration::ZERO),
            ..waiting
        }],
        now,
        Duration::from_secs(1),
    );
    assert_eq!(c.after(1), Pos { xid: 30, id: 3 });
    c.claimed(&[1], &[taken(1, 30, 4)], &snap("40:41:"), false);
    // Blocked rows are looked at again every `recheck`; freed by an
    // operator (gone from the list), they move the position back too.
    let blocked = Held {
        due_in: None,
        ..waiting
    };
    c.held(vec![blocked], now, Duration::from_secs(1));
    assert!(c.needs_held(now + Duration::from_secs(1)));
    assert_eq!(c.after(1).xid, 40);
    c.held(Vec::new(), now, Duration::from_secs(1));
    assert_eq!(c.after(1), Pos { xid: 30, id: 3 });
    assert!(!c.needs_held(now + Duration::from_secs(60)));
}

#[test]
fn a_worker_that_made_rows_wait_looks_before_its_next_claim() {
    let mut c = Cursor::default();
    c.owned(&[1], &Handover::default());
    c.held(Vec::new(), Instant::now(), Duration::from_secs(1));
    c.rows_held();
    assert!(c.needs_held(Instant::now()));
}

#[test]
fn a_partition_moving_between_workers_keeps_its_position_and_holes() {
    let handover = Handover::default();
    let (mut a, mut b) = (Cursor::default(), Cursor::default());
    a.owned(&[1, 2], &handover);
    a.claimed(
        &[1, 2],
        &[Taken {
            partition: 1,
            pos: Pos { xid: 50, id: 7 },
        }],
        &Snapshot::parse("48:60:48").unwrap(),
        false,
    );
    a.owned(&[2], &handover);
    b.owned(&[1], &handover);
    assert_eq!(
        b.after(1),
        Pos {
            xid: 59,
            id: i64::MAX
        }
    );
    assert_eq!(b.holes().collect::<Vec<_>>(), vec![48]);
    assert!(b.needs_held(Instant::now()), "waiting rows read again");
    // Taken once: another worker taking it later starts at its head.
    let mut c = Cursor::default();
    c.owned(&[1, 3], &handover);
    assert_eq!(c.after(1), HEAD);
    assert_eq!(a.after(2).xid, 59, "kept what it still owns");
}
