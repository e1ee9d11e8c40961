#!/usr/bin/env bash
# PostgreSQL's time for the relay's merge claim alone, without the relay
# (docs: benchmarks.md, "The claim's cost in PostgreSQL"). Per round and
# variant: a fresh schema (migrated by BIN) with EVENTS rows on 64 keys,
# VACUUM ANALYZE, then `pgbench -M prepared -c 1` runs the claim of all 64
# partitions (batch 1,000, sent = delete) until every row is taken; prints
# the seconds. Variants:
#   before  the claim before migration 0010 (ORDER BY id; the table gets the
#           index of 0007 in place of 0010's)
#   cte     0010's claim as it landed: rows through a CTE joined to the snapshot
#   now     0010's claim as the relay sends it now: straight from RETURNING
#
#   ROUNDS=3 scripts/pgbench/claim-cost.sh before cte now
#
# Uses DATABASE_URL (default: the test machine's) and BIN (default: target/release/postbox).
set -euo pipefail
ROUNDS="${ROUNDS:-3}" EVENTS="${EVENTS:-100000}"
DB="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
BIN="${BIN:-target/release/postbox}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

branches() { # $1: before | position
  local out="" b p
  for p in $(seq 0 63); do
    if [ "$1" = before ]; then
      b="(SELECT a.id + 0 AS id FROM S.outbox a WHERE a.sent_at IS NULL AND a.partition_id = $p
          AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
          AND NOT EXISTS (SELECT 1 FROM S.outbox w WHERE w.sent_at IS NULL AND w.next_attempt_at IS NOT NULL
                            AND w.next_attempt_at > now() AND w.key = a.key AND w.id < a.id)
          ORDER BY a.id + 0 LIMIT 1000)"
    else
      b="(SELECT a.id + 0 AS id, a.xid FROM S.outbox a WHERE a.sent_at IS NULL AND a.partition_id IS NOT NULL
          AND a.partition_id = $p AND (a.xid, a.id + 0) > ('0'::xid8, 0::bigint)
          AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
          AND NOT EXISTS (SELECT 1 FROM S.outbox w WHERE w.sent_at IS NULL AND w.next_attempt_at IS NOT NULL
                            AND w.next_attempt_at > now() AND w.key = a.key AND (w.xid, w.id) < (a.xid, a.id))
          ORDER BY a.xid, a.id + 0 LIMIT 1000)"
    fi
    out="${out:+$out UNION ALL }$b"
  done
  echo "$out"
}
take="DELETE FROM S.outbox o WHERE o.id = ANY(ARRAY(SELECT c.id FROM"
cat >"$work/before.sql" <<SQL
BEGIN;
$take ($(branches before)) c ORDER BY c.id LIMIT 1000)) AND o.sent_at IS NULL
RETURNING o.id, o.event_id, o.topic, o.event, o.key, o.payload, o.headers, o.attempts, o.created_at;
COMMIT;
SQL
cat >"$work/cte.sql" <<SQL
BEGIN;
WITH taken AS ($take ($(branches position)) c ORDER BY c.xid, c.id LIMIT 1000)) AND o.sent_at IS NULL
RETURNING o.id, o.xid, o.partition_id, o.event_id, o.topic, o.event, o.key, o.payload, o.headers, o.attempts, o.created_at)
SELECT t.id, t.xid::text::bigint AS xid, t.partition_id, t.event_id, t.topic::text AS topic, t.event::text AS event,
       t.key, t.payload, t.headers::jsonb AS headers, t.attempts, t.created_at, s.snapshot
  FROM taken t, (SELECT pg_catalog.pg_current_snapshot()::text AS snapshot) s;
COMMIT;
SQL
cat >"$work/now.sql" <<SQL
BEGIN;
$take ($(branches position)) c ORDER BY c.xid, c.id LIMIT 1000)) AND o.sent_at IS NULL
RETURNING o.id, o.xid, o.partition_id, o.event_id, o.topic::text AS topic, o.event::text AS event, o.key,
          o.payload, o.headers::jsonb AS headers, o.attempts, o.created_at,
          (SELECT pg_catalog.pg_current_snapshot()::text) AS snapshot;
COMMIT;
SQL

printf '| variant | round | seconds |\n|---|---|---|\n'
for round in $(seq 1 "$ROUNDS"); do
  for v in "$@"; do
    s="claim_cost_$v"
    psql "$DB" -qc "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1
    "$BIN" migrate --database-url "$DB" --schema "$s" --notify off >/dev/null
    if [ "$v" = before ]; then
      psql "$DB" -qc "CREATE INDEX outbox_unsent_by_partition ON $s.outbox (partition_id, (id + 0)) WHERE sent_at IS NULL;
                      DROP INDEX $s.outbox_unsent_by_position"
    fi
    psql "$DB" -qc "INSERT INTO $s.outbox (topic, event, key, payload)
      SELECT 'bench', 'bench.event', 'key-' || (g % 64), jsonb_build_object('n', g, 'body', 'hello from the bench')
        FROM generate_series(1, $EVENTS) g"
    psql "$DB" -qc "VACUUM ANALYZE $s.outbox"
    sed "s/S\./$s./g" "$work/$v.sql" >"$work/run.sql"
    start=$(date +%s.%N)
    pgbench -n -M prepared -c 1 -t $(( (EVENTS + 999) / 1000 )) -f "$work/run.sql" "$DB" >/dev/null
    end=$(date +%s.%N)
    left=$(psql "$DB" -Atc "SELECT count(*) FROM $s.outbox")
    [ "$left" = 0 ] || echo "warning: $v left $left rows" >&2
    printf '| %s | %s | %.3f |\n' "$v" "$round" "$(echo "$end - $start" | bc)"
    psql "$DB" -qc "DROP SCHEMA $s CASCADE" >/dev/null 2>&1
  done
done
