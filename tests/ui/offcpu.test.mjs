// Off-CPU time in the UI (issue 30), against the real `flamewatch run
// --off-cpu` (real BPF) and `cuda_chain blockgap`: a training loop whose
// GPU idles while its loader sleeps in read() under load_batch_blocked
// (tests/workloads/cuda/cuda_chain.c), which prints how long it was blocked.
//
// - the profile type selector offers "Off-CPU time", keeps it in the URL as
//   type=offcpu, reloads to it, and shows the blocked time as durations;
// - "why is the GPU idle?" shows, below the CPU graph, the off-CPU graph of
//   the idle time, naming load_batch_blocked, with its share of the idle
//   time in its summary.
//
// Screenshots go to build/test-output/ui/ (offcpu-*.png).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, OUT, startRun, launch, sleep } from './lib.mjs';

const ROUNDS = 4, MS = 300;
let fw, browser, page, work, loop, blocked, pid;
const pageErrors = [];

async function waitFor(fn, what, ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

before(async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'fw-ui-offcpu-'));
  const go = join(tmp, 'go');
  let out = '';
  work = spawn(join(BUILD, 'workloads/cuda/cuda_chain'), ['blockgap', String(ROUNDS), String(MS)],
    { env: { ...process.env, CUDA_CHAIN_GO: go }, stdio: ['ignore', 'pipe', 'inherit'] });
  work.stdout.on('data', (d) => { out += d; });
  pid = work.pid;
  fw = await startRun(['--gpu-interval', 'off', '--off-cpu']);
  await waitFor(() => readFileSync(fw.log, 'utf8').includes('GPU time profiling: attached to'), 'the agent to attach');
  await sleep(1000);
  writeFileSync(go, '');
  await waitFor(() => work.exitCode !== null, 'cuda_chain');
  const m = /blockgap (\d+) (\d+) (\d+)/.exec(out);
  assert.ok(m, out);
  loop = [Number(m[1]) / 1e9, Number(m[2]) / 1e9];
  blocked = Number(m[3]);
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await waitFor(async () => {
    const r = await fetch(`${fw.url}/api/v1/gpu/idle?pid=${pid}&from=${loop[0]}&to=${loop[1]}&query=${q}`);
    const j = r.ok ? await r.json() : null;
    return j?.offcpu && j.offcpu.idle_ns > 0.9 * blocked;
  }, 'the off-CPU blocks', 30000);
  await sleep(1500);
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1300 } });
  page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e.stack ?? e)));
});

after(async () => {
  await browser?.close();
  if (work && work.exitCode === null) work.kill();
  await fw?.stop();
});

/* Waits for the next completed load; fails with the page's error banner. */
async function loaded(prev) {
  await page.waitForFunction((p) => {
    const b = document.querySelector('.banner.error');
    return (document.body.dataset.loaded && document.body.dataset.loaded !== p) || (b && !b.hidden);
  }, prev ?? '');
  const err = await page.evaluate(() => { const b = document.querySelector('.banner.error'); return b && !b.hidden ? b.textContent : null; });
  assert.equal(err, null, `the page shows an error: ${err}`);
  return page.evaluate(() => document.body.dataset.loaded);
}

async function act(fn) {
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  await fn();
  return loaded(prev);
}

const param = (k) => new URL(page.url()).searchParams.get(k);

