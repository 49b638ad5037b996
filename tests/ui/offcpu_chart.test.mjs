// Blocked spans in the flame chart (issue 30), against the real `flamewatch
// run --off-cpu` (real BPF) and tests/workloads/offcpu.c alternating
// spin_on_cpu (on CPU) and block_in_sleep (blocked), which writes each
// blocking call's start and end (OFFCPU_SPANS).
//
// - the CPU flame chart draws the thread's blocked spans in its lane,
//   hatched, between its on-CPU blocks: hovering one says "blocked N ms in
//   … block_in_sleep …" with N the truth's, hovering the spin says neither;
// - with the Off-CPU type, the chart's lane is the blocks themselves;
// - the timeline's chart has them too; a render stays within budget with
//   many blocked spans.
//
// Screenshots go to build/test-output/ui/ (offcpu-chart-*.png).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, OUT, startRun, launch, sleep } from './lib.mjs';

const SECONDS = 3, SPIN_MS = 40, BLOCK_MS = 30;
let fw, browser, page, work, pid, truth, win;
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
  const tmp = mkdtempSync(join(tmpdir(), 'fw-ui-offcpu-chart-'));
  const spans = join(tmp, 'spans');
  fw = await startRun(['--off-cpu']);
  await waitFor(() => readFileSync(fw.log, 'utf8').includes('profiling this host'), 'the agent to start');
  const t0 = Date.now() / 1000;
  let out = '';
  work = spawn(join(BUILD, 'workloads/offcpu'), ['sleep', String(SECONDS), String(SPIN_MS), String(BLOCK_MS)],
    { env: { ...process.env, OFFCPU_SPANS: spans }, stdio: ['ignore', 'pipe', 'inherit'], cwd: tmp });
  work.stdout.on('data', (d) => { out += d; });
  await waitFor(() => work.exitCode !== null, 'the workload');
  assert.equal(work.exitCode, 0);
  pid = Number(/pid (\d+)/.exec(out)[1]);
  truth = readFileSync(spans, 'utf8').trim().split('\n').map((l) => l.split(' ').map(Number));
  win = [t0 - 0.5, Date.now() / 1000 + 0.5];
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await waitFor(async () => {
    const r = await fetch(`${fw.url}/api/v1/flamechart?type=offcpu&from=${win[0]}&to=${win[1]}&query=${q}`);
    const j = r.ok ? await r.json() : null;
    return j && j.samples >= truth.length - 2;
  }, 'the off-CPU blocks', 30000);
  await sleep(1500);
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e.stack ?? e)));
});

after(async () => {
  await browser?.close();
  if (work && work.exitCode === null) work.kill();
  await fw?.stop();
});

async function loaded() {
  await page.waitForFunction(() => {
    const b = document.querySelector('.banner.error');
    return document.body.dataset.loaded || (b && !b.hidden);
  });
  const err = await page.evaluate(() => { const b = document.querySelector('.banner.error'); return b && !b.hidden ? b.textContent : null; });
  assert.equal(err, null, `the page shows an error: ${err}`);
}

/*
 * Moves the mouse over the middle of a span of the workload's lane in the
 * chart `which` ('chart' or 'tchart'): a blocked one (the frame `fn` of
 * it) or an on-CPU one; returns the tooltip's first line and the span.
 */
async function hover(which, blocked, fn) {
  const at = await page.evaluate(([which, blocked, fn, pid]) => {
    const ch = window.__flamewatch[which];
    const li = ch.lanes.findIndex((l) => l.label.includes(` ${pid}/${pid}`));
    if (li < 0) return { error: `no lane for ${pid}: ${ch.lanes.map((l) => l.label)}` };
    const l = ch.lanes[li], d = ch.data;
    const fi = d.frames.findIndex((f) => f[0] === fn);
    const rows = blocked ? l.brows : l.rows;
    // The middle one of the spans of fn, at the depth it is at.
    for (let depth = 0; depth < l.depth; depth++) {
      const r = rows[depth], hits = [];
      for (let j = 0; j < r.length; j += 3) if (r[j + 2] === fi) hits.push([r[j], r[j + 1]]);
      if (!hits.length) continue;
      const [s, e] = hits[hits.length >> 1], mid = (s + e) / 2;
      // timeAt is linear in x: solve it for the middle of the span.
      const a = ch.timeAt(0), b = ch.timeAt(1000), box = ch.canvas.getBoundingClientRect();
      return { x: box.x + ((mid - a) / (b - a)) * 1000, y: box.y + ch.laneTop(li) + 18 + depth * 16 + 8, s, e };
    }
    return { error: `no ${blocked ? 'blocked' : 'on-CPU'} span of ${fn} in ${l.label}` };
  }, [which, blocked, fn, pid]);
  assert.equal(at.error, undefined, at.error);
  await page.mouse.move(at.x, at.y);
  const tip = page.locator(which === 'chart' ? '.views > .flamechart > .tooltip' : '.tchart-slot .tooltip');
  await tip.waitFor({ state: 'visible' });
  return { text: await tip.locator('.tip-name').textContent(), span: [at.s, at.e] };
}

