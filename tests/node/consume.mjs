// Consume jobs with the real Node `bullmq` Worker and print what it saw.
//
// usage: node consume.mjs <redisUrl> <queue> <count> [timeoutMs]
//
// Runs a Worker (concurrency 1) on <queue> and prints one JSON line per
// processed job to stdout: {"id":..., "name":..., "data":...}. Exits 0 once
// <count> jobs were processed, 1 (with a message on stderr) if that does not
// happen within timeoutMs (default 30000). The worker is closed before exit.

import { Worker } from 'bullmq';
import { Redis } from 'ioredis';

function usage(msg) {
  if (msg) process.stderr.write(`consume.mjs: ${msg}\n`);
  process.stderr.write('usage: node consume.mjs <redisUrl> <queue> <count> [timeoutMs]\n');
  process.exit(2);
}

const [redisUrl, queueName, countArg, timeoutArg] = process.argv.slice(2);
if (!redisUrl || !queueName || countArg === undefined) usage();
const count = Number(countArg);
const timeoutMs = timeoutArg === undefined ? 30000 : Number(timeoutArg);
if (!Number.isInteger(count) || count < 0) usage(`bad count ${JSON.stringify(countArg)}`);
if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) usage(`bad timeoutMs ${JSON.stringify(timeoutArg)}`);

// In native ESM bullmq cannot load ioredis from connection options itself, so
// it gets a client built from the URL.
const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });

let seen = 0;
let closing = null;
let resolveDone;
const done = new Promise((resolve) => {
  resolveDone = resolve;
});

async function shutdown(force) {
  // Idempotent: the first caller decides whether active jobs are awaited.
  if (!closing) {
    closing = (async () => {
      await worker.close(force);
      await connection.quit().catch(() => connection.disconnect());
    })();
  }
  return closing;
}

const worker = new Worker(
  queueName,
  async (job) => {
    if (seen >= count) {
      // Only reachable if a job was fetched while closing; leave it to others.
      throw new Error('consume.mjs: already consumed the requested number of jobs');
    }
    seen += 1;
    process.stdout.write(JSON.stringify({ id: job.id, name: job.name, data: job.data }) + '\n');
    if (seen === count) {
      // Not awaited here: close() waits for this very job to complete. Closing
      // before the processor returns keeps the worker from fetching a next job.
      shutdown(false).then(() => resolveDone(0), (e) => {
        process.stderr.write(`consume.mjs: closing the worker failed: ${e?.stack ?? e}\n`);
        resolveDone(1);
      });
    }
    return { consumedBy: 'consume.mjs' };
  },
  { connection, concurrency: 1, autorun: count > 0 },
);

worker.on('error', (e) => process.stderr.write(`consume.mjs: worker error: ${e?.stack ?? e}\n`));
worker.on('failed', (job, e) => process.stderr.write(`consume.mjs: job ${job?.id} failed: ${e?.message ?? e}\n`));

if (count === 0) {
  shutdown(false).then(() => resolveDone(0));
}

const timer = setTimeout(() => {
  process.stderr.write(
    `consume.mjs: timed out after ${timeoutMs} ms with ${seen} of ${count} jobs consumed from queue ${JSON.stringify(queueName)}\n`,
  );
  shutdown(true).finally(() => resolveDone(1));
}, timeoutMs);

const code = await done;
clearTimeout(timer);
process.exit(code);
