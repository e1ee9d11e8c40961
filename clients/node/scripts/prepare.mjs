// `prepare`: build dist/ when the package is installed from a checkout
// (`npm install --install-links <checkout>/clients/node`) or packed. npm does
// not install a folder dependency's devDependencies, so the build tools
// (typescript) are installed here first, from the lockfile, when missing.
import { existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

function run(args) {
  const r = spawnSync(npm, args, { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  if (r.status !== 0) {
    console.error(`@postbox-rs/postbox: \`npm ${args.join(" ")}\` in ${root} failed (exit ${r.status ?? r.signal})`);
    process.exit(1);
  }
}

if (!existsSync(join(root, "node_modules", "typescript"))) {
  run(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]);
}
run(["run", "--silent", "build"]);
