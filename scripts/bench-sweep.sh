#!/usr/bin/env bash
# The drain benchmark swept over event counts and key counts, as the BullMQ
# default publish mode was chosen (docs/src/benchmarks.md). Runs the release
# build against DATABASE_URL and REDIS_URL (defaults: the test set-up's) and
# writes one JSON file per combination to target/bench/sweep/.
#
#   scripts/bench-sweep.sh [--events "20000 100000"] [--keys "1 64 10000"] [--reps 3] [-- extra bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."

events="20000 100000"
keys="1 64 10000"
reps=3
while [ $# -gt 0 ]; do
    case "$1" in
        --events) events="$2"; shift 2 ;;
        --keys) keys="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "bench-sweep: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

export DATABASE_URL="${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postbox_test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
cargo build --release -q -p postbox-cli
out=target/bench/sweep
mkdir -p "$out"
for e in $events; do
    for k in $keys; do
        echo "=== events $e, keys $k"
        ./target/release/postbox bench drain --events "$e" --keys "$k" --reps "$reps" \
            --json "$out/drain-$e-$k.json" "$@" | grep -E '^\| (relay|SQL|raw)'
    done
done
echo "figures: $out/"
