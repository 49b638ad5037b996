// The timeline page against the real `flamewatch run` (real BPF, the fake
// NVML library, the fake libflamewatch-cuda.so driven by `cuda_chain gap`,
// whose GPU idles while it runs load_batch_stall, with its busy timeline):
// the GPU charts, the CPU strips and the kernel track render on one axis;
// the kernel track draws the busy timeline, also where the window holds too
// many kernels to draw; a drag on the kernel track selects a window and the
// flame chart follows; a click on a kernel shows its launching stack; "why
// is the GPU idle?" shows the idle flame graph naming load_batch_stall.
// Screenshots go to build/test-output/ui/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, OUT, startRun, launch, sleep } from './lib.mjs';

const ROUNDS = 8, MS = 400;
let fw, browser, page, work, gap, pid;
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
  const tmp = mkdtempSync(join(tmpdir(), 'fw-ui-tl-'));
  const go = join(tmp, 'go');
  let out = '';
  work = spawn(join(BUILD, 'workloads/cuda/cuda_chain'), ['gap', String(ROUNDS), String(MS)],
    { env: { ...process.env, CUDA_CHAIN_GO: go, CUDA_CHAIN_BUSY: '1' }, stdio: ['ignore', 'pipe', 'inherit'] });
  work.stdout.on('data', (d) => { out += d; });
  pid = work.pid;
  // The fake NVML puts this process on GPU 0 at 80 % SM utilisation (alone on
  // the GPU, it gets the GPU's utilisation, also 80 %).
  writeFileSync(join(tmp, 'nvml'), `gpu0.util 80\ngpu0.mem_util 10\nproc 0 ${pid} 80 10 1000000000\n`);
  fw = await startRun(['--gpu-interval', '200ms'], { ...process.env, LD_LIBRARY_PATH: join(BUILD, 'fakes'), FAKE_NVML_VALUES: join(tmp, 'nvml') });
  await waitFor(() => readFileSync(fw.log, 'utf8').includes('GPU time profiling: attached to'), 'the agent to attach');
  await sleep(1000);
  writeFileSync(go, '');
  await waitFor(() => work.exitCode !== null, 'cuda_chain');
  const m = /gap (\d+) (\d+)/.exec(out);
  assert.ok(m, out);
  gap = [Number(m[1]) / 1e9, Number(m[2]) / 1e9];
  await waitFor(async () => {
    const r = await fetch(`${fw.url}/api/v1/gpu/kernels?from=${gap[0] - 1}&to=${gap[1] + 1}&query=${encodeURIComponent(`{pid="${pid}"}`)}`);
    return r.ok && (await r.json()).intervals.length >= ROUNDS;
  }, 'the kernels', 30000);
  await sleep(2000);
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

