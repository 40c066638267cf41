/**
 * An application behind a sidecar Envoy, end to end: the real webhook injects the pod (selected by a label of
 * the team's, the app named in annotation wait-containers), the kubelet simulator runs Envoy (the emulator,
 * routing every request to the app), the sidecar and the app (test/e2e/app-server.ts, which exits at once on
 * SIGTERM), and keep-alive clients send slow requests through Envoy to the app throughout.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { httpRequest, openHttpConnection, requestOn } from '../support/connections.js';
import { freePorts } from '../support/ports.js';
import type { HookResult, TerminationReport, TimelineEvent } from './kubelet.js';
import { startPod, type PodOptions, type RunningPod } from './rollout.js';

const SELECTOR = '--pod-selector=example.com/envoy-sidecar=true';
const KUBELET = { restartDelayMs: 50, envoyUpstream: 'app' } as const;
/** Each request spends this long in the app, so that some are always in flight there. */
const SLOW_PATH = '/delay/150';

/** The team's pod: their API container first, Envoy as its sidecar proxy; labelled so that the webhook selects it. */
async function withApp(pod: V1Pod): Promise<V1Pod> {
  const [port] = (await freePorts(1)) as [number];
  return {
    ...pod,
    metadata: { ...pod.metadata, labels: { app: 'shop', 'example.com/envoy-sidecar': 'true', 'pod-template-hash': '5f6c7d8e9' } },
    spec: {
      ...pod.spec,
      containers: [
        { name: 'app', image: 'registry.example.com/shop/api:2.3', ports: [{ name: 'app', containerPort: port, protocol: 'TCP' }] },
        ...(pod.spec?.containers ?? []),
      ],
    },
  };
}

async function running(t: TestContext, options: PodOptions): Promise<RunningPod> {
  const pod = await startPod({ webhookArgs: [SELECTOR], prepare: withApp, ...options, kubelet: { ...KUBELET, ...options.kubelet } });
  t.after(() => pod.close());
  return pod;
}

function hook(report: TerminationReport, container: string): HookResult {
  const found = report.hooks.find((h) => h.container === container);
  assert.ok(found, `no preStop result for ${container}`);
  return found;
}

function eventsOf(timeline: readonly TimelineEvent[], container: string): string[] {
  return timeline.filter((e) => e.container === container).map((e) => e.event);
}

async function throughEnvoy(pod: RunningPod, path = '/') {
  return httpRequest(`http://127.0.0.1:${pod.simulated.envoy.http}${path}`);
}

