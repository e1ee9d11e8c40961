// Both chat pages in headless Chromium (driven by
// examples/chat/tests/it/browser.rs): a message typed on the consumers page
// shows on the workers page, the reply typed there shows on the consumers
// page, and both senders see their message turn "delivered".
//
//   node browser.mjs <consumersBase> <workersBase> <artifactDir>
//
// Uses playwright-core (no bundled browser) with Debian's /usr/bin/chromium;
// `playwright.launch` starts it with a fresh temporary profile (user data dir)
// of its own each run. Saves consumers.png and workers.png into <artifactDir>
// (and *-failed.png on a failure), prints one JSON summary line, exits 0; on
// any failure prints what it was waiting for to stderr and exits 1.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

const [consumersBase, workersBase, artifactDir] = process.argv.slice(2);
if (!consumersBase || !workersBase || !artifactDir) {
  console.error('usage: node browser.mjs <consumersBase> <workersBase> <artifactDir>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 20000; // every single wait
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

fs.mkdirSync(artifactDir, { recursive: true });
const t0 = Date.now();
const since = () => Date.now() - t0;
const problems = []; // page errors and console errors, shown on failure
let step = 'launching Chromium';
let browser;
const pages = {};

async function run() {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: run ./scripts/test.sh, which installs Debian's chromium`);
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS, timeout: WAIT_MS });
  for (const [name, base] of [['consumers', consumersBase], ['workers', workersBase]]) {
    const ctx = await browser.newContext({ viewport: { width: 1000, height: 640 } });
    const page = await ctx.newPage();
    page.setDefaultTimeout(WAIT_MS);
    page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`${name}: console: ${m.text()}`); });
    pages[name] = page;
    step = `loading the ${name} page ${base}/#chat-1`;
    await page.goto(`${base}/#chat-1`, { timeout: WAIT_MS });
  }
  for (const name of Object.keys(pages)) {
    step = `the ${name} page to be ready (body[data-ready="1"])`;
    await pages[name].waitForSelector('body[data-ready="1"]', { timeout: WAIT_MS });
  }
  const timings = { ready_ms: since() };
  const tag = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const hello = `hello from the consumers page ${tag}`;
  const reply = `reply from the workers page ${tag}`;

  await type(pages.consumers, 'consumers', hello);
  step = `"${hello}" to show on the workers page`;
  await theirs(pages.workers, hello).waitFor({ timeout: WAIT_MS });
  timings.hello_shown_ms = since();

  await type(pages.workers, 'workers', reply);
  step = `"${reply}" to show on the consumers page`;
  await theirs(pages.consumers, reply).waitFor({ timeout: WAIT_MS });
  timings.reply_shown_ms = since();

  step = `the consumers page to show its "${hello}" as delivered`;
  await mine(pages.consumers, hello, 'delivered').waitFor({ timeout: WAIT_MS });
  step = `the workers page to show its "${reply}" as delivered`;
  await mine(pages.workers, reply, 'delivered').waitFor({ timeout: WAIT_MS });
  timings.delivered_ms = since();

  for (const name of Object.keys(pages)) {
    step = `the ${name} screenshot`;
    await pages[name].screenshot({ path: path.join(artifactDir, `${name}.png`), timeout: WAIT_MS });
  }
  const live = {};
  for (const [name, page] of Object.entries(pages)) live[name] = await page.textContent('#live-status');
  console.log(JSON.stringify({
    ok: true, chromium: browser.version(), hello, reply, live, timings,
    screenshots: Object.keys(pages).map((n) => path.join(artifactDir, `${n}.png`)), problems,
  }));
}

function type(page, name, text) {
  step = `typing and sending on the ${name} page`;
  return page.fill('#composer-input', text).then(() => page.click('#send-button'));
}
function theirs(page, text) {
  return page.locator('#messages .message[data-mine="false"] .body').filter({ hasText: text });
}
function mine(page, text, state) {
  return page.locator(`#messages .message[data-mine="true"][data-state="${state}"] .body`).filter({ hasText: text });
}

let code = 0;
try {
  await run();
} catch (e) {
  code = 1;
  const timedOut = e && e.name === 'TimeoutError';
  console.error(`browser.mjs: ${timedOut ? `timed out (${WAIT_MS / 1000} s) waiting for` : 'failed at'} ${step}`);
  console.error(`  ${String(e && e.message || e).split('\n')[0]}`);
  for (const p of problems) console.error(`  ${p}`);
  // What each page shows of its readiness (info, open chat, socket, history),
  // so a timeout says which step never finished.
  for (const [name, page] of Object.entries(pages)) {
    const seen = await page.evaluate(() => ({
      ready: document.body.dataset.ready || '0',
      service: document.getElementById('service-name')?.textContent || '',
      chat: document.getElementById('room')?.dataset.chatId || '',
      live: document.getElementById('live-status')?.textContent || '',
      banner: document.getElementById('banner')?.textContent || '',
      messages: document.querySelectorAll('#messages .message').length,
    })).catch((err) => ({ unreadable: String(err && err.message || err).split('\n')[0] }));
    console.error(`  ${name} page at ${page.url()}: ${JSON.stringify(seen)}`);
  }
  for (const [name, page] of Object.entries(pages)) {
    await page.screenshot({ path: path.join(artifactDir, `${name}-failed.png`), timeout: 5000 }).catch(() => {});
  }
} finally {
  if (browser) await browser.close().catch(() => {});
}
process.exitCode = code;
