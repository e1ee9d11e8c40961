#!/usr/bin/env bash
# What a relay worker's pass costs PostgreSQL, in CPU instructions: its claim
# (both kinds) and mark of a small batch, as while it keeps up with producers,
# and its claims of an empty outbox, as at every busy poll; the claim takes
# the rows (marks or deletes them) itself, from the head of each partition
# (a worker's first claim; later ones start at its positions). The claim
# before 2026-12-03 (a SELECT … FOR UPDATE, then the mark) is in the history
# of this script. Each variant is a
# pgbench script run by instructions.sh (one connection, callgrind), with the
# worker session's planner settings (relay_session_limits.sql).
#
#   scripts/pgbench/relay.sh            (N1=200 N2=1000 as instructions.sh)
#   VARIANTS="merge_batch sorted_batch" scripts/pgbench/relay.sh
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
# From the head of each partition, without open transactions below it.
branch = branch.replace("{after}", "('0'::xid8, 0::bigint)").replace("{holes}", "'{}'::xid8[]")
merge_branches = "\nUNION ALL\n".join(branch.replace("{partition}", str(p)) for p in owned)
owned_array = "ARRAY[%s]::smallint[]" % ",".join(map(str, owned))
# The sorted claim: the same statement, one branch for all owned partitions.
sorted_branch = branch.replace("{partition}", "ANY(%s)" % owned_array)

def claim(branches, take):
    """The relay's claim."""
    head = {"mark": query("outbox_claim_mark"), "delete": query("outbox_claim_delete")}[take]
    sql = query("outbox_claim_batch").replace("{take}", head).replace("{each_partition}", branches)
    return sql.replace("$1", "1000")

# Keys whose partition (postbox_outbox_partition) is one of 0-15.
keys = ["customer:%d" % k for k in (8, 9, 14, 17, 19, 24, 27, 32, 37, 49, 50, 51,
                                    56, 63, 66, 70, 73, 79, 80, 83, 88, 91, 93, 98)]
insert = ("INSERT INTO pgb.outbox (topic, event, key, payload)\n"
          "SELECT 'orders', 'order.created', (ARRAY[%s])[1 + (random() * 23)::int],\n"
          "       '{\"id\": 1, \"amount\": \"19.99\"}'::jsonb\n"
          "  FROM generate_series(1, 6);\n" % ", ".join("'%s'" % k for k in keys))

def batch(claim):
    return insert + "BEGIN;\n" + claim + ";\nCOMMIT;\n"

variants = {
    "insert": insert,
    "merge_batch": batch(claim(merge_branches, "mark")),
    "sorted_batch": batch(claim(sorted_branch, "mark")),
    "sorted_delete_batch": batch(claim(sorted_branch, "delete")),
    "merge_empty": claim(merge_branches, "mark") + ";\n",
    "sorted_empty": claim(sorted_branch, "mark") + ";\n",
}
for name, script in variants.items():
    (work / f"{name}.sql").write_text(script)
PY

export PGOPTIONS="-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c enable_bitmapscan=off"
read -ra variants <<<"${VARIANTS:-insert merge_batch sorted_batch sorted_delete_batch merge_empty sorted_empty}"
files=()
for v in "${variants[@]}"; do files+=("$work/$v.sql"); done
"$here/instructions.sh" "${files[@]}"
