#!/usr/bin/env bash
# What the outbox row costs a producer, in CPU instructions per transaction:
# the variants of run.sh, each run by pgbench on one connection against a
# throwaway PostgreSQL whose processes run under valgrind's callgrind.
# Instruction counts do not depend on what else the machine is doing, so two
# runs agree to a fraction of a percent where run.sh's throughput spreads ±10 %.
#
#   scripts/pgbench/instructions.sh [variant ...]        (N1=200 N2=1000 by default)
#
# Per variant: the backend's instructions for N2 transactions minus those for
# N1, divided by N2 - N1 (connection and start-up costs cancel out).
# Needs valgrind, pgbench and PostgreSQL's server binaries (Debian: valgrind,
# postgresql). Takes about half a minute per variant.
set -euo pipefail
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/variants.sh"
n1="${N1:-200}"
n2="${N2:-1000}"
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("${ALL_VARIANTS[@]}")
for cmd in valgrind pgbench psql pg_isready; do
    command -v "$cmd" >/dev/null || { echo "$cmd not found: apt-get install valgrind postgresql" >&2; exit 1; }
done
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$bin/initdb" ] || { echo "no initdb under /usr/lib/postgresql/*/bin: apt-get install postgresql" >&2; exit 1; }

work="$(mktemp -d)"
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" != 0 ] || chown postgres "$work"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="postgres://postgres@127.0.0.1:$port/bench"
server_opts=(-D "$work/data" -p "$port" -k "$work" -c listen_addresses=127.0.0.1
    -c autovacuum=off -c checkpoint_timeout=1h -c max_wal_size=4GB
    -c log_connections=on -c "log_line_prefix=[%p] ")
server_pid=""
stop_server() {
    [ -n "$server_pid" ] || return 0
    as_pg "$bin/pg_ctl" -D "$work/data" -m fast -w -t 300 stop >/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
trap 'stop_server; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
start_server() { # start_server [wrapper ...]
    as_pg "$@" "$bin/postgres" "${server_opts[@]}" >>"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 600); do
        pg_isready -q -h 127.0.0.1 -p "$port" -U postgres && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "PostgreSQL did not start; its log:" >&2
    cat "$work/server.log" >&2
    exit 1
}

as_pg "$bin/initdb" -D "$work/data" -A trust -U postgres --no-sync >/dev/null
start_server
psql -q "postgres://postgres@127.0.0.1:$port/postgres" -c "CREATE DATABASE bench"
migrate_pgb "$url"
stop_server

mkdir "$work/cg"
[ "$(id -u)" != 0 ] || chown postgres "$work/cg"
start_server valgrind --tool=callgrind --callgrind-out-file="$work/cg/%p"

# backend_instructions N SCRIPT: instructions of the backend that ran N transactions.
backend_instructions() {
    psql -q "$url" -c "TRUNCATE $VARIANT_TABLES RESTART IDENTITY"
    local seen pids pid
    seen="$(grep -c 'application_name=pgbench' "$work/server.log" || true)"
    pgbench -n -M prepared --random-seed=1 -c 1 -t "$1" -f "$2" "$url" >"$work/pgbench.log" 2>&1 ||
        { cat "$work/pgbench.log" >&2; exit 1; }
    # pgbench connects twice (a first check, then the client); each backend
    # writes its profile when it exits, just after pgbench disconnects.
    pids="$(grep 'application_name=pgbench' "$work/server.log" | tail -n +"$((seen + 1))" |
        sed -n 's/^\[\([0-9]*\)\].*/\1/p')"
    [ -n "$pids" ] || { echo "no pgbench connection in the server log" >&2; exit 1; }
    for pid in $pids; do
        for _ in $(seq 600); do
            grep -q '^summary:' "$work/cg/$pid" 2>/dev/null && break
            sleep 0.1
        done
    done
    for pid in $pids; do sed -n 's/^summary: //p' "$work/cg/$pid"; done | sort -n | tail -1
}

echo "callgrind: $(nproc) cores, one connection, ($n2 - $n1) transactions per variant, $($bin/postgres --version)"
results="$work/results"
for v in "${variants[@]}"; do
    s="$(variant_script "$v" "$work")"
    a="$(backend_instructions "$n1" "$s")"
    b="$(backend_instructions "$n2" "$s")"
    per_tx=$(((b - a) / (n2 - n1)))
    v="$(basename "$v" .sql)"
    printf '  %-22s %9d instructions per transaction\n' "$v" "$per_tx"
    echo "$v $per_tx" >>"$results"
done
python3 - "$results" <<'PY'
import sys
ir = dict((v, int(n)) for v, n in (line.split() for line in open(sys.argv[1])))
print("\n| variant | instructions per transaction | the second row's | / the plain row's |")
print("|---|---|---|---|")
for v, n in ir.items():
    row = n - ir["alone"] if "alone" in ir and v != "alone" else None
    plain = ir["plain"] - ir["alone"] if {"alone", "plain"} <= ir.keys() else None
    ratio = f"{row / plain:.2f}" if row is not None and plain else "–"
    print(f"| {v} | {n:,} | {row:,} | {ratio} |" if row is not None else f"| {v} | {n:,} | – | – |")
PY
