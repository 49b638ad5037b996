// A flame graph tree in flat arrays, in preorder (children heaviest first),
// as /api/v1/profile?format=json sends it, plus the transforms the filters
// need (hide frames, focus, invert) and the per-function aggregates of the
// table and the sandwich view.
import type { ProfileJSON } from './api';

export const KIND_ROOT = -1, KIND_PROCESS = -2, KIND_TRIMMED = -3;
export const KIND_NAMES: Record<number, string> = {
  [-1]: 'root', [-2]: 'process', [-3]: 'trimmed', 0: 'native', 1: 'kernel', 2: 'JIT', 3: 'Python', 4: 'CUDA kernel',
};

export interface Tree {
  n: number;
  names: string[]; binaries: string[];
  name: Int32Array; bin: Int32Array; kind: Int8Array; depth: Int32Array;
  total: Float64Array; self: Float64Array;
  parent: Int32Array;  // -1 for the root
  end: Int32Array;     // one past the subtree's last node
  x: Float64Array;     // left edge, in the same unit as total
  maxDepth: number;
  unit: string;
  trimmed: { nodes: number; value: number };
}

/* Fills parent, end, x and maxDepth from the preorder depths and totals. */
export function finish(t: Tree): Tree {
  const stack: number[] = [];
  const nextX = new Float64Array(t.n);
  let maxDepth = 0;
  for (let i = 0; i < t.n; i++) {
    const d = t.depth[i];
    while (stack.length > d) t.end[stack.pop()!] = i;
    const p = stack.length ? stack[stack.length - 1] : -1;
    t.parent[i] = p;
    t.x[i] = p < 0 ? 0 : nextX[p];
    if (p >= 0) nextX[p] += t.total[i];
    nextX[i] = t.x[i];
    stack.push(i);
    if (d > maxDepth) maxDepth = d;
  }
  while (stack.length) t.end[stack.pop()!] = t.n;
  t.maxDepth = maxDepth;
  return t;
}

export function alloc(n: number, names: string[], binaries: string[], unit: string): Tree {
  return {
    n, names, binaries, unit, trimmed: { nodes: 0, value: 0 }, maxDepth: 0,
    name: new Int32Array(n), bin: new Int32Array(n), kind: new Int8Array(n), depth: new Int32Array(n),
    total: new Float64Array(n), self: new Float64Array(n), parent: new Int32Array(n),
    end: new Int32Array(n), x: new Float64Array(n),
  };
}

export function fromJSON(j: ProfileJSON): Tree {
  const nd = j.nodes, n = nd.n.length;
  const t = alloc(n, j.names, j.binaries, j.unit);
  t.name.set(nd.n); t.bin.set(nd.b); t.kind.set(nd.k); t.depth.set(nd.d);
  t.total.set(nd.v); t.self.set(nd.s);
  t.trimmed = j.trimmed;
  return finish(t);
}

/* Builds a tree from weighted paths of (name, binary, kind) frames. */
export class Builder {
  private keys = new Map<string, number>();
  private kids: number[][] = [[]];
  private nm: number[] = [0]; private bn: number[] = [0]; private kd: number[] = [KIND_ROOT];
  private tot: number[] = [0]; private slf: number[] = [0];
  constructor(private names: string[], private binaries: string[], private unit: string,
              rootName = 0) { this.nm[0] = rootName; }

  add(path: ArrayLike<number>, src: Tree, w: number, trimmedLeaf = false): void {
    let cur = 0;
    this.tot[0] += w;
    const len = path.length + (trimmedLeaf ? 1 : 0);
    for (let i = 0; i < len; i++) {
      const f = i < path.length ? path[i] : -1;
      const name = f < 0 ? this.trimmedName() : src.name[f];
      const bin = f < 0 ? 0 : src.bin[f], kind = f < 0 ? KIND_TRIMMED : src.kind[f];
      const key = `${cur}:${name}:${bin}:${kind}`;
      let c = this.keys.get(key);
      if (c === undefined) {
        c = this.nm.length;
        this.keys.set(key, c);
        this.nm.push(name); this.bn.push(bin); this.kd.push(kind); this.tot.push(0); this.slf.push(0);
        this.kids.push([]);
        this.kids[cur].push(c);
      }
      this.tot[c] += w;
      cur = c;
    }
    this.slf[cur] += w;
  }

