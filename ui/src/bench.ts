// Benchmark page (not a test): builds synthetic 100k-node profiles and
// times the flame graph's full render, hovering and a search.
// Open /ui/bench.html; results are printed on the page and kept in
// document.body.dataset.result (JSON) for scripts (tests/ui/bench.mjs).
import './style.css';
import { FlameGraph } from './flamegraph';
import { fromJSON } from './profile';
import type { ProfileJSON } from './api';

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
  // Hover: 200 mouse moves across the graph, each a hit test, an outline and a tooltip.
  const box = fg.canvas.getBoundingClientRect();
  const th = performance.now();
  for (let i = 0; i < 200; i++) {
    fg.canvas.dispatchEvent(new MouseEvent('mousemove', { clientX: box.left + (i * 7.3) % box.width, clientY: box.top + (i * 13) % Math.min(box.height, 400), bubbles: true }));
  }
  fg.canvas.getContext('2d')!.getImageData(0, 0, 1, 1);
  const hoverMs = (performance.now() - th) / 200;
  const t1 = performance.now();
  fg.setSearch(/fn_12/);
  ctx.getImageData(0, 0, 1, 1);
  const searchMs = performance.now() - t1;
  return { nodes: tree.n, drawn: fg.lastDrawn, treeMs: +treeMs.toFixed(1), renderMedianMs: +runs[5].toFixed(1),
    renderMaxMs: +runs[10].toFixed(1), hoverMs: +hoverMs.toFixed(2), searchRenderMs: +searchMs.toFixed(1), width: fg.el.clientWidth };
}
const width = app.clientWidth || 1500;
const result = { halfPixel: time(comb(N, width - 12, 0.51)), onePixel: time(comb(N, width - 12, 1.02)) };
out.textContent = JSON.stringify(result, null, 1);
document.body.dataset.result = JSON.stringify(result);
