/**
 * The sidecar under sustained floods of well-formed requests (issue 18), started as the injector writes it
 * into a pod: its args and its container environment, NODE_OPTIONS=--max-semi-space-size=1 included
 * (SIDECAR_ENV). Per-connection bounds cannot help here: every client reads its answers and keeps within
 * them, and nothing is kept, but at thousands of requests a second V8's young generation grows (16 MiB per
 * semi-space by default) and resident memory with it, to 93-106 MiB. With the injected flag the same floods
 * peak at 72-75 MiB; the comparison with V8's defaults is `npm run bench` (bench/sidecar.ts), not asserted
 * here, as the default peak sits too near the budget to be a reliable control.
 *
 * Each flood runs in a child process (test/support/flood.ts), rate-limited and bounded in time, while this
 * process samples the sidecar's VmRSS and calls it as the kubelet does. Run `npm run build` first (npm test does).
 *
 * What is asserted here is behaviour, with bounds a loaded 2-core machine keeps (issue 35: at a load of 8-9 the
 * flood generator itself reached 180 requests a second of 2,000, and a probe took 1.4 s): every request and probe
 * answered 200, the drain answered "drained", the process alive and under the pod's memory limit. The budgets (peak
 * under 96 MiB, the probes and /shutdown within the kubelet's 1 s) are figures of `npm run bench:budgets`.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { SIDECAR_ENV } from '../../src/inject/sidecar.js';
import { timedCall } from '../support/abuse.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { floodWhileWatching, promptDrainPlan, type FloodSpec, type WatchedFlood } from '../support/flood.js';
import { processEnvironment, spawnInjectedSidecar, type SidecarProcess } from '../support/sidecar-process.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

/** The pod's memory limit as injected (128Mi): past it the sidecar is killed. Its budget, 96 MiB, is bench:budgets'. */
const MEMORY_LIMIT_MIB = 128;
const TOKEN = 'flood-test-token';
const FLOOD_SECONDS = 4;
/** A flood that answered fewer requests than this tested little: a broken generator (a loaded machine still reaches 700). */
const MIN_ANSWERED = 200;

/**
 * The injector's default plan, but with the drain checked at once and every 100 ms (values a pod's
 * annotations may set): a /shutdown with no Envoy client connected then ends at its first poll, so that its
 * answer time is the server's, not the check delay's (a minute by default).
 */
const PLAN = promptDrainPlan({ checkIntervalMs: 100 });

async function startInjectedSidecar(t: TestContext): Promise<SidecarProcess> {
  const emulator = await EnvoyEmulator.start();
  t.after(() => emulator.close());
  const stateDir = await mkdtemp(join(tmpdir(), 'esm-flood-state-'));
  t.after(() => rm(stateDir, { recursive: true, force: true }));
  const sidecar = await spawnInjectedSidecar(PLAN, { adminPort: emulator.ports.admin, stateDir, token: TOKEN });
  t.after(() => sidecar.kill());
  await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');

  // The injected environment reached the process as the kernel started it, not only the spawn call: without
  // the flag the floods below would be run at V8's defaults and prove nothing about the pod.
  const environment = processEnvironment(sidecar.child.pid!);
  assert.ok(SIDECAR_ENV.some(({ name, value }) => name === 'NODE_OPTIONS' && /--max-semi-space-size=\d+/.test(value)), 'the injector caps the young generation');
  for (const { name, value } of SIDECAR_ENV) assert.equal(environment[name], value, `${name} in /proc/<pid>/environ`);
  return sidecar;
}

/** The flood, the kubelet's /healthz and /ready every 100 ms, and its authorized /shutdown halfway. */
function floodAsKubeletWatches(sidecar: SidecarProcess, spec: Omit<FloodSpec, 'port' | 'seconds'>): Promise<WatchedFlood<Awaited<ReturnType<typeof timedCall>>>> {
  return floodWhileWatching(
    { pid: sidecar.child.pid!, url: sidecar.url },
    { ...spec, port: sidecar.port, seconds: FLOOD_SECONDS },
    {
      probePaths: ['/healthz', '/ready'],
      probeEveryMs: 100,
      midway: () => timedCall(sidecar.url('/shutdown'), { headers: { authorization: `Bearer ${TOKEN}` }, timeoutMs: 10_000 }),
    },
  );
}