test('the type selector offers off-CPU time and keeps it in the URL', async () => {
  const from = (loop[0] - 0.2).toFixed(3), to = (loop[1] + 0.2).toFixed(3);
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await page.goto(`${fw.url}/?from=${from}&to=${to}&q=${q}`);
  await loaded();
  const options = await page.locator('.ptype option').evaluateAll((os) => os.map((o) => [o.value, o.textContent]));
  assert.deepEqual(options.find(([v]) => v === 'offcpu'), ['offcpu', 'Off-CPU time'], JSON.stringify(options));
  await act(() => page.locator('.ptype').selectOption('offcpu'));
  assert.equal(param('type'), 'offcpu');
  // Nanoseconds blocked, most of them in load_batch_blocked (the window
  // holds a little of the sleeps around the loop too).
  const t = await page.evaluate(() => {
    const fg = window.__flamewatch.flame, t = fg.current, i = fg.find('load_batch_blocked');
    return { unit: t.unit, total: t.total[0], under: i >= 0 ? t.total[i] : 0 };
  });
  assert.equal(t.unit, 'nanoseconds');
  assert.ok(Math.abs(t.under - blocked) < 0.15 * blocked, `load_batch_blocked ${t.under} ns, truth ${blocked} ns`);
  assert.equal(await page.evaluate(() => window.__flamewatch.samples.type), 'offcpu');
  // Shown as durations: the tooltip of the blocking function says ms or s.
  const r = await page.evaluate(() => { const fg = window.__flamewatch.flame, b = fg.rect(fg.find('load_batch_blocked')), c = fg.canvas.getBoundingClientRect(); return { x: c.x + b.x + 4, y: c.y + b.y + 4 }; });
  await page.mouse.move(r.x, r.y);
  await page.waitForFunction(() => window.__flamewatch.flame.tip.textContent.includes('total'));
  const tip = await page.evaluate(() => window.__flamewatch.flame.tip.textContent);
  assert.match(tip, /total: [\d.]+ (ms|s) \(/, tip);
  assert.doesNotMatch(tip, /samples/, tip);
  await page.screenshot({ path: join(OUT, 'offcpu-flamegraph.png'), fullPage: true });
  // A reload keeps the type; back to the CPU drops it from the URL.
  await page.reload();
  await loaded();
  assert.equal(await page.locator('.ptype').inputValue(), 'offcpu');
  assert.equal(await page.evaluate(() => window.__flamewatch.state().type), 'offcpu');
  await act(() => page.locator('.ptype').selectOption('cpu'));
  assert.equal(param('type'), null);
  assert.equal(await page.evaluate(() => window.__flamewatch.flame.current.unit), 'samples');
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});

test('why is the GPU idle: the off-CPU graph names the blocked loader', async () => {
  const from = loop[0].toFixed(3), to = loop[1].toFixed(3);
  await page.goto(`${fw.url}/?page=timeline&from=${from}&to=${to}&gpu=${pid}`);
  await loaded();
  await page.locator('.idle-panel').waitFor({ state: 'visible' });
  assert.ok(await page.locator('.idle-offcpu').isVisible(), 'the off-CPU part of the panel is shown');
  const summary = await page.locator('.idle-summary').textContent();
  const m = /off-CPU time explains ([\d.]+) %/.exec(summary);
  assert.ok(m && Number(m[1]) > 85, summary);
  const off = await page.locator('.idle-offcpu-summary').textContent();
  // The main thread and the backward thread launch; the pool launches nothing.
  const w = /its 2 launching threads blocked ([\d.]+) (ms|s) while the GPU was idle \(during ([\d.]+) % of the idle time/.exec(off);
  assert.ok(w, off);
  const ns = Number(w[1]) * (w[2] === 's' ? 1e9 : 1e6);
  assert.ok(Math.abs(ns - blocked) < 0.15 * blocked, `${off} (truth ${blocked} ns)`);
  assert.match(off, /blocked in gaps another of them ended waited with the GPU and is not charged/);
  assert.match(off, /Its other threads, blocked [\d.]+ s in the window, launch no GPU work/);
  const share = await page.evaluate(() => window.__flamewatch.idle.share('load_batch_blocked', 'offcpu'));
  assert.ok(share >= 0.9, `load_batch_blocked holds ${share} of the off-CPU idle time`);
  // The CPU graph of the idle time does not claim it: the loader slept.
  assert.ok(await page.evaluate(() => window.__flamewatch.idle.share('load_batch_blocked')) < 0.5);
  assert.ok(await page.evaluate(() => window.__flamewatch.idle.last.cpu_share) < 0.1);
  await page.locator('.idle-panel').screenshot({ path: join(OUT, 'offcpu-idle-panel.png') });
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});
