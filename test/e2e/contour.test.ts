/**
 * Contour, end to end, as the recipe of docs/distributions.md has a user do it: Contour's Envoy DaemonSet as Contour renders
 * it (test/fixtures/contour/03-envoy.yaml), the recipe's kustomize Component (manifests/contour) removing
 * Contour's shutdown-manager, `kubectl kustomize`, a pod of that DaemonSet sent to the running webhook over
 * HTTPS, and the injected pod run by the kubelet simulator with real mounts and users: the Envoy emulator
 * serves its admin API only on the Unix socket /admin/admin.sock of the pod's envoy-admin emptyDir (as
 * `contour bootstrap` configures Envoy), as Envoy's user 65534 with mode 0644, plus Contour's read-only
 * envoy-admin listener that refuses POSTs; the built sidecar runs with exactly the args the webhook gave it,
 * in a mount namespace holding its volumeMounts, as the user the webhook chose.
 *
 * The control: the same pod without the socket's volume in the sidecar, as a webhook that does not mount it
 * would leave it. The drain cannot reach Envoy and the TCP-proxy connections are cut.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import jsonPatch from 'fast-json-patch';
import type { V1Container, V1DaemonSet, V1Pod } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { closeAll, httpRequest, openHttpConnection, openTcpConnections, type HeldConnection } from '../support/connections.js';
import { mountNamespaceProblem, runAsProblem } from '../support/mount-namespace.js';
import { freePort } from '../support/ports.js';
import { loadReview, postReview, startTestWebhook } from '../support/webhook.js';
import { waitUntil } from '../support/wait.js';
import { SimulatedPod } from './kubelet.js';
import { FAST_DRAIN_DEFAULTS } from './rollout.js';

const CONTOUR_FIXTURE = fileURLToPath(new URL('../fixtures/contour/03-envoy.yaml', import.meta.url));
const RECIPE = fileURLToPath(new URL('../../manifests/contour', import.meta.url));
const ADMIN_SOCKET = '/admin/admin.sock';

/** Why this test cannot run here (no kubectl, no mount namespaces, not root), or undefined. */
function cannotRun(): string | undefined {
  if (spawnSync('kubectl', ['version', '--client'], { timeout: 10_000 }).error !== undefined) return 'kubectl is not installed';
  return runAsProblem(65534) ?? mountNamespaceProblem();
}

/** Contour's DaemonSet with the recipe applied, as `kubectl kustomize` renders it. */
function renderWithRecipe(t: TestContext): V1DaemonSet {
  const dir = mkdtempSync(join(tmpdir(), 'contour-recipe-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  copyFileSync(CONTOUR_FIXTURE, join(dir, '03-envoy.yaml'));
  writeFileSync(join(dir, 'kustomization.yaml'), `resources:\n  - 03-envoy.yaml\ncomponents:\n  - ${relative(dir, RECIPE)}\n`);
  const rendered = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(rendered.status, 0, rendered.stderr);
  const documents = parseAllDocuments(rendered.stdout).map((document) => document.toJS() as { kind?: string });
  const daemonSet = documents.find((document) => document.kind === 'DaemonSet');
  assert.ok(daemonSet, 'the recipe keeps the DaemonSet');
  return daemonSet as V1DaemonSet;
}

/** A pod of the DaemonSet, as its controller creates it (before admission: no name yet, the template's spec). */
function podOf(daemonSet: V1DaemonSet): V1Pod {
  const template = daemonSet.spec?.template;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: 'envoy-',
      namespace: 'projectcontour',
      labels: { ...template?.metadata?.labels, 'controller-revision-hash': '5d8f7c9b6', 'pod-template-generation': '1' },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'envoy', uid: '8e2f4a6c-1b3d-4f5e-9a7c-2d4e6f8a0b1c', controller: true, blockOwnerDeletion: true }],
    },
    spec: structuredClone(template?.spec) as V1Pod['spec'],
  };
}

/** The pod as the running webhook patches it, over HTTPS. */
async function admit(pod: V1Pod, servePort: number): Promise<{ pod: V1Pod; warnings: string[] }> {
  const webhook = await startTestWebhook([...FAST_DRAIN_DEFAULTS, `--serve-port=${servePort}`]);
  try {
    const review = await loadReview('contour-envoy-daemonset-pod.json');
    review.request.object = pod;
    const answer = await postReview(webhook, review);
    const response = answer.json().response;
    assert.equal(response.allowed, true, answer.text);
    assert.ok(response.patch, `no patch: ${answer.text}`);
    const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
    return { pod: jsonPatch.applyPatch(structuredClone(pod), operations, true, false).newDocument as V1Pod, warnings: response.warnings ?? [] };
  } finally {
    await webhook.close();
  }
}

function container(pod: V1Pod, name: string): V1Container {
  const found = pod.spec?.containers.find((candidate) => candidate.name === name);
  assert.ok(found, `no container ${name}`);
  return found;
}

async function runPod(t: TestContext, pod: V1Pod): Promise<SimulatedPod> {
  const simulated = await SimulatedPod.start(pod, { mountNamespaces: true, envoyAdminSocket: ADMIN_SOCKET });
  t.after(() => simulated.kill());
  return simulated;
}

