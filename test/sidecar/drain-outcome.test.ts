/**
 * The drain's outcome wording (src/sidecar/drain-outcome.ts), as pure functions of an outcome: the sentence of each
 * end reason, byte for byte (operators and the e2e tests match them), and the states the reasons end in.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { describeOutcome, heldByTraffic, loadBalancerClause, stateAfter, type DrainOutcome } from '../../src/sidecar/drain-outcome.js';
import type { LoadBalancerReport } from '../../src/sidecar/load-balancer.js';
import { anOutcome, NO_LAG } from '../support/drain-outcomes.js';

const outcome = anOutcome;

describe('drain outcome: one sentence per end', () => {
  test('each reason, word for word', () => {
    const cases: [DrainOutcome, string][] = [
      [outcome({ reason: 'connections-closed' }), 'drained: 0 open connections (at most 0 allowed) after 12.3s'],
      [
        outcome({ reason: 'long-lived-left', openConnections: 5, longLivedConnections: 3, longLivedGraceMs: 60_000 }),
        'drained: 2 drainable connections open (at most 0 allowed) after 12.3s; 3 long-lived connections (upgraded such as WebSocket, or TCP proxy: Envoy cannot drain them) left to be cut, the long-lived grace of 1m being over',
      ],
      [outcome({ reason: 'envoy-exited' }), "drained: Envoy's admin API refuses connections, Envoy has exited (after 12.3s)"],
      [
        outcome({ reason: 'envoy-replaced' }),
        'drained: another Envoy process answers on the admin port, so the one being drained has exited with its connections (after 12.3s); the next /shutdown drains the new one',
      ],
      [outcome({ reason: 'deadline', openConnections: 4 }), 'drain deadline reached after 12.3s with 4 connections still open (at most 0 wanted); letting the pod terminate'],
      [outcome({ reason: 'interrupted', openConnections: null }), 'drain interrupted after 12.3s: the shutdown manager is stopping, an unknown number of connections were open'],
      [
        outcome({ reason: 'admin-unreachable', healthChecksFailed: false, openConnections: null }),
        "drain ended after 12.3s: Envoy's admin API never answered at 127.0.0.1:9901, so Envoy was not drained and its connections were not counted; letting the pod terminate",
      ],
      [
        outcome({ reason: 'admin-unreachable', healthChecksFailed: false, openConnections: null, unconfirmedSteps: ['fail health checks'] }),
        "drain ended after 12.3s: Envoy's admin API never answered at 127.0.0.1:9901; it may have been told to drain (fail health checks: no answer came), and its connections were not counted; letting the pod terminate",
      ],
    ];
    for (const [ended, sentence] of cases) assert.equal(describeOutcome(ended), sentence, ended.reason);
  });

  test('a deadline tells why: an unconfirmed /healthcheck/fail is named by its step label', () => {
    const unconfirmed = outcome({ reason: 'deadline', healthChecksFailed: false, openConnections: 2, unconfirmedSteps: ['fail health checks'] });
    assert.equal(
      describeOutcome(unconfirmed),
      'drain deadline reached after 12.3s: Envoy never confirmed POST /healthcheck/fail (the call timed out: it may have taken it, with no answer); 2 connections open; letting the pod terminate',
    );
    const refused = outcome({ reason: 'deadline', healthChecksFailed: false, openConnections: 2 });
    assert.equal(
      describeOutcome(refused),
      'drain deadline reached after 12.3s: Envoy never took POST /healthcheck/fail, so load balancers were not told to stop sending (2 connections open); letting the pod terminate',
    );
  });

  test('the load balancer and hot restarts are clauses of their own', () => {
    const lag: LoadBalancerReport = { ...NO_LAG, lagMs: 3_000, lagAtLeastMs: 2_000 };
    assert.equal(loadBalancerClause(lag), "the load balancer's last new client traffic reached Envoy 2.0-3.0s after its health checks failed");
    assert.equal(loadBalancerClause(NO_LAG), '', 'no lag seen: no clause');
    assert.equal(
      describeOutcome(outcome({ reason: 'connections-closed', loadBalancer: lag, hotRestarts: [{ fromEpoch: 0, toEpoch: 1 }] })),
      'drained: 0 open connections (at most 0 allowed) after 12.3s; ' +
        "Envoy hot-restarted during the drain (restart epoch 0 to 1): the drain followed the new epoch, and its count included the parent's connections; " +
        "the load balancer's last new client traffic reached Envoy 2.0-3.0s after its health checks failed",
    );
  });
});

describe('drain outcome: states and traffic', () => {
  test('each reason ends in its state', () => {
    const states = Object.fromEntries(
      (['connections-closed', 'long-lived-left', 'envoy-exited', 'envoy-replaced', 'deadline', 'admin-unreachable', 'interrupted'] as const).map((reason) => [reason, stateAfter(reason)]),
    );
    assert.deepEqual(states, {
      'connections-closed': 'drained',
      'long-lived-left': 'drained',
      'envoy-exited': 'drained',
      'envoy-replaced': 'drained',
      deadline: 'timed-out',
      'admin-unreachable': 'timed-out',
      interrupted: 'interrupted',
    });
  });

  test('held by traffic: a deadline at the minimum, the observed rule still waiting for a silence', () => {
    const waiting: LoadBalancerReport = { ...NO_LAG, quietPeriodMs: 10_000, lagMs: 30_000, lagAtLeastMs: 29_000, sinceHealthChecksFailed: { requests: 300, connections: 0, healthChecks: 0, polls: 0 } };
    assert.equal(heldByTraffic(outcome({ reason: 'deadline', loadBalancer: waiting })), true);
    assert.equal(heldByTraffic(outcome({ reason: 'deadline', loadBalancer: { ...waiting, quiet: true } })), false, 'it went quiet');
    assert.equal(heldByTraffic(outcome({ reason: 'deadline', openConnections: 1, loadBalancer: waiting })), false, 'connections held it');
    assert.equal(heldByTraffic(outcome({ reason: 'connections-closed', loadBalancer: waiting })), false, 'not a deadline');
  });

  test('a silence longer than the time left, with no client after the failure, is not traffic holding the drain, and the deadline says so', () => {
    const nobody: LoadBalancerReport = { ...NO_LAG, quietPeriodMs: 10_000, neededQuietMs: 10_000, lagMs: 0, lagAtLeastMs: 0 };
    const ended = outcome({ reason: 'deadline', durationMs: 6_000, loadBalancer: nobody });
    assert.equal(heldByTraffic(ended), false, 'no request and no connection came after the health checks failed');
    assert.equal(
      describeOutcome(ended),
      'drain deadline reached after 6.0s with 0 connections open (at most 0 wanted), waiting for a silence of 10s that the deadline came before: ' +
        'no new client reached Envoy after its health checks failed, so the quiet period was longer than the drain had (shorten it, or lengthen the grace period); ' +
        'letting the pod terminate; no new client traffic reached Envoy after its health checks failed, and it had not been quiet for 10s yet',
      'the silence, not traffic, is named',
    );
    const oneConnection = { ...nobody, sinceHealthChecksFailed: { requests: 0, connections: 1, healthChecks: 0, polls: 0 } };
    assert.equal(heldByTraffic(outcome({ reason: 'deadline', loadBalancer: oneConnection })), true, 'a new connection after the failure is traffic');
  });
});
