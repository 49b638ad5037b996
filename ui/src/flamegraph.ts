// The icicle / flame graph on a canvas. Drawing is batched per colour (one
// path and one fill per colour), subtrees narrower than half a pixel are
// skipped whole (preorder: a subtree is a contiguous range), and labels
// are cut by a measured character width instead of measureText per node.
import { Palette, type ColorMode, basename, category, diffIndex, diffPalette } from './colors';
import { change, isDiff } from './diff';
import { shortKernelName } from './kname';
import { type Tree, KIND_NAMES, fmtValue, pct } from './profile';

const ROW = 18;

export interface FlameGraphOpts {
  flame?: boolean;                 // root at the bottom
  onZoom?: (node: number) => void;
  onContext?: (node: number, ev: MouseEvent) => void;
}

export class FlameGraph {
  readonly canvas = document.createElement('canvas');
  // Hover outlines go on a canvas of their own: moving the mouse never
  // repaints the graph.
  private overlay = document.createElement('canvas');
  readonly el = document.createElement('div');
  private tip = document.createElement('div');
  private tree: Tree | null = null;
  private zoom = 0;
  private colors: Int32Array = new Int32Array(0);
  private palette = new Palette();
  private match: Uint8Array | null = null;
  private hover = -1;
  private width = 0;
  private charW = 7;
  private mode: ColorMode = 'binary';
  lastRenderMs = 0;
  lastDrawn = 0;

  constructor(private opts: FlameGraphOpts = {}) {
    this.el.className = 'flamegraph';
    this.tip.className = 'tooltip';
    this.overlay.className = 'overlay';
    this.el.append(this.canvas, this.overlay, this.tip);
    this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
    this.canvas.addEventListener('mouseleave', () => { this.hover = -1; this.tip.style.display = 'none'; this.drawHover(); });
    this.canvas.addEventListener('click', (e) => {
      const i = this.hit(e);
      if (i >= 0) { this.setZoom(i); this.opts.onZoom?.(i); }
    });
    this.canvas.addEventListener('contextmenu', (e) => {
      const i = this.hit(e);
      if (i >= 0 && this.opts.onContext) { e.preventDefault(); this.opts.onContext(i, e); }
    });
    new ResizeObserver(() => { if (this.el.clientWidth !== this.width) this.render(); }).observe(this.el);
  }

  setTree(t: Tree, mode: ColorMode): void {
    this.tree = t;
    this.mode = mode;
    this.colors = new Int32Array(t.n);
    // A comparison is coloured by how each frame's share changed, not by binary.
    if (isDiff(t)) {
      this.palette = diffPalette();
      for (let i = 0; i < t.n; i++) this.colors[i] = diffIndex(change(t, i));
    } else {
      this.palette = new Palette();
      for (let i = 0; i < t.n; i++) this.colors[i] = this.palette.index(mode, t.kind[i], t.binaries[t.bin[i]] ?? '', t.names[t.name[i]]);
    }
    this.zoom = 0;
    this.match = null;
  }

  get current(): Tree | null { return this.tree; }
  get zoomNode(): number { return this.zoom; }
  setZoom(i: number): void { this.zoom = this.tree && i < this.tree.n ? i : 0; this.render(); }

  /* Highlights nodes whose name matches; returns the outermost matches and their summed total. */
  setSearch(re: RegExp | null): { sum: number; count: number; outer: number[] } {
    const t = this.tree;
    if (!t || !re) { this.match = null; this.render(); return { sum: 0, count: 0, outer: [] }; }
    const nameHit = t.names.map((s) => re.test(s));
    const m = new Uint8Array(t.n);
    let sum = 0, count = 0;
    const outer: number[] = [];
    for (let i = 0; i < t.n; i++) {
      if (!nameHit[t.name[i]] || i === 0) continue;
      m[i] = 1; count++;
    }
    // Sum only matches with no matching ancestor, so nested matches count once.
    for (let i = 1; i < t.n;) {
      if (m[i]) { sum += t.total[i]; outer.push(i); i = t.end[i]; } else i++;
    }
    this.match = m;
    this.render();
    return { sum, count, outer };
  }

