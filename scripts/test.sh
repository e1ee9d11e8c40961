#!/usr/bin/env bash
# The whole test suite, against real PostgreSQL, Redis, RabbitMQ, NATS, a Kafka-protocol broker,
# and Node/Python peers.
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_cargo_tools
cd "$ROOT"
# The whole suite (no arguments) starts with the checks besides the tests,
# fastest first, before any service is set up: a formatting or lint failure
# is reported in seconds. A targeted run (`./scripts/test.sh -E 'test(name)'`)
# goes straight to the tests.
if [ $# -eq 0 ]; then
  "$ROOT/scripts/lint.sh"
fi
ensure_postgres postbox_test
ensure_initdb
ensure_pgbouncer
ensure_redis
ensure_rabbitmq
ensure_nats
ensure_node_peers
ensure_node_client
ensure_chromium
ensure_deploy_tools
ensure_kafka_peers
cd "$ROOT"
# A service that only consumes builds the broker crates without their sink
# (and so without the relay engine): keep that compiling.
cargo check -q -p postbox-bullmq -p postbox-kafka -p postbox-rabbitmq -p postbox-nats -p postbox-redis-streams -p postbox-webhook -p postbox-sqs --no-default-features
exec cargo nextest run --workspace --no-fail-fast "$@"
