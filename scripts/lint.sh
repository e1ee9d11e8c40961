#!/usr/bin/env bash
# The checks besides the tests, run by ./scripts/test.sh before them:
# formatting, clippy and rustdoc with warnings as errors, the docs book
# (built with warnings as errors; its links and Rust snippets are tests of
# docs/snippets), the configuration page generated from the code (a test),
# unused dependencies, every dependency's licence, and that the crates meant
# for crates.io package.
source "$(dirname "$0")/lib.sh"
ensure_rust
ensure_cargo_tools
need_cmd python3 python3
cd "$ROOT"
say "cargo fmt --check"
cargo fmt --all --check
say "cargo clippy (warnings are errors)"
cargo clippy --quiet --workspace --all-targets -- -D warnings
say "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --workspace --no-deps --exclude postbox-docs
say "doctests: the crates' examples, the README's and the book's Rust blocks"
cargo test --quiet --doc --workspace
say "mdbook build docs (warnings are errors)"
log="$(mktemp)"
mdbook build docs --dest-dir "$ROOT/target/book" 2>&1 | tee "$log" >&2
if grep -E ' (WARN|ERROR) ' "$log" >/dev/null; then
  echo "the docs book built with warnings (above)" >&2
  exit 1
fi
say "cargo machete (unused dependencies)"
cargo machete
say "cargo deny (licences, bans, sources; advisories need a download this machine cannot make)"
cargo deny --locked check --deny warnings licenses bans sources
say "rust-version: each crate's declaration against its locked dependencies"
python3 scripts/msrv.py
say "the npm package: eslint, tsc --noEmit, its SQL current with the Rust library's, npm pack"
ensure_node_client
(cd clients/node && npm run --silent lint && npm run --silent typecheck && node scripts/sql.mjs --check && npm run --silent pack:check)
say "cargo package (the crates meant for crates.io; the library also built from its package)"
cargo package --quiet --no-verify --allow-dirty -p postbox -p postbox-relay -p postbox-bullmq \
  -p postbox-kafka -p postbox-rabbitmq -p postbox-nats -p postbox-redis-streams -p postbox-webhook \
  -p postbox-sqs -p postbox-console -p postbox-cli
cargo package --quiet --allow-dirty -p postbox
