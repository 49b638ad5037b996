// GPU metric charts on the shared time axis (GET /api/v1/gpu/metrics):
// utilisation (each GPU's line in blue, each process's in orange), memory,
// clocks, power with its limit dashed, temperature, and PCIe with RX drawn
// below zero and TX above. A drag on any of them selects the window.
import uPlot from 'uplot';
import { getJSON, url } from './api';
import { AXIS_LEFT, axisOptions, showSelection } from './axis';
import type { OnSelect, TimeContext, Track } from './timeline';

interface MetricsJSON {
  from: number; to: number; step: number;
  series: { metric: string; labels: Record<string, string>; points: [number, number | null][] }[];
}

type Series = MetricsJSON['series'][number];

interface Line {
  label: string; color: string; dash?: number[];
  pts: [number, number | null][];   // [ts ns, value]
  scale: number;                      // multiplies each value
}

interface ChartDef {
  key: string; title: string; unit: string;
  lines(all: Series[]): Line[];
  range?: [number, number];
}

const BLUES = ['#1f5fbf', '#3d7fdc', '#6a9de6', '#1b3f7a', '#5b8fd0', '#2f6ec9', '#8fb3ea', '#234f9a'];
const ORANGES = ['#f28e2b', '#e36b00', '#ffae5c', '#c85a00', '#ff9a3d', '#d9822b'];
const OTHER = ['#59a14f', '#e15759', '#b07aa1', '#76b7b2', '#9c755f', '#edc948'];

function gpuOf(s: Series): number { return Number(s.labels.gpu ?? 0); }
function pick(all: Series[], metric: string): Series[] {
  return all.filter((s) => s.metric === metric).sort((a, b) => gpuOf(a) - gpuOf(b) || (a.labels.pid ?? '').localeCompare(b.labels.pid ?? ''));
}
function perGpu(all: Series[], metric: string, name: string, colors: string[], scale = 1, dash?: number[]): Line[] {
  const ss = pick(all, metric);
  return ss.map((s, i) => ({
    label: ss.length > 1 || all.some((x) => gpuOf(x) > 0) ? `${name} gpu ${gpuOf(s)}` : name,
    color: colors[i % colors.length], dash, pts: s.points, scale,
  }));
}

export const GPU_CHARTS: ChartDef[] = [
  {
    key: 'util', title: 'GPU utilisation', unit: '%', range: [0, 100],
    lines: (all) => [
      ...perGpu(all, 'flamewatch_gpu_utilization_percent', 'node', BLUES),
      ...pick(all, 'flamewatch_gpu_process_utilization_percent').map((s, i) => ({
        label: `${s.labels.comm ?? 'pid'} ${s.labels.pid ?? ''} gpu ${gpuOf(s)}`, color: ORANGES[i % ORANGES.length], pts: s.points, scale: 1,
      })),
    ],
  },
  {
    key: 'memory', title: 'GPU memory', unit: 'GiB',
    lines: (all) => [
      ...perGpu(all, 'flamewatch_gpu_memory_used_bytes', 'used', BLUES, 1 / 2 ** 30),
      ...perGpu(all, 'flamewatch_gpu_memory_total_bytes', 'total', OTHER, 1 / 2 ** 30, [4, 4]),
    ],
  },
  {
    key: 'clocks', title: 'Clocks', unit: 'MHz',
    lines: (all) => [
      ...perGpu(all, 'flamewatch_gpu_sm_clock_hertz', 'SM', BLUES, 1e-6),
      ...perGpu(all, 'flamewatch_gpu_memory_clock_hertz', 'memory', OTHER, 1e-6),
    ],
  },
  {
    key: 'power', title: 'Power', unit: 'W',
    lines: (all) => [
      ...perGpu(all, 'flamewatch_gpu_power_watts', 'power', BLUES),
      ...perGpu(all, 'flamewatch_gpu_power_limit_watts', 'limit', ['#c0392b'], 1, [6, 4]),
    ],
  },
  {
    key: 'temp', title: 'Temperature', unit: '°C',
    lines: (all) => perGpu(all, 'flamewatch_gpu_temperature_celsius', 'temperature', ['#e15759', '#d37295', '#ff9da7', '#b6404a']),
  },
  {
    key: 'pcie', title: 'PCIe', unit: 'MB/s',
    lines: (all) => [
      ...perGpu(all, 'flamewatch_gpu_pcie_tx_bytes_per_second', 'TX', BLUES, 1e-6),
      ...perGpu(all, 'flamewatch_gpu_pcie_rx_bytes_per_second', 'RX (negative)', ORANGES, -1e-6),
    ],
  },
];

