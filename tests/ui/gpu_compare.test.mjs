// GPU time and comparisons in the UI (issue 26), against the real server:
//
// - on the fake CUDA library driven by cuda_chain under `flamewatch run`,
//   whose GPU time is known to the nanosecond (tests/workloads/cuda/
//   cuda_chain.c): the profile type selector, the kernel table, a kernel's
//   launching stacks, the comparison of two windows and of two selectors
//   (colours read off the canvas), the timeline's way in, and URLs that
//   reload to the same view;
// - on batches the agent recorded on a GPU machine (tests/ui/fixtures/gpu,
//   replayed into a fresh `flamewatch server`): PyTorch's kernels by GPU
//   time under their Python launch stacks, and the comparison of the run's
//   two phases.
//
// Screenshots go to build/test-output/ui/ (gpu-*.png, compare-*.png).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, ROOT, OUT, startRun, startServer, launch, sleep } from './lib.mjs';


async function waitFor(fn, what, ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

/* A page and helpers bound to it. */
function pageKit(page) {
  const kit = {
    /* Waits for the next completed load; fails with the page's error banner. */
    async loaded(prev) {
      await page.waitForFunction((p) => {
        const b = document.querySelector('.banner.error');
        return (document.body.dataset.loaded && document.body.dataset.loaded !== p) || (b && !b.hidden);
      }, prev ?? '');
      const err = await page.evaluate(() => { const b = document.querySelector('.banner.error'); return b && !b.hidden ? b.textContent : null; });
      assert.equal(err, null, `the page shows an error: ${err}`);
      return page.evaluate(() => document.body.dataset.loaded);
    },
    async go(url) { await page.goto(url); return kit.loaded(); },
    /* Does something that navigates, and waits for the load it starts. */
    async act(fn) { const prev = await page.evaluate(() => document.body.dataset.loaded); await fn(); return kit.loaded(prev); },
    param: (k) => new URL(page.url()).searchParams.get(k),
    /* The RGB of the middle of the flame graph node named name (the widest), read off the canvas. */
    async color(name, graph = 'flame') {
      return page.evaluate(([n, g]) => {
        const fg = window.__flamewatch[g], i = fg.find(n);
        if (i < 0) return null;
        const r = fg.rect(i), c = fg.canvas, dpr = c.width / c.clientWidth;
        // Just inside the top left corner, clear of the label.
        const x = Math.floor((r.x + 2) * dpr), y = Math.floor((r.y + 1.5) * dpr);
        return [...c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)];
      }, [name, graph]);
    },
    names: () => page.evaluate(() => { const t = window.__flamewatch.flame.current; return [...new Set(Array.from(t.name, (i) => t.names[i]))]; }),
  };
  return kit;
}

const red = ([r, g, b]) => r > g + 60 && r > b + 60;
const green = ([r, g, b]) => g > r + 30 && g > b + 20;
const grey = ([r, g, b]) => Math.abs(r - g) < 12 && Math.abs(g - b) < 12;
// The GPU frames' magenta, in any of its shades: red and blue well above green.
const magenta = ([r, g, b]) => r > g + 40 && b > g + 20;

/* test(), and then: the page threw no errors meanwhile. */
function checked(pageErrors) {
  return (name, fn) => test(name, async () => { await fn(); assert.deepEqual(pageErrors.splice(0), [], 'errors on the page'); });
}

