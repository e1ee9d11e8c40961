-- A relay worker's session: if it goes silent for $1 milliseconds (the relay
-- host died, or the network dropped its packets without closing anything),
-- the server ends it, and its partition locks go with it, so another relay
-- takes over. idle_session_timeout exists from PostgreSQL 14; before that only
-- an open transaction is cut. TCP keepalives find a vanished peer even while
-- a statement waits. Generic plans: a custom plan of the claim
-- (outbox_claim_batch.sql, a branch per owned partition) costs more to make
-- than to run, and its parameters (the batch size, the worker's positions)
-- change nothing a plan would choose. No sequential scans:
-- every statement of a worker finds its rows by id or partition, and a plan
-- made while the outbox was nearly empty (a fresh deployment, a server whose
-- statistics are stale) would otherwise scan the whole table at every batch
-- for the rest of the session, sent rows included. No bitmap scans either:
-- a bitmap scan reads the index entries of rows sent since the last vacuum
-- at every claim, where an index scan marks them dead the first time
-- (Queries::outbox_claim_sorted would otherwise get one). No JIT: the merge
-- claim of a worker owning many partitions (two branches each) is costed above
-- jit_above_cost, and PostgreSQL compiles it again at every execution; with 64
-- partitions that took 6 to 40 s per claim against 20 to 35 ms without it
-- (docs: benchmarks.md, "JIT and the merge claim"). The server's own
-- statement_timeout and lock_timeout (hosted databases set them low, for
-- their applications) give way to $1 too: the relay abandons a statement
-- unanswered after $1 anyway, and a claim of a large backlog cut short at
-- every try would never finish (docs: operations/managed-postgres.md).
-- Session-level settings: nothing outside this session changes.
SELECT set_config('idle_in_transaction_session_timeout', $1::text, false),
       set_config('statement_timeout', $1::text, false),
       set_config('lock_timeout', $1::text, false),
       CASE WHEN current_setting('server_version_num')::int >= 140000
            THEN set_config('idle_session_timeout', $1::text, false) END,
       set_config('tcp_keepalives_idle', greatest(1, $1::int / 3000)::text, false),
       set_config('tcp_keepalives_interval', greatest(1, $1::int / 6000)::text, false),
       set_config('tcp_keepalives_count', '3', false),
       CASE WHEN current_setting('server_version_num')::int >= 120000
            THEN set_config('plan_cache_mode', 'force_generic_plan', false) END,
       set_config('enable_seqscan', 'off', false),
       set_config('enable_bitmapscan', 'off', false),
       set_config('jit', 'off', false)
