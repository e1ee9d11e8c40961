// Puts the repository's license files beside package.json for `npm pack`.
// Outside the repository (an unpacked npm tarball, a copied directory) the
// files shipped with the package are kept; without them packing stops, since
// the package must carry its licenses.
import { copyFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
for (const name of ["LICENSE-MIT", "LICENSE-APACHE"]) {
  const repo = join(here, "../..", name);
  if (existsSync(repo)) {
    copyFileSync(repo, join(here, name));
  } else if (!existsSync(join(here, name))) {
    console.error(`${name} not found: put the postbox license files (LICENSE-MIT, LICENSE-APACHE) beside package.json, or pack from the postbox repository`);
    process.exit(1);
  }
}
