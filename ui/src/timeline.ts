// Charts and tracks that share the page's time axis. Each is a small module
// implementing Track; main.ts mounts them in order above the profile views
// and hands every one the same range, query and selection. New charts (GPU
// metrics, CPU strips, GPU kernel tracks) add a module and one register().
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { getJSON, url, type SeriesJSON } from './api';
import { axisOptions, showSelection } from './axis';

export interface TimeContext {
  from: number; to: number;            // Unix seconds
  query: string; by: string;
  type: 'cpu' | 'gpu_time' | 'offcpu'; // the samples chart's profile type
  selection: [number, number] | null;  // Unix seconds
  signal: AbortSignal;
}

export interface Track {
  readonly el: HTMLElement;
  /* Loads and draws for ctx; resolves with whether the track has data. */
  update(ctx: TimeContext): Promise<boolean>;
  /* The selection changed without a new range (no reload). */
  select(sel: [number, number] | null): void;
}

/* A drag on any track selects a window; every track is told. */
export type OnSelect = (sel: [number, number] | null) => void;

export { SYNC_KEY } from './axis';

const PALETTE = ['#e8843c', '#4a90d9', '#5cb85c', '#d9534f', '#b57edc', '#f0c419', '#3fb8af', '#8c6d46', '#e377c2', '#7f7f7f'];

/*
 * Samples over time from /api/v1/series, stacked by one label; for the
 * GPU-time and off-CPU profiles, milliseconds per step (the series' sums
 * are nanoseconds).
 */
export class SamplesChart implements Track {
  readonly el = document.createElement('div');
  private plot: uPlot | null = null;
  private sel: [number, number] | null = null;
  private setting = false;
  groups: string[] = [];
  type: TimeContext['type'] = 'cpu';   // what the chart shows (for the browser tests)
  sums: number[] = [];                 // each group's sum, in the chart's unit (the same)

  constructor(private onSelect: OnSelect, private height = 170) {
    this.el.className = 'track samples-chart';
    new ResizeObserver(() => this.plot?.setSize({ width: this.el.clientWidth, height: this.height })).observe(this.el);
  }

  async update(ctx: TimeContext): Promise<boolean> {
    const j = await getJSON<SeriesJSON>(url('/api/v1/series', {
      from: ctx.from.toFixed(3), to: ctx.to.toFixed(3), query: ctx.query, by: ctx.by,
      type: ctx.type === 'cpu' ? undefined : ctx.type,
    }), ctx.signal);
    // GPU and off-CPU time come in nanoseconds: drawn as milliseconds.
    const ns = ctx.type !== 'cpu', scale = ns ? 1e-6 : 1;
    const unit = ctx.type === 'gpu_time' ? 'GPU ms' : ctx.type === 'offcpu' ? 'off-CPU ms' : 'samples';
    this.type = ctx.type;
    const step = j.step / 1e9, n = Math.max(1, Math.ceil((j.to - j.from) / j.step));
    const xs = Float64Array.from({ length: n }, (_, i) => j.from / 1e9 + i * step);
    let series = j.series.map((s) => {
      const ys = new Float64Array(n);
      let sum = 0;
      for (const [b, v] of s.points) {
        const i = Math.floor((b - j.from) / j.step);
        if (i >= 0 && i < n) { ys[i] += v * scale; sum += v * scale; }
      }
      return { group: s.group || '(none)', ys, sum };
    }).sort((a, b) => b.sum - a.sum);
    // The 9 heaviest groups by name, the rest summed as "other".
    if (series.length > 10) {
      const other = new Float64Array(n);
      for (const s of series.slice(9)) for (let i = 0; i < n; i++) other[i] += s.ys[i];
      series = [...series.slice(0, 9), { group: 'other', ys: other, sum: 0 }];
    }
    this.groups = series.map((s) => s.group);
    this.sums = series.map((s) => s.sum);
    // Stacked: series k is drawn at the sum of 0..k; the legend shows its own value.
    const raw = series.map((s) => s.ys);
    const stacked: Float64Array[] = [];
    raw.forEach((ys, k) => stacked.push(k ? ys.map((v, i) => v + stacked[k - 1][i]) : Float64Array.from(ys)));
    const data = [xs, ...stacked.slice().reverse()] as unknown as uPlot.AlignedData;
    const names = series.map((s) => s.group).reverse();
    const rawRev = raw.slice().reverse();
    const base = axisOptions(ctx, this.height, this.el.clientWidth || 800, unit, true,
      (sel) => { this.sel = sel; this.onSelect(sel); }, () => this.setting);
    const opts: uPlot.Options = {
      ...base,
      scales: { ...base.scales, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.05)] } },
      series: [
        { label: 'time' },
        ...names.map((g, k) => {
          const c = PALETTE[(names.length - 1 - k) % PALETTE.length];
          return {
            label: g, stroke: c, fill: c + 'cc', width: 1, points: { show: false },
            value: (_u: uPlot, _v: number, _si: number, idx: number | null) => (idx == null ? '–'
              : ns ? `${+(rawRev[k][idx] ?? 0).toFixed(3)} ms` : String(rawRev[k][idx] ?? 0)),
          } as uPlot.Series;
        }),
      ],
      hooks: { ...base.hooks, ready: [() => this.select(this.sel)] },
    } as uPlot.Options;
    this.plot?.destroy();
    this.plot = new uPlot(opts, data, this.el);
    this.sel = ctx.selection;
    this.select(ctx.selection);
    return series.some((s) => s.sum > 0) || series.length > 0;
  }

  select(sel: [number, number] | null): void {
    this.sel = sel;
    if (!this.plot) return;
    this.setting = true;
    showSelection(this.plot, sel);
    this.setting = false;
  }
}
