// The time-ordered flame chart: one lane per thread, consecutive samples of
// one thread that share a stack prefix merge into one block per depth.
// Written here rather than taken from flame-chart-js so that lanes and the
// time axis are ours: the chart is drawn on the page's time axis (the range
// of the charts above it, in the same columns: axis.ts), so that a moment
// sits at the same x in every track; its samples are those of the selected
// window, which is shaded. A drag selects a window, as on any track.
//
// A thread's off-CPU blocks (the server's "blocked" spans, or the events
// themselves of an off-CPU chart) are drawn in its lane where they were,
// each its own column of the stack it blocked in, faded and hatched so
// that waiting never reads as running; they are never merged with what
// follows, since the thread ran in between.
import type { ChartJSON } from './api';
import { Brush, plotColumns } from './axis';
import { Palette, type ColorMode, basename } from './colors';
import { KIND_NAMES } from './profile';
import { fmtDuration, fmtTime } from './state';

const ROW = 16, HEAD = 18, AXIS = 22;

interface Lane {
  label: string; samples: number; blockedNs: number; depth: number;
  // blocks by depth, each sorted by start: [start, end, frame] triples (ns);
  // rows on CPU, brows blocked (index: the block's stack in the data)
  rows: Float64Array[]; brows: Float64Array[];
  blocked: [number, number, number][];
}

/* Triples of one depth come out in any order; sorted by start for the hit test. */
function sortTriples(r: number[]): Float64Array {
  const idx = Array.from({ length: r.length / 3 }, (_, i) => i).sort((a, b) => r[a * 3] - r[b * 3]);
  const out = new Float64Array(r.length);
  idx.forEach((j, i) => { out[i * 3] = r[j * 3]; out[i * 3 + 1] = r[j * 3 + 1]; out[i * 3 + 2] = r[j * 3 + 2]; });
  return out;
}

/* Milliseconds with a decimal below a second: blocks are often a few ms. */
function fmtSpan(ns: number): string {
  return ns < 1e9 ? `${+(ns / 1e6).toFixed(ns < 1e8 ? 1 : 0)} ms` : fmtDuration(ns / 1e9);
}

const KERNEL = 1;

/*
 * Where a block waited, leaf first: its user-space frames from the call
 * that blocked up to the caller's code (the first frame of another binary)
 * and one more, e.g. "read ← load_batch ← main"; a kernel thread's own frames.
 */
export function blockedWhere(d: ChartJSON, stack: number): string {
  const frames = (d.stacks[stack] ?? []).map((f) => d.frames[f]);
  let user = frames.filter((f) => f[2] !== KERNEL).reverse();
  if (!user.length) user = frames.slice().reverse();
  const out: string[] = [];
  let other = -1;
  for (let i = 0; i < user.length && out.length < 5; i++) {
    out.push(user[i][0] || '[unknown]');
    if (other < 0 && user[i][1] !== user[0][1]) other = i;
    if (other >= 0 && i >= other + 1) break;
  }
  return out.join(' ← ') + (out.length < user.length ? ' ← …' : '');
}

export class FlameChart {
  readonly el = document.createElement('div');
  private canvas = document.createElement('canvas');
  private tip = document.createElement('div');
  data: ChartJSON | null = null;
  private lanes: Lane[] = [];
  private palette = new Palette();
  private frameColor: Int32Array = new Int32Array(0);
  private hatch: CanvasPattern | null = null;
  private match: Uint8Array | null = null;
  private vs = 0; private ve = 1;   // visible window, ns
  lastRenderMs = 0;
  maxLanes = 64;

  private brush: Brush;

