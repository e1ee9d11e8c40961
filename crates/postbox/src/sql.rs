//! The SQL postbox runs, rendered for one schema.
//!
//! Every statement lives in `sql/queries/*.sql` or `sql/migrations/*.sql` (one
//! place to review locking and indexes); `{schema}` is the placeholder, filled
//! with a validated [`SchemaName`], and `{publication}` the schema's
//! publication name derived from it (`publication_name`). Everything else
//! is a bind parameter. The claim while a backlog is worked off is assembled
//! from one branch per partition (`outbox_claim_batch.sql`,
//! `outbox_claim_partition.sql`); the claim of a worker that keeps up is the
//! same statement with one branch for all its partitions. Either marks or
//! deletes what it claims ([`Take`](crate::sql::Take): `outbox_claim_mark.sql`,
//! `outbox_claim_delete.sql`).

use crate::{SchemaName, PARTITIONS};
use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::FromRow;

/// How the statements of the hot paths ([`Outbox::enqueue`](crate::Outbox::enqueue),
/// [`Inbox::receive`](crate::Inbox::receive)) are prepared on your connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Statements {
    /// Named and kept per session (sqlx's default): parsed and planned once
    /// per connection. For a direct connection, a pooler in session mode, or
    /// PgBouncer 1.21 and later with `max_prepared_statements` set.
    #[default]
    Named,
    /// The unnamed prepared statement, parsed at every call: for a pooler in
    /// transaction mode, where a named statement may be missing from, or
    /// another client's in, the session the next transaction gets. It costs
    /// a producer about a quarter of its transactions per second
    /// (docs: benchmarks.md, "Unnamed statements").
    Unnamed,
}

impl Statements {
    /// The value for sqlx's `persistent()`, for your own statements on the
    /// same connections: `sqlx::query(sql).persistent(statements.persistent())`.
    /// (sqlx's `statement_cache_capacity(0)` is no substitute: sqlx then still
    /// prepares *named* statements, and leaves them on the session.)
    pub fn persistent(self) -> bool {
        self == Statements::Named
    }
}

/// A statement postbox sends seldom (dead letters, migrations, the command
/// line's), whatever the connection: the *unnamed* prepared statement
/// (sqlx's `persistent(false)`), which lives until the next statement of
/// the same transaction. A named one (sqlx's default, `sqlx_s_N`) belongs to
/// the server session that prepared it: behind a pooler in transaction mode
/// (PgBouncer before 1.21, most hosted PostgreSQL) the next transaction may
/// run in another session, where it is missing or another client's. These
/// statements run in a transaction, so parse and execute reach the same
/// session. The relay keeps named statements (its claim is planned once per
/// session) and needs a session of its own anyway (docs:
/// operations/managed-postgres.md).
pub fn statement(sql: &str) -> Query<'_, Postgres, PgArguments> {
    sqlx::query(sql).persistent(false)
}

/// [`statement`] whose rows decode into `O`.
pub fn statement_as<O>(sql: &str) -> QueryAs<'_, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql).persistent(false)
}

/// [`statement`] returning one column.
pub fn statement_scalar<O>(sql: &str) -> QueryScalar<'_, Postgres, O, PgArguments>
where
    (O,): for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_scalar(sql).persistent(false)
}

macro_rules! queries {
    ($($name:ident),* $(,)?) => {
        /// All runtime queries, rendered for one schema. Cheap to clone via `Arc`.
        #[derive(Debug, Clone)]
        pub struct Queries {
            $(
                #[doc = concat!("`sql/queries/", stringify!($name), ".sql`")]
                pub $name: String,
            )*
        }

        impl Queries {
            /// Render every query for `schema`.
            pub fn new(schema: &SchemaName) -> Self {
                Queries {
                    $($name: render(include_str!(concat!("../sql/queries/", stringify!($name), ".sql")), schema),)*
                }
            }
        }
    };
}

