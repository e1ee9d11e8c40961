#!/usr/bin/env bash
# Fuzz every parser of outside input (fuzz/fuzz_targets), each for a while.
#   ./scripts/fuzz.sh            # every target, 60 s each
#   ./scripts/fuzz.sh 600 pgoutput   # one target, 10 minutes
# cargo-fuzz needs nightly compiler flags (sanitizers); the stable toolchain
# takes them with RUSTC_BOOTSTRAP=1. A finding lands in fuzz/artifacts/<target>/:
# copy it to fuzz/corpus/<target>/seed-<name> once fixed, so the test suite
# (postbox-cli's fuzz_seeds test) replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(identifiers trace_context relay_settings pgoutput headers)
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "==> $t for ${seconds}s"
  # The summary: runs, final coverage, and any finding (its artifact path).
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E "^(Done|#[0-9]+[[:space:]]+DONE)|stat::number_of_executed_units|ERROR|panicked|SUMMARY|Test unit written" || true
done
