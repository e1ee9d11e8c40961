#!/usr/bin/env bash
# The demo: the seed's two-service chat on postbox. Starts both services and
# their relays (PostgreSQL and Redis too, when needed), prints the page URLs,
# runs a scripted conversation both ways and prints what each side shows.
# Extra arguments go to `chat demo` (e.g. --once to stop after the script).
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
cd "$ROOT"
cargo build --release --quiet -p postbox-cli -p chat
exec ./target/release/chat demo --admin-url "$DATABASE_URL" --redis-url "$REDIS_URL" "$@"