/* The truth's blocking call nearest to a span, and how far its ends are (ms). */
function nearest([s, e]) {
  let best = null;
  for (const [a, b] of truth) if (!best || Math.abs(a - s) < Math.abs(best[0] - s)) best = [a, b];
  return { start: Math.abs(best[0] - s) / 1e6, end: Math.abs(best[1] - e) / 1e6, ms: (best[1] - best[0]) / 1e6 };
}

test('the CPU flame chart draws the blocked spans beside the on-CPU ones', async () => {
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await page.goto(`${fw.url}/?from=${win[0].toFixed(3)}&to=${win[1].toFixed(3)}&q=${q}&view=chart`);
  await loaded();
  const lane = await page.evaluate((pid) => {
    const l = window.__flamewatch.chart.lanes.find((x) => x.label.includes(` ${pid}/${pid}`));
    return l && { label: l.label, blocked: l.blocked.length, rows: l.rows.reduce((n, r) => n + r.length / 3, 0) };
  }, pid);
  assert.ok(lane && lane.blocked >= truth.length - 2 && lane.rows > 0, JSON.stringify(lane));
  assert.match(lane.label, /blocked [\d.]+ (ms|s)/);
  const b = await hover('chart', true, 'block_in_sleep');
  const m = /^blocked ([\d.]+) ms in (.*)/.exec(b.text);
  assert.ok(m && m[2].includes('block_in_sleep'), b.text);
  const n = nearest(b.span);
  assert.ok(n.start < 3 && n.end < 3 && Math.abs(Number(m[1]) - n.ms) < 3, `${b.text}: truth ${JSON.stringify(n)}`);
  await page.screenshot({ path: join(OUT, 'offcpu-chart-cpu.png'), fullPage: true });
  const c = await hover('chart', false, 'spin_on_cpu');
  assert.match(c.text, /^spin_on_cpu/);
  assert.doesNotMatch(c.text, /blocked [\d.]+ ms in/);
  // The blocked span is drawn: its pixels differ from the on-CPU span's.
  const px = await page.evaluate(([bs, cs, pid]) => {
    const ch = window.__flamewatch.chart, g = ch.canvas.getContext('2d'), dpr = window.devicePixelRatio || 1;
    const a = ch.timeAt(0), k = 1000 / (ch.timeAt(1000) - a), li = ch.lanes.findIndex((l) => l.label.includes(` ${pid}/${pid}`));
    const y = Math.round((ch.laneTop(li) + 18 + 8) * dpr);
    const at = (t) => Array.from(g.getImageData(Math.round((t - a) * k * dpr), y, 1, 1).data).join(',');
    return { blocked: at((bs[0] + bs[1]) / 2), cpu: at((cs[0] + cs[1]) / 2) };
  }, [b.span, c.span, pid]);
  assert.notEqual(px.blocked, '0,0,0,0', 'nothing drawn where the thread was blocked');
  assert.notEqual(px.blocked, px.cpu, 'blocked and on-CPU spans look the same');
  const ms = await page.evaluate(() => window.__flamewatch.chart.lastRenderMs);
  assert.ok(ms < 100, `render ${ms} ms`);
  // Closer: a quarter of a second around a block in the middle.
  const mid = truth[truth.length >> 1][0] / 1e9;
  await page.goto(`${fw.url}/?from=${(mid - 0.1).toFixed(3)}&to=${(mid + 0.15).toFixed(3)}&q=${q}&view=chart`);
  await loaded();
  const z = await hover('chart', true, 'block_in_sleep');
  assert.match(z.text, /^blocked [\d.]+ ms in .*block_in_sleep/);
  await page.screenshot({ path: join(OUT, 'offcpu-chart-zoom.png'), fullPage: true });
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});

