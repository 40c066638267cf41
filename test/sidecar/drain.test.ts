/**
 * The drain state machine on virtual time (exact timings on any machine), against the scripted Envoy of
 * test/support/scripted-envoy.ts, whose admin counter marks its process as real Envoy's does. The spawned sidecar
 * against real sockets is in sidecar-process.test.ts and drain-promises.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AdminRefusedError, AdminStatusError, AdminTimeoutError } from '../../src/envoy/admin-errors.js';
import type { ArrivalTally } from '../../src/envoy/arrivals.js';
import { GAP_FACTOR, LoadBalancerWatch } from '../../src/sidecar/load-balancer.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import { Drain, type DrainOptions } from '../../src/sidecar/drain.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { describeOutcome } from '../../src/sidecar/drain-outcome.js';
import { MemoryLog } from '../support/memory-log.js';
import { ScriptedEnvoy, type Answers } from '../support/scripted-envoy.js';
import { VirtualClock } from '../support/virtual-clock.js';

const SETTINGS: DrainLoopSettings = {
  'drain-delay': 0,
  'check-delay': 0,
  'check-interval': 1_000,
  'min-open-connections': 0,
  'drain-timeout': 60_000,
  'admin-refusals': 3,
};

const refused = (): AdminRefusedError => new AdminRefusedError('GET /stats', 'connection refused');
const timedOut = (): AdminTimeoutError => new AdminTimeoutError('GET /stats', 'no complete answer within 2000 ms');
const status500 = (): AdminStatusError => new AdminStatusError('GET /stats', 500, 'upstream connect error');

function makeDrain(countAnswers: Answers['count'], settings: Partial<DrainLoopSettings> = {}, options: DrainOptions = {}, clock = new VirtualClock()) {
  const envoy = new ScriptedEnvoy({ clock, answers: { count: countAnswers } });
  const log = new MemoryLog();
  const drain = new Drain(envoy, { ...SETTINGS, ...settings }, log, clock, options);
  const startedAt = clock.now();
  /** [call, ms after the start] for every admin call. */
  const timeline = (): [string, number][] => envoy.calls.map((call) => [call.name, call.at - startedAt]);
  return { clock, envoy, log, drain, startedAt, timeline };
}

describe('Drain: the happy path', () => {
  test('reads Envoy (pinning its process), fails health checks, drains listeners, then reads every check-interval', async () => {
    const { drain, log, timeline } = makeDrain([3, 2, 0], { 'check-interval': 5_000 });
    assert.equal(drain.current, 'idle');
    const outcome = await drain.start();
    assert.deepEqual(timeline(), [['count', 0], ['fail', 0], ['drain', 0], ['count', 5_000], ['count', 10_000]]);
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections, outcome.durationMs], ['drained', 'connections-closed', 0, 10_000]);
    assert.deepEqual(log.events('poll').map((poll) => poll['open_connections']), [3, 2, 0]);
    assert.deepEqual(log.events('drain_finished').map((line) => [line['state'], line['reason']]), [['drained', 'connections-closed']]);
  });

  test('single flight: every caller, concurrent or later, gets the same outcome of one drain', async () => {
    const { drain, envoy } = makeDrain([1, 0]);
    const [first, second] = await Promise.all([drain.start(), drain.start()]);
    assert.equal(first, second);
    assert.equal(await drain.start(), first);
    assert.deepEqual(envoy.names().filter((name) => name !== 'count'), ['fail', 'drain']);
  });

  test('check-delay: reads go on meanwhile, and the drain ends on the read exactly check-delay after /healthcheck/fail', async () => {
    const { drain, timeline, log } = makeDrain([0], { 'check-delay': 12_000, 'check-interval': 5_000 });
    const outcome = await drain.start();
    assert.deepEqual(timeline(), [['count', 0], ['fail', 0], ['drain', 0], ['count', 5_000], ['count', 10_000], ['count', 12_000]]);
    assert.equal(outcome.durationMs, 12_000);
    assert.deepEqual(log.events('poll').map((poll) => poll['check_delay_pending'] ?? false), [true, true, true, false]);
  });

  test('check-delay counts from the /healthcheck/fail Envoy took, however late', async () => {
    const { drain, envoy, timeline } = makeDrain([0], { 'check-delay': 3_000 });
    envoy.answers.fail = [timedOut(), status500(), 'ok'];
    const outcome = await drain.start();
    const fails = timeline().filter(([name]) => name === 'fail');
    assert.deepEqual(fails, [['fail', 0], ['fail', 1_000], ['fail', 2_000]]);
    assert.equal(outcome.durationMs, 5_000, 'taken at 2 s, so the count may end it from 5 s');
  });

  test('min-open-connections: done as soon as the count is at or below it', async () => {
    const { drain } = makeDrain([5, 3, 2], { 'min-open-connections': 2 });
    assert.deepEqual([(await drain.start()).openConnections], [2]);
  });

  test('drain-delay: Envoy is only read during the delay, then told to drain', async () => {
    const { drain, timeline } = makeDrain([1, 1, 1, 0], { 'drain-delay': 2_500, 'check-interval': 1_000 });
    await drain.start();
    assert.deepEqual(timeline().slice(0, 6), [['count', 0], ['count', 1_000], ['count', 2_000], ['count', 2_500], ['fail', 2_500], ['drain', 2_500]]);
  });
});

