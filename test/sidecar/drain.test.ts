import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AdminRefusedError, AdminStatusError, AdminTimeoutError } from '../../src/envoy/admin-client.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import type { Clock } from '../../src/clock.js';
import { describeOutcome, Drain, type DrainLoopSettings, type EnvoyDrainTarget } from '../../src/sidecar/drain.js';
import { MemoryLog } from '../support/memory-log.js';
import { VirtualClock } from '../support/virtual-clock.js';

type Answer = number | Error | 'hang';

/** A scripted Envoy: each count call takes the next answer (the last one repeats); records every call. */
class FakeEnvoy implements EnvoyDrainTarget {
  readonly address = '127.0.0.1:9001';
  readonly calls: { name: string; at: number }[] = [];
  failAnswers: (Error | undefined)[] = [];
  drainAnswers: (Error | undefined)[] = [];
  /** As after the sidecar's start-up probe got an answer; false for an admin port that never answered. */
  hasAnswered = true;

  constructor(
    private readonly countAnswers: Answer[],
    private readonly now: () => number = Date.now,
  ) {}

  async failHealthChecks(): Promise<void> {
    this.calls.push({ name: 'fail', at: this.now() });
    const answer = this.failAnswers.shift();
    if (answer !== undefined) throw answer;
    this.hasAnswered = true;
  }

  async drainListeners(): Promise<void> {
    this.calls.push({ name: 'drain', at: this.now() });
    const answer = this.drainAnswers.shift();
    if (answer !== undefined) throw answer;
    this.hasAnswered = true;
  }

  async countOpenConnections(signal: AbortSignal): Promise<ConnectionCount> {
    this.calls.push({ name: 'count', at: this.now() });
    const answer = this.countAnswers.length > 1 ? this.countAnswers.shift() : this.countAnswers[0];
    if (answer === 'hang') {
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }));
    }
    if (answer instanceof Error) throw answer;
    this.hasAnswered = true;
    return { total: answer ?? 0, byListener: { '0.0.0.0_8080': answer ?? 0 }, missingListeners: [] };
  }

  names(): string[] {
    return this.calls.map((call) => call.name);
  }
}


const SETTINGS: DrainLoopSettings = {
  'drain-delay': 0,
  'check-delay': 0,
  'check-interval': 10,
  'min-open-connections': 0,
  'drain-timeout': 2_000,
  'admin-refusals': 3,
};

const refused = (): AdminRefusedError => new AdminRefusedError('GET /stats', 'connection refused');

function makeDrain(envoy: FakeEnvoy, settings: Partial<DrainLoopSettings> = {}, clock?: Clock) {
  const log = new MemoryLog();
  const drain = new Drain(envoy, { ...SETTINGS, ...settings }, log, clock);
  return { drain, log };
}

/** A drain on virtual time, for exact timing assertions. */
function makeTimedDrain(countAnswers: Answer[], settings: Partial<DrainLoopSettings>) {
  const clock = new VirtualClock();
  const envoy = new FakeEnvoy(countAnswers, () => clock.now());
  return { clock, envoy, ...makeDrain(envoy, settings, clock) };
}

