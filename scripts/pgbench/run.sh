#!/usr/bin/env bash
# What the outbox row costs a producer, part by part (docs/src/benchmarks.md).
# Each variant is a pgbench script of one producer transaction; throughput with
# CLIENTS connections for DURATION seconds, REPS times, tables emptied between.
#
#   DATABASE_URL=postgres://... CLIENTS=16 DURATION=10 REPS=3 scripts/pgbench/run.sh [variant ...]
#
# Variants: see variants.sh (all of them by default).
# Prints, per variant, transactions/s (median, min–max), the ratio to the
# order alone, and the second row's cost as a multiple of the plain row's.
set -euo pipefail
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
db="${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postbox_test}"
clients="${CLIENTS:-16}"
duration="${DURATION:-10}"
reps="${REPS:-3}"
source "$here/variants.sh"
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("${ALL_VARIANTS[@]}")
command -v pgbench >/dev/null || { echo "pgbench not found: apt-get install postgresql-client" >&2; exit 1; }

migrate_pgb "$db"

work="$(mktemp -d)"
trap 'rm -rf "$work"; psql -q "$db" -c "DROP SCHEMA IF EXISTS pgb CASCADE"' EXIT
results="$work/results"
echo "pgbench: $clients clients, ${duration}s per run, $reps repetitions, $(nproc) cores"
for rep in $(seq "$reps"); do
    for v in "${variants[@]}"; do
        psql -q "$db" -c "TRUNCATE $VARIANT_TABLES RESTART IDENTITY" -c "CHECKPOINT"
        tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$duration" -f "$(variant_script "$v" "$work")" "$db" 2>&1 |
            sed -n 's/^tps = \([0-9.]*\).*/\1/p' | tail -1)
        [ -n "$tps" ] || { echo "pgbench failed for $v" >&2; exit 1; }
        printf '  rep %s: %-22s %8.0f tps\n' "$rep" "$v" "$tps"
        echo "$v $tps" >>"$results"
    done
done
python3 - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    v, tps = line.split()
    runs.setdefault(v, []).append(float(tps))
med = {v: statistics.median(t) for v, t in runs.items()}
print("\n| variant | tps median (min–max) | ratio to alone | second row's cost / plain row's |")
print("|---|---|---|---|")
for v, t in runs.items():
    ratio = f"{med[v] / med['alone']:.2f}" if "alone" in med else "–"
    cost = "–"
    if v not in ("alone",) and {"alone", "plain"} <= med.keys():
        row = 1 / med[v] - 1 / med["alone"]
        plain = 1 / med["plain"] - 1 / med["alone"]
        cost = f"{row / plain:.2f}" if plain > 0 else "–"
    print(f"| {v} | {med[v]:.0f} ({min(t):.0f}–{max(t):.0f}) | {ratio} | {cost} |")
PY