  private trimmedIdx = -1;
  private trimmedName(): number {
    if (this.trimmedIdx < 0) { this.trimmedIdx = this.names.length; this.names.push('[trimmed]'); }
    return this.trimmedIdx;
  }

  build(): Tree {
    const n = this.nm.length;
    const t = alloc(n, this.names, this.binaries, this.unit);
    let o = 0;
    const stack: [number, number][] = [[0, 0]];
    while (stack.length) {
      const [id, d] = stack.pop()!;
      t.name[o] = this.nm[id]; t.bin[o] = this.bn[id]; t.kind[o] = this.kd[id];
      t.total[o] = this.tot[id]; t.self[o] = this.slf[id]; t.depth[o] = d;
      o++;
      const k = this.kids[id].slice().sort((a, b) => this.tot[a] - this.tot[b]);
      for (const c of k) stack.push([c, d + 1]);
    }
    return finish(t);
  }
}

/* The value a node holds that none of its listed children do: its own samples plus trimmed ones. */
function residual(t: Tree, i: number): number {
  let kids = 0;
  for (let j = i + 1; j < t.end[i]; j = t.end[j]) kids += t.total[j];
  return t.total[i] - t.self[i] - kids;
}

/*
 * Rebuilds t from its root-to-node paths, each mapped by fn (which may
 * drop frames, cut or reverse the path, or return null to drop it).
 */
export function mapPaths(t: Tree, fn: (path: number[]) => number[] | null, rootName = 0): Tree {
  const b = new Builder(t.names.slice(), t.binaries, t.unit, rootName);
  const path: number[] = [];
  for (let i = 1; i < t.n; i++) {
    path.length = t.depth[i] - 1;
    path.push(i);
    const res = residual(t, i);
    if (t.self[i] <= 0 && res <= 0) continue;
    const p = fn(path.slice());
    if (!p) continue;
    if (t.self[i] > 0) b.add(p, t, t.self[i]);
    if (res > 0) b.add(p, t, res, true);
  }
  const out = b.build();
  out.trimmed = t.trimmed;
  return out;
}

export const CUDA_INTERNALS = 'libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnvrtc|libcupti|libnccl|libcufft|libcurand|libcusparse|libcusolver|libnvToolsExt|libnvidia-';

export interface Filters { hide: string; hidebin: string; cuda: boolean; focus: string; invert: boolean; through?: string }

