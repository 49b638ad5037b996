// Talks to the query API. Every request carries the saved bearer token, if any.
const TOKEN_KEY = 'flamewatch.token';

export class Unauthorized extends Error {}
export class Unreachable extends Error {}
export class ApiError extends Error {
  constructor(public status: number, message: string) { super(message); }
}

export function token(): string | null { return localStorage.getItem(TOKEN_KEY); }
export function setToken(t: string | null): void {
  if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
}

export function url(path: string, params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export async function fetchRaw(u: string, signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = {};
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  let r: Response;
  try {
    r = await fetch(u, { headers, signal });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new Unreachable('the flamewatch server cannot be reached');
  }
  if (r.status === 401) throw new Unauthorized('this server needs a token');
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`;
    try { msg = (await r.json()).error ?? msg; } catch { /* not JSON */ }
    throw new ApiError(r.status, msg);
  }
  return r;
}

export async function getJSON<T>(u: string, signal?: AbortSignal): Promise<T> {
  return (await fetchRaw(u, signal)).json() as Promise<T>;
}

/* Downloads through fetch so that the token goes along, then saves the blob. */
export async function download(u: string, filename: string): Promise<void> {
  const r = await fetchRaw(u);
  const blob = await r.blob();
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export interface ProfileJSON {
  version: number; unit: string; total: number;
  names: string[]; binaries: string[];
  nodes: { n: number[]; b: number[]; k: number[]; v: number[]; s: number[]; d: number[] };
  trimmed: { nodes: number; value: number };
}
export interface SeriesJSON {
  from: number; to: number; step: number;
  series: { group: string; points: [number, number][] }[];
}
/*
 * GET /api/v1/flamechart. events: [start, end, stack] (ns), on-CPU runs, or
 * the blocks themselves when type is "offcpu"; blocked: the off-CPU blocks
 * beside them (with=offcpu), by start.
 */
export interface ChartJSON {
  from: number; to: number; type?: string; stride: number; samples: number;
  blocks?: number; blocked_stride?: number;
  frames: [string, string, number][]; stacks: number[][]; comms: string[];
  lanes: { pid: number; tid: number; comm: number; events: [number, number, number][];
    blocked?: [number, number, number][]; label?: string }[];
}
