// Reads a whole Redis stream with ioredis (XRANGE - +, in pages) and prints
// one JSON array of entries: [{entryId, fields: {name: value}}] — what the
// relay appended, as a Node service would see it.
// Usage: node stream_read.mjs <redis-url> <stream>
import Redis from "ioredis";

const [url, stream] = process.argv.slice(2);
const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
await redis.connect();
const entries = [];
let start = "-";
for (;;) {
  const page = await redis.xrange(stream, start, "+", "COUNT", 500);
  for (const [entryId, flat] of page) {
    const fields = {};
    for (let i = 0; i < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
    entries.push({ entryId, fields });
  }
  if (page.length < 500) break;
  start = "(" + page[page.length - 1][0];
}
console.log(JSON.stringify(entries));
await redis.quit();
