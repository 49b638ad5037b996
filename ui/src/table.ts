// The function table: self and total per function, sortable and filterable.
import { basename } from './colors';
import { type FnRow, type Tree, functions, fmtValue, pct } from './profile';

type Key = 'name' | 'binary' | 'self' | 'total';

export class FunctionTable {
  readonly el = document.createElement('div');
  private filter = document.createElement('input');
  private table = document.createElement('table');
  private rows: FnRow[] = [];
  private tree: Tree | null = null;
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

  setTree(t: Tree): void { this.tree = t; this.rows = functions(t); this.draw(); }

  private draw(): void {
    const t = this.tree;
    if (!t) return;
    let re: RegExp | null = null;
    try { re = this.filter.value ? new RegExp(this.filter.value, 'i') : null; } catch { re = null; }
    const k = this.sort, dir = this.desc ? -1 : 1;
    const rows = this.rows.filter((r) => !re || re.test(r.name) || re.test(r.binary))
      .sort((a, b) => (a[k] < b[k] ? -dir : a[k] > b[k] ? dir : 0));
    const total = t.total[0];
    const head = document.createElement('thead');
    const hr = document.createElement('tr');
    for (const [key, label] of [['name', 'Function'], ['binary', 'Binary'], ['self', 'Self'], ['total', 'Total']] as [Key, string][]) {
      const th = document.createElement('th');
      th.textContent = label + (this.sort === key ? (this.desc ? ' ▼' : ' ▲') : '');
      th.dataset.key = key;
      th.addEventListener('click', () => {
        if (this.sort === key) this.desc = !this.desc; else { this.sort = key; this.desc = key === 'self' || key === 'total'; }
        this.draw();
      });
      hr.append(th);
    }
    head.append(hr);
    const body = document.createElement('tbody');
    for (const r of rows.slice(0, this.maxRows)) {
      const tr = document.createElement('tr');
      const bar = (v: number) => `<span class="bar" style="width:${Math.min(100, (100 * v) / (total || 1)).toFixed(1)}%"></span>`;
      tr.innerHTML = `<td class="fn"></td><td class="bin"></td>` +
        `<td class="num">${bar(r.self)}<span>${fmtValue(r.self, t.unit).replace(' samples', '')} (${pct(r.self, total)})</span></td>` +
        `<td class="num">${bar(r.total)}<span>${fmtValue(r.total, t.unit).replace(' samples', '')} (${pct(r.total, total)})</span></td>`;
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
      tr.innerHTML = `<td colspan="4" class="more">${rows.length - this.maxRows} more functions; filter to see them</td>`;
      body.append(tr);
    }
  }
}
