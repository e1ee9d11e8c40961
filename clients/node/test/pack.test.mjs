// `npm pack` outside the repository: the license step keeps the files the
// package shipped with, and says what is missing instead of a failed `cp`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

test("the license step works outside the repository", () => {
  const root = mkdtempSync(join(tmpdir(), "postbox-pack-"));
  try {
    const pkg = join(root, "a", "b", "pkg");
    mkdirSync(join(pkg, "scripts"), { recursive: true });
    copyFileSync(new URL("../scripts/licenses.mjs", import.meta.url), join(pkg, "scripts", "licenses.mjs"));
    const run = () => spawnSync("node", [join(pkg, "scripts", "licenses.mjs")], { encoding: "utf8" });
    const missing = run();
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /LICENSE-MIT not found: put the postbox license files/);
    for (const name of ["LICENSE-MIT", "LICENSE-APACHE"]) writeFileSync(join(pkg, name), "license text");
    assert.equal(run().status, 0, "the shipped files are kept");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  // In the repository they are copied from its root.
  execFileSync("node", [new URL("../scripts/licenses.mjs", import.meta.url).pathname]);
});
