/**
 * Sidecar figures (see /work/shared/reference/benchmarks.md): resident memory idle and while 1,000
 * connections drain, start → ready time, and drain overshoot at check-interval 100 ms. Each is printed
 * next to a floor measured in the same run: a bare node:http server started the same way.
 *
 * `npm run bench` runs it after a build; alone: `npm run build && node --import tsx bench/sidecar.ts`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { closeAll, httpRequest, openTcpConnections } from '../test/support/connections.js';
import { EnvoyEmulator } from '../test/support/envoy-emulator.js';
import { BUILT_MAIN } from '../test/support/process.js';
import { spawnSidecar, type SidecarProcess } from '../test/support/sidecar-process.js';
import { freePort } from '../test/support/ports.js';

const STARTS = 7;
const DRAINS = 9;
const CHECK_INTERVAL_MS = 100;
const HELD_CONNECTIONS = 1_000;
const FLOOR_SERVER = `require('node:http').createServer((q, r) => r.end('ok\\n')).listen(0, '127.0.0.1', function () { console.log(JSON.stringify({ port: this.address().port })); });`;

const mib = (kib: number): string => `${(kib / 1024).toFixed(1)} MiB`;

function residentKib(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: field('VmRSS'), peak: field('VmHWM') };
}

function summary(values: readonly number[], unit = 'ms'): string {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)] ?? NaN;
  return `min ${sorted[0]?.toFixed(1)} / median ${median.toFixed(1)} / max ${sorted.at(-1)?.toFixed(1)} ${unit} (n=${sorted.length})`;
}

/** Polls GET /healthz until 200, bounded; returns when it first answered. */
async function firstHealthy(port: () => number | undefined, path: string, timeoutMs = 10_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const current = port();
    if (current !== undefined) {
      try {
        if ((await httpRequest(`http://127.0.0.1:${current}${path}`, { timeoutMs: 500 })).status === 200) return performance.now();
      } catch {
        // not listening yet
      }
    }
    await sleep(2);
  }
  throw new Error(`not healthy within ${timeoutMs} ms`);
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await Promise.race([exited, sleep(3_000).then(() => child.kill('SIGKILL'))]);
}

/**
 * Spawn → first 200. The sidecar listens on a fixed port here (a free one chosen just before), so that
 * readiness is measured by polling, as the kubelet does, not by reading its log.
 */
async function timeToReady(command: 'sidecar' | 'floor', adminPort: number): Promise<{ ms: number; child: ChildProcess; port: number }> {
  const started = performance.now();
  let port: number | undefined;
  let child: ChildProcess;
  if (command === 'sidecar') {
    port = await freePort();
    child = spawn(process.execPath, [BUILT_MAIN, 'mode=sidecar', '--serve-address=127.0.0.1', `--serve-port=${port}`, `--admin-port=${adminPort}`], {
      stdio: 'ignore',
    });
  } else {
    child = spawn(process.execPath, ['-e', FLOOR_SERVER], { stdio: ['ignore', 'pipe', 'ignore'] });
    child.stdout?.once('data', (chunk: Buffer) => (port = (JSON.parse(chunk.toString()) as { port: number }).port));
  }
  const readyAt = await firstHealthy(() => port, command === 'sidecar' ? '/healthz' : '/');
  return { ms: readyAt - started, child, port: port as number };
}

async function measureStartAndIdle(emulator: EnvoyEmulator): Promise<void> {
  const times: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  const idle: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  for (let run = 0; run < STARTS; run += 1) {
    for (const command of ['floor', 'sidecar'] as const) {
      const { ms, child } = await timeToReady(command, emulator.ports.admin);
      times[command].push(ms);
      if (run < 3) {
        await sleep(500); // let start-up garbage settle, as a pod sits idle
        idle[command].push(residentKib(child.pid as number).rss);
      }
      await stop(child);
    }
  }
  console.log(`  start → ready   sidecar ${summary(times.sidecar)}`);
  console.log(`                  floor   ${summary(times.floor)}   (bare node:http server, same machine, same run)`);
  const idleSidecar = Math.max(...idle.sidecar);
  const idleFloor = Math.max(...idle.floor);
  console.log(`  RSS idle        sidecar ${mib(idleSidecar)}, floor ${mib(idleFloor)} (sidecar / floor = ${(idleSidecar / idleFloor).toFixed(2)})`);
}

/** One drain: hold `connections`, call /shutdown, close them all after `closeAfterMs`; returns overshoot and RSS. */
async function drainOnce(
  emulator: EnvoyEmulator,
  connections: number,
  closeAfterMs: number,
): Promise<{ overshootMs: number; rssDuringKib: number; peakKib: number; sidecar: SidecarProcess }> {
  const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=0', '--drain-timeout=60s']);
  const held = await openTcpConnections(emulator.ports.tcp, connections);
  try {
    const shutdown = httpRequest(sidecar.url('/shutdown'), { timeoutMs: 60_000 });
    await sidecar.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === connections, 10_000);
    await sleep(closeAfterMs);
    const during = residentKib(sidecar.child.pid as number);
    await closeAll(held);
    const lastClosedAt = performance.now();
    const response = await shutdown;
    const overshootMs = performance.now() - lastClosedAt;
    if (response.status !== 200) throw new Error(`/shutdown answered ${response.status}: ${response.body}`);
    return { overshootMs, rssDuringKib: during.rss, peakKib: residentKib(sidecar.child.pid as number).peak, sidecar };
  } finally {
    await closeAll(held);
    await stop(sidecar.child);
  }
}

async function measureDrains(emulator: EnvoyEmulator): Promise<void> {
  const big = await drainOnce(emulator, HELD_CONNECTIONS, 3 * CHECK_INTERVAL_MS);
  console.log(`  RSS draining ${HELD_CONNECTIONS} connections: ${mib(big.rssDuringKib)} (peak VmHWM ${mib(big.peakKib)}); overshoot ${big.overshootMs.toFixed(1)} ms`);
  const overshoots: number[] = [];
  for (let drain = 0; drain < DRAINS; drain += 1) {
    // Close at different phases of the poll cycle: the overshoot spreads over one check interval.
    const phase = (drain * CHECK_INTERVAL_MS) / DRAINS;
    overshoots.push((await drainOnce(emulator, 20, CHECK_INTERVAL_MS + phase)).overshootMs);
  }
  console.log(`  overshoot (last connection closed → /shutdown returned), check-interval ${CHECK_INTERVAL_MS} ms:`);
  console.log(`                  ${summary(overshoots)}; target ≤ ${CHECK_INTERVAL_MS + 20} ms`);
}

export async function runSidecarBench(): Promise<void> {
  console.log('Sidecar (mode=sidecar) — targets: RSS < 60 MiB, ready < 300 ms, overshoot ≤ check-interval + 20 ms');
  const emulator = await EnvoyEmulator.start();
  try {
    await measureStartAndIdle(emulator);
    await measureDrains(emulator);
  } finally {
    await emulator.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await runSidecarBench();
}
