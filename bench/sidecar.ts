/**
 * Sidecar figures (see /work/shared/reference/benchmarks.md): resident memory idle and while 1,000
 * connections drain, start → ready time, drain overshoot at check-interval 100 ms, peak resident memory
 * under sustained floods of well-formed requests with the injected NODE_OPTIONS and without, and a drain of an
 * Envoy of 10 then 5,000 listeners under a flood of unread /metrics pipelines (bench/listener-flood.ts). Memory and start are
 * taken next to a floor measured in the same run, in alternating rounds: a bare node:http server started the
 * same way. The sidecar is started as the injector writes it into a pod: its args (sidecarArgs), a state
 * directory and a shutdown token, only its address and ports moved to free ones.
 *
 * `npm run bench` runs it after a build; alone: `npm run build && node --import tsx bench/sidecar.ts`, and the start and
 * idle memory alone: `node --import tsx bench/sidecar.ts --only start` (see the end of this file).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { parseWebhookConfig } from '../src/config/webhook.js';
import { SIDECAR_ENV, sidecarArgs } from '../src/inject/sidecar.js';
import { closeAll, httpRequest, openTcpConnections } from '../test/support/connections.js';
import { EnvoyEmulator } from '../src/emulator/envoy-emulator.js';
import { timedCall } from '../test/support/abuse.js';
import { floodWhileWatching, promptDrainPlan, type FloodSpec } from '../test/support/flood.js';
import { BUILT_ENTRY } from '../test/support/process.js';
import { spawnInjectedSidecar, spawnSidecar } from '../test/support/sidecar-process.js';
import { LISTENER_COUNTS, runListenerFloodBench, runRequestCostBench } from './listener-flood.js';
import { freePort, loadAverage, peakMemoryDuring, spawnEmulatorProcess, median, memoryShares, mib, residentMib, summarize, type Figure } from './support.js';

export interface SidecarBenchProfile {
  /** Starts of each (floor, sidecar), alternating. */
  readonly starts: number;
  /** Drains with 20 connections, closed at different phases of the poll cycle. */
  readonly drains: number;
  /** Length of each flood (two floods, each with the injected NODE_OPTIONS and without); 0 skips them. */
  readonly floodSeconds: number;
}

const CHECK_INTERVAL_MS = 100;
const HELD_CONNECTIONS = 1_000;
const FLOOR_SERVER = `require('node:http').createServer((q, r) => r.end('ok\\n')).listen(0, '127.0.0.1', function () { console.log(JSON.stringify({ port: this.address().port })); });`;
/**
 * The floor, having made 2 MiB of short-lived garbage once it listens: one young-generation collection, which
 * touches the second half of the young generation (1 MiB on Node 20 and 24). The floor itself never collects, and
 * any process that works does: printed beside the private memory, as what of the sidecar's excess that is.
 */
const FLOOR_AFTER_GARBAGE = FLOOR_SERVER.replace('function () {', 'function () { let n = 0; for (let i = 0; i < 20000; i++) n += JSON.stringify({ i, s: "x".repeat(50) }).length; globalThis.n = n;');
/** As the injector flags them, less those the bench moves: where to listen, Envoy's admin port, the state directory. */
const MOVED_FLAGS = ['--serve-address=', '--serve-port=', '--admin-port=', '--state-dir='];

/** Polls `path` until 200, bounded, as the kubelet's probe would; returns when it first answered. */
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