export class GpuCharts implements Track {
  readonly el = document.createElement('div');
  readonly plots: uPlot[] = [];
  private sel: [number, number] | null = null;
  private setting = false;
  /* The metric names seen last, for the tests and the empty state. */
  shown: string[] = [];
  /* Processes NVML saw on a GPU in the window: pid -> comm. */
  procs = new Map<number, string>();

  constructor(private onSelect: OnSelect, private height = 100) {
    this.el.className = 'track gpu-charts';
    new ResizeObserver(() => { for (const u of this.plots) u.setSize({ width: this.el.clientWidth, height: this.height }); }).observe(this.el);
  }

  async update(ctx: TimeContext): Promise<boolean> {
    const width = this.el.clientWidth || 800;
    const stepS = Math.max((ctx.to - ctx.from) / Math.max((width - AXIS_LEFT) / 2, 50), 0.05);
    const j = await getJSON<MetricsJSON>(url('/api/v1/gpu/metrics', {
      from: ctx.from.toFixed(3), to: ctx.to.toFixed(3), query: '{__name__=~"flamewatch_gpu_.*"}',
      step: `${Math.round(stepS * 1000)}ms`,
    }), ctx.signal);
    for (const u of this.plots) u.destroy();
    this.plots.length = 0;
    this.el.replaceChildren();
    this.shown = [];
    this.sel = ctx.selection;
    this.procs.clear();
    for (const x of j.series) if (x.metric === 'flamewatch_gpu_process_utilization_percent' && Number(x.labels.pid) > 0) this.procs.set(Number(x.labels.pid), x.labels.comm ?? '');
    for (const def of GPU_CHARTS) {
      const lines = def.lines(j.series).filter((l) => l.pts.length);
      if (!lines.length) continue;
      this.shown.push(def.key);
      const xsSet = new Set<number>();
      for (const l of lines) for (const [t] of l.pts) xsSet.add(t);
      const xsNs = [...xsSet].sort((a, b) => a - b);
      const at = new Map(xsNs.map((t, i) => [t, i]));
      const ys = lines.map((l) => {
        const y: (number | null)[] = new Array(xsNs.length).fill(null);
        for (const [t, v] of l.pts) y[at.get(t)!] = v === null ? null : v * l.scale;
        return y;
      });
      const box = document.createElement('div');
      box.className = `gpu-chart gpu-chart-${def.key}`;
      const title = document.createElement('div');
      title.className = 'chart-title';
      title.textContent = def.title;
      box.append(title);
      this.el.append(box);
      const base = axisOptions(ctx, this.height, width, def.unit, false, (s) => { this.sel = s; this.onSelect(s); }, () => this.setting);
      const opts: uPlot.Options = {
        ...base,
        scales: { ...base.scales, y: def.range ? { range: def.range } : def.key === 'pcie' ? { range: (_u, lo, hi) => { const m = Math.max(Math.abs(lo), Math.abs(hi), 1) * 1.1; return [-m, m]; } } : {} },
        series: [{ label: 'time' }, ...lines.map((l) => ({
          label: l.label, stroke: l.color, width: 1.5, dash: l.dash, spanGaps: true, points: { show: false },
          value: (_u: uPlot, v: number | null) => (v == null ? '–' : `${Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(1)} ${def.unit}`),
        } as uPlot.Series))],
        hooks: { ...base.hooks, ready: [(u: uPlot) => this.show(u)] },
      } as uPlot.Options;
      const data = [xsNs.map((t) => t / 1e9), ...ys] as unknown as uPlot.AlignedData;
      this.plots.push(new uPlot(opts, data, box));
    }
    this.el.hidden = this.plots.length === 0;
    return this.plots.length > 0;
  }

  private show(u: uPlot): void { this.setting = true; showSelection(u, this.sel); this.setting = false; }

  select(sel: [number, number] | null): void {
    this.sel = sel;
    for (const u of this.plots) this.show(u);
  }
}
