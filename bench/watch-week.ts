/**
 * A simulated week of the sidecar watching Envoy after a drain (issue: every timer owned, nothing retained per
 * read). The real DrainSupervisor and WitnessedAdminClient read the Envoy emulator (a process of its own) over a
 * real loopback socket, once per simulated check interval (5 s), on a clock whose sleeps end at once: a week is
 * 120,960 reads. A
 * child process with --expose-gc measures the heap after a full GC at the end of each simulated day; the
 * figure is the growth per day over days 2 to 7 (day 1 warms up code and caches; a least-squares slope), and
 * RSS at the end. The child runs with the sidecar's V8 flags (no optimizing compilers), as the sidecar does.
 *
 * `node --import tsx bench/watch-week.ts [--days=N]` prints the figures; bench/run.ts runs it as a child.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Clock } from '../src/clock.js';
import { WitnessedAdminClient } from '../src/envoy/process/witnessed-admin.js';
import { openJournal } from '../src/sidecar/journal.js';
import type { SidecarLog } from '../src/sidecar/log.js';
import { SIDECAR_V8_FLAGS } from '../src/sidecar/command.js';
import { DrainSupervisor } from '../src/sidecar/supervisor.js';
import { spawnEmulatorProcess, type Figure } from './support.js';

const CHECK_INTERVAL_MS = 5_000;
const READS_PER_DAY = (24 * 3600 * 1000) / CHECK_INTERVAL_MS;

export interface WatchWeekResult {
  readonly days: number;
  /** Heap used after a full GC at the end of each day, in bytes. */
  readonly heapByDay: readonly number[];
  readonly rssMib: number;
  readonly seconds: number;
}

/** Virtual time that jumps to each sleep's end at once (on setImmediate, so that I/O goes on). */
class FastClock implements Clock {
  private nowMs = 0;
  now(): number {
    return this.nowMs;
  }
  wallNow(): number {
    return Date.parse('2026-01-01T00:00:00Z') + this.nowMs;
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      setImmediate(() => {
        if (signal.aborted) return reject(signal.reason);
        this.nowMs += Math.max(0, ms);
        resolve();
      });
    });
  }
}

const quietLog: SidecarLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** In this process (run with --expose-gc): a drain, then `days` of watching. */
async function watchFor(days: number): Promise<WatchWeekResult> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  const started = performance.now();
  // Envoy in a process of its own: the heap measured here is the watching sidecar's alone.
  const emulator = await spawnEmulatorProcess();
  const clock = new FastClock();
  const envoy = new WitnessedAdminClient({ address: '127.0.0.1', port: emulator.admin, timeoutMs: 2_000, clock });
  const drain = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': CHECK_INTERVAL_MS, 'min-open-connections': 0, 'drain-timeout': 60_000, 'admin-refusals': 3 };
  const supervisor = new DrainSupervisor(envoy, { drain, recoverEnvoy: false, watchIntervalMs: CHECK_INTERVAL_MS, readTimeoutMs: 2_000 }, openJournal(''), quietLog, clock);
  const heapByDay: number[] = [];
  try {
    await supervisor.shutdown(); // the watch after a drain is where a leak per read used to be
    const watching = supervisor.watch();
    for (let day = 1; day <= days; day += 1) {
      const until = day * READS_PER_DAY * CHECK_INTERVAL_MS;
      while (clock.now() < until) await new Promise((resolve) => setTimeout(resolve, 50));
      heapByDay.push(await settledHeap(gc));
    }
    supervisor.stop();
    await watching;
  } finally {
    envoy.close();
    emulator.child.kill('SIGTERM');
  }
  return { days, heapByDay, rssMib: process.memoryUsage().rss / 1024 / 1024, seconds: (performance.now() - started) / 1000 };
}

/**
 * Heap used after a full GC, the least of a few readings: reads go on while it measures, and one that is in flight
 * (its buffers, its promises) moved a single reading by up to 130 KiB, more than a leak of 16 KiB a day shows in a week.
 */
async function settledHeap(gc: () => void): Promise<number> {
  let least = Infinity;
  for (let reading = 0; reading < 5; reading += 1) {
    gc();
    least = Math.min(least, process.memoryUsage().heapUsed);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return least;
}

/** Runs a simulated week (or `days`) in a child process and turns it into figures. */
export async function runWatchWeekBench(days = 7): Promise<Figure[]> {
  // With V8's optimizing compilers off, as the sidecar runs (src/sidecar/command.ts): with them, a heap snapshot
  // diff of days 2 and 10 put the whole growth (120 KiB) in optimized code and V8's lists of it, none in objects.
  const flags = ['--expose-gc', ...SIDECAR_V8_FLAGS];
  const child = spawn(process.execPath, [...flags, '--import', 'tsx', fileURLToPath(import.meta.url), `--days=${days}`, '--json'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`watch-week bench exited ${String(code)}`))));
  });
  return figuresOf(JSON.parse(output) as WatchWeekResult);
}

/** Least-squares growth per step of `values` (NaN for fewer than two): every day counts, not only the first and last. */
function slope(values: readonly number[]): number {
  if (values.length < 2) return NaN;
  const meanX = (values.length - 1) / 2;
  const meanY = values.reduce((sum, value) => sum + value, 0) / values.length;
  let covariance = 0;
  let variance = 0;
  values.forEach((value, x) => {
    covariance += (x - meanX) * (value - meanY);
    variance += (x - meanX) ** 2;
  });
  return covariance / variance;
}

/** The target: under 16 KiB a day, i.e. nothing kept per read (a leak of 115 bytes a read is 2 MiB a day). */
const GROWTH_TARGET_BYTES_PER_DAY = 16 * 1024;

/** The figures' names (test/docs/performance.test.ts checks docs/performance.md's generated rows against them). */
export const WATCH_WEEK_FIGURES = [
  'Sidecar heap growth per simulated day of watching',
  'Sidecar heap after GC, end of day 1 → last day',
  'RSS of the bench process (tsx and the watching sidecar) at the end',
] as const;

export function figuresOf(result: WatchWeekResult): Figure[] {
  const { heapByDay } = result;
  const first = heapByDay[Math.min(1, heapByDay.length - 1)] ?? NaN;
  const last = heapByDay[heapByDay.length - 1] ?? NaN;
  const perDay = slope(heapByDay.slice(1));
  const days = result.days;
  return [
    {
      name: WATCH_WEEK_FIGURES[0],
      value: `${(perDay / 1024).toFixed(1)} KiB/day (${days} days, ${days * READS_PER_DAY} reads in ${result.seconds.toFixed(0)} s)`,
      target: `< ${GROWTH_TARGET_BYTES_PER_DAY / 1024} KiB/day`,
      pass: Number.isFinite(perDay) ? perDay < GROWTH_TARGET_BYTES_PER_DAY : undefined,
    },
    { name: WATCH_WEEK_FIGURES[1], value: `${(first / 1048576).toFixed(2)} → ${(last / 1048576).toFixed(2)} MiB`, target: '', pass: undefined },
    // Not the sidecar's RSS (this process also runs tsx): npm run bench's sidecar figures are.
    { name: WATCH_WEEK_FIGURES[2], value: `${result.rssMib.toFixed(1)} MiB`, target: '', pass: undefined },
  ];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const days = Number(/^--days=(\d+)$/.exec(process.argv.find((arg) => arg.startsWith('--days=')) ?? '')?.[1] ?? 7);
  if (process.argv.includes('--json')) {
    process.stdout.write(JSON.stringify(await watchFor(days)));
  } else {
    const { printTable } = await import('./support.js');
    printTable(await runWatchWeekBench(days));
  }
}