/** Spawn → first 200 on /healthz (the sidecar) or / (the floor). */
async function timeToReady(command: 'sidecar' | 'floor' | 'floor after garbage', adminPort: number, stateDir: string): Promise<{ ms: number; child: ChildProcess; port: number }> {
  let port: number | undefined;
  let child: ChildProcess;
  let started: number;
  if (command === 'sidecar') {
    const servePort = await freePort();
    const plan = parseWebhookConfig([], {}).injection.defaults;
    const args = [
      ...sidecarArgs(plan).filter((arg) => !MOVED_FLAGS.some((flag) => arg.startsWith(flag))),
      '--serve-address=127.0.0.1',
      `--serve-port=${servePort}`,
      `--admin-port=${adminPort}`,
      `--state-dir=${stateDir}`,
    ];
    started = performance.now();
    // The container's environment as the injector writes it: SIDECAR_ENV (V8's young generation capped) and the token.
    const injected = Object.fromEntries(SIDECAR_ENV.map(({ name, value }) => [name, value]));
    child = spawn(process.execPath, [BUILT_ENTRY, ...args], {
      stdio: 'ignore',
      env: { PATH: process.env.PATH, ...injected, SHUTDOWN_MANAGER_SHUTDOWN_TOKEN: 'bench-token-0123456789abcdef01234567' },
    });
    port = servePort;
  } else {
    started = performance.now();
    child = spawn(process.execPath, ['-e', command === 'floor' ? FLOOR_SERVER : FLOOR_AFTER_GARBAGE], { stdio: ['ignore', 'pipe', 'ignore'], env: { PATH: process.env.PATH } });
    child.stdout?.once('data', (chunk: Buffer) => (port = (JSON.parse(chunk.toString()) as { port: number }).port));
  }
  const readyAt = await firstHealthy(() => port, command === 'sidecar' ? '/healthz' : '/');
  return { ms: readyAt - started, child, port: port as number };
}

async function measureStartAndIdle(emulator: EnvoyEmulator, profile: Pick<SidecarBenchProfile, 'starts'>): Promise<Figure[]> {
  const times: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  const idle: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  const anonymous: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  const fileBacked: Record<'sidecar' | 'floor', number[]> = { sidecar: [], floor: [] };
  const scraped: number[] = [];
  const afterGarbage: number[] = [];
  const stateDir = await mkdtemp(join(tmpdir(), 'esm-bench-state-'));
  try {
    for (let run = 0; run < profile.starts; run += 1) {
      for (const command of ['floor', 'sidecar'] as const) {
        const { ms, child, port } = await timeToReady(command, emulator.ports.admin, stateDir);
        times[command].push(ms);
        if (run < 3) {
          await sleep(500); // let start-up garbage settle, as a pod sits idle
          idle[command].push(residentMib(child.pid as number).rss);
          const shares = memoryShares(child.pid as number);
          anonymous[command].push(shares.anonymous);
          fileBacked[command].push(shares.fileBacked);
          if (command === 'sidecar') {
            // Most clusters scrape it: what the first scrape (which loads prom-client) adds.
            await httpRequest(`http://127.0.0.1:${port}/metrics`, { timeoutMs: 5_000 });
            await sleep(200);
            scraped.push(residentMib(child.pid as number).rss);
          }
        }
        await stop(child);
      }
    }
    for (let run = 0; run < Math.min(3, profile.starts); run += 1) {
      const { child } = await timeToReady('floor after garbage', emulator.ports.admin, stateDir);
      await sleep(500);
      afterGarbage.push(memoryShares(child.pid as number).anonymous);
      await stop(child);
    }
  } finally {
    await rm(stateDir, { recursive: true, force: true });
  }
  const start = { sidecar: median(times.sidecar), floor: median(times.floor) };
  const rss = { sidecar: median(idle.sidecar), floor: median(idle.floor) };
  const own = { sidecar: median(anonymous.sidecar), floor: median(anonymous.floor) };
  const each = (values: readonly number[], digits: number): string => values.map((value) => value.toFixed(digits)).join('/');
  console.log(
    `  start → ready (ms): sidecar ${each(times.sidecar, 0)}; floor ${each(times.floor, 0)}; medians ${start.sidecar.toFixed(0)} vs ${start.floor.toFixed(0)} (${(start.sidecar / start.floor).toFixed(2)} ×)`,
  );
  console.log(
    `  private (anonymous) memory idle (MiB): sidecar ${each(anonymous.sidecar, 1)}; floor ${each(anonymous.floor, 1)}; medians ${own.sidecar.toFixed(1)} vs ${own.floor.toFixed(1)} (${(own.sidecar / own.floor).toFixed(2)} ×)`,
  );
  console.log(
    `  … a bare server after 2 MiB of short-lived garbage (one young-generation collection, which the floor never makes): ${each(afterGarbage, 1)} (${(median(afterGarbage) / own.floor).toFixed(2)} × floor)`,
  );
  console.log(`  RSS idle (MiB): sidecar ${each(idle.sidecar, 1)}; floor ${each(idle.floor, 1)}`);
  const shared = median(fileBacked.sidecar);
  return [
    {
      name: STARTS_AND_IDLE[0],
      value: `${mib(own.sidecar)} vs floor ${mib(own.floor)} (${(own.sidecar / own.floor).toFixed(2)} ×); file-backed ${mib(shared)}, shared on a node`,
      target: '≤ 1.15 × floor',
      pass: own.sidecar <= 1.15 * own.floor,
    },
    {
      name: STARTS_AND_IDLE[1],
      value: `${((own.sidecar * 1000) / 1024).toFixed(1)} GiB + ${mib(shared)} per node (a bare node:http server: ${((own.floor * 1000) / 1024).toFixed(1)} GiB)`,
      target: '',
      pass: undefined,
    },
    {
      name: STARTS_AND_IDLE[2],
      value: `${mib(rss.sidecar)} vs floor ${mib(rss.floor)} (${(rss.sidecar / rss.floor).toFixed(3)} ×)`,
      target: '≤ 1.08 × floor',
      pass: rss.sidecar <= 1.08 * rss.floor,
    },
    {
      name: STARTS_AND_IDLE[3],
      value: `${mib(median(scraped))} (${(median(scraped) / rss.floor).toFixed(3)} × floor)`,
      target: '',
      pass: undefined,
    },
    {
      name: STARTS_AND_IDLE[4],
      value: `${start.sidecar.toFixed(0)} ms vs floor ${start.floor.toFixed(0)} ms (${(start.sidecar / start.floor).toFixed(2)} ×)`,
      target: '≤ 1.15 × floor',
      pass: start.sidecar <= 1.15 * start.floor,
    },
  ];
}

