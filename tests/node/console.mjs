// The operator console in headless Chromium (driven step by step by
// crates/postbox-cli/tests/it/console/browser.rs, which stops and starts the
// relay and fixes the broker between steps):
//
//   node console.mjs <step> <base> <schema> <token> <artifactDir>
//
// Steps:
//   lag          sign in (login.png), wait on the overview until events wait
//                and their lag shows (overview-lag.png)
//   drained      wait on the overview until nothing waits and the chart of
//                deliveries shows them (overview.png)
//   replay       open the dead-letter group whose error says "does not exist"
//                (dead-letters.png), the group (dead-letter-list.png), one
//                dead letter (dead-letter.png), replay the group through the
//                confirmation page (confirm.png, done.png), see the audit row
//                (audit.png)
//   viewer       as a viewer: the dead-letter page has no replay or purge
//                button (viewer.png)
//   hostile      markup and long text in every field: shown as text on the
//                overview and the dead-letter pages, no script run, no
//                element made of it (hostile.png); the console in another
//                page's iframe: refused
//
// Prints one JSON line; exits 1 with what it waited for on failure, after a
// <step>-failed.png. Page errors and console errors fail the step.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

const [stepName, base, schema, token, artifactDir] = process.argv.slice(2);
if (!artifactDir) {
  console.error('usage: node console.mjs <step> <base> <schema> <token> <artifactDir>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 30000;
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

fs.mkdirSync(artifactDir, { recursive: true });
const problems = [];
let step = 'launching Chromium';
let browser;
let page;

const shot = (name) => page.screenshot({ path: path.join(artifactDir, name), fullPage: true });

async function signIn() {
  step = `loading ${base}/login`;
  await page.goto(`${base}/login`);
  await page.fill('input[name="token"]', token);
  if (stepName === 'lag') await shot('login.png');
  step = 'signing in';
  await Promise.all([page.waitForURL((u) => !u.pathname.endsWith('/login')), page.click('button[type="submit"]')]);
}

/** Reload `url` until `check()` (run in the page) is true. */
async function until(url, what, check) {
  step = what;
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    await page.goto(url);
    const v = await page.evaluate(check);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await page.waitForTimeout(300);
  }
}

const figure = (name) => `(() => { const s = document.querySelector('section[data-schema="${schema}"] [data-figure="${name}"]'); return s ? s.textContent.trim() : null; })()`;

async function run() {
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS, timeout: WAIT_MS });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await ctx.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  await signIn();
  const home = page.url();
  const out = { ok: true, step: stepName };
  if (stepName === 'lag') {
    const seen = await until(home, 'events waiting with their lag on the overview', `(() => {
      const p = ${figure('pending')}, lag = ${figure('lag')};
      return Number(p) >= 20 && lag && lag !== '-' && lag !== '0s' ? { pending: Number(p), lag } : null; })()`);
    Object.assign(out, seen);
    out.relays = await page.evaluate(figure('relays'));
    await shot('overview-lag.png');
  } else if (stepName === 'drained') {
    const seen = await until(home, 'nothing waiting on the overview, and the deliveries charted', `(() => {
      const p = ${figure('pending')}, lag = ${figure('lag')};
      const chart = document.querySelector('section[data-schema="${schema}"] [data-figure="delivered"]');
      const delivered = chart ? Number(chart.dataset.total) : 0;
      return p === '0' && delivered >= 20 ? { pending: 0, lag, delivered } : null; })()`);
    Object.assign(out, seen);
    out.relays = await page.evaluate(figure('relays'));
    out.halted = await page.evaluate(figure('halted'));
    await shot('overview.png');
  } else if (stepName === 'replay') {
    step = 'the dead-letter groups';
    await page.goto(`${base}/schemas/${schema}/dead-letters`);
    const row = page.locator('tr[data-fingerprint*="does not exist"]');
    await row.waitFor();
    out.fingerprint = await row.getAttribute('data-fingerprint');
    out.group_count = Number((await row.locator('td').first().textContent()).trim());
    await shot('dead-letters.png');
    step = 'opening the group';
    await Promise.all([page.waitForURL(/dead-letters\/list/), row.getByRole('link', { name: 'Open' }).click()]);
    await page.locator('[data-figure="dead-letters"]').waitFor();
    await shot('dead-letter-list.png');
    step = 'opening one dead letter';
    await Promise.all([page.waitForURL(/dead-letters\/relay\/\d+/), page.locator('[data-figure="dead-letters"] tr td a').first().click()]);
    await page.locator('[data-figure="dead-letter"]').waitFor();
    await shot('dead-letter.png');
    step = 'replaying the group';
    await page.goto(`${base}/schemas/${schema}/dead-letters`);
    await Promise.all([page.waitForURL(/confirm/), row.locator('button[data-action="replay"]').click()]);
    const confirm = page.locator('[data-figure="confirm-count"]');
    await confirm.waitFor();
    out.confirm_count = Number(await confirm.getAttribute('data-count'));
    await shot('confirm.png');
    step = 'confirming';
    await Promise.all([page.waitForURL(/act/), page.click('button[data-action="confirm"]')]);
    const done = page.locator('[data-figure="done"]');
    await done.waitFor();
    out.replayed = Number(await done.getAttribute('data-count'));
    await shot('done.png');
    step = 'the audit page';
    await page.goto(`${base}/schemas/${schema}/audit`);
    const audit = page.locator('[data-figure="audit"] tr').nth(1);
    await audit.waitFor();
    out.audit = (await audit.locator('td').allTextContents()).map((t) => t.trim());
    await shot('audit.png');
  } else if (stepName === 'viewer') {
    step = 'the dead-letter groups as a viewer';
    await page.goto(`${base}/schemas/${schema}/dead-letters`);
    await page.locator('[data-figure="groups"]').waitFor();
    out.buttons = await page.locator('button[data-action]').count();
    await shot('viewer.png');
  } else if (stepName === 'hostile') {
    // Every field holds markup and 5,000 characters: it must show as text.
    let dialogs = 0;
    page.on('dialog', (d) => { dialogs += 1; d.dismiss().catch(() => {}); });
    const s = `${base}/schemas/${schema}`;
    const pages = [home, `${s}/dead-letters`, `${s}/dead-letters?side=consumer`, `${s}/dead-letters/list`,
      `${s}/dead-letters/list?side=consumer`, `${s}/dead-letters/relay/1`];
    out.pages = 0;
    out.shown_as_text = 0;
    out.evil_elements = 0;
    out.pwned = false;
    for (const url of pages) {
      step = `loading ${url}`;
      const res = await page.goto(url);
      if (!res || res.status() !== 200) throw new Error(`${url} answered ${res && res.status()}`);
      const seen = await page.evaluate(() => ({
        pwned: window.__pwned === 1,
        evil: document.querySelectorAll('[data-evil]').length,
        text: document.body.innerText.includes('<img src=x onerror='),
      }));
      out.pages += 1;
      out.shown_as_text += seen.text ? 1 : 0;
      out.evil_elements += seen.evil;
      out.pwned = out.pwned || seen.pwned;
    }
    out.pwned = out.pwned || dialogs > 0;
    await shot('hostile.png');
    // Framed by another page: the console refuses (X-Frame-Options, CSP
    // frame-ancestors), so the frame holds Chromium's error page.
    step = 'framing the console';
    const framer = await page.context().newPage();
    // `load` waits for the frame too, refused or not.
    await framer.setContent(`<iframe src="${home}" width="800" height="600"></iframe>`, { waitUntil: 'load' });
    const frame = framer.frames().find((f) => f !== framer.mainFrame());
    const inside = frame ? await frame.evaluate(() => document.body ? document.body.innerText : '').catch(() => '') : '';
    out.framed = Boolean(frame) && !frame.url().startsWith('chrome-error') && inside.includes('Overview');
    out.frame_url = frame ? frame.url() : null;
    await framer.close();
  } else {
    throw new Error(`unknown step ${stepName}`);
  }
  if (problems.length) throw new Error(`page problems: ${problems.join('; ')}`);
  out.chromium = browser.version();
  console.log(JSON.stringify(out));
}

let code = 0;
try {
  await run();
} catch (e) {
  code = 1;
  console.error(`console.mjs ${stepName}: failed at ${step}: ${String(e && e.message || e).split('\n')[0]}`);
  for (const p of problems) console.error(`  ${p}`);
  if (page) {
    console.error(`  at ${page.url()}`);
    await page.screenshot({ path: path.join(artifactDir, `${stepName}-failed.png`) }).catch(() => {});
  }
} finally {
  if (browser) await browser.close().catch(() => {});
}
process.exitCode = code;
