// The kernel table of the GPU-time profile: kernels, copies and sets by
// GPU time (GET /api/v1/gpu/kernels/top), with their share, launches, mean
// and longest duration. A click on a row shows the flame graph of the
// stacks that launched it. Compared with a baseline, each kernel's share
// in both and the difference, sorted by how much it changed.
import { shortKernelName } from './kname';
import { fmtValue, pct } from './profile';

export interface KernelRow {
  name: string; kind: string; calls: number; records: number;
  total_ns: number; mean_ns: number; max_ns: number;
}
export interface KernelsTopJSON { from: number; to: number; total_ns: number; kernels: KernelRow[] }

interface Row { name: string; kind: string; sel: KernelRow | null; base: KernelRow | null; share: number; baseShare: number; diff: number }

type Key = 'name' | 'kind' | 'total' | 'calls' | 'mean' | 'max' | 'base' | 'diff';

const ns = (v: number) => fmtValue(v, 'nanoseconds');

export class KernelTable {
  readonly el = document.createElement('div');
  private filter = document.createElement('input');
  private short = document.createElement('input');
  private table = document.createElement('table');
  private note = document.createElement('div');
  private rows: Row[] = [];
  private sel: KernelsTopJSON | null = null;
  private base: KernelsTopJSON | null = null;
  private sort: Key = 'total';
  private desc = true;

  constructor(private onPick: (name: string) => void) {
    this.el.className = 'kernel-table';
    this.filter.placeholder = 'filter kernels (regex)';
    this.filter.className = 'kernel-filter';
    this.filter.addEventListener('input', () => this.draw());
    this.short.type = 'checkbox';
    this.short.checked = true;
    this.short.className = 'short-names';
    this.short.addEventListener('change', () => this.draw());
    const lab = document.createElement('label');
    lab.append(this.short, ' short names (full name on hover)');
    this.note.className = 'table-note';
    this.el.append(this.filter, ' ', lab, this.note, this.table);
  }

  /* The selection's kernels and, when comparing, the baseline's. */
  set(sel: KernelsTopJSON, base: KernelsTopJSON | null): void {
    const compareNow = !!base, before = !!this.base;
    this.sel = sel; this.base = base;
    const rows = new Map<string, Row>();
    const row = (k: KernelRow) => {
      const key = `${k.kind}\0${k.name}`;
      let r = rows.get(key);
      if (!r) rows.set(key, r = { name: k.name, kind: k.kind, sel: null, base: null, share: 0, baseShare: 0, diff: 0 });
      return r;
    };
    for (const k of sel.kernels) { const r = row(k); r.sel = k; r.share = sel.total_ns > 0 ? k.total_ns / sel.total_ns : 0; }
    for (const k of base?.kernels ?? []) { const r = row(k); r.base = k; r.baseShare = base!.total_ns > 0 ? k.total_ns / base!.total_ns : 0; }
    for (const r of rows.values()) r.diff = r.share - r.baseShare;
    this.rows = [...rows.values()];
    // A comparison starts sorted by the change, a single profile by GPU time.
    if (compareNow !== before) { this.sort = compareNow ? 'diff' : 'total'; this.desc = true; }
    this.draw();
  }

  private value(r: Row, k: Key): number | string {
    switch (k) {
      case 'name': return r.name;
      case 'kind': return r.kind;
      case 'total': return r.sel?.total_ns ?? 0;
      case 'calls': return r.sel?.calls ?? 0;
      case 'mean': return r.sel?.mean_ns ?? 0;
      case 'max': return r.sel?.max_ns ?? 0;
      case 'base': return r.base?.total_ns ?? 0;
      // By size of the change, grown or shrunk: what changed most comes first.
      case 'diff': return Math.abs(r.diff);
    }
  }

