/**
 * Many generated pod shapes: the patch always applies to the original, the result has the sidecar exactly
 * once, the input is never modified, and injecting the result again changes nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1Container, V1LifecycleHandler, V1Pod } from '@kubernetes/client-node';
import fc from 'fast-check';
import jsonPatch from 'fast-json-patch';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { injectPod } from '../../src/inject/injector.js';
import { podPatch } from '../../src/inject/patch.js';
import { postReview, startTestWebhook, type RunningWebhook } from '../webhook/support.js';

const config = parseWebhookConfig([], {}).injection;

const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/);
const image = fc.constantFrom('envoyproxy/envoy:v1.31.2', 'docker.io/envoyproxy/envoy-distroless:v1.30', 'nginx:1.27', 'busybox');
const containerPort = fc.record({
  // Now and then the sidecar's own port, which must deny the pod.
  containerPort: fc.oneof({ arbitrary: fc.integer({ min: 1, max: 65535 }), weight: 9 }, { arbitrary: fc.constant(8090), weight: 1 }),
  name: fc.option(name, { nil: undefined }),
  protocol: fc.constant('TCP'),
});
const preStop = fc.constantFrom<V1LifecycleHandler>(
  { exec: { command: ['sleep', '30'] } },
  { httpGet: { path: '/shutdown', port: 8090, scheme: 'HTTP' } },
  { httpGet: { path: '/quit', port: 'admin' } },
);
const containerName = fc.oneof({ arbitrary: fc.constant('envoy'), weight: 1 }, { arbitrary: name, weight: 2 });
const container: fc.Arbitrary<V1Container> = fc.record(
  {
    name: containerName,
    image,
    ports: fc.array(containerPort, { maxLength: 3 }),
    lifecycle: fc.record({ preStop }),
    args: fc.array(fc.string(), { maxLength: 3 }),
  },
  { requiredKeys: ['name'] },
);
const annotationKey = fc.oneof(
  fc.constantFrom('example.com/team', 'a~b', 'odd/~/key', 'prometheus.io/port', 'kubectl.kubernetes.io/default-container'),
  name,
);
const overrides = fc.record(
  {
    'shutdown-manager.io/check-interval': fc.constantFrom('50ms', '1s', '5s'),
    // 1m with a 30 s grace period leaves no time to poll: denied, as it should be.
    'shutdown-manager.io/check-delay': fc.constantFrom('0s', '10s', '10s', '1m'),
    'shutdown-manager.io/min-open-connections': fc.constantFrom('0', '3'),
    'shutdown-manager.io/termination-grace-period': fc.constantFrom('30', '120', '10m'),
    'shutdown-manager.io/native-sidecar': fc.constantFrom('true', 'false'),
  },
  { requiredKeys: [] },
);
const pod: fc.Arbitrary<V1Pod> = fc
  .record(
    {
      generateName: fc.constant('envoy-'),
      labels: fc.dictionary(name, fc.string({ maxLength: 5 }), { maxKeys: 3 }),
      annotations: fc.tuple(fc.dictionary(annotationKey, fc.string({ maxLength: 8 }), { maxKeys: 3 }), overrides),
      containers: fc.uniqueArray(container, { minLength: 1, maxLength: 4, selector: (c) => c.name }),
      initContainers: fc.uniqueArray(container, { maxLength: 2, selector: (c) => c.name }),
      grace: fc.option(fc.integer({ min: 0, max: 3600 }), { nil: undefined }),
      hasAnnotations: fc.boolean(),
    },
    { requiredKeys: ['generateName', 'labels', 'annotations', 'containers', 'hasAnnotations'] },
  )
  .map((shape) => {
    const metadata: V1Pod['metadata'] = { generateName: shape.generateName, labels: { ...shape.labels, app: 'envoy' } };
    if (shape.hasAnnotations) metadata.annotations = { ...shape.annotations[0], ...shape.annotations[1] };
    const spec: V1Pod['spec'] = { containers: shape.containers };
    if (shape.initContainers !== undefined) spec.initContainers = shape.initContainers;
    if (shape.grace !== undefined) spec.terminationGracePeriodSeconds = shape.grace;
    // As the API server sends it: plain JSON (no undefined members, no null-prototype objects).
    return JSON.parse(JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata, spec })) as V1Pod;
  });

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

function sidecars(result: V1Pod): number {
  const all = [...(result.spec?.containers ?? []), ...(result.spec?.initContainers ?? [])];
  return all.filter((c) => c.name === 'shutdown-manager').length;
}

describe('the pure injector on generated pods', () => {
  test('patch applies, sidecar once, input untouched, re-injection is a no-op', () => {
    let injected = 0;
    fc.assert(
      fc.property(pod, (original) => {
        const frozen = deepFreeze(structuredClone(original));
        const outcome = injectPod(frozen, config, 'token-1'); // a write to the input would throw on the frozen pod
        assert.deepEqual(frozen, original);
        if (outcome.action === 'deny') {
          assert.match(outcome.message, /serve-port|check delay/);
          return;
        }
        if (outcome.action === 'skip') {
          assert.ok(['no-envoy-container', 'hand-configured'].includes(outcome.reason), outcome.reason);
          return;
        }
        injected += 1;
        const patch = podPatch(original, outcome.pod);
        const patched = jsonPatch.applyPatch(structuredClone(original), patch, true, false).newDocument;
        assert.deepEqual(patched, outcome.pod);
        assert.equal(sidecars(patched), 1);
        const asked = original.metadata?.annotations?.['shutdown-manager.io/termination-grace-period'];
        if (asked === undefined) {
          assert.ok((patched.spec?.terminationGracePeriodSeconds ?? 0) >= (original.spec?.terminationGracePeriodSeconds ?? 30));
        } else {
          assert.equal(patched.spec?.terminationGracePeriodSeconds, asked === '10m' ? 600 : Number(asked));
        }
        const again = injectPod(deepFreeze(structuredClone(patched)), config, 'token-2');
        assert.equal(again.action, 'skip');
        assert.equal(again.action === 'skip' && again.reason, 'already-injected');
      }),
      { numRuns: 400 },
    );
    assert.ok(injected > 160, `only ${injected} of 400 generated pods were injected: the generator is too narrow`);
  });
});

describe('the webhook on generated pods, over HTTPS', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  test('every answer echoes the uid and its patch applies to the pod sent', async () => {
    let uid = 0;
    await fc.assert(
      fc.asyncProperty(pod, async (original) => {
        uid += 1;
        const review = {
          apiVersion: 'admission.k8s.io/v1',
          kind: 'AdmissionReview',
          request: { uid: `uid-${uid}`, operation: 'CREATE', kind: { group: '', version: 'v1', kind: 'Pod' }, object: original },
        };
        const result = await postReview(webhook, review);
        assert.equal(result.status, 200, result.text);
        const response = result.json().response;
        assert.equal(response.uid, `uid-${uid}`);
        if (response.patch === undefined) return;
        const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
        const patched = jsonPatch.applyPatch(structuredClone(original), operations, true, false).newDocument;
        assert.equal(sidecars(patched), 1);
      }),
      { numRuns: 60 },
    );
  });
});