/** One drain: hold `connections`, call /shutdown, close them all after `closeAfterMs`; returns overshoot and RSS. */
async function drainOnce(emulator: EnvoyEmulator, connections: number, closeAfterMs: number): Promise<{ overshootMs: number; rssDuring: number; peak: number }> {
  const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=0', '--drain-timeout=60s']);
  const held = await openTcpConnections(emulator.ports.tcp, connections);
  try {
    const shutdown = httpRequest(sidecar.url('/shutdown'), { timeoutMs: 60_000 });
    await sidecar.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === connections, 10_000);
    await sleep(closeAfterMs);
    const during = residentMib(sidecar.child.pid as number);
    await closeAll(held);
    const lastClosedAt = performance.now();
    const response = await shutdown;
    const overshootMs = performance.now() - lastClosedAt;
    if (response.status !== 200) throw new Error(`/shutdown answered ${response.status}: ${response.body}`);
    return { overshootMs, rssDuring: during.rss, peak: residentMib(sidecar.child.pid as number).peak };
  } finally {
    await closeAll(held);
    await stop(sidecar.child);
  }
}

async function measureDrains(emulator: EnvoyEmulator, profile: SidecarBenchProfile): Promise<Figure[]> {
  const big = await drainOnce(emulator, HELD_CONNECTIONS, 3 * CHECK_INTERVAL_MS);
  const overshoots: number[] = [];
  for (let drain = 0; drain < profile.drains; drain += 1) {
    // Close at different phases of the poll cycle: the overshoot spreads over one check interval.
    const phase = (drain * CHECK_INTERVAL_MS) / profile.drains;
    overshoots.push((await drainOnce(emulator, 20, CHECK_INTERVAL_MS + phase)).overshootMs);
  }
  const { min, median: middle, max } = summarize(overshoots);
  return [
    {
      name: DRAINS[0],
      value: `${mib(big.rssDuring)} (peak ${mib(big.peak)}); overshoot ${big.overshootMs.toFixed(0)} ms`,
      target: '',
      pass: undefined,
    },
    {
      name: DRAINS[1],
      value: `min ${min.toFixed(0)} / median ${middle.toFixed(0)} / max ${max.toFixed(0)} ms (n=${overshoots.length})`,
      target: `max ≤ ${CHECK_INTERVAL_MS + 20} ms`,
      pass: max <= CHECK_INTERVAL_MS + 20,
    },
  ];
}

