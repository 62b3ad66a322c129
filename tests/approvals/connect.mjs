// Drives a user through the tool agent's upstream-credential connect flow in
// headless Chromium (Debian's /usr/bin/chromium, through playwright-core, a
// fresh temporary profile per run, as page.mjs), for the upstreamCredential
// end-to-end tests. Two modes.
//
// Connect mode:
//   node tests/approvals/connect.mjs '{"url": "<the gateway's connect link>",
//     "login": "alice", "upstream_login": "alice", "password": "any",
//     "timeout_ms": 30000}'
// Opens `url` and follows whatever comes:
//   - an oidc-provider devInteractions login page (a form with
//     input[name=login]): fills the login name (and the password field, with
//     "password" or "x": devInteractions ignores it) and submits. The login
//     page of the first provider origin met gets "login", the login page of
//     any other origin (the upstream's authorization server) "upstream_login"
//     (default: "login");
//   - a consent page (a form with input[name=prompt][value=consent]): presses
//     its submit button;
//   - a page served by the gateway again (same origin as `url`, path not one
//     of oidc-provider's: /auth, /interaction/..., /token, /session/...,
//     /jwks, /.well-known/...): the end, once navigation settled (no new
//     main-frame navigation for 500 ms and the document loaded). So the very
//     first page can be the end, when the gateway answers the link itself
//     (an error page, say) instead of redirecting.
// Requests to any host other than 127.0.0.1, localhost and [::1] are aborted
// (oidc-provider's pages import a web font from fonts.googleapis.com).
//
// Prints one JSON line: {"status": HTTP status of the last main-frame
// document (redirects skipped), "url", "title", "text": document.body.innerText,
// With "api_key": "<key>", the gateway's API key form (input name=api_key)
// is filled and submitted, once, and the page after it is the end.
// "steps": [{url, kind: "login"|"consent"|"key"|"gateway"|"other"}] (each settled
// page, in order), "hops": [{url, status, method}] (every main-frame
// document response, redirects included: e.g. the gateway's redirect to the
// authorization server with its redirect_uri, and the callbacks)}.
// Exit 0 when it could drive the pages to the gateway (whatever the gateway
// answered). Exit 2 with a message on stderr when stuck (a page that is
// neither a login, a consent nor the gateway's, e.g. an authorization
// server's error page, or no progress within timeout_ms); then the same JSON
// line, with an "error" key, is still printed when a page was reached.
//
// Manage mode:
//   node tests/approvals/connect.mjs '{"manage": "<gateway>/connections/page",
//     "credential": "<bearer token>", "revoke": "upstream-name",
//     "timeout_ms": 30000}'
// For the connections page: types the credential into input#credential,
// presses button#load, waits for the row li[data-upstream="<revoke>"], reads
// the listed upstreams (the data-upstream of every li[data-upstream]), presses
// button[data-revoke="<revoke>"], waits until the role=status element #status
// contains "Revoked" and the row is gone. Prints one JSON line:
// {"listed": [...], "status_text": "...", "gone": true|false}. Without
// "revoke" it only lists (waits for a first row or for #status to say
// something). Exit 0 when it could drive the page (also when revoking did
// not say "Revoked": then status_text says what the page said and gone tells
// whether the row left), 2 when the page did not load or the row never
// appeared (the JSON line is still printed, with "error").
import { chromium } from 'playwright-core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const QUIET_MS = 500;
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);
// oidc-provider's routes (its defaults, devInteractions included).
const PROVIDER_PATH = /^\/(auth|interaction|token|session|jwks|me|reg|request|device|backchannel|challenge|\.well-known)(\/|$)/;

class Stuck extends Error {}

function fail(message) {
  process.stderr.write(`connect.mjs: ${message}\n`);
  process.exitCode = 2;
}

let opts;
try {
  opts = JSON.parse(process.argv[2] ?? '');
  if (!opts || typeof opts !== 'object') throw new Error('not an object');
} catch (e) {
  fail(`argv[2] must be one JSON object (${e.message})`);
  process.exit(2);
}
const manage = typeof opts.manage === 'string';
if (!manage && typeof opts.url !== 'string') {
  fail('needs "url" (the connect link) or "manage" (the connections page)');
  process.exit(2);
}
const timeout = Number(opts.timeout_ms ?? 30000);

