// The function table: self and total per function, sortable and filterable.
// Compared with a baseline, each function's self share in both, the
// difference and the difference of its total share, sorted by how much
// its self share changed.
import { basename } from './colors';
import { type FnRow, type Tree, functions, fmtValue, pct } from './profile';

type Key = 'name' | 'binary' | 'self' | 'total' | 'base' | 'diff' | 'dtotal';

interface Row extends FnRow { baseSelf: number; baseTotal: number; diff: number; dtotal: number }

export class FunctionTable {
  readonly el = document.createElement('div');
  private filter = document.createElement('input');
  private table = document.createElement('table');
  private rows: Row[] = [];
  private tree: Tree | null = null;
  private base: Tree | null = null;
  private sort: Key = 'self';
  private desc = true;
  maxRows = 500;

  constructor(private onPick: (fn: string) => void) {
    this.el.className = 'fn-table';
    this.filter.placeholder = 'filter functions (regex)';
    this.filter.className = 'table-filter';
    this.filter.addEventListener('input', () => this.draw());
    this.el.append(this.filter, this.table);
  }

  /* The selection's tree and, when comparing, the baseline's (both filtered alike). */
  setTree(t: Tree, base: Tree | null = null): void {
    if (!!base !== !!this.base) { this.sort = base ? 'diff' : 'self'; this.desc = true; }
    this.tree = t; this.base = base;
    const rows = new Map<string, Row>();
    const T = t.total[0], B = base ? base.total[0] : 0;
    const key = (r: FnRow) => `${r.name}\0${r.binary}\0${r.kind}`;
    for (const r of functions(t)) rows.set(key(r), { ...r, baseSelf: 0, baseTotal: 0, diff: 0, dtotal: 0 });
    if (base) {
      for (const r of functions(base)) {
        let row = rows.get(key(r));
        if (!row) rows.set(key(r), row = { ...r, self: 0, total: 0, baseSelf: 0, baseTotal: 0, diff: 0, dtotal: 0 });
        row.baseSelf = r.self; row.baseTotal = r.total;
      }
      const share = (v: number, of: number) => (of > 0 ? v / of : 0);
      for (const r of rows.values()) {
        r.diff = share(r.self, T) - share(r.baseSelf, B);
        r.dtotal = share(r.total, T) - share(r.baseTotal, B);
      }
    }
    this.rows = [...rows.values()];
    this.draw();
  }

  private value(r: Row, k: Key): number | string {
    // The differences sort by size, grown or shrunk: what changed most comes first.
    if (k === 'diff') return Math.abs(r.diff);
    if (k === 'dtotal') return Math.abs(r.dtotal);
    if (k === 'base') return r.baseSelf;
    return r[k];
  }

  private draw(): void {
    const t = this.tree;
    if (!t) return;
    const base = this.base;
    let re: RegExp | null = null;
    try { re = this.filter.value ? new RegExp(this.filter.value, 'i') : null; } catch { re = null; }
    const k = this.sort, dir = this.desc ? -1 : 1;
    const rows = this.rows.filter((r) => !re || re.test(r.name) || re.test(r.binary))
      .sort((a, b) => { const x = this.value(a, k), y = this.value(b, k); return x < y ? -dir : x > y ? dir : 0; });
    const total = t.total[0], btotal = base ? base.total[0] : 0;
    const cols: [Key, string][] = base
      ? [['name', 'Function'], ['binary', 'Binary'], ['base', 'Baseline self'], ['self', 'Selection self'], ['diff', 'Difference (self)'], ['dtotal', 'Difference (total)']]
      : [['name', 'Function'], ['binary', 'Binary'], ['self', 'Self'], ['total', 'Total']];
    const head = document.createElement('thead');
    const hr = document.createElement('tr');
    for (const [key, label] of cols) {
      const th = document.createElement('th');
      th.textContent = label + (this.sort === key ? (this.desc ? ' ▼' : ' ▲') : '');
      th.dataset.key = key;
      th.addEventListener('click', () => {
        if (this.sort === key) this.desc = !this.desc; else { this.sort = key; this.desc = key !== 'name' && key !== 'binary'; }
        this.draw();
      });
      hr.append(th);
    }
    head.append(hr);
    const body = document.createElement('tbody');
    const bar = (v: number, of: number) => `<span class="bar" style="width:${Math.min(100, (100 * v) / (of || 1)).toFixed(1)}%"></span>`;
    const val = (v: number, of: number, unit: string) => `${fmtValue(v, unit).replace(' samples', '')} (${pct(v, of)})`;
    const pts = (d: number) => { const p = 100 * d; return `${p >= 0 ? '+' : '−'}${Math.abs(p).toFixed(Math.abs(p) < 0.1 && p !== 0 ? 3 : 1)} pt`; };
    const sign = (d: number) => (d > 0.0005 ? 'grew' : d < -0.0005 ? 'shrank' : '');
    for (const r of rows.slice(0, this.maxRows)) {
      const tr = document.createElement('tr');
      tr.innerHTML = `<td class="fn"></td><td class="bin"></td>` + (base
        ? `<td class="num">${bar(r.baseSelf, btotal)}<span>${val(r.baseSelf, btotal, base.unit)}</span></td>` +
          `<td class="num">${bar(r.self, total)}<span>${val(r.self, total, t.unit)}</span></td>` +
          `<td class="num ${sign(r.diff)}"><span>${pts(r.diff)}</span></td>` +
          `<td class="num ${sign(r.dtotal)}"><span>${pts(r.dtotal)}</span></td>`
        : `<td class="num">${bar(r.self, total)}<span>${val(r.self, total, t.unit)}</span></td>` +
          `<td class="num">${bar(r.total, total)}<span>${val(r.total, total, t.unit)}</span></td>`);
      (tr.children[0] as HTMLElement).textContent = r.name;
      (tr.children[0] as HTMLElement).title = 'open in the sandwich view';
      (tr.children[1] as HTMLElement).textContent = basename(r.binary);
      (tr.children[1] as HTMLElement).title = r.binary;
      tr.addEventListener('click', () => this.onPick(r.name));
      body.append(tr);
    }
    this.table.replaceChildren(head, body);
    if (rows.length > this.maxRows) {
      const tr = document.createElement('tr');
      tr.innerHTML = `<td colspan="${cols.length}" class="more">${rows.length - this.maxRows} more functions; filter to see them</td>`;
      body.append(tr);
    }
  }
}