describe('Drain', () => {
  test('fails health checks, drains listeners, then polls until connections are gone', async () => {
    const envoy = new FakeEnvoy([3, 2, 0]);
    const { drain, log } = makeDrain(envoy);
    assert.equal(drain.current, 'idle');
    const outcome = await drain.start();
    assert.deepEqual(envoy.names(), ['fail', 'drain', 'count', 'count', 'count']);
    assert.equal(outcome.state, 'drained');
    assert.equal(outcome.reason, 'connections-closed');
    assert.equal(outcome.openConnections, 0);
    assert.equal(drain.current, 'drained');
    const polls = log.events('poll');
    assert.deepEqual(polls.map((poll) => poll['open_connections']), [3, 2, 0]);
    for (const poll of polls) {
      assert.equal(poll['min_connections'], 0);
      assert.equal(typeof poll['elapsed_ms'], 'number');
      assert.equal(typeof poll['remaining_ms'], 'number');
    }
    assert.equal(log.events('drain_started').length, 1);
    assert.deepEqual(log.events('drain_finished').map((line) => [line['state'], line['reason']]), [['drained', 'connections-closed']]);
  });

  test('single flight: every caller, concurrent or later, gets the same outcome of one drain', async () => {
    const envoy = new FakeEnvoy([1, 0]);
    const { drain } = makeDrain(envoy);
    const [first, second] = await Promise.all([drain.start(), drain.start()]);
    assert.equal(first, second);
    assert.equal(await drain.start(), first);
    assert.deepEqual(envoy.names().filter((name) => name !== 'count'), ['fail', 'drain']);
  });

  test('waits check-delay before the first poll, then check-interval between polls', async () => {
    const { clock, envoy, drain } = makeTimedDrain([1, 1, 0], { 'check-delay': 60_000, 'check-interval': 5_000, 'drain-timeout': 290_000 });
    const started = clock.now();
    await drain.start();
    assert.deepEqual(
      envoy.calls.map((call) => [call.name, call.at - started]),
      [['fail', 0], ['drain', 0], ['count', 60_000], ['count', 65_000], ['count', 70_000]],
    );
  });

  test('initiation calls that failed are retried every check-interval; check-delay counts from the successful /healthcheck/fail', async () => {
    const { clock, envoy, drain, log } = makeTimedDrain([0], { 'check-delay': 60_000, 'check-interval': 5_000, 'drain-timeout': 290_000 });
    envoy.failAnswers = [new AdminStatusError('POST /healthcheck/fail', 500, 'busy'), new AdminTimeoutError('POST /healthcheck/fail', 'slow')];
    const started = clock.now();
    const outcome = await drain.start();
    assert.deepEqual(
      envoy.calls.map((call) => [call.name, call.at - started]),
      [['fail', 0], ['drain', 0], ['fail', 5_000], ['fail', 10_000], ['count', 60_000], ['count', 65_000], ['count', 70_000]],
      'retried at each interval; polls from check-delay after the start, but 0 connections ends the drain only check-delay after the health checks failed',
    );
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 70_000]);
    assert.deepEqual(log.events('poll').map((poll) => poll['check_delay_pending']), [true, true, undefined]);
    assert.equal(drain.snapshot().healthChecksFailedAt, new Date(started + 10_000).toISOString());
  });

  test('one refused /healthcheck/fail from an Envoy that answered before does not skip check-delay', async () => {
    const { clock, envoy, drain } = makeTimedDrain([0], { 'check-delay': 2_000, 'check-interval': 50, 'drain-timeout': 10_000 });
    envoy.failAnswers = [refused()];
    const started = clock.now();
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason], ['drained', 'connections-closed']);
    assert.equal(outcome.durationMs, 2_050, 'check-delay after the /healthcheck/fail that succeeded at 50 ms');
    assert.deepEqual(
      envoy.calls.map((call) => [call.name, call.at - started]),
      [['fail', 0], ['fail', 50], ['drain', 50], ['count', 2_000], ['count', 2_050]],
    );
  });

  test('a /healthcheck/fail that times out until late still gets the whole check-delay after it', async () => {
    const { clock, envoy, drain } = makeTimedDrain([0], { 'check-delay': 2_000, 'check-interval': 100, 'drain-timeout': 10_000 });
    envoy.failAnswers = Array.from({ length: 19 }, () => new AdminTimeoutError('POST /healthcheck/fail', 'slow'));
    const started = clock.now();
    const outcome = await drain.start();
    assert.equal(envoy.calls.find((call) => call.name === 'drain')?.at, started, 'drain_listeners is not held back by the failing step');
    assert.equal(envoy.calls.filter((call) => call.name === 'fail').at(-1)?.at, started + 1_900);
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 3_900]);
  });

  test('the deadline wins over check-delay: 0 connections before the delay is served is still timed-out', async () => {
    const { envoy, drain } = makeTimedDrain([0], { 'check-delay': 2_000, 'check-interval': 100, 'drain-timeout': 3_000 });
    envoy.failAnswers = Array.from({ length: 15 }, () => new AdminStatusError('POST /healthcheck/fail', 503, 'busy'));
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections, outcome.durationMs], ['timed-out', 'deadline', 0, 3_000]);
    assert.equal(outcome.healthChecksFailed, true);
  });

  test('a /healthcheck/fail that never succeeds: the count never ends the drain, and the outcome says why', async () => {
    const { envoy, drain } = makeTimedDrain([0], { 'check-delay': 0, 'check-interval': 100, 'drain-timeout': 1_000 });
    envoy.failAnswers = Array.from({ length: 100 }, () => new AdminStatusError('POST /healthcheck/fail', 503, 'busy'));
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.healthChecksFailed], ['timed-out', 'deadline', false]);
    assert.match(describeOutcome(outcome), /Envoy never took POST \/healthcheck\/fail/);
    assert.ok(envoy.names().filter((name) => name === 'count').length >= 9, 'still polled, for /drain and the metrics');
  });

  test('min-open-connections: done as soon as the count is at or below it', async () => {
    const envoy = new FakeEnvoy([9, 5, 2, 0]);
    const { drain } = makeDrain(envoy, { 'min-open-connections': 2 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.openConnections], ['drained', 2]);
    assert.equal(envoy.names().filter((name) => name === 'count').length, 3);
  });

  test('deadline: times out on time even while a poll hangs', async () => {
    const envoy = new FakeEnvoy([4, 'hang']);
    const { drain } = makeDrain(envoy, { 'drain-timeout': 150 });
    const started = Date.now();
    const outcome = await drain.start();
    const elapsed = Date.now() - started;
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections], ['timed-out', 'deadline', 4]);
    assert.ok(elapsed >= 145 && elapsed < 400, `ended after ${elapsed} ms`);
    assert.equal(drain.snapshot().remainingMs, 0);
  });

  test('deadline during check-delay ends the drain without a poll', async () => {
    const envoy = new FakeEnvoy([0]);
    const { drain } = makeDrain(envoy, { 'check-delay': 10_000, 'drain-timeout': 80 });
    const outcome = await drain.start();
    assert.equal(outcome.state, 'timed-out');
    assert.equal(outcome.openConnections, null);
    assert.deepEqual(envoy.names(), ['fail', 'drain']);
  });

  test('Envoy refusing connections a few checks in a row counts as drained; a success resets the count', async () => {
    const envoy = new FakeEnvoy([refused(), refused(), 5, refused(), refused(), refused()]);
    const { drain, log } = makeDrain(envoy);
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections], ['drained', 'envoy-exited', 5]);
    assert.equal(envoy.names().filter((name) => name === 'count').length, 6);
    assert.deepEqual(log.events('admin_error').map((line) => line['consecutive_refusals']), [1, 2, 1, 2]);
  });

  test('Envoy taken as exited during check-delay ends the drain; refusals are counted once per check, spaced by check-interval', async () => {
    const { clock, envoy, drain } = makeTimedDrain([refused()], { 'check-delay': 60_000, 'check-interval': 5_000, 'drain-timeout': 290_000 });
    envoy.failAnswers = [refused(), refused(), refused()];
    const started = clock.now();
    const outcome = await drain.start();
    assert.equal(outcome.reason, 'envoy-exited');
    assert.deepEqual(
      envoy.calls.map((call) => [call.name, call.at - started]),
      [['fail', 0], ['fail', 5_000], ['fail', 10_000]],
      'a refused round stops at its first call; two intervals between three refusals',
    );
  });

  test('an admin API that never answered: refusals are retried until the deadline, which names the address', async () => {
    const { clock, envoy, drain, log } = makeTimedDrain([refused()], { 'check-delay': 60_000, 'check-interval': 5_000, 'drain-timeout': 290_000 });
    envoy.hasAnswered = false;
    envoy.failAnswers = Array.from({ length: 100 }, refused);
    const started = clock.now();
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.durationMs], ['timed-out', 'admin-unreachable', 290_000]);
    assert.equal(clock.now() - started, 290_000);
    assert.ok(envoy.names().every((name) => name === 'fail'), 'never past the first step');
    assert.equal(envoy.calls.length, 290_000 / 5_000, 'retried every interval; the check delay was not skipped for refusals');
    const errors = log.lines.filter((line) => line.fields['event'] === 'admin_error');
    assert.ok(errors.length > 3 && errors.every((line) => line.fields['envoy_admin_ever_reachable'] === false));
    assert.match(errors[0]?.message ?? '', /never answered: is Envoy's admin API really at 127\.0\.0\.1:9001\? Set the pod annotation shutdown-manager\.io\/envoy-admin-port/);
    assert.match(describeOutcome(outcome), /Envoy's admin API was never reachable at 127\.0\.0\.1:9001/);
    assert.equal(drain.snapshot().envoyAdminEverReachable, false);
  });

  test('an admin API that answers late, then exits: refusals count only after its first answer', async () => {
    const { envoy, drain } = makeTimedDrain([3, refused()], { 'check-delay': 0, 'check-interval': 5_000, 'drain-timeout': 290_000 });
    envoy.hasAnswered = false;
    envoy.failAnswers = [refused(), refused(), refused(), refused()];
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections], ['drained', 'envoy-exited', 3]);
    assert.deepEqual(envoy.names(), ['fail', 'fail', 'fail', 'fail', 'fail', 'drain', 'count', 'count', 'count', 'count']);
  });

  test('timeouts, 5xx and unreadable answers are logged and retried; failed steps are retried before polls', async () => {
    const envoy = new FakeEnvoy([new AdminTimeoutError('GET /stats', 'slow'), new AdminStatusError('GET /stats', 500, 'oops'), 1, 0]);
    envoy.failAnswers = [new AdminStatusError('POST /healthcheck/fail', 503, 'busy')];
    const { drain, log } = makeDrain(envoy);
    const outcome = await drain.start();
    assert.equal(outcome.state, 'drained');
    assert.deepEqual(envoy.names(), ['fail', 'drain', 'count', 'fail', 'count', 'count', 'count']);
    assert.deepEqual(log.events('admin_error').map((line) => line['error']), ['AdminStatusError', 'AdminTimeoutError', 'AdminStatusError']);
    assert.equal(drain.snapshot().healthChecksFailed, true);
  });

  test('drain-delay: Envoy is left untouched for the delay, then check-delay and check-interval follow', async () => {
    const { clock, envoy, drain, log } = makeTimedDrain([2, 0], { 'drain-delay': 10_000, 'check-delay': 5_000, 'check-interval': 1_000, 'drain-timeout': 60_000 });
    const started = clock.now();
    const outcome = await drain.start();
    assert.deepEqual(
      envoy.calls.map((call) => [call.name, call.at - started]),
      [['fail', 10_000], ['drain', 10_000], ['count', 15_000], ['count', 16_000]],
    );
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 16_000]);
    assert.equal(log.events('drain_started')[0]?.['drain_delay_ms'], 10_000);
  });

  test('the deadline can end a drain during drain-delay: nothing was sent to Envoy', async () => {
    const { envoy, drain } = makeTimedDrain([0], { 'drain-delay': 10_000, 'drain-timeout': 5_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.healthChecksFailed], ['timed-out', 'deadline', false]);
    assert.deepEqual(envoy.calls, []);
  });

  test('polls stay check-interval apart when the count may end the drain between two of them (no extra poll)', async () => {
    // /healthcheck/fail succeeds 30 ms in: the count may end the drain from 1_030, off the poll grid.
    const { clock, envoy, drain, log } = makeTimedDrain([0], { 'check-delay': 1_000, 'check-interval': 100, 'drain-timeout': 10_000 });
    envoy.failAnswers = [new AdminTimeoutError('POST /healthcheck/fail', 'slow')];
    const started = clock.now();
    let failCalls = 0;
    const original = envoy.failHealthChecks.bind(envoy);
    envoy.failHealthChecks = async () => {
      failCalls += 1;
      if (failCalls === 2) await clock.sleep(30, new AbortController().signal);
      return original();
    };
    const outcome = await drain.start();
    const polls = envoy.calls.filter((call) => call.name === 'count').map((call) => call.at - started);
    assert.deepEqual(polls, [1_000, 1_100, 1_200], 'a poll every check-interval, none at 1_030 or 1_130');
    assert.equal(outcome.durationMs, 1_200);
    assert.deepEqual(log.events('poll').map((poll) => poll['check_delay_pending']), [true, true, undefined]);
  });

  test('a poll still waiting for Envoy at the deadline is logged and shown in /drain, not left as lastError null', async () => {
    const { envoy, drain, log } = makeTimedDrain([3, 'hang'], { 'check-interval': 100, 'drain-timeout': 1_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.openConnections], ['deadline', 3]);
    assert.match(outcome.lastError ?? '', /count open connections: no answer from Envoy's admin API before the drain deadline/);
    assert.equal(drain.snapshot().lastError, outcome.lastError);
    const warning = log.lines.find((line) => line.fields['error'] === 'DeadlineReached');
    assert.equal(warning?.level, 'warn');
    assert.ok(envoy.calls.length > 2);
  });

  test('an admin port that answers 500 to everything is reported with what it answered, not as unreachable', async () => {
    const { envoy, drain } = makeTimedDrain([new AdminStatusError('GET /stats', 500, 'oops')], { 'check-interval': 100, 'drain-timeout': 1_000 });
    envoy.hasAnswered = false;
    envoy.failAnswers = Array.from({ length: 20 }, () => new AdminStatusError('POST /healthcheck/fail', 500, 'internal error'));
    envoy.drainAnswers = Array.from({ length: 20 }, () => new AdminStatusError('POST /drain_listeners', 500, 'internal error'));
    const outcome = await drain.start();
    assert.equal(outcome.reason, 'admin-unreachable');
    const text = describeOutcome(outcome);
    assert.match(text, /answered, but never as Envoy does \(last: .*HTTP 500/);
    assert.doesNotMatch(text, /never reachable/);
  });

  test('interrupt() ends a running drain as interrupted; it does nothing before a drain', async () => {
    const envoy = new FakeEnvoy([7]);
    const { drain } = makeDrain(envoy);
    drain.interrupt();
    assert.equal(drain.current, 'idle');
    const outcome = drain.start();
    setTimeout(() => drain.interrupt(), 40);
    assert.deepEqual([(await outcome).state, (await outcome).openConnections], ['interrupted', 7]);
  });

  test('snapshot shows what a person debugging a stuck pod needs', async () => {
    const envoy = new FakeEnvoy([6, 'hang']);
    const { drain } = makeDrain(envoy, { 'drain-timeout': 5_000, 'min-open-connections': 1 });
    assert.deepEqual(
      { state: drain.snapshot().state, startedAt: drain.snapshot().startedAt, polls: drain.snapshot().polls },
      { state: 'idle', startedAt: null, polls: 0 },
    );
    const outcome = drain.start();
    const deadline = Date.now() + 2_000;
    while (drain.snapshot().polls < 1 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    const snapshot = drain.snapshot();
    assert.equal(snapshot.state, 'draining');
    assert.equal(snapshot.openConnections, 6);
    assert.deepEqual(snapshot.openConnectionsByListener, { '0.0.0.0_8080': 6 });
    assert.equal(snapshot.minOpenConnections, 1);
    assert.equal(snapshot.healthChecksFailed && snapshot.listenersDraining, true);
    assert.ok(snapshot.startedAt !== null && snapshot.deadline !== null);
    assert.equal(Date.parse(snapshot.deadline) - Date.parse(snapshot.startedAt), 5_000);
    assert.ok((snapshot.remainingMs ?? 0) > 4_000);
    drain.interrupt();
    await outcome;
  });
});
