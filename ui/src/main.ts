// The page: time range, label selector, tracks on one time axis, and the
// profile views of the selected window. All state is in the URL (state.ts).
import './style.css';
import { ApiError, Unauthorized, Unreachable, download, getJSON, setToken, token, url,
  type ChartJSON, type ProfileJSON } from './api';
import { FlameChart } from './flamechart';
import { FlameGraph } from './flamegraph';
import { LabelInput } from './labels';
import { type Tree, applyFilters, findPath, fromJSON, pathOf, fmtValue, pct, safeRegExp } from './profile';
import { type DiffTree, diffTrees, isDiff } from './diff';
import { DIFF_SAME, diffPalette } from './colors';
import { KernelTable, type KernelsTopJSON } from './kerneltable';
import { shortKernelName } from './kname';
import { SandwichView } from './sandwich';
import { type State, DEFAULTS, encode, fmtDuration, fmtTime, parseTime, read, resolveTime } from './state';
import { FunctionTable } from './table';
import { SamplesChart, type TimeContext, type Track } from './timeline';
import { GpuCharts } from './gpucharts';
import { CpuStrips } from './strips';
import { KernelTrack, kernelChart, type KernelJSON, type KernelsJSON } from './kernels';
import { IdlePanel } from './idle';

const $ = <T extends HTMLElement>(html: string): T => {
  const t = document.createElement('template'); t.innerHTML = html.trim(); return t.content.firstElementChild as T;
};

let state: State = read();

const app = document.getElementById('app')!;
app.innerHTML = `
<header>
  <a class="logo" href="/">flamewatch</a>
  <nav class="pages"><button data-page="profile">Profile</button><button data-page="timeline">Timeline</button></nav>
  <div class="range">
    <span class="presets"></span>
    <button class="zoom-out" title="zoom out (twice the range)">−</button>
    <button class="zoom-in" title="zoom in (half the range)">+</button>
    <span class="range-text"></span>
    <form class="range-form" title="now, now-15m, now-1h30m, Unix seconds or 2026-12-02 20:15 (local time)">
      <input class="from-input" size="21" spellcheck="false" aria-label="from"> →
      <input class="to-input" size="21" spellcheck="false" aria-label="to">
      <button class="range-go">go</button><span class="range-error"></span>
    </form>
    <button class="refresh" title="reload">↻</button>
  </div>
  <button class="token-btn" title="bearer token">token</button>
</header>
<div class="query-row">
  <label>profile <select class="ptype" aria-label="profile type"><option value="cpu">CPU samples</option><option value="gpu_time">GPU time</option><option value="offcpu">Off-CPU time</option></select></label>
  <span class="label-slot"></span>
  <button class="apply">apply</button>
  <label>stack by <select class="by"></select></label>
</div>
<div class="banner" hidden></div>
<section class="tracks"></section>
<div class="window-row"><span class="window-text"></span>
  <button class="zoom-sel" hidden>zoom to selection</button><button class="clear-sel" hidden>clear selection</button>
  <button class="open-cpu" hidden title="the CPU flame graph of this window">CPU flame graph</button><button class="open-gpu" hidden title="the GPU-time flame graph of this window: GPU time under the CPU stacks that launched it">GPU-time flame graph</button>
  <button class="compare-prev" title="compare this window with the one just before it, as long">compare with the window before</button><button class="set-base" hidden title="compare other windows with this one">use as baseline</button>
  <span class="gpu-procs"></span></div>
<div class="compare-row" hidden><span class="compare-text"></span>
  <label>baseline selector <input class="compare-q" placeholder="the same as above" spellcheck="false" size="34"></label>
  <button class="compare-swap" title="swap the baseline and the selection">swap</button><button class="compare-off" title="stop comparing">×</button></div>
<div class="toolbar">
  <nav class="tabs">
    <button data-view="flame">Flame graph</button><button data-view="chart">Flame chart</button>
    <button data-view="table">Table</button><button data-view="sandwich">Sandwich</button>
  </nav>
  <input class="search" placeholder="search (regex)" spellcheck="false"><span class="search-result"></span>
  <label>colour <select class="color"><option value="binary">by binary</option><option value="kind">by frame kind</option></select></label>
  <span class="downloads">download
    <a href="#" data-fmt="pprof">pprof</a> <a href="#" data-fmt="folded">folded</a>
    <a href="#" data-fmt="speedscope">speedscope</a> <a href="#" data-fmt="trace">Perfetto trace</a></span>
</div>
<div class="filters">
  <label>hide names <input class="hide" placeholder="regex" spellcheck="false"></label>
  <label>hide binaries <input class="hidebin" placeholder="regex" spellcheck="false"></label>
  <label><input type="checkbox" class="cuda"> hide CUDA internals</label>
  <label>focus <input class="focus" placeholder="function" spellcheck="false" list="focus-functions"></label>
  <datalist id="focus-functions"></datalist>
  <label><input type="checkbox" class="invert"> invert stack</label>
  <span class="focus-chip" hidden></span><span class="through-chip" hidden></span>
</div>
<div class="notice" hidden></div>
<div class="breadcrumb"></div>
<main class="views"></main>
<div class="legend"></div>
<section class="timeline-page" hidden>
  <div class="kernel-stack" hidden></div>
  <div class="idle-slot"></div>
  <h3 class="tchart-title">Flame chart of the window</h3>
  <div class="tchart-slot"></div>
</section>
<dialog class="token-dialog"><form method="dialog">
  <p>This flamewatch server needs a bearer token (its <code>--token</code> or <code>--read-token</code>).</p>
  <input class="token-input" type="password" placeholder="token" autocomplete="off">
  <div><button value="ok">save</button> <button value="clear" formnovalidate>forget</button></div>
  <p class="small">Kept in this browser's localStorage and sent as <code>Authorization: Bearer</code>.</p>
</form></dialog>`;

