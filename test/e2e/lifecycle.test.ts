/**
 * The pod lifecycle beyond one clean deletion, end to end: the real webhook injects the pod, the kubelet
 * simulator runs it (the Envoy emulator as Envoy, started with the pod spec's flags; the built sidecar),
 * keep-alive clients send requests throughout, and containers are restarted as the kubelet restarts them.
 * Each protection has a negative control: the same path with the protection undone shows the harm.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { httpRequest } from '../support/connections.js';
import { sampleOf } from '../support/prometheus.js';
import type { LogLine } from '../support/process.js';
import { waitUntil } from '../support/wait.js';
import type { RestartReport, TerminationReport } from './kubelet.js';
import { shortWaitWindow, startPod, withDrainingSidecarHook, type PodOptions, type RunningPod } from './rollout.js';

/** The kubelet's back-off before starting an exited container again: short, for test time. */
const KUBELET = { restartDelayMs: 50 } as const;

interface AdminRequest {
  readonly method: string;
  readonly path: string;
  readonly query: string;
}

async function running(t: TestContext, options: PodOptions): Promise<RunningPod> {
  const pod = await startPod({ ...options, kubelet: { ...KUBELET, ...options.kubelet } });
  t.after(() => pod.close());
  return pod;
}

/** What the current Envoy process received on its admin port (its own record, over the emulator's control path). */
async function envoyAdminRequests(pod: RunningPod): Promise<AdminRequest[]> {
  const answer = await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/emulator/requests`);
  return JSON.parse(answer.body) as AdminRequest[];
}

const mutations = (requests: readonly AdminRequest[]): string[] =>
  requests.filter((request) => request.method === 'POST').map((request) => request.path);

async function envoyReady(pod: RunningPod): Promise<number> {
  return (await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/ready`)).status;
}

async function sidecarGet(pod: RunningPod, path: string): Promise<string> {
  const sidecar = pod.simulated.sidecarProcesses.at(-1);
  assert.ok(sidecar, 'a sidecar runs');
  return (await httpRequest(sidecar.url(path))).body;
}

function hook(report: TerminationReport | RestartReport, container: string) {
  const found = 'hooks' in report ? report.hooks.find((h) => h.container === container) : report.hook;
  assert.ok(found, `no preStop result for ${container}`);
  return found;
}

function logsOf(pod: RunningPod, event: string): LogLine[] {
  return pod.simulated.sidecarLogs.filter((line) => line['event'] === event);
}

describe('the sidecar restarted alone by a failed liveness probe', () => {
  test('never drains Envoy: no health-check failure, no drain_listeners, Envoy stays ready, no request fails', async (t) => {
    const pod = await running(t, { edit: shortWaitWindow });
    const load = pod.startLoad(8);
    await load.warmedUp(200);

    const restart = await pod.simulated.restartContainer('shutdown-manager');
    assert.equal(hook(restart, 'shutdown-manager').status, 200);
    assert.match(hook(restart, 'shutdown-manager').body ?? '', /no drain started/);
    const servedBefore = load.served;
    await waitUntil(() => load.served > servedBefore + 200, 5_000, 'traffic after the restart');

    assert.deepEqual(mutations(await envoyAdminRequests(pod)), [], 'Envoy received no mutation');
    assert.equal(await envoyReady(pod), 200);
    assert.equal(pod.simulated.sidecarProcesses.length, 2);
    const report = await load.stop();
    assert.deepEqual(report.failures, []);
    assert.equal(report.byReplica.second, 0, 'no client was moved off the healthy pod');
    assert.equal(report.firstReplicaDrainSeenAt, undefined, 'Envoy never answered Connection: close');

    // The restarted sidecar still drains on deletion.
    const after = pod.startLoad(4);
    await after.warmedUp(100);
    const termination = await pod.simulated.terminate();
    assert.equal(hook(termination, 'envoy').status, 200);
    assert.equal(hook(termination, 'shutdown-manager').status, 200, 'the sidecar hook waited for the drain');
    assert.deepEqual((await after.stop()).failures, []);
  });

  test('negative control: with the old hook (GET /shutdown on the sidecar), the same restart drains a healthy Envoy', async (t) => {
    const pod = await running(t, { edit: withDrainingSidecarHook, annotations: { 'shutdown-manager.io/recover-envoy': 'false' } });
    const load = pod.startLoad(4);
    await load.warmedUp(100);
    await pod.simulated.restartContainer('shutdown-manager');
    assert.deepEqual(mutations(await envoyAdminRequests(pod)), ['/healthcheck/fail', '/drain_listeners']);
    assert.equal(await envoyReady(pod), 503, 'the pod keeps running, out of service');
    const report = await load.stop();
    assert.ok(report.byReplica.second > 0, 'clients were pushed off a pod that is not going away');
    // And the new sidecar, told not to recover, leaves it so.
    await pod.simulated.sidecarProcesses.at(-1)?.waitForLog((line) => line['event'] === 'envoy_recovery');
    assert.equal(await envoyReady(pod), 503);
  });
});

