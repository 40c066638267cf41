/**
 * The recipes of docs/distributions.md, one per distribution: a pod as Contour, Envoy Gateway and a plain Envoy Deployment
 * render it is sent to the running webhook over HTTPS, and the answer (patch, warnings, metrics) is checked.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sampleOf } from '../support/prometheus.js';
import { findOne, getObject, loadYamlFile, MANIFESTS_DIR, resolveKustomization } from '../support/manifests.js';
import { admitReview, httpsRequest, loadReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

const HAND_CONFIGURED = 'shutdown-manager: pod already has a container named "shutdown-manager" (configured by hand); not injecting';
/** Envoy Gateway's labels on its proxies, as the documented overlay selects them (docs/distributions.md). */
const ENVOY_GATEWAY_SELECTOR = '--pod-selector=app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy';



async function skips(webhook: RunningWebhook, reason: string): Promise<number> {
  const text = (await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' })).text;
  return sampleOf(text, `shutdown_manager_webhook_skips_total{reason="${reason}"}`) ?? 0;
}

function container(pod: Json, name: string): Json {
  return pod.spec.containers.find((c: Json) => c.name === name);
}

function names(pod: Json): string[] {
  return pod.spec.containers.map((c: Json) => c.name);
}

/** Asserts the answer is "admitted unchanged" and that the metrics counted it under `reason`. */
async function assertSkipped(webhook: RunningWebhook, review: Json, reason: string, warnings: string[] | undefined): Promise<void> {
  const before = await skips(webhook, reason);
  const { response } = await admitReview(webhook, review);
  assert.equal(response.allowed, true);
  assert.equal(response.patch, undefined, 'admitted unchanged');
  assert.deepEqual(response.warnings, warnings);
  assert.equal(await skips(webhook, reason), before + 1, `counted as ${reason}`);
}

describe('Contour (examples/contour/03-envoy.yaml, a DaemonSet pod)', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  test("is selected by the default selector, and left to Contour's own shutdown-manager with a warning", async () => {
    const review = await loadReview('contour-envoy-daemonset-pod.json');
    assert.equal(review.request.object.metadata.labels.app, 'envoy');
    await assertSkipped(webhook, review, 'hand-configured', [HAND_CONFIGURED]);
  });

  test('with annotations of ours (a native sidecar asked for), is still left to Contour', async () => {
    const review = await loadReview('contour-envoy-daemonset-pod.json');
    review.request.object.metadata.annotations = { 'shutdown-manager.io/native-sidecar': 'true', 'shutdown-manager.io/envoy-admin-port': '9001' };
    await assertSkipped(webhook, review, 'hand-configured', [HAND_CONFIGURED]);
  });

  test("with the documented recipe (manifests/contour) is injected: Envoy's admin socket found, its volume mounted, the sidecar as Envoy's user", async () => {
    const review = await loadReview('contour-envoy-daemonset-pod.json');
    const deleted = await recipeDeletes();
    assert.deepEqual(deleted, ['shutdown-manager']);
    review.request.object.spec.containers = review.request.object.spec.containers.filter((c: Json) => !deleted.includes(c.name));
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(response.allowed, true);
    assert.deepEqual(names(pod), ['envoy', 'shutdown-manager']);
    const sidecar = container(pod, 'shutdown-manager');
    assert.ok(sidecar.args.includes('--admin-address=unix:/admin/admin.sock'), sidecar.args.join(' '));
    assert.deepEqual(sidecar.volumeMounts.find((m: Json) => m.name === 'envoy-admin'), { name: 'envoy-admin', mountPath: '/admin', readOnly: true });
    assert.equal(sidecar.securityContext.runAsUser, 65534);
    assert.deepEqual(container(pod, 'envoy').lifecycle.preStop.httpGet.path, '/shutdown');
  });
});

/** The containers the recipe's strategic merge patch deletes (`$patch: delete`); kubectl applies it in test/e2e/contour.test.ts. */
async function recipeDeletes(): Promise<string[]> {
  const [patch] = await loadYamlFile(join(MANIFESTS_DIR, 'contour', 'remove-contour-shutdown-manager.yaml'));
  const containers = getObject(patch, ['spec', 'template', 'spec']).containers as Json[];
  return containers.filter((c) => c.$patch === 'delete').map((c) => c.name as string);
}

