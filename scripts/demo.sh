#!/usr/bin/env bash
# The quick demo: produce events in transactions, relay them to BullMQ,
# consume them through the inbox, and print what arrived.
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
cd "$ROOT"
cargo build --release --quiet -p postbox-cli
exec ./target/release/postbox demo "$@"