const q = <T extends HTMLElement = HTMLElement>(sel: string) => app.querySelector(sel) as T;
const profileOnly = ['.toolbar', '.filters', '.breadcrumb', '.views', '.legend'];
const banner = q('.banner'), notice = q('.notice'), views = q('.views');

// ---- navigation ------------------------------------------------------------
function navigate(patch: Partial<State>, replace = false): void {
  state = { ...state, ...patch };
  const u = encode(state);
  if (replace) history.replaceState(null, '', u); else history.pushState(null, '', u);
  void load();
}
window.addEventListener('popstate', () => { state = read(); void load(); });

const PRESETS = ['5m', '15m', '1h', '6h', '24h', '7d'];
q('.presets').append(...PRESETS.map((p) => {
  const b = $<HTMLButtonElement>(`<button data-preset="${p}">${p}</button>`);
  b.addEventListener('click', () => navigate({ from: `now-${p}`, to: 'now', sf: undefined, st: undefined }));
  return b;
}));
function rangeNow(): [number, number] {
  const now = Date.now() / 1000;
  return [resolveTime(state.from, now), resolveTime(state.to, now)];
}
function zoomBy(k: number): void {
  const [a, b] = rangeNow(), mid = (a + b) / 2, half = ((b - a) / 2) * k;
  const now = Date.now() / 1000;
  const to = Math.min(mid + half, now);
  navigate({ from: (to - 2 * half).toFixed(3), to: to >= now - 1 ? 'now' : to.toFixed(3), sf: undefined, st: undefined });
}
app.querySelectorAll<HTMLButtonElement>('.pages button').forEach((b) =>
  b.addEventListener('click', () => navigate({ page: b.dataset.page as State['page'] })));
// Free-form range: kept in the URL as typed, so "now-1h" stays relative.
// Unix seconds in the URL show as local times (with milliseconds, which
// read back exactly); an input left as shown keeps the URL's value.
function showTime(v: string): string {
  if (!/^\d+(\.\d+)?$/.test(v)) return v;
  const ms = Math.round((Number(v) % 1) * 1000);
  return `${fmtTime(Math.floor(Number(v)))}${ms ? `.${String(ms).padStart(3, '0')}` : ''}`;
}
const typed = (el: string, cur: string) => {
  const v = q<HTMLInputElement>(el).value.trim();
  return v === showTime(cur) ? cur : v;
};
q('.range-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const f = typed('.from-input', state.from), t = typed('.to-input', state.to) || 'now';
  const now = Date.now() / 1000, a = parseTime(f, now), b = parseTime(t, now);
  const err = isNaN(a) ? `from: '${f}' is not a time` : isNaN(b) ? `to: '${t}' is not a time` : a >= b ? 'from must be before to' : '';
  q('.range-error').textContent = err;
  if (!err) navigate({ from: f, to: t, sf: undefined, st: undefined });
});
q('.zoom-out').addEventListener('click', () => zoomBy(2));
q('.zoom-in').addEventListener('click', () => zoomBy(0.5));
q('.refresh').addEventListener('click', () => void load());
q('.zoom-sel').addEventListener('click', () => {
  if (state.sf !== undefined && state.st !== undefined) navigate({ from: state.sf.toFixed(3), to: state.st.toFixed(3), sf: undefined, st: undefined });
});
q('.clear-sel').addEventListener('click', () => navigate({ sf: undefined, st: undefined }));
// From the timeline, the window's flame graph of either type, one click each.
q('.open-cpu').addEventListener('click', () => navigate({ page: 'profile', type: 'cpu', view: 'flame', zoom: '', through: '' }));
q('.open-gpu').addEventListener('click', () => navigate({ page: 'profile', type: 'gpu_time', view: 'flame', zoom: '', through: '' }));