describe('Drain: long-lived connections (upgraded or TCP proxy, which Envoy cannot drain) and long-lived-grace', () => {
  /** Three open connections, all long-lived: what a pod holding WebSockets or TCP-proxy connections shows. */
  const LONG_LIVED_ONLY: Partial<ConnectionCount> = { total: 3, longLived: 3 };

  test('off (the default): long-lived connections hold the drain until the deadline, which names them and the setting', async () => {
    const { drain, log } = makeDrain([LONG_LIVED_ONLY], { 'drain-timeout': 30_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.durationMs, outcome.longLivedConnections, outcome.longLivedGraceMs], ['timed-out', 'deadline', 30_000, 3, null]);
    assert.match(describeOutcome(outcome), /with 3 connections still open \(at most 0 wanted\), 3 of them long-lived \(upgraded or TCP proxy, which Envoy cannot drain\); the long-lived-grace setting lets them go sooner/);
    assert.deepEqual(log.events('drain_finished').map((line) => line['long_lived_connections']), [3]);
  });

  test('set: the drain ends on the read exactly the grace after /healthcheck/fail, reporting the long-lived ones left', async () => {
    const { drain, log, timeline } = makeDrain([LONG_LIVED_ONLY], { 'long-lived-grace': 7_500, 'check-interval': 5_000 });
    const outcome = await drain.start();
    assert.deepEqual(timeline(), [['count', 0], ['fail', 0], ['drain', 0], ['count', 5_000], ['count', 7_500]], 'a round at the end of the grace');
    assert.deepEqual(
      [outcome.state, outcome.reason, outcome.durationMs, outcome.openConnections, outcome.longLivedConnections, outcome.longLivedGraceMs],
      ['drained', 'long-lived-left', 7_500, 3, 3, 7_500],
    );
    assert.equal(
      describeOutcome(outcome),
      'drained: 0 drainable connections open (at most 0 allowed) after 7.5s; 3 long-lived connections (upgraded such as WebSocket, or TCP proxy: Envoy cannot drain them) left to be cut, the long-lived grace of 7s500ms being over',
    );
    const [finished] = log.events('drain_finished');
    assert.deepEqual([finished?.['reason'], finished?.['open_connections'], finished?.['long_lived_connections']], ['long-lived-left', 3, 3]);
    assert.deepEqual(log.events('poll').map((poll) => [poll['drainable_connections'], poll['long_lived_connections']]), [[0, 3], [0, 3], [0, 3]]);
    assert.deepEqual([drain.snapshot().drainableConnections, drain.snapshot().longLivedConnections, drain.snapshot().longLivedGraceMs], [0, 3, 7_500]);
  });

  test('never before the grace, counted from the /healthcheck/fail Envoy took, however late', async () => {
    const { drain, envoy, timeline } = makeDrain([LONG_LIVED_ONLY], { 'long-lived-grace': 3_000 });
    envoy.answers.fail = [status500(), status500(), 'ok'];
    const outcome = await drain.start();
    assert.deepEqual(timeline().filter(([name]) => name === 'fail'), [['fail', 0], ['fail', 1_000], ['fail', 2_000]]);
    assert.deepEqual([outcome.reason, outcome.durationMs], ['long-lived-left', 5_000], 'taken at 2 s: not before 5 s');
  });

  test('never before check-delay either: a grace shorter than it waits for it', async () => {
    const { drain } = makeDrain([LONG_LIVED_ONLY], { 'long-lived-grace': 2_000, 'check-delay': 6_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['long-lived-left', 6_000]);
  });

  test('never while drainable connections are above the minimum: the grace over, it waits for them', async () => {
    const busy: Partial<ConnectionCount> = { total: 5, longLived: 3 };
    const { drain, log } = makeDrain([busy, busy, busy, busy, busy, { total: 4, longLived: 3 }, LONG_LIVED_ONLY], { 'long-lived-grace': 2_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.longLivedConnections], ['long-lived-left', 6_000, 3]);
    assert.deepEqual(log.events('poll').map((poll) => poll['drainable_connections']), [2, 2, 2, 2, 2, 1, 0]);
  });

  test('min-open-connections applies to the drainable ones: at or below it with the grace over, the drain ends', async () => {
    const { drain } = makeDrain([{ total: 5, longLived: 3 }], { 'long-lived-grace': 2_000, 'min-open-connections': 2 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['long-lived-left', 2_000]);
    assert.match(describeOutcome(outcome), /^drained: 2 drainable connections open \(at most 2 allowed\) after 2\.0s; 3 long-lived connections/);
  });

  test('all connections gone before the grace: connections-closed, as without the setting', async () => {
    const { drain } = makeDrain([LONG_LIVED_ONLY, LONG_LIVED_ONLY, 0], { 'long-lived-grace': 10_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.longLivedConnections], ['connections-closed', 2_000, 0]);
  });

  test('a grace beyond the deadline: the deadline ends it, as when off', async () => {
    const { drain } = makeDrain([LONG_LIVED_ONLY], { 'long-lived-grace': 120_000, 'drain-timeout': 30_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.durationMs, outcome.longLivedConnections], ['timed-out', 'deadline', 30_000, 3]);
    assert.doesNotMatch(describeOutcome(outcome), /lets them go sooner/, 'the setting is on: no advice to set it');
  });

  test('listeners named but missing: the count is not whole, and the grace does not end the drain', async () => {
    const { drain } = makeDrain([{ ...LONG_LIVED_ONLY, missingListeners: ['0.0.0.0_9999'] }], { 'long-lived-grace': 1_000, 'drain-timeout': 10_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['deadline', 10_000]);
  });
});

describe('Drain: it ends by its deadline, whatever Envoy does', () => {
  test('a read that never settles, even when aborted, cannot hold the outcome past the deadline', async () => {
    const { drain, envoy, log } = makeDrain([0, 'stuck'], { 'check-delay': 5_000, 'drain-timeout': 20_000 });
    envoy.answers.fail = ['ok'];
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.durationMs], ['timed-out', 'deadline', 20_000]);
    assert.match(String(drain.snapshot().lastError), /count open connections: no answer from Envoy's admin API before the drain ended/);
    assert.equal(log.events('admin_error').filter((line) => line['kind'] === 'cut').length, 1);
  });

  test('a /healthcheck/fail that never settles: the deadline still answers, saying Envoy never took it', async () => {
    const { drain, envoy } = makeDrain([0], { 'drain-timeout': 7_000 });
    envoy.answers.fail = ['stuck'];
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.healthChecksFailed], ['deadline', 7_000, false]);
    assert.match(describeOutcome(outcome), /Envoy never took POST \/healthcheck\/fail/);
  });

  test('the deadline counts from when the drain was asked for, not from when it started', async () => {
    const { drain, clock } = makeDrain(['hang'], { 'drain-timeout': 10_000 });
    const askedAt = clock.now() - 4_000;
    const outcome = await drain.start(askedAt);
    assert.equal(outcome.durationMs, 10_000);
    assert.equal(clock.now() - askedAt, 10_000);
  });

  test('the deadline wins over check-delay: 0 connections before the delay is served is still timed-out', async () => {
    const { drain } = makeDrain([0], { 'check-delay': 50_000, 'drain-timeout': 30_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.openConnections], ['timed-out', 'deadline', 0]);
  });

  test('a step of the wall clock moves neither the deadline nor the durations; shown times follow the wall clock', async () => {
    const { drain, clock } = makeDrain([4], { 'drain-timeout': 10_000 });
    const outcome = drain.start();
    await clock.sleep(3_000, new AbortController().signal);
    clock.stepWall(-3_600_000);
    const during = drain.snapshot();
    assert.equal(during.elapsedMs, 3_000);
    assert.equal(during.remainingMs, 7_000);
    const result = await outcome;
    assert.deepEqual([result.reason, result.durationMs], ['deadline', 10_000]);
    const after = drain.snapshot();
    assert.equal(Date.parse(String(after.finishedAt)) - Date.parse(String(after.startedAt)), 10_000);
  });
});

