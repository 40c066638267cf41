/** The arrival counters read from Envoy's stats, and what arrived between two reads (src/envoy/arrivals.ts). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { arrivalsBetween, hasClientTraffic, isObservable, portOfListener } from '../../src/envoy/arrivals.js';
import { countDownstreamConnections, type StatSample } from '../../src/envoy/stats.js';

/** Contour's Envoy: HTTP on 8080, HTTPS on 8443, its health listener on 8002 (the kubelet's readiness probe), a TCP proxy on 5432. */
function contour(values: { http: number; https: number; probes: number; tcp: number; checks: number; connects: number }): StatSample[] {
  return [
    { name: 'listener.admin.downstream_cx_total', value: 10 },
    { name: 'listener.admin.http.admin.downstream_rq_completed', value: 9 },
    { name: 'http.admin.downstream_cx_active', value: 1 },
    ...(['0.0.0.0_8080', '0.0.0.0_8443', '0.0.0.0_8002', '0.0.0.0_5432'] as const).map((listener) => ({ name: `listener.${listener}.downstream_cx_active`, value: 0 })),
    { name: 'listener.0.0.0.0_8080.downstream_cx_total', value: values.http + values.connects },
    { name: 'listener.0.0.0.0_8080.worker_0.downstream_cx_total', value: 999 },
    { name: 'listener.0.0.0.0_8080.http.ingress_http.downstream_rq_completed', value: values.http },
    { name: 'http.ingress_http.health_check.request_total', value: values.checks },
    { name: 'listener.0.0.0.0_8443.downstream_cx_total', value: values.https },
    { name: 'listener.0.0.0.0_8443.http.ingress_https.downstream_rq_completed', value: values.https },
    { name: 'listener.0.0.0.0_8002.downstream_cx_total', value: values.probes },
    { name: 'listener.0.0.0.0_8002.http.stats.downstream_rq_completed', value: values.probes },
    { name: 'listener.0.0.0.0_5432.downstream_cx_total', value: values.tcp },
  ];
}

const ZERO = { http: 0, https: 0, probes: 0, tcp: 0, checks: 0, connects: 0 };

/** The kubelet's readiness probe on 8002 every 10 s (--probe-ports=8002/10s). */
const PROBES = [{ port: 8002, periodMs: 10_000 }];

/** `allowance`: the probes the watch's bucket lets through on 8002 in this interval (load-balancer.ts). */
function arrivals(before: typeof ZERO, after: typeof ZERO, allowance: Record<string, number> = {}) {
  const read = (values: typeof ZERO) => countDownstreamConnections(contour(values), { probes: PROBES }).arrivals;
  return arrivalsBetween(read(before), read(after), allowance);
}

