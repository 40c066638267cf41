import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EMPTY_TALLY, type ArrivalTally } from '../../src/envoy/arrivals.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import { DrainLog } from '../../src/sidecar/drain-log.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { MemoryLog } from '../support/memory-log.js';

const SETTINGS: DrainLoopSettings = { 'drain-delay': 2_000, 'check-delay': 5_000, 'check-interval': 1_000, 'min-open-connections': 1, 'drain-timeout': 60_000, 'admin-refusals': 3, 'quiet-period': 3_000 };

function count(changes: Partial<ConnectionCount> = {}): ConnectionCount {
  const arrivals: ArrivalTally = { ...EMPTY_TALLY, watched: ['ingress'], connections: { ingress: 1 } };
  return { total: 4, byListener: { ingress: 4 }, missingListeners: [], availableListeners: ['ingress'], adminConnectionsTotal: 17, drainable: 3, longLived: 1, arrivals, ...changes };
}

describe('DrainLog', () => {
  test('the start names every parameter, and says Envoy serves through a drain delay', () => {
    const log = new MemoryLog();
    new DrainLog(log, SETTINGS).started('2026-12-06T15:00:00.000Z');
    const [line] = log.lines;
    assert.equal(line?.fields['event'], 'drain_started', 'the event');
    assert.equal(line?.fields['quiet_period_ms'], 3_000, 'the quiet period');
    assert.equal(line?.fields['long_lived_grace_ms'], null, 'a grace that is off is null');
    assert.match(line?.message ?? '', /keeps serving for the drain delay of 2000 ms/, 'the drain delay is said');
  });

  test('a poll line carries the count, the process it came from and whether check-delay is pending', () => {
    const log = new MemoryLog();
    new DrainLog(log, SETTINGS).poll(count(), { elapsedMs: 1_500, remainingMs: 58_500, process: 'same', checkDelayPending: true });
    assert.deepEqual(
      log.events('poll')[0],
      { event: 'poll', open_connections: 4, drainable_connections: 3, long_lived_connections: 1, min_connections: 1, elapsed_ms: 1_500, remaining_ms: 58_500, by_listener: { ingress: 4 }, admin_connections: 17, process: 'same', check_delay_pending: true },
      'the poll line',
    );
  });

  test('missing listeners are an error once per set of names, with the fix', () => {
    const log = new MemoryLog();
    const drainLog = new DrainLog(log, SETTINGS);
    const missing = count({ missingListeners: ['egress'] });
    for (let poll = 0; poll < 3; poll += 1) drainLog.poll(missing, { elapsedMs: 0, remainingMs: 0, process: 'same', checkDelayPending: false });
    drainLog.poll(count({ missingListeners: ['egress', 'admin2'] }), { elapsedMs: 0, remainingMs: 0, process: 'same', checkDelayPending: false });
    const errors = log.events('listeners_missing');
    assert.equal(errors.length, 2, 'once for egress, once more when the set changed');
    assert.match(log.lines.find((line) => line.fields['event'] === 'listeners_missing')?.message ?? '', /fix the shutdown-manager\.io\/listeners annotation/, 'the fix is named');
  });

  test('what of the load balancer cannot be seen is warned once per sight, and nothing when the sight is whole', () => {
    const log = new MemoryLog();
    const drainLog = new DrainLog(log, SETTINGS);
    drainLog.blindness(count(), 'whole');
    assert.equal(log.lines.length, 0, 'a whole sight says nothing');
    drainLog.blindness(count(), 'none');
    drainLog.blindness(count(), 'none');
    assert.equal(log.events('load_balancer_unobservable').length, 1, 'an unobservable balancer is said once');
    const partly = count({ arrivals: { ...EMPTY_TALLY, watched: ['a', 'b'], connections: { a: 1 }, blindSpots: [{ listener: 'b', reason: 'arrival-counters-missing' }] } });
    drainLog.blindness(partly, 'partial');
    assert.equal(log.events('load_balancer_partly_blind').length, 1, 'a partial sight is said when it appears');
  });

  test('without a quiet period there is no rule to be blind: nothing is said', () => {
    const log = new MemoryLog();
    new DrainLog(log, { ...SETTINGS, 'quiet-period': 0 }).blindness(count(), 'none');
    assert.equal(log.lines.length, 0, 'no line');
  });
});