queries!(
    migrations_table_create,
    migrations_lock,
    migrations_list,
    migrations_latest,
    migrations_record,
    schema_exists,
    schema_namespace_exists,
    notify_trigger_drop,
    notify_trigger_create,
    notify_adaptive_create,
    notify_adaptive_drop,
    notify_logical_create,
    notify_logical_drop,
    publication_exists,
    notify_policy_current,
    server_wal_level,
    outbox_wakeup_arm,
    outbox_wakeup_disarm,
    outbox_insert,
    outbox_insert_many,
    outbox_claim_batch,
    outbox_claim_partition,
    outbox_claim_partition_holes,
    outbox_claim_mark,
    outbox_claim_delete,
    outbox_held_list,
    outbox_mark_sent,
    outbox_delete_sent,
    outbox_record_failure,
    outbox_defer,
    outbox_block_key,
    outbox_dead_letter_move,
    outbox_pending_count,
    partition_try_acquire,
    partition_release,
    relay_member_join,
    relay_member_count,
    relay_member_leave,
    relay_rebalance_signal,
    relay_session_limits,
    inbox_receive,
    inbox_tables_check,
    inbox_dead_letter_record,
    inbox_dead_letter_claim,
    inbox_dead_letter_delete,
    inbox_dead_letter_failed_again,
    inbox_dead_letter_list,
    inbox_dead_letter_replay,
    inbox_dead_letter_purge,
    inbox_dead_letter_retention_delete,
    outbox_retention_delete,
    inbox_retention_delete,
    dead_letter_retention_delete,
    maintenance_try_lock,
    outbox_pending_stats,
    dead_letter_list,
    dead_letter_replay,
    dead_letter_purge,
    status_topics,
    status_relays,
    status_inbox_dead_letters,
    session_facts,
    session_role,
    dead_letter_groups,
    inbox_dead_letter_groups,
    outbox_halted_keys,
    console_audit_record,
    console_audit_list,
    outbox_delivered_record,
    outbox_delivered_retention_delete,
    outbox_delivered_last_hour,
    outbox_replay_plan,
    outbox_replay_chunk,
    outbox_replay_unsent,
    outbox_replay_live_start,
    outbox_replay_live_waits,
    outbox_retained_oldest,
    outbox_wake,
    outbox_schedule,
    outbox_scheduled_cancel,
    outbox_scheduled_lock,
    outbox_scheduled_move,
    outbox_scheduled_next,
    outbox_scheduled_list,
    status_scheduled,
    relay_health_record,
    relay_health_delete,
    relay_health_retention_delete,
    relay_health_states,
    status_relay_health,
);

/// Fill the `{schema}` and `{publication}` placeholders. `schema` is
/// validated, so this is safe.
pub fn render(template: &str, schema: &SchemaName) -> String {
    template
        .replace("{schema}", schema.as_str())
        .replace("{publication}", &publication_name(schema))
}

/// What a relay worker's claim does to the rows it takes, in its
/// transaction (the relay's `sent` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Set `sent_at` (`outbox_claim_mark.sql`); retention deletes the row later.
    Mark,
    /// Delete the row (`outbox_claim_delete.sql`).
    Delete,
}

impl Queries {
    /// The claim of a relay worker owning `owned` (`outbox_claim_batch.sql`)
    /// that has holes: two branches per owned partition
    /// (`outbox_claim_partition.sql` and `outbox_claim_partition_holes.sql`,
    /// their comments left out), joined by `UNION ALL`. Parameters: `$1` the
    /// batch size; `$2` (`text[]`, xid8 values) and `$3` (`bigint[]`) the
    /// position of partition `p` at index `p + 1`; `$4` (`text[]`) the open
    /// transactions below the positions. The same set of partitions gives the
    /// same text, so a session prepares it once. Nothing is claimed when
    /// `owned` is empty.
    pub fn outbox_claim(&self, owned: &[i16], take: Take) -> String {
        self.claim_of(owned, take, true)
    }