/** Connections Envoy holds while the sidecar drains it, for the injected memory request (issue 22). */
const BIG_DRAIN_CONNECTIONS = 10_000;
/**
 * The sidecar as injected (sidecarArgs, SIDECAR_ENV, a token; check-delay 0) draining an Envoy that holds 10,000 connections: its
 * resident and private memory sampled every 20 ms from /shutdown to the drain's end. The memory request is sized
 * on this peak (see src/config/resources.ts).
 */
export async function measureBigDrain(): Promise<Figure[]> {
  const emulator = await spawnEmulatorProcess();
  const stateDir = await mkdtemp(join(tmpdir(), 'esm-bench-big-drain-'));
  const held: Awaited<ReturnType<typeof openTcpConnections>> = [];
  const token = 'bench-token-0123456789abcdef01234567';
  try {
    for (let opened = 0; opened < BIG_DRAIN_CONNECTIONS; opened += 500) held.push(...(await openTcpConnections(emulator.tcp, 500)));
    // As injected, except that it does not wait the load balancer's minute (check-delay) and polls every second.
    const plan = { ...parseWebhookConfig([], {}).injection.defaults, 'check-delay': 0, 'check-interval': 1_000 };
    const sidecar = await spawnInjectedSidecar(plan, { adminPort: emulator.admin, stateDir, token });
    try {
      await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
      const pid = sidecar.child.pid as number;
      const rest = memoryShares(pid);
      const peak = await peakMemoryDuring(
        pid,
        async () => {
          const shutdown = httpRequest(sidecar.url('/shutdown'), { timeoutMs: 120_000, headers: { authorization: `Bearer ${token}` } });
          await sidecar.waitForLog((line) => line['event'] === 'poll' && Number(line['open_connections']) >= BIG_DRAIN_CONNECTIONS, 60_000);
          await sleep(3 * plan['check-interval']);
          await closeAll(held);
          const response = await shutdown;
          if (response.status !== 200) throw new Error(`/shutdown answered ${response.status}: ${response.body}`);
        },
        20,
      );
      return [
        {
          name: BIG_DRAIN,
          value: `${mib(peak.rssMiB)} (${mib(peak.anonymousMiB)}); at rest ${mib(rest.anonymous + rest.fileBacked)} (${mib(rest.anonymous)})`,
          target: `≤ the injected memory request`,
          pass: peak.rssMiB <= memoryRequestMib(),
        },
      ];
    } finally {
      await stop(sidecar.child);
    }
  } finally {
    await closeAll(held);
    await stop(emulator.child);
    await rm(stateDir, { recursive: true, force: true });
  }
}

/** The injected sidecar's memory request, in MiB (the webhook's default, which the injector writes). */
function memoryRequestMib(): number {
  const { numerator, denominator } = parseWebhookConfig([], {}).injection.sidecarResources.memoryRequest;
  return Number(numerator) / Number(denominator) / 2 ** 20;
}

/** What no client behaviour may take the sidecar past: the pod's limit is 128Mi (test/sidecar/server-flood.test.ts). */
const RSS_BUDGET_MIB = 96;

/**
 * The floods of test/sidecar/server-flood.test.ts, each rate-limited and run from a child process: a
 * stranger opening 2,000 connections a second with one request each, and 5,000 keep-alive requests a second
 * over 8 connections, a tenth of them /metrics (a scraper gone wild). Nothing is kept; V8's young generation grows.
 */
const FLOODS: readonly { readonly name: string; readonly spec: Omit<FloodSpec, 'port' | 'seconds'> }[] = [
  {
    name: '2,000 new connections/s',
    spec: { kind: 'new-connections', perSecond: 2_000, concurrency: 64, paths: ['/drain', '/metrics', '/ready', '/healthz'] },
  },
  {
    name: '5,000 keep-alive requests/s',
    spec: {
      kind: 'keep-alive',
      perSecond: 5_000,
      sockets: 8,
      depth: 4,
      paths: ['/metrics', '/drain', '/drain', '/drain', '/drain', '/drain', '/drain', '/ready', '/ready', '/healthz'],
    },
  },
];