/** What the current Envoy process received on its admin port: only POSTs change anything. */
async function envoyMutations(pod: RunningPod): Promise<string[]> {
  const answer = await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/emulator/requests`);
  return (JSON.parse(answer.body) as Array<{ method: string; path: string }>).filter((r) => r.method === 'POST').map((r) => r.path);
}

/** The sidecar's own /wait window, short for test time (by environment, as an operator could set it). */
function shortWaitWindow(pod: V1Pod): V1Pod {
  const containers = (pod.spec?.containers ?? []).map((container) =>
    container.name !== 'shutdown-manager' ? container : { ...container, env: [...(container.env ?? []), { name: 'SHUTDOWN_MANAGER_WAIT_WINDOW', value: '300ms' }] },
  );
  return { ...pod, spec: { ...pod.spec, containers } };
}

describe('an app container named in wait-containers, on pod deletion', () => {
  test('gets SIGTERM only after its hook returned, which is after the drain ended: every in-flight request completes', async (t) => {
    const pod = await running(t, { annotations: { 'shutdown-manager.io/wait-containers': 'app' } });
    const app = pod.pod.spec?.containers.find((c) => c.name === 'app');
    assert.equal(app?.lifecycle?.preStop?.httpGet?.path, '/wait', 'the webhook gave the app the waiting hook');
    assert.equal((await throughEnvoy(pod)).body, 'hello from the app\n', 'Envoy routes to the app');

    const load = pod.startLoad(8, { path: SLOW_PATH });
    await load.warmedUp(40);
    const termination = await pod.simulated.terminate();
    const report = await load.stop();

    assert.deepEqual(report.failures, [], 'no request through Envoy failed');
    assert.ok(report.byReplica.first >= 40 && report.byReplica.second > 0, JSON.stringify(report.byReplica));
    assert.deepEqual(eventsOf(termination.timeline, 'app'), ['preStop-sent', 'preStop-returned', 'SIGTERM', 'exited']);
    const appHook = hook(termination, 'app');
    assert.equal(appHook.status, 200, appHook.body ?? appHook.error);
    assert.match(appHook.body ?? '', /^drained: 0 open connections/, 'the hook joined the drain and reports its end');
    // The drain ends once Envoy's last client connection is gone: the hook returned after that.
    const lastClose = report.firstReplicaLastCloseAt;
    assert.ok(lastClose !== undefined, 'every client connection to Envoy closed');
    assert.ok(termination.startedAt + appHook.returnedAtMs >= lastClose, "the app's hook returned before Envoy's last connection closed");
    assert.equal(hook(termination, 'envoy').status, 200);
    // Its own account: nothing was being served when it was told to stop.
    assert.deepEqual(pod.simulated.appStderr('app'), ['app-server: SIGTERM with 0 requests in flight: exiting now']);
    assert.deepEqual(termination.killed, []);
  });

  test('negative control: without the annotation the app is stopped at once, while Envoy still routes to it, and requests fail', async (t) => {
    // The clients keep their idle connections to Envoy after their request failed, which holds the drain to its
    // deadline: a short grace period keeps that wait short (what is asserted happens in the first second).
    const pod = await running(t, { annotations: { 'shutdown-manager.io/termination-grace-period': '5' } });
    assert.equal(pod.pod.spec?.containers.find((c) => c.name === 'app')?.lifecycle, undefined);
    const load = pod.startLoad(8, { path: SLOW_PATH });
    await load.warmedUp(40);
    const termination = await pod.simulated.terminate();
    const report = await load.stop();

    assert.deepEqual(eventsOf(termination.timeline, 'app'), ['SIGTERM', 'exited']);
    const appStopped = termination.timeline.find((e) => e.container === 'app' && e.event === 'SIGTERM');
    assert.ok(appStopped !== undefined && appStopped.atMs < hook(termination, 'envoy').returnedAtMs, 'the app was stopped before the drain ended');
    assert.ok(report.failures.length > 0, 'requests in flight through Envoy were lost');
    assert.ok(report.failures.every((failure) => /first replica: HTTP 503/.test(failure)), report.failures.join('; '));
    t.diagnostic(`requests lost without wait-containers: ${report.failures.length}; ${pod.simulated.appStderr('app').join(' ')}`);
  });
});

describe('the app container restarted alone (its liveness probe)', () => {
  test('its hook finds no drain and returns; Envoy is never drained and serves the new app; deletion still waits', async (t) => {
    const pod = await running(t, { annotations: { 'shutdown-manager.io/wait-containers': 'app' }, edit: shortWaitWindow });
    const restart = await pod.simulated.restartContainer('app');

    assert.equal(restart.hook?.status, 200);
    assert.match(restart.hook?.body ?? '', /^no drain started within 300 ms/);
    assert.deepEqual(eventsOf(restart.timeline, 'app'), ['preStop-sent', 'preStop-returned', 'SIGTERM', 'exited', 'started']);
    assert.deepEqual(await envoyMutations(pod), [], 'no /healthcheck/fail or /drain_listeners reached Envoy');
    assert.equal((await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/ready`)).status, 200, 'Envoy is LIVE');
    // On a keep-alive connection, as a client holds one: answered by the new app, and not drain-closed.
    const connection = await openHttpConnection(pod.simulated.envoy.http);
    t.after(() => connection.close());
    const served = await requestOn(connection.socket, '/');
    assert.deepEqual([served.status, served.body], [200, 'hello from the app\n'], 'the restarted app is served');
    assert.equal(served.headers['connection'], 'keep-alive', 'Envoy is not drain-closing');
    await connection.close(); // an idle client would hold the drain below until its deadline
    const sidecar = pod.simulated.sidecarProcesses.at(-1);
    assert.ok(sidecar, 'the sidecar started');
    assert.equal((JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as { state: string }).state, 'idle');

    const termination = await pod.simulated.terminate();
    assert.equal(hook(termination, 'app').status, 200);
    assert.match(hook(termination, 'app').body ?? '', /^drained/);
  });
});
