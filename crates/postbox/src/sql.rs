//! The SQL postbox runs, rendered for one schema.
//!
//! Every statement lives in `sql/queries/*.sql` or `sql/migrations/*.sql` (one
//! place to review locking and indexes); `{schema}` is the only placeholder,
//! filled with a validated [`SchemaName`]. Everything else is a bind parameter.

use crate::SchemaName;

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
    outbox_wakeup_arm,
    outbox_wakeup_disarm,
    outbox_wakeup_fence,
    outbox_insert,
    outbox_insert_many,
    outbox_claim_batch,
    outbox_mark_sent,
    outbox_delete_sent,
    outbox_record_failure,
    outbox_block_key,
    outbox_dead_letter_move,
    outbox_pending_count,
    partition_try_acquire,
    partition_release,
    relay_member_join,
    relay_member_count,
    inbox_receive,
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
);

/// Fill the `{schema}` placeholder. `schema` is validated, so this is safe.
pub fn render(template: &str, schema: &SchemaName) -> String {
    template.replace("{schema}", schema.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_placeholder() {
        let q = Queries::new(&SchemaName::new("shop").unwrap());
        assert!(q.outbox_claim_batch.contains("shop.outbox o"));
        assert!(!format!("{q:?}").contains("{schema}"));
    }
}