test('the timeline renders the GPU charts, CPU strips and kernel track on one axis', async () => {
  const from = (gap[0] - 1).toFixed(3), to = (gap[1] + 1).toFixed(3);
  await page.goto(`${fw.url}/?page=timeline&from=${from}&to=${to}`);
  await loaded();
  assert.ok(!(await page.locator('.banner.error').isVisible()), await page.locator('.banner').textContent());
  console.log(`timeline page: data loaded and drawn in ${await page.evaluate(() => document.body.dataset.loadMs)} ms`);
  const shown = await page.evaluate(() => window.__flamewatch.gpuCharts.shown);
  assert.deepEqual(shown, ['util', 'memory', 'clocks', 'power', 'temp', 'pcie']);
  // The power chart's limit is dashed; PCIe RX is drawn below zero.
  const series = await page.evaluate(() => window.__flamewatch.gpuCharts.el.querySelectorAll('.gpu-chart').length);
  assert.equal(series, 6);
  // Utilisation: each GPU's line blue, the process's orange (80 % from the fake).
  const lines = await page.evaluate(() => window.__flamewatch.gpuCharts.plots.map((u) =>
    u.series.slice(1).map((s, i) => ({ label: s.label, stroke: s.stroke(u, i + 1), dash: s.dash ?? null,
      min: Math.min(...u.data[i + 1].filter((v) => v != null)), max: Math.max(...u.data[i + 1].filter((v) => v != null)) }))));
  const [util, , , power, , pcie] = lines;
  const proc = util.find((l) => l.label.startsWith('cuda_chain'));
  assert.ok(proc && proc.stroke === '#f28e2b' && proc.min === 80, JSON.stringify(util));
  assert.ok(util.filter((l) => l.label.startsWith('node')).every((l) => /^#[0-9a-f]{6}$/.test(l.stroke) && parseInt(l.stroke.slice(5), 16) > parseInt(l.stroke.slice(1, 3), 16)), 'node lines are blue');
  // Power: the limit dashed; PCIe: RX below zero, TX above.
  assert.ok(power.find((l) => l.label.startsWith('limit')).dash, JSON.stringify(power));
  assert.ok(pcie.filter((l) => l.label.startsWith('RX')).every((l) => l.max < 0), JSON.stringify(pcie));
  assert.ok(pcie.filter((l) => l.label.startsWith('TX')).every((l) => l.min > 0), JSON.stringify(pcie));
  const kernels = await page.evaluate((p) => window.__flamewatch.kernelTrack.data.intervals.filter((k) => k.pid === p).length, pid);
  assert.equal(kernels, ROUNDS);
  // The busy timeline: a span per kernel, on the row above the kernels, and its coverage.
  const tl = await page.evaluate((p) => {
    const t = window.__flamewatch.kernelTrack;
    const mine = t.timeline.intervals.filter((k) => k.pid === p);
    return { busy: mine.filter((k) => k.kind === 'busy'), cover: mine.filter((k) => k.kind === 'coverage').length,
      kernels: t.data.intervals.filter((k) => k.pid === p), top: t.kernelRowTop() };
  }, pid);
  assert.equal(tl.busy.length, ROUNDS, JSON.stringify(tl.busy));
  tl.busy.forEach((b, i) => assert.ok(Math.abs(b.start - tl.kernels[i].start) < 1e6 && Math.abs(b.end - tl.kernels[i].end) < 1e6,
    `busy span ${i} ${b.start}..${b.end} against kernel ${tl.kernels[i].start}..${tl.kernels[i].end}`));
  assert.ok(tl.cover >= 1 && tl.top > 14, JSON.stringify(tl));
  // One kernel a round: nothing idle inside a span, drawn at full strength.
  tl.busy.forEach((b) => assert.ok(typeof b.idle_ns === 'number' && b.idle_ns <= 0.01 * (b.end - b.start), JSON.stringify(b)));
  assert.ok(await page.locator('.cpu-strips canvas').isVisible());
  assert.ok((await page.locator('.cpu-strips canvas').boundingBox()).height > 20);
  // One axis: the GPU charts' plot areas start and end where the samples chart's does.
  const xs = await page.evaluate(() => {
    const over = document.querySelector('.samples-chart .u-over').getBoundingClientRect();
    const util = document.querySelector('.gpu-chart-util .u-over').getBoundingClientRect();
    return { util: util.left - over.left, right: util.right - over.right };
  });
  assert.ok(Math.abs(xs.right) < 1, `GPU chart plot area ends ${xs.right} px off`);
  assert.ok(Math.abs(xs.util) < 1, `GPU chart plot area offset ${xs.util} px`);
  await page.screenshot({ path: join(OUT, 'timeline.png'), fullPage: false });
});

test('brushing the kernel track selects the window everywhere and the flame chart follows', async () => {
  const box = await page.locator('.gpu-kernels canvas').boundingBox();
  const over = await page.locator('.samples-chart .u-over').boundingBox();
  const before = await page.evaluate(() => window.__flamewatch.tchart.data.to - window.__flamewatch.tchart.data.from);
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  const y = box.y + 14 + 5;
  await page.mouse.move(over.x + over.width * 0.3, y);
  await page.mouse.down();
  await page.mouse.move(over.x + over.width * 0.5, y, { steps: 4 });
  await page.mouse.move(over.x + over.width * 0.7, y, { steps: 4 });
  await page.mouse.up();
  await loaded(prev);
  const u = new URL(page.url());
  const sf = Number(u.searchParams.get('sf')), st = Number(u.searchParams.get('st'));
  assert.ok(st > sf, page.url());
  const w = await page.evaluate(() => [window.__flamewatch.tchart.data.from / 1e9, window.__flamewatch.tchart.data.to / 1e9]);
  assert.ok(Math.abs(w[0] - sf) < 0.01 && Math.abs(w[1] - st) < 0.01, `flame chart window ${w} vs ${sf}..${st}`);
  assert.ok(w[1] - w[0] < before / 1e9 * 0.6);
  // ... drawn on the page's axis: the flame chart's axis is the range of the charts.
  const axis = await page.evaluate(() => window.__flamewatch.tchart.axis);
  const range = await page.evaluate(() => window.__flamewatch.samples.plot.scales.x);
  assert.ok(Math.abs(axis[0] - range.min) < 0.01 && Math.abs(axis[1] - range.max) < 0.01, `flame chart axis ${axis} vs ${range.min}..${range.max}`);
  // The samples chart and the GPU charts show the same selection.
  const sel = await page.evaluate(() => [...document.querySelectorAll('.u-select')].map((e) => Math.round(e.getBoundingClientRect().left)));
  assert.ok(sel.length >= 7 && new Set(sel).size === 1, `selections at ${sel}`);
  await page.screenshot({ path: join(OUT, 'timeline-brushed.png'), fullPage: false });
});

test('clicking a kernel shows its launching stack', async () => {
  await page.goBack();
  await loaded(await page.evaluate(() => document.body.dataset.loaded));
  await page.evaluate(() => window.scrollTo(0, 0));
  // Other tests on this host may run cuda_chain too: one of ours.
  const x = await page.evaluate((p) => {
    const fw = window.__flamewatch, k = fw.kernelTrack.data.intervals.filter((i) => i.pid === p)[2];
    const over = document.querySelector('.samples-chart .u-over').getBoundingClientRect();
    return over.left + fw.samples.plot.valToPos((k.start + k.end) / 2e9, 'x');
  }, pid);
  const box = await page.locator('.gpu-kernels canvas').boundingBox();
  const top = await page.evaluate(() => window.__flamewatch.kernelTrack.kernelRowTop());
  await page.mouse.click(x, box.y + top + 5);
  await page.locator('.kernel-stack').waitFor({ state: 'visible' });
  const text = await page.locator('.kernel-stack').textContent();
  assert.match(text, /kernel, 400 ms on gpu 0 stream 7, launched by cuda_chain/);
  const frames = await page.locator('.ks-frames li').allTextContents();
  assert.ok(frames.some((f) => f.startsWith('train_step')) && frames.some((f) => f.startsWith('launch_kernel')), frames.join('\n'));
});

test('past the kernel limit the track still draws the busy timeline', async () => {
  const got = await page.evaluate(async ([p, from, to]) => {
    const t = window.__flamewatch.kernelTrack;
    t.kernelLimit = 3;
    try {
      await t.update({ from, to, query: '', selection: null, signal: new AbortController().signal });
      return { kernels: t.data.intervals.length, busy: t.timeline.intervals.filter((k) => k.pid === p && k.kind === 'busy').length,
        note: document.querySelector('.gpu-kernels .track-note').textContent, hidden: t.el.hidden, top: t.kernelRowTop() };
    } finally { t.kernelLimit = 20000; }
  }, [pid, gap[0] - 1, gap[1] + 1]);
  assert.equal(got.kernels, 0, JSON.stringify(got));
  assert.equal(got.busy, ROUNDS, JSON.stringify(got));
  assert.match(got.note, /zoom in/);
  assert.ok(!got.hidden && got.top > 14, JSON.stringify(got));
  await page.locator('.gpu-kernels').screenshot({ path: join(OUT, 'timeline-busy-only.png') });
});

test('why is the GPU idle: one click from the timeline names the stall', async () => {
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  await page.locator(`.idle-btn[data-pid="${pid}"]`).click();
  await loaded(prev);
  await page.locator('.idle-panel').waitFor({ state: 'visible' });
  const summary = await page.locator('.idle-summary').textContent();
  const m = /GPU idle ([\d.]+) %/.exec(summary);
  assert.ok(m, summary);
  // The loop idles half its time; the window adds a little before and after.
  assert.ok(Number(m[1]) > 35 && Number(m[1]) < 70, summary);
  // The samples in cudaStreamSynchronize are named as waiting, not idle.
  assert.match(summary, /CPU samples \([\d.]+ ?%\) waited on the GPU in synchronize calls/);
  const share = await page.evaluate(() => window.__flamewatch.idle.share('load_batch_stall'));
  assert.ok(share > 0.8, `load_batch_stall holds ${share} of the idle samples`);
  assert.ok(await page.evaluate(() => window.__flamewatch.idle.share('wait_for_gpu')) < 0.1);
  await page.screenshot({ path: join(OUT, 'timeline-gpu-idle.png'), fullPage: false });
  await page.locator('.timeline-page').screenshot({ path: join(OUT, 'timeline-idle-panel.png') });
});

test('clicking a CPU strip segment filters to that process', async () => {
  await page.evaluate(() => window.scrollTo(0, 0));
  // cuda_chain's longest time on a CPU, wherever it ran.
  const hit = await page.evaluate((p) => {
    const fw = window.__flamewatch, d = fw.strips.data;
    let best = null;
    d.cpus.forEach((c, row) => { for (const v of c.intervals) if (v[2] === p && (!best || v[1] - v[0] > best.len)) best = { len: v[1] - v[0], mid: (v[0] + v[1]) / 2e9, row }; });
    if (!best) return null;
    const over = document.querySelector('.samples-chart .u-over').getBoundingClientRect();
    const canvas = document.querySelector('.cpu-strips canvas').getBoundingClientRect();
    const x = Math.round(over.left + fw.samples.plot.valToPos(best.mid, 'x')), y = Math.round(14 + best.row * fw.strips.rowH + fw.strips.rowH / 2);
    return { x, y: Math.round(canvas.top) + y, len: best.len, under: fw.strips.at(x - canvas.left, Math.round(canvas.top) + y - canvas.top) };
  }, pid);
  assert.ok(hit && hit.under, `a strip interval of cuda_chain: ${JSON.stringify(hit)}`);
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  await page.mouse.click(hit.x, hit.y);
  await loaded(prev);
  const q = new URL(page.url()).searchParams.get('q');
  assert.equal(q, `{pid="${hit.under.pid}"}`);
  // Wide enough to hit for sure (3 px): it is cuda_chain.
  const pxNs = await page.evaluate(() => { const fw = window.__flamewatch; return (fw.strips.to - fw.strips.from) * 1e9 / document.querySelector('.samples-chart .u-over').clientWidth; });
  if (hit.len > 3 * pxNs) assert.equal(q, `{pid="${pid}"}`);
  await page.screenshot({ path: join(OUT, 'timeline-process.png'), fullPage: false });
});

test('the free-form range keeps what was typed in the URL', async () => {
  await page.locator('.from-input').fill('now-1h30m');
  await page.locator('.to-input').fill('now');
  const prev = await page.evaluate(() => document.body.dataset.loaded);
  await page.locator('.range-go').click();
  await loaded(prev);
  assert.equal(new URL(page.url()).searchParams.get('from'), 'now-1h30m');
  assert.match(await page.locator('.range-text').textContent(), /last 1h30m/);
  // An absolute local time, kept as typed; the range starts there.
  const abs = await page.evaluate((t) => {
    const d = new Date(t * 1000), p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }, Math.floor(gap[0]));
  await page.locator('.from-input').fill(abs);
  const prev2 = await page.evaluate(() => document.body.dataset.loaded);
  await page.locator('.range-go').click();
  await loaded(prev2);
  assert.equal(new URL(page.url()).searchParams.get('from'), abs);
  assert.ok((await page.locator('.range-text').textContent()).startsWith(abs), await page.locator('.range-text').textContent());
  const x0 = await page.evaluate(() => window.__flamewatch.samples.plot.scales.x.min);
  assert.equal(x0, Math.floor(gap[0]));
  await page.locator('.from-input').fill('yesterday-ish');
  await page.locator('.range-go').click();
  assert.match(await page.locator('.range-error').textContent(), /not a time/);
  assert.equal(new URL(page.url()).searchParams.get('from'), abs);
});

test('the timeline threw no errors', () => {
  assert.deepEqual(pageErrors, []);
});