  constructor(onSelect: (sel: [number, number]) => void = () => {}) {
    this.el.className = 'flamechart';
    this.tip.className = 'tooltip';
    this.el.append(this.canvas, this.tip);
    this.brush = new Brush(this.canvas, (x) => this.timeAt(x) / 1e9, onSelect, () => {}, () => this.render());
    this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.style.display = 'none'; });
    new ResizeObserver(() => this.render()).observe(this.el);
  }

  /* ns at x (CSS px from the canvas's left edge). */
  private timeAt(x: number): number {
    const c = plotColumns(this.canvas);
    return this.vs + ((x - c.left) / c.width) * (this.ve - this.vs);
  }

  setData(d: ChartJSON, mode: ColorMode): void {
    this.data = d;
    this.palette = new Palette();
    this.frameColor = new Int32Array(d.frames.length);
    d.frames.forEach((f, i) => { this.frameColor[i] = this.palette.index(mode, f[2], f[1], f[0]); });
    // Busiest first; threads that only waited after them, longest waits first.
    this.lanes = d.lanes.map((l) => this.buildLane(d, l)).sort((a, b) => b.samples - a.samples || b.blockedNs - a.blockedNs);
    this.match = null;
    this.resetView();
  }

  /* The page's time axis, Unix seconds; null: the data's own window. */
  axis: [number, number] | null = null;

  /* The whole axis, not just where the samples are. */
  resetView(): void {
    if (!this.data) return;
    this.vs = this.axis ? this.axis[0] * 1e9 : this.data.from;
    this.ve = this.axis ? this.axis[1] * 1e9 : this.data.to;
    this.render();
  }

  private buildLane(d: ChartJSON, l: ChartJSON['lanes'][number]): Lane {
    const rows: number[][] = [];
    const open: { frame: number; start: number }[] = [];
    let prevEnd = -Infinity, samples = 0, blockedNs = 0;
    const close = (from: number, end: number) => {
      for (let k = open.length - 1; k >= from; k--) {
        (rows[k] ??= []).push(open[k].start, end, open[k].frame);
      }
      open.length = from;
    };
    // An off-CPU chart's events are blocks: nothing of it ran.
    const offcpu = d.type === 'offcpu';
    const blocked = offcpu ? l.events : (l.blocked ?? []);
    for (const [start, end, stack] of offcpu ? [] : l.events) {
      const frames = d.stacks[stack] ?? [];
      samples += end - start;
      let common = 0;
      if (start <= prevEnd + 1) while (common < open.length && common < frames.length && open[common].frame === frames[common]) common++;
      close(common, prevEnd);
      for (let k = common; k < frames.length; k++) open.push({ frame: frames[k], start });
      prevEnd = end;
    }
    close(0, prevEnd);
    const brows: number[][] = [];
    for (const [start, end, stack] of blocked) {
      const frames = d.stacks[stack] ?? [];
      blockedNs += end - start;
      for (let k = 0; k < frames.length; k++) (brows[k] ??= []).push(start, end, frames[k]);
    }
    const depth = Math.max(rows.length, brows.length);
    const label = l.label ?? `${d.comms[l.comm] ?? '?'} ${l.pid}/${l.tid}`;
    return {
      label: blockedNs ? `${label} — blocked ${fmtSpan(blockedNs)} (hatched)` : label, samples, blockedNs, depth,
      rows: Array.from({ length: depth }, (_, k) => sortTriples(rows[k] ?? [])),
      brows: Array.from({ length: depth }, (_, k) => sortTriples(brows[k] ?? [])),
      blocked,
    };
  }

  /* Diagonal lines over the blocked spans, made once per chart. */
  private hatchPattern(ctx: CanvasRenderingContext2D): CanvasPattern | null {
    if (this.hatch) return this.hatch;
    const t = document.createElement('canvas');
    t.width = t.height = 6;
    const g = t.getContext('2d')!;
    g.strokeStyle = 'rgba(40, 40, 48, .55)';
    g.lineWidth = 1;
    g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.moveTo(-1, 1); g.lineTo(1, -1); g.moveTo(5, 7); g.lineTo(7, 5); g.stroke();
    this.hatch = ctx.createPattern(t, 'repeat');
    return this.hatch;
  }

  setSearch(re: RegExp | null): void {
    if (!this.data || !re) this.match = null;
    else this.match = Uint8Array.from(this.data.frames, (f) => (re.test(f[0]) ? 1 : 0));
    this.render();
  }

  private laneTop(i: number): number {
    let y = AXIS;
    for (let k = 0; k < i; k++) y += HEAD + this.lanes[k].depth * ROW + 6;
    return y;
  }

  render(): void {
    const t0 = performance.now();
    const c = this.canvas, w = this.el.clientWidth || 800;
    const lanes = this.lanes.slice(0, this.maxLanes);
    const h = Math.max(this.laneTop(lanes.length), AXIS + 40);
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.style.width = `${w}px`; c.style.height = `${h}px`;
    const ctx = c.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    if (!this.data) return;
    ctx.font = '11px ui-monospace, "DejaVu Sans Mono", monospace';
    const charW = ctx.measureText('mmmmmmmmmm').width / 10;
    const cols = plotColumns(c), x0 = cols.left;
    const scale = cols.width / (this.ve - this.vs);
    // Time axis.
    ctx.fillStyle = '#555'; ctx.strokeStyle = '#ddd'; ctx.textBaseline = 'middle';
    const span = (this.ve - this.vs) / 1e9;
    const steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
    const step = steps.find((s) => span / s <= cols.width / 110) ?? 7200;
    for (let tt = Math.ceil(this.vs / 1e9 / step) * step; tt * 1e9 < this.ve; tt += step) {
      const x = x0 + (tt * 1e9 - this.vs) * scale;
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS - 4); ctx.lineTo(x + 0.5, h); ctx.stroke();
      ctx.fillText(step >= 1 ? fmtTime(tt).slice(11) : `+${fmtDuration(tt - Math.floor(this.vs / 1e9))}`, x + 3, AXIS / 2);
    }
    const ncol = this.palette.colors.length;
    // By colour, then the same for blocked spans: one fill per colour each.
    const rects: number[][] = Array.from({ length: ncol * 4 }, () => []);
    const labels: number[] = [];
    // Hatched where a blocked span is wide enough for the lines to show.
    const hatched: number[] = [];
    const collect = (r: Float64Array, y: number, off: number) => {
      for (let j = 0; j < r.length; j += 3) {
        if (r[j + 1] < this.vs || r[j] > this.ve) continue;
        const x = x0 + (r[j] - this.vs) * scale, bw = (r[j + 1] - r[j]) * scale;
        if (bw < 0.3) continue;
        const f = r[j + 2];
        rects[off + this.frameColor[f] + (this.match && !this.match[f] ? ncol : 0)].push(x, y, bw);
        if (off && bw >= 3) hatched.push(x, y, bw);
        if (bw > 3 * charW) labels.push(x, y, bw, f);
      }
    };
    lanes.forEach((l, li) => {
      const top = this.laneTop(li);
      ctx.fillStyle = '#333';
      ctx.fillText(`${l.label}`, 4, top + HEAD / 2);
      for (let d = 0; d < l.depth; d++) {
        const y = top + HEAD + d * ROW;
        collect(l.rows[d], y, 0);
        if (l.brows[d].length) collect(l.brows[d], y, 2 * ncol);
      }
    });
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, 0, cols.width, h); ctx.clip();
    for (let k = 0; k < rects.length; k++) {
      const r = rects[k];
      if (!r.length) continue;
      const ci = k % (2 * ncol);
      ctx.fillStyle = ci < ncol ? this.palette.colors[ci] : this.palette.dim[ci - ncol];
      // Blocked: the frame's colour faded, hatched below.
      ctx.globalAlpha = k < 2 * ncol ? 1 : 0.4;
      ctx.beginPath();
      for (let j = 0; j < r.length; j += 3) ctx.rect(r[j], r[j + 1], Math.max(r[j + 2] - 0.5, 0.5), ROW - 1);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    const hatch = hatched.length ? this.hatchPattern(ctx) : null;
    if (hatch) {
      ctx.fillStyle = hatch;
      ctx.beginPath();
      for (let j = 0; j < hatched.length; j += 3) ctx.rect(hatched[j], hatched[j + 1], hatched[j + 2] - 0.5, ROW - 1);
      ctx.fill();
    }
    ctx.fillStyle = '#1d1d1f';
    for (let j = 0; j < labels.length; j += 4) {
      const x = Math.max(labels[j], x0), bw = labels[j + 2] - (x - labels[j]);
      const max = Math.floor((Math.min(bw, x0 + cols.width - x) - 6) / charW);
      let s = this.data.frames[labels[j + 3]][0];
      if (s.length > max) s = max > 2 ? s.slice(0, max - 1) + '…' : '';
      if (s) ctx.fillText(s, x + 3, labels[j + 1] + ROW / 2);
    }
    ctx.restore();
    // The selected window, when it is narrower than the axis.
    if (this.data.from > this.vs || this.data.to < this.ve) {
      const a = x0 + (this.data.from - this.vs) * scale, b = x0 + (this.data.to - this.vs) * scale;
      ctx.fillStyle = 'rgba(192, 57, 43, .06)';
      ctx.fillRect(a, AXIS, b - a, h - AXIS);
      ctx.strokeStyle = '#c0392b';
      ctx.beginPath(); ctx.moveTo(a + 0.5, AXIS); ctx.lineTo(a + 0.5, h); ctx.moveTo(b - 0.5, AXIS); ctx.lineTo(b - 0.5, h); ctx.stroke();
    }
    const drag = this.brush?.dragPx;
    if (drag) {
      ctx.fillStyle = 'rgba(192, 57, 43, .15)';
      ctx.fillRect(drag[0], 0, drag[1] - drag[0], h);
    }
    if (this.lanes.length > lanes.length) {
      ctx.fillStyle = '#777';
      ctx.fillText(`… ${this.lanes.length - lanes.length} more threads with fewer samples not shown`, 4, h - 8);
    }
    this.lastRenderMs = performance.now() - t0;
  }

  /* The block of row (triples by start) at t, or -1. */
  private static at(row: Float64Array, t: number): number {
    let lo = 0, hi = row.length / 3 - 1, found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (row[mid * 3] <= t) { found = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return found >= 0 && row[found * 3 + 1] >= t ? found : -1;
  }

  private onMove(e: MouseEvent): void {
    const r = this.canvas.getBoundingClientRect();
    const px = e.clientX - r.left, py = e.clientY - r.top;
    if (this.brush.dragPx) { this.tip.style.display = 'none'; return; }
    const tns = this.timeAt(px);
    let hit: { f: number; s: number; e: number; lane: Lane; blocked: boolean } | null = null;
    const lanes = this.lanes.slice(0, this.maxLanes);
    for (let li = 0; li < lanes.length && !hit; li++) {
      const top = this.laneTop(li) + HEAD, l = lanes[li];
      const d = Math.floor((py - top) / ROW);
      if (d < 0 || d >= l.depth) continue;
      for (const [row, blocked] of [[l.rows[d], false], [l.brows[d], true]] as [Float64Array, boolean][]) {
        const i = FlameChart.at(row, tns);
        if (i >= 0) { hit = { f: row[i * 3 + 2], s: row[i * 3], e: row[i * 3 + 1], lane: l, blocked }; break; }
      }
    }
    if (!hit || !this.data) { this.tip.style.display = 'none'; return; }
    const fr = this.data.frames[hit.f];
    const when = `from ${fmtTime(hit.s / 1e9).slice(11)}.${String(Math.floor((hit.s / 1e6) % 1000)).padStart(3, '0')}`;
    const lines: [string, string][] = [];
    if (hit.blocked) {
      // The block itself (a frame of it spans the block exactly): what it waited in.
      const bl = hit.lane.blocked;
      let lo = 0, hi = bl.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (bl[mid][0] < hit.s) lo = mid + 1; else hi = mid; }
      const b = bl[lo]?.[0] === hit.s ? bl[lo] : undefined;
      lines.push(['tip-name', `blocked ${fmtSpan(hit.e - hit.s)} in ${b ? blockedWhere(this.data, b[2]) : fr[0]}`]);
      lines.push(['tip-bin', `${fr[0]} · ${basename(fr[1])} ${KIND_NAMES[fr[2]] ?? ''}`], ['', `${hit.lane.label}`], ['', `off CPU ${when}`]);
    } else {
      lines.push(['tip-name', fr[0]], ['tip-bin', `${basename(fr[1])} ${KIND_NAMES[fr[2]] ?? ''}`],
        ['', `${hit.lane.label}`], ['', `${fmtDuration((hit.e - hit.s) / 1e9)} ${when}`]);
    }
    this.tip.innerHTML = '';
    for (const [cls, text] of lines) {
      const d = document.createElement('div'); d.className = cls; d.textContent = text; this.tip.append(d);
    }
    this.tip.style.display = 'block';
    this.tip.style.left = `${Math.min(px + 14, r.width - 320)}px`;
    this.tip.style.top = `${py + 14}px`;
  }
}
