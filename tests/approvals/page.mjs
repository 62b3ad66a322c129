// Drives the operators' approvals page (reference-agents/src/approvals/page.html)
// in headless Chromium (Debian's /usr/bin/chromium, through playwright-core),
// by keyboard only, for the approvals end-to-end tests.
//
//   node tests/approvals/page.mjs '{"url": "http://127.0.0.1:PORT/approvals/page#id=ID",
//     "header": "x-api-key", "credential": "...", "id": "ID",
//     "action": "allow_once"|"allow_session"|"allow_always"|"allow_constrained"|"deny"|"look",
//     "reason": "...", "alternative": "...",
//     "constraints": {"path_prefix": {"arg": "prefix"}, "override": {"arg": value}},
//     "timeout_ms": 20000}'
//
// Prints one JSON line: {"ok", "status", "preview", "listed", "gone",
// "buttons", "console_errors", "http_errors"} (tests/approvals/README.md).
// Exit code 0 when it could drive the page (also when the API refused the
// decision: then "ok" is false and "status" holds the API's sentence), 2 with
// a message on stderr when the page or the approval's article never appeared.
import { chromium } from 'playwright-core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LABELS = {
  allow_once: 'Allow once',
  allow_session: 'Allow for this session',
  allow_always: 'Allow always',
  allow_constrained: 'Allow constrained\u2026',
  deny: 'Deny\u2026',
};
// After a refused decision the article is expected to stay: how long to watch
// for it to leave anyway (a 409 can mean the approval was decided elsewhere,
// and its event removes it within a poll or two).
const GONE_AFTER_REFUSAL_MS = 3000;

// A page or article that never appeared (exit 2).
class PageError extends Error {}

function fail(message) {
  process.stderr.write(`page.mjs: ${message}\n`);
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
const { url, id } = opts;
const action = opts.action ?? 'look';
const header = opts.header ?? 'x-api-key';
const credential = opts.credential ?? '';
const timeout = Number(opts.timeout_ms ?? 20000);
if (typeof url !== 'string' || id === undefined || id === null || !(action in LABELS || action === 'look')) {
  fail('needs "url" (string), "id" and "action" (allow_once, allow_session, allow_always, allow_constrained, deny or look)');
  process.exit(2);
}
const idText = String(id);

const userDataDir = await mkdtemp(join(tmpdir(), 'approvals-chromium-'));
let context;
// Whatever happens, the browser goes: a last resort if a step hangs past every timeout.
const watchdog = setTimeout(async () => {
  fail(`gave up after ${4 * timeout + 30000} ms`);
  try { await context?.close(); } catch (_) { /* exiting anyway */ }
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
  process.exit(2);
}, 4 * timeout + 30000);

try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout,
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(timeout);
  // Chromium logs each non-2xx answer as a console error ("Failed to load
  // resource: the server responded with a status of 409 (Conflict)"): those
  // are the API's expected refusals, kept apart in http_errors;
  // console_errors is the rest (script errors, CSP violations, ...).
  const consoleErrors = [];
  const httpErrors = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const text = m.text();
    (/^Failed to load resource: the server responded with a status of \d+/.test(text) ? httpErrors : consoleErrors).push(text);
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e && e.message ? e.message : e)));

  const response = await page.goto(url, { waitUntil: 'load', timeout }).catch((e) => { throw new PageError(`the page did not load: ${e.message}`); });
  if (!response || !response.ok()) throw new PageError(`the page answered ${response ? response.status() : 'nothing'} at ${url}`);

  await page.getByLabel('Header name', { exact: true }).fill(header);
  await page.getByLabel('Credential', { exact: true }).fill(credential);
  const connect = page.getByRole('button', { name: 'Connect', exact: true });
  await connect.focus();
  await page.keyboard.press('Enter');

  const status = page.getByRole('status');
  const statusText = async () => ((await status.innerText()) || '').replace(/\s*\n\s*/g, ' ').trim();
  const pendingList = page.getByRole('region', { name: 'Pending approvals', exact: true });
  const article = pendingList.getByRole('article', { name: `Approval ${idText}`, exact: true });
  try {
    await article.waitFor({ state: 'visible', timeout });
  } catch (_) {
    throw new PageError(`approval ${idText} did not appear within ${timeout} ms; status: ${JSON.stringify(await statusText().catch(() => ''))}`);
  }

  const listed = await pendingList.getByRole('article').evaluateAll((els) => els.map((a) => {
    const h = document.getElementById(a.getAttribute('aria-labelledby'));
    return (h ? h.textContent : '').replace(/^Approval /, '');
  }));
  const preview = await article.getByRole('figure', { name: 'Arguments (redacted)' }).locator('pre').textContent();
  const buttons = await article.getByRole('button').evaluateAll((els) => els.filter((b) => b.offsetParent !== null).map((b) => b.textContent.trim()));

  const result = { ok: true, status: '', preview, listed, gone: false, buttons, console_errors: consoleErrors, http_errors: httpErrors };
  if (action === 'look') {
    result.status = await statusText();
    result.gone = (await article.count()) === 0;
  } else {
    const before = await statusText();
    // Focus, then Enter: the keyboard only.
    const press = async (locator) => { await locator.focus(); await page.keyboard.press('Enter'); };
    const button = article.getByRole('button', { name: LABELS[action], exact: true });
    if ((await button.count()) === 0) {
      result.ok = false;
      result.status = before;
      result.error = `the page offers no "${LABELS[action]}" button for approval ${idText}`;
    } else {
      await press(button);
      if (action === 'allow_constrained') {
        const c = opts.constraints ?? {};
        const [limit] = Object.entries(c.path_prefix ?? {});
        const [override] = Object.entries(c.override ?? {});
        if (limit) {
          await article.getByLabel('Argument to limit', { exact: true }).fill(limit[0]);
          await article.getByLabel('Path prefix', { exact: true }).fill(String(limit[1]));
        }
        if (override) {
          await article.getByLabel('Argument to override', { exact: true }).fill(override[0]);
          await article.getByLabel('Override value', { exact: true })
            .fill(typeof override[1] === 'string' ? override[1] : JSON.stringify(override[1]));
        }
        await press(article.getByRole('button', { name: 'Allow with these limits', exact: true }));
      } else if (action === 'deny') {
        if (opts.reason !== undefined && opts.reason !== null) await article.getByLabel('Reason', { exact: true }).fill(String(opts.reason));
        if (opts.alternative !== undefined && opts.alternative !== null) await article.getByLabel('Suggested alternative', { exact: true }).fill(String(opts.alternative));
        await press(article.getByRole('button', { name: 'Confirm deny', exact: true }));
      }
      // The status region names the approval once the API answered.
      const mention = `Approval ${idText}:`;
      const deadline = Date.now() + timeout;
      let text = before;
      for (;;) {
        text = await statusText();
        if (text !== before && text.includes(mention)) break;
        if (Date.now() > deadline) break;
        await page.waitForTimeout(100);
      }
      result.status = text;
      result.ok = text.includes(`${mention} ${action} by you`);
      const goneWithin = result.ok ? timeout : Math.min(timeout, GONE_AFTER_REFUSAL_MS);
      result.gone = await article.waitFor({ state: 'detached', timeout: goneWithin }).then(() => true, () => false);
    }
  }
  process.stdout.write(JSON.stringify(result) + '\n');
} catch (e) {
  fail(e instanceof PageError ? e.message : `could not drive the page: ${e && e.stack ? e.stack : e}`);
} finally {
  clearTimeout(watchdog);
  try { await context?.close(); } catch (_) { /* already gone */ }
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
}
