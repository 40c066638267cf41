/**
 * The drain across Envoy restarts and sidecar restarts: /wait never starts a drain, a finished drain is
 * re-armed only for a new Envoy process, and an Envoy found left draining is brought back as the journal
 * says. Envoy here is the scripted one of test/support/scripted-envoy.ts; the process tests and the rollout
 * tests run the same paths against the emulator.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { systemClock } from '../../src/clock.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { openJournal, type DrainJournal } from '../../src/sidecar/journal.js';
import { DrainSupervisor } from '../../src/sidecar/supervisor.js';
import { MemoryLog } from '../support/memory-log.js';
import { ScriptedEnvoy } from '../support/scripted-envoy.js';

const DRAIN: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 10, 'min-open-connections': 0, 'drain-timeout': 2_000, 'admin-refusals': 3 };

function supervise(envoy: ScriptedEnvoy, options: { recoverEnvoy?: boolean; journal?: DrainJournal; watchIntervalMs?: number; readTimeoutMs?: number } = {}) {
  const log = new MemoryLog();
  const supervisor = new DrainSupervisor(
    envoy,
    { drain: DRAIN, recoverEnvoy: options.recoverEnvoy ?? true, watchIntervalMs: options.watchIntervalMs ?? 60_000, readTimeoutMs: options.readTimeoutMs ?? 500 },
    options.journal ?? openJournal(''),
    log,
    systemClock,
  );
  return { supervisor, log };
}

/** Polls `condition` every 10 ms for up to 3 s. */
async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 300 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), 'condition not met within 3 s');
}

async function tempDir(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-journal-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

describe('DrainSupervisor: /wait never starts a drain', () => {
  test('with no drain it answers undefined after the window, and Envoy got nothing', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy);
    const started = Date.now();
    assert.equal(await supervisor.wait(80), undefined);
    assert.ok(Date.now() - started >= 75, 'waited the window');
    assert.deepEqual(envoy.names(), []);
    assert.equal(supervisor.state, 'idle');
    supervisor.stop();
  });

  test('joins a drain that starts within the window and answers with its outcome', async () => {
    const envoy = new ScriptedEnvoy();
    envoy.answers.count = [1];
    const { supervisor } = supervise(envoy);
    const waiting = supervisor.wait(5_000);
    setTimeout(() => void supervisor.shutdown(), 20);
    setTimeout(() => (envoy.answers.count = [0]), 80);
    const outcome = await waiting;
    assert.equal(outcome?.state, 'drained');
    assert.equal(outcome, await supervisor.shutdown(), 'the same drain');
    assert.deepEqual(envoy.mutations(), ['fail', 'drain']);
    supervisor.stop();
  });

  test('a /wait that comes after a drain ended gets its outcome at once, however late; after a re-arm it waits for a new drain', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy, { watchIntervalMs: 20 });
    const watching = supervisor.watch();
    const drained = await supervisor.shutdown();
    await new Promise((resolve) => setTimeout(resolve, 120));
    const started = performance.now();
    assert.equal(await supervisor.wait(5_000), drained);
    assert.ok(performance.now() - started < 1_000, 'answered at once, not after the window');
    envoy.replace();
    await until(() => supervisor.snapshot().rearms === 1);
    assert.equal(await supervisor.wait(100), undefined, 'the drain of the process before is not this deletion');
    supervisor.stop();
    await watching;
  });

  test('stop() releases a waiting /wait at once', async () => {
    const { supervisor } = supervise(new ScriptedEnvoy());
    const waiting = supervisor.wait(60_000);
    supervisor.stop();
    assert.equal(await waiting, undefined);
  });
});

