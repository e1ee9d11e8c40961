#!/usr/bin/env bash
# The relay against a long transaction, one relay binary after the other in one
# run (docs: concepts/read-path.md, benchmarks.md "The read path against a held
# snapshot"). Per binary: a fresh schema migrated by it, one relay to Redis
# Streams, plain-SQL producers (pgbench -R) at RATE events/s on 64 keys; after
# WARM seconds a transaction is held for HOLD seconds:
#   KIND=snapshot  BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) … (no xid)
#   KIND=writer    BEGIN; INSERT INTO <schema>.outbox …  (an xid, idle in transaction)
# Prints the producers' lag p99 (the claim's time − the producer's commit
# time, from sent_at − created_at) and the relay's CPU per 1,000 events, for
# the WARM seconds before the hold and the last half of the hold, and the
# dead tuples at its end.
#
#   KIND=snapshot HOLD=600 scripts/pgbench/horizon.sh before=/tmp/postbox-old after=target/release/postbox
#
# Uses DATABASE_URL and REDIS_URL (defaults: the test machine's services); KEEP=1 keeps
# the relays' and pgbench's logs (a mktemp directory) instead of removing them.
set -euo pipefail
RATE="${RATE:-1000}" WARM="${WARM:-60}" HOLD="${HOLD:-240}" KIND="${KIND:-snapshot}"
DB="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS="${REDIS_URL:-redis://127.0.0.1:6379}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

cpu_ms() { # user + system CPU of a process, in ms (USER_HZ = 100)
  awk '{ sub(/.*\) /, ""); print ($12 + $13) * 10 }' "/proc/$1/stat"
}
now() { psql "$DB" -Atqc "SELECT extract(epoch FROM clock_timestamp())"; }

printf '| binary | hold | lag p99 before (ms) | CPU per 1,000 before (ms) | lag p99, last half of the hold (ms) | CPU per 1,000 then (ms) | CPU × | dead tuples |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for spec in "$@"; do
  label="${spec%%=*}" bin="${spec#*=}"
  schema="horizon_${label//[^a-z0-9_]/_}"
  psql "$DB" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1
  "$bin" migrate --database-url "$DB" --schema "$schema" >/dev/null
  cat >"$work/insert.sql" <<SQL
\set k random(0, 63)
INSERT INTO $schema.outbox (topic, event, key, payload) VALUES ('horizon', 'e', 'k' || :k, '{"n": 1}');
SQL
  "$bin" relay --database-url "$DB" --schemas "$schema" --sink redis_streams \
    --redis-streams-url "$REDIS" >"$work/relay-$label.log" 2>&1 &
  relay=$!
  sleep 2
  pgbench -n -c 4 -j 2 -R "$RATE" -T $((WARM + HOLD + 5)) -f "$work/insert.sql" "$DB" \
    >"$work/pgbench-$label.log" 2>&1 &
  producers=$!
  sleep 5
  t0=$(now) c0=$(cpu_ms $relay)
  sleep $((WARM - 5))
  t1=$(now) c1=$(cpu_ms $relay)
  case "$KIND" in
    snapshot) hold="BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM $schema.outbox;" ;;
    writer) hold="BEGIN; INSERT INTO $schema.outbox (topic, event, key, payload) VALUES ('horizon', 'e', 'idle', '{}');" ;;
    *) echo "KIND is snapshot or writer" >&2; exit 2 ;;
  esac
  psql "$DB" -qc "$hold SELECT pg_sleep($HOLD); COMMIT;" >/dev/null &
  holder=$!
  sleep $((HOLD / 2))
  t2=$(now) c2=$(cpu_ms $relay)
  sleep $((HOLD / 2 - 1))
  t3=$(now) c3=$(cpu_ms $relay)
  dead=$(psql "$DB" -Atqc "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = '$schema' AND relname = 'outbox'")
  wait $holder
  wait $producers || true
  sleep 5
  read -r lag_a n_a lag_b n_b < <(psql "$DB" -Atq -F ' ' -c "
    SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM coalesce(sent_at, now()) - created_at))
                   FILTER (WHERE created_at < to_timestamp($t1))::numeric * 1000),
           count(*) FILTER (WHERE created_at < to_timestamp($t1)),
           round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM coalesce(sent_at, now()) - created_at))
                   FILTER (WHERE created_at >= to_timestamp($t2))::numeric * 1000),
           count(*) FILTER (WHERE created_at >= to_timestamp($t2))
      FROM $schema.outbox
     WHERE topic = 'horizon' AND key <> 'idle'
       AND created_at >= to_timestamp($t0) AND created_at < to_timestamp($t3)")
  kill -INT $relay; wait $relay || true
  awk -v l="$label" -v h="$KIND $HOLD s" -v la="$lag_a" -v lb="$lag_b" \
      -v ca=$((c1 - c0)) -v na="$n_a" -v cb=$((c3 - c2)) -v nb="$n_b" -v d="$dead" 'BEGIN {
    a = ca * 1000 / (na > 0 ? na : 1); b = cb * 1000 / (nb > 0 ? nb : 1)
    printf "| %s | %s | %s | %.1f | %s | %.1f | %.2f | %s |\n", l, h, la, a, lb, b, (a > 0 ? b / a : 0), d }'
  psql "$DB" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1
done
