// Not a test: opens the embedded benchmark page (/ui/bench.html) in headless
// Chromium and prints its flame graph timings for a synthetic profile of
// 100k nodes (target: a full render under 100 ms). `make ui-bench` runs it.
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { OUT, startRun, launch } from './lib.mjs';

const nodes = Number(process.argv[2] ?? 100000);
const fw = await startRun();
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  await page.goto(`${fw.url}/ui/bench.html?nodes=${nodes}`);
  await page.waitForFunction(() => document.body.dataset.result, null, { timeout: 60000 });
  const r = JSON.parse(await page.evaluate(() => document.body.dataset.result));
  for (const [name, x] of Object.entries(r))
    console.log(`flame graph (${name}): ${x.nodes} nodes, ${x.drawn} drawn, ${x.width} px wide: render median ` +
      `${x.renderMedianMs} ms, max ${x.renderMaxMs} ms; hover ${x.hoverMs} ms per move; search + render ${x.searchRenderMs} ms; tree from JSON ${x.treeMs} ms`);
  writeFileSync(join(OUT, 'bench.json'), JSON.stringify(r, null, 1) + '\n');
  await page.screenshot({ path: join(OUT, 'bench.png') });
} finally {
  await browser.close();
  await fw.stop();
}
