/**
 * Issue 28, items 1, 3 and 4: what the admin API shows changes while Envoy runs (its counters reset, its Unix socket
 * unlinked or replaced, its stats trimmed), and the drain must not take that for Envoy gone. Through the built
 * sidecar (`npm run build` first) against the Envoy emulator or the fault admin, on real sockets; each with its
 * negative control: the same path on the counter-only rule (an in-process Drain over the real admin client with the
 * witness's evidence taken out), which ends "drained" while Envoy holds its connections.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/clock.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { Drain } from '../../src/sidecar/drain.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { closeAll, httpRequest, openTcpConnections } from '../support/connections.js';
import { withoutWitness } from '../support/drain-target.js';
import { FaultAdmin } from '../support/fault-admin.js';
import { MemoryLog } from '../support/memory-log.js';
import { sampleOf } from '../support/prometheus.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';

const INTERVAL_MS = 50;
const FLAGS = [`--check-interval=${INTERVAL_MS}ms`, '--check-delay=0', '--admin-timeout=300ms', '--admin-refusals=2'];

async function emulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const started = await EnvoyEmulator.start(options);
  t.after(() => started.close());
  return started;
}

async function sidecar(t: TestContext, flags: readonly string[]): Promise<SidecarProcess> {
  const started = await spawnSidecar([...FLAGS, ...flags]);
  t.after(() => started.kill());
  return started;
}

function temporaryDirectory(t: TestContext): string {
  const directory = mkdtempSync(join(tmpdir(), 'esm-witness-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

/** Until the watch has read Envoy a few times: its witness connection is open from the second answered read on. */
async function watched(process: SidecarProcess): Promise<void> {
  await process.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
  await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 6));
}

function shutdown(process: SidecarProcess): Promise<{ status: number; body: string }> {
  return httpRequest(process.url('/shutdown'), { timeoutMs: 20_000 });
}

/** Polls of the drain that counted `open` after the check delay: the drain is pinned and counting. */
function counting(process: SidecarProcess, open: number): Promise<unknown> {
  return process.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === open && line['check_delay_pending'] === undefined);
}

async function postAdmin(envoy: EnvoyEmulator, path: string): Promise<number> {
  return (await httpRequest(`http://127.0.0.1:${envoy.ports.admin}${path}`, { method: 'POST' })).status;
}

const CONTROL: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': INTERVAL_MS, 'min-open-connections': 0, 'drain-timeout': 3_000, 'admin-refusals': 2 };

describe('issue 28, item 1: counters reset during a drain', () => {
  test('POST /reset_counters mid-drain: the same process, its connections still counted; the drain holds to its deadline', async (t) => {
    const envoy = await emulator(t);
    const held = await openTcpConnections(envoy.ports.tcp, 2);
    t.after(() => closeAll(held));
    const manager = await sidecar(t, [`--admin-port=${envoy.ports.admin}`, '--drain-timeout=2500ms']);
    await watched(manager);
    const answer = shutdown(manager);
    await counting(manager, 2);
    assert.equal(await postAdmin(envoy, '/reset_counters'), 200, 'the emulator models POST /reset_counters');
    const reset = await manager.waitForLog((line) => line['event'] === 'envoy_counters_reset', 3_000);
    assert.ok(Number(reset['seen_admin_connections']) < Number(reset['pinned_admin_connections']), JSON.stringify(reset));
    const { status, body } = await answer;
    assert.equal(status, 503, body);
    assert.match(body, /drain deadline reached .* with 2 connections still open/);
    const finished = await manager.waitForLog((line) => line['event'] === 'drain_finished');
    assert.deepEqual([finished['reason'], finished['open_connections']], ['deadline', 2]);
    assert.equal(manager.logs.filter((line) => line['event'] === 'envoy_replaced').length, 0);
  });

  test('once the connections close after a reset, the count of the same process ends the drain: drained', async (t) => {
    const envoy = await emulator(t);
    const held = await openTcpConnections(envoy.ports.tcp, 2);
    const manager = await sidecar(t, [`--admin-port=${envoy.ports.admin}`, '--drain-timeout=8s']);
    await watched(manager);
    const answer = shutdown(manager);
    await counting(manager, 2);
    await postAdmin(envoy, '/reset_counters');
    await manager.waitForLog((line) => line['event'] === 'envoy_counters_reset', 3_000);
    await closeAll(held);
    const { status, body } = await answer;
    assert.equal(status, 200, body);
    assert.match(body, /^drained: 0 open connections/);
  });

  test('control: on the counter-only rule the same reset ends the drain "drained: another Envoy process answers" with both connections open', async (t) => {
    const envoy = await emulator(t);
    const held = await openTcpConnections(envoy.ports.tcp, 2);
    t.after(() => closeAll(held));
    const client = new WitnessedAdminClient({ address: '127.0.0.1', port: envoy.ports.admin, timeoutMs: 300 });
    t.after(() => client.close());
    const drain = new Drain(withoutWitness(client), CONTROL, new MemoryLog(), systemClock);
    const outcome = drain.start();
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 4));
    await postAdmin(envoy, '/reset_counters');
    const result = await outcome;
    assert.deepEqual([result.state, result.reason, result.openConnections, envoy.openConnections.tcp], ['drained', 'envoy-replaced', 2, 2]);
  });
});