describe('DrainSupervisor: the drain is re-armed for a new Envoy process, and only then', () => {
  test('a repeated /shutdown for the same Envoy gets the kept outcome and sends nothing', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy);
    const first = await supervisor.shutdown();
    const again = await supervisor.shutdown();
    assert.equal(again, first);
    assert.deepEqual(envoy.mutations(), ['fail', 'drain']);
    assert.equal(supervisor.snapshot().rearms, 0);
    supervisor.stop();
  });

  test('after an Envoy restart, the next /shutdown drains the new process', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor, log } = supervise(envoy);
    const first = await supervisor.shutdown();
    envoy.replace();
    const second = await supervisor.shutdown();
    assert.notEqual(second, first);
    assert.equal(second.state, 'drained');
    assert.deepEqual(envoy.mutations(), ['fail', 'drain', 'fail', 'drain']);
    assert.equal(supervisor.snapshot().rearms, 1);
    assert.equal(log.events('drain_rearmed').length, 1);
    supervisor.stop();
  });

  test('an Envoy that exited during the drain and answers again is a new process', async () => {
    const envoy = new ScriptedEnvoy();
    envoy.answers.count = [3];
    const { supervisor } = supervise(envoy);
    const drained = supervisor.shutdown();
    setTimeout(() => (envoy.down = true), 30);
    assert.equal((await drained).reason, 'envoy-exited');
    envoy.replace();
    envoy.answers.count = [0];
    await supervisor.shutdown();
    assert.equal(supervisor.snapshot().rearms, 1);
    supervisor.stop();
  });

  test('the watcher re-arms on its own once a restarted Envoy answers, so /drain shows idle; polls keep counting', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy, { watchIntervalMs: 20 });
    const watching = supervisor.watch();
    await supervisor.shutdown();
    assert.equal(supervisor.snapshot().state, 'drained');
    const polls = supervisor.snapshot().pollsTotal;
    assert.ok(polls > 0, 'the watcher polled');
    envoy.replace();
    await until(() => supervisor.snapshot().state === 'idle');
    assert.equal(supervisor.snapshot().rearms, 1);
    assert.equal(supervisor.snapshot().pollsTotal, polls, 'a counter: the re-armed drain does not take it back to 0');
    supervisor.stop();
    await watching;
  });

  test('the watcher leaves the drained Envoy alone: no re-arm while it is the same process', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy, { watchIntervalMs: 10 });
    const watching = supervisor.watch();
    await supervisor.shutdown();
    const statsBefore = envoy.names().filter((name) => name === 'count').length;
    await until(() => envoy.names().filter((name) => name === 'count').length >= statsBefore + 3);
    assert.deepEqual([supervisor.snapshot().state, supervisor.snapshot().rearms], ['drained', 0]);
    assert.equal(supervisor.snapshot().watch.up, true);
    supervisor.stop();
    await watching;
  });

  test('a /shutdown after a drain, while Envoy cannot say which process it is, drains it (it may be new)', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor, log } = supervise(envoy, { readTimeoutMs: 50 });
    const first = await supervisor.shutdown();
    envoy.delayMs.count = 200;
    const pending = supervisor.shutdown();
    envoy.delayMs.count = 0;
    const second = await pending;
    assert.notEqual(second, first);
    assert.equal(supervisor.snapshot().rearms, 1);
    assert.equal(log.events('drain_rearmed')[0]?.['previous_reason'], 'connections-closed');
    // Its first read found the drained process after all (mark above the last one): health checks failing long
    // enough, no connections, so it ended at that read, without sending anything again.
    assert.deepEqual([second.reason, second.durationMs < 1_000], ['connections-closed', true]);
    supervisor.stop();
  });

  test('a /shutdown after a drain, with nothing listening any more, gets the ended drain at once', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor } = supervise(envoy);
    const first = await supervisor.shutdown();
    envoy.down = true;
    assert.equal(await supervisor.shutdown(), first);
    assert.equal(supervisor.snapshot().rearms, 0);
    supervisor.stop();
  });

  test('the watcher logs a failing admin API at a bounded rate and backs off from 100 ms to the interval', async () => {
    const envoy = new ScriptedEnvoy();
    const { supervisor, log } = supervise(envoy, { watchIntervalMs: 400 });
    envoy.down = true;
    const watching = supervisor.watch();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const reads = envoy.names().filter((name) => name === 'count').length;
    assert.ok(reads >= 3 && reads <= 8, `backoff 100, 200, 400, 400… ms after the first interval: ${reads} reads`);
    assert.equal(log.events('envoy_admin_watch_failed').length, 1);
    assert.equal(supervisor.snapshot().watch.failing, 'refused');
    envoy.down = false;
    await until(() => supervisor.snapshot().watch.up === true);
    assert.equal(log.events('envoy_admin_watch_recovered').length, 1);
    supervisor.stop();
    await watching;
  });
});