describe('an Envoy left draining', () => {
  test('is brought back by the sidecar that starts next to it: restarted, ready again, logged, counted, shown', async (t) => {
    // The old hook drains Envoy when the sidecar restarts (the bug of the issue); the new sidecar recovers it.
    const pod = await running(t, { edit: withDrainingSidecarHook });
    await pod.simulated.restartContainer('shutdown-manager');
    const sidecar = pod.simulated.sidecarProcesses.at(-1);
    assert.ok(sidecar, 'the sidecar started');
    const recovery = await sidecar.waitForLog((line) => line['event'] === 'envoy_recovery');
    assert.equal(recovery['level'], 'warn');
    assert.equal(recovery['action'], 'restart-envoy');
    assert.equal(recovery['listeners_drained'], true, 'the journal in the pod volume says the listeners were drained');
    assert.match(String(recovery['msg']), /quitquitquit/);

    await pod.simulated.envoyStarted(2);
    await waitUntil(() => pod.simulated.envoyStartCount === 2, 5_000, 'Envoy restarted by the kubelet');
    assert.equal(await envoyReady(pod), 200, 'a fresh Envoy serves');
    const load = pod.startLoad(4);
    await load.warmedUp(100);
    assert.equal((await load.stop()).byReplica.second, 0);

    const drain = JSON.parse(await sidecarGet(pod, '/drain')) as { recovery: { action: string; envoyState: string } | null; state: string };
    assert.deepEqual([drain.recovery?.action, drain.recovery?.envoyState, drain.state], ['restart-envoy', 'DRAINING', 'idle']);
    assert.equal(sampleOf(await sidecarGet(pod, '/metrics'), 'shutdown_manager_envoy_recoveries_total{action="restart-envoy"}'), 1);
  });
});

describe('the Envoy container restarted alone (its liveness probe), then the pod deleted', () => {
  test('the drain is re-armed: the new Envoy is drained on deletion, and no request fails', async (t) => {
    const pod = await running(t, { edit: shortWaitWindow });
    const first = pod.startLoad(6);
    await first.warmedUp(100);
    const restart = await pod.simulated.restartContainer('envoy');
    // Envoy's hook drained the old process before the kubelet stopped it: its clients moved off first.
    assert.equal(hook(restart, 'envoy').status, 200);
    assert.deepEqual((await first.stop()).failures, []);
    assert.equal(pod.simulated.envoyStartCount, 2);
    assert.equal(await envoyReady(pod), 200);

    const second = pod.startLoad(6);
    await second.warmedUp(100);
    const termination = await pod.simulated.terminate();
    assert.equal(hook(termination, 'envoy').status, 200, hook(termination, 'envoy').body);
    assert.match(hook(termination, 'envoy').body ?? '', /^drained: 0 open connections/);
    const report = await second.stop();
    assert.deepEqual(report.failures, []);
    assert.ok(report.firstReplicaDrainSeenAt !== undefined, 'the new Envoy was drain-closing its connections');
    assert.equal(logsOf(pod, 'drain_rearmed').length, 1);
    assert.equal(logsOf(pod, 'drain_started').length, 2, 'one drain per Envoy process');
  });
});

describe("Envoy's own drain on MODIFY_ONLY listeners (Envoy Gateway's)", () => {
  const rollout = async (t: TestContext, annotations: Record<string, string>) => {
    const pod = await running(t, {
      // No load balancer here: the clients Envoy moves off come back to it, which the observed rule would wait out.
      annotations: { 'shutdown-manager.io/termination-grace-period': '4', 'shutdown-manager.io/quiet-period': '0s', ...annotations },
      kubelet: { envoyConfig: ['--http-drain-type=modify_only'] },
    });
    // Slow upstream answers: a client is almost always waiting for one, as a busy client is.
    const load = pod.startLoad(8, { path: '/delay/150' });
    await load.warmedUp(16);
    const termination = await pod.simulated.terminate();
    return { pod, termination, load: await load.stop() };
  };

  test('with the injected --drain-strategy immediate, every client is moved off and no request fails', async (t) => {
    const { pod, termination, load } = await rollout(t, {});
    const envoy = pod.pod.spec?.containers.find((c) => c.name === 'envoy');
    assert.ok(envoy?.args?.join(' ').includes('--drain-strategy immediate --drain-time-s 3'), envoy?.args?.join(' '));
    assert.deepEqual(load.failures, []);
    assert.equal(hook(termination, 'envoy').status, 200);
    assert.match(hook(termination, 'envoy').body ?? '', /^drained/);
  });

  test("negative control: Envoy's defaults (gradual over 600 s) leave clients connected at the deadline, and their requests are cut", async (t) => {
    const { pod, termination, load } = await rollout(t, { 'shutdown-manager.io/envoy-drain-flags': 'false' });
    const envoy = pod.pod.spec?.containers.find((c) => c.name === 'envoy');
    assert.ok(!envoy?.args?.includes('--drain-strategy'), 'Envoy left with its defaults');
    assert.equal(hook(termination, 'envoy').status, 503, 'the drain ran into its deadline');
    assert.ok(load.failures.length > 0, 'requests in flight when Envoy exited were lost');
    t.diagnostic(`requests lost with Envoy's default drain: ${load.failures.length} of ${load.requests + load.failures.length}`);
  });
});
