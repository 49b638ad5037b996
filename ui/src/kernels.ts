// The GPU kernel track. First, per (device, process), the busy timeline:
// when the GPU ran the process's kernels, from every kernel record however
// the launches were sampled (GET /api/v1/gpu/kernels?timeline=only, merged
// by the server to about a span per pixel, so it draws at every zoom), with
// a grey line under it where the timeline is complete (its gaps are idle),
// each span as faint as the idle gaps inside it make it.
// Then, when the window holds few enough of them, one row per (device,
// stream), a box per kernel, copy or memset while it ran on the GPU.
// Kernels take their process's colour, copies and memsets are grey. A
// click on a box shows the CPU stack that launched it.
import { ApiError, getJSON, url, type ChartJSON } from './api';
import { Brush, drawSelection, plotColumns, processColor } from './axis';
import { fmtDuration, fmtTime } from './state';
import type { OnSelect, TimeContext, Track } from './timeline';

export interface KernelJSON {
  start: number; end: number; name: string; kind: string; device: number; stream: number;
  pid: number; comm: string; bytes: number; weight: number; stack: number | null;
  idle_ns?: number;   /* busy spans: idle time inside, gaps too short to keep apart */
}

/* The part of a busy span the GPU computed in: the rest is idle gaps inside it. */
export function busyShare(k: KernelJSON): number {
  const len = k.end - k.start;
  return len > 0 ? Math.min(1, Math.max(0, 1 - (k.idle_ns ?? 0) / len)) : 1;
}
export interface KernelsJSON {
  from: number; to: number; intervals: KernelJSON[]; resolution_ns?: number;
  frames: { name: string; kind: string; binary: string }[]; stacks: number[][];
}

const ROW = 14, TOP = 14;
/* Kernels fetched at most; past it the track says to zoom in (the timeline stays). */
export const KERNEL_LIMIT = 20000;

/* One busy-timeline row: a process on a device, its busy spans and its coverage. */
interface BusyRow { key: string; label: string; pid: number; comm: string; busy: KernelJSON[]; cover: KernelJSON[] }

const KIND_OF: Record<string, number> = { native: 0, kernel: 1, jit: 2, python: 3, 'cuda-kernel': 4, ruby: 5 };

/*
 * The GPU-time flame chart: one lane per GPU stream, each kernel, copy or
 * set a block as long as it ran on the GPU, under the CPU stack that
 * launched it. Built from the kernel intervals rather than from gpu_time
 * samples, which keep only when each record started and not how long it
 * ran: a flame chart of samples would stretch each kernel to the next.
 */
export function kernelChart(d: KernelsJSON): ChartJSON {
  const frames: ChartJSON['frames'] = d.frames.map((f) => [f.name, f.binary, KIND_OF[f.kind] ?? 0]);
  const leaf = new Map<string, number>(), stacks: number[][] = [], stackOf = new Map<string, number>();
  const lanes = new Map<string, ChartJSON['lanes'][number]>();
  for (const k of d.intervals) {
    let f = leaf.get(k.name);
    if (f === undefined) { f = frames.length; frames.push([k.name, '', 4]); leaf.set(k.name, f); }
    const path = [...(k.stack === null ? [] : d.stacks[k.stack] ?? []), f];
    const key = path.join(',');
    let s = stackOf.get(key);
    if (s === undefined) { s = stacks.length; stacks.push(path); stackOf.set(key, s); }
    const lk = `${k.device}/${k.stream}`;
    let l = lanes.get(lk);
    if (!l) lanes.set(lk, l = { pid: k.device, tid: k.stream, comm: 0, events: [], label: `gpu ${k.device} stream ${k.stream}` });
    l.events.push([k.start, k.end, s]);
  }
  return { from: d.from, to: d.to, stride: 1, samples: d.intervals.length, frames, stacks, comms: ['gpu'], lanes: [...lanes.values()] };
}

export class KernelTrack implements Track {
  readonly el = document.createElement('div');
  private canvas = document.createElement('canvas');
  private tip = document.createElement('div');
  private note = document.createElement('div');
  data: KernelsJSON | null = null;
  timeline: KernelsJSON | null = null;
  kernelLimit = KERNEL_LIMIT;
  private busyRows: BusyRow[] = [];
  private rows: { key: string; label: string; items: KernelJSON[] }[] = [];
  private from = 0; private to = 1;
  private sel: [number, number] | null = null;
  private brush: Brush;
  /* Idle gaps of the process the GPU-idle panel looks at, shaded. */
  idleGaps: [number, number][] = [];