async function holdConnections(t: TestContext, simulated: SimulatedPod): Promise<HeldConnection[]> {
  const held = [await openHttpConnection(simulated.envoy.http), ...(await openTcpConnections(simulated.envoy.tcp, 3))];
  t.after(() => closeAll(held));
  return held;
}

describe("Contour's Envoy with the documented recipe", () => {
  test('the webhook finds the socket, mounts its volume and runs the sidecar as Envoy\'s user; the drain goes over the socket and counts TCP-proxy connections', async (t) => {
    const reason = cannotRun();
    if (reason !== undefined) return t.skip(reason);
    const daemonSet = renderWithRecipe(t);
    assert.deepEqual(daemonSet.spec?.template.spec?.containers.map((c) => c.name), ['envoy'], "the recipe removed Contour's shutdown-manager");

    const { pod, warnings } = await admit(podOf(daemonSet), await freePort());
    const sidecar = container(pod, 'shutdown-manager');
    assert.ok(sidecar.args?.includes(`--admin-address=unix:${ADMIN_SOCKET}`), sidecar.args?.join(' '));
    assert.ok(!sidecar.args?.some((arg) => arg.startsWith('--admin-port=')), 'a socket has no port');
    assert.deepEqual(
      sidecar.volumeMounts?.find((mount) => mount.name === 'envoy-admin'),
      { name: 'envoy-admin', mountPath: '/admin', readOnly: true },
    );
    assert.equal(sidecar.securityContext?.runAsUser, 65534, "Envoy's user, who owns the 0644 socket");
    assert.ok(warnings.some((warning) => /contour bootstrap/.test(warning)), `a warning says where the address came from: ${warnings.join(' | ')}`);

    const simulated = await runPod(t, pod);
    const socket = simulated.envoy.adminSocket;
    assert.ok(socket, 'Envoy serves admin on the socket');
    const process = simulated.sidecarProcesses[0];
    assert.ok(process, 'the sidecar process started');
    await waitUntil(async () => (await httpRequest(process.url('/ready'))).status === 200, 10_000, 'the sidecar reaches Envoy over the socket');
    // Contour's read-only listener cannot take a drain: that is why the socket matters.
    const readonly = await httpRequest(`http://127.0.0.1:${simulated.envoy.readonlyAdmin}/healthcheck/fail`, { method: 'POST' });
    assert.equal(readonly.status, 404);

    const held = await holdConnections(t, simulated);
    const termination = simulated.terminate();
    const posts = async (): Promise<string[]> =>
      (JSON.parse((await httpRequest('http://localhost/emulator/requests', { socketPath: socket })).body) as { method: string; path: string }[])
        .filter((entry) => entry.method === 'POST')
        .map((entry) => entry.path);
    await waitUntil(async () => (await posts()).length >= 2, 10_000, 'both drain steps reach Envoy');
    assert.deepEqual(await posts(), ['/healthcheck/fail', '/drain_listeners'], 'the drain went to Envoy over the socket');
    // Counted: the HTTP connection and the three TCP-proxy ones (Contour's own shutdown-manager counts HTTP only).
    await process.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 4, 10_000);

    await closeAll(held);
    const report = await termination;
    const envoyHook = report.hooks.find((hook) => hook.container === 'envoy');
    assert.equal(envoyHook?.status, 200, JSON.stringify(envoyHook));
    const finished = simulated.sidecarLogs.find((line) => line['event'] === 'drain_finished');
    assert.equal(finished?.['reason'], 'connections-closed', JSON.stringify(finished));
    assert.deepEqual(report.killed, []);
  });

  test('control: without the socket\'s volume in the sidecar, the drain cannot reach Envoy and the TCP-proxy connections are cut', async (t) => {
    const reason = cannotRun();
    if (reason !== undefined) return t.skip(reason);
    const { pod } = await admit(podOf(renderWithRecipe(t)), await freePort());
    const sidecar = container(pod, 'shutdown-manager');
    sidecar.volumeMounts = (sidecar.volumeMounts ?? []).filter((mount) => mount.name !== 'envoy-admin');

    const simulated = await runPod(t, pod);
    const process = simulated.sidecarProcesses[0];
    assert.ok(process, 'the sidecar process started');
    const waiting = await process.waitForLog((line) => line['event'] === 'envoy_admin_waiting', 10_000);
    assert.match(String(waiting['error']), /no socket at \/admin\/admin\.sock/);

    const held = await holdConnections(t, simulated);
    const report = await simulated.terminate();
    const finished = simulated.sidecarLogs.find((line) => line['event'] === 'drain_finished');
    assert.equal(finished?.['reason'], 'admin-unreachable', JSON.stringify(finished));
    assert.equal(report.hooks.find((hook) => hook.container === 'envoy')?.status, 503);
    await Promise.race([Promise.all(held.map((connection) => connection.closed)), new Promise((resolve) => setTimeout(resolve, 2_000))]);
    assert.ok(held.every((connection) => connection.socket.destroyed), 'Envoy exited with every connection open: all cut');
  });
});
