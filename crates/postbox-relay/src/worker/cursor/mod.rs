//! Where a worker's next claim starts in each partition it owns, so that a
//! claim never reads again what was sent (migration 0010).
//!
//! A sent row leaves a dead entry in the claim's index until VACUUM removes
//! it, and VACUUM may not while any older snapshot exists. Claims read from a
//! position per partition instead of from its head, so the entries below it
//! are never walked, however long a snapshot is held.
//!
//! Positions are `(xid, id)`: the producer's transaction, then the row. What
//! may still appear below a position, and how it is found:
//! - rows of transactions that were open when the position passed them (a
//!   late commit): their xids are *holes*, looked up by xid at each claim
//!   until a claim's snapshot shows them ended and its batch took what they
//!   left;
//! - rows a claim passed because they wait out a backoff, or wait behind such
//!   a row of their key (the claim's `NOT EXISTS`): the worker knows the
//!   waiting rows (`outbox_held_list.sql`) and moves the position back to one
//!   once it may go again or stops waiting.
//!
//! Nothing here is a record of what is unsent: the outbox is. A partition that
//! moves between the workers of one relay (rebalancing, a crew consolidating
//! or spreading) takes its position with it ([`Handover`]); one that comes
//! from another relay or a restart is read from its head once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A place in a partition, in claim order: `(xid, id)`. Claims take rows
/// strictly after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Pos {
    pub xid: i64,
    pub id: i64,
}

/// Before every row (xids start at 3; migrated rows have 1).
pub(crate) const HEAD: Pos = Pos { xid: 0, id: 0 };

impl Pos {
    /// Just before `(xid, id)`: a claim from here takes that row again.
    fn before(xid: i64, id: i64) -> Pos {
        Pos { xid, id: id - 1 }
    }
}

/// A claim statement's snapshot (`pg_current_snapshot()`, `xmin:xmax:xip,…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub xmax: i64,
    /// Transactions open when it was taken, all below `xmax`.
    pub open: BTreeSet<i64>,
}

impl Snapshot {
    pub(crate) fn parse(text: &str) -> Option<Snapshot> {
        let mut parts = text.split(':');
        let _xmin: i64 = parts.next()?.parse().ok()?;
        let xmax: i64 = parts.next()?.parse().ok()?;
        let open = match parts.next()? {
            "" => BTreeSet::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?,
        };
        parts.next().is_none().then_some(Snapshot { xmax, open })
    }

    /// Whether transaction `xid` had ended (committed or rolled back) when
    /// this snapshot was taken.
    fn ended(&self, xid: i64) -> bool {
        xid < self.xmax && !self.open.contains(&xid)
    }
}

/// A row waiting out a backoff (or blocked), as `outbox_held_list.sql` reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Held {
    pub partition: i16,
    pub xid: i64,
    pub id: i64,
    /// Until it may go again; `None`: blocked until an operator acts.
    pub due_in: Option<Duration>,
}

/// A claimed row's place, for [`Cursor::claimed`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub partition: i16,
    pub pos: Pos,
}

/// Positions of partitions a worker gave back, for the worker of the same
/// relay that takes them next. One per crew.
///
/// Safe however stale: only the partition's owner sends its rows, and what
/// another owner did meanwhile leaves nothing claimable below the position
/// but rows of the holes handed with it (looked up again) and rows made to
/// wait (read again when the partition is taken).
#[derive(Debug, Default)]
pub(crate) struct Handover(Mutex<HashMap<i16, Handed>>);

#[derive(Debug)]
struct Handed {
    after: Pos,
    holes: Vec<i64>,
}

#[derive(Debug, Default)]
pub(crate) struct Cursor {
    /// Per owned partition; absent: from its head.
    after: HashMap<i16, Pos>,
    /// Transactions open when a position passed them, not yet known ended
    /// and looked up.
    holes: BTreeSet<i64>,
    /// The waiting rows of the owned partitions at the last look.
    held: Vec<Held>,
    /// Look at the waiting rows before the next claim: partitions were
    /// taken, or this worker made rows wait.
    held_stale: bool,
    /// When to look again: the next row due, or `recheck` for blocked rows.
    held_check_at: Option<Instant>,
}