/** The kubelet's default probe timeout: what /healthz, /ready and the preStop's /shutdown must answer within. */
const PROBE_TIMEOUT_MS = 1_000;

/**
 * Peak resident memory (VmRSS sampled every 20 ms, or VmHWM if higher) of the sidecar started as injected
 * (sidecarArgs, SIDECAR_ENV, a token) under each flood, and of the same sidecar without SIDECAR_ENV (V8's
 * default heap settings); meanwhile the kubelet's /healthz and /ready every 100 ms and, halfway, its authorized
 * /shutdown. The drain is checked at once and every 100 ms (values a pod's annotations may set), so that with no
 * Envoy client connected /shutdown ends at its first poll and its answer time is the server's. These budgets were
 * in test/sidecar/server-flood.test.ts, which now holds the behaviour with bounds a busy machine keeps.
 */
export async function measureFloods(profile: Pick<SidecarBenchProfile, 'floodSeconds'>, withControls = true): Promise<Figure[]> {
  const plan = promptDrainPlan({ checkIntervalMs: 100 });
  const token = 'bench-token-0123456789abcdef01234567';
  const figures: Figure[] = [];
  for (const { name, spec } of FLOODS) {
    for (const sidecarEnv of withControls ? [true, false] : [true]) {
      // An Envoy of its own for each: a drain leaves it drained.
      const emulator = await EnvoyEmulator.start();
      const stateDir = await mkdtemp(join(tmpdir(), 'esm-bench-flood-'));
      const sidecar = await spawnInjectedSidecar(plan, { adminPort: emulator.ports.admin, stateDir, token, sidecarEnv });
      try {
        await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
        const watched = await floodWhileWatching(
          { pid: sidecar.child.pid as number, url: sidecar.url },
          { ...spec, port: sidecar.port, seconds: profile.floodSeconds },
          {
            probePaths: ['/healthz', '/ready'],
            probeEveryMs: 100,
            midway: () => timedCall(sidecar.url('/shutdown'), { headers: { authorization: `Bearer ${token}` }, timeoutMs: 10_000 }),
          },
        );
        const slowest = Math.max(...[...watched.probes.values()].flat());
        const shutdown = watched.midway;
        const { flood, peakMiB } = watched;
        console.log(
          `  ${name}, ${sidecarEnv ? 'injected NODE_OPTIONS' : 'V8 defaults'}: peak ${mib(peakMiB)} (rest ${mib(watched.restMiB)}); ` +
            `${flood.answered} answered (${flood.perSecond.toFixed(0)}/s), ${flood.errors} errors; slowest probe ${slowest.toFixed(1)} ms; ` +
            `/shutdown ${shutdown?.status} in ${shutdown?.ms.toFixed(0)} ms; load average ${loadAverage()}`,
        );
        figures.push({
          name: floodFigure(name, sidecarEnv),
          value: `${mib(peakMiB)} (${flood.perSecond.toFixed(0)}/s answered for ${profile.floodSeconds} s)`,
          target: sidecarEnv ? `< ${RSS_BUDGET_MIB} MiB` : '',
          pass: sidecarEnv ? peakMiB < RSS_BUDGET_MIB : undefined,
        });
        if (!sidecarEnv) continue;
        const shutdownMs = shutdown?.status === 200 ? shutdown.ms : Number.POSITIVE_INFINITY;
        figures.push({
          name: KUBELET_UNDER_FLOOD,
          value: `${slowest.toFixed(0)} ms; ${shutdown === undefined ? 'not answered' : `${shutdown.status} in ${shutdown.ms.toFixed(0)} ms`}`,
          target: `< ${PROBE_TIMEOUT_MS} ms; 200 in < ${PROBE_TIMEOUT_MS} ms`,
          pass: slowest < PROBE_TIMEOUT_MS && shutdownMs < PROBE_TIMEOUT_MS,
        });
      } finally {
        await stop(sidecar.child);
        await emulator.close();
        await rm(stateDir, { recursive: true, force: true });
      }
    }
  }
  return figures;
}

/**
 * The names of the figures this file reports, one place for the code that reports them and for
 * test/docs/performance.test.ts, which checks that docs/performance.md's generated tables hold no other row.
 */