// ---- comparison --------------------------------------------------------------
/* "now-30m" for a time that many seconds before now, to keep a relative range relative. */
const ago = (sec: number) => `now-${sec % 60 === 0 ? `${sec / 60}m` : `${+sec.toFixed(3)}s`}`;
q('.compare-prev').addEventListener('click', () => {
  const w = window_(), len = w.to - w.from;
  // A range that ends now moves on: its baseline must move along with it.
  const rel = state.sf === undefined && state.to === 'now';
  const now = Date.now() / 1000, back = Math.round(now - w.from);
  navigate(rel && Math.abs(now - w.to) < 1 && Number.isInteger(len)
    ? { compare_from: ago(back + len), compare_to: ago(back) }
    : { compare_from: (w.from - len).toFixed(3), compare_to: w.from.toFixed(3) });
});
q('.set-base').addEventListener('click', () => {
  if (state.sf === undefined || state.st === undefined) return;
  navigate({ compare_from: state.sf.toFixed(3), compare_to: state.st.toFixed(3), compare_q: undefined, sf: undefined, st: undefined });
});
q('.compare-off').addEventListener('click', () => navigate({ compare_from: undefined, compare_to: undefined, compare_q: undefined }));
q('.compare-swap').addEventListener('click', () => {
  const w = window_(), bq = state.compare_q;
  navigate({ compare_from: w.from.toFixed(3), compare_to: w.to.toFixed(3), compare_q: bq === undefined ? undefined : state.q,
    from: state.compare_from!, to: state.compare_to!, sf: undefined, st: undefined, q: bq ?? state.q });
});
q<HTMLInputElement>('.compare-q').addEventListener('change', (e) => {
  const v = (e.target as HTMLInputElement).value.trim();
  navigate({ compare_q: v === '' ? undefined : v });
});
const comparing = () => state.compare_from !== undefined && state.compare_to !== undefined;

const labels = new LabelInput((v) => navigate({ q: v }));
q('.label-slot').append(labels.el);
q('.apply').addEventListener('click', () => navigate({ q: labels.input.value.trim() }));
const bySel = q<HTMLSelectElement>('.by');
bySel.addEventListener('change', () => navigate({ by: bySel.value }));
const typeSel = q<HTMLSelectElement>('.ptype');
// A zoom path, sandwich function or kernel of one type means nothing in the other.
typeSel.addEventListener('change', () => navigate({ type: typeSel.value as State['type'], zoom: '', fn: '', through: '' }));

app.querySelectorAll<HTMLButtonElement>('.tabs button').forEach((b) =>
  b.addEventListener('click', () => navigate({ view: b.dataset.view as State['view'] })));
const search = q<HTMLInputElement>('.search');
search.addEventListener('input', () => { state.search = search.value; history.replaceState(null, '', encode(state)); applySearch(); });
q<HTMLSelectElement>('.color').addEventListener('change', (e) => navigate({ color: (e.target as HTMLSelectElement).value as State['color'] }));
for (const k of ['hide', 'hidebin', 'focus'] as const) {
  const el = q<HTMLInputElement>(`.${k}`);
  el.addEventListener('change', () => navigate({ [k]: el.value }));
}
for (const k of ['cuda', 'invert'] as const) {
  const el = q<HTMLInputElement>(`.${k}`);
  el.addEventListener('change', () => navigate({ [k]: el.checked, zoom: '' }));
}

// ---- token -----------------------------------------------------------------
const dialog = q<HTMLDialogElement>('.token-dialog');
function askToken(): void {
  if (dialog.open) return;
  q<HTMLInputElement>('.token-input').value = token() ?? '';
  dialog.showModal();
}
dialog.addEventListener('close', () => {
  if (dialog.returnValue === 'ok') setToken(q<HTMLInputElement>('.token-input').value.trim() || null);
  else if (dialog.returnValue === 'clear') setToken(null);
  void load();
});
q('.token-btn').addEventListener('click', askToken);

// ---- tracks on the shared time axis ----------------------------------------
const selectWindow = (sel: [number, number] | null) => {
  if (!sel) return;
  navigate({ sf: +sel[0].toFixed(3), st: +sel[1].toFixed(3) });
};
const samples = new SamplesChart(selectWindow);
const gpuCharts = new GpuCharts(selectWindow);
const strips = new CpuStrips(selectWindow, (p) => navigate({ q: p.pid ? `{pid="${p.pid}"}` : `{comm="${p.comm.replace(/["\\]/g, '\\$&')}"}` }));
const kernelTrack = new KernelTrack(selectWindow, (k, d) => showKernelStack(k, d));
// The profile page shows the samples chart; the timeline shows every track.
const allTracks: Track[] = [samples, gpuCharts, strips, kernelTrack];
const tracksOf = (): Track[] => (state.page === 'timeline' ? allTracks : [samples]);
q('.tracks').append(...allTracks.map((t) => t.el));
let trackKey = '';
const tchart = new FlameChart((sel) => selectWindow(sel));
tchart.maxLanes = 8;
q('.tchart-slot').append(tchart.el);
const idle = new IdlePanel(() => navigate({ gpu: undefined }));
q('.idle-slot').append(idle.el);

