// Comparison of two profiles of one type: a baseline and the selection,
// merged frame by frame (same name, binary and kind under the same path).
//
// Done in the browser from two /api/v1/profile replies rather than by a
// server route: the two fetches are the ones any view makes, each already
// trimmed by the server, the filters (hide, focus, invert, through) apply
// to each side exactly as they do to one profile, and the server needs no
// second copy of its tree code. A frame trimmed on one side only counts in
// its parent there, as it does in a single profile.
//
// Windows of different lengths or selectors of different sizes make raw
// values incomparable, so a frame is judged by its share of its own
// profile. A frame's width is the mean of its two shares, so frames that
// vanished from the selection still show (and are green).
import { KIND_ROOT, type Tree, alloc, finish } from './profile';

export interface DiffTree extends Tree {
  // Per node, in the profiles' own unit: total and self in each.
  base: Float64Array; sel: Float64Array; baseSelf: Float64Array; selSelf: Float64Array;
  baseTotal: number; selTotal: number;
  valueUnit: string;   // the profiles' unit; `unit` is 'share' for the merged widths
}

export function isDiff(t: Tree | null): t is DiffTree {
  return !!t && (t as DiffTree).base !== undefined;
}

interface Node { name: number; bin: number; kind: number; b: number; s: number; bs: number; ss: number; kids: number[] }

export function diffTrees(base: Tree, sel: Tree): DiffTree {
  const names: string[] = [], binaries: string[] = [];
  const nameIdx = new Map<string, number>(), binIdx = new Map<string, number>();
  const intern = (m: Map<string, number>, arr: string[], s: string) => {
    let i = m.get(s);
    if (i === undefined) { i = arr.length; arr.push(s); m.set(s, i); }
    return i;
  };
  const nodes: Node[] = [];
  const add = (t: Tree, i: number): Node => {
    const n: Node = { name: intern(nameIdx, names, t.names[t.name[i]]), bin: intern(binIdx, binaries, t.binaries[t.bin[i]] ?? ''),
      kind: t.kind[i], b: 0, s: 0, bs: 0, ss: 0, kids: [] };
    nodes.push(n);
    return n;
  };
  // Pairs of (node in base or -1, node in sel or -1) to merge under one merged node.
  const root = add(sel.n ? sel : base, 0);
  root.kind = KIND_ROOT;
  const work: [number, number, number][] = [[0, base.n ? 0 : -1, sel.n ? 0 : -1]];
  while (work.length) {
    const [m, bi, si] = work.pop()!;
    const node = nodes[m];
    if (bi >= 0) { node.b = base.total[bi]; node.bs = base.self[bi]; }
    if (si >= 0) { node.s = sel.total[si]; node.ss = sel.self[si]; }
    const kids = new Map<string, [number, number]>();
    const collect = (t: Tree, i: number, side: 0 | 1) => {
      for (let j = i + 1; j < t.end[i]; j = t.end[j]) {
        const key = `${t.names[t.name[j]]}\0${t.binaries[t.bin[j]] ?? ''}\0${t.kind[j]}`;
        let k = kids.get(key);
        if (!k) {
          k = [-1, -1];
          kids.set(key, k);
          node.kids.push(nodes.length);
          add(t, j);
        }
        k[side] = j;
      }
    };
    if (bi >= 0) collect(base, bi, 0);
    if (si >= 0) collect(sel, si, 1);
    let c = 0;
    for (const [b, s] of kids.values()) work.push([node.kids[c++], b, s]);
  }
  const bT = base.n ? base.total[0] : 0, sT = sel.n ? sel.total[0] : 0;
  const share = (v: number, of: number) => (of > 0 ? v / of : 0);
  const weight = (n: Node) => (share(n.b, bT) + share(n.s, sT)) / 2;
  const t = alloc(nodes.length, names, binaries, 'share') as DiffTree;
  t.base = new Float64Array(t.n); t.sel = new Float64Array(t.n);
  t.baseSelf = new Float64Array(t.n); t.selSelf = new Float64Array(t.n);
  t.baseTotal = bT; t.selTotal = sT;
  t.valueUnit = sel.n ? sel.unit : base.unit;
  // Preorder, heaviest child first, as the server sends a single profile.
  let o = 0;
  const stack: [number, number][] = [[0, 0]];
  while (stack.length) {
    const [id, d] = stack.pop()!;
    const n = nodes[id];
    t.name[o] = n.name; t.bin[o] = n.bin; t.kind[o] = n.kind; t.depth[o] = d;
    t.total[o] = weight(n); t.self[o] = (share(n.bs, bT) + share(n.ss, sT)) / 2;
    t.base[o] = n.b; t.sel[o] = n.s; t.baseSelf[o] = n.bs; t.selSelf[o] = n.ss;
    o++;
    const kids = n.kids.slice().sort((a, b) => weight(nodes[a]) - weight(nodes[b]));
    for (const k of kids) stack.push([k, d + 1]);
  }
  t.trimmed = { nodes: base.trimmed.nodes + sel.trimmed.nodes, value: 0 };
  return finish(t) as DiffTree;
}

/*
 * How node i's share changed, from -1 (only in the baseline) through 0
 * (the same share) to 1 (only in the selection): the difference of the
 * shares over the larger one, so a frame's colour says how much it
 * changed for its size, and its width how much that matters.
 */
export function change(t: DiffTree, i: number): number {
  const b = t.baseTotal > 0 ? t.base[i] / t.baseTotal : 0, s = t.selTotal > 0 ? t.sel[i] / t.selTotal : 0;
  const m = Math.max(b, s);
  return m > 0 ? (s - b) / m : 0;
}
