// Frame colours: by binary (one hue per binary, kernel/Python/CUDA fixed)
// or by frame kind. Colours are indexes into a palette so renderers can
// batch every rectangle of one colour into a single fill.
import { KIND_NAMES, KIND_PROCESS, KIND_ROOT, KIND_TRIMMED } from './profile';

export type ColorMode = 'binary' | 'kind';

export function basename(p: string): string {
  const i = p.lastIndexOf('/');
  return i >= 0 ? p.slice(i + 1) : p;
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}

// GPU work (kind 4: kernels, copies and sets) is magenta, a hue no CPU
// frame has: the CUDA libraries that launch it are green, and a diff is
// red and green.
const KIND_COLORS: Record<number, string> = {
  [KIND_ROOT]: '#b8b8c0', [KIND_PROCESS]: '#9aa7b8', [KIND_TRIMMED]: '#dddddd',
  0: '#e8843c', 1: '#d9534f', 2: '#b57edc', 3: '#4a90d9', 4: '#c94f9e',
};
const GPU_COPY_COLOR = '#e3a6cf';

/* Copies and sets are named "[memcpy HtoD]", "[memset]" by the agent. */
export const isGpuCopy = (kind: number, name: string) => kind === 4 && /^\[mem(cpy|set)\b/.test(name);

export const CUDA_RE = /libcuda|libcudart|libcublas|libcudnn|libnvrtc|libcupti|libnccl|libcufft|libcurand|libcusparse|libcusolver|libnv/;
const PY_RE = /python|libpython/;

/* The legend category of a frame. */
export function category(mode: ColorMode, kind: number, binary: string, name = ''): string {
  if (isGpuCopy(kind, name)) return 'GPU copy/set';
  if (mode === 'kind') return KIND_NAMES[kind] ?? `kind ${kind}`;
  if (kind === KIND_ROOT || kind === KIND_PROCESS || kind === KIND_TRIMMED) return KIND_NAMES[kind];
  if (kind === 1) return 'kernel';
  if (kind === 3) return 'Python';
  if (kind === 4) return 'CUDA kernel';
  if (kind === 2) return 'JIT';
  return binary ? basename(binary) : '[unknown binary]';
}

export class Palette {
  colors: string[] = [];
  dim: string[] = [];
  private byCat = new Map<string, number>();
  catOf: string[] = [];

  /*
   * The colour of a frame: its category's hue, in one of a few shades picked
   * by the function's name so neighbouring frames of one binary stay apart.
   */
  index(mode: ColorMode, kind: number, binary: string, name = ''): number {
    const cat = category(mode, kind, binary, name);
    const shade = kind < 0 || !name ? 0 : hash(name) % 4;
    const key = cat + '\0' + shade;
    let i = this.byCat.get(key);
    if (i !== undefined) return i;
    i = this.colors.length;
    this.byCat.set(key, i);
    this.catOf.push(cat);
    const h = hash(cat), dl = shade * 5 - 7;
    let c: string;
    if (kind < 0) c = KIND_COLORS[kind] ?? '#999';
    else if (cat === 'GPU copy/set') c = shadeOf(GPU_COPY_COLOR, dl);
    else if (mode === 'kind' || kind >= 1) c = shadeOf(KIND_COLORS[kind] ?? '#999999', dl);
    else if (CUDA_RE.test(binary)) c = `hsl(${100 + (h % 40)}, 55%, ${50 + dl}%)`;
    else if (PY_RE.test(binary)) c = `hsl(${205 + (h % 20)}, 60%, ${60 + dl}%)`;
    else c = `hsl(${(h % 50) + 8}, ${70 + (hash(cat + 'x') % 15)}%, ${60 + dl}%)`;
    this.colors.push(c);
    this.dim.push('#e4e4e8');
    return i;
  }

  /* One colour per category, for legends. */
  categoryColor(cat: string): string {
    for (let i = 0; i < this.catOf.length; i++) if (this.catOf[i] === cat) return this.colors[i];
    return KIND_COLORS[0];
  }
}

/* A hex colour made lighter (d > 0) or darker, in percent points of lightness. */
function shadeOf(hex: string, d: number): string {
  const n = parseInt(hex.slice(1), 16);
  const f = (c: number) => Math.max(0, Math.min(255, Math.round(c + (d / 100) * 255)));
  return `rgb(${f(n >> 16)}, ${f((n >> 8) & 255)}, ${f(n & 255)})`;
}

/*
 * The comparison palette: index 0 is "about the same", 1..STEPS ever
 * deeper red (the selection's share grew), STEPS+1..2*STEPS ever deeper
 * green (it shrank). A palette like any other, so the flame graph still
 * batches its fills by colour.
 */
const STEPS = 6;
export const DIFF_SAME = '#d4d4d9';
export function diffPalette(): Palette {
  const p = new Palette();
  const mix = (a: number[], b: number[], t: number) => `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(', ')})`;
  p.colors = [DIFF_SAME];
  for (let k = 1; k <= STEPS; k++) p.colors.push(mix([243, 208, 200], [200, 40, 28], (k - 1) / (STEPS - 1)));
  for (let k = 1; k <= STEPS; k++) p.colors.push(mix([205, 236, 210], [28, 135, 58], (k - 1) / (STEPS - 1)));
  p.dim = p.colors.map(() => '#ececf0');
  p.catOf = p.colors.map((_, i) => (i === 0 ? 'same' : i <= STEPS ? 'grew' : 'shrank'));
  return p;
}

/* The palette index of a change in [-1, 1] (diff.ts change()); under 5 % is "the same". */
export function diffIndex(c: number): number {
  const a = Math.abs(c);
  if (!(a >= 0.05)) return 0;
  const k = Math.min(STEPS, 1 + Math.floor(((a - 0.05) / 0.95) * STEPS));
  return c > 0 ? k : STEPS + k;
}
