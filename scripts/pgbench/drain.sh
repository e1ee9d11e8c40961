#!/usr/bin/env bash
# Seconds one relay takes to drain a backlog, one relay binary after the other
# (docs: benchmarks.md, "JIT and the merge claim"). Per binary and round: a
# fresh schema migrated by it, EVENTS rows on 64 keys inserted in one
# statement, VACUUM ANALYZE, then one relay (4 workers) to Redis Streams with
# SENT (mark or delete) until no row is unsent; its claims per batch come from
# its /metrics.
#
#   ROUNDS=3 SENT=delete scripts/pgbench/drain.sh before=/tmp/postbox-old after=target/release/postbox
#
# Uses DATABASE_URL and REDIS_URL (defaults: the test machine's services).
set -euo pipefail
EVENTS="${EVENTS:-100000}" ROUNDS="${ROUNDS:-2}" SENT="${SENT:-mark}"
DB="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS="${REDIS_URL:-redis://127.0.0.1:6379}"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

printf '| binary | sent | round | seconds | batches |\n|---|---|---|---|---|\n'
for round in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    label="${spec%%=*}" bin="${spec#*=}"
    schema="drain_${label//[^a-z0-9_]/_}"
    psql "$DB" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1
    "$bin" migrate --database-url "$DB" --schema "$schema" --notify off >/dev/null
    psql "$DB" -qc "INSERT INTO $schema.outbox (topic, event, key, payload)
      SELECT '$schema', 'e', 'key-' || (g % 64), jsonb_build_object('n', g, 'body', repeat('x', 200))
        FROM generate_series(1, $EVENTS) g"
    psql "$DB" -qc "VACUUM ANALYZE $schema.outbox"
    start=$(date +%s.%N)
    "$bin" relay --database-url "$DB" --schemas "$schema" --sink redis_streams \
      --redis-streams-url "$REDIS" --sent "$SENT" --admin-listen "127.0.0.1:$port" >/dev/null 2>&1 &
    relay=$!
    until [ "$(psql "$DB" -Atc "SELECT count(*) FROM $schema.outbox WHERE sent_at IS NULL")" = 0 ]; do
      sleep 0.1
    done
    end=$(date +%s.%N)
    batches=$(curl -s "127.0.0.1:$port/metrics" | awk '/^postbox_batch_size_count/ { print $2 }')
    kill "$relay"; wait "$relay" 2>/dev/null || true
    printf '| %s | %s | %s | %.2f | %s |\n' "$label" "$SENT" "$round" "$(echo "$end - $start" | bc)" "$batches"
    psql "$DB" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1
    redis-cli -u "$REDIS" DEL "$schema" >/dev/null
  done
done
