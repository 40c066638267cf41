/**
 * The observed rule (issue 27) through the real interfaces: the built sidecar (`node dist/entry.cjs mode=sidecar`)
 * against the Envoy emulator on loopback, with a load balancer, health checks and the kubelet's probes as real
 * sockets. Each protection has its negative control. `npm run build` first.
 *
 * The "kubelet" here sends Envoy's preStop `GET /shutdown` and, when it returns, stops Envoy at once (SIGTERM:
 * Envoy exits without draining), as the kubelet does: a request the load balancer sends after that is lost.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { ENVOY_MAIN_VERSION } from '../../src/emulator/versions.js';
import type { DrainOutcome } from '../../src/sidecar/drain.js';
import { openTcpConnection } from '../support/connections.js';
import { sampleOf } from '../support/prometheus.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const FAST = ['--check-interval=100ms', '--check-delay=300ms', '--admin-timeout=1s'];

async function envoy(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start({ healthCheckPath: '/healthz', ...options });
  t.after(() => emulator.close());
  return emulator;
}

async function sidecar(t: TestContext, emulator: EnvoyEmulator, flags: readonly string[]): Promise<SidecarProcess> {
  const process = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, ...FAST, ...flags]);
  t.after(() => process.kill());
  await process.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
  return process;
}

/** One GET on a new connection; whether it got an answer. */
function request(port: number, path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const call = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 2_000 }, (response) => {
      response.resume();
      response.on('end', () => resolve(true));
      response.on('error', () => resolve(false));
    });
    call.on('timeout', () => call.destroy());
    call.on('error', () => resolve(false));
  });
}

/** A TCP health check: connect, then close without a byte. */
function connectOnly(port: number): Promise<void> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => socket.destroy());
    socket.on('close', () => resolve());
    socket.on('error', () => resolve());
  });
}

/** Something sending every `everyMs` until stopped or `forMs` passed; counts what was answered and what was lost. */
function every(
  everyMs: number,
  forMs: number,
  send: () => Promise<boolean | void>,
): { stop: () => Promise<{ sent: number; lost: number }>; finished: () => Promise<{ sent: number; lost: number }> } {
  let stopped = false;
  const counts = { sent: 0, lost: 0 };
  const until = Date.now() + forMs;
  const loop = (async () => {
    // Bounded by forMs (and at most 10,000 sends).
    for (let i = 0; i < 10_000 && !stopped && Date.now() < until; i += 1) {
      const answered = await send();
      counts.sent += 1;
      if (answered === false) counts.lost += 1;
      await sleep(everyMs);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return counts;
    },
    finished: async () => {
      await loop;
      return counts;
    },
  };
}

/** The kubelet: Envoy's preStop hook, then SIGTERM to Envoy the moment it returns. */
async function deletePod(sidecarProcess: SidecarProcess, emulator: EnvoyEmulator): Promise<{ outcome: DrainOutcome & { description: string }; tookMs: number }> {
  const started = Date.now();
  const body = await new Promise<string>((resolve, reject) => {
    const call = http.get(sidecarProcess.url('/shutdown'), { headers: { accept: 'application/json' }, timeout: 30_000 }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve(text));
    });
    call.on('timeout', () => call.destroy(new Error('/shutdown took over 30 s')));
    call.on('error', reject);
  });
  const tookMs = Date.now() - started;
  await emulator.close();
  return { outcome: JSON.parse(body) as DrainOutcome & { description: string }, tookMs };
}

/** A pod deleted while a load balancer sends it a request every 50 ms for 2.5 s, whatever the drain does. */
async function deleteBehindBalancer(t: TestContext, quietPeriod: string) {
  const emulator = await envoy(t);
  const process = await sidecar(t, emulator, [`--quiet-period=${quietPeriod}`, '--drain-timeout=15s']);
  const balancer = every(50, 2_500, () => request(emulator.ports.http, '/'));
  const { outcome, tookMs } = await deletePod(process, emulator);
  const { sent, lost } = await balancer.finished();
  t.diagnostic(`/shutdown after ${tookMs} ms; ${sent} requests sent, ${lost} lost; ${outcome.description}`);
  return { process, outcome, tookMs, sent, lost };
}

