/**
 * A drain's outcome as the drain reports it, for tests of what is made of one (its wording, the server's answers):
 * a drain of one listener that ended with no connection open and no load-balancer lag seen, unless `fields` say
 * otherwise.
 */
import { stateAfter, type DrainEndReason, type DrainOutcome } from '../../src/sidecar/drain-outcome.js';
import type { LoadBalancerReport } from '../../src/sidecar/load-balancer.js';

/** A load balancer watched on one listener that sent nothing after the health checks failed: no lag to report. */
export const NO_LAG: LoadBalancerReport = {
  quietPeriodMs: null,
  neededQuietMs: null,
  longestGapMs: null,
  watchedListeners: ['ingress'],
  observable: true,
  sight: 'whole',
  blindSpots: [],
  lagMs: null,
  lagAtLeastMs: null,
  lastRequestMs: null,
  lastConnectionMs: null,
  sinceHealthChecksFailed: { requests: 0, connections: 0, healthChecks: 0, polls: 0 },
  priorTraffic: null,
  sparse: false,
  quiet: false,
  newConnectionsOpen: 0,
};

export function anOutcome(fields: Partial<DrainOutcome> & { readonly reason: DrainEndReason }): DrainOutcome {
  return {
    state: stateAfter(fields.reason),
    healthChecksFailed: true,
    openConnections: 0,
    durationMs: 12_345,
    minOpenConnections: 0,
    longLivedConnections: 0,
    longLivedGraceMs: null,
    envoyAdmin: '127.0.0.1:9901',
    lastError: null,
    adminFailure: null,
    lastInvalidAnswer: null,
    missingListeners: [],
    availableListeners: ['ingress'],
    unconfirmedSteps: [],
    loadBalancer: NO_LAG,
    hotRestarts: [],
    ...fields,
  };
}