const STARTS_AND_IDLE = [
  'sidecar private (anonymous) memory per instance, idle',
  'sidecars per 1,000 pods, idle (private × 1,000 + the file-backed pages once per node)',
  'sidecar RSS idle',
  'sidecar RSS after its first /metrics scrape',
  'sidecar start → ready (median)',
] as const;
const DRAINS = [`sidecar RSS draining ${HELD_CONNECTIONS} connections`, `drain overshoot, check-interval ${CHECK_INTERVAL_MS} ms`] as const;
export const BIG_DRAIN = `sidecar as injected, draining ${BIG_DRAIN_CONNECTIONS.toLocaleString('en-US')} connections: peak RSS (private)`;
const floodFigure = (flood: string, sidecarEnv: boolean): string => `sidecar peak RSS, ${flood}, ${sidecarEnv ? 'injected NODE_OPTIONS' : 'without NODE_OPTIONS'}`;
const KUBELET_UNDER_FLOOD = '… the kubelet meanwhile: slowest /healthz or /ready; an authorized /shutdown halfway';

/** Every figure name this file can report (those of listener-flood.ts apart). */
export function sidecarFigureNames(): string[] {
  const floods = FLOODS.flatMap(({ name }) => [floodFigure(name, true), floodFigure(name, false)]);
  return [...STARTS_AND_IDLE, ...DRAINS, BIG_DRAIN, ...floods, KUBELET_UNDER_FLOOD];
}

/** The start → ready and idle memory figures alone, beside the floor (`bench/sidecar.ts --only start`). */
export async function runStartBench(profile: Pick<SidecarBenchProfile, 'starts'>): Promise<Figure[]> {
  console.log(`Sidecar start and idle memory: ${profile.starts} alternating starts with a bare node:http floor, Node ${process.version}; load average ${loadAverage()}`);
  const emulator = await EnvoyEmulator.start();
  try {
    return await measureStartAndIdle(emulator, profile);
  } finally {
    await emulator.close();
    console.log(`  load average ${loadAverage()} at the end`);
  }
}

export async function runSidecarBench(profile: SidecarBenchProfile): Promise<Figure[]> {
  const floods = profile.floodSeconds > 0 ? `, ${FLOODS.length * 2} floods of ${profile.floodSeconds} s` : '';
  console.log(`Sidecar: ${profile.starts} alternating starts with a bare node:http floor, ${profile.drains + 1} drains${floods}; load average ${loadAverage()}`);
  const emulator = await EnvoyEmulator.start();
  try {
    return [
      ...(await measureStartAndIdle(emulator, profile)),
      ...(await measureDrains(emulator, profile)),
      ...(await measureBigDrain()),
      ...(profile.floodSeconds > 0 ? await measureFloods(profile) : []),
      // An Envoy of thousands of listeners, strangers pipelining /metrics without reading, during a drain (issue 28).
      ...(profile.floodSeconds > 0 ? await runListenerFloodBench({ listeners: [...LISTENER_COUNTS.bench], floodSeconds: profile.floodSeconds + 2 }) : []),
      ...(profile.floodSeconds > 0 ? await runRequestCostBench(LISTENER_COUNTS.bench[1]) : []),
    ];
  } finally {
    await emulator.close();
  }
}

/**
 * Alone: every sidecar figure, or with `--only start` the start → ready and idle memory figures alone, beside the
 * floor (a few seconds instead of minutes: what to run while working on the sidecar's start). `--starts=N` sets
 * how many alternating starts of each (11 by default; the memory is read in the first three).
 */
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { only: { type: 'string' }, starts: { type: 'string', default: '11' } } });
  const starts = Number(values.starts);
  if (!Number.isInteger(starts) || starts < 1) throw new Error(`--starts=${values.starts}: a whole number of starts, 1 or more`);
  if (values.only !== undefined && values.only !== 'start') throw new Error(`--only=${values.only}: only --only start is known`);
  const { printTable } = await import('./support.js');
  const profile = { starts, drains: 9, floodSeconds: 4 };
  printTable(values.only === 'start' ? await runStartBench(profile) : await runSidecarBench(profile));
}
