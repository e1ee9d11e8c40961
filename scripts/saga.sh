#!/usr/bin/env bash
# The saga example (examples/saga): orders → inventory → payments over postbox,
# 1,000 orders while faults hit, then the invariants and a summary table.
#   scripts/saga.sh                                  over Kafka: relay and service SIGKILLs
#   scripts/saga.sh run --broker bullmq              over BullMQ: relay SIGKILLs, Redis restarts
#   scripts/saga.sh run --help                       every option
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
need_cmd redis-server redis-server   # BullMQ runs start a redis-server of their own
ensure_kafka_peers                   # the Kafka-protocol broker (tansu)
cd "$ROOT"
cargo build --release --quiet -p postbox-cli -p saga
export DATABASE_URL
if [ $# -eq 0 ]; then
  set -- run --orders 1000 --payment-failure-share 0.1 --out-of-stock-share 0.1 \
    --broker kafka --faults relay-kill,service-kill --seed 42
fi
exec ./target/release/saga "$@"