describe('sidecar process: the observed rule lets go only once the load balancer has', () => {
  test('a load balancer that keeps sending for 2.5 s after the health checks fail: the drain waits for it, nothing is lost, and the lag is reported', async (t) => {
    const { process, outcome, tookMs, sent, lost } = await deleteBehindBalancer(t, '1s');
    assert.equal(outcome.reason, 'connections-closed');
    assert.equal(lost, 0, 'no request reached an Envoy that had exited');
    assert.ok(tookMs >= 3_000, `ended ${tookMs} ms after /shutdown: before a quiet second after the load balancer stopped`);
    const { lagMs, lagAtLeastMs, quiet, observable } = outcome.loadBalancer;
    assert.deepEqual([observable, quiet], [true, true]);
    assert.ok(lagMs !== null && lagMs >= 2_000 && lagMs <= tookMs, `lag ${lagMs} ms`);
    assert.ok(lagAtLeastMs !== null && lagAtLeastMs <= lagMs, 'lagAtLeastMs !== null && lagAtLeastMs <= lagMs');
    assert.match(outcome.description, /last new client traffic reached Envoy \d+\.\d-\d+\.\ds after its health checks failed \(then quiet for 1s\)/);
    const finished = await process.waitForLog((line) => line['event'] === 'drain_finished');
    assert.equal(finished['load_balancer_lag_ms'], lagMs, 'the log line carries the lag');
  });

  test('control: with the fixed rule alone (--quiet-period=0s) the drain ends at check-delay, Envoy exits, and the load balancer loses requests', async (t) => {
    const { outcome, tookMs, lost } = await deleteBehindBalancer(t, '0s');
    assert.equal(outcome.reason, 'connections-closed');
    assert.ok(tookMs < 2_000, `ended ${tookMs} ms after /shutdown`);
    assert.ok(lost > 0, 'requests sent after Envoy exited are lost');
  });

  test("the load balancer's own health checks (HTTP ones answered 503 by Envoy's health-check filter, and TCP connects with no request) do not hold the drain", async (t) => {
    // The release whose filter reports health_check.request_total, so that the report can count them.
    const emulator = await envoy(t, { version: ENVOY_MAIN_VERSION });
    const process = await sidecar(t, emulator, ['--quiet-period=1s', '--drain-timeout=8s']);
    const httpChecks = every(50, 8_000, () => request(emulator.ports.http, '/healthz'));
    const tcpChecks = every(50, 8_000, () => connectOnly(emulator.ports.http));
    const { outcome, tookMs } = await deletePod(process, emulator);
    await Promise.all([httpChecks.stop(), tcpChecks.stop()]);
    t.diagnostic(`/shutdown after ${tookMs} ms; ${outcome.description}`);
    assert.equal(outcome.reason, 'connections-closed');
    assert.ok(tookMs < 4_000, `ended ${tookMs} ms after /shutdown, not at the deadline`);
    const { sinceHealthChecksFailed, lagMs } = outcome.loadBalancer;
    assert.equal(lagMs, 0, 'no client traffic after the health checks failed');
    assert.ok(sinceHealthChecksFailed.healthChecks > 0 && sinceHealthChecksFailed.connections > 0, JSON.stringify(sinceHealthChecksFailed));
  });

  test("the kubelet's probes on a probe listener are not clients (--probe-ports); control: without it they hold the drain to its deadline", async (t) => {
    for (const probed of [true, false]) {
      const emulator = await envoy(t, { readonlyAdminPort: 0 });
      const probePort = emulator.readonlyAdminPort ?? 0;
      const flags = ['--quiet-period=1s', '--drain-timeout=4s', ...(probed ? [`--probe-ports=${probePort}`] : [])];
      const process = await sidecar(t, emulator, flags);
      const probes = every(50, 6_000, () => request(probePort, '/ready'));
      const { outcome, tookMs } = await deletePod(process, emulator);
      await probes.stop();
      t.diagnostic(`probe ports ${probed ? probePort : 'not given'}: /shutdown after ${tookMs} ms, ${outcome.reason}`);
      if (probed) {
        assert.equal(outcome.reason, 'connections-closed');
        assert.ok(!outcome.loadBalancer.watchedListeners.some((listener) => listener.endsWith(`_${probePort}`)), '!outcome.loadBalancer.watchedListeners.some((listener) => listener.endsWith(`_${probePort}`))');
      } else {
        assert.equal(outcome.reason, 'deadline', 'the probes pass for clients');
      }
      process.kill();
    }
  });

  test('/metrics: the lag during the drain (gauge), and once settled a histogram observation, while a connection still holds the drain', async (t) => {
    const emulator = await envoy(t);
    const process = await sidecar(t, emulator, ['--quiet-period=500ms', '--drain-timeout=10s']);
    const held = await openTcpConnection(emulator.ports.tcp);
    t.after(() => held.close());
    const before = await fetch(process.url('/metrics')).then((response) => response.text());
    assert.equal(sampleOf(before, 'shutdown_manager_load_balancer_lag_seconds'), undefined, 'absent before a drain: no sample, not 0');
    assert.equal(sampleOf(before, 'shutdown_manager_drain_load_balancer_lag_seconds_count'), 0);
    const drained = deletePod(process, emulator);
    await process.waitForLog((line) => line['event'] === 'poll' && Number(line['elapsed_ms']) >= 1_500);
    const during = await fetch(process.url('/metrics')).then((response) => response.text());
    assert.equal(sampleOf(during, 'shutdown_manager_load_balancer_lag_seconds{rule="observed"}'), 0, 'nothing arrived after the health checks failed');
    assert.equal(sampleOf(during, 'shutdown_manager_drain_load_balancer_lag_seconds_count'), 1, 'settled: quiet for the quiet period');
    assert.equal(sampleOf(during, 'shutdown_manager_drain_load_balancer_lag_seconds_bucket{le="0"}'), 1);
    await held.close();
    assert.equal((await drained).outcome.reason, 'connections-closed');
  });
});
