// The sandwich view: callers of one function above it (growing upward),
// its callees below. Compared with a baseline, both are diff trees.
import type { ColorMode } from './colors';
import { diffTrees } from './diff';
import { FlameGraph } from './flamegraph';
import { type Tree, sandwich, fmtValue, pct, functions } from './profile';

export class SandwichView {
  readonly el = document.createElement('div');
  private pick = document.createElement('input');
  private list = document.createElement('datalist');
  private info = document.createElement('div');
  private callers = new FlameGraph({ flame: true });
  private callees = new FlameGraph();
  private tree: Tree | null = null;

  constructor(private onPick: (fn: string) => void) {
    this.el.className = 'sandwich';
    this.pick.placeholder = 'function (pick from the table, or type)';
    this.pick.className = 'sandwich-pick';
    this.list.id = 'sandwich-functions';
    this.pick.setAttribute('list', this.list.id);
    this.pick.addEventListener('change', () => this.onPick(this.pick.value));
    const l1 = document.createElement('h3'); l1.textContent = 'Callers';
    const l2 = document.createElement('h3'); l2.textContent = 'Callees';
    this.info.className = 'sandwich-info';
    this.el.append(this.pick, this.list, this.info, l1, this.callers.el, l2, this.callees.el);
  }

  show(t: Tree, fn: string, mode: ColorMode, base: Tree | null = null): void {
    if (this.tree !== t) {
      this.tree = t;
      const fns = functions(t).sort((a, b) => b.self - a.self).slice(0, 300);
      this.list.replaceChildren(...fns.map((f) => { const o = document.createElement('option'); o.value = f.name; return o; }));
      if (!fn && fns.length) fn = fns[0].name;
    }
    this.pick.value = fn;
    const { callers, callees } = sandwich(t, fn);
    const line = (c: Tree, d: Tree, of: Tree) => `total ${fmtValue(c.total[0], of.unit)} (${pct(c.total[0], of.total[0])}), ` +
      `self ${fmtValue(d.self[0], of.unit)} (${pct(d.self[0], of.total[0])})`;
    this.info.textContent = callers.total[0] ? `${fn}: ${line(callers, callees, t)}` : `${fn}: not in this profile`;
    if (base) {
      const b = sandwich(base, fn);
      this.info.textContent += b.callers.total[0] ? `; baseline: ${line(b.callers, b.callees, base)}` : '; not in the baseline';
      this.callers.setTree(diffTrees(b.callers, callers), mode); this.callers.render();
      this.callees.setTree(diffTrees(b.callees, callees), mode); this.callees.render();
      return;
    }
    this.callers.setTree(callers, mode); this.callers.render();
    this.callees.setTree(callees, mode); this.callees.render();
  }
}