describe('Drain: it drains the process it started on', () => {
  test('another process answering mid-drain ends the drain at once as envoy-replaced (drained): its count is not used', async () => {
    const { drain, envoy, clock, log } = makeDrain([7], { 'check-delay': 10_000, 'drain-timeout': 60_000 });
    const outcome = drain.start();
    await clock.sleep(3_500, new AbortController().signal);
    envoy.replace();
    const result = await outcome;
    assert.deepEqual([result.state, result.reason, result.durationMs], ['drained', 'envoy-replaced', 4_000]);
    assert.equal(result.openConnections, 7, "the last count is the drained process's, not the new one's");
    assert.equal(log.events('envoy_replaced').length, 1);
    assert.match(describeOutcome(result), /another Envoy process answers on the admin port/);
  });

  test('a process replaced before its count is low never ends the drain by the new one having 0 connections', async () => {
    const { drain, envoy, clock } = makeDrain([9, 9, 0], { 'check-delay': 0 });
    const outcome = drain.start();
    await clock.sleep(1_500, new AbortController().signal);
    envoy.replace();
    const result = await outcome;
    assert.equal(result.reason, 'envoy-replaced');
    assert.equal(result.openConnections, 9);
  });

  test('a drain that finds the process of the previous drain inherits its failed health checks: a repeated /shutdown ends quickly', async () => {
    const first = makeDrain([0], { 'check-delay': 30_000 });
    await first.drain.start();
    const failedAt = first.drain.healthChecksFailedAt;
    assert.notEqual(failedAt, undefined);
    const previous = { read: { mark: 50, marker: 0 }, healthChecksFailedAtMs: failedAt };
    const { drain } = makeDrain([0], { 'check-delay': 30_000 }, { previous }, first.clock);
    const outcome = await drain.start();
    assert.equal(outcome.durationMs, 0, 'same process (mark above the previous one), health checks failing long enough');
    const other = makeDrain([0], { 'check-delay': 30_000 }, { previous: { ...previous, read: { mark: 10_000, marker: 0 } } }, first.clock);
    assert.equal((await other.drain.start()).durationMs, 30_000, 'a mark below the previous one is another process: the whole check-delay');
  });
});

