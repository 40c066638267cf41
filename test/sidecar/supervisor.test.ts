/**
 * The drain across Envoy restarts and sidecar restarts: /wait never starts a drain, a finished drain is
 * re-armed only for a new Envoy process, and an Envoy found left draining is brought back as the journal
 * says. Envoy here is a small model of what its admin API reports; the process tests and the rollout
 * tests run the same paths against the emulator.
 */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { AdminRefusedError, type EnvoyProcessInfo, type EnvoyServerState } from '../../src/envoy/admin-client.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import { systemClock } from '../../src/clock.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain.js';
import { openJournal, type DrainJournal } from '../../src/sidecar/journal.js';
import { decideRecovery, SAME_PROCESS_TOLERANCE_MS } from '../../src/sidecar/recovery.js';
import { DrainSupervisor, type SupervisedEnvoy } from '../../src/sidecar/supervisor.js';
import { MemoryLog } from '../support/memory-log.js';

/** One Envoy process as its admin API shows it; `restart()` replaces it with a fresh one. */
class ModelEnvoy implements SupervisedEnvoy {
  readonly address = '127.0.0.1:9001';
  readonly calls: string[] = [];
  hasAnswered = true;
  open = 0;
  down = false;
  private startedAtMs: number;
  private healthFailed = false;
  listenersDrained = false;

  constructor(uptimeMs = 60_000) {
    this.startedAtMs = Date.now() - uptimeMs;
  }

  restart(): void {
    this.startedAtMs = Date.now();
    this.healthFailed = false;
    this.listenersDrained = false;
    this.down = false;
  }

  get state(): EnvoyServerState {
    return this.healthFailed ? 'DRAINING' : 'LIVE';
  }

  private answer(call: string): void {
    this.calls.push(call);
    if (this.down) throw new AdminRefusedError(call, 'connection refused');
  }

  async serverInfo(_signal?: AbortSignal, now: () => number = Date.now): Promise<EnvoyProcessInfo> {
    this.answer('server_info');
    const readAtMs = now();
    const uptimeSeconds = Math.floor((readAtMs - this.startedAtMs) / 1000);
    return { state: this.state, uptimeSeconds, startedAtMs: readAtMs - uptimeSeconds * 1000, readAtMs };
  }

  async failHealthChecks(): Promise<void> {
    this.answer('healthcheck/fail');
    this.healthFailed = true;
  }

  async passHealthChecks(): Promise<void> {
    this.answer('healthcheck/ok');
    this.healthFailed = false;
  }

  async drainListeners(): Promise<void> {
    this.answer('drain_listeners');
    this.listenersDrained = true;
  }

  async quit(): Promise<void> {
    this.answer('quitquitquit');
    this.down = true;
  }

  async countOpenConnections(): Promise<ConnectionCount> {
    this.answer('stats');
    return { total: this.open, byListener: { '0.0.0.0_8080': this.open }, missingListeners: [] };
  }

  mutations(): string[] {
    return this.calls.filter((call) => !['server_info', 'stats'].includes(call));
  }
}

const DRAIN: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 10, 'min-open-connections': 0, 'drain-timeout': 2_000, 'admin-refusals': 3 };

function supervise(envoy: ModelEnvoy, options: { recoverEnvoy?: boolean; journal?: DrainJournal; watchIntervalMs?: number } = {}) {
  const log = new MemoryLog();
  const supervisor = new DrainSupervisor(
    envoy,
    { drain: DRAIN, recoverEnvoy: options.recoverEnvoy ?? true, watchIntervalMs: options.watchIntervalMs ?? 60_000 },
    options.journal ?? openJournal(''),
    log,
    systemClock,
  );
  return { supervisor, log };
}

