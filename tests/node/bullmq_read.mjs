// Reads a BullMQ queue with the real Node `bullmq` Queue, processing nothing:
// prints one JSON object {counts, jobs}, where counts is queue.getJobCounts()
// and jobs every waiting job, oldest first ({id, name, data, opts}) — what
// the relay added, as a Node service would see it.
//
// usage: node bullmq_read.mjs <redisUrl> <queue>

import { Queue } from 'bullmq';
import { Redis } from 'ioredis';

const [redisUrl, queueName] = process.argv.slice(2);
if (!redisUrl || !queueName) {
  process.stderr.write('usage: node bullmq_read.mjs <redisUrl> <queue>\n');
  process.exit(2);
}

const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue(queueName, { connection });
let code = 0;
try {
  const counts = await queue.getJobCounts();
  const jobs = (await queue.getJobs(['waiting'], 0, -1, true)).map((job) => ({
    id: job.id,
    name: job.name,
    data: job.data,
    opts: job.opts,
  }));
  // Written out before process.exit, which would cut a pipe's pending output.
  await new Promise((resolve) => process.stdout.write(JSON.stringify({ counts, jobs }) + '\n', resolve));
} catch (e) {
  process.stderr.write(`bullmq_read.mjs: ${e?.stack ?? e}\n`);
  code = 1;
} finally {
  await queue.close();
  await connection.quit().catch(() => connection.disconnect());
}
process.exit(code);