describe('Drain: it never says drained with connections it could not count', () => {
  test('a listener named in --listeners that Envoy does not have: never counted as 0, logged once with the names Envoy has', async () => {
    const { drain, log } = makeDrain([{ missingListeners: ['ingres'] }], { 'drain-timeout': 8_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.missingListeners], ['timed-out', 'deadline', ['ingres']]);
    assert.match(describeOutcome(outcome), /the listeners ingres named by --listeners do not exist \(Envoy has: ingress\)/);
    const lines = log.events('listeners_missing');
    assert.equal(lines.length, 1);
    assert.deepEqual(lines[0]?.['available_listeners'], ['ingress']);
    assert.deepEqual(drain.snapshot().missingListeners, ['ingres']);
  });

  test('refusals a few rounds in a row, after Envoy answered, are Envoy exited (drained); a success resets the count', async () => {
    const { drain, timeline } = makeDrain([2, refused(), refused(), 2, refused(), refused(), refused()], { 'check-delay': 60_000 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason], ['drained', 'envoy-exited']);
    assert.equal(timeline().filter(([name]) => name === 'count').length, 7, 'one refusal counted per round');
  });
});

describe('Drain: it reports what happened', () => {
  test('nothing listening on the admin port: ends after drain-delay + check-delay, not at the deadline, with one warning', async () => {
    const { drain, envoy, log } = makeDrain([refused()], { 'drain-delay': 1_000, 'check-delay': 4_000, 'drain-timeout': 290_000 });
    envoy.hasAnswered = false;
    envoy.answers.fail = envoy.answers.drain = [refused()];
    const outcome = await drain.start();
    assert.deepEqual([outcome.state, outcome.reason, outcome.durationMs, outcome.healthChecksFailed], ['timed-out', 'admin-unreachable', 5_000, false]);
    assert.equal(outcome.adminFailure?.kind, 'refused');
    assert.match(describeOutcome(outcome), /Envoy's admin API was never reachable at 127\.0\.0\.1:9001: nothing listens there/);
    assert.match(describeOutcome(outcome), /envoy-admin-port/);
    assert.equal(log.events('admin_error').length, 1, 'one warning per drain, not one per interval');
  });

  test('an admin port that answers 500 to everything: reported with what it answered, ended at the same cutoff', async () => {
    const { drain, envoy } = makeDrain([status500()], { 'check-delay': 3_000 });
    envoy.hasAnswered = false;
    envoy.answers.fail = envoy.answers.drain = [status500()];
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.adminFailure?.kind], ['admin-unreachable', 3_000, 'invalid-answer']);
    assert.match(describeOutcome(outcome), /answered, but never as Envoy does \(last: .*HTTP 500/);
  });

  test('an admin that only times out may have taken the calls: held to the deadline, and said to be slow, not absent', async () => {
    const { drain, envoy } = makeDrain([timedOut()], { 'check-delay': 3_000, 'drain-timeout': 20_000 });
    envoy.hasAnswered = false;
    envoy.answers.fail = envoy.answers.drain = [timedOut()];
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.adminFailure?.kind], ['admin-unreachable', 20_000, 'timeout']);
    assert.match(describeOutcome(outcome), /took connections but never answered in time/);
    assert.doesNotMatch(describeOutcome(outcome), /never reachable/);
  });

  test('admin failures are logged at most once per kind every 30 s, with the counts by kind', async () => {
    const { drain, envoy, log } = makeDrain([timedOut()], { 'check-interval': 100, 'drain-timeout': 10_000 });
    envoy.answers.fail = ['ok'];
    const outcome = await drain.start();
    assert.equal(outcome.adminFailure?.counts.timeout, 100);
    assert.equal(log.events('admin_error').filter((line) => line['kind'] === 'timeout').length, 1);
  });

  test('interrupt() ends a running drain as interrupted; it does nothing before a drain', async () => {
    const idle = makeDrain([0]);
    idle.drain.interrupt();
    assert.equal(idle.drain.current, 'idle');
    const { drain, clock } = makeDrain([3], { 'drain-timeout': 60_000 });
    const outcome = drain.start();
    await clock.sleep(2_000, new AbortController().signal);
    drain.interrupt();
    assert.deepEqual([(await outcome).state, (await outcome).durationMs], ['interrupted', 2_000]);
  });

  test('snapshot shows what a person debugging a stuck pod needs', async () => {
    const { drain, clock } = makeDrain([4], { 'check-delay': 10_000, 'drain-timeout': 60_000 });
    void drain.start();
    await clock.sleep(2_500, new AbortController().signal);
    const snapshot = drain.snapshot();
    assert.equal(snapshot.state, 'draining');
    assert.equal(snapshot.openConnections, 4);
    assert.deepEqual(snapshot.openConnectionsByListener, { ingress: 4 });
    assert.equal(snapshot.healthChecksFailed, true);
    assert.equal(snapshot.listenersDraining, true);
    assert.equal(snapshot.elapsedMs, 2_500);
    assert.equal(snapshot.remainingMs, 57_500);
    assert.equal(snapshot.polls, 3, 'reads at 0, 1 and 2 s');
    assert.equal(typeof snapshot.pinnedProcess, 'number');
    assert.equal(Date.parse(String(snapshot.deadline)) - Date.parse(String(snapshot.startedAt)), 60_000);
    drain.interrupt();
  });
});

