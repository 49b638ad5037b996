// "Why is the GPU idle?": for one process, the flame graph of its CPU
// samples taken while its GPU ran none of its kernels (or, without kernel
// data, while NVML put its utilisation under a threshold), and the share of
// its wall time the GPU was idle (GET /api/v1/gpu/idle). When the agent
// records off-CPU time, a second flame graph below: the time its threads
// spent blocked while the GPU was idle, under the stacks they blocked in.
import { getJSON, url, type ProfileJSON } from './api';
import { FlameGraph } from './flamegraph';
import { fmtValue, fromJSON, pct } from './profile';
import { fmtDuration } from './state';

export interface IdleJSON {
  from: number; to: number; pid: number; source: string; threshold: number;
  span: [number, number]; busy_ns: number; idle_ns: number; idle_fraction: number | null;
  samples: { total: number; idle: number; idle_inside?: number; waiting_on_gpu: number };
  resolution_ns: number | null;
  coverage: number | null; fallback: string | null;
  timeline: { spans: number; merge_gap_ns: number; idle_inside_ns?: number; sources?: string } | null;
  kernels: { intervals: number; max_weight: number }; nvml_points: number;
  gaps: [number, number][]; gaps_truncated: boolean;
  profile: ProfileJSON;
  sample_period_ns: number; cpu_idle_ns: number; cpu_share: number | null;
  // null: no off-CPU block of the process in the window (no --off-cpu).
  // Only the threads that launch GPU work are charged ('main': none seen).
  offcpu: {
    threads: 'launching' | 'main'; tids: number[]; tids_total: number;
    blocks: number; blocked_ns: number; idle_ns: number; waiting_on_gpu_ns: number;
    wall_ns: number; lookback_ns: number; not_next_ns: number; share: number | null;
    other_threads: { blocks: number; blocked_ns: number };
    profile: ProfileJSON;
  } | null;
}

/* A share of the idle time as a percentage; shares of thread time can pass 100 %. */
const share = (v: number | null) => (v === null ? '–' : `${(v * 100).toFixed(1)} %`);

const SOURCES: Record<string, string> = {
  timeline: 'from its busy timeline (every kernel record)',
  kernels: 'from its kernel intervals',
  nvml_process: 'from NVML: its utilisation under',
  nvml_node: 'from NVML: its node\'s GPU utilisation under',
  none: 'unknown: no kernel intervals and no NVML data for it',
};

/*
 * Idle time inside the busy spans (gaps between kernels shorter than the
 * timeline places): counted in the idle fraction; a CPU sample inside such
 * a span counts as idle with the odds of the span's idle share. Said when
 * it is a visible part.
 */
function insideNote(j: IdleJSON): string {
  const inside = j.timeline?.idle_inside_ns ?? 0;
  if (!j.idle_ns || inside < 0.01 * j.idle_ns) return '';
  return `; ${share(inside / j.idle_ns)} of the idle time lies in gaps between kernels too short to place, ` +
    `where a CPU sample counts as idle by the odds of its span's idle share (${(j.samples.idle_inside ?? 0).toLocaleString()} samples)`;
}

/* Where the busy timeline came from: the process's records, the GPU's own monitors, or both. */
const TIMELINE_SOURCES: Record<string, string> = {
  records: SOURCES.timeline,
  gpu_monitors: 'from the GPU\'s own performance monitors (the process alone on it)',
  'records+gpu_monitors': 'from its busy timeline (kernel records, and the GPU\'s own monitors where records were sampled)',
};

export class IdlePanel {
  readonly el = document.createElement('section');
  private head = document.createElement('div');
  private flame = new FlameGraph();
  private off = document.createElement('div');
  private offHead = document.createElement('div');
  private offFlame = new FlameGraph();
  last: IdleJSON | null = null;

  constructor(onClose: () => void) {
    this.el.className = 'idle-panel';
    const bar = document.createElement('div');
    bar.className = 'idle-bar';
    const title = document.createElement('h3');
    title.textContent = 'Why is the GPU idle?';
    const close = document.createElement('button');
    close.textContent = '×';
    close.title = 'close';
    close.addEventListener('click', onClose);
    bar.append(title, this.head, close);
    this.off.className = 'idle-offcpu';
    this.offHead.className = 'idle-offcpu-summary';
    this.off.append(this.offHead, this.offFlame.el);
    this.off.hidden = true;
    this.el.append(bar, this.flame.el, this.off);
  }

