// CPU strips: one row per core, coloured by the process running on it,
// blank while idle (GET /api/v1/cpu/strips). Short windows show every busy
// interval and a click filters to its process (by pid); long windows show
// per-pixel buckets shaded by busy fraction, coloured by the dominant comm,
// and a click filters to that comm.
import { getJSON, url } from './api';
import { Brush, drawSelection, plotColumns, processColor } from './axis';
import { fmtDuration } from './state';
import type { OnSelect, TimeContext, Track } from './timeline';

interface StripsJSON {
  cpus: { cpu: number; node: string; intervals: [number, number, number, string][]; busy: [number, number, string][] }[];
}

/* Windows up to this long are drawn from the intervals themselves. */
const INTERVALS_MAX_S = 20;

export class CpuStrips implements Track {
  readonly el = document.createElement('div');
  private canvas = document.createElement('canvas');
  private tip = document.createElement('div');
  private data: StripsJSON | null = null;
  private from = 0; private to = 1;
  private res = 0;            // bucket width in ns, 0 for intervals
  private sel: [number, number] | null = null;
  private brush: Brush;
  private rowH = 12;

  constructor(onSelect: OnSelect, private onProcess: (f: { pid?: number; comm: string }) => void) {
    this.el.className = 'track cpu-strips';
    this.tip.className = 'tooltip';
    this.el.append(this.canvas, this.tip);
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

  async update(ctx: TimeContext): Promise<boolean> {
    this.from = ctx.from; this.to = ctx.to; this.sel = ctx.selection;
    const width = Math.max(plotColumns(this.el).width, 100);
    const span = ctx.to - ctx.from;
    this.res = span <= INTERVALS_MAX_S ? 0 : Math.max(1e6, Math.floor((span * 1e9) / width));
    try {
      this.data = await getJSON<StripsJSON>(url('/api/v1/cpu/strips', {
        from: ctx.from.toFixed(3), to: ctx.to.toFixed(3), query: ctx.query,
        resolution: this.res ? String(this.res) : undefined,
      }), ctx.signal);
    } catch (e) {
      if ((e as Error).name === 'AbortError') throw e;
      // Too many intervals for this window: buckets instead.
      this.res = Math.max(1e6, Math.floor((span * 1e9) / width));
      this.data = await getJSON<StripsJSON>(url('/api/v1/cpu/strips', {
        from: ctx.from.toFixed(3), to: ctx.to.toFixed(3), query: ctx.query, resolution: String(this.res),
      }), ctx.signal);
    }
    this.el.hidden = this.data.cpus.length === 0;
    this.render();
    return this.data.cpus.length > 0;
  }

  select(sel: [number, number] | null): void { this.sel = sel; this.render(); }

  render(): void {
    const c = this.canvas, w = this.el.clientWidth || 800;
    const n = this.data?.cpus.length ?? 0;
    this.rowH = n > 32 ? 5 : n > 16 ? 8 : 12;
    const h = n * this.rowH + 16;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.style.width = `${w}px`; c.style.height = `${h}px`;
    const ctx = c.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    if (!this.data) return;
    const cols = plotColumns(c);
    ctx.font = '10px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.fillStyle = '#555';
    ctx.fillText('CPU strips', 4, 7);
    this.data.cpus.forEach((cpu, i) => {
      const y = 14 + i * this.rowH;
      ctx.fillStyle = '#f3f3f5';
      ctx.fillRect(cols.left, y, cols.width, this.rowH - 1);
      if (this.rowH >= 8) { ctx.fillStyle = '#666'; ctx.fillText(`cpu ${cpu.cpu}`, 4, y + this.rowH / 2); }
      for (const [s, e, pid, comm] of cpu.intervals) {
        const x0 = this.xOf(s / 1e9), x1 = this.xOf(e / 1e9);
        ctx.fillStyle = processColor(comm || String(pid));
        ctx.fillRect(x0, y, Math.max(x1 - x0, 0.6), this.rowH - 1);
      }
      const bw = this.res ? (this.res / 1e9 / (this.to - this.from)) * cols.width : 0;
      for (const [s, f, comm] of cpu.busy) {
        ctx.globalAlpha = 0.25 + 0.75 * Math.min(f, 1);
        ctx.fillStyle = processColor(comm);
        ctx.fillRect(this.xOf(s / 1e9), y, Math.max(bw, 0.6), this.rowH - 1);
      }
      ctx.globalAlpha = 1;
    });
    drawSelection(ctx, h, this.sel, (t) => this.xOf(t), this.brush?.dragPx ?? null);
  }

  /* The interval or bucket under (x, y): [start s, end s, pid?, comm]. */
  at(x: number, y: number): { s: number; e: number; pid?: number; comm: string; f?: number; cpu: number } | null {
    if (!this.data) return null;
    const i = Math.floor((y - 14) / this.rowH);
    const cpu = this.data.cpus[i];
    if (!cpu) return null;
    const t = this.timeAt(x) * 1e9, slop = ((this.to - this.from) * 1e9) / plotColumns(this.canvas).width;
    // The interval under t, else the nearest within slop (narrower than a pixel).
    let near: StripsJSON['cpus'][number]['intervals'][number] | null = null, nd = slop;
    for (const v of cpu.intervals) {
      const d = t < v[0] ? v[0] - t : t >= v[1] ? t - v[1] : -1;
      if (d < 0) { near = v; break; }
      if (d <= nd) { near = v; nd = d; }
    }
    if (near) return { s: near[0] / 1e9, e: near[1] / 1e9, pid: near[2], comm: near[3], cpu: cpu.cpu };
    for (const [s, f, comm] of cpu.busy) if (t >= s && t < s + this.res) return { s: s / 1e9, e: (s + this.res) / 1e9, comm, f, cpu: cpu.cpu };
    return null;
  }

  private click(x: number, y: number): void {
    const hit = this.at(x, y);
    if (hit) this.onProcess({ pid: hit.pid, comm: hit.comm });
  }

  private hover(e: MouseEvent): void {
    if (this.brush.dragPx) return;
    const r = this.canvas.getBoundingClientRect();
    const hit = this.at(e.clientX - r.left, e.clientY - r.top);
    if (!hit) { this.tip.style.display = 'none'; return; }
    this.tip.textContent = `cpu ${hit.cpu}: ${hit.comm}${hit.pid ? ` (pid ${hit.pid})` : ''} — ` +
      (hit.f !== undefined ? `${Math.round(hit.f * 100)} % busy over ${fmtDuration(hit.e - hit.s)}` : `${fmtDuration(hit.e - hit.s)}`) +
      ' · click: only this process';
    this.tip.style.display = 'block';
    this.tip.style.left = `${Math.min(e.clientX - r.left + 12, r.width - 360)}px`;
    this.tip.style.top = `${e.clientY - r.top + 12}px`;
  }
}