describe('Envoy Gateway (a proxy pod of a Gateway)', () => {
  let byDefault: RunningWebhook;
  let withOverlay: RunningWebhook;
  let selectorOnly: RunningWebhook;
  before(async () => {
    byDefault = await startTestWebhook();
    // The documented overlay (docs/distributions.md): the selector and the admin port as webhook-wide settings.
    withOverlay = await startTestWebhook([ENVOY_GATEWAY_SELECTOR, '--admin-port=19000']);
    selectorOnly = await startTestWebhook([ENVOY_GATEWAY_SELECTOR]);
  });
  after(() => Promise.all([byDefault.close(), withOverlay.close(), selectorOnly.close()]));

  /** The pod once the EnvoyProxy patch of docs/distributions.md has removed Envoy Gateway's shutdown-manager. */
  async function withoutOwnShutdownManager(annotations: Record<string, string> = {}): Promise<Json> {
    const review = await loadReview('envoy-gateway-proxy-pod.json');
    const pod = review.request.object;
    pod.spec.containers = pod.spec.containers.filter((c: Json) => c.name !== 'shutdown-manager');
    Object.assign(pod.metadata.annotations, annotations);
    return review;
  }

  test('is not selected by the default selector (it has no app: envoy), silently', async () => {
    await assertSkipped(byDefault, await loadReview('envoy-gateway-proxy-pod.json'), 'not-selected', undefined);
    await assertSkipped(byDefault, await withoutOwnShutdownManager(), 'not-selected', undefined);
  });

  test('as rendered, with its own shutdown-manager, is skipped with a warning once selected', async () => {
    await assertSkipped(withOverlay, await loadReview('envoy-gateway-proxy-pod.json'), 'hand-configured', [HAND_CONFIGURED]);
  });

  test('without its own shutdown-manager, is injected, with the sidecar on admin port 19000 set by webhook flag', async () => {
    const review = await withoutOwnShutdownManager();
    const original = review.request.object;
    const { response, pod } = await admitReview(withOverlay, review);
    assert.equal(response.allowed, true);
    assert.deepEqual(names(pod), ['envoy', 'shutdown-manager']);
    const sidecar = container(pod, 'shutdown-manager');
    assert.ok(sidecar.args.includes('--admin-port=19000'), sidecar.args.join(' '));
    // Envoy Gateway's hook pointed at its own shutdown-manager (port 19002): replaced, and said so.
    assert.deepEqual(response.warnings, [
      'shutdown-manager: replaced the existing preStop hook of container "envoy" with the shutdown-manager\'s',
    ]);
    const envoy = container(pod, 'envoy');
    assert.equal(envoy.lifecycle.preStop.httpGet.path, '/shutdown');
    assert.equal(envoy.lifecycle.preStop.httpGet.port, 8090);
    // It already runs Envoy with --drain-strategy immediate --drain-time-s 60: left alone, nothing to warn about.
    assert.deepEqual(envoy.args, container(original, 'envoy').args);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 360, "Envoy Gateway's longer grace period is kept");
    assert.ok(sidecar.args.includes('--drain-timeout=5m50s'), sidecar.args.join(' '));
    assert.deepEqual(pod.metadata.labels, original.metadata.labels);
  });

  test('the admin port 19000 reaches the sidecar by annotation too, and without either from its --config-yaml', async () => {
    const { response, pod } = await admitReview(selectorOnly, await withoutOwnShutdownManager({ 'shutdown-manager.io/envoy-admin-port': '19000' }));
    assert.equal(response.allowed, true, JSON.stringify(response.status));
    const args: string[] = container(pod, 'shutdown-manager').args;
    assert.ok(args.includes('--admin-port=19000'), args.join(' '));

    const found = await admitReview(selectorOnly, await withoutOwnShutdownManager());
    assert.ok(container(found.pod, 'shutdown-manager').args.includes('--admin-port=19000'), 'without either, found in its inline --config-yaml');
    assert.ok(found.response.warnings.includes('shutdown-manager: Envoy admin found at 127.0.0.1:19000 (inline --config-yaml); the sidecar drains it there'), 'a warning that the inline config gave the admin port');
  });

  test('a pod annotation may still override the webhook-wide 19000', async () => {
    const { pod } = await admitReview(withOverlay, await withoutOwnShutdownManager({ 'shutdown-manager.io/envoy-admin-port': '19100' }));
    assert.ok(container(pod, 'shutdown-manager').args.includes('--admin-port=19100'), "the annotation's admin port wins over the webhook's");
  });
});

describe('a plain Envoy Deployment (manifests/example)', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  /** The pod the ReplicaSet of manifests/example creates, with the defaults the API server adds. */
  async function examplePod(): Promise<Json> {
    const docs = await resolveKustomization(join(MANIFESTS_DIR, 'example'));
    const template = structuredClone(getObject(findOne(docs, 'Deployment'), ['spec', 'template'])) as Json;
    return {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: '0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b',
        kind: { group: '', version: 'v1', kind: 'Pod' },
        namespace: 'envoy-demo',
        operation: 'CREATE',
        object: {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { ...template.metadata, generateName: 'envoy-6f7d9c8b5-', namespace: 'envoy-demo', labels: { ...template.metadata.labels, 'pod-template-hash': '6f7d9c8b5' } },
          spec: { ...template.spec, terminationGracePeriodSeconds: 30, restartPolicy: 'Always', dnsPolicy: 'ClusterFirst' },
        },
      },
    };
  }

  test('is injected without a warning, with its annotations and Envoy drain flags', async () => {
    const review = await examplePod();
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(response.allowed, true);
    assert.equal(response.warnings, undefined);
    assert.deepEqual(names(pod), ['envoy', 'shutdown-manager']);
    const args: string[] = container(pod, 'shutdown-manager').args;
    for (const flag of ['--check-delay=15s', '--admin-port=9001', '--serve-port=8090', '--drain-timeout=1m50s']) assert.ok(args.includes(flag), `${flag} in ${args.join(' ')}`);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 120);
    const envoy = container(pod, 'envoy');
    assert.deepEqual(envoy.command, ['envoy']);
    assert.deepEqual(envoy.args.slice(-4), ['--drain-strategy', 'immediate', '--drain-time-s', '110']);
    assert.equal(envoy.lifecycle.preStop.httpGet.path, '/shutdown');
  });

  test('with a shutdown-manager of its own, it is skipped with the warning', async () => {
    const review = await examplePod();
    review.request.object.spec.containers.push({ name: 'shutdown-manager', image: 'example.com/shutdown-manager:1' });
    await assertSkipped(webhook, review, 'hand-configured', [HAND_CONFIGURED]);
  });
});
