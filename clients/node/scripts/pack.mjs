// `npm run pack:check`: what `npm pack` would publish has the types and code
// of both module formats for every entry, the README and the licences.
import { execFileSync } from "node:child_process";

const [pack] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
const files = new Set(pack.files.map((f) => f.path));
const want = ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "package.json", "dist/cjs/package.json"];
for (const entry of ["index", "bullmq", "kafkajs", "amqplib", "redis-streams", "webhooks", "nats", "sqs"]) {
  for (const format of ["esm", "cjs"]) want.push(`dist/${format}/${entry}.js`, `dist/${format}/${entry}.d.ts`);
}
const missing = want.filter((f) => !files.has(f));
if (missing.length > 0) {
  console.error(`npm pack would leave out: ${missing.join(", ")}`);
  process.exit(1);
}
console.log(`${pack.name}@${pack.version}: ${pack.entryCount} files, ${pack.size} bytes packed`);
