// Helpers for the UI tests: the real `flamewatch run` on a free port with a
// temporary data dir, a real workload it profiles, and Debian's Chromium
// driven by playwright-core (installed by `npm ci` in ui/).
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, mkdirSync, rmSync, openSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const BUILD = join(ROOT, 'build');
export const OUT = join(BUILD, 'test-output/ui');
mkdirSync(OUT, { recursive: true });

const require = createRequire(join(ROOT, 'ui/package.json'));
export const { chromium } = require('playwright-core');

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
    s.on('error', rej);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* Starts `flamewatch run`; returns { url, proc, dir, log, stop() }. */
export async function startRun(extra = [], env = process.env) {
  return start('run', ['-F', '99', '--interval', '1s', ...extra], env);
}

/* Starts `flamewatch server` alone (no agent, so nothing else on its loop). */
export async function startServer(extra = [], env = process.env, dataDir = null) {
  return start('server', extra, env, dataDir);
}

async function start(cmd, extra, env = process.env, dataDir = null) {
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'fw-ui-'));
  const port = await freePort();
  const logPath = join(OUT, `${cmd}-${port}.log`);
  const log = openSync(logPath, 'w');
  const proc = spawn(join(BUILD, 'flamewatch'),
    [cmd, '--listen', `127.0.0.1:${port}`, '--data', dir, ...extra],
    { stdio: ['ignore', log, log], env });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (proc.exitCode !== null) throw new Error(`flamewatch ${cmd} exited ${proc.exitCode}; see ${OUT}/${cmd}-${port}.log`);
    try { if ((await fetch(`${url}/healthz`)).ok) break; } catch { /* not yet */ }
    await sleep(100);
  }
  return {
    url, proc, dir, log: logPath,
    async stop() {
      proc.kill('SIGINT');
      for (let i = 0; i < 50 && proc.exitCode === null; i++) await sleep(100);
      if (proc.exitCode === null) proc.kill('SIGKILL');
      if (!dataDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/* Polls until the profile for `query` holds at least `min` samples. */
export async function waitForSamples(url, query, min, timeoutMs = 30000) {
  const t0 = Date.now();
  let total = 0;
  while (Date.now() - t0 < timeoutMs) {
    const r = await fetch(`${url}/api/v1/profile?from=now-10m&query=${encodeURIComponent(query)}`);
    if (r.ok) { total = (await r.json()).total; if (total >= min) return total; }
    await sleep(500);
  }
  throw new Error(`only ${total} samples for ${query} after ${timeoutMs} ms`);
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    // CI runs as root, where Chromium's sandbox cannot start.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

/*
 * Debian's Firefox ESR, headless, driven over WebDriver BiDi by
 * puppeteer-core (playwright-core's own Firefox support needs its patched
 * build, and its BiDi mode asks this ESR for commands it lacks).
 */
export async function launchFirefox() {
  const { default: puppeteer } = await import(require.resolve('puppeteer-core'));
  return puppeteer.launch({
    browser: 'firefox',
    executablePath: process.env.FIREFOX ?? '/usr/bin/firefox-esr',
    headless: true,
    timeout: 120000,
    // Firefox refuses to start as root with another user's $HOME.
    env: { ...process.env, HOME: mkdtempSync(join(tmpdir(), 'fw-ff-home-')) },
  });
}

export function goPprofTop(file) {
  return execFileSync('go', ['tool', 'pprof', '-top', file], {
    encoding: 'utf8', env: { ...process.env, GOCACHE: join(BUILD, 'gocache'), HOME: process.env.HOME ?? tmpdir() },
  });
}