  /* The legend: categories with their colour and value in the zoomed subtree. */
  /*
   * The legend: categories with their colour and self value. src is the
   * tree to sum self over (the uninverted one when this one is inverted, so
   * leaves are frames rather than processes).
   */
  legend(src?: Tree): { cat: string; color: string; value: number }[] {
    const t = src ?? this.tree;
    if (!t) return [];
    const v = new Map<string, number>();
    for (let i = 0; i < t.n; i++) {
      if (!t.self[i]) continue;
      const cat = category(this.mode, t.kind[i], t.binaries[t.bin[i]] ?? '', t.names[t.name[i]]);
      v.set(cat, (v.get(cat) ?? 0) + t.self[i]);
    }
    return [...v].map(([cat, value]) => ({ cat, color: this.palette.categoryColor(cat), value }))
      .filter((r) => r.value > 0).sort((a, b) => b.value - a.value);
  }

  render(): void {
    const t0 = performance.now();
    const t = this.tree, c = this.canvas;
    const w = this.el.clientWidth || 800;
    this.width = w;
    if (!t || t.n === 0) { c.width = 0; return; }
    const z = this.zoom, zd = t.depth[z];
    const rows = t.maxDepth + 1;
    const dpr = window.devicePixelRatio || 1;
    const h = rows * ROW;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
      c.style.width = `${w}px`; c.style.height = `${h}px`;
    }
    const ctx = c.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '12px ui-monospace, "DejaVu Sans Mono", monospace';
    this.charW = ctx.measureText('mmmmmmmmmm').width / 10;
    const scale = w / (t.total[z] || 1), x0 = t.x[z];
    const flame = !!this.opts.flame;
    const yOf = (d: number) => (flame ? h - (d + 1) * ROW : d * ROW);
    const ncol = this.palette.colors.length;
    const rects: number[][] = Array.from({ length: ncol * 2 }, () => []);
    const labels: number[] = [];
    const m = this.match;
    // Rectangles snap to device pixels (no anti-aliasing to compute), and a
    // pixel of a row that a node already covered is not painted again: a
    // row costs at most its width in pixels, however many nodes it holds.
    const lastPx = new Int32Array(rows).fill(-1);
    const push = (i: number, x: number, width: number) => {
      const d = t.depth[i];
      let p0 = Math.floor(x * dpr);
      const p1 = Math.max(p0 + 1, Math.round((x + width) * dpr));
      if (p0 < lastPx[d]) p0 = lastPx[d];
      if (p0 >= p1) return;
      lastPx[d] = p1;
      const dim = m && !m[i] ? ncol : 0;
      rects[this.colors[i] + dim].push(p0, yOf(d), p1 - p0 > 2 ? p1 - p0 - 1 : p1 - p0);
      if (width > 3 * this.charW) labels.push(i, x, width);
    };
    // Ancestors of the zoomed node span the whole width.
    for (let a = t.parent[z]; a >= 0; a = t.parent[a]) push(a, 0, w);
    const end = t.end[z];
    for (let i = z; i < end;) {
      const width = t.total[i] * scale;
      if (width < 0.5) { i = t.end[i]; continue; }
      push(i, (t.x[i] - x0) * scale, width);
      i++;
    }
    // The rectangles are written straight into pixels: with each row's
    // pixels painted at most once, the cost is bounded by the canvas area
    // however many nodes there are.
    const W = c.width, H = c.height;
    if (!this.pixels || this.pixels.width !== W || this.pixels.height !== H) this.pixels = ctx.createImageData(W, H);
    const px = new Uint32Array(this.pixels.data.buffer);
    px.fill(0);
    const rowH = Math.max(1, Math.round((ROW - 1) * dpr));
    // One line of pixels per row of the graph, then copied down the row's height.
    const lines = new Uint32Array(W * rows);
    for (let k = 0; k < rects.length; k++) {
      const r = rects[k];
      if (!r.length) continue;
      const rgba = this.rgba(k < ncol ? this.palette.colors[k] : this.palette.dim[k - ncol]);
      for (let j = 0; j < r.length; j += 3) {
        const base = Math.round(r[j + 1] / ROW) * W;
        lines.fill(rgba, base + r[j], base + Math.min(W, r[j] + r[j + 2]));
      }
    }
    for (let L = 0; L < rows; L++) {
      const line = lines.subarray(L * W, L * W + W), y0 = Math.round(L * ROW * dpr);
      for (let y = y0, ye = Math.min(H, y0 + rowH); y < ye; y++) px.set(line, y * W);
    }
    ctx.putImageData(this.pixels, 0, 0);
    ctx.fillStyle = '#1d1d1f';
    ctx.textBaseline = 'middle';
    for (let j = 0; j < labels.length; j += 3) {
      const i = labels[j], x = labels[j + 1], width = labels[j + 2];
      const max = Math.floor((width - 6) / this.charW);
      let s = t.names[t.name[i]];
      if (t.kind[i] === 4 && s.length > max) s = shortKernelName(s);
      if (s.length > max) s = max > 2 ? s.slice(0, max - 1) + '…' : '';
      if (s) ctx.fillText(s, x + 3, yOf(t.depth[i]) + ROW / 2);
    }
    this.drawHover();
    this.lastDrawn = rects.reduce((a, r) => a + r.length / 3, 0);
    this.lastRenderMs = performance.now() - t0;
  }

  private drawHover(): void {
    const t = this.tree, o = this.overlay, c = this.canvas;
    if (o.width !== c.width || o.height !== c.height) {
      o.width = c.width; o.height = c.height; o.style.width = c.style.width; o.style.height = c.style.height;
    }
    const ctx = o.getContext('2d')!;
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, o.width, o.height);
    if (!t || this.hover < 0 || this.hover >= t.n) return;
    const i = this.hover, z = this.zoom, w = this.width;
    const scale = w / (t.total[z] || 1);
    const h = (t.maxDepth + 1) * ROW;
    const y = this.opts.flame ? h - (t.depth[i] + 1) * ROW : t.depth[i] * ROW;
    const ancestor = t.depth[i] < t.depth[z];
    const x = ancestor ? 0 : (t.x[i] - t.x[z]) * scale;
    const width = ancestor ? w : t.total[i] * scale;
    ctx.strokeStyle = '#222'; ctx.lineWidth = 1.5;
    ctx.strokeRect(x + 0.75, y + 0.75, Math.max(width - 2, 1), ROW - 2.5);
  }

  private pixels: ImageData | null = null;
  private rgbaCache = new Map<string, number>();
  /* A CSS colour as the little-endian RGBA word of an ImageData pixel. */
  private rgba(css: string): number {
    let v = this.rgbaCache.get(css);
    if (v !== undefined) return v;
    const c = document.createElement('canvas');
    c.width = c.height = 1;
    const x = c.getContext('2d', { willReadFrequently: true })!;
    x.fillStyle = css;
    x.fillRect(0, 0, 1, 1);
    const d = x.getImageData(0, 0, 1, 1).data;
    v = ((d[3] << 24) | (d[2] << 16) | (d[1] << 8) | d[0]) >>> 0;
    this.rgbaCache.set(css, v);
    return v;
  }

  /* The widest node named name, or -1 (for the browser tests). */
  find(name: string): number {
    const t = this.tree;
    let best = -1;
    if (t) for (let i = 0; i < t.n; i++) if (t.names[t.name[i]] === name && (best < 0 || t.total[i] > t.total[best])) best = i;
    return best;
  }

  /* Where node i is drawn, in CSS px from the canvas's top left, or null (for the browser tests). */
  rect(i: number): { x: number; y: number; w: number; h: number } | null {
    const t = this.tree, z = this.zoom;
    if (!t || i < 0 || i >= t.n || i < z || i >= t.end[z]) return null;
    const scale = this.width / (t.total[z] || 1), h = (t.maxDepth + 1) * ROW;
    const y = this.opts.flame ? h - (t.depth[i] + 1) * ROW : t.depth[i] * ROW;
    return { x: (t.x[i] - t.x[z]) * scale, y, w: t.total[i] * scale, h: ROW - 1 };
  }

  /* The node under the mouse, or -1. */
  hit(e: MouseEvent): number {
    const t = this.tree;
    if (!t) return -1;
    const r = this.canvas.getBoundingClientRect();
    const px = e.clientX - r.left, py = e.clientY - r.top;
    const h = (t.maxDepth + 1) * ROW;
    const d = Math.floor((this.opts.flame ? h - py : py) / ROW);
    const z = this.zoom;
    if (d < t.depth[z]) { let a = z; while (a >= 0 && t.depth[a] > d) a = t.parent[a]; return a; }
    const v = t.x[z] + (px / r.width) * t.total[z];
    let cur = z;
    while (t.depth[cur] < d) {
      let next = -1;
      for (let j = cur + 1; j < t.end[cur]; j = t.end[j])
        if (v >= t.x[j] && v < t.x[j] + t.total[j]) { next = j; break; }
      if (next < 0) return -1;
      cur = next;
    }
    return cur;
  }

  private onMove(e: MouseEvent): void {
    const i = this.hit(e);
    if (i !== this.hover) { this.hover = i; this.drawHover(); }
    const t = this.tree;
    if (!t || i < 0) { this.tip.style.display = 'none'; return; }
    const root = t.total[0], zt = t.total[this.zoom];
    const bin = t.binaries[t.bin[i]];
    this.tip.innerHTML = '';
    const line = (cls: string, text: string) => { const d = document.createElement('div'); d.className = cls; d.textContent = text; this.tip.append(d); };
    line('tip-name', t.names[t.name[i]]);
    line('tip-bin', `${bin ? basename(bin) : ''} ${t.kind[i] === 4 ? 'GPU' : KIND_NAMES[t.kind[i]] ?? ''}`.trim());
    if (isDiff(t)) {
      const b = t.baseTotal > 0 ? t.base[i] / t.baseTotal : 0, s = t.selTotal > 0 ? t.sel[i] / t.selTotal : 0;
      const d = (100 * (s - b));
      line('', `baseline: ${fmtValue(t.base[i], t.valueUnit)} (${pct(t.base[i], t.baseTotal)})`);
      line('', `selection: ${fmtValue(t.sel[i], t.valueUnit)} (${pct(t.sel[i], t.selTotal)})`);
      line(d > 0 ? 'tip-grew' : d < 0 ? 'tip-shrank' : '', `difference: ${d >= 0 ? '+' : '−'}${Math.abs(d).toFixed(Math.abs(d) < 0.1 ? 3 : 1)} points of share` +
        (b > 0 && s > 0 ? ` (×${(s / b).toFixed(2)})` : b > 0 ? ' (gone)' : ' (new)'));
    } else {
      line('', `total: ${fmtValue(t.total[i], t.unit)} (${pct(t.total[i], root)}${this.zoom ? `, ${pct(t.total[i], zt)} of zoom` : ''})`);
      line('', `self: ${fmtValue(t.self[i], t.unit)} (${pct(t.self[i], root)})`);
    }
    const r = this.el.getBoundingClientRect();
    this.tip.style.display = 'block';
    const tx = e.clientX - r.left + 14, ty = e.clientY - r.top + 14;
    this.tip.style.left = `${Math.min(tx, r.width - 320)}px`;
    this.tip.style.top = `${ty}px`;
  }
}