function showKernelStack(k: KernelJSON, d: KernelsJSON): void {
  const box = q('.kernel-stack');
  box.hidden = false;
  box.innerHTML = '';
  const head = $<HTMLDivElement>('<div class="ks-head"></div>');
  head.textContent = `${k.name} — ${k.kind}, ${fmtDuration((k.end - k.start) / 1e9)} on gpu ${k.device} stream ${k.stream}, launched by ${k.comm} (pid ${k.pid}):`;
  const close = $<HTMLButtonElement>('<button title="close">×</button>');
  close.addEventListener('click', () => { box.hidden = true; });
  // All of this kernel's launches in the window, as a GPU-time flame graph.
  const all = $<HTMLButtonElement>('<button class="ks-flame">GPU-time flame graph of its launches</button>');
  all.addEventListener('click', () => navigate({ page: 'profile', type: 'gpu_time', view: 'flame', through: k.name, zoom: '', focus: '' }));
  head.append(' ', all, ' ', close);
  const list = document.createElement('ol');
  list.className = 'ks-frames';
  const frames = k.stack === null ? [] : (d.stacks[k.stack] ?? []).map((f) => d.frames[f]).reverse();
  for (const f of frames) {
    const li = document.createElement('li');
    li.textContent = f.name;
    const bin = document.createElement('span');
    bin.className = 'ks-bin';
    bin.textContent = ` ${f.binary} ${f.kind}`;
    li.append(bin);
    list.append(li);
  }
  if (!frames.length) list.append('no launching stack (the launch was not seen: sampled out, or before the agent attached)');
  box.append(head, list);
}

/* One button per process that uses a GPU in the window: "why is the GPU idle?". */
function drawGpuProcs(): void {
  const box = q('.gpu-procs');
  box.innerHTML = '';
  if (state.page !== 'timeline') return;
  const procs = kernelTrack.procs();
  for (const [pid, comm] of gpuCharts.procs) if (!procs.has(pid)) procs.set(pid, comm);
  if (!procs.size) return;
  box.append('Why is the GPU idle? ');
  for (const [pid, comm] of [...procs].slice(0, 12)) {
    const b = $<HTMLButtonElement>('<button class="idle-btn"></button>');
    b.textContent = `${comm || 'pid'} ${pid}`;
    b.dataset.pid = String(pid);
    b.classList.toggle('active', state.gpu === pid);
    b.addEventListener('click', () => navigate({ gpu: state.gpu === pid ? undefined : pid }));
    box.append(b);
  }
}

// ---- views -----------------------------------------------------------------
const flame = new FlameGraph({
  onZoom: (i) => { const t = flame.current; if (t) { state.zoom = pathOf(t, i); history.pushState(null, '', encode(state)); drawBreadcrumb(); } },
  onContext: (i) => { const t = flame.current; if (t && i > 0) navigate({ focus: t.names[t.name[i]], zoom: '' }); },
});
const chart = new FlameChart((sel) => selectWindow(sel));
const table = new FunctionTable((fn) => navigate({ view: 'sandwich', fn }));
// With GPU time the table lists kernels; a click shows the stacks that launched one.
const kernelTable = new KernelTable((name) => navigate({ view: 'flame', through: name, zoom: '', focus: '' }));
const sand = new SandwichView((fn) => navigate({ fn }));
const viewEls: Record<State['view'], HTMLElement> = { flame: flame.el, chart: chart.el, table: table.el, sandwich: sand.el };
views.append(...Object.values(viewEls), kernelTable.el);

let profile: Tree | null = null;   // as the server sent it
let shown: Tree | null = null;     // after filters
let baseShown: Tree | null = null; // the baseline, after the same filters, when comparing
let kernelsTop: KernelsTopJSON | null = null, baseKernelsTop: KernelsTopJSON | null = null;
let chartData: ChartJSON | null = null;
let chartKey = '';
let inflight: AbortController | null = null;
let retry: number | undefined;

function window_(): { from: number; to: number } {
  const [a, b] = rangeNow();
  return state.sf !== undefined && state.st !== undefined ? { from: state.sf, to: state.st } : { from: a, to: b };
}
function apiParams(extra: Record<string, string | number> = {}) {
  const w = window_();
  return { from: w.from.toFixed(3), to: w.to.toFixed(3), query: state.q, type: state.type === 'cpu' ? '' : state.type, ...extra };
}
/*
 * The flame chart's query: a CPU chart asks for the threads' off-CPU
 * blocks too (none come when none were recorded), to draw them beside
 * the samples; an off-CPU chart's events are the blocks.
 */