  private draw(): void {
    const sel = this.sel;
    if (!sel) return;
    const cmp = !!this.base;
    let re: RegExp | null = null;
    try { re = this.filter.value ? new RegExp(this.filter.value, 'i') : null; } catch { re = null; }
    const k = this.sort, dir = this.desc ? -1 : 1;
    const rows = this.rows.filter((r) => !re || re.test(r.name))
      .sort((a, b) => { const x = this.value(a, k), y = this.value(b, k); return x < y ? -dir : x > y ? dir : 0; });
    const cols: [Key, string][] = cmp
      ? [['name', 'Kernel'], ['kind', 'Kind'], ['base', 'Baseline'], ['total', 'Selection'], ['diff', 'Difference'], ['calls', 'Launches']]
      : [['name', 'Kernel'], ['kind', 'Kind'], ['total', 'GPU time'], ['total', 'Share'], ['calls', 'Launches'], ['mean', 'Mean'], ['max', 'Max']];
    const head = document.createElement('thead');
    const hr = document.createElement('tr');
    for (const [key, label] of cols) {
      const th = document.createElement('th');
      th.textContent = label + (this.sort === key && label !== 'Share' ? (this.desc ? ' ▼' : ' ▲') : '');
      th.dataset.key = key;
      th.addEventListener('click', () => {
        if (this.sort === key) this.desc = !this.desc; else { this.sort = key; this.desc = key !== 'name' && key !== 'kind'; }
        this.draw();
      });
      hr.append(th);
    }
    head.append(hr);
    const body = document.createElement('tbody');
    const bar = (v: number) => `<span class="bar" style="width:${Math.min(100, 100 * v).toFixed(1)}%"></span>`;
    for (const r of rows) {
      const tr = document.createElement('tr');
      tr.dataset.name = r.name;
      const name = document.createElement('td');
      name.className = 'fn';
      name.textContent = this.short.checked ? shortKernelName(r.name) : r.name;
      name.title = `${r.name}\nclick: the flame graph of the stacks that launched it`;
      const kind = document.createElement('td');
      kind.className = 'bin';
      kind.textContent = r.kind;
      tr.append(name, kind);
      const num = (html: string, cls = '') => { const td = document.createElement('td'); td.className = `num ${cls}`; td.innerHTML = html; tr.append(td); };
      if (cmp) {
        num(`${bar(r.baseShare)}<span>${r.base ? `${ns(r.base.total_ns)} (${pct(r.base.total_ns, this.base!.total_ns)})` : '–'}</span>`);
        num(`${bar(r.share)}<span>${r.sel ? `${ns(r.sel.total_ns)} (${pct(r.sel.total_ns, sel.total_ns)})` : '–'}</span>`);
        const d = 100 * r.diff;
        num(`<span>${d >= 0 ? '+' : '−'}${Math.abs(d).toFixed(1)} pt</span>`, d > 0.05 ? 'grew' : d < -0.05 ? 'shrank' : '');
        num(`<span>${(r.base?.calls ?? 0).toLocaleString('en-US')} → ${(r.sel?.calls ?? 0).toLocaleString('en-US')}</span>`);
      } else {
        num(`${bar(r.share)}<span>${ns(r.sel!.total_ns)}</span>`);
        num(`<span>${pct(r.sel!.total_ns, sel.total_ns)}</span>`);
        num(`<span>${r.sel!.calls.toLocaleString('en-US')}</span>`);
        num(`<span>${ns(r.sel!.mean_ns)}</span>`);
        num(`<span>${ns(r.sel!.max_ns)}</span>`);
      }
      tr.addEventListener('click', () => this.onPick(r.name));
      body.append(tr);
    }
    if (!rows.length) {
      const tr = document.createElement('tr');
      tr.innerHTML = `<td colspan="${cols.length}" class="more">no GPU kernels, copies or sets in this window</td>`;
      body.append(tr);
    }
    this.table.replaceChildren(head, body);
    this.note.textContent = cmp
      ? `GPU time: baseline ${ns(this.base!.total_ns)}, selection ${ns(sel.total_ns)}; difference in points of share`
      : `${rows.length} kernels, copies and sets; ${ns(sel.total_ns)} of GPU time`;
  }
}