const summary = (values: readonly number[]): string =>
  `max ${Math.max(...values).toFixed(1)} ms, median ${[...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!.toFixed(1)} ms over ${values.length}`;

function assertServedThroughout(t: TestContext, watched: WatchedFlood<Awaited<ReturnType<typeof timedCall>>>, perSecond: number): void {
  const { flood, restMiB, peakMiB, samples, probes, midway: shutdown } = watched;
  t.diagnostic(
    `flood: ${flood.answered} answered in ${flood.seconds.toFixed(1)} s (${flood.perSecond.toFixed(0)}/s of ${perSecond}/s), ` +
      `${flood.dropped} dropped by the rate limit, ${flood.errors} errors, statuses ${JSON.stringify(flood.statuses)}`,
  );
  t.diagnostic(`resident memory ${restMiB.toFixed(1)} MiB at rest, peak ${peakMiB.toFixed(1)} MiB (${samples} samples)`);
  for (const [path, durations] of probes) t.diagnostic(`${path} during the flood: ${summary(durations)}`);
  t.diagnostic(`/shutdown halfway: ${shutdown?.status} in ${shutdown?.ms.toFixed(0)} ms`);

  assert.ok(flood.answered >= MIN_ANSWERED, `the flood had ${flood.answered} requests answered`);
  assert.deepEqual(Object.keys(flood.statuses), ['200'], JSON.stringify(flood.statuses));
  assert.ok(flood.errors <= flood.sent / 100, `${flood.errors} errors of ${flood.sent} requests`);
  assert.ok(samples >= FLOOD_SECONDS * 5, `only ${samples} samples of VmRSS in ${FLOOD_SECONDS} s`);
  assert.ok(peakMiB < MEMORY_LIMIT_MIB, `peak resident memory ${peakMiB.toFixed(1)} MiB`);
  // Every probe was answered 200 within the watcher's 5 s (it throws otherwise); the kubelet calls throughout.
  for (const [path, durations] of probes) assert.ok(durations.length >= FLOOD_SECONDS, `${path}: only ${durations.length} calls in ${FLOOD_SECONDS} s`);
  assert.ok(shutdown !== undefined, 'the authorized /shutdown was sent halfway');
  assert.equal(shutdown.status, 200, shutdown.body);
  assert.match(shutdown.body, /^drained: 0 open connections/);
}

describe('sidecar process as injected (NODE_OPTIONS from SIDECAR_ENV): sustained floods of well-formed requests', () => {
  test('2,000 new connections a second for 4 s, one request each: every request, probe and an authorized /shutdown answered, under the memory limit', async (t) => {
    const sidecar = await startInjectedSidecar(t);
    const perSecond = 2_000;
    const watched = await floodAsKubeletWatches(sidecar, { kind: 'new-connections', perSecond, concurrency: 64, paths: ['/drain', '/metrics', '/ready', '/healthz'] });
    assertServedThroughout(t, watched, perSecond);
    assert.equal(sidecar.child.exitCode, null, 'the sidecar is still running');
  });

  test('5,000 keep-alive requests a second for 4 s over 8 connections (500 /metrics scrapes a second, /drain, /ready, /healthz): the kubelet answered throughout, under the memory limit', async (t) => {
    const sidecar = await startInjectedSidecar(t);
    const perSecond = 5_000;
    const paths = ['/metrics', '/drain', '/drain', '/drain', '/drain', '/drain', '/drain', '/ready', '/ready', '/healthz'];
    const watched = await floodAsKubeletWatches(sidecar, { kind: 'keep-alive', perSecond, sockets: 8, depth: 4, paths });
    assertServedThroughout(t, watched, perSecond);
    assert.equal(sidecar.child.exitCode, null, 'the sidecar is still running');
  });
});
