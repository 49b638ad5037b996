// Not a test: timings of the flame graph, printed and kept in
// build/test-output/ui/bench.json. `make ui-bench` runs it.
//
// 1. The embedded benchmark page (/ui/bench.html) in headless Chromium: a
//    synthetic tree of NODES nodes (default 100k), its render, hover and
//    search (target: a full render under 100 ms).
// 2. End to end (issue 26: a 100k-node view usable, fetch, parse and first
//    draw under 1 s on a 50k-stack store): a fresh `flamewatch server`
//    gets STACKS distinct folded stacks (default 50k, depth 20 to 60, 40
//    processes, callees and counts Zipf-like, so that stacks share long
//    prefixes as real ones do), then the Profile page loads them with
//    max_nodes 20k and 100k: the server's reply time for the profile
//    alone, and the page's own load time (body.dataset.loadMs: every fetch
//    of the load, parsing, the tree and the first draw).
//
//   node tests/ui/bench.mjs [NODES [STACKS]]
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { OUT, startRun, startServer, launch } from './lib.mjs';

const nodes = Number(process.argv[2] ?? 100000);
const stacks = Number(process.argv[3] ?? 50000);
const REPEATS = 5;

/* xorshift64: the same store every run. */
let rng = 0x9e3779b97f4a7c15n;
const M64 = (1n << 64n) - 1n;
function next() {
  rng ^= (rng << 13n) & M64; rng ^= rng >> 7n; rng ^= (rng << 17n) & M64;
  return Number(rng >> 11n) / 2 ** 53;
}
const zipf = (n) => Math.floor(n * next() ** 3) % n;

/* STACKS distinct folded lines, in chunks of at most 10k lines. */
function foldedStore(n) {
  const seen = new Set(), chunks = [];
  let lines = [];
  while (seen.size < n) {
    const depth = 20 + Math.floor(next() * 41), proc = `proc${seen.size % 40}`, frames = [proc];
    let node = 0;
    for (let d = 0; d < depth; d++) {
      node = (node * 12 + 1 + zipf(12)) % 1000003;
      frames.push(`fn_${node % 4000}`);
    }
    const line = frames.join(';');
    if (seen.has(line)) continue;
    seen.add(line);
    lines.push(`${line} ${1 + zipf(1000)}`);
    if (lines.length === 10000) { chunks.push(lines.join('\n') + '\n'); lines = []; }
  }
  if (lines.length) chunks.push(lines.join('\n') + '\n');
  return chunks;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const result = {};
const browser = await launch();
try {
  // 1. The synthetic tree.
  const fw = await startRun();
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    await page.goto(`${fw.url}/ui/bench.html?nodes=${nodes}`);
    await page.waitForFunction(() => document.body.dataset.result, null, { timeout: 60000 });
    const r = JSON.parse(await page.evaluate(() => document.body.dataset.result));
    for (const [name, x] of Object.entries(r))
      console.log(`flame graph (${name}): ${x.nodes} nodes, ${x.drawn} drawn, ${x.width} px wide: render median ` +
        `${x.renderMedianMs} ms, max ${x.renderMaxMs} ms; hover ${x.hoverMs} ms per move; search + render ${x.searchRenderMs} ms; tree from JSON ${x.treeMs} ms`);
    result.synthetic = r;
    await page.screenshot({ path: join(OUT, 'bench.png') });
    await page.close();
  } finally {
    await fw.stop();
  }

  // 2. End to end on a store of `stacks` distinct stacks.
  const srv = await startServer();
  try {
    const t0 = Date.now() / 1000 - 60;
    for (const text of foldedStore(stacks)) {
      const r = await fetch(`${srv.url}/api/v1/ingest/folded?node=bench`, { method: 'POST', body: text });
      if (!r.ok) throw new Error(`ingest: ${r.status} ${await r.text()}`);
    }
    const t1 = Date.now() / 1000 + 60;
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    result.endToEnd = { stacks };
    for (const mn of [20000, 100000]) {
      const server = [], load = [];
      let kept = 0, trimmed = 0;
      for (let i = 0; i < REPEATS; i++) {
        const a = performance.now();
        const j = await (await fetch(`${srv.url}/api/v1/profile?from=${t0.toFixed(3)}&to=${t1.toFixed(3)}&max_nodes=${mn}`)).json();
        server.push(performance.now() - a);
        kept = j.nodes.n.length;
        trimmed = j.trimmed.nodes;
        await page.goto(`${srv.url}/?from=${t0.toFixed(3)}&to=${t1.toFixed(3)}&view=flame&mn=${mn}&r=${i}`);
        await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 60000 });
        load.push(Number(await page.evaluate(() => document.body.dataset.loadMs)));
      }
      console.log(`end to end, ${stacks} stacks, max_nodes ${mn}: ${kept} nodes kept, ${trimmed} trimmed; ` +
        `server's profile reply median ${median(server).toFixed(0)} ms [${Math.min(...server).toFixed(0)}, ${Math.max(...server).toFixed(0)}]; ` +
        `page load (fetches, parse, tree, first draw) median ${median(load).toFixed(0)} ms [${Math.min(...load).toFixed(0)}, ${Math.max(...load).toFixed(0)}]`);
      result.endToEnd[mn] = { kept, trimmed, serverMs: server, loadMs: load };
    }
    await page.screenshot({ path: join(OUT, 'bench-end-to-end.png') });
  } finally {
    await srv.stop();
  }
  writeFileSync(join(OUT, 'bench.json'), JSON.stringify(result, null, 1) + '\n');
} finally {
  await browser.close();
}
