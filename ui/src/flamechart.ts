// The time-ordered flame chart: one lane per thread, consecutive samples of
// one thread that share a stack prefix merge into one block per depth.
// Written here rather than taken from flame-chart-js so that lanes and the
// time axis are ours: the chart is drawn on the page's time axis (the range
// of the charts above it, in the same columns: axis.ts), so that a moment
// sits at the same x in every track; its samples are those of the selected
// window, which is shaded. A drag selects a window, as on any track.
import type { ChartJSON } from './api';
import { Brush, plotColumns } from './axis';
import { Palette, type ColorMode, basename } from './colors';
import { KIND_NAMES } from './profile';
import { fmtDuration, fmtTime } from './state';

const ROW = 16, HEAD = 18, AXIS = 22;

interface Lane {
  label: string; samples: number; depth: number;
  // blocks by depth, each sorted by start: [start, end, frame] triples (ns)
  rows: Float64Array[];
}

export class FlameChart {
  readonly el = document.createElement('div');
  private canvas = document.createElement('canvas');
  private tip = document.createElement('div');
  data: ChartJSON | null = null;
  private lanes: Lane[] = [];
  private palette = new Palette();
  private frameColor: Int32Array = new Int32Array(0);
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
    this.lanes = d.lanes.map((l) => this.buildLane(d, l)).sort((a, b) => b.samples - a.samples);
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
    let prevEnd = -Infinity, samples = 0;
    const close = (from: number, end: number) => {
      for (let k = open.length - 1; k >= from; k--) {
        (rows[k] ??= []).push(open[k].start, end, open[k].frame);
      }
      open.length = from;
    };
    for (const [start, end, stack] of l.events) {
      const frames = d.stacks[stack] ?? [];
      samples += end - start;
      let common = 0;
      if (start <= prevEnd + 1) while (common < open.length && common < frames.length && open[common].frame === frames[common]) common++;
      close(common, prevEnd);
      for (let k = common; k < frames.length; k++) open.push({ frame: frames[k], start });
      prevEnd = end;
    }
    close(0, prevEnd);
    return {
      label: l.label ?? `${d.comms[l.comm] ?? '?'} ${l.pid}/${l.tid}`, samples, depth: rows.length,
      rows: rows.map((r) => {
        // Blocks of one depth come out in end order; sort by start for the hit test.
        const idx = Array.from({ length: r.length / 3 }, (_, i) => i).sort((a, b) => r[a * 3] - r[b * 3]);
        const out = new Float64Array(r.length);
        idx.forEach((j, i) => { out[i * 3] = r[j * 3]; out[i * 3 + 1] = r[j * 3 + 1]; out[i * 3 + 2] = r[j * 3 + 2]; });
        return out;
      }),
    };
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
    const rects: number[][] = Array.from({ length: ncol * 2 }, () => []);
    const labels: number[] = [];
    lanes.forEach((l, li) => {
      const top = this.laneTop(li);
      ctx.fillStyle = '#333';
      ctx.fillText(`${l.label}`, 4, top + HEAD / 2);
      l.rows.forEach((r, d) => {
        const y = top + HEAD + d * ROW;
        for (let j = 0; j < r.length; j += 3) {
          if (r[j + 1] < this.vs || r[j] > this.ve) continue;
          const x = x0 + (r[j] - this.vs) * scale, bw = (r[j + 1] - r[j]) * scale;
          if (bw < 0.3) continue;
          const f = r[j + 2];
          rects[this.frameColor[f] + (this.match && !this.match[f] ? ncol : 0)].push(x, y, bw);
          if (bw > 3 * charW) labels.push(x, y, bw, f);
        }
      });
    });
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, 0, cols.width, h); ctx.clip();
    for (let k = 0; k < rects.length; k++) {
      const r = rects[k];
      if (!r.length) continue;
      ctx.fillStyle = k < ncol ? this.palette.colors[k] : this.palette.dim[k - ncol];
      ctx.beginPath();
      for (let j = 0; j < r.length; j += 3) ctx.rect(r[j], r[j + 1], Math.max(r[j + 2] - 0.5, 0.5), ROW - 1);
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

  private onMove(e: MouseEvent): void {
    const r = this.canvas.getBoundingClientRect();
    const px = e.clientX - r.left, py = e.clientY - r.top;
    if (this.brush.dragPx) { this.tip.style.display = 'none'; return; }
    const tns = this.timeAt(px);
    let hit: { f: number; s: number; e: number; lane: Lane } | null = null;
    const lanes = this.lanes.slice(0, this.maxLanes);
    for (let li = 0; li < lanes.length && !hit; li++) {
      const top = this.laneTop(li) + HEAD, l = lanes[li];
      const d = Math.floor((py - top) / ROW);
      if (d < 0 || d >= l.depth) continue;
      const row = l.rows[d];
      let lo = 0, hi = row.length / 3 - 1, found = -1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (row[mid * 3] <= tns) { found = mid; lo = mid + 1; } else hi = mid - 1;
      }
      if (found >= 0 && row[found * 3 + 1] >= tns) hit = { f: row[found * 3 + 2], s: row[found * 3], e: row[found * 3 + 1], lane: l };
    }
    if (!hit || !this.data) { this.tip.style.display = 'none'; return; }
    const fr = this.data.frames[hit.f];
    this.tip.innerHTML = '';
    for (const [cls, text] of [['tip-name', fr[0]], ['tip-bin', `${basename(fr[1])} ${KIND_NAMES[fr[2]] ?? ''}`],
      ['', `${hit.lane.label}`], ['', `${fmtDuration((hit.e - hit.s) / 1e9)} from ${fmtTime(hit.s / 1e9).slice(11)}.${String(Math.floor((hit.s / 1e6) % 1000)).padStart(3, '0')}`]]) {
      const d = document.createElement('div'); d.className = cls; d.textContent = text; this.tip.append(d);
    }
    this.tip.style.display = 'block';
    this.tip.style.left = `${Math.min(px + 14, r.width - 320)}px`;
    this.tip.style.top = `${py + 14}px`;
  }
}
