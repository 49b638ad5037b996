// The page's whole state lives in the URL's query string, so a view can be
// shared and the browser's back/forward buttons move through it.
export interface State {
  from: string; to: string;           // "now-15m" / "now" or Unix seconds
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
}

export const DEFAULTS: State = {
  from: 'now-15m', to: 'now', q: '', by: 'comm', view: 'flame', search: '', color: 'binary',
  hide: '', hidebin: '', cuda: false, focus: '', invert: false, fn: '', zoom: '', mn: 20000,
};

const VIEWS = ['flame', 'chart', 'table', 'sandwich'];

export function read(): State {
  const p = new URLSearchParams(location.search);
  const s: State = { ...DEFAULTS };
  const str = (k: keyof State) => { const v = p.get(k); if (v !== null) (s as any)[k] = v; };
  (['from', 'to', 'q', 'by', 'search', 'hide', 'hidebin', 'focus', 'fn', 'zoom'] as const).forEach(str);
  const view = p.get('view');
  if (view && VIEWS.includes(view)) s.view = view as State['view'];
  if (p.get('color') === 'kind') s.color = 'kind';
  s.cuda = p.get('cuda') === '1';
  s.invert = p.get('invert') === '1';
  const num = (k: string) => { const v = Number(p.get(k)); return p.get(k) !== null && isFinite(v) ? v : undefined; };
  s.sf = num('sf'); s.st = num('st');
  if (s.sf === undefined || s.st === undefined || s.sf >= s.st) s.sf = s.st = undefined;
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

/* "now", "now-15m", Unix seconds, or an RFC 3339 date, to Unix seconds. */
export function resolveTime(t: string, now = Date.now() / 1000): number {
  const m = /^now(?:-(\d+(?:\.\d+)?)([smhd]))?$/.exec(t);
  if (m) return m[1] ? now - Number(m[1]) * DUR[m[2]] : now;
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t);
  const d = Date.parse(t);
  return isNaN(d) ? now : d / 1000;
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