function chartParams(extra: Record<string, string | number> = {}) {
  return apiParams({ ...(state.type === 'cpu' ? { with: 'offcpu' } : {}), ...extra });
}
/* The baseline's window (Unix seconds) and selector. */
function baseWindow(): { from: number; to: number; query: string } {
  const now = Date.now() / 1000;
  return { from: resolveTime(state.compare_from!, now), to: resolveTime(state.compare_to!, now), query: state.compare_q ?? state.q };
}
function baseParams(extra: Record<string, string | number> = {}) {
  const b = baseWindow();
  return { ...apiParams(extra), from: b.from.toFixed(3), to: b.to.toFixed(3), query: b.query };
}

function showBanner(kind: string, html: string): void {
  banner.hidden = false; banner.className = `banner ${kind}`; banner.innerHTML = html;
}

function drawBreadcrumb(): void {
  const bc = q('.breadcrumb');
  bc.innerHTML = '';
  const t = flame.current;
  if (!t || state.view !== 'flame') return;
  const chain: number[] = [];
  for (let c = flame.zoomNode; c >= 0; c = t.parent[c]) chain.unshift(c);
  chain.forEach((i, k) => {
    const a = $<HTMLAnchorElement>('<a href="#"></a>');
    a.textContent = t.names[t.name[i]];
    a.addEventListener('click', (e) => { e.preventDefault(); flame.setZoom(i); state.zoom = pathOf(t, i); history.pushState(null, '', encode(state)); drawBreadcrumb(); });
    if (k) bc.append(' › ');
    bc.append(a);
  });
  if (state.focus) bc.append(` (focused on ${state.focus})`);
  const hint = document.createElement('span');
  hint.className = 'hint';
  hint.textContent = 'click: zoom · right-click: focus · Esc: reset zoom · /: search';
  bc.append(hint);
}

function applySearch(): void {
  const re = safeRegExp(state.search);
  const out = q('.search-result');
  if (state.view === 'chart') { chart.setSearch(re); out.textContent = ''; return; }
  const r = flame.setSearch(re);
  const t = flame.current;
  if (re && isDiff(t)) {
    let b = 0, s = 0;
    for (const i of r.outer) { b += t.base[i]; s += t.sel[i]; }
    out.textContent = `${r.count} matches: baseline ${pct(b, t.baseTotal)}, selection ${pct(s, t.selTotal)}`;
    return;
  }
  out.textContent = re && shown ? `${r.count} matches: ${fmtValue(r.sum, shown.unit)} (${pct(r.sum, shown.total[0])})` : '';
}

function drawLegend(): void {
  const leg = q('.legend');
  leg.innerHTML = '';
  if (state.view !== 'flame' && state.view !== 'sandwich') return;
  const d = flame.current;
  if (isDiff(d)) {
    const p = diffPalette(), steps = (p.colors.length - 1) / 2;
    const item = (color: string, text: string) => {
      const s = $<HTMLSpanElement>(`<span class="item"><i style="background:${color}"></i></span>`);
      s.append(text);
      leg.append(s);
    };
    item(p.colors[2 * steps], 'share shrank (only in the baseline: deepest)');
    item(DIFF_SAME, 'about the same');
    item(p.colors[steps], 'share grew (only in the selection: deepest)');
    leg.append(`baseline ${fmtValue(d.baseTotal, d.valueUnit)}, selection ${fmtValue(d.selTotal, d.valueUnit)}; width: the mean of both shares`);
    return;
  }
  const src = state.invert && profile ? applyFilters(profile, { ...state, invert: false }) : undefined;
  for (const r of flame.legend(src).slice(0, 16)) {
    const s = $<HTMLSpanElement>(`<span class="item"><i style="background:${r.color}"></i></span>`);
    s.append(`${r.cat} ${shown ? pct(r.value, shown.total[0]) : ''}`);
    leg.append(s);
  }
}

