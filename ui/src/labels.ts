// The label selector input, with completion of label names (after "{" or
// ",") and of values (inside name="..."), from /api/v1/labels.
import { getJSON, url } from './api';

export class LabelInput {
  readonly el = document.createElement('div');
  readonly input = document.createElement('input');
  private list = document.createElement('ul');
  private items: { text: string; insert: string; replace: number }[] = [];
  private active = 0;
  private names: Promise<string[]> | null = null;
  private values = new Map<string, Promise<string[]>>();
  range: { from: number; to: number } = { from: 0, to: 0 };

  constructor(private onApply: (q: string) => void) {
    this.el.className = 'label-input';
    this.input.placeholder = '{comm="python3", node=~"gpu-.*"}  (labels complete as you type)';
    this.input.spellcheck = false;
    this.input.setAttribute('aria-label', 'label selector');
    this.list.className = 'completions';
    this.el.append(this.input, this.list);
    this.input.addEventListener('input', () => this.complete());
    this.input.addEventListener('focus', () => this.complete());
    this.input.addEventListener('blur', () => setTimeout(() => this.hide(), 150));
    this.input.addEventListener('keydown', (e) => this.key(e));
  }

  resetCache(range: { from: number; to: number }): void {
    this.range = range; this.names = null; this.values.clear();
  }

  /* Whole seconds around the range: rounding both ends could make from == to. */
  private window(): { from: number; to: number } {
    return { from: Math.floor(this.range.from), to: Math.ceil(this.range.to) };
  }

  private fetchNames(): Promise<string[]> {
    return (this.names ??= getJSON<{ names: string[] }>(url('/api/v1/labels', this.window())).then((j) => j.names).catch(() => []));
  }

  private fetchValues(name: string): Promise<string[]> {
    let p = this.values.get(name);
    if (!p) {
      p = getJSON<{ values: string[] }>(url(`/api/v1/labels/${encodeURIComponent(name)}/values`, this.window())).then((j) => j.values).catch(() => []);
      this.values.set(name, p);
    }
    return p;
  }

  private async complete(): Promise<void> {
    const v = this.input.value, pos = this.input.selectionStart ?? v.length;
    const before = v.slice(0, pos);
    let m: RegExpExecArray | null;
    let items: typeof this.items = [];
    if ((m = /([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)$/.exec(before))) {
      const prefix = m[3];
      const vals = await this.fetchValues(m[1]);
      items = vals.filter((x) => x.toLowerCase().includes(prefix.toLowerCase())).slice(0, 50)
        .map((x) => ({ text: x, insert: x.replace(/[\\"]/g, '\\$&') + '"', replace: prefix.length }));
    } else if ((m = /(^|[{,]\s*)([a-zA-Z_]*)$/.exec(before)) && (before === '' || /[{,]\s*[a-zA-Z_]*$/.test(before))) {
      const prefix = m[2];
      const names = await this.fetchNames();
      const open = before.includes('{') ? '' : '{';
      items = names.filter((x) => x.startsWith(prefix)).map((x) => ({ text: x, insert: `${open}${x}="`, replace: prefix.length }));
    }
    // The input may have changed while the names were fetched.
    if (this.input.value !== v || document.activeElement !== this.input) return;
    this.items = items;
    this.active = 0;
    this.draw();
  }

  private draw(): void {
    this.list.innerHTML = '';
    this.items.forEach((it, i) => {
      const li = document.createElement('li');
      li.textContent = it.text;
      if (i === this.active) li.className = 'active';
      li.addEventListener('mousedown', (e) => { e.preventDefault(); this.accept(i); });
      this.list.append(li);
    });
    this.list.style.display = this.items.length ? 'block' : 'none';
  }

  private hide(): void { this.items = []; this.draw(); }

  private accept(i: number): void {
    const it = this.items[i];
    const v = this.input.value, pos = this.input.selectionStart ?? v.length;
    let head = v.slice(0, pos - it.replace) + it.insert;
    let tail = v.slice(pos);
    if (it.insert.endsWith('"') && tail.startsWith('"')) tail = tail.slice(1);
    if (head.startsWith('{') && !tail.includes('}') && it.insert.endsWith('"') && !it.insert.endsWith('="')) tail += '}';
    this.input.value = head + tail;
    this.input.setSelectionRange(head.length, head.length);
    this.complete();
  }

  private key(e: KeyboardEvent): void {
    const open = this.items.length > 0;
    if (open && (e.key === 'ArrowDown' || e.key === 'ArrowUp')) {
      e.preventDefault();
      this.active = (this.active + (e.key === 'ArrowDown' ? 1 : this.items.length - 1)) % this.items.length;
      this.draw();
    } else if (open && (e.key === 'Tab' || (e.key === 'Enter' && !e.ctrlKey))) {
      e.preventDefault();
      this.accept(this.active);
    } else if (e.key === 'Enter') {
      this.hide();
      this.onApply(this.input.value.trim());
    } else if (e.key === 'Escape') {
      this.hide();
    }
  }
}
