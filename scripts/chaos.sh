#!/usr/bin/env bash
# The chaos harness: the seed's experiment against v1 (naive dual write) and
# v2 (postbox), as real processes with the harness's own Redis (AOF on).
# Extra arguments go to `chaos seed` (e.g. --version v2 --runs 3).
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
cd "$ROOT"
cargo build --release --quiet -p postbox-cli -p chat -p chaos
exec ./target/release/chaos seed --admin-url "$DATABASE_URL" "$@"
