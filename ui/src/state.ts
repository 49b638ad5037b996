// The page's whole state lives in the URL's query string, so a view can be
// shared and the browser's back/forward buttons move through it.
export interface State {
  page: 'profile' | 'timeline';
  from: string; to: string;           // "now-15m" / "now", Unix seconds or a date as typed
  q: string;                          // label selector
  by: string;                         // label the samples chart stacks by
  sf?: number; st?: number;           // selected window, Unix seconds
  view: 'flame' | 'chart' | 'table' | 'sandwich';
  search: string;
  color: 'binary' | 'kind';
  hide: string;                       // regex over function names
  hidebin: string;                    // regex over binary paths
  cuda: boolean;                      // hide CUDA internals preset
  focus: string;
  invert: boolean;
  fn: string;                         // sandwich function
  zoom: string;                       // flame graph zoom path, names joined by ';'
  mn: number;                         // max_nodes
  gpu?: number;                       // pid whose GPU idle time the timeline explains
  // profile type: CPU samples, GPU ns under the launching stack, or ns blocked under the blocking stack
  type: 'cpu' | 'gpu_time' | 'offcpu';
  through: string;                    // keep only stacks through this function (a kernel's launches)
  // A baseline to compare with: its window (as typed, like from/to) and,
  // when it differs from q, its own selector ('' is "no selector").
  compare_from?: string; compare_to?: string; compare_q?: string;
}

export const DEFAULTS: State = {
  page: 'profile', from: 'now-15m', to: 'now', q: '', by: 'comm', view: 'flame', search: '', color: 'binary',
  hide: '', hidebin: '', cuda: false, focus: '', invert: false, fn: '', zoom: '', mn: 20000,
  type: 'cpu', through: '',
};

const VIEWS = ['flame', 'chart', 'table', 'sandwich'];

export function read(): State {
  const p = new URLSearchParams(location.search);
  const s: State = { ...DEFAULTS };
  const str = (k: keyof State) => { const v = p.get(k); if (v !== null) (s as any)[k] = v; };
  (['from', 'to', 'q', 'by', 'search', 'hide', 'hidebin', 'focus', 'fn', 'zoom', 'through'] as const).forEach(str);
  const type = p.get('type');
  if (type === 'gpu_time' || type === 'offcpu') s.type = type;
  // A baseline needs both ends; compare_q alone means nothing.
  const cf = p.get('compare_from'), ct = p.get('compare_to');
  if (cf && ct) {
    s.compare_from = cf; s.compare_to = ct;
    const cq = p.get('compare_q');
    if (cq !== null) s.compare_q = cq;
  }
  if (p.get('page') === 'timeline') s.page = 'timeline';
  const view = p.get('view');
  if (view && VIEWS.includes(view)) s.view = view as State['view'];
  if (p.get('color') === 'kind') s.color = 'kind';
  s.cuda = p.get('cuda') === '1';
  s.invert = p.get('invert') === '1';
  const num = (k: string) => { const v = Number(p.get(k)); return p.get(k) !== null && isFinite(v) ? v : undefined; };
  s.sf = num('sf'); s.st = num('st');
  if (s.sf === undefined || s.st === undefined || s.sf >= s.st) s.sf = s.st = undefined;
  const gpu = num('gpu');
  if (gpu && gpu > 0 && Number.isInteger(gpu)) s.gpu = gpu;
  const mn = num('mn');
  if (mn && mn > 0) s.mn = Math.min(1000000, Math.round(mn));
  return s;
}

export function encode(s: State): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(s)) {
    const d = (DEFAULTS as any)[k];
    if (v === undefined || v === d) continue;
    p.set(k, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
  }
  const q = p.toString();
  return q ? `?${q}` : location.pathname;
}

const DUR: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/*
 * "now", "now-15m" (s, m, h, d; "now-1h30m" too), Unix seconds, or a date
 * ("2026-12-02 20:15", RFC 3339; without a zone it is local time) to Unix
 * seconds; NaN when it is none of these.
 */
export function parseTime(text: string, now = Date.now() / 1000): number {
  const t = text.trim();
  const m = /^now(?:\s*-\s*((?:\d+(?:\.\d+)?\s*[smhd]\s*)+))?$/.exec(t);
  if (m) {
    let v = now;
    for (const p of (m[1] ?? '').matchAll(/(\d+(?:\.\d+)?)\s*([smhd])/g)) v -= Number(p[1]) * DUR[p[2]];
    return v;
  }
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t);
  const iso = /^\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?$/.test(t) || /^\d{4}-\d\d-\d\d$/.test(t);
  if (!iso) return NaN;
  const d = Date.parse(t.length === 10 ? `${t}T00:00` : t.replace(' ', 'T'));
  return isNaN(d) ? NaN : d / 1000;
}

/* As parseTime, but "now" for text that is not a time (an edited URL). */
export function resolveTime(t: string, now = Date.now() / 1000): number {
  const v = parseTime(t, now);
  return isNaN(v) ? now : v;
}

export function fmtDuration(sec: number): string {
  if (sec < 1) return `${Math.round(sec * 1000)} ms`;
  if (sec < 120) return `${+sec.toFixed(1)} s`;
  if (sec < 7200) return `${Math.floor(sec / 60)}m ${Math.round(sec % 60)}s`;
  if (sec < 172800) return `${Math.floor(sec / 3600)}h ${Math.round((sec % 3600) / 60)}m`;
  return `${+(sec / 86400).toFixed(1)} d`;
}

export function fmtTime(sec: number): string {
  const d = new Date(sec * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
