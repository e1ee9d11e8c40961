#!/usr/bin/env bash
# The demo: the seed's two-service chat on postbox. Starts both services and
# their relays (PostgreSQL and Redis too, when needed), prints the page URLs,
# runs a scripted conversation both ways and prints what each side shows.
# Extra arguments go to `chat demo` (e.g. --once to stop after the script;
# --broker rabbitmq or --broker nats to talk through that broker, started
# here when it is not running).
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
broker=bullmq
node=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --broker=*) broker="${arg#--broker=}" ;;
    --node=*) node="${arg#--node=}" ;;
    *) [ "$prev" = "--broker" ] && broker="$arg"
       [ "$prev" = "--node" ] && node="$arg" ;;
  esac
  prev="$arg"
done
# --node <service>: that service runs in Node.js on the npm package.
[ -n "$node" ] && ensure_node_client
case "$broker" in
  rabbitmq) ensure_rabbitmq ;;
  nats) ensure_nats_server ;;
esac
cd "$ROOT"
cargo build --release --quiet -p postbox-cli -p chat
exec ./target/release/chat demo --admin-url "$DATABASE_URL" --redis-url "$REDIS_URL" "$@"