describe('GPU time on the fake CUDA library (cuda_chain)', () => {
  let fw, browser, page, kit, tmp;
  const pageErrors = [];
  const test = checked(pageErrors);
  // Window A: the default phases of cuda_chain (kernelA, kernelB, a copy, an orphan
  // record); window B: `cuda_chain gap`, kernelA alone from train_step.
  let A, B, G, pidA, pidB, split;

  /* Runs cuda_chain ARGS once the agent is attached; returns [pid, from, to] (Unix s). */
  async function chain(args) {
    const go = join(tmp, `go-${args.join('-') || 'default'}`);
    let out = '';
    const w = spawn(join(BUILD, 'workloads/cuda/cuda_chain'), args, { env: { ...process.env, CUDA_CHAIN_GO: go }, stdio: ['ignore', 'pipe', 'inherit'] });
    w.stdout.on('data', (d) => { out += d; });
    // To the workload's library (the agent also attaches to the copy beside its binary at start).
    const lib = join(BUILD, 'workloads/cuda/libflamewatch-cuda.so');
    await waitFor(() => readFileSync(fw.log, 'utf8').includes(`GPU time profiling: attached to ${lib}`), 'the agent to attach');
    await sleep(500);
    const from = Date.now() / 1000;
    writeFileSync(go, '');
    await waitFor(() => w.exitCode !== null, 'cuda_chain');
    assert.equal(w.exitCode, 0, out);
    assert.match(out, /done/);
    return [w.pid, from, Date.now() / 1000, out];
  }

  async function top(pid, from, to) {
    // Bounded: a poll that hangs on a loaded machine is asked again.
    try {
      const r = await fetch(`${fw.url}/api/v1/gpu/kernels/top?from=${from}&to=${to}&query=${encodeURIComponent(`{pid="${pid}"}`)}`,
        { signal: AbortSignal.timeout(10000) });
      return r.ok ? r.json() : null;
    } catch { return null; }
  }

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'fw-ui-gpu-'));
    fw = await startRun([]);
    let a0, a1, b0, b1;
    [pidA, a0, a1] = await chain([]);
    // Every record of the first run stored before the second starts: the windows do not overlap.
    await waitFor(async () => (await top(pidA, a0 - 1, a1 + 1))?.total_ns === 223000, 'the first run\'s GPU time', 30000);
    await sleep(1500);
    // cpu_split (70 % hot_70, 30 % cold_30) burns a CPU all through the second
    // run: alone it is the baseline of a CPU comparison over selectors.
    split = spawn(join(BUILD, 'workloads/cpu_split'), ['6'], { stdio: 'ignore' });
    await sleep(500);
    let out;
    [pidB, b0, b1, out] = await chain(['gap', '4', '150']);
    // The gap loop alone, while it spins: "gap FROM_NS TO_NS".
    const m = /gap (\d+) (\d+)/.exec(out);
    G = [(Number(m[1]) / 1e9).toFixed(3), (Number(m[2]) / 1e9).toFixed(3)];
    await waitFor(async () => (await top(pidB, b0 - 1, b1 + 1))?.kernels?.[0]?.calls === 4, 'the second run\'s kernels', 30000);
    await sleep(1500);
    A = [(a0 - 0.5).toFixed(3), (a1 + 0.5).toFixed(3)];
    B = [(b0 - 0.5).toFixed(3), (b1 + 0.5).toFixed(3)];
    assert.ok(Number(A[1]) < Number(B[0]), `windows ${A} and ${B} overlap`);
    browser = await launch();
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 1100 } });
    page = await ctx.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e.stack ?? e)));
    kit = pageKit(page);
  });

  after(async () => {
    await browser?.close();
    if (split && split.exitCode === null) split.kill();
    await fw?.stop();
  });

  const qA = () => encodeURIComponent(`{pid="${pidA}"}`);

  test('the type selector switches the profile, samples chart and URL to GPU time', async () => {
    await kit.go(`${fw.url}/?from=${A[0]}&to=${A[1]}&q=${qA()}`);
    assert.equal(await page.locator('.ptype').inputValue(), 'cpu');
    await kit.act(() => page.locator('.ptype').selectOption('gpu_time'));
    assert.equal(kit.param('type'), 'gpu_time');
    // GPU nanoseconds under the launching stacks, the kernel as the leaf.
    const t = await page.evaluate(() => { const t = window.__flamewatch.flame.current; return { unit: t.unit, total: t.total[0] }; });
    assert.deepEqual(t, { unit: 'nanoseconds', total: 223000 });
    const names = await kit.names();
    for (const n of ['phase_launch_first', 'launch_kernel', 'kernelA(int)', 'kernelB(float*, int)', '[memcpy HtoD]', 'orphan()']) assert.ok(names.includes(n), `${n} in ${names}`);
    // The samples chart shows GPU time: 223 µs = 0.223 ms in all.
    const chart = await page.evaluate(() => ({ type: window.__flamewatch.samples.type, sum: window.__flamewatch.samples.sums.reduce((a, b) => a + b, 0) }));
    assert.equal(chart.type, 'gpu_time');
    assert.ok(Math.abs(chart.sum - 0.223) < 1e-9, `samples chart sums ${chart.sum} ms`);
    // GPU frames in their own colour; the CPU frames above them not.
    assert.ok(magenta(await kit.color('kernelA(int)')), `kernelA: ${await kit.color('kernelA(int)')}`);
    assert.ok(!magenta(await kit.color('launch_kernel')), `launch_kernel: ${await kit.color('launch_kernel')}`);
    assert.match(await page.locator('.legend').textContent(), /CUDA kernel/);
    await page.screenshot({ path: join(OUT, 'gpu-flamegraph.png'), fullPage: true });
    // The flame chart: one lane per GPU stream, the kernels' blocks under their launching stacks.
    await kit.act(() => page.locator('.tabs button[data-view="chart"]').click());
    await page.waitForFunction(() => window.__flamewatch.chart.data?.lanes?.length > 0);
    const lanes = await page.evaluate(() => window.__flamewatch.chart.data.lanes.map((l) => [l.label, l.events.length]));
    assert.deepEqual(lanes.sort(), [['gpu 0 stream 13', 1], ['gpu 0 stream 7', 16]], JSON.stringify(lanes));
    // Back to the CPU: the type leaves the URL.
    await kit.act(() => page.locator('.ptype').selectOption('cpu'));
    assert.equal(kit.param('type'), null);
    assert.equal(await page.evaluate(() => window.__flamewatch.samples.type), 'cpu');
  });

  test('the kernel table lists kernels and copies by GPU time; a click shows their launching stacks', async () => {
    await kit.go(`${fw.url}/?from=${A[0]}&to=${A[1]}&q=${qA()}&type=gpu_time&view=table`);
    const rows = await page.locator('.kernel-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    // cuda_chain.c: kernelA 10 records x weight 2, 1..10 µs; kernelB 5 x 3, 7 µs; one copy; one orphan record.
    assert.deepEqual(rows, [
      ['kernelA', 'kernel', '110.0 µs', '49.3%', '20', '5.5 µs', '10.0 µs'],
      ['kernelB', 'kernel', '105.0 µs', '47.1%', '15', '7.0 µs', '7.0 µs'],
      ['orphan', 'kernel', '5.0 µs', '2.2%', '1', '5.0 µs', '5.0 µs'],
      ['[memcpy HtoD]', 'memcpy HtoD', '3.0 µs', '1.3%', '1', '3.0 µs', '3.0 µs'],
    ]);
    // Shortened, the full name on hover; the whole name with short names off.
    assert.match(await page.locator('.kernel-table tbody td.fn').first().getAttribute('title'), /^kernelA\(int\)\n/);
    await page.locator('.kernel-table .short-names').uncheck();
    assert.equal(await page.locator('.kernel-table tbody td.fn').nth(1).textContent(), 'kernelB(float*, int)');
    await page.locator('.kernel-table .short-names').check();
    await page.screenshot({ path: join(OUT, 'gpu-kernel-table.png'), fullPage: true });
    // A click: the flame graph of the stacks that launched kernelB, and nothing else.
    await kit.act(() => page.locator('.kernel-table tbody tr', { hasText: 'kernelB' }).click());
    assert.equal(kit.param('view'), null);   // the flame graph, the default
    assert.equal(kit.param('through'), 'kernelB(float*, int)');
    const names = await kit.names();
    assert.ok(names.includes('phase_records_first') && names.includes('launch_kernel'), names.join(' '));
    assert.ok(!names.includes('phase_launch_first') && !names.includes('kernelA(int)') && !names.includes('[memcpy HtoD]'), names.join(' '));
    assert.equal(await page.evaluate(() => window.__flamewatch.flame.current.total[0]), 105000);
    assert.match(await page.locator('.through-chip').textContent(), /stacks through kernelB/);
    await page.screenshot({ path: join(OUT, 'gpu-kernel-stacks.png'), fullPage: true });
  });

  test('comparing two windows colours grown frames red and shrunk ones green', async () => {
    const q = encodeURIComponent('{comm="cuda_chain"}');
    await kit.go(`${fw.url}/?from=${B[0]}&to=${B[1]}&q=${q}&type=gpu_time&compare_from=${A[0]}&compare_to=${A[1]}`);
    assert.match(await page.locator('.compare-row').textContent(), /Compared with the baseline/);
    // Selection (gap): all its GPU time in kernelA under phase_gap. Baseline: kernelA
    // under phase_launch_first, kernelB, the copy and the orphan.
    assert.ok(red(await kit.color('phase_gap')), `phase_gap ${await kit.color('phase_gap')}`);
    assert.ok(green(await kit.color('phase_records_first')), `phase_records_first ${await kit.color('phase_records_first')}`);
    assert.ok(green(await kit.color('[memcpy HtoD]')), `[memcpy HtoD] ${await kit.color('[memcpy HtoD]')}`);
    // main holds the process's every launch in both: the same share.
    assert.ok(grey(await kit.color('main')), `main ${await kit.color('main')}`);
    // Both values and the difference on hover.
    const i = await page.evaluate(() => window.__flamewatch.flame.find('phase_records_first'));
    const r = await page.evaluate((n) => window.__flamewatch.flame.rect(n), i);
    const box = await page.locator('.views > .flamegraph > canvas').first().boundingBox();
    await page.mouse.move(box.x + r.x + 5, box.y + r.y + 8);
    const tip = page.locator('.views > .flamegraph > .tooltip');
    await tip.waitFor({ state: 'visible' });
    assert.match(await tip.textContent(), /baseline: 105\.0 µs \(47\.1%\)selection: 0 ns \(0%\)difference: −47\.1 points of share \(gone\)/);
    await page.screenshot({ path: join(OUT, 'compare-gpu-flamegraph.png'), fullPage: true });
    // The kernel table: baseline, selection and difference, by the size of the change.
    await kit.act(() => page.locator('.tabs button[data-view="table"]').click());
    const rows = await page.locator('.kernel-table tbody tr').evaluateAll((trs) => trs.map((tr) => [tr.children[0].textContent, tr.children[4].textContent, tr.children[4].className]));
    assert.deepEqual(rows, [
      ['kernelA', '+50.7 pt', 'num grew'], ['kernelB', '−47.1 pt', 'num shrank'],
      ['orphan', '−2.2 pt', 'num shrank'], ['[memcpy HtoD]', '−1.3 pt', 'num shrank'],
    ]);
    await page.screenshot({ path: join(OUT, 'compare-gpu-kernel-table.png'), fullPage: true });
  });

  test('a comparison over selectors, on CPU samples too, and the function table sorted by difference', async () => {
    // One process against another over one window that holds both.
    const qb = encodeURIComponent(`{pid="${pidB}"}`);
    await kit.go(`${fw.url}/?from=${A[0]}&to=${B[1]}&q=${qb}&type=gpu_time&compare_from=${A[0]}&compare_to=${B[1]}&compare_q=${qA()}`);
    assert.match(await page.locator('.compare-row').textContent(), new RegExp(`of \\{pid="${pidA}"\\}`));
    assert.ok(red(await kit.color('train_step')), `train_step ${await kit.color('train_step')}`);
    assert.ok(green(await kit.color('kernelB(float*, int)')), `kernelB ${await kit.color('kernelB(float*, int)')}`);
    await kit.act(() => page.locator('.ptype').selectOption('cpu'));
    assert.equal(kit.param('compare_q'), `{pid="${pidA}"}`);
    assert.equal(kit.param('type'), null);
    // CPU samples while the gap run spun beside cpu_split: cpu_split alone is the
    // baseline. Both processes burn a CPU, so cpu_split's frames keep about half
    // their share (green) and the gap run's are new (red).
    const both = encodeURIComponent(`{pid=~"${split.pid}|${pidB}"}`), alone = encodeURIComponent(`{pid="${split.pid}"}`);
    await kit.go(`${fw.url}/?from=${G[0]}&to=${G[1]}&q=${both}&compare_from=${G[0]}&compare_to=${G[1]}&compare_q=${alone}`);
    const cpu = await page.evaluate(() => { const t = window.__flamewatch.flame.current; return { base: t.baseTotal, sel: t.selTotal }; });
    assert.ok(cpu.base > 0 && cpu.sel > cpu.base, JSON.stringify(cpu));
    for (const f of ['hot_70', 'work_loop']) assert.ok(green(await kit.color(f)), `${f} ${await kit.color(f)}`);
    assert.ok(red(await kit.color('load_batch_stall')), `load_batch_stall ${await kit.color('load_batch_stall')}`);
    assert.ok(grey(await kit.color('all')), `all ${await kit.color('all')}`);
    await page.screenshot({ path: join(OUT, 'compare-cpu-flamegraph.png'), fullPage: true });
    await kit.act(() => page.locator('.tabs button[data-view="table"]').click());
    const head = await page.locator('.fn-table th').allTextContents();
    assert.deepEqual(head, ['Function', 'Binary', 'Baseline self', 'Selection self', 'Difference (self) ▼', 'Difference (total)']);
    const diffs = await page.locator('.fn-table tbody tr').evaluateAll((trs) => trs.map((tr) => Math.abs(parseFloat(tr.children[4].textContent.replace('−', '-')))));
    assert.ok(diffs.length > 1 && diffs.every((d, k) => !k || d <= diffs[k - 1]), `sorted by difference: ${diffs}`);
    await page.screenshot({ path: join(OUT, 'compare-cpu-table.png'), fullPage: true });
  });

  test('"compare with the window before" and "use as baseline" fill the baseline', async () => {
    await kit.go(`${fw.url}/?from=${B[0]}&to=${B[1]}&q=${qA()}&type=gpu_time`);
    await kit.act(() => page.locator('.compare-prev').click());
    const len = Number(B[1]) - Number(B[0]);
    assert.ok(Math.abs(Number(kit.param('compare_to')) - Number(B[0])) < 0.002, page.url());
    assert.ok(Math.abs(Number(kit.param('compare_from')) - (Number(B[0]) - len)) < 0.002, page.url());
    // Swapped: the window before is now the selection, and B its baseline.
    const before = [kit.param('compare_from'), kit.param('compare_to')];
    await kit.act(() => page.locator('.compare-swap').click());
    assert.deepEqual([kit.param('from'), kit.param('to')], before);
    assert.deepEqual([kit.param('compare_from'), kit.param('compare_to')].map(Number), B.map(Number));
    await kit.act(() => page.locator('.compare-off').click());
    assert.equal(kit.param('compare_from'), null);
    // A relative range gets a relative baseline, which moves along with it.
    await kit.go(`${fw.url}/?from=now-15m&to=now`);
    await kit.act(() => page.locator('.compare-prev').click());
    assert.deepEqual([kit.param('compare_from'), kit.param('compare_to')], ['now-30m', 'now-15m']);
    // A selected window becomes the baseline; the selection is cleared for the next one.
    await kit.go(`${fw.url}/?from=${A[0]}&to=${B[1]}&sf=${A[0]}&st=${A[1]}`);
    await kit.act(() => page.locator('.set-base').click());
    assert.deepEqual([kit.param('compare_from'), kit.param('compare_to'), kit.param('sf')], [A[0], A[1], null]);
  });

  test('URLs reload to the same view', async () => {
    const q = encodeURIComponent('{comm="cuda_chain"}');
    for (const u of [
      `?from=${A[0]}&to=${A[1]}&q=${qA()}&type=gpu_time&view=table`,
      `?from=${A[0]}&to=${A[1]}&q=${qA()}&type=gpu_time&through=${encodeURIComponent('kernelA(int)')}`,
      `?from=${B[0]}&to=${B[1]}&q=${q}&type=gpu_time&compare_from=${A[0]}&compare_to=${A[1]}&view=table`,
      `?from=${B[0]}&to=${B[1]}&q=${q}&type=gpu_time&compare_from=${A[0]}&compare_to=${A[1]}&zoom=cuda_chain%3Bmain`,
      `?from=${B[0]}&to=${B[1]}&q=${q}&compare_from=${A[0]}&compare_to=${A[1]}&compare_q=${qA()}&view=sandwich&fn=main`,
    ]) {
      await kit.go(`${fw.url}/${u}`);
      const view = () => page.evaluate(() => {
        const fw = window.__flamewatch, t = fw.flame.current;
        return { url: location.search, state: fw.state(), tree: t && [t.n, Array.from(t.name, (i) => t.names[i]).join(';'), Array.from(t.total).join(';')],
          zoom: fw.flame.zoomNode, rows: [...document.querySelectorAll('.views tbody tr')].filter((r) => r.offsetParent).map((r) => r.textContent),
          sandwich: document.querySelector('.sandwich-info')?.textContent };
      });
      const first = await view();
      assert.equal(first.url, u.replace(/%3B/g, '%3B'));
      await page.reload();
      await kit.loaded();
      assert.deepEqual(await view(), first, u);
    }
    // The zoom path and the comparison survive: the zoomed node is main.
    assert.equal(await page.evaluate(() => document.querySelector('.sandwich-info').textContent.startsWith('main: total')), true);
  });

  test('from the timeline: a window opens its GPU-time flame graph, a kernel its launches', async () => {
    await kit.go(`${fw.url}/?page=timeline&from=${A[0]}&to=${B[1]}&sf=${B[0]}&st=${B[1]}`);
    assert.ok(await page.locator('.open-gpu').isVisible());
    await kit.act(() => page.locator('.open-gpu').click());
    // page=profile is the default: it leaves the URL.
    assert.deepEqual(['page', 'type'].map(kit.param), [null, 'gpu_time']);
    assert.deepEqual(['sf', 'st'].map((k) => Number(kit.param(k))), B.map(Number));
    assert.ok((await kit.names()).includes('phase_gap'));
    await kit.act(() => page.goBack());
    await kit.act(() => page.locator('.open-cpu').click());
    assert.deepEqual(['page', 'type'].map(kit.param), [null, null]);
    // A click on a kernel of the first run still shows its launching stack, and
    // one more click all the launches of that kernel. (cuda_chain's kernels lie
    // microseconds apart: the click gets one of those on stream 7.)
    await kit.go(`${fw.url}/?page=timeline&from=${A[0]}&to=${A[1]}`);
    await page.evaluate(() => window.scrollTo(0, 0));
    const x = await page.evaluate((p) => {
      const fw = window.__flamewatch, k = fw.kernelTrack.data.intervals.filter((i) => i.pid === p && i.name === 'kernelB(float*, int)')[2];
      const over = document.querySelector('.samples-chart .u-over').getBoundingClientRect();
      return over.left + fw.samples.plot.valToPos((k.start + k.end) / 2e9, 'x');
    }, pidA);
    const kt = await page.locator('.gpu-kernels canvas').boundingBox();
    const rows = await page.evaluate(() => window.__flamewatch.kernelTrack.data.intervals.map((i) => `${i.device}/${i.stream}`));
    // The track's rows, in its order: by device, then stream.
    const row = [...new Set(rows)].sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).indexOf('0/7');
    await page.mouse.click(x, kt.y + 14 + row * 14 + 5);
    await page.locator('.kernel-stack').waitFor({ state: 'visible' });
    const head = await page.locator('.kernel-stack .ks-head').textContent();
    const expect = { 'kernelA(int)': ['phase_launch_first', 110000], 'kernelB(float*, int)': ['phase_records_first', 105000] };
    const name = Object.keys(expect).find((n) => head.startsWith(`${n} — kernel`));
    assert.ok(name, head);
    assert.ok((await page.locator('.ks-frames li').allTextContents()).some((f) => f.startsWith(expect[name][0])));
    await kit.act(() => page.locator('.ks-flame').click());
    assert.deepEqual(['page', 'type', 'through'].map(kit.param), [null, 'gpu_time', name]);
    assert.equal(await page.evaluate(() => window.__flamewatch.flame.current.total[0]), expect[name][1]);
  });

});

