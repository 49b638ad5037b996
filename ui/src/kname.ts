// Short names for GPU kernels. The agent demangles kernel names, but a
// demangled template kernel can run to a thousand characters (PyTorch's
// elementwise kernels carry their functor's whole lambda chain): a table
// row or a flame graph label shows the kernel's own name and the names of
// its template arguments, and the full name goes in a tooltip.

const OPEN = '(<{[', CLOSE = ')>}]';

/* Splits s at sep where no bracket is open. */
function splitTop(s: string, sep: string): string[] {
  const out: string[] = [];
  let depth = 0, start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (OPEN.includes(c)) depth++;
    else if (CLOSE.includes(c)) depth = Math.max(0, depth - 1);
    else if (depth === 0 && s.startsWith(sep, i)) { out.push(s.slice(start, i)); start = i + sep.length; i += sep.length - 1; }
  }
  out.push(s.slice(start));
  return out;
}

/* The text of s outside any bracket, and the inside of its first top-level <...>. */
function outside(s: string): { text: string; targs: string | null } {
  let text = '', depth = 0, targs: string | null = null, t0 = -1;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (OPEN.includes(c)) { if (depth++ === 0 && c === '<' && targs === null) t0 = i + 1; continue; }
    if (CLOSE.includes(c)) { if (--depth === 0 && t0 >= 0 && targs === null) targs = s.slice(t0, i); if (depth < 0) depth = 0; continue; }
    if (depth === 0) text += c;
  }
  return { text, targs };
}

/* One '::' component's identifier: "void f(int) const" -> "f". */
function ident(component: string): string {
  const words = outside(component).text.trim().replace(/(\s+(const|volatile|&|&&))+$/, '').split(/\s+/);
  return words[words.length - 1] ?? '';
}

/* Lambdas, operator() and anonymous namespaces name nothing a reader knows. */
const meaningful = (c: string) => !/^\s*(\{|operator\b|\(anonymous namespace\))/.test(c);

/* The last meaningful identifier of a qualified name: "at::native::Gelu(x)::{lambda()#1}" -> "Gelu". */
function lastName(q: string): string {
  const parts = splitTop(q.trim(), '::').filter(meaningful);
  return parts.length ? ident(parts[parts.length - 1]) : q.trim();
}

/*
 * "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(...)
 * ::{lambda()#1}..., at::detail::Array<char*, 2> >(int, ...)" becomes
 * "vectorized_elementwise_kernel<GeluCUDAKernelImpl, Array>". Names that are
 * not C++ ("[memcpy HtoD]", "ampere_sgemm_128x64_nn") come back as they are.
 */
export function shortKernelName(full: string): string {
  if (!full || full.startsWith('[') || !/[(<:]/.test(full)) return full;
  const parts = splitTop(full, '::');
  let last = parts[parts.length - 1];
  if (!meaningful(last)) last = parts.filter(meaningful).pop() ?? last;
  const name = ident(last);
  if (!name) return full;
  const { targs } = outside(last);
  const args = targs === null ? [] : splitTop(targs, ',').map(lastName)
    .filter((a) => a && !/^[-+]?\d+[uUlL]*$|^(true|false)$/.test(a));
  return args.length ? `${name}<${args.join(', ')}>` : name;
}