const userDataDir = await mkdtemp(join(tmpdir(), 'connect-chromium-'));
let context;
const watchdog = setTimeout(async () => {
  fail(`gave up after ${2 * timeout + 30000} ms`);
  try { await context?.close(); } catch (_) { /* exiting anyway */ }
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
  process.exit(2);
}, 2 * timeout + 30000);

const clean = (s) => (s || '').replace(/\s*\n\s*/g, ' ').trim();

async function connect(page) {
  const start = new URL(opts.url);
  const login = String(opts.login ?? 'alice');
  const upstreamLogin = String(opts.upstream_login ?? login);
  const password = String(opts.password ?? 'x');
  const deadline = Date.now() + timeout;
  const hops = [];
  const steps = [];
  const providerOrigins = [];
  let lastStatus = null;
  let navigations = 0;
  let lastNavigation = Date.now();

  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) { navigations += 1; lastNavigation = Date.now(); }
  });
  page.on('response', (r) => {
    const req = r.request();
    if (!req.isNavigationRequest() || r.frame() !== page.mainFrame()) return;
    hops.push({ url: r.url(), status: r.status(), method: req.method() });
    if (r.status() < 300 || r.status() >= 400) lastStatus = r.status();
  });

  const remaining = () => Math.max(0, deadline - Date.now());
  // Until the main frame stopped navigating for QUIET_MS and its document loaded.
  async function settle() {
    for (;;) {
      if (Date.now() > deadline) throw new Stuck(`no settled page within ${timeout} ms (at ${page.url()})`);
      await page.waitForLoadState('load', { timeout: remaining() }).catch(() => {});
      const quietFor = Date.now() - lastNavigation;
      if (quietFor >= QUIET_MS) {
        const state = await page.evaluate(() => document.readyState).catch(() => 'navigating');
        if (state === 'complete' && Date.now() - lastNavigation >= QUIET_MS) return;
      }
      await page.waitForTimeout(Math.min(QUIET_MS, Math.max(50, QUIET_MS - quietFor)));
    }
  }
  // Clicks and waits for the main frame to navigate.
  async function submit(button) {
    const before = navigations;
    await button.click({ timeout: remaining() });
    while (navigations === before) {
      if (Date.now() > deadline) throw new Stuck(`pressing submit at ${page.url()} led nowhere`);
      await page.waitForTimeout(50);
    }
  }
  const report = async (extra = {}) => ({
    status: lastStatus,
    url: page.url(),
    title: await page.title().catch(() => ''),
    text: await page.evaluate(() => (document.body ? document.body.innerText : '')).catch(() => ''),
    steps,
    hops,
    ...extra,
  });

  try {
    await page.goto(start.href, { waitUntil: 'load', timeout }).catch((e) => {
      throw new Stuck(`the connect link did not load: ${e.message}`);
    });
    for (;;) {
      await settle();
      const here = new URL(page.url());
      if (here.origin === start.origin && !PROVIDER_PATH.test(here.pathname)) {
        // The gateway's API key form (source api_key): filled with
        // `api_key` when given, then on to the page it answers.
        const keyForm = page.locator('form:has(input[name="api_key"])');
        if (opts.api_key !== undefined && (await keyForm.count())) {
          steps.push({ url: here.href, kind: 'key' });
          await keyForm.locator('input[name="api_key"]').fill(String(opts.api_key));
          await submit(keyForm.locator('button[type="submit"], input[type="submit"]').first());
          opts.api_key = undefined;
          continue;
        }
        steps.push({ url: here.href, kind: 'gateway' });
        return await report();
      }
      const loginForm = page.locator('form:has(input[name="login"])');
      const consentForm = page.locator('form:has(input[name="prompt"][value="consent"])');
      if (await loginForm.count()) {
        if (!providerOrigins.includes(here.origin)) providerOrigins.push(here.origin);
        steps.push({ url: here.href, kind: 'login' });
        await loginForm.locator('input[name="login"]').fill(providerOrigins[0] === here.origin ? login : upstreamLogin);
        const pw = loginForm.locator('input[name="password"]');
        if (await pw.count()) await pw.fill(password);
        await submit(loginForm.locator('button[type="submit"], input[type="submit"]').first());
      } else if (await consentForm.count()) {
        if (!providerOrigins.includes(here.origin)) providerOrigins.push(here.origin);
        steps.push({ url: here.href, kind: 'consent' });
        await submit(consentForm.locator('button[type="submit"], input[type="submit"]').first());
      } else {
        steps.push({ url: here.href, kind: 'other' });
        const text = clean(await page.evaluate(() => (document.body ? document.body.innerText : '')).catch(() => ''));
        throw new Stuck(`stuck at ${here.href} (HTTP ${lastStatus}): neither a login, a consent nor the gateway's page: ${text.slice(0, 500)}`);
      }
    }
  } catch (e) {
    if (!(e instanceof Stuck)) throw e;
    fail(e.message);
    return report({ error: e.message });
  }
}