    /// [`outbox_claim`](Self::outbox_claim) for a worker without holes (the
    /// usual case): one branch per partition, and no `$4`. Its generic plan
    /// merges the ordered scans; with the hole branches, each of which sorts,
    /// PostgreSQL preferred reading `$1` rows of every partition and sorting
    /// them when a worker owned 11 partitions or fewer.
    pub fn outbox_claim_past(&self, owned: &[i16], take: Take) -> String {
        self.claim_of(owned, take, false)
    }

    fn claim_of(&self, owned: &[i16], take: Take, holes: bool) -> String {
        let mut owned: Vec<i16> = owned
            .iter()
            .copied()
            .filter(|p| (0..PARTITIONS).contains(p))
            .collect();
        owned.sort_unstable();
        owned.dedup();
        let branches = if owned.is_empty() {
            // Every parameter still needs a type.
            format!(
                "SELECT NULL::bigint AS id, NULL::xid8 AS xid \
                 WHERE false AND $2::text[] IS NULL AND $3::bigint[] IS NULL{}",
                if holes { " AND $4::text[] IS NULL" } else { "" }
            )
        } else {
            owned
                .iter()
                .map(|p| {
                    let n = i32::from(*p) + 1;
                    self.claim_branch(
                        &p.to_string(),
                        &format!("(($2::text[])[{n}]::xid8, ($3::bigint[])[{n}])"),
                        holes.then_some("$4::text[]::xid8[]"),
                    )
                })
                .collect::<Vec<_>>()
                .join("\nUNION ALL\n")
        };
        self.claim_with(&branches, take)
    }

    /// The claim of a worker that keeps up: the same statement with the
    /// branches for all the partitions in `$2` (`smallint[]`) at once, past
    /// one position (`$3` xid8 as text, `$4` id: the lowest of them), `$5`
    /// the open transactions below it. It reads every claimable row of them
    /// through one index scan and sorts them, where
    /// [`outbox_claim`](Self::outbox_claim) merges one ordered scan per
    /// partition. Setting those up is most of what a claim costs while a few
    /// rows wait (`scripts/pgbench/relay.sh`: about 590,000 CPU instructions
    /// for an empty claim of sixteen partitions, this one about 110,000), but
    /// reading a backlog whole is not: a worker uses this one after a claim
    /// that found less than a batch, and the merge once this comes back full.
    pub fn outbox_claim_sorted(&self, take: Take) -> String {
        self.claim_with(
            &self.claim_branch(
                "ANY($2::smallint[])",
                "($3::text::xid8, $4::bigint)",
                Some("$5::text[]::xid8[]"),
            ),
            take,
        )
    }

    /// [`outbox_claim_sorted`](Self::outbox_claim_sorted) for a worker
    /// without holes: no `$5`.
    pub fn outbox_claim_sorted_past(&self, take: Take) -> String {
        self.claim_with(
            &self.claim_branch("ANY($2::smallint[])", "($3::text::xid8, $4::bigint)", None),
            take,
        )
    }

    fn claim_with(&self, branches: &str, take: Take) -> String {
        let head = match take {
            Take::Mark => &self.outbox_claim_mark,
            Take::Delete => &self.outbox_claim_delete,
        };
        without_comments(&self.outbox_claim_batch)
            .replace("{take}", &without_comments(head))
            .replace("{each_partition}", branches)
    }

    /// `outbox_claim_partition.sql` without its comment, for `partition`
    /// past the position `after`, and with `holes` (the open transactions)
    /// the branch of `outbox_claim_partition_holes.sql`.
    fn claim_branch(&self, partition: &str, after: &str, holes: Option<&str>) -> String {
        let mut branch = without_comments(&self.outbox_claim_partition);
        if let Some(holes) = holes {
            branch.push_str("\nUNION ALL\n");
            branch.push_str(
                &without_comments(&self.outbox_claim_partition_holes).replace("{holes}", holes),
            );
        }
        branch
            .replace("{partition}", partition)
            .replace("{after}", after)
    }
}