impl Cursor {
    /// The worker now owns `owned`: positions of partitions it gave back go
    /// to `handover` with its holes; new ones come from it, or start at
    /// their head.
    pub(crate) fn owned(&mut self, owned: &[i16], handover: &Handover) {
        let gone: Vec<i16> = self
            .after
            .keys()
            .filter(|p| !owned.contains(p))
            .copied()
            .collect();
        let new: Vec<i16> = owned
            .iter()
            .filter(|p| !self.after.contains_key(p))
            .copied()
            .collect();
        if gone.is_empty() && new.is_empty() {
            return;
        }
        let mut handed = handover.0.lock().unwrap_or_else(|e| e.into_inner());
        for p in gone {
            if let Some(after) = self.after.remove(&p) {
                let holes = self.holes.iter().copied().collect();
                handed.insert(p, Handed { after, holes });
            }
        }
        for p in &new {
            let after = match handed.remove(p) {
                Some(h) => {
                    self.holes.extend(h.holes);
                    h.after
                }
                None => HEAD,
            };
            self.after.insert(*p, after);
        }
        drop(handed);
        self.held.retain(|h| owned.contains(&h.partition));
        if !new.is_empty() {
            self.held_stale = true;
        }
        if owned.is_empty() {
            self.holes.clear();
        }
    }

    pub(crate) fn after(&self, partition: i16) -> Pos {
        self.after.get(&partition).copied().unwrap_or(HEAD)
    }

    /// The lowest position of `owned`: where one scan of all of them starts.
    pub(crate) fn lowest(&self, owned: &[i16]) -> Pos {
        owned.iter().map(|p| self.after(*p)).min().unwrap_or(HEAD)
    }

    pub(crate) fn holes(&self) -> impl Iterator<Item = i64> + '_ {
        self.holes.iter().copied()
    }

    /// A claim over `owned` whose every row was sent and committed. `taken`
    /// is in claim order; `full`: it stopped at the batch size.
    pub(crate) fn claimed(
        &mut self,
        owned: &[i16],
        taken: &[Taken],
        snapshot: &Snapshot,
        full: bool,
    ) {
        let Some(last) = taken.last().map(|t| t.pos) else {
            return;
        };
        // The claim took, in order, every claimable row up to `last` (all of
        // them when not full): an ended hole below has nothing left to find.
        self.holes
            .retain(|&x| !(snapshot.ended(x) && (!full || x < last.xid)));
        if full {
            for t in taken {
                let after = self.after.entry(t.partition).or_insert(HEAD);
                *after = (*after).max(t.pos);
            }
        } else {
            // Everything the snapshot shows was taken: every owned partition
            // moves to its end; only its open transactions may add below.
            let end = Pos {
                xid: snapshot.xmax - 1,
                id: i64::MAX,
            };
            for p in owned {
                let after = self.after.entry(*p).or_insert(HEAD);
                *after = (*after).max(end);
            }
        }
        let highest = owned.iter().map(|p| self.after(*p).xid).max().unwrap_or(0);
        self.holes
            .extend(snapshot.open.iter().copied().filter(|&x| x <= highest));
    }

    /// This worker made rows wait (a rejection, a deferral, a blocked key):
    /// look at them before the next claim.
    pub(crate) fn rows_held(&mut self) {
        self.held_stale = true;
    }

    /// Whether to read the waiting rows before the next claim.
    pub(crate) fn needs_held(&self, now: Instant) -> bool {
        self.held_stale || self.held_check_at.is_some_and(|t| now >= t)
    }

    /// When the next waiting row is due (or blocked rows are to be looked at
    /// again): a worker with nothing else to do sleeps until then at most, so
    /// a retry comes when its log line said, however long the poll interval.
    pub(crate) fn next_look(&self) -> Option<Instant> {
        self.held_check_at
    }

    /// The waiting rows of the owned partitions, read at `now`. A row that
    /// may go again, or no longer waits, moves its partition's position back
    /// to it: the claims passed it and the later rows of its key.
    pub(crate) fn held(&mut self, rows: Vec<Held>, now: Instant, recheck: Duration) {
        let freed = self
            .held
            .iter()
            .filter(|old| {
                !rows
                    .iter()
                    .any(|new| (new.partition, new.xid, new.id) == (old.partition, old.xid, old.id))
            })
            .chain(
                rows.iter()
                    .filter(|r| r.due_in.is_some_and(|d| d.is_zero())),
            )
            .map(|h| (h.partition, Pos::before(h.xid, h.id)))
            .collect::<Vec<_>>();
        for (partition, back) in freed {
            if let Some(after) = self.after.get_mut(&partition) {
                *after = (*after).min(back);
            }
        }
        self.held_check_at = rows
            .iter()
            .map(|r| match r.due_in {
                // A little after the server's clock passes it.
                Some(d) if !d.is_zero() => now + d + Duration::from_millis(5),
                _ => now + recheck,
            })
            .min();
        self.held = rows;
        self.held_stale = false;
    }
}

#[cfg(test)]
mod tests;
