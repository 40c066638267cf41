import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EMPTY_TALLY, type ArrivalTally } from '../../src/envoy/arrivals.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import { checkNeededStats, NEEDED_STATS } from '../../src/sidecar/needed-stats.js';

function count(changes: Partial<ConnectionCount> & { arrivals?: ArrivalTally } = {}): ConnectionCount {
  const arrivals: ArrivalTally = { ...EMPTY_TALLY, watched: ['ingress'], connections: { ingress: 3 } };
  return { total: 0, byListener: { ingress: 0 }, missingListeners: [], availableListeners: ['ingress'], adminConnectionsTotal: 10, drainable: 0, longLived: 0, arrivals, ...changes };
}

describe('checkNeededStats', () => {
  test('stats with everything the drain reads lack nothing, and say nothing', () => {
    assert.deepEqual(checkNeededStats(count()), { missing: [], detail: '' }, 'nothing missing');
  });

  test('each stat a stats_matcher trims is named, with what it costs the drain', () => {
    const trimmed = checkNeededStats(count({ availableListeners: [], adminConnectionsTotal: null, arrivals: { ...EMPTY_TALLY, watched: ['ingress'] } }));
    assert.deepEqual(trimmed.missing, [...NEEDED_STATS], 'every needed stat is missing');
    assert.match(trimmed.detail, /can only end at its deadline or when Envoy exits/, 'no listener gauge: the count is no count');
    assert.match(trimmed.detail, /only the connection the sidecar holds open/, 'no admin counter: the witness alone tells processes apart');
    assert.match(trimmed.detail, /cannot be observed/, 'no arrival counter: the quiet period holds nothing');
  });

  test('a partial trim names the listeners it blinds, not the whole rule', () => {
    const arrivals: ArrivalTally = { ...EMPTY_TALLY, watched: ['a', 'b'], connections: { a: 1 }, blindSpots: [{ listener: 'b', reason: 'arrival-counters-missing' }] };
    const check = checkNeededStats(count({ arrivals }));
    assert.deepEqual(check.missing, ['listener.<listener>.downstream_cx_total'], 'the arrival counter, for some listeners');
    assert.match(check.detail, /the quiet period holds on what is seen/, 'the rule holds where it sees');
  });
});
