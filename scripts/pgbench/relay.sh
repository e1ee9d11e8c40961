#!/usr/bin/env bash
# What a relay worker's pass costs PostgreSQL, in CPU instructions: its claim
# (both kinds) and mark of a small batch, as while it keeps up with producers,
# and its claims of an empty outbox, as at every busy poll. Each variant is a
# pgbench script run by instructions.sh (one connection, callgrind), with the
# worker session's planner settings (relay_session_limits.sql).
#
#   scripts/pgbench/relay.sh            (N1=200 N2=1000 as instructions.sh)
#
# The worker owns partitions 0-15 (one of four workers); every transaction
# first commits six rows of those partitions, which `insert` alone measures:
# a batch's own cost is its variant's figure minus insert's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
queries="$here/../../crates/postbox/sql/queries"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

python3 - "$queries" "$work" <<'PY'
import pathlib, sys
queries, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
owned = list(range(16))

def query(name):
    lines = (queries / f"{name}.sql").read_text().splitlines()
    return "\n".join(l for l in lines if not l.lstrip().startswith("--")).replace("{schema}", "pgb")

# The parameters as constants: pgbench has no array variables.
branch = query("outbox_claim_partition")
merge = query("outbox_claim_batch").replace(
    "{each_partition}",
    "\nUNION ALL\n".join(branch.replace("{partition}", str(p)) for p in owned))
owned_array = "ARRAY[%s]::smallint[]" % ",".join(map(str, owned))
# The sorted claim: the same statement, one branch for all owned partitions.
sorted_ = query("outbox_claim_batch").replace(
    "{each_partition}", branch.replace("{partition}", "ANY(%s)" % owned_array))
merge, sorted_ = (q.replace("$1", "1000") for q in (merge, sorted_))
mark = query("outbox_mark_sent").replace("$1::bigint[]", ":ids::bigint[]")

# Keys whose partition (postbox_outbox_partition) is one of 0-15.
keys = ["customer:%d" % k for k in (8, 9, 14, 17, 19, 24, 27, 32, 37, 49, 50, 51,
                                    56, 63, 66, 70, 73, 79, 80, 83, 88, 91, 93, 98)]
insert = ("INSERT INTO pgb.outbox (topic, event, key, payload)\n"
          "SELECT 'orders', 'order.created', (ARRAY[%s])[1 + (random() * 23)::int],\n"
          "       '{\"id\": 1, \"amount\": \"19.99\"}'::jsonb\n"
          "  FROM generate_series(1, 6);\n" % ", ".join("'%s'" % k for k in keys))

def batch(claim):
    return (insert + "BEGIN;\nSELECT array_agg(id) AS ids FROM (\n" + claim + "\n) c\n\\gset\n"
            + mark + ";\nCOMMIT;\n")

variants = {
    "insert": insert,
    "merge_batch": batch(merge),
    "sorted_batch": batch(sorted_),
    "merge_empty": merge + ";\n",
    "sorted_empty": sorted_ + ";\n",
}
for name, script in variants.items():
    (work / f"{name}.sql").write_text(script)
PY

export PGOPTIONS="-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c enable_bitmapscan=off"
"$here/instructions.sh" "$work"/{insert,merge_batch,sorted_batch,merge_empty,sorted_empty}.sql
