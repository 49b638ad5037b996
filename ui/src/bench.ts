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

/*
 * The worst cases: a root with as many columns as fit at px pixels each, each
 * a chain of frames deep enough for the node count. At 1.02 px every node
 * is painted; at 0.51 px every node is looked at and two share a pixel.
 */
function comb(nodes: number, width: number, px: number): ProfileJSON {
  const cols = Math.floor(width / px), depth = Math.max(1, Math.ceil((nodes - 1) / cols));
  const n = [0], b = [0], k = [-1], v = [cols], sf = [0], d = [0];
  for (let c = 0; c < cols && n.length < nodes; c++)
    for (let j = 1; j <= depth && n.length < nodes; j++) {
      n.push(1 + ((c * 7 + j) % 5000)); b.push(1 + (c % 5)); k.push(0); v.push(1); sf.push(j === depth ? 1 : 0); d.push(j);
    }
  const names = ['all', ...Array.from({ length: 5000 }, (_, i) => `fn_${i}`)];
  return { version: 1, unit: 'samples', total: cols, names, binaries: ['', '/usr/bin/app', '/usr/lib/libc.so.6', '/usr/lib/libcuda.so.1', '/usr/lib/libpython3.11.so', '[kernel]'],
    nodes: { n, b, k, v, s: sf, d }, trimmed: { nodes: 0, value: 0 } };
}

const app = document.getElementById('app')!;
const out = document.createElement('pre');
app.append(out);
const N = Number(new URLSearchParams(location.search).get('nodes') ?? 100000);

/* Times full renders, each flushed to pixels (getImageData waits for the raster). */
function time(j: ProfileJSON) {
  const t0 = performance.now();
  const tree = fromJSON(j);
  const treeMs = performance.now() - t0;
  const fg = new FlameGraph();
  app.append(fg.el);
  fg.setTree(tree, 'binary');
  const ctx = fg.canvas.getContext('2d')!;
  const runs: number[] = [];
  for (let i = 0; i < 11; i++) {
    const a = performance.now();
    fg.render();
    ctx.getImageData(0, 0, 1, 1);
    runs.push(performance.now() - a);
  }
  runs.sort((x, y) => x - y);
  const t1 = performance.now();
  fg.setSearch(/fn_12/);
  ctx.getImageData(0, 0, 1, 1);
  const searchMs = performance.now() - t1;
  return { nodes: tree.n, drawn: fg.lastDrawn, treeMs: +treeMs.toFixed(1), renderMedianMs: +runs[5].toFixed(1),
    renderMaxMs: +runs[10].toFixed(1), searchRenderMs: +searchMs.toFixed(1), width: fg.el.clientWidth };
}
const width = app.clientWidth || 1500;
const result = { random: time(synthetic(N)), halfPixel: time(comb(N, width - 12, 0.51)), onePixel: time(comb(N, width - 12, 1.02)) };
out.textContent = JSON.stringify(result, null, 1);
document.body.dataset.result = JSON.stringify(result);