function syncControls(): void {
  const [a, b] = rangeNow();
  app.querySelectorAll<HTMLButtonElement>('.presets button').forEach((p) =>
    p.classList.toggle('active', state.to === 'now' && state.from === `now-${p.dataset.preset}`));
  q('.range-text').textContent = state.to === 'now' && state.from.startsWith('now-') ? `last ${state.from.slice(4)}` : `${fmtTime(a)} → ${fmtTime(b)} (${fmtDuration(b - a)})`;
  if (document.activeElement !== labels.input) labels.input.value = state.q;
  search.value = state.search;
  q<HTMLSelectElement>('.color').value = state.color;
  q<HTMLInputElement>('.hide').value = state.hide;
  q<HTMLInputElement>('.hidebin').value = state.hidebin;
  q<HTMLInputElement>('.focus').value = state.focus;
  q<HTMLInputElement>('.cuda').checked = state.cuda;
  q<HTMLInputElement>('.invert').checked = state.invert;
  app.querySelectorAll<HTMLButtonElement>('.tabs button').forEach((t) => t.classList.toggle('active', t.dataset.view === state.view));
  for (const [k, el] of Object.entries(viewEls)) el.hidden = k !== state.view;
  app.querySelectorAll<HTMLButtonElement>('.pages button').forEach((t) => t.classList.toggle('active', t.dataset.page === state.page));
  const tl = state.page === 'timeline';
  for (const sel of profileOnly) q(sel).hidden = tl;
  q('.timeline-page').hidden = !tl;
  for (const t of allTracks) if (!tl && t !== samples) t.el.hidden = true;
  idle.el.hidden = !tl || state.gpu === undefined;
  if (document.activeElement !== q('.from-input')) q<HTMLInputElement>('.from-input').value = showTime(state.from);
  if (document.activeElement !== q('.to-input')) q<HTMLInputElement>('.to-input').value = showTime(state.to);
  const sel = state.sf !== undefined;
  q('.zoom-sel').hidden = !sel; q('.clear-sel').hidden = !sel;
  // Comparing is the profile page's; the timeline opens either type of flame graph.
  q('.set-base').hidden = !sel || tl;
  q('.compare-prev').hidden = tl;
  q('.open-cpu').hidden = q('.open-gpu').hidden = !tl;
  typeSel.value = state.type;
  // The table of the GPU-time profile is the kernel table.
  const kt = state.view === 'table' && state.type === 'gpu_time';
  table.el.hidden = state.view !== 'table' || kt;
  kernelTable.el.hidden = !kt;
  const cmp = comparing();
  q('.compare-row').hidden = !cmp || tl;
  if (cmp) {
    const b = baseWindow();
    q('.compare-text').textContent = `Compared with the baseline ${fmtTime(b.from)} → ${fmtTime(b.to)} (${fmtDuration(b.to - b.from)})` +
      (state.compare_q !== undefined ? ` of ${state.compare_q || 'everything'}` : '') + ': red grew, green shrank.';
    if (document.activeElement !== q('.compare-q')) q<HTMLInputElement>('.compare-q').value = state.compare_q ?? '';
  }
  const tc = q('.through-chip');
  tc.hidden = !state.through;
  tc.innerHTML = '';
  if (state.through) {
    const sp = document.createElement('span');
    sp.textContent = `stacks through ${shortKernelName(state.through)} `;
    sp.title = state.through;
    const x = $<HTMLButtonElement>('<button title="show all stacks">×</button>');
    x.addEventListener('click', () => navigate({ through: '', zoom: '' }));
    tc.append(sp, x);
  }
  const w = window_();
  q('.window-text').textContent = `${sel ? 'Selected window' : 'Window'}: ${fmtTime(w.from)} → ${fmtTime(w.to)} (${fmtDuration(w.to - w.from)})` +
    (sel ? '' : ' — drag on the chart to select a part');
  const chip = q('.focus-chip');
  chip.hidden = !state.focus;
  chip.innerHTML = '';
  if (state.focus) {
    chip.append(`focus: ${state.focus} `);
    const x = $<HTMLButtonElement>('<button title="remove focus">×</button>');
    x.addEventListener('click', () => navigate({ focus: '', zoom: '' }));
    chip.append(x);
  }
}

function handleError(e: unknown): boolean {
  if ((e as Error).name === 'AbortError') return true;
  if (e instanceof Unauthorized) {
    showBanner('error', 'This server needs a token. <button class="ask-token">enter token</button>');
    banner.querySelector('.ask-token')!.addEventListener('click', askToken);
    askToken();
  } else if (e instanceof Unreachable) {
    showBanner('error', 'The flamewatch server cannot be reached. Retrying every 5 s… <button class="retry">retry now</button>');
    banner.querySelector('.retry')!.addEventListener('click', () => void load());
    clearTimeout(retry);
    retry = window.setTimeout(() => void load(), 5000);
  } else if (e instanceof ApiError) {
    showBanner('error', '');
    banner.textContent = `The server answered ${e.status}: ${e.message}`;
  } else {
    showBanner('error', '');
    banner.textContent = `Error: ${(e as Error).message}`;
  }
  return false;
}

let diffKey: [Tree | null, Tree | null, DiffTree | null] = [null, null, null];
/* The comparison's merged tree, built once per pair of filtered trees. */
function diffTree(): DiffTree {
  if (diffKey[0] !== baseShown || diffKey[1] !== shown) diffKey = [baseShown, shown, diffTrees(baseShown!, shown!)];
  return diffKey[2]!;
}

