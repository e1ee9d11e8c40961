#!/usr/bin/env bash
# The chaos harness (chaos/): real processes, injected faults, a checker.
#   scripts/chaos.sh                     the seed scenario, v1 then v2
#   scripts/chaos.sh seed --runs 3       v1 once, v2 three times
#   scripts/chaos.sh run fast|all|NAME   fault scenarios under load (chaos list)
#   scripts/chaos.sh seed --broker rabbitmq|nats   the seed over RabbitMQ / NATS JetStream
#   scripts/chaos.sh latency             send → shown latency table + PNG histogram
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
# The harness starts RabbitMQ nodes and NATS servers of its own (seed --broker).
need_cmd /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
ensure_nats
need_cmd fc-list fontconfig
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || apt_install fonts-dejavu-core
cd "$ROOT"
cargo build --release --quiet -p postbox-cli -p chat -p chaos
export DATABASE_URL
if [ $# -eq 0 ]; then set -- seed; fi
exec ./target/release/chaos "$@"
