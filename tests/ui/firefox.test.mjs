// The core UI test in Firefox (Debian's firefox-esr, headless, over
// WebDriver BiDi with puppeteer-core): the page loads from the real `flamewatch
// run` profiling a real workload, a drag on the samples chart selects a
// window, every profile view draws the workload's hot function, and the
// timeline page draws its tracks. Screenshots: build/test-output/ui/firefox-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BUILD, OUT, startRun, waitForSamples, launchFirefox, sleep } from './lib.mjs';

let fw, browser, page, workload, query;
const pageErrors = [];
const HOT = 'hot_70';

before(async () => {
  fw = await startRun(['--gpu-interval', '500ms'], { ...process.env, LD_LIBRARY_PATH: join(BUILD, 'fakes') });
  workload = spawn(join(BUILD, 'workloads/cpu_split'), ['30'], { stdio: 'ignore' });
  query = `{comm="cpu_split",pid="${workload.pid}"}`;
  const [b] = await Promise.all([launchFirefox(), waitForSamples(fw.url, query, 150)]);
  browser = b;
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  page.on('pageerror', (e) => pageErrors.push(String(e.stack ?? e)));
});

after(async () => {
  await browser?.close();
  workload?.kill();
  await fw?.stop();
});

async function loaded(prev = '') {
  await page.waitForFunction((p) => {
    const b = document.querySelector('.banner.error');
    return (document.body.dataset.loaded && document.body.dataset.loaded !== p) || (b && !b.hidden);
  }, { timeout: 30000 }, prev);
  const err = await page.evaluate(() => { const b = document.querySelector('.banner.error'); return b && !b.hidden ? b.textContent : null; });
  assert.equal(err, null, `the page shows an error: ${err}`);
  return page.evaluate(() => document.body.dataset.loaded);
}

test('Firefox: the page loads and shows the workload', async () => {
  await page.goto(`${fw.url}/?from=now-5m&q=${encodeURIComponent(query)}`);
  await loaded();
  assert.ok(await page.$('.samples-chart canvas'));
  const ua = await page.evaluate(() => navigator.userAgent);
  assert.match(ua, /Firefox\/\d+/);
});

test('Firefox: a drag on the samples chart selects a window', async () => {
  const box = await (await page.$('.samples-chart .u-over')).boundingBox();
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + box.width * 0.6, y);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.8, y, { steps: 5 });
  await page.mouse.move(box.x + box.width - 2, y, { steps: 5 });
  await page.mouse.up();
  await loaded(prev);
  const u = new URL(page.url());
  assert.ok(u.searchParams.get('sf') && u.searchParams.get('st'), page.url());
  assert.match(await page.$eval('.window-text', (e) => e.textContent), /Selected window/);
});

test('Firefox: every view draws the hot function', async () => {
  // Flame graph: the search sums hot_70's share of the selection.
  await page.type('.search', HOT);
  await page.waitForFunction(() => /matches/.test(document.querySelector('.search-result').textContent));
  const m = /\(([\d.]+)%\)/.exec(await page.$eval('.search-result', (e) => e.textContent));
  assert.ok(m && Number(m[1]) > 50 && Number(m[1]) < 85, `hot_70 share ${m?.[1]}`);
  await page.screenshot({ path: join(OUT, 'firefox-flamegraph.png') });
  for (const [view, check] of [
    ['chart', () => document.querySelector('.views .flamechart canvas')?.height > 100],
    ['table', () => document.querySelector('.fn-table tbody td.fn')?.textContent === 'hot_70'],
    ['sandwich', () => /^hot_70: total/.test(document.querySelector('.sandwich-info')?.textContent ?? '')],
  ]) {
    // The sandwich opens from the table's row of the function.
    await page.click(view === 'sandwich' ? '.fn-table tbody tr' : `.tabs button[data-view="${view}"]`);
    await page.waitForFunction(check, { timeout: 30000 });
    await page.screenshot({ path: join(OUT, `firefox-${view}.png`) });
  }
});

test('Firefox: the timeline page draws its tracks', async () => {
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  await page.click('.pages button[data-page="timeline"]');
  await loaded(prev);
  await page.waitForFunction(() => window.__flamewatch.gpuCharts.shown.length === 6 && window.__flamewatch.tchart.data, { timeout: 30000 });
  assert.ok((await (await page.$('.cpu-strips canvas')).boundingBox()).height > 20);
  await sleep(200);
  await page.screenshot({ path: join(OUT, 'firefox-timeline.png'), fullPage: false });
});

test('Firefox: no page errors', () => {
  assert.deepEqual(pageErrors, []);
});