function renderViews(): void {
  if (!profile) return;
  const graph = baseShown ? diffTree() : shown!;
  if (state.view === 'flame') {
    flame.setTree(graph, state.color);
    flame.setZoom(findPath(graph, state.zoom));
    drawBreadcrumb();
  } else {
    q('.breadcrumb').innerHTML = '';
  }
  if (state.view === 'table' && state.type === 'gpu_time' && kernelsTop) kernelTable.set(kernelsTop, baseKernelsTop);
  else if (state.view === 'table') table.setTree(shown!, baseShown);
  if (state.view === 'sandwich') { sand.show(shown!, state.fn, state.color, baseShown); flame.setTree(graph, state.color); }
  applySearch();
  drawLegend();
}

async function loadChart(signal: AbortSignal): Promise<void> {
  chart.axis = rangeNow();
  const key = JSON.stringify([apiParams(), state.color]);
  // A time-ordered chart has no baseline to be coloured against.
  const only = comparing() ? 'The flame chart shows the selection only; the flame graph, table and sandwich compare. ' : '';
  if (only) { notice.hidden = false; notice.textContent = only; }
  if (key === chartKey && chartData) { chart.resetView(); return; }
  if (state.type === 'gpu_time') {
    const { from, to, query } = apiParams();
    try {
      chartData = kernelChart(await getJSON<KernelsJSON>(url('/api/v1/gpu/kernels', { from, to, query }), signal));
    } catch (e) {
      // More intervals than the route sends: say so, as the CPU chart does for its stride.
      if (!(e instanceof ApiError) || e.status !== 400) throw e;
      chartData = null;
      notice.hidden = false;
      notice.textContent = `${only}GPU flame chart: ${e.message}`;
      return;
    }
  } else {
    chartData = await getJSON<ChartJSON>(url('/api/v1/flamechart', chartParams()), signal);
  }
  chartKey = key;
  chart.setData(chartData, state.color);
  const bs = chartData.blocked_stride ?? 1;
  if (chartData.stride > 1 || bs > 1) {
    const what = state.type === 'offcpu' ? 'off-CPU block' : 'sample';
    notice.hidden = false;
    notice.textContent = `${only}The flame chart keeps ` + (chartData.stride > 1 ? `one ${what} in ${chartData.stride} of this window (${chartData.samples.toLocaleString()} shown)` : '') +
      (chartData.stride > 1 && bs > 1 ? ' and ' : '') + (bs > 1 ? `one off-CPU block in ${bs} (${(chartData.blocks ?? 0).toLocaleString()} shown)` : '') +
      `: select a shorter window for every ${what}.`;
  }
}