test('with the Off-CPU type, the chart is the blocked spans', async () => {
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await page.goto(`${fw.url}/?from=${win[0].toFixed(3)}&to=${win[1].toFixed(3)}&q=${q}&view=chart&type=offcpu`);
  await loaded();
  const lane = await page.evaluate((pid) => {
    const ch = window.__flamewatch.chart, l = ch.lanes.find((x) => x.label.includes(` ${pid}/${pid}`));
    return l && { type: ch.data.type, blocked: l.blocked.length, rows: l.rows.reduce((n, r) => n + r.length, 0) };
  }, pid);
  assert.ok(lane && lane.type === 'offcpu' && lane.blocked >= truth.length - 2 && lane.rows === 0, JSON.stringify(lane));
  const b = await hover('chart', true, 'block_in_sleep');
  assert.match(b.text, /^blocked [\d.]+ ms in .*block_in_sleep/);
  await page.screenshot({ path: join(OUT, 'offcpu-chart-offcpu.png'), fullPage: true });
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});

test('the timeline flame chart has the blocked spans too', async () => {
  const q = encodeURIComponent(`{pid="${pid}"}`);
  await page.goto(`${fw.url}/?page=timeline&from=${win[0].toFixed(3)}&to=${win[1].toFixed(3)}&q=${q}`);
  await loaded();
  const b = await hover('tchart', true, 'block_in_sleep');
  assert.match(b.text, /^blocked [\d.]+ ms in .*block_in_sleep/);
  await page.locator('.tchart-slot').screenshot({ path: join(OUT, 'offcpu-chart-timeline.png') });
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});

test('many blocked spans render within budget', async () => {
  // 8 threads, each alternating on-CPU runs and blocks 16 frames deep, in the
  // timeline's chart (on the page, so drawn at its width): 1200 blocks a
  // thread are about a pixel wide each, every one drawn; 6000 are thinner
  // than a pixel, mostly skipped but all looked at.
  const r = await page.evaluate(() => {
    const ch = window.__flamewatch.tchart, real = ch.data, axis = ch.axis;
    const frames = Array.from({ length: 400 }, (_, i) => [`fn_${i}`, i % 2 ? '/usr/lib/libc.so.6' : '/app', i % 7 ? 0 : 1]);
    const stacks = Array.from({ length: 64 }, (_, s) => Array.from({ length: 16 }, (_, k) => (s * 5 + k * 3) % 400));
    const out = {};
    for (const n of [1200, 6000]) {
      const from = 1e18, lanes = [];
      for (let t = 0; t < 8; t++) {
        const events = [], blocked = [];
        for (let i = 0; i < n; i++) {
          const a = from + i * 5e6;
          events.push([a, a + 2e6, (i + t) % 64]);
          blocked.push([a + 2e6, a + 5e6 - 1e5, (i * 3 + t) % 64]);
        }
        lanes.push({ pid: 1, tid: t + 1, comm: 0, events, blocked });
      }
      ch.axis = null;
      ch.setData({ from, to: from + n * 5e6, type: 'cpu', stride: 1, samples: 8 * n, frames, stacks, comms: ['synthetic'], lanes }, 'binary');
      const runs = [];
      const g = ch.canvas.getContext('2d');
      for (let i = 0; i < 3; i++) { ch.render(); g.getImageData(0, 0, 1, 1); }
      for (let i = 0; i < 7; i++) { ch.render(); g.getImageData(0, 0, 1, 1); runs.push(ch.lastRenderMs); }
      runs.sort((a, b) => a - b);
      out[n] = { median: runs[3], max: runs[6], width: ch.el.clientWidth };
    }
    ch.axis = axis;
    ch.setData(real, 'binary');
    return out;
  });
  for (const [n, x] of Object.entries(r)) {
    console.log(`flame chart, 8 threads of ${n} blocked spans beside ${n} on-CPU runs, ${x.width} px: ` +
      `render median ${x.median.toFixed(1)} ms, max ${x.max.toFixed(1)} ms`);
    assert.ok(x.median < 100, `${n} a thread: render median ${x.median} ms`);
  }
  assert.deepEqual(pageErrors.splice(0), [], 'errors on the page');
});
