/**
 * The fleet rollout behind a load balancer, small and bounded (4 pods, time run 10x faster), with every client
 * kind: with the LB's deregistration (poll + lag) well within check-delay, HTTP/1.1, HTTP/2 and gRPC clients
 * lose no request (long streams, WebSockets and TCP are cut at the deadline: Envoy cannot drain them), and
 * long-lived-grace lets such a pod go early; without
 * the sidecar (Envoy SIGTERMed at deletion) they lose requests; with a lag longer than check-delay and no
 * drain-delay, the pod goes while the LB still sends it connections, and they lose requests too.
 * `npm run proof` runs the full matrix.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { http1KeepAlive, rawTcp } from './fleet/clients.js';
import { grpcServerStream, http2RequestResponse, webSocket } from './fleet/streaming-clients.js';
import { resolveFenceposts } from './fleet/deployment.js';
import { runFleet, type DrainSetting, type FleetReport } from './fleet/simulation.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const SCALE = 10;

/** 4 pods, 8 HTTP/1.1 clients recycling their connection every 5 requests (churn puts new connections on pods). */
function smallRollout(lagMs: number, drain: DrainSetting): Promise<FleetReport> {
  return runFleet({
    replicas: 4,
    scale: SCALE,
    loadBalancer: { mode: 'cluster', deregistrationLagMs: lagMs, pollIntervalMs: 2_000 },
    drain,
    gracePeriodS: 60,
    clients: [{ kind: http1KeepAlive({ requestsPerConnection: 5 }), count: 8 }],
    thinkMs: 10,
    maxRealMs: 30_000,
  });
}

function httpOf(report: FleetReport): NonNullable<FleetReport['kinds'][number]> {
  const http = report.kinds[0];
  assert.ok(http !== undefined, 'the report has the HTTP kind');
  return http;
}

/** The same small fleet with every kind of client: HTTP/1.1, HTTP/2, short gRPC streams, WebSocket, TCP. */
function everyKindRollout(drain: DrainSetting): Promise<FleetReport> {
  return runFleet({
    replicas: 4,
    scale: SCALE,
    loadBalancer: { mode: 'cluster', deregistrationLagMs: 5_000, pollIntervalMs: 2_000 },
    drain,
    gracePeriodS: 60,
    clients: [
      { kind: http1KeepAlive({ requestsPerConnection: 5 }), count: 4 },
      { kind: http2RequestResponse(), count: 4 },
      // Streams of 0.2 s real (2 s of the fleet's time): they end well before the deadline.
      { kind: grpcServerStream({ intervalMs: 20, messages: 10 }), count: 3 },
      { kind: webSocket(), count: 3 },
      { kind: rawTcp(), count: 3 },
    ],
    thinkMs: 10,
    maxRealMs: 40_000,
  });
}

function kindOf(report: FleetReport, name: string): NonNullable<FleetReport['kinds'][number]> {
  const found = report.kinds.find((candidate) => candidate.name === name);
  assert.ok(found !== undefined, name);
  return found;
}

describe('fleet rollout behind a load balancer', { timeout: 180_000 }, () => {
  it('every kind of client: no request lost by HTTP/1.1, HTTP/2 or gRPC; long-lived ones cut at the deadline, or after long-lived-grace', async () => {
    const held = await everyKindRollout({ checkDelayMs: 15_000, checkIntervalMs: 1_000, quietPeriodMs: 0 });
    assert.equal(held.complete, true);
    for (const name of [http1KeepAlive().name, http2RequestResponse().name, grpcServerStream().name]) {
      const kind = kindOf(held, name);
      assert.equal(kind.failed, 0, `${name}: ${kind.samples.join('; ')}`);
      assert.equal(kind.cut, 0, `${name} cut`);
      assert.ok(kind.ok > 20, `${name}: only ${kind.ok} answered`);
    }
    assert.ok(kindOf(held, webSocket().name).ok > 20, 'WebSockets echoed');
    // Envoy never drains WebSockets and TCP-proxy connections: a pod that has some is held to its deadline (54 s).
    const heldToDeadline = held.releases.filter((release) => release.hookStatus === 503);
    assert.ok(heldToDeadline.length > 0, `no pod held: ${JSON.stringify(held.releases)}`);
    for (const release of heldToDeadline) assert.ok(release.shutdownToReleaseMs >= 50_000, `${release.pod} released after ${release.shutdownToReleaseMs} ms`);

    const graced = await everyKindRollout({ checkDelayMs: 15_000, checkIntervalMs: 1_000, quietPeriodMs: 0, longLivedGraceMs: 20_000 });
    assert.equal(graced.complete, true);
    for (const name of [http1KeepAlive().name, http2RequestResponse().name, grpcServerStream().name]) {
      assert.equal(kindOf(graced, name).failed, 0, `${name} with long-lived-grace: ${kindOf(graced, name).samples.join('; ')}`);
    }
    for (const release of graced.releases) {
      assert.equal(release.hookStatus, 200, `${release.pod}: let go once the grace was over`);
      assert.ok(release.shutdownToReleaseMs < 40_000, `${release.pod} released after ${release.shutdownToReleaseMs} ms, not at the grace`);
    }
    assert.ok(graced.rolloutMs < held.rolloutMs, `rollout ${graced.rolloutMs} ms with the grace, ${held.rolloutMs} ms without`);
  });

  it("rounds a Deployment's 25% surge up and 25% unavailable down (ResolveFenceposts)", () => {
    assert.deepEqual(resolveFenceposts({ maxSurge: '25%', maxUnavailable: '25%' }, 10), { maxSurge: 3, maxUnavailable: 2 });
    assert.deepEqual(resolveFenceposts({ maxSurge: 0, maxUnavailable: '10%' }, 4), { maxSurge: 0, maxUnavailable: 1 });
  });

  it('loses no HTTP/1.1 request when the LB deregisters well within check-delay', async () => {
    // LB: seen within a 2 s poll, gone 5 s later: 7 s at most, against a check-delay of 15 s.
    const report = await smallRollout(5_000, { checkDelayMs: 15_000, checkIntervalMs: 1_000, quietPeriodMs: 0 });
    const http = httpOf(report);
    assert.equal(report.complete, true);
    assert.equal(http.failed, 0, http.samples.join('; '));
    assert.equal(http.cut, 0);
    assert.ok(http.ok > 100, `only ${http.ok} requests served`);
    assert.equal(report.releases.length, 4);
    for (const release of report.releases) {
      assert.equal(release.killed, false);
      assert.ok(release.shutdownToReleaseMs >= 14_000, `${release.pod} released after ${release.shutdownToReleaseMs} ms`);
    }
  });

  it('loses requests without the sidecar (the negative control: SIGTERM at deletion)', async () => {
    const report = await smallRollout(5_000, 'no-sidecar');
    assert.equal(report.complete, true);
    assert.ok(httpOf(report).failed > 0, 'the control lost nothing: the simulation would not see a loss');
  });

  it('loses requests when the lag outlasts check-delay and drain-delay is 0', async () => {
    const report = await smallRollout(20_000, { checkDelayMs: 2_000, checkIntervalMs: 1_000, quietPeriodMs: 0 });
    const http = httpOf(report);
    assert.equal(report.complete, true);
    assert.ok(http.failed > 0, 'nothing lost although the LB sent connections for 20 s to pods released after about 2 s');
  });
});
