// The page's one time axis. Every track draws time t at the same x on the
// screen: the uPlot charts share an axis width and padding, and the canvas
// tracks (CPU strips, GPU kernels, flame charts) measure where the samples
// chart's plot area is and draw inside the same columns. A drag on any
// track brushes a window, which main.ts hands to all of them.
import type uPlot from 'uplot';

/* uPlot charts with this key share their cursor. */
export const SYNC_KEY = 'flamewatch-time';

/* uPlot's left axis width and right padding, for every chart. */
export const AXIS_LEFT = 64;
export const PAD_RIGHT = 16;

/* Where the shared plot area is, relative to el's left edge, in CSS px. */
export function plotColumns(el: HTMLElement): { left: number; width: number } {
  const ref = document.querySelector('.samples-chart .u-over') as HTMLElement | null;
  const me = el.getBoundingClientRect();
  if (ref && ref.clientWidth > 0) {
    const r = ref.getBoundingClientRect();
    return { left: r.left - me.left, width: r.width };
  }
  return { left: AXIS_LEFT, width: Math.max(me.width - AXIS_LEFT - PAD_RIGHT, 10) };
}

/*
 * Drag-to-select on a canvas track: a drag wider than 3 px calls onSelect
 * with the window in Unix seconds; a click (no drag) calls onClick. The
 * selection is drawn by the track (selectionPx) so it repaints with it.
 */
export class Brush {
  private start: number | null = null;
  private cur = 0;
  constructor(private el: HTMLElement,
    private toTime: (x: number) => number,
    private onSelect: (sel: [number, number]) => void,
    private onClick: (x: number, y: number) => void,
    private repaint: () => void) {
    el.addEventListener('mousedown', (e) => {
      if (e.button !== 0) return;
      e.preventDefault();
      this.start = this.cur = this.x(e);
    });
    window.addEventListener('mousemove', (e) => {
      if (this.start === null) return;
      this.cur = this.x(e);
      this.repaint();
    });
    window.addEventListener('mouseup', (e) => {
      if (this.start === null) return;
      const a = Math.min(this.start, this.x(e)), b = Math.max(this.start, this.x(e));
      this.start = null;
      this.repaint();
      if (b - a > 3) this.onSelect([this.toTime(a), this.toTime(b)]);
      else this.onClick(this.x(e), e.clientY - this.el.getBoundingClientRect().top);
    });
  }
  private x(e: MouseEvent): number { return e.clientX - this.el.getBoundingClientRect().left; }
  /* The drag in progress, [x0, x1] in px, or null. */
  get dragPx(): [number, number] | null {
    return this.start === null ? null : [Math.min(this.start, this.cur), Math.max(this.start, this.cur)];
  }
}

/* A stable colour per process (comm), so one process looks the same on every track. */
const PROC_COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#86bcb6', '#d37295', '#8cd17d'];
export function processColor(key: string): string {
  let h = 2166136261;
  for (let i = 0; i < key.length; i++) { h ^= key.charCodeAt(i); h = Math.imul(h, 16777619); }
  return PROC_COLORS[(h >>> 0) % PROC_COLORS.length];
}

/* Draws the selection (and a drag in progress) over a track. */
export function drawSelection(ctx: CanvasRenderingContext2D, h: number, sel: [number, number] | null,
  xOf: (t: number) => number, drag: [number, number] | null): void {
  const span = drag ?? (sel ? [xOf(sel[0]), xOf(sel[1])] : null);
  if (!span) return;
  ctx.fillStyle = 'rgba(192, 57, 43, .15)';
  ctx.fillRect(span[0], 0, span[1] - span[0], h);
  ctx.strokeStyle = '#c0392b';
  ctx.beginPath();
  ctx.moveTo(span[0] + 0.5, 0); ctx.lineTo(span[0] + 0.5, h);
  ctx.moveTo(span[1] - 0.5, 0); ctx.lineTo(span[1] - 0.5, h);
  ctx.stroke();
}

/* Options every chart on the shared axis uses, so that their plot areas line up. */
export function axisOptions(ctx: { from: number; to: number }, height: number, width: number, unit: string, showX: boolean,
  onSelect: (sel: [number, number]) => void, isSetting: () => boolean): Partial<uPlot.Options> {
  return {
    width, height,
    padding: [8, PAD_RIGHT, showX ? 0 : 4, 0],
    cursor: { sync: { key: SYNC_KEY }, drag: { x: true, y: false, setScale: false } },
    scales: { x: { time: true, range: [ctx.from, ctx.to] } },
    axes: [{ show: showX }, { size: AXIS_LEFT - 20, label: unit, labelSize: 20, labelFont: '11px system-ui', font: '11px system-ui' }],
    legend: { live: true },
    hooks: {
      setSelect: [(u: uPlot) => {
        if (isSetting() || u.select.width < 3) return;
        onSelect([u.posToVal(u.select.left, 'x'), u.posToVal(u.select.left + u.select.width, 'x')]);
      }],
    },
  };
}

export function showSelection(u: uPlot, sel: [number, number] | null): void {
  if (sel) {
    const l = u.valToPos(sel[0], 'x'), r = u.valToPos(sel[1], 'x');
    u.setSelect({ left: l, width: Math.max(r - l, 1), top: 0, height: u.over.clientHeight }, false);
  } else {
    u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
  }
}

