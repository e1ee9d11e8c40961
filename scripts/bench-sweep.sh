#!/usr/bin/env bash
# The drain benchmark swept over event counts, key counts, relay workers and
# batch sizes: how the BullMQ default publish mode was chosen, and how to
# size a relay (docs/src/benchmarks.md). Runs the release build against
# DATABASE_URL and REDIS_URL (defaults: the test set-up's) and writes one
# JSON file per combination to target/bench/sweep/.
#
#   scripts/bench-sweep.sh [--events "20000 100000"] [--keys "1 64 10000"]
#                          [--workers "4"] [--batch "1000"] [--reps 3] [-- extra bench flags]
#
# e.g. sizing a relay: scripts/bench-sweep.sh --events 100000 --keys 64 --workers "1 2 4 8" --batch "100 500 1000 5000"
set -euo pipefail
cd "$(dirname "$0")/.."

events="20000 100000"
keys="1 64 10000"
workers="4"
batch="1000"
reps=3
while [ $# -gt 0 ]; do
    case "$1" in
        --events) events="$2"; shift 2 ;;
        --keys) keys="$2"; shift 2 ;;
        --workers) workers="$2"; shift 2 ;;
        --batch) batch="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "bench-sweep: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

export DATABASE_URL="${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postbox_test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
cargo build --release -q -p postbox-bench
out=target/bench/sweep
mkdir -p "$out"
for e in $events; do
    for k in $keys; do
        for w in $workers; do
            for b in $batch; do
                echo "=== events $e, keys $k, workers $w, batch $b"
                ./target/release/postbox-bench drain --events "$e" --keys "$k" \
                    --workers "$w" --batch-size "$b" --reps "$reps" \
                    --json "$out/drain-$e-$k-$w-$b.json" "$@" | grep -E '^\| (relay|SQL|raw)'
            done
        done
    done
done
echo "figures: $out/"