/** Arrival counters as Envoy reports them on one HTTP listener `ingress` (prefix ingress_http) and one TCP proxy `tcp`. */
function tally(counts: { responses?: number; healthChecks?: number; connections?: number; proxied?: number }): ArrivalTally {
  return {
    connections: { ingress: counts.connections ?? 0, tcp: counts.proxied ?? 0 },
    responses: { 'ingress ingress_http': counts.responses ?? 0 },
    healthChecks: counts.healthChecks === undefined ? {} : { ingress_http: counts.healthChecks },
    connectionListeners: ['tcp'],
    watched: ['ingress', 'tcp'],
    probeRates: {},
    blindSpots: [],
  };
}

/** A load balancer that sends `perSecond` of something until `untilMs` after the drain started, then nothing. */
function sendsUntil(startedAt: number, untilMs: number, make: (sent: number) => ArrivalTally): (nowMs: number) => ArrivalTally {
  return (nowMs) => make(Math.floor(Math.min(nowMs - startedAt, untilMs) / 100));
}

describe('Drain: the observed rule (quiet-period) lets go only once the load balancer has', () => {
  const LB = { 'check-delay': 5_000, 'quiet-period': 10_000, 'check-interval': 1_000, 'drain-timeout': 120_000 };
  /** A new client a second in the ten minutes before: "none came after the failure" is then a lag of 0 (a silence of 4.6 s, under the quiet period). */
  const BUSY_BEFORE = { newClients: 600, spanMs: 600_000 };

  test('a load balancer that sends for 30 s after the health checks failed holds the drain until 10 s of quiet after it; the lag is reported', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    envoy.tallyAt = sendsUntil(startedAt, 30_000, (sent) => tally({ responses: sent, connections: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 40_000], 'last arrival seen by the read at 30 s, quiet from then');
    assert.deepEqual(
      [outcome.loadBalancer.lagAtLeastMs, outcome.loadBalancer.lagMs, outcome.loadBalancer.lastRequestMs, outcome.loadBalancer.quiet],
      [29_000, 30_000, 30_000, true],
    );
    assert.match(describeOutcome(outcome), /last new client traffic reached Envoy 29\.0-30\.0s after its health checks failed \(then quiet for 10s\)/);
  });

  test('negative control: with the fixed rule alone (quiet-period 0s) the same drain ends at check-delay, while the load balancer still sends', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], { ...LB, 'quiet-period': 0 });
    envoy.tallyAt = sendsUntil(startedAt, 30_000, (sent) => tally({ responses: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 5_000]);
    assert.deepEqual([outcome.loadBalancer.lagMs, outcome.loadBalancer.quietPeriodMs, outcome.loadBalancer.quiet], [5_000, null, false], 'arrivals were still coming when it ended');
  });

  test("a load balancer's HTTP health checks (answered by Envoy's health-check filter) do not hold the drain", async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB, { priorTraffic: () => BUSY_BEFORE });
    // As Envoy counts them: in the filter's request_total and the connections, never in downstream_rq_completed.
    envoy.tallyAt = sendsUntil(startedAt, 120_000, (sent) => tally({ healthChecks: sent, connections: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 10_000], 'quiet from the first read at 0 s');
    assert.equal(outcome.loadBalancer.lagMs, 0);
    assert.ok(outcome.loadBalancer.sinceHealthChecksFailed.healthChecks > 0, 'the health checks were seen');
  });

  test("a load balancer's TCP health checks (connections with no request) on an HTTP listener do not hold the drain", async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB, { priorTraffic: () => BUSY_BEFORE });
    envoy.tallyAt = sendsUntil(startedAt, 120_000, (sent) => tally({ connections: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs], ['connections-closed', 10_000]);
    assert.deepEqual([outcome.loadBalancer.lagMs, outcome.loadBalancer.lastConnectionMs], [0, 10_000], 'the connections are reported, not waited for');
  });

  test('new connections on a listener without an HTTP connection manager (TCP proxy) are clients: they hold the drain', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    envoy.tallyAt = sendsUntil(startedAt, 20_000, (sent) => tally({ proxied: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.loadBalancer.lagMs], ['connections-closed', 30_000, 20_000]);
  });

  test('a load balancer that never stops holds the drain to its deadline, which still ends it', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], { ...LB, 'drain-timeout': 60_000 });
    envoy.tallyAt = sendsUntil(startedAt, Infinity, (sent) => tally({ responses: sent }));
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.loadBalancer.quiet], ['deadline', 60_000, false]);
  });

  // Issue 33, item 3: sparse clients, one a minute before the drain; the balancer sends one more 50 s after the
  // failure. The gaps after the failure say nothing before that client comes; the rate before it does.
  test('the rate of new clients before the drain sizes the silence (1 % risk): a sparse pod is held through its gap; controls: without that history it is let go, and with too little it says so and reports no lag', async () => {
    const oneAt50s = (startedAt: number) => (nowMs: number) => tally({ responses: nowMs - startedAt >= 50_000 ? 1 : 0, connections: nowMs - startedAt >= 50_000 ? 1 : 0 });
    const sized = makeDrain([0], { ...LB, 'drain-timeout': 600_000 }, { priorTraffic: () => ({ newClients: 10, spanMs: 600_000 }) });
    sized.envoy.tallyAt = oneAt50s(sized.startedAt);
    const held = await sized.drain.start();
    assert.equal(held.loadBalancer.neededQuietMs, Math.round(Math.log(100) * 60_000), 'ln(100) times the mean gap before: 276 s');
    assert.deepEqual([held.reason, held.loadBalancer.lagMs !== null && held.loadBalancer.lagMs >= 50_000], ['connections-closed', true], 'held past the client at 50 s');
    assert.match(describeOutcome(held), /at the rate of new clients before the drain \(10 in 10m\), a silence that long while the balancer still sends has at most a 1 % chance/);
    const blind = makeDrain([0], { ...LB, 'drain-timeout': 600_000 });
    blind.envoy.tallyAt = oneAt50s(blind.startedAt);
    const letGo = await blind.drain.start();
    assert.deepEqual([letGo.durationMs, letGo.loadBalancer.sparse, letGo.loadBalancer.lagMs], [10_000, true, null], 'let go at 10 s, before the client at 50 s; no lag of 0');
    const few = makeDrain([0], { ...LB, 'drain-timeout': 600_000 }, { priorTraffic: () => ({ newClients: 2, spanMs: 600_000 }) });
    few.envoy.tallyAt = oneAt50s(few.startedAt);
    const told = await few.drain.start();
    assert.match(describeOutcome(told), /too few to tell a load balancer that let go from a gap \(2 in the last 10m, fewer than 5\)/);
  });

  test('counters that went down (POST /reset_counters) count as an arrival: one more quiet period, never an early end', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    envoy.tallyAt = (nowMs) => tally({ responses: nowMs - startedAt < 8_000 ? 500 : 0 });
    const outcome = await drain.start();
    assert.deepEqual([outcome.reason, outcome.durationMs, outcome.loadBalancer.lagMs], ['connections-closed', 18_000, 8_000]);
  });

  test('the observed rule only ever extends the fixed one: over random arrival timelines, never an earlier end', async () => {
    let seed = 7;
    const random = (): number => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    for (let run = 0; run < 40; run += 1) {
      const arrivalsAt = Array.from({ length: Math.floor(random() * 8) }, () => Math.floor(random() * 50_000)).sort((a, b) => a - b);
      const settings = { 'check-delay': Math.floor(random() * 20) * 1_000, 'quiet-period': Math.floor(random() * 15) * 1_000, 'check-interval': 1_000, 'drain-timeout': 90_000 };
      const ends: number[] = [];
      for (const quiet of [0, settings['quiet-period']]) {
        const { drain, envoy, startedAt } = makeDrain([0], { ...settings, 'quiet-period': quiet });
        envoy.tallyAt = (nowMs) => tally({ responses: arrivalsAt.filter((at) => at <= nowMs - startedAt).length });
        ends.push((await drain.start()).durationMs);
      }
      const [fixed = 0, observed = 0] = ends;
      assert.ok(observed >= fixed, `run ${run}: observed ${observed} < fixed ${fixed} (${JSON.stringify({ settings, arrivalsAt })})`);
      // Every arrival before the end was followed by a whole quiet period (an arrival after it is the rule's limit).
      const lastBefore = arrivalsAt.filter((at) => at <= observed).at(-1);
      if (settings['quiet-period'] > 0 && lastBefore !== undefined && observed < 90_000) {
        assert.ok(observed >= lastBefore + settings['quiet-period'], `run ${run}: ended ${observed}, within the quiet period after an arrival at ${lastBefore}`);
      }
    }
  });
});