// The recording: batches the landed agent shipped while workload.py ran on a
// GPU machine (record.sh says how), replayed in order into a fresh server
// whose retention keeps data that old.
const FIXTURE = process.env.FW_GPU_FIXTURE ?? join(ROOT, 'tests/ui/fixtures/gpu');
const recorded = existsSync(join(FIXTURE, 'meta.json'));

describe('GPU time recorded on a GPU machine (tests/ui/fixtures/gpu)',
  { skip: !recorded && 'no recording in tests/ui/fixtures/gpu: tests/ui/fixtures/gpu/record.sh makes one on a GPU machine' }, () => {
  let fw, browser, page, kit, meta, q, A, B;
  const pageErrors = [];
  const test = checked(pageErrors);
  const sec = (ns) => (ns / 1e9).toFixed(3);

  before(async () => {
    meta = JSON.parse(readFileSync(join(FIXTURE, 'meta.json'), 'utf8'));
    fw = await startServer(['--retention', '36500d']);
    const dir = join(FIXTURE, 'batches');
    for (const f of readdirSync(dir).filter((n) => n.endsWith('.zst')).sort()) {
      const r = await fetch(`${fw.url}/api/v1/ingest`, { method: 'POST', body: readFileSync(join(dir, f)),
        headers: { 'Content-Type': 'application/x-protobuf', 'Content-Encoding': 'zstd' } });
      assert.equal(r.status, 200, `${f}: ${await r.text()}`);
    }
    q = encodeURIComponent(`{pid="${meta.pid}"}`);
    A = [sec(meta.a), sec(meta.b)];     // phase A
    B = [sec(meta.b), sec(meta.c)];     // phase B: more matmuls, a GELU
    browser = await launch();
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 1100 } });
    page = await ctx.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e.stack ?? e)));
    kit = pageKit(page);
  });

  after(async () => {
    await browser?.close();
    await fw?.stop();
  });

  const api = async (path, from, to) => (await fetch(`${fw.url}${path}&from=${from}&to=${to}&query=${q}`)).json();

  test('the kernel table lists the recorded kernels and copies by GPU time', async () => {
    const top = await api('/api/v1/gpu/kernels/top?limit=2000', A[0], B[1]);
    assert.ok(top.kernels.length > 3 && top.total_ns > 0, JSON.stringify(top).slice(0, 500));
    await kit.go(`${fw.url}/?from=${A[0]}&to=${B[1]}&q=${q}&type=gpu_time&view=table`);
    const rows = await page.locator('.kernel-table tbody tr').evaluateAll((trs) => trs.map((tr) =>
      ({ full: tr.dataset.name, shown: tr.children[0].textContent, kind: tr.children[1].textContent })));
    assert.deepEqual(rows.map((r) => r.full), top.kernels.map((k) => k.name));
    assert.equal(rows[0].kind, 'kernel');
    for (const kind of ['memcpy HtoD', 'memcpy DtoH', 'memcpy DtoD']) assert.ok(rows.some((r) => r.kind === kind), `a ${kind} row: ${rows.map((r) => r.kind)}`);
    // PyTorch's template kernels are shortened; the title keeps the whole name.
    const long = rows.filter((r) => r.full.length > 80);
    assert.ok(long.length && long.every((r) => r.shown.length < r.full.length), JSON.stringify(long.slice(0, 3)));
    await page.screenshot({ path: join(OUT, 'gpu-fixture-kernel-table.png'), fullPage: true });
    // The heaviest kernel: launched from Python's forward(), under train_step().
    await kit.act(() => page.locator('.kernel-table tbody tr').first().click());
    const names = await kit.names();
    assert.ok(names.includes('forward') && names.includes('train_step'), names.join(' | '));
    assert.equal(await page.evaluate(() => window.__flamewatch.flame.current.total[0]), top.kernels[0].total_ns);
    await page.screenshot({ path: join(OUT, 'gpu-fixture-kernel-stacks.png'), fullPage: true });
  });

  test('phase B against phase A: the GELU is new (red), the input copy\'s share shrank (green)', async () => {
    await kit.go(`${fw.url}/?from=${B[0]}&to=${B[1]}&q=${q}&type=gpu_time&compare_from=${A[0]}&compare_to=${A[1]}`);
    const gelu = (await kit.names()).find((n) => /gelu/i.test(n));
    assert.ok(gelu, (await kit.names()).join(' | '));
    assert.ok(green(await kit.color('[memcpy HtoD]')), `[memcpy HtoD]: ${await kit.color('[memcpy HtoD]')}`);
    // A fraction of a percent of the GPU time: narrower than a pixel until zoomed to.
    await page.evaluate((n) => { const f = window.__flamewatch.flame; f.setZoom(f.find(n)); }, gelu);
    assert.ok(red(await kit.color(gelu)), `${gelu}: ${await kit.color(gelu)}`);
    await page.evaluate(() => window.__flamewatch.flame.setZoom(0));
    await page.screenshot({ path: join(OUT, 'compare-fixture-gpu-flamegraph.png'), fullPage: true });
    await kit.act(() => page.locator('.tabs button[data-view="table"]').click());
    const rows = await page.locator('.kernel-table tbody tr').evaluateAll((trs) => trs.map((tr) =>
      ({ full: tr.dataset.name, diff: Math.abs(parseFloat(tr.children[4].textContent.replace('−', '-'))), cls: tr.children[4].className })));
    assert.ok(rows.every((r, k) => !k || r.diff <= rows[k - 1].diff), `sorted by difference: ${rows.map((r) => r.diff)}`);
    // The GELU kernel itself (the flame graph's match may be a frame above it).
    const geluKernel = rows.find((r) => /gelu/i.test(r.full));
    assert.ok(geluKernel, rows.map((r) => r.full).join(' | '));
    assert.match(geluKernel.cls, /grew/);
    await page.screenshot({ path: join(OUT, 'compare-fixture-gpu-kernel-table.png'), fullPage: true });
    // CPU samples of the same windows, compared function by function.
    await kit.act(() => page.locator('.ptype').selectOption('cpu'));
    const fns = await page.locator('.fn-table tbody tr').evaluateAll((trs) => trs.map((tr) =>
      [tr.children[0].textContent, Math.abs(parseFloat(tr.children[4].textContent.replace('−', '-')))]));
    assert.ok(fns.some(([n]) => n === 'load_batch'), fns.slice(0, 20).join(' | '));
    assert.ok(fns.every(([, d], k) => !k || d <= fns[k - 1][1]), `sorted by difference: ${fns.slice(0, 20)}`);
    await kit.act(() => page.locator('.tabs button[data-view="flame"]').click());
    const t = await page.evaluate(() => { const t = window.__flamewatch.flame.current; return [t.baseTotal, t.selTotal]; });
    assert.ok(t[0] > 0 && t[1] > 0, `CPU samples: baseline ${t[0]}, selection ${t[1]}`);
    await page.screenshot({ path: join(OUT, 'compare-fixture-cpu-flamegraph.png'), fullPage: true });
  });
});
