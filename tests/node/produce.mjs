// Add jobs with the real Node `bullmq` Queue.
//
// usage: node produce.mjs <redisUrl> <queue> <jsonFile>
//
// <jsonFile> holds an array of {"name":..., "data":..., "jobId":...}. Each is
// added in order, one at a time, with queue.add(name, data, { jobId }). Prints
// the JSON array of the returned job ids, then queue.getJobCounts() as a
// second JSON line. An empty array just prints [] and the counts.

import { readFile } from 'node:fs/promises';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';

const [redisUrl, queueName, jsonFile] = process.argv.slice(2);
if (!redisUrl || !queueName || !jsonFile) {
  process.stderr.write('usage: node produce.mjs <redisUrl> <queue> <jsonFile>\n');
  process.exit(2);
}

const jobs = JSON.parse(await readFile(jsonFile, 'utf8'));
if (!Array.isArray(jobs)) {
  process.stderr.write(`produce.mjs: ${jsonFile} must hold a JSON array\n`);
  process.exit(2);
}

const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue(queueName, { connection });
let code = 0;
try {
  const ids = [];
  for (const { name, data, jobId } of jobs) {
    const job = await queue.add(name, data, { jobId });
    ids.push(job.id);
  }
  process.stdout.write(JSON.stringify(ids) + '\n');
  process.stdout.write(JSON.stringify(await queue.getJobCounts()) + '\n');
} catch (e) {
  process.stderr.write(`produce.mjs: ${e?.stack ?? e}\n`);
  code = 1;
} finally {
  await queue.close();
  await connection.quit().catch(() => connection.disconnect());
}
process.exit(code);
