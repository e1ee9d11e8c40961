#!/usr/bin/env bash
# Latency bench of the chat example: how long a message takes from the
# consumers service's HTTP API to a socket.io client of the workers service
# (POST → outbox row → embedded relay → BullMQ → workers' inbox → socket.io).
#
#   examples/chat/bench.sh [count=100] [ratePerSec=10]
#
# Sets up PostgreSQL, Redis and the Node peers when needed (scripts/lib.sh;
# DATABASE_URL / REDIS_URL are used when set), builds the release binaries,
# runs `chat setup --reset` (drops and recreates the `consumers` and
# `workers` schemas of that database), starts both services with their
# embedded relays on 127.0.0.1:18081 (consumers) and :18082 (workers), runs
# tests/node/latency.mjs against them, which prints p50/p95/p99/max in ms,
# and stops both services (SIGTERM) however it ends. Service logs go to
# target/bench-chat/. Reports figures only; it asserts nothing about them.
source "$(dirname "$0")/../../scripts/lib.sh"
ensure_rust
ensure_postgres postgres
ensure_redis
ensure_node_peers
need_cmd curl curl
cd "$ROOT"

COUNT="${1:-100}"
RATE="${2:-10}"
CONSUMERS_PORT=18081
WORKERS_PORT=18082
LOGS="$ROOT/target/bench-chat"
CHAT="$ROOT/target/release/chat"

say "cargo build --release -p chat -p postbox-cli"
cargo build --release --quiet -p chat -p postbox-cli
mkdir -p "$LOGS"

# The service role's URL: DATABASE_URL with user chat_<service>, password chat.
service_url() {
  local re='^([a-z]+://)([^@/]*@)?(.*)$'
  [[ "$DATABASE_URL" =~ $re ]] || { echo "DATABASE_URL is not a URL" >&2; exit 1; }
  printf '%schat_%s:chat@%s' "${BASH_REMATCH[1]}" "$1" "${BASH_REMATCH[3]}"
}

say "chat setup --reset"
"$CHAT" setup --admin-url "$DATABASE_URL" --reset >/dev/null

PIDS=()
stop_services() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_services EXIT

start_service() { # start_service NAME PEER PORT
  RUST_LOG="warn,sqlx=error" "$CHAT" serve --service "$1" --peer "$2" \
    --database-url "$(service_url "$1")" --redis-url "$REDIS_URL" \
    --listen "127.0.0.1:$3" --embedded-relay >"$LOGS/$1.log" 2>&1 &
  PIDS+=("$!")
}

wait_healthy() { # wait_healthy NAME PORT PID
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:$2/healthz" >/dev/null 2>&1 && return
    if ! kill -0 "$3" 2>/dev/null; then
      echo "the $1 service exited; its log ($LOGS/$1.log):" >&2
      cat "$LOGS/$1.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "the $1 service did not answer /healthz within 30 s; its log ($LOGS/$1.log):" >&2
  cat "$LOGS/$1.log" >&2
  exit 1
}

for port in "$CONSUMERS_PORT" "$WORKERS_PORT"; do
  if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    echo "something already serves on 127.0.0.1:$port (an earlier bench or demo?); stop it first" >&2
    exit 1
  fi
done
say "starting consumers on :$CONSUMERS_PORT and workers on :$WORKERS_PORT (embedded relays)"
start_service consumers workers "$CONSUMERS_PORT"
start_service workers consumers "$WORKERS_PORT"
wait_healthy consumers "$CONSUMERS_PORT" "${PIDS[0]}"
wait_healthy workers "$WORKERS_PORT" "${PIDS[1]}"

say "latency: $COUNT messages at $RATE/s"
node tests/node/latency.mjs "http://127.0.0.1:$CONSUMERS_PORT" "http://127.0.0.1:$WORKERS_PORT" "$COUNT" "$RATE"