let loads = 0;
export async function load(): Promise<void> {
  const id = ++loads;
  inflight?.abort();
  const ac = new AbortController();
  inflight = ac;
  clearTimeout(retry);
  syncControls();
  const t0 = performance.now();
  const [a, b] = rangeNow();
  labels.resetCache({ from: a, to: b });
  const ctx: TimeContext = { from: a, to: b, query: state.q, by: state.by, type: state.type, selection: state.sf !== undefined ? [state.sf, state.st!] as [number, number] : null, signal: ac.signal };
  // A new selection in the same range only moves the tracks' selection.
  const key = JSON.stringify([state.page, a, b, state.q, state.by, state.type]);
  const same = key === trackKey && state.to !== 'now';
  const tl = state.page === 'timeline';
  const w = window_();
  const cmp = comparing() && !tl;
  const kt = state.type === 'gpu_time' && state.view === 'table' && !tl;
  const top = (p: ReturnType<typeof apiParams>) => getJSON<KernelsTopJSON>(url('/api/v1/gpu/kernels/top', { from: p.from, to: p.to, query: p.query, limit: 2000 }), ac.signal);
  try {
    // All at once, and awaited together: an aborted load leaves no promise unhandled.
    const [ln, j, bj, kj, bkj] = await Promise.all([
      getJSON<{ names: string[] }>(url('/api/v1/labels', { from: Math.floor(a), to: Math.ceil(b) }), ac.signal),
      getJSON<ProfileJSON>(url('/api/v1/profile', apiParams({ max_nodes: state.mn })), ac.signal),
      cmp ? getJSON<ProfileJSON>(url('/api/v1/profile', baseParams({ max_nodes: state.mn })), ac.signal) : null,
      kt ? top(apiParams()) : null,
      kt && cmp ? top(baseParams()) : null,
      ...tracksOf().map((t) => (same ? (t.select(ctx.selection), Promise.resolve(true)) : t.update(ctx))),
      tl ? getJSON<ChartJSON>(url('/api/v1/flamechart', chartParams({ max_samples: 50000 })), ac.signal).then((d) => { tchart.axis = [a, b]; tchart.setData(d, state.color); }) : null,
      tl && state.gpu !== undefined ? idle.load(state.gpu, w.from, w.to, ac.signal).then((r) => { kernelTrack.idleGaps = r.gaps.map(([s, e]) => [s / 1e9, e / 1e9]); })
        : (kernelTrack.idleGaps = [], null),
    ]) as [{ names: string[] }, ProfileJSON, ProfileJSON | null, KernelsTopJSON | null, KernelsTopJSON | null, ...unknown[]];
    trackKey = key;
    if (tl) { kernelTrack.render(); drawGpuProcs(); } else q('.gpu-procs').innerHTML = '';
    if (id !== loads) return;
    const opts = [...new Set(['comm', ...ln.names])];
    bySel.replaceChildren(...opts.map((n) => { const o = document.createElement('option'); o.value = o.textContent = n; return o; }));
    bySel.value = state.by;
    banner.hidden = true;
    notice.hidden = true;
    profile = fromJSON(j);
    shown = applyFilters(profile, state);
    baseShown = bj ? applyFilters(fromJSON(bj), state) : null;
    kernelsTop = kj; baseKernelsTop = bkj;
    const fns = [...new Set(Array.from({ length: Math.min(profile.n, 4000) }, (_, i) => profile!.names[profile!.name[i]]))].slice(0, 400);
    q('#focus-functions').replaceChildren(...fns.map((n) => { const o = document.createElement('option'); o.value = n; return o; }));
    if (j.total === 0 && !(bj && bj.total > 0)) {
      showBanner('empty', `<b>No ${{ cpu: 'samples', gpu_time: 'GPU time', offcpu: 'off-CPU time' }[state.type]}</b> ${state.q ? `match <code></code> ` : ''}between ${fmtTime(ctx.selection?.[0] ?? a)} and ${fmtTime(ctx.selection?.[1] ?? b)}. ` +
        'If flamewatch has just started, samples show up after its first flush (10 s by default) and this page looks again every 5 s; otherwise pick a longer range or another selector.');
      const code = banner.querySelector('code'); if (code) code.textContent = state.q;
      // A range that ends now fills up by itself: look again shortly.
      if (state.to === 'now' && state.sf === undefined) retry = window.setTimeout(() => void load(), 5000);
    } else if (j.trimmed.nodes > 0) {
      notice.hidden = false;
      notice.innerHTML = '';
      notice.append(`Trimmed: ${j.trimmed.nodes.toLocaleString()} small nodes (${fmtValue(j.trimmed.value, j.unit)}, ${pct(j.trimmed.value, j.total)} of the total) ` +
        `are left out to keep ${state.mn.toLocaleString()} nodes; their time still counts in their parents. `);
      const more = $<HTMLButtonElement>('<button>show more nodes</button>');
      more.addEventListener('click', () => navigate({ mn: Math.min(state.mn * 4, 1000000) }));
      notice.append(more);
    }
    if (bj && bj.total === 0) {
      notice.hidden = false;
      notice.textContent = 'The baseline has no samples: every frame of the selection is new (red).';
    }
    renderViews();
    if (state.view === 'chart' && j.total > 0 && !tl) await loadChart(ac.signal);
    document.body.dataset.loaded = String(id);
    document.body.dataset.loadMs = (performance.now() - t0).toFixed(1);
  } catch (e) {
    if (id === loads) handleError(e);
  }
}

// Downloads of the current selection, through fetch so the token goes along.
app.querySelectorAll<HTMLAnchorElement>('.downloads a').forEach((a) => a.addEventListener('click', (e) => {
  e.preventDefault();
  const fmt = a.dataset.fmt!;
  const w = window_();
  const stamp = fmtTime(w.from).replace(/[: ]/g, '-');
  const [path, params, name] = fmt === 'trace'
    ? ['/api/v1/flamechart', chartParams({ format: 'trace' }), `flamewatch-${stamp}.trace.json`]
    : ['/api/v1/profile', apiParams({ format: fmt }),
      `flamewatch-${stamp}.${fmt === 'pprof' ? 'pb.gz' : fmt === 'folded' ? 'folded' : 'speedscope.json'}`];
  download(url(path, params), name).catch(handleError);
}));

document.addEventListener('keydown', (e) => {
  if (e.key === '/' && document.activeElement === document.body) { e.preventDefault(); search.focus(); }
  if (e.key === 'Escape' && state.view === 'flame') { flame.setZoom(0); state.zoom = ''; history.pushState(null, '', encode(state)); drawBreadcrumb(); }
});

void DEFAULTS;
// For the browser tests: the page's parts, to read what they drew, and its state.
(window as unknown as { __flamewatch: unknown }).__flamewatch = { idle, tchart, kernelTrack, gpuCharts, strips, samples,
  flame, chart, table, kernelTable, sand, state: () => state };
void load();