async function tempDir(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-journal-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

describe('DrainSupervisor: /wait never starts a drain', () => {
  test('with no drain it answers undefined after the window, and Envoy got nothing', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor } = supervise(envoy);
    const started = Date.now();
    assert.equal(await supervisor.wait(80), undefined);
    assert.ok(Date.now() - started >= 75, 'waited the window');
    assert.deepEqual(envoy.calls, []);
    assert.equal(supervisor.state, 'idle');
    supervisor.stop();
  });

  test('joins a drain that starts within the window and answers with its outcome', async () => {
    const envoy = new ModelEnvoy();
    envoy.open = 1;
    const { supervisor } = supervise(envoy);
    const waiting = supervisor.wait(5_000);
    setTimeout(() => void supervisor.shutdown(), 20);
    setTimeout(() => (envoy.open = 0), 80);
    const outcome = await waiting;
    assert.equal(outcome?.state, 'drained');
    assert.equal(outcome, await supervisor.shutdown(), 'the same drain');
    assert.deepEqual(envoy.mutations(), ['healthcheck/fail', 'drain_listeners']);
    supervisor.stop();
  });

  test('a /wait that comes just after a short drain ended gets its outcome at once; one long after waits for a new drain', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor } = supervise(envoy);
    const drained = await supervisor.shutdown();
    const started = Date.now();
    assert.equal(await supervisor.wait(2_000), drained);
    assert.ok(Date.now() - started < 1_000, 'answered at once');
    await new Promise((resolve) => setTimeout(resolve, 120));
    assert.equal(await supervisor.wait(100), undefined, 'a drain that ended before the window is not this deletion');
    supervisor.stop();
  });

  test('stop() releases a waiting /wait at once', async () => {
    const { supervisor } = supervise(new ModelEnvoy());
    const waiting = supervisor.wait(60_000);
    supervisor.stop();
    assert.equal(await waiting, undefined);
  });
});

describe('DrainSupervisor: the drain is re-armed for a new Envoy process, and only then', () => {
  test('a repeated /shutdown for the same Envoy gets the kept outcome and sends nothing', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor } = supervise(envoy);
    const first = await supervisor.shutdown();
    const again = await supervisor.shutdown();
    assert.equal(again, first);
    assert.deepEqual(envoy.mutations(), ['healthcheck/fail', 'drain_listeners']);
    assert.equal(supervisor.snapshot().rearms, 0);
    supervisor.stop();
  });

  test('after an Envoy restart, the next /shutdown drains the new process', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor, log } = supervise(envoy);
    const first = await supervisor.shutdown();
    envoy.restart();
    const second = await supervisor.shutdown();
    assert.notEqual(second, first);
    assert.equal(second.state, 'drained');
    assert.deepEqual(envoy.mutations(), ['healthcheck/fail', 'drain_listeners', 'healthcheck/fail', 'drain_listeners']);
    assert.equal(supervisor.snapshot().rearms, 1);
    assert.equal(log.events('drain_rearmed').length, 1);
    supervisor.stop();
  });

  test('an Envoy that exited during the drain and answers again is a new process', async () => {
    const envoy = new ModelEnvoy();
    envoy.open = 3;
    const { supervisor } = supervise(envoy);
    const drained = supervisor.shutdown();
    setTimeout(() => (envoy.down = true), 30);
    assert.equal((await drained).reason, 'envoy-exited');
    envoy.restart();
    await supervisor.shutdown();
    assert.equal(supervisor.snapshot().rearms, 1);
    supervisor.stop();
  });

  test('the watcher re-arms on its own once a restarted Envoy answers, so /drain shows idle', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor } = supervise(envoy, { watchIntervalMs: 20 });
    await supervisor.shutdown();
    assert.equal(supervisor.snapshot().state, 'drained');
    envoy.restart();
    const deadline = Date.now() + 3_000;
    while (supervisor.snapshot().state !== 'idle' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(supervisor.snapshot().state, 'idle');
    assert.equal(supervisor.snapshot().rearms, 1);
    supervisor.stop();
  });

  test('the watcher leaves the drained Envoy alone: no re-arm while it is the same process', async () => {
    const envoy = new ModelEnvoy();
    const { supervisor } = supervise(envoy, { watchIntervalMs: 10 });
    await supervisor.shutdown();
    const deadline = Date.now() + 200;
    while (envoy.calls.filter((call) => call === 'server_info').length < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(envoy.calls.filter((call) => call === 'server_info').length >= 3, 'the watcher looked');
    assert.deepEqual([supervisor.snapshot().state, supervisor.snapshot().rearms], ['drained', 0]);
    supervisor.stop();
  });
});

