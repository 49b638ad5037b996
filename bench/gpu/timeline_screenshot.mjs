// Screenshots of the timeline page for data brought back from a GPU
// machine by bench/gpu/timeline_demo.sh: serves the data with
// `flamewatch server --data DIR` (no agent, nothing profiled here) and saves
// the timeline of the demo's window, with the process selected and its
// "why is the GPU idle?" panel open, and the same without the selector.
//
//   node bench/gpu/timeline_screenshot.mjs OUT/fwdata.tar.gz timeline-demo.png
//
// Needs build/flamewatch, ui/node_modules (make) and /usr/bin/chromium.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startServer, launch, sleep } from '../../tests/ui/lib.mjs';

const [src, png = 'timeline-demo.png'] = process.argv.slice(2);
if (!src) {
  console.error('usage: node bench/gpu/timeline_screenshot.mjs FWDATA.tar.gz|DIR OUT.png');
  process.exit(2);
}
let dir = resolve(src), tmp = null;
if (!existsSync(join(dir, 'demo.json'))) {
  tmp = mkdtempSync(join(tmpdir(), 'fw-shot-'));
  execFileSync('tar', ['xzf', dir, '-C', tmp]);
  dir = join(tmp, 'fwdata');
}
const demo = JSON.parse(readFileSync(join(dir, 'demo.json'), 'utf8'));
const fw = await startServer([], process.env, dir);
const browser = await launch();
try {
  const page = await (await browser.newContext({ viewport: { width: 1600, height: 1500 } })).newPage();
  const loaded = () => page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 60000 });
  const base = `${fw.url}/?page=timeline&from=${demo.from.toFixed(3)}&to=${demo.to.toFixed(3)}`;
  await page.goto(`${base}&q=${encodeURIComponent(`{pid="${demo.pid}"}`)}&gpu=${demo.pid}`);
  await loaded();
  await sleep(500);
  await page.screenshot({ path: png, fullPage: true });
  console.log(`${png}: ${await page.locator('.idle-summary').textContent()}`);
  const all = png.replace(/\.png$/, '') + '-host.png';
  await page.goto(base);
  await loaded();
  await sleep(500);
  await page.screenshot({ path: all, fullPage: false });
  console.log(`${all}: the whole host, same window`);
} finally {
  await browser.close();
  await fw.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}
