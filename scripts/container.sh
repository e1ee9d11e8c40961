#!/usr/bin/env bash
# Builds the relay's container image from scratch (no base image is pulled):
# the `dist` build of `postbox`, the shared libraries it links, the CA bundle
# and a non-root user, under target/container/rootfs, then
# deploy/container/Containerfile with podman (or docker).
#   ./scripts/container.sh [--tag postbox:0.1.0] [--binary target/dist/postbox]
# Without --binary it builds the `dist` profile first (LTO: slow on a small machine).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
tag="postbox:$version"
bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --binary) bin="$2"; shift 2 ;;
    *) echo "usage: $0 [--tag NAME:VERSION] [--binary PATH]" >&2; exit 2 ;;
  esac
done
engine="$(command -v podman || command -v docker || true)"
if [ -z "$engine" ]; then
  apt_install podman
  engine="$(command -v podman)"
fi
if [ -z "$bin" ]; then
  ensure_rust
  say "cargo build --profile dist -p postbox-cli"
  cargo build --quiet --profile dist -p postbox-cli
  bin="$ROOT/target/dist/postbox"
fi
# Its own directory per tag, so builds side by side do not mix.
ctx="$ROOT/target/container/${tag//[^A-Za-z0-9_.-]/_}"
rm -rf "$ctx" && mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp"
chmod 1777 "$ctx/rootfs/tmp"
install -m 0755 "$bin" "$ctx/rootfs/usr/local/bin/postbox"
# The dynamic loader and every library ldd resolves, at the same paths.
ldd "$bin" | grep -o '/[^ ]*' | while read -r lib; do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/:/sbin/nologin\npostbox:x:65532:65532:postbox:/:/sbin/nologin\n' > "$ctx/rootfs/etc/passwd"
printf 'root:x:0:\npostbox:x:65532:\n' > "$ctx/rootfs/etc/group"
cp deploy/container/Containerfile "$ctx/Containerfile"
say "$(basename "$engine") build -t $tag"
"$engine" build --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx" >/dev/null
echo "$tag"
