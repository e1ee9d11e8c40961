#!/usr/bin/env bash
# `postbox-bench health` on a PostgreSQL cluster of its own with the server's
# default settings (autovacuum on), unlike the test set-up's shared server
# (autovacuum off): how big the outbox stays and how many dead rows it
# carries under a steady load with retention on (docs/src/benchmarks.md).
# The cluster lives in a temporary directory on a free port and is removed
# at the end, also after a failure or Ctrl-C.
#
#   scripts/bench-health.sh [--health-duration 30m] [--rate 1000] [--health-every 1m] [other bench flags]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

duration=30m
rate=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --health-duration) duration="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    *) break ;;
  esac
done

ensure_initdb
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
dir="$(mktemp -d /tmp/postbox-bench-health.XXXXXX)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# initdb refuses to run as root: the cluster then belongs to the postgres user.
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$dir"
  as_owner=(runuser -u postgres --)
fi
cleanup() {
  "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

say "initdb in $dir, port $port (default settings: autovacuum on)"
"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null
"${as_owner[@]}" "$bin/createdb" -h "$dir" -p "$port" -U postgres postbox_bench

cargo build --release -q -p postbox-bench
./target/release/postbox-bench health \
  --database-url "postgres://postgres@127.0.0.1:$port/postbox_bench" \
  --redis-url "${REDIS_URL:-redis://127.0.0.1:6379}" \
  --health-duration "$duration" --rate "$rate" "$@"