describe('Drain: the silence waited for scales with the gaps between new clients after the failure', () => {
  const LB = { 'check-delay': 5_000, 'quiet-period': 10_000, 'check-interval': 1_000, 'drain-timeout': 300_000 };

  /** New clients (new connections carrying a request) at these seconds after the start. */
  const clientsAt = (seconds: readonly number[]) => (ms: number): ArrivalTally => {
    const clients = seconds.filter((at) => at * 1_000 <= ms).length;
    return tally({ responses: clients, connections: clients });
  };

  test('new clients ever sparser (gaps of 2 s growing to 8 s, as a rollout takes the pod\'s share): the drain waits 3 x 8 s after the last', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    const at = clientsAt([2, 4, 6, 9, 13, 18, 24, 31, 39]);
    envoy.tallyAt = (nowMs) => at(nowMs - startedAt);
    const outcome = await drain.start();
    const { neededQuietMs, longestGapMs, lagMs } = outcome.loadBalancer;
    assert.deepEqual([lagMs, longestGapMs, neededQuietMs, outcome.durationMs], [39_000, 8_000, 24_000, 63_000]);
    assert.match(describeOutcome(outcome), /then quiet for 24s: 3 times the longest gap between new clients after the failure, 8\.0s/);
  });

  test('negative control: a silence fixed at the quiet period ends the drain in an 11 s gap a balancer still sending leaves by chance; the scaled one does not', async () => {
    // Every 4 s, then one 11 s gap (20 -> 31 s), as behind an NLB-like balancer in docs/proof.md.
    const at = clientsAt([4, 8, 12, 16, 20, 31, 35, 39]);
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    envoy.tallyAt = (nowMs) => at(nowMs - startedAt);
    const outcome = await drain.start();
    assert.ok(outcome.durationMs > 39_000, `ended at ${outcome.durationMs} ms, in the gap, before the clients at 31-39 s`);
    // The control, on the watch itself: the same reads, a second apart, with the silence fixed (no gap factor).
    for (const [factor, endsInGap] of [[null, true], [GAP_FACTOR, false]] as const) {
      const watch = new LoadBalancerWatch(10_000, factor);
      let ended: number | undefined;
      for (let nowMs = 0; nowMs <= 40_000 && ended === undefined; nowMs += 1_000) {
        watch.observe(at(nowMs), nowMs, nowMs, 0);
        if (nowMs >= (watch.quietFromMs() ?? 0)) ended = nowMs;
      }
      assert.equal(ended !== undefined && ended < 31_000, endsInGap, `gap factor ${factor}: ended at ${ended}`);
    }
  });

  test("idle keep-alive clients' next requests on their old connections restart the silence but do not lengthen it: they were routed before the failure", async () => {
    // Two idle keep-alive connections hold the drain (reads a second apart) until their next requests at 30 and 45 s.
    const open = [...Array<number>(31).fill(2), ...Array<number>(15).fill(1), 0];
    const { drain, envoy, startedAt } = makeDrain(open, LB);
    envoy.tallyAt = (nowMs) => tally({ responses: [30_000, 45_000].filter((t) => t <= nowMs - startedAt).length });
    const outcome = await drain.start();
    assert.deepEqual([outcome.loadBalancer.lagMs, outcome.loadBalancer.neededQuietMs, outcome.durationMs], [45_000, 10_000, 55_000]);
  });

  test('a busy pod behind a fast balancer (hundreds of requests in the first seconds) is left at the quiet period', async () => {
    const { drain, envoy, startedAt } = makeDrain([0], LB);
    envoy.tallyAt = sendsUntil(startedAt, 2_000, (sent) => tally({ responses: sent * 10, connections: sent }));
    const outcome = await drain.start();
    assert.equal(outcome.loadBalancer.neededQuietMs, 10_000);
    assert.equal(outcome.durationMs, 12_000);
  });
});