/// A query fragment without its comment lines, to be put inside another.
fn without_comments(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The publication `--notify logical` creates for `schema`'s outbox:
/// `postbox_<schema>_outbox`, or, when that would pass PostgreSQL's 63-byte
/// identifier limit (which would truncate it, and two long schema names could
/// then share one), `postbox_<first 38 characters>_<16 hex digits of a hash
/// of the whole name>`. Only `[a-z0-9_]`, like the schema name.
pub fn publication_name(schema: &SchemaName) -> String {
    let plain = format!("postbox_{schema}_outbox");
    if plain.len() <= 63 {
        return plain;
    }
    // FNV-1a 64: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in schema.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("postbox_{}_{h:016x}", &schema.as_str()[..38])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_placeholder() {
        let q = Queries::new(&SchemaName::new("shop").unwrap());
        let claim = q.outbox_claim(&[63, 5, 5, 17, 64, -1], Take::Mark);
        // Sent without its comments: logs and pg_stat_activity show the statement.
        assert!(!claim.contains("--"), "{claim}");
        assert!(
            claim.starts_with("UPDATE shop.outbox o SET sent_at = now()"),
            "{claim}"
        );
        assert!(claim.contains("shop.outbox o"));
        assert!(claim.contains("a.partition_id = 63"));
        assert!(claim.contains("(($2::text[])[64]::xid8, ($3::bigint[])[64])"));
        assert_eq!(claim.matches("\nUNION ALL\n").count(), 5, "{claim}");
        assert!(claim.find("= 5\n").unwrap() < claim.find("= 17\n").unwrap());
        assert!(!claim.contains("{partition}"));
        assert!(!claim.contains("{after}"));
        assert!(!claim.contains("{holes}"));
        assert!(!claim.contains("{each_partition}"));
        assert!(!claim.contains("{take}"));
        assert_eq!(claim.matches("UPDATE shop.outbox").count(), 1, "{claim}");
        assert_eq!(
            claim,
            q.outbox_claim(&[17, 63, 5], Take::Mark),
            "one text per set"
        );
        assert!(q.outbox_claim(&[], Take::Mark).contains("WHERE false"));
        // Without holes: one branch per partition, and no $4.
        let past = q.outbox_claim_past(&[63, 5, 17], Take::Mark);
        assert_eq!(past.matches("\nUNION ALL\n").count(), 2, "{past}");
        assert!(!past.contains("$4") && !past.contains("unnest"), "{past}");
        assert!(!q.outbox_claim_past(&[], Take::Mark).contains("$4"));
        let sorted_past = q.outbox_claim_sorted_past(Take::Mark);
        assert!(sorted_past.contains("$4::bigint") && !sorted_past.contains("$5"));
        let sorted = q.outbox_claim_sorted(Take::Delete);
        assert!(
            sorted.starts_with("DELETE FROM shop.outbox o\n WHERE"),
            "{sorted}"
        );
        assert!(sorted.contains("a.partition_id = ANY($2::smallint[])"));
        assert!(!sorted.contains("sent_at = now()"));
        assert!(!format!("{q:?}").contains("{schema}"));
        assert!(!format!("{q:?}").contains("{publication}"));
        assert!(q
            .notify_logical_create
            .contains("CREATE PUBLICATION postbox_shop_outbox FOR TABLE shop.outbox (id)"));
    }

    #[test]
    fn publication_names_fit_and_stay_distinct() {
        let long_a = SchemaName::new(&format!("{}a", "x".repeat(62))).unwrap();
        let long_b = SchemaName::new(&format!("{}b", "x".repeat(62))).unwrap();
        let (a, b) = (publication_name(&long_a), publication_name(&long_b));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
        let fits = SchemaName::new(&"y".repeat(48)).unwrap();
        assert_eq!(
            publication_name(&fits),
            format!("postbox_{}_outbox", "y".repeat(48))
        );
    }
}