describe('recovery of an Envoy left draining', () => {
  const process = (state: EnvoyServerState, startedAtMs = 1_000_000): EnvoyProcessInfo => ({ state, uptimeSeconds: 60, startedAtMs, readAtMs: startedAtMs + 60_000 });
  const entry = (listenersDrained: boolean, envoyStartedAtMs: number | null = 1_000_000) => ({
    envoyStartedAtMs,
    healthChecksFailed: true,
    listenersDrained,
    updatedAt: '2026-11-23T00:00:00.000Z',
  });

  test('decisions: listeners drained → restart; health checks only → pass them; unknown → restart; LIVE → nothing', () => {
    assert.equal(decideRecovery(process('DRAINING'), entry(true)).action, 'restart-envoy');
    assert.equal(decideRecovery(process('LIVE'), entry(true)).action, 'restart-envoy', 'a drain of listeners cannot be undone, even if health checks pass again');
    assert.equal(decideRecovery(process('DRAINING'), entry(false)).action, 'pass-health-checks');
    assert.equal(decideRecovery(process('DRAINING'), undefined).action, 'restart-envoy');
    assert.equal(decideRecovery(process('DRAINING'), entry(false, null)).action, 'restart-envoy', 'a record of an unknown process tells nothing');
    assert.equal(decideRecovery(process('DRAINING'), entry(false, 1_000_000 - SAME_PROCESS_TOLERANCE_MS - 1)).action, 'restart-envoy', 'another process');
    assert.equal(decideRecovery(process('DRAINING'), entry(false, 1_000_000 + SAME_PROCESS_TOLERANCE_MS)).action, 'pass-health-checks', 'within the tolerance');
    assert.equal(decideRecovery(process('LIVE'), undefined).action, 'none');
    assert.equal(decideRecovery(process('INITIALIZING'), entry(false)).action, 'none');
  });

  test('a restarted sidecar reads the journal of the one before and undoes only the health-check failure', async (t) => {
    const dir = await tempDir(t);
    const envoy = new ModelEnvoy();
    // The sidecar before journaled and sent /healthcheck/fail, then died before drain_listeners.
    await openJournal(dir).record('fail health checks', (await envoy.serverInfo()).startedAtMs, Date.now());
    await envoy.failHealthChecks();

    const { supervisor, log } = supervise(envoy, { journal: openJournal(dir) });
    const report = await supervisor.recover();
    assert.deepEqual([report?.action, report?.listenersDrained], ['pass-health-checks', false]);
    assert.equal(envoy.state, 'LIVE');
    assert.deepEqual(envoy.mutations(), ['healthcheck/fail', 'healthcheck/ok']);
    assert.equal(log.events('envoy_recovery')[0]?.['action'], 'pass-health-checks');
    assert.equal(supervisor.snapshot().recovery?.action, 'pass-health-checks');
  });

  test('listeners drained by the sidecar before: Envoy is restarted with /quitquitquit', async (t) => {
    const dir = await tempDir(t);
    const envoy = new ModelEnvoy();
    const first = supervise(envoy, { journal: openJournal(dir) });
    await first.supervisor.shutdown();
    first.supervisor.stop();
    const second = supervise(envoy, { journal: openJournal(dir) });
    const report = await second.supervisor.recover();
    assert.deepEqual([report?.action, report?.listenersDrained], ['restart-envoy', true]);
    assert.equal(envoy.calls.at(-1), 'quitquitquit');
    const warning = second.log.lines.find((line) => line.fields['event'] === 'envoy_recovery');
    assert.equal(warning?.level, 'warn');
    assert.match(warning?.message ?? '', /left draining.*quitquitquit/);
  });

  test('--recover-envoy=false: the finding is logged and nothing is sent', async () => {
    const envoy = new ModelEnvoy();
    await envoy.failHealthChecks();
    const { supervisor, log } = supervise(envoy, { recoverEnvoy: false });
    const report = await supervisor.recover();
    assert.deepEqual([report?.action, report?.disabled], ['none', true]);
    assert.deepEqual(envoy.mutations(), ['healthcheck/fail']);
    assert.equal(log.events('envoy_recovery')[0]?.['disabled'], true);
  });

  test('a healthy Envoy is left alone; so is any Envoy once a drain has started', async () => {
    const envoy = new ModelEnvoy();
    const idle = supervise(envoy);
    assert.equal((await idle.supervisor.recover())?.action, 'none');
    assert.deepEqual(envoy.mutations(), []);
    envoy.open = 1;
    const draining = supervise(envoy);
    const drain = draining.supervisor.shutdown();
    assert.equal(await draining.supervisor.recover(), null);
    envoy.open = 0;
    await drain;
    assert.ok(!envoy.calls.includes('quitquitquit') && !envoy.calls.includes('healthcheck/ok'));
    draining.supervisor.stop();
  });

  test('a journal that cannot be written is reported once and never holds the drain back', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'not-a-directory');
    await writeFile(file, '');
    await chmod(file, 0o400);
    const envoy = new ModelEnvoy();
    const { supervisor, log } = supervise(envoy, { journal: openJournal(file) });
    const outcome = await supervisor.shutdown();
    assert.equal(outcome.state, 'drained');
    assert.equal(log.events('journal_failed').length, 1);
    assert.match(String(log.events('journal_failed')[0]?.['location']), /not-a-directory/);
    supervisor.stop();
  });
});
