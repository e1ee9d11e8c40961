#!/usr/bin/env python3
"""The `rust-version` each crate declares is honest as far as this machine can
tell (it has one toolchain, so no older compiler can be run): no dependency in
the locked graph a crate builds with (normal and build edges, this platform)
asks for a newer Rust than the crate declares. Clippy's `incompatible_msrv`
lint (part of `cargo clippy -D warnings`) checks our own code's use of the
standard library against the same field. Language features are not checked.
Usage: scripts/msrv.py  (from the repository root)"""
import json
import subprocess
import sys


def version(text):
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


meta = json.loads(subprocess.check_output([
    "cargo", "metadata", "--format-version", "1", "--locked",
    "--filter-platform", "x86_64-unknown-linux-gnu"]))
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

failed = False
for member in meta["workspace_members"]:
    crate = packages[member]
    declared = crate.get("rust_version")
    if crate.get("publish") == []:
        continue  # examples, chaos, bench, testkit, docs: never built by a user's compiler
    if not declared:
        print(f"{crate['name']}: no rust-version declared", file=sys.stderr)
        failed = True
        continue
    seen, stack = set(), [member]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for dep in nodes[node]["deps"]:
            if all(k["kind"] == "dev" for k in dep["dep_kinds"]):
                continue
            stack.append(dep["pkg"])
    needs = max(((version(packages[d]["rust_version"]), packages[d]) for d in seen - {member}
                 if packages[d].get("rust_version")), key=lambda x: x[0], default=None)
    if needs and needs[0] > version(declared):
        dep = needs[1]
        print(f"{crate['name']} declares rust-version {declared}, but its locked dependency "
              f"{dep['name']} {dep['version']} needs {dep['rust_version']}: raise the "
              f"declaration or pin an older {dep['name']}", file=sys.stderr)
        failed = True
    else:
        print(f"{crate['name']}: rust-version {declared}"
              + (f" (highest dependency: {needs[1]['name']} {needs[1]['rust_version']})" if needs else ""))
sys.exit(1 if failed else 0)