  /*
   * Share of the idle samples (or, with graph 'offcpu', of the off-CPU
   * idle time) under a function of this name (outermost calls only).
   */
  share(name: string, graph: 'cpu' | 'offcpu' = 'cpu'): number {
    const t = (graph === 'offcpu' ? this.offFlame : this.flame).current;
    if (!t || !t.total[0]) return 0;
    let sum = 0;
    for (let i = 1; i < t.n;) {
      if (t.names[t.name[i]] === name) { sum += t.total[i]; i = t.end[i]; } else i++;
    }
    return sum / t.total[0];
  }

  async load(pid: number, from: number, to: number, signal: AbortSignal): Promise<IdleJSON> {
    const j = await getJSON<IdleJSON>(url('/api/v1/gpu/idle', { pid, from: from.toFixed(3), to: to.toFixed(3) }), signal);
    this.last = j;
    const span = (j.span[1] - j.span[0]) / 1e9;
    const src = j.source === 'timeline' && j.timeline?.sources
      ? TIMELINE_SOURCES[j.timeline.sources] ?? SOURCES.timeline
      : SOURCES[j.source] ?? j.source;
    this.head.className = 'idle-summary';
    this.head.textContent = j.idle_fraction === null
      ? `pid ${pid}: ${src}.`
      : `pid ${pid}: GPU idle ${(j.idle_fraction * 100).toFixed(1)} % of its ${fmtDuration(span)} ` +
        `(${src}${j.source.startsWith('nvml') ? ` ${j.threshold} %` : ''}` +
        `${j.kernels.max_weight > 1 && j.source === 'kernels' ? `; kernels sampled 1 in ${j.kernels.max_weight}, so gaps overstate idle time` : ''}` +
        `${j.coverage !== null && j.coverage < 0.995 ? `; it covers ${pct(j.coverage, 1)} of the time, the rest ${j.fallback === 'none' ? 'is unknown' : SOURCES[j.fallback ?? ''] ?? j.fallback}` : ''}` +
        `${j.resolution_ns && j.resolution_ns >= 1e6 ? `; busy known only to ${fmtDuration(j.resolution_ns / 1e9)}: shorter phases cannot be placed` : ''}` +
        `${insideNote(j)}). ` +
        `${j.samples.waiting_on_gpu ? `${j.samples.waiting_on_gpu.toLocaleString()} CPU samples (${pct(j.samples.waiting_on_gpu, j.samples.total || 1)}) waited on the GPU in synchronize calls and are not idle time. ` : ''}` +
        `${j.samples.idle.toLocaleString()} of its ${j.samples.total.toLocaleString()} CPU samples ` +
        `(${pct(j.samples.idle, j.samples.total || 1)}) were taken while the GPU was idle` +
        `${j.cpu_share !== null ? `, ${fmtValue(j.cpu_idle_ns, 'nanoseconds')} of CPU time: ${share(j.cpu_share)} of the idle time` : ''}` +
        `${j.offcpu && j.offcpu.share !== null ? `; off-CPU time explains ${share(j.offcpu.share)} (below)` : ''}:`;
    const t = fromJSON(j.profile);
    this.flame.setTree(t, 'binary');
    this.flame.setZoom(0);
    this.showOffcpu(j);
    return j;
  }

  private showOffcpu(j: IdleJSON): void {
    const o = j.offcpu;
    this.off.hidden = !o;
    if (!o) return;
    const who = o.threads === 'main'
      ? 'its main thread (no GPU launch seen)'
      : o.tids_total === 1 ? `its launching thread (${o.tids[0]})` : `its ${o.tids_total} launching threads`;
    const others = o.other_threads.blocks
      ? ` Its other threads, blocked ${fmtValue(o.other_threads.blocked_ns, 'nanoseconds')} in the window, launch no GPU work and are not charged.`
      : '';
    this.offHead.textContent = (j.idle_fraction === null
      ? `Off-CPU: ${who} blocked ${fmtValue(o.blocked_ns, 'nanoseconds')} in this window; with no GPU busy data none of it is called idle.`
      : `Off-CPU: ${who} blocked ${fmtValue(o.idle_ns, 'nanoseconds')} while the GPU was idle ` +
        `(during ${share(o.share)} of the idle time), ` +
        `of ${fmtValue(o.blocked_ns, 'nanoseconds')} blocked in the window` +
        `${o.waiting_on_gpu_ns ? `; ${fmtValue(o.waiting_on_gpu_ns, 'nanoseconds')} blocked in synchronize calls waited on the GPU` : ''}` +
        `${o.not_next_ns ? `; ${fmtValue(o.not_next_ns, 'nanoseconds')} blocked in gaps another of them ended waited with the GPU and is not charged` : ''}:`) + others;
    this.offFlame.setTree(fromJSON(o.profile), 'binary');
    this.offFlame.setZoom(0);
  }
}