  constructor(onSelect: OnSelect, private onKernel: (k: KernelJSON, d: KernelsJSON) => void) {
    this.el.className = 'track gpu-kernels';
    this.tip.className = 'tooltip';
    this.note.className = 'track-note';
    this.el.append(this.canvas, this.tip, this.note);
    this.brush = new Brush(this.canvas, (x) => this.timeAt(x), (s) => onSelect(s), (x, y) => this.click(x, y), () => this.render());
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.style.display = 'none'; });
    new ResizeObserver(() => this.render()).observe(this.el);
  }

  private timeAt(x: number): number {
    const c = plotColumns(this.canvas);
    return this.from + ((x - c.left) / c.width) * (this.to - this.from);
  }
  private xOf(t: number): number {
    const c = plotColumns(this.canvas);
    return c.left + ((t - this.from) / (this.to - this.from)) * c.width;
  }

  /* Where the first kernel row starts, below the busy rows (px from the canvas top). */
  kernelRowTop(): number { return TOP + this.busyRows.length * ROW; }

  /* The processes on a GPU in the window: from the kernels, else the timeline. */
  procs(): Map<number, string> {
    const m = new Map<number, string>();
    for (const k of [...(this.data?.intervals ?? []), ...(this.timeline?.intervals ?? [])])
      if (k.pid && !m.has(k.pid)) m.set(k.pid, k.comm);
    return m;
  }

  async update(ctx: TimeContext): Promise<boolean> {
    this.from = ctx.from; this.to = ctx.to; this.sel = ctx.selection;
    this.note.textContent = '';
    const empty: KernelsJSON = { from: 0, to: 0, intervals: [], frames: [], stacks: [] };
    const px = Math.max(plotColumns(this.canvas).width, 100);
    const base = { from: ctx.from.toFixed(3), to: ctx.to.toFixed(3), query: ctx.query };
    const [tl, kernels] = await Promise.all([
      getJSON<KernelsJSON>(url('/api/v1/gpu/kernels', {
        ...base, timeline: 'only', resolution: String(Math.max(1, Math.round(((ctx.to - ctx.from) * 1e9) / px))),
      }), ctx.signal).catch((e) => { if (e instanceof ApiError && e.status === 400) return empty; throw e; }),
      getJSON<KernelsJSON>(url('/api/v1/gpu/kernels', { ...base, limit: String(this.kernelLimit) }), ctx.signal)
        .catch((e) => {
          if (!(e instanceof ApiError) || e.status !== 400) throw e;
          this.note.textContent = /more than/.test(e.message) ? 'GPU kernels: too many to draw here; zoom in to see each one'
            : `GPU kernels: ${e.message}`;
          return empty;
        }),
    ]);
    this.timeline = tl;
    this.data = kernels;
    const busy = new Map<string, BusyRow>();
    for (const k of tl.intervals) {
      const key = `${k.device}/${k.pid}`;
      let r = busy.get(key);
      if (!r) busy.set(key, r = { key, label: `gpu ${k.device} busy`, pid: k.pid, comm: k.comm, busy: [], cover: [] });
      (k.kind === 'busy' ? r.busy : r.cover).push(k);
    }
    // Coverage comes on device 0 (it is the process's): every row of the process shows it.
    for (const r of busy.values()) if (!r.cover.length) r.cover = busy.get(`0/${r.pid}`)?.cover ?? [];
    this.busyRows = [...busy.values()].filter((r) => r.busy.length)
      .sort((a, b) => a.key.localeCompare(b.key, undefined, { numeric: true }));
    if (new Set(this.busyRows.map((r) => r.pid)).size > 1) for (const r of this.busyRows) r.label += ` ${r.comm || r.pid}`;
    const rows = new Map<string, KernelTrack['rows'][number]>();
    for (const k of this.data.intervals) {
      const key = `${k.device}/${k.stream}`;
      let r = rows.get(key);
      if (!r) rows.set(key, r = { key, label: `gpu ${k.device} s${k.stream}`, items: [] });
      r.items.push(k);
    }
    this.rows = [...rows.values()].sort((a, b) => a.key.localeCompare(b.key, undefined, { numeric: true }));
    const has = this.rows.length > 0 || this.busyRows.length > 0 || this.note.textContent !== '';
    this.el.hidden = !has;
    this.render();
    return has;
  }

  select(sel: [number, number] | null): void { this.sel = sel; this.render(); }

  render(): void {
    const c = this.canvas, w = this.el.clientWidth || 800;
    const nb = this.busyRows.length;
    const h = TOP + Math.max(nb + this.rows.length, 1) * ROW + 2;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.style.width = `${w}px`; c.style.height = `${h}px`;
    const ctx = c.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const cols = plotColumns(c);
    ctx.font = '10px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.fillStyle = '#555';
    ctx.fillText('GPU kernels', 4, 7);
    for (const [a, b] of this.idleGaps) {
      ctx.fillStyle = 'rgba(231, 76, 60, .12)';
      const x0 = Math.max(this.xOf(a), cols.left), x1 = Math.min(this.xOf(b), cols.left + cols.width);
      if (x1 > x0) ctx.fillRect(x0, TOP, x1 - x0, h - TOP);
    }
    this.busyRows.forEach((r, i) => {
      const y = TOP + i * ROW;
      ctx.fillStyle = '#666';
      ctx.fillText(r.label, 4, y + ROW / 2);
      ctx.fillStyle = '#f3f3f5';
      ctx.fillRect(cols.left, y, cols.width, ROW - 2);
      ctx.fillStyle = processColor(r.comm || String(r.pid));
      // Fainter where the span holds idle gaps: a launch-bound loop's span is mostly gaps.
      for (const k of r.busy) {
        ctx.globalAlpha = 0.25 + 0.75 * busyShare(k);
        this.box(ctx, k, y, ROW - 5, cols);
      }
      ctx.globalAlpha = 1;
      ctx.fillStyle = '#8a8a90';
      for (const k of r.cover) this.box(ctx, k, y + ROW - 4, 2, cols);
    });
    this.rows.forEach((r, i) => {
      const y = TOP + (nb + i) * ROW;
      ctx.fillStyle = '#666';
      ctx.fillText(r.label, 4, y + ROW / 2);
      ctx.fillStyle = '#f3f3f5';
      ctx.fillRect(cols.left, y, cols.width, ROW - 2);
      for (const k of r.items) {
        const x0 = this.xOf(k.start / 1e9), x1 = this.xOf(k.end / 1e9);
        if (x1 < cols.left || x0 > cols.left + cols.width) continue;
        ctx.fillStyle = k.kind === 'kernel' ? processColor(k.comm || String(k.pid)) : '#9a9aa0';
        ctx.fillRect(x0, y, Math.max(x1 - x0, 1), ROW - 2);
      }
    });
    drawSelection(ctx, h, this.sel, (t) => this.xOf(t), this.brush?.dragPx ?? null);
  }

  /* A span from start to end (ns) at y, h high, at least a pixel wide, clipped to the plot. */
  private box(ctx: CanvasRenderingContext2D, k: KernelJSON, y: number, h: number, cols: { left: number; width: number }): void {
    const x0 = Math.max(this.xOf(k.start / 1e9), cols.left), x1 = Math.min(this.xOf(k.end / 1e9), cols.left + cols.width);
    if (x1 < cols.left || x0 > cols.left + cols.width) return;
    ctx.fillRect(x0, y, Math.max(x1 - x0, 1), h);
  }

  /* The busy span under (x, y), with its row. */
  private busyAt(x: number, y: number): { r: BusyRow; k: KernelJSON } | null {
    const r = this.busyRows[Math.floor((y - TOP) / ROW)];
    if (!r) return null;
    const t = this.timeAt(x) * 1e9, slop = (((this.to - this.from) * 1e9) / plotColumns(this.canvas).width) * 2;
    const k = r.busy.find((b) => t >= b.start - slop && t <= b.end + slop);
    return k ? { r, k } : null;
  }

  private at(x: number, y: number): KernelJSON | null {
    const r = this.rows[Math.floor((y - TOP) / ROW) - this.busyRows.length];
    if (!r) return null;
    const t = this.timeAt(x) * 1e9, slop = (((this.to - this.from) * 1e9) / plotColumns(this.canvas).width) * 2;
    let best: KernelJSON | null = null, bd = Infinity;
    for (const k of r.items) {
      const d = t < k.start ? k.start - t : t > k.end ? t - k.end : 0;
      if (d <= slop && d < bd) { best = k; bd = d; }
    }
    return best;
  }

  private click(x: number, y: number): void {
    const k = this.at(x, y);
    if (k && this.data) this.onKernel(k, this.data);
  }

  private busyLines(r: BusyRow, k: KernelJSON): string[] {
    const merged = Math.max(k.bytes, this.timeline?.resolution_ns ?? 0);
    return [`gpu ${k.device} busy for ${fmtDuration((k.end - k.start) / 1e9)}`,
      `with kernels of ${r.comm} (pid ${r.pid}), from ${fmtTime(k.start / 1e9).slice(11)}`,
      `idle gaps under ${fmtDuration(merged / 1e9)} merged` +
        (k.idle_ns ? `: the GPU computed in ${(busyShare(k) * 100).toFixed(1)} % of it` : ''),
      'under the grey line every kernel was recorded: gaps there are idle'];
  }

  private kernelLines(k: KernelJSON): string[] {
    return [k.name, `${k.kind} on gpu ${k.device} stream ${k.stream}, ${fmtDuration((k.end - k.start) / 1e9)}` +
      ` at ${fmtTime(k.start / 1e9).slice(11)}`, `${k.comm} (pid ${k.pid})${k.weight > 1 ? `, stands for ${k.weight} launches` : ''}`,
      k.stack === null ? 'no launching stack' : 'click: launching stack'];
  }

  private hover(e: MouseEvent): void {
    if (this.brush.dragPx) return;
    const r = this.canvas.getBoundingClientRect();
    const b = this.busyAt(e.clientX - r.left, e.clientY - r.top);
    const k = b ? null : this.at(e.clientX - r.left, e.clientY - r.top);
    if (!k && !b) { this.tip.style.display = 'none'; return; }
    this.tip.innerHTML = '';
    const lines = b ? this.busyLines(b.r, b.k) : this.kernelLines(k!);
    lines.forEach((t, i) => { const d = document.createElement('div'); d.textContent = t; if (!i) d.className = 'tip-name'; this.tip.append(d); });
    this.tip.style.display = 'block';
    this.tip.style.left = `${Math.min(e.clientX - r.left + 12, r.width - 380)}px`;
    this.tip.style.top = `${e.clientY - r.top + 12}px`;
  }
}
