// The page's empty and error states against the real server: no data yet,
// a token that is needed (401, kept in localStorage), a trimmed profile, and
// a server that went away.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { OUT, startRun, startServer, launch } from './lib.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('no data yet, then the server goes away', async () => {
  const fw = await startRun(['--node', 'ui-test-empty']);
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  try {
    // A selector no process matches: nothing to show, said plainly.
    await page.goto(`${fw.url}/?from=now-5m&q=${encodeURIComponent('{comm="no-such-process"}')}`);
    await page.locator('.banner.empty').waitFor();
    assert.match(await page.locator('.banner.empty').textContent(), /No samples/);
    await page.screenshot({ path: join(OUT, 'state-empty.png') });
    await fw.stop();
    await page.locator('.refresh').click();
    await page.locator('.banner.error', { hasText: 'cannot be reached' }).waitFor();
    await page.screenshot({ path: join(OUT, 'state-unreachable.png') });
  } finally {
    await page.close();
    await fw.stop();
  }
});

test('401 asks for a token, keeps it and sends it', async () => {
  const fw = await startRun(['--token', 'sekrit-ui-token']);
  const ctx = await browser.newContext({ viewport: { width: 1200, height: 700 } });
  const page = await ctx.newPage();
  try {
    await page.goto(`${fw.url}/?from=now-5m`);
    await page.locator('.token-dialog[open]').waitFor();
    await page.screenshot({ path: join(OUT, 'state-token.png') });
    await page.locator('.token-input').fill('sekrit-ui-token');
    await page.locator('.token-dialog button[value="ok"]').click();
    await page.waitForFunction(() => document.body.dataset.loaded);
    assert.equal(await page.evaluate(() => localStorage.getItem('flamewatch.token')), 'sekrit-ui-token');
    // A reload uses the kept token without asking.
    await page.reload();
    await page.waitForFunction(() => document.body.dataset.loaded);
    assert.equal(await page.locator('.token-dialog[open]').count(), 0);
  } finally {
    await ctx.close();
    await fw.stop();
  }
});

test('a trimmed profile says what was trimmed', async () => {
  const fw = await startRun();
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  try {
    // Samples of this host's own processes; max_nodes=3 cuts almost all.
    for (let i = 0; i < 100; i++) {
      const j = await (await fetch(`${fw.url}/api/v1/profile?from=now-5m`)).json();
      if (j.total > 5 && j.nodes.n.length > 4) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    await page.goto(`${fw.url}/?from=now-5m&mn=3`);
    await page.locator('.notice', { hasText: 'Trimmed' }).waitFor();
    assert.match(await page.locator('.notice').textContent(), /Trimmed: [\d,]+ small nodes .* keep 3 nodes/);
    await page.screenshot({ path: join(OUT, 'state-trimmed.png') });
  } finally {
    await page.close();
    await fw.stop();
  }
});

test('a first visit loads in under 1 s from flamewatch server', async () => {
  const fw = await startServer();
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  try {
    await page.goto(`${fw.url}/?from=now-5m`);
    await page.waitForFunction(() => document.body.dataset.loaded);
    const t = await page.evaluate(() => {
      const n = performance.getEntriesByType('navigation')[0];
      return { response: Math.round(n.responseEnd), domContentLoaded: Math.round(n.domContentLoadedEventEnd),
        load: Math.round(n.loadEventEnd), firstDataMs: Number(document.body.dataset.loadMs) };
    });
    console.log(`first visit from flamewatch server: ${JSON.stringify(t)} ms`);
    // The target; FW_UI_LOAD_MS moves it for a machine known to be slow.
    const limit = Number(process.env.FW_UI_LOAD_MS ?? 1000);
    assert.ok(t.load < limit, `load event after ${t.load} ms (limit ${limit} ms)`);
  } finally {
    await page.close();
    await fw.stop();
  }
});