export function safeRegExp(s: string): RegExp | null {
  if (!s) return null;
  try { return new RegExp(s); } catch { return new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')); }
}

export function applyFilters(t: Tree, f: Filters): Tree {
  const hide = safeRegExp(f.hide);
  const bins = [f.hidebin, f.cuda ? CUDA_INTERNALS : ''].filter(Boolean).join('|');
  const hideBin = safeRegExp(bins);
  if (!hide && !hideBin && !f.focus && !f.invert && !f.through) return t;
  const hiddenName = new Uint8Array(t.names.length), hiddenBin = new Uint8Array(t.binaries.length);
  if (hide) t.names.forEach((s, i) => { hiddenName[i] = hide.test(s) ? 1 : 0; });
  if (hideBin) t.binaries.forEach((s, i) => { hiddenBin[i] = s && hideBin.test(s) ? 1 : 0; });
  const focusIdx = f.focus ? t.names.indexOf(f.focus) : -1;
  // "Through" keeps whole stacks (root to leaf) that pass through a
  // function: for a GPU kernel, the CPU stacks that launched it.
  const throughIdx = f.through ? t.names.indexOf(f.through) : -1;
  if ((f.focus && focusIdx < 0) || (f.through && throughIdx < 0)) return mapPaths(t, () => null);
  let rootName = 0;
  if (focusIdx >= 0) rootName = focusIdx;
  return mapPaths(t, (p) => {
    if (throughIdx >= 0 && !p.some((i) => t.name[i] === throughIdx)) return null;
    let q = p.filter((i) => t.kind[i] === KIND_PROCESS || (!hiddenName[t.name[i]] && !hiddenBin[t.bin[i]]));
    if (focusIdx >= 0) {
      const at = q.findIndex((i) => t.name[i] === focusIdx);
      if (at < 0) return null;
      q = q.slice(at + 1);
    }
    if (f.invert) q.reverse();
    return q;
  }, rootName);
}

export interface FnRow { name: string; binary: string; kind: number; self: number; total: number }

/* Self and total per function; total counts a recursive function once per stack. */
export function functions(t: Tree): FnRow[] {
  const rows = new Map<string, FnRow>();
  const open = new Map<string, number>();
  const stack: [number, string][] = [];
  for (let i = 1; i < t.n; i++) {
    while (stack.length && stack[stack.length - 1][0] <= i) {
      const k = stack.pop()![1];
      open.set(k, open.get(k)! - 1);
    }
    if (t.kind[i] === KIND_PROCESS || t.kind[i] === KIND_TRIMMED) continue;
    const key = t.name[i] + ':' + t.bin[i];
    let r = rows.get(key);
    if (!r) {
      r = { name: t.names[t.name[i]], binary: t.binaries[t.bin[i]] ?? '', kind: t.kind[i], self: 0, total: 0 };
      rows.set(key, r);
    }
    r.self += t.self[i];
    const o = open.get(key) ?? 0;
    if (o === 0) r.total += t.total[i];
    open.set(key, o + 1);
    stack.push([t.end[i], key]);
  }
  return [...rows.values()];
}

/* Callers (root = fn, growing toward main) and callees (root = fn) of one function. */
export function sandwich(t: Tree, fn: string): { callers: Tree; callees: Tree } {
  const idx = t.names.indexOf(fn);
  const callers = mapPaths(t, (p) => {
    const at = p.findIndex((i) => t.name[i] === idx);
    return at < 0 ? null : p.slice(0, at).reverse();
  }, Math.max(idx, 0));
  const callees = applyFilters(t, { hide: '', hidebin: '', cuda: false, focus: fn, invert: false, through: '' });
  return { callers, callees };
}

/* The node a ';'-joined name path leads to from the root, or 0. */
export function findPath(t: Tree, path: string): number {
  if (!path) return 0;
  let cur = 0;
  for (const name of path.split(';')) {
    let found = -1;
    for (let j = cur + 1; j < t.end[cur]; j = t.end[j]) if (t.names[t.name[j]] === name) { found = j; break; }
    if (found < 0) return cur;
    cur = found;
  }
  return cur;
}

export function pathOf(t: Tree, i: number): string {
  const parts: string[] = [];
  for (let c = i; c > 0; c = t.parent[c]) parts.push(t.names[t.name[c]]);
  return parts.reverse().join(';');
}

export function fmtValue(v: number, unit: string): string {
  if (unit === 'nanoseconds') {
    if (v >= 1e9) return `${(v / 1e9).toFixed(2)} s`;
    if (v >= 1e6) return `${(v / 1e6).toFixed(1)} ms`;
    if (v >= 1e3) return `${(v / 1e3).toFixed(1)} µs`;
    return `${v} ns`;
  }
  return `${v.toLocaleString('en-US')} samples`;
}

export function pct(v: number, of: number): string {
  if (!(of > 0)) return '–';
  if (v === 0) return '0%';
  return `${((100 * v) / of).toFixed(v / of < 0.001 ? 3 : 1)}%`;
}