describe('issue 28, item 3: a Unix socket that cannot be connected to', () => {
  for (const change of ['unlinked', 'a regular file', 'a directory'] as const) {
    test(`the socket path ${change === 'unlinked' ? 'unlinked' : `replaced by ${change}`} while Envoy runs: never "Envoy exited"; the drain holds to its deadline and says what is at the path`, async (t) => {
      const path = join(temporaryDirectory(t), 'admin.sock');
      const envoy = await emulator(t, { adminSocketPath: path });
      const held = await openTcpConnections(envoy.ports.tcp, 2);
      t.after(() => closeAll(held));
      const manager = await sidecar(t, [`--admin-address=unix:${path}`, '--drain-timeout=2500ms']);
      await watched(manager);
      const answer = shutdown(manager);
      await counting(manager, 2);
      unlinkSync(path);
      if (change === 'a regular file') writeFileSync(path, 'not a socket\n');
      if (change === 'a directory') mkdirSync(path);
      const { status, body } = await answer;
      assert.equal(status, 503, body);
      const finished = await manager.waitForLog((line) => line['event'] === 'drain_finished');
      assert.deepEqual([finished['reason'], finished['open_connections']], ['deadline', 2]);
      const drain = JSON.parse((await httpRequest(manager.url('/drain'))).body) as { adminFailure: { kind: string; message: string } | null };
      if (change === 'unlinked') {
        assert.equal(drain.adminFailure?.kind, 'refused');
        const lost = await manager.waitForLog((line) => line['event'] === 'envoy_admin_address_lost');
        assert.equal(lost['path_state'], 'missing');
        assert.match(String(lost['error_message']), new RegExp(`no socket at ${path}`));
      } else {
        assert.equal(drain.adminFailure?.kind, 'transport');
        assert.match(drain.adminFailure?.message ?? '', new RegExp(`${path} is now ${change}, not a Unix socket`));
      }
    });
  }

  test('Envoy exiting still ends the drain at once as envoy-exited: its socket refuses and the connection held to it closed', async (t) => {
    const path = join(temporaryDirectory(t), 'admin.sock');
    const envoy = await emulator(t, { adminSocketPath: path });
    const manager = await sidecar(t, [`--admin-address=unix:${path}`, '--drain-timeout=20s']);
    await watched(manager);
    const held = await openTcpConnections(envoy.ports.tcp, 1);
    t.after(() => closeAll(held));
    const answer = shutdown(manager);
    await counting(manager, 1);
    const started = performance.now();
    await envoy.close();
    const { status, body } = await answer;
    assert.equal(status, 200, body);
    assert.match(body, /Envoy has exited/);
    assert.ok(performance.now() - started < 5_000, `${Math.round(performance.now() - started)} ms`);
  });

  test('control: on the counter-only rule an unlinked socket path ends the drain "drained: Envoy has exited" with Envoy running', async (t) => {
    const path = join(temporaryDirectory(t), 'admin.sock');
    const envoy = await emulator(t, { adminSocketPath: path });
    const held = await openTcpConnections(envoy.ports.tcp, 2);
    t.after(() => closeAll(held));
    const client = new WitnessedAdminClient({ address: `unix:${path}`, port: 0, timeoutMs: 300 });
    t.after(() => client.close());
    const drain = new Drain(withoutWitness(client), CONTROL, new MemoryLog(), systemClock);
    const outcome = drain.start();
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 4));
    unlinkSync(path);
    const result = await outcome;
    assert.deepEqual([result.state, result.reason, result.openConnections, envoy.openConnections.tcp], ['drained', 'envoy-exited', 2, 2]);
  });
});