describe('arrivals: what counts as new client traffic', () => {
  test('the tally: every counted listener watched (admin left out), the probed one with its probe rate, per-listener responses, TCP-proxy listeners apart, worker copies ignored', () => {
    const tally = countDownstreamConnections(contour({ ...ZERO, http: 5 }), { probes: PROBES }).arrivals;
    assert.deepEqual(tally.watched, ['0.0.0.0_5432', '0.0.0.0_8002', '0.0.0.0_8080', '0.0.0.0_8443']);
    assert.deepEqual(tally.connectionListeners, ['0.0.0.0_5432']);
    assert.deepEqual(tally.responses, { '0.0.0.0_8002 stats': 0, '0.0.0.0_8080 ingress_http': 5, '0.0.0.0_8443 ingress_https': 0 });
    assert.deepEqual(tally.connections, { '0.0.0.0_8002': 0, '0.0.0.0_8080': 5, '0.0.0.0_8443': 0, '0.0.0.0_5432': 0 });
    assert.deepEqual(tally.probeRates, { '0.0.0.0_8002': { perMs: 1 / 10_000, burst: 2 } }, 'one probe every 10 s, and one more for its jitter');
    assert.deepEqual(tally.blindSpots, [], 'every listener shows its clients arriving');
    assert.equal(isObservable(tally), true);
  });

  test("client requests and TCP-proxy connections are traffic; health checks, bare connects and the kubelet's probes within their allowance are not", () => {
    assert.equal(hasClientTraffic(arrivals(ZERO, { ...ZERO, http: 3 })), true);
    assert.equal(hasClientTraffic(arrivals(ZERO, { ...ZERO, tcp: 1 })), true);
    const noise = arrivals(ZERO, { ...ZERO, checks: 40, connects: 40, probes: 2 }, { '0.0.0.0_8002': 2 });
    assert.equal(hasClientTraffic(noise), false, 'health checks, bare connects and two probes are no client');
    assert.deepEqual([noise.healthChecks, noise.connections, noise.probesTaken], [40, 42, { '0.0.0.0_8002': 2 }], 'reported, not waited for');
    // Beyond the probes' allowance, the probe port's traffic is a client's: a probe on a traffic port blinds nothing.
    const beyond = arrivals(ZERO, { ...ZERO, probes: 5 }, { '0.0.0.0_8002': 2 });
    assert.deepEqual([hasClientTraffic(beyond), beyond.requests, beyond.newClients], [true, 3, 3], 'three clients beyond the two probes');
    // Control: with no allowance (no --probe-ports), the kubelet's probes on 8002 pass for clients.
    assert.equal(hasClientTraffic(arrivals(ZERO, { ...ZERO, probes: 2 })), true, 'probes without an allowance are clients');
  });

  test('declared pollers (--pollers): within their allowance, requests on an HTTP listener and connections on a TCP proxy are no client; beyond it they are', () => {
    const POLLERS = [{ port: 8080, periodMs: 1_000 }, { port: 5432, periodMs: 10_000 }];
    const read = (values: typeof ZERO) => countDownstreamConnections(contour(values), { probes: PROBES, pollers: POLLERS }).arrivals;
    assert.deepEqual(read(ZERO).pollerRates, { '0.0.0.0_8080': { perMs: 1 / 1_000, burst: 2 }, '0.0.0.0_5432': { perMs: 1 / 10_000, burst: 2 } });
    const allowance = { '0.0.0.0_8080': 2, '0.0.0.0_5432': 1 };
    const polled = arrivalsBetween(read(ZERO), read({ ...ZERO, http: 2, tcp: 1 }), {}, allowance);
    assert.equal(hasClientTraffic(polled), false, 'two polls of a routed path and one TCP check are no client');
    assert.deepEqual([polled.requests, polled.newClients, polled.pollsTaken], [0, 0, { '0.0.0.0_8080': 2, '0.0.0.0_5432': 1 }]);
    const beyond = arrivalsBetween(read(ZERO), read({ ...ZERO, http: 5, tcp: 3 }), {}, allowance);
    assert.deepEqual([beyond.requests, beyond.proxiedConnections, beyond.newClients], [3, 2, 5], 'clients beyond the pollers are seen');
    // Control: undeclared, the same polls are client traffic, which holds the drain.
    assert.equal(hasClientTraffic(arrivalsBetween(read(ZERO), read({ ...ZERO, http: 2, tcp: 1 }))), true);
  });

  test('blind spots: a listener without arrival counters, and an HTTP listener without downstream_cx_total, are named', () => {
    const trimmedTotals = contour({ ...ZERO, http: 5 }).filter((sample) => !(sample.name.endsWith('.downstream_cx_total') && sample.name.includes('8080')));
    const partial = countDownstreamConnections(trimmedTotals, { probes: PROBES }).arrivals;
    assert.deepEqual(partial.blindSpots, [{ listener: '0.0.0.0_8080', reason: 'new-connections-missing' }], 'requests seen, new clients not');
    const bare = contour(ZERO).filter((sample) => !sample.name.includes('5432') || sample.name.endsWith('_active'));
    assert.deepEqual(countDownstreamConnections(bare).arrivals.blindSpots, [{ listener: '0.0.0.0_5432', reason: 'arrival-counters-missing' }], 'nothing arriving is seen');
  });

  test('new clients: new connections carrying requests; HTTP health checks on connections of their own are taken out, and requests on old connections are none', () => {
    assert.equal(arrivals(ZERO, { ...ZERO, http: 3, connects: 0 }).newClients, 3, 'three connections, a request each');
    assert.equal(arrivals(ZERO, { ...ZERO, checks: 5, connects: 5 }).newClients, 0, "the load balancer's HTTP checks");
    assert.equal(arrivals(ZERO, { ...ZERO, tcp: 2 }).newClients, 2, 'proxied connections');
    // Requests with no new connection (idle keep-alive clients coming back): traffic, but no new client.
    const oldConnections = countDownstreamConnections(contour(ZERO), { probes: PROBES }).arrivals;
    const later = { ...oldConnections, responses: { ...oldConnections.responses, '0.0.0.0_8080 ingress_http': 2 } };
    const comeBack = arrivalsBetween(oldConnections, later);
    assert.deepEqual([hasClientTraffic(comeBack), comeBack.newClients], [true, 0]);
  });

  test('a counter that went down (POST /reset_counters) is taken as traffic', () => {
    const reset = arrivals({ ...ZERO, http: 100 }, ZERO);
    assert.deepEqual([reset.reset, hasClientTraffic(reset)], [true, true]);
  });

  test('stats without the counters (a stats_matcher trimmed them) leave the load balancer unobservable', () => {
    const gaugesOnly = contour(ZERO).filter((sample) => sample.name.endsWith('_active'));
    assert.equal(isObservable(countDownstreamConnections(gaugesOnly).arrivals), false);
  });

  test('the port of a listener stat name', () => {
    assert.deepEqual(['0.0.0.0_8002', '[__1]_10000', 'ingress', '0.0.0.0_99999'].map(portOfListener), [8002, 10000, undefined, undefined]);
  });
});
