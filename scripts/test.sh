#!/usr/bin/env bash
# The whole test suite, against real PostgreSQL, Redis, RabbitMQ, NATS, a Kafka-protocol broker,
# and Node/Python peers.
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postbox_test
ensure_initdb
ensure_redis
ensure_rabbitmq
ensure_nats
ensure_node_peers
ensure_chromium
ensure_kafka_peers
cd "$ROOT"
# A service that only consumes builds the broker crates without their sink
# (and so without the relay engine): keep that compiling.
cargo check -q -p postbox-bullmq -p postbox-kafka -p postbox-rabbitmq -p postbox-nats -p postbox-redis-streams -p postbox-webhook -p postbox-sqs --no-default-features
if cargo nextest --version >/dev/null 2>&1; then
  exec cargo nextest run --workspace --no-fail-fast "$@"
else
  exec cargo test --workspace --no-fail-fast "$@"
fi