describe('issue 28, item 4: stats the drain needs, checked at pod start', () => {
  test('an Envoy whose stats lack listener.admin.*: a warning at start, the metric, /ready says it (and stays 200); a replaced Envoy is still told by the held connection', async (t) => {
    const envoy = await FaultAdmin.start({ listeners: { ingress: 3 }, statsExcluded: /^listener\.admin\./ });
    t.after(() => envoy.close());
    const manager = await sidecar(t, [`--admin-port=${envoy.port}`, '--drain-timeout=3s']);
    const warning = await manager.waitForLog((line) => line['event'] === 'envoy_stats_missing', 5_000);
    // The fault admin has no arrival counters either: that is named too.
    assert.deepEqual(warning['missing_stats'], ['listener.admin.downstream_cx_total', 'listener.<listener>.downstream_cx_total']);
    assert.equal(warning['level'], 'warn');
    assert.match(String(warning['msg']), /no listener\.admin\.downstream_cx_total: only the connection the sidecar holds open to Envoy tells the drained process from a replacement/);
    const ready = await httpRequest(manager.url('/ready'));
    assert.equal(ready.status, 200);
    assert.match(ready.body, /lack what the drain needs/);
    const metrics = (await httpRequest(manager.url('/metrics'))).body;
    assert.equal(sampleOf(metrics, 'shutdown_manager_envoy_stats_missing{stat="listener.admin.downstream_cx_total"}'), 1);
    assert.equal(sampleOf(metrics, 'shutdown_manager_envoy_stats_missing{stat="listener.<listener>.downstream_cx_active"}'), 0);

    // Without the mark, the new process's 0 must not end the drain of the old one: the held connection closed.
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 4));
    const answer = shutdown(manager);
    await counting(manager, 3);
    envoy.replaceProcess();
    envoy.setConnections('ingress', 0);
    const started = performance.now();
    const { status, body } = await answer;
    assert.equal(status, 503, `never "drained" on a count it cannot attribute: ${body}`);
    assert.match(body, /drain deadline reached/);
    assert.ok(performance.now() - started > 1_500, `held to its deadline (${Math.round(performance.now() - started)} ms)`);
  });

  test('an Envoy with every stat the drain needs: no warning, the metric at 0', async (t) => {
    const envoy = await emulator(t);
    const manager = await sidecar(t, [`--admin-port=${envoy.ports.admin}`]);
    await watched(manager);
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 4));
    const metrics = (await httpRequest(manager.url('/metrics'))).body;
    assert.equal(sampleOf(metrics, 'shutdown_manager_envoy_stats_missing{stat="listener.admin.downstream_cx_total"}'), 0);
    assert.equal(manager.logs.filter((line) => line['event'] === 'envoy_stats_missing').length, 0);
    assert.doesNotMatch((await httpRequest(manager.url('/ready'))).body, /lack/);
  });
});