async function manageMode(page) {
  const name = opts.revoke === undefined || opts.revoke === null ? null : String(opts.revoke);
  const result = { listed: [], status_text: '', gone: false };
  const status = page.locator('#status');
  const statusText = async () => clean(await status.innerText({ timeout: 1000 }).catch(() => ''));
  const listed = () => page.locator('li[data-upstream]').evaluateAll((els) => els.map((li) => li.getAttribute('data-upstream')));
  const response = await page.goto(opts.manage, { waitUntil: 'load', timeout }).catch((e) => { throw new Stuck(`the page did not load: ${e.message}`); });
  if (!response || !response.ok()) throw new Stuck(`the page answered ${response ? response.status() : 'nothing'} at ${opts.manage}`);
  await page.locator('#credential').fill(String(opts.credential ?? ''));
  const before = await statusText();
  await page.locator('#load').click();
  if (name !== null) {
    const row = page.locator(`li[data-upstream="${CSS.escape(name)}"]`);
    try {
      await row.waitFor({ state: 'attached', timeout });
    } catch (_) {
      result.listed = await listed();
      result.status_text = await statusText();
      result.error = `no row for ${name} within ${timeout} ms`;
      fail(`${result.error}; listed ${JSON.stringify(result.listed)}; status ${JSON.stringify(result.status_text)}`);
      return result;
    }
    result.listed = await listed();
    await page.locator(`button[data-revoke="${CSS.escape(name)}"]`).click();
    const deadline = Date.now() + timeout;
    for (;;) {
      result.status_text = await statusText();
      result.gone = (await row.count()) === 0;
      if ((result.status_text.includes('Revoked') && result.gone) || Date.now() > deadline) break;
      await page.waitForTimeout(100);
    }
  } else {
    // Only list: a first row, or #status saying something new.
    const deadline = Date.now() + timeout;
    while (Date.now() < deadline) {
      if ((await page.locator('li[data-upstream]').count()) || ((await statusText()) && (await statusText()) !== before)) break;
      await page.waitForTimeout(100);
    }
    await page.waitForTimeout(200);
    result.listed = await listed();
    result.status_text = await statusText();
  }
  return result;
}

// CSS.escape for Node (attribute values in selectors).
const CSS = { escape: (s) => s.replace(/["\\]/g, '\\$&') };

try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout,
  });
  await context.route('**/*', (route) => {
    let host = '';
    try { host = new URL(route.request().url()).hostname; } catch (_) { /* data: and the like */ }
    if (host === '' || LOOPBACK.has(host)) return route.continue();
    return route.abort('blockedbyclient');
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(timeout);
  const result = manage ? await manageMode(page) : await connect(page);
  process.stdout.write(JSON.stringify(result) + '\n');
} catch (e) {
  fail(e instanceof Stuck ? e.message : `could not drive the page: ${e && e.stack ? e.stack : e}`);
} finally {
  clearTimeout(watchdog);
  try { await context?.close(); } catch (_) { /* already gone */ }
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
}