describe('recovery of an Envoy left draining', () => {
  test('a restarted sidecar reads the journal of the one before and undoes only the health-check failure', async (t) => {
    const dir = await tempDir(t);
    const envoy = new ScriptedEnvoy();
    // The sidecar before journaled and sent /healthcheck/fail, then died before drain_listeners.
    const journal = openJournal(dir);
    const startedAtMs = (await envoy.serverInfo()).startedAtMs;
    await journal.record('fail-health-checks', 'intended', startedAtMs, Date.now());
    await envoy.failHealthChecks();
    await journal.record('fail-health-checks', 'accepted', startedAtMs, Date.now());

    const { supervisor, log } = supervise(envoy, { journal: openJournal(dir) });
    const report = await supervisor.recover();
    assert.deepEqual([report?.action, report?.listenersDrained], ['pass-health-checks', false]);
    assert.equal(envoy.state, 'LIVE');
    assert.deepEqual(envoy.mutations(), ['fail', 'pass']);
    assert.equal(log.events('envoy_recovery')[0]?.['action'], 'pass-health-checks');
    assert.equal(supervisor.snapshot().recovery?.action, 'pass-health-checks');
  });

  test('listeners drained by the sidecar before: Envoy is restarted with /quitquitquit', async (t) => {
    const dir = await tempDir(t);
    const envoy = new ScriptedEnvoy();
    const first = supervise(envoy, { journal: openJournal(dir) });
    await first.supervisor.shutdown();
    first.supervisor.stop();
    const second = supervise(envoy, { journal: openJournal(dir) });
    const report = await second.supervisor.recover();
    assert.deepEqual([report?.action, report?.listenersDrained], ['restart-envoy', true]);
    assert.equal(envoy.names().at(-1), 'quit');
    const warning = second.log.lines.find((line) => line.fields['event'] === 'envoy_recovery');
    assert.equal(warning?.level, 'warn');
    assert.match(warning?.message ?? '', /left draining.*quitquitquit/);
  });

  test('--recover-envoy=false: the finding is logged and nothing is sent', async () => {
    const envoy = new ScriptedEnvoy();
    await envoy.failHealthChecks();
    const { supervisor, log } = supervise(envoy, { recoverEnvoy: false });
    const report = await supervisor.recover();
    assert.deepEqual([report?.action, report?.disabled], ['none', true]);
    assert.deepEqual(envoy.mutations(), ['fail']);
    assert.equal(log.events('envoy_recovery')[0]?.['disabled'], true);
  });

  test('a healthy Envoy is left alone; so is any Envoy once a drain has started', async () => {
    const envoy = new ScriptedEnvoy();
    const idle = supervise(envoy);
    assert.equal((await idle.supervisor.recover())?.action, 'none');
    assert.deepEqual(envoy.mutations(), []);
    envoy.answers.count = [1];
    const draining = supervise(envoy);
    const drain = draining.supervisor.shutdown();
    assert.equal(await draining.supervisor.recover(), null);
    envoy.answers.count = [0];
    await drain;
    assert.ok(!envoy.names().includes('quit') && !envoy.names().includes('pass'), 'a healthy Envoy is neither restarted nor made healthy');
    draining.supervisor.stop();
  });

  test('a journal that cannot be written (a full disk) is reported once and never holds the drain back', async () => {
    const failing: DrainJournal = {
      enabled: true,
      location: '/var/run/shutdown-manager/drain.json',
      read: async () => undefined,
      record: async () => {
        throw new Error('ENOSPC: no space left on device');
      },
    };
    const envoy = new ScriptedEnvoy();
    const { supervisor, log } = supervise(envoy, { journal: failing });
    const outcome = await supervisor.shutdown();
    assert.equal(outcome.state, 'drained');
    assert.equal(log.events('journal_failed').length, 1);
    assert.match(String(log.events('journal_failed')[0]?.['error']), /ENOSPC/);
    supervisor.stop();
  });
});
