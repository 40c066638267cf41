/**
 * Annotation wait-containers, over HTTPS: an application next to a sidecar Envoy gets a preStop hook that
 * waits for the drain (GET /wait, with the pod's token) and never starts one; names that do not qualify deny
 * the pod, a replaced hook is a warning.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import jsonPatch from 'fast-json-patch';
import { admitReview, loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook(['--pod-selector=example.com/envoy-sidecar=true']);
});
after(() => webhook.close());

/** A shop's pod: its API and a worker, with Envoy as their sidecar proxy; labelled as the team chose. */
async function appPod(annotations: Record<string, string>): Promise<Json> {
  const review = await loadReview('deployment-envoy-pod.json');
  const pod = review.request.object;
  pod.metadata.labels = { app: 'shop', 'example.com/envoy-sidecar': 'true', 'pod-template-hash': '7c9d8f6b5d' };
  pod.metadata.annotations = annotations;
  pod.spec.containers.unshift(
    {
      name: 'api',
      image: 'registry.example.com/shop/api:2.3',
      ports: [{ name: 'app', containerPort: 3000, protocol: 'TCP' }],
      lifecycle: { preStop: { exec: { command: ['sleep', '5'] } } },
    },
    { name: 'worker', image: 'registry.example.com/shop/worker:2.3' },
  );
  return review;
}


function container(pod: Json, name: string): Json {
  return [...pod.spec.containers, ...(pod.spec.initContainers ?? [])].find((c: Json) => c.name === name);
}

function token(pod: Json): string {
  return container(pod, 'shutdown-manager').env.find((e: Json) => e.name === 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN').value;
}

const waitHook = (secret: string): Json => ({
  httpGet: { path: '/wait', port: 8090, scheme: 'HTTP', httpHeaders: [{ name: 'Authorization', value: `Bearer ${secret}` }] },
});

describe('wait-containers', () => {
  test('each named container gets the /wait hook with the pod token; a replaced hook is a warning; the rest is untouched', async () => {
    const review = await appPod({ 'shutdown-manager.io/wait-containers': ' api , worker,api' });
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(response.allowed, true, JSON.stringify(response.status));
    assert.deepEqual(response.warnings, [
      'shutdown-manager: replaced the preStop hook of "api" with a wait for Envoy\'s drain',
    ]);
    const secret = token(pod);
    assert.deepEqual(container(pod, 'api').lifecycle.preStop, waitHook(secret));
    assert.deepEqual(container(pod, 'worker').lifecycle.preStop, waitHook(secret));
    assert.deepEqual(container(pod, 'shutdown-manager').lifecycle.preStop, waitHook(secret));
    assert.equal(container(pod, 'envoy').lifecycle.preStop.httpGet.path, '/shutdown', "only Envoy's hook starts the drain");
    const original = review.request.object;
    for (const name of ['api', 'worker']) {
      const { lifecycle: _replaced, ...rest } = container(pod, name);
      const { lifecycle: _own, ...before } = container(original, name);
      assert.deepEqual(rest, before, `${name} is otherwise unchanged`);
    }
    assert.deepEqual(JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']).waitContainers, ['api', 'worker']);

    review.request.object = pod;
    assert.equal((await admitReview(webhook, review)).response.patch, undefined, 'injecting again changes nothing');
  });

  test('as a native sidecar, the app containers still wait (the sidecar outlives them)', async () => {
    const { response, pod } = await admitReview(webhook, await appPod({ 'shutdown-manager.io/wait-containers': 'worker', 'shutdown-manager.io/native-sidecar': 'true' }));
    assert.equal(response.allowed, true);
    assert.equal(pod.spec.initContainers.at(-1).name, 'shutdown-manager');
    assert.deepEqual(container(pod, 'worker').lifecycle.preStop, waitHook(token(pod)));
    assert.equal(container(pod, 'api').lifecycle.preStop.exec.command[0], 'sleep', 'a container not named keeps its hook');
  });

  test('without the annotation, no app container is touched', async () => {
    const review = await appPod({});
    const { pod } = await admitReview(webhook, review);
    assert.deepEqual(container(pod, 'api'), container(review.request.object, 'api'));
    assert.equal(container(pod, 'worker').lifecycle, undefined);
    assert.equal(JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']).waitContainers, undefined);
  });

  test('with --protect-shutdown=false the hook carries no token, like the others', async () => {
    const open = await startTestWebhook(['--pod-selector=example.com/envoy-sidecar', '--protect-shutdown=false']);
    try {
      const review = await appPod({ 'shutdown-manager.io/wait-containers': 'worker' });
      const result = await postReview(open, review);
      const operations = JSON.parse(Buffer.from(result.json().response.patch, 'base64').toString('utf8'));
      const pod = jsonPatch.applyPatch(structuredClone(review.request.object), operations, true, false).newDocument;
      assert.deepEqual(container(pod, 'worker').lifecycle.preStop, { httpGet: { path: '/wait', port: 8090, scheme: 'HTTP' } });
    } finally {
      await open.close();
    }
  });

  const denied: Array<[string, string]> = [
    [
      'api,wrker',
      'annotation shutdown-manager.io/wait-containers: "api,wrker" is not valid; expected comma-separated names of the pod\'s containers other than Envoy ("api", "worker"), but there is no container "wrker"',
    ],
    [
      'envoy',
      'annotation shutdown-manager.io/wait-containers: "envoy" is not valid; expected comma-separated names of the pod\'s containers other than Envoy ("api", "worker"), but "envoy" is the Envoy container, whose own hook starts the drain',
    ],
    [
      'shutdown-manager, envoy',
      'but there is no container "shutdown-manager"; "envoy" is the Envoy container, whose own hook starts the drain',
    ],
  ];
  for (const [value, message] of denied) {
    test(`${JSON.stringify(value)} denies the pod, naming the annotation, the value and the accepted names`, async () => {
      const { response } = await admitReview(webhook, await appPod({ 'shutdown-manager.io/wait-containers': value }));
      assert.equal(response.allowed, false);
      assert.equal(response.status.code, 400);
      assert.ok(response.status.message.includes(message), response.status.message);
    });
  }

  test('a missing name is denied together with the other bad annotations', async () => {
    const { response } = await admitReview(webhook, 
      await appPod({ 'shutdown-manager.io/wait-containers': 'nope', 'shutdown-manager.io/check-delay': 'soon', 'shutdown-manager.io/sidecar-cpu-limit': '1 core' }),
    );
    assert.equal(response.allowed, false);
    for (const part of ['shutdown-manager.io/wait-containers: "nope"', 'shutdown-manager.io/check-delay: "soon"', 'shutdown-manager.io/sidecar-cpu-limit: "1 core"']) {
      assert.ok(response.status.message.includes(part), `${part} in ${response.status.message}`);
    }
  });
});
