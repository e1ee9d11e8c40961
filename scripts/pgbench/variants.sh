# The producer transactions compared by run.sh and instructions.sh (sourced).
# Each variant is a pgbench script of one transaction: the order alone, the
# order and a plain row as wide as the event, the order and its outbox row as
# outbox_insert.sql writes it, and the same against the copies of the outbox
# in setup.sql, each with one thing taken away.

pgbench_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ALL_VARIANTS=(alone plain outbox outbox_0007 outbox_no_returning outbox_no_unique
    outbox_no_partition outbox_no_partial outbox_no_checks outbox_bare outbox_v7
    outbox_adaptive outbox_adaptive_0008 outbox_partition_expr
    outbox_adaptive_partition_expr outbox_partition_inline)
VARIANT_TABLES="pgb.orders, pgb.plain, pgb.outbox, pgb.outbox_0007, pgb.outbox_no_unique,
    pgb.outbox_no_partition, pgb.outbox_no_partial, pgb.outbox_no_checks, pgb.outbox_bare,
    pgb.outbox_adaptive, pgb.outbox_adaptive_0008, pgb.outbox_partition_expr,
    pgb.outbox_adaptive_partition_expr, pgb.outbox_partition_inline"

# variant_script NAME WORKDIR: prints the path of NAME's pgbench script (a
# path to a .sql file is its own script: relay.sh's variants).
variant_script() {
    local v="$1" work="$2" table="$1" returning='\nRETURNING id, event_id'
    case "$v" in
        *.sql) echo "$v"; return ;;
        alone | plain | outbox_v7) echo "$pgbench_dir/$v.sql"; return ;;
        outbox_no_returning) table=outbox returning='' ;;
        outbox | outbox_0007 | outbox_no_* | outbox_bare | outbox_adaptive* | outbox_partition_*) ;;
        *) echo "unknown variant $v (one of: ${ALL_VARIANTS[*]})" >&2; return 2 ;;
    esac
    sed "s/{table}/$table/; s/{returning}/$returning/" "$pgbench_dir/outbox.sql.in" >"$work/$v.sql"
    echo "$work/$v.sql"
}

# migrate_pgb URL: the schema pgb as `postbox migrate` makes it, without a
# wake-up trigger, plus setup.sql's tables. POSTBOX=path/to/postbox uses that
# binary instead of building one.
migrate_pgb() {
    psql -q "$1" -c "DROP SCHEMA IF EXISTS pgb CASCADE"
    if [ -n "${POSTBOX:-}" ]; then
        "$POSTBOX" migrate --database-url "$1" --schema pgb --notify off >/dev/null
    else
        (cd "$pgbench_dir/../.." && cargo run -q -p postbox-cli -- migrate --database-url "$1" --schema pgb --notify off >/dev/null)
    fi
    psql -q -v ON_ERROR_STOP=1 "$1" -f "$pgbench_dir/setup.sql"
}
