#!/usr/bin/env python3
"""Every crate the workspace builds with is under a licence postbox may ship
with (MIT OR Apache-2.0) and comes from crates.io (or is the workspace's
own): reads `cargo metadata`, evaluates each package's SPDX expression
against the allowed list, checks its source, and names any that fails.
Usage: scripts/licences.py  (from the repository root)"""
import json
import re
import subprocess
import sys

# Permissive licences, and MPL-2.0 (file-level copyleft: using an unmodified
# crate is fine; a modified file would have to be published).
ALLOWED = {
    "MIT", "MIT-0", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause",
    "BSD-3-Clause", "ISC", "Zlib", "Unicode-3.0", "Unicode-DFS-2016", "CC0-1.0",
    "Unlicense", "BSL-1.0", "0BSD", "MPL-2.0", "CDLA-Permissive-2.0", "OpenSSL",
}


def tokens(expr):
    expr = expr.replace("/", " OR ")  # old crates write "MIT/Apache-2.0"
    return re.findall(r"\(|\)|[A-Za-z0-9.+-]+(?: WITH [A-Za-z0-9.+-]+)?", expr)


def allowed(expr):
    toks = tokens(expr)
    pos = 0

    def atom():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t == "(":
            v = disj()
            pos += 1  # ")"
            return v
        return t.rstrip("+") in ALLOWED or t in ALLOWED

    def conj():
        nonlocal pos
        v = atom()
        while pos < len(toks) and toks[pos] == "AND":
            pos += 1
            v = atom() and v
        return v

    def disj():
        nonlocal pos
        v = conj()
        while pos < len(toks) and toks[pos] == "OR":
            pos += 1
            v = conj() or v
        return v

    return disj()


meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--locked"]))
workspace = set(meta["workspace_members"])
bad = []
for p in meta["packages"]:
    if p["id"] in workspace:
        if p["license"] != "MIT OR Apache-2.0":
            bad.append(f'{p["name"]}: the workspace licence is "MIT OR Apache-2.0", found {p["license"]!r}')
        continue
    if p.get("source") != "registry+https://github.com/rust-lang/crates.io-index":
        bad.append(f'{p["name"]} {p["version"]}: from {p.get("source")!r}, not crates.io')
    lic = p.get("license")
    if not lic:
        bad.append(f'{p["name"]} {p["version"]}: no SPDX licence (license-file {p.get("license_file")!r}): review it and list it here')
    elif not allowed(lic):
        bad.append(f'{p["name"]} {p["version"]}: {lic}')
if bad:
    print("licences not on the allowed list (scripts/licences.py):", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"licences and sources: {len(meta['packages'])} packages, all allowed, all from crates.io")
