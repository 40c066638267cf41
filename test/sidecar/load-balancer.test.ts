import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EMPTY_TALLY, type ArrivalTally } from '../../src/envoy/arrivals.js';
import { LoadBalancerWatch } from '../../src/sidecar/load-balancer.js';

const HTTP: ArrivalTally = { ...EMPTY_TALLY, watched: ['ingress', 'tcp'], connectionListeners: ['tcp'] };
const FAILED_AT_MS = 1_000;

/** Reads 100 ms apart with these open connections per listener; the watch after them. */
function watchThrough(reads: readonly { readonly atMs: number; readonly open: Record<string, number> }[]): LoadBalancerWatch {
  const watch = new LoadBalancerWatch(null);
  for (const { atMs, open } of reads) watch.observe(HTTP, atMs - 10, atMs, FAILED_AT_MS, open);
  return watch;
}

describe('LoadBalancerWatch.newConnectionsOpen: connections accepted after the failure, still open (issue 33, case 3)', () => {
  test('an HTTP listener open beyond the fewest since the last read before the failure holds them', () => {
    const watch = watchThrough([
      { atMs: 900, open: { ingress: 2, tcp: 0 } },
      { atMs: 1_100, open: { ingress: 1, tcp: 0 } }, // a straggler closed
      { atMs: 1_200, open: { ingress: 2, tcp: 0 } }, // a new client
    ]);
    assert.equal(watch.newConnectionsOpen, 1);
    assert.equal(watch.report(FAILED_AT_MS, ['ingress']).newConnectionsOpen, 1);
  });

  test('before the failure nothing is new; stragglers that stay open are no new connection', () => {
    assert.equal(watchThrough([{ atMs: 900, open: { ingress: 3, tcp: 0 } }]).newConnectionsOpen, 0);
    assert.equal(watchThrough([{ atMs: 900, open: { ingress: 3, tcp: 0 } }, { atMs: 1_100, open: { ingress: 3, tcp: 0 } }]).newConnectionsOpen, 0);
  });

  test('TCP-proxy sessions are left to the silence and long-lived-grace', () => {
    assert.equal(watchThrough([{ atMs: 900, open: { ingress: 0, tcp: 0 } }, { atMs: 1_100, open: { ingress: 0, tcp: 4 } }]).newConnectionsOpen, 0);
  });

  test('the stated limit: a straggler that closes while a new client opens hides it (a lower bound)', () => {
    const watch = watchThrough([{ atMs: 900, open: { ingress: 1, tcp: 0 } }, { atMs: 1_100, open: { ingress: 1, tcp: 0 } }]);
    assert.equal(watch.newConnectionsOpen, 0);
  });
});
