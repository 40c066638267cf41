/**
 * Many generated pod shapes: the patch always applies to the original, the result has the sidecar exactly
 * once, the input is never modified, and injecting the result again changes nothing. The patch is exactly
 * fast-json-patch's `compare` (which src/inject/patch.ts reimplements without its deep clone).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { V1Container, V1LifecycleHandler, V1Pod } from '@kubernetes/client-node';
import fc from 'fast-check';
import jsonPatch from 'fast-json-patch';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { injectPod } from '../../src/inject/injector.js';
import { podPatch } from '../../src/inject/patch.js';
import { postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

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
const command = fc.constantFrom<string[]>(['envoy'], ['/usr/local/bin/envoy'], ['/bin/sh', '-c'], ['/docker-entrypoint.sh']);
/** Now and then Envoy's drain flags, in every form the injector must recognise, or the word envoy first. */
const arg = fc.oneof(
  { arbitrary: fc.string(), weight: 3 },
  {
    arbitrary: fc.constantFrom('envoy', '-c', '--drain-time-s', '600', '--drain-strategy', 'immediate', '--drain-time-s=30', '--drain-strategy gradual'),
    weight: 2,
  },
);
const container: fc.Arbitrary<V1Container> = fc.record(
  {
    name: containerName,
    image,
    command,
    ports: fc.array(containerPort, { maxLength: 3 }),
    lifecycle: fc.record({ preStop }),
    args: fc.array(arg, { maxLength: 4 }),
  },
  { requiredKeys: ['name'] },
);
const volume = fc.record({
  // Now and then the sidecar's own state volume, which must deny the pod.
  name: fc.oneof({ arbitrary: name, weight: 19 }, { arbitrary: fc.constant('shutdown-manager-state'), weight: 1 }),
  emptyDir: fc.constant({}),
});
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
      volumes: fc.uniqueArray(volume, { maxLength: 2, selector: (v) => v.name }),
      grace: fc.option(fc.integer({ min: 0, max: 3600 }), { nil: undefined }),
      hasAnnotations: fc.boolean(),
      /** Name the app containers (never Envoy: not called envoy, no envoy image) in wait-containers. */
      waitForApps: fc.boolean(),
    },
    { requiredKeys: ['generateName', 'labels', 'annotations', 'containers', 'hasAnnotations'] },
  )
  .map((shape) => {
    const metadata: V1Pod['metadata'] = { generateName: shape.generateName, labels: { ...shape.labels, app: 'envoy' } };
    if (shape.hasAnnotations) metadata.annotations = { ...shape.annotations[0], ...shape.annotations[1] };
    const apps = shape.containers.filter((c) => c.name !== 'envoy' && !(c.image ?? '').includes('envoy')).map((c) => c.name);
    if (shape.waitForApps && apps.length > 0) metadata.annotations = { ...metadata.annotations, 'shutdown-manager.io/wait-containers': apps.join(',') };
    const spec: V1Pod['spec'] = { containers: shape.containers };
    if (shape.initContainers !== undefined) spec.initContainers = shape.initContainers;
    if (shape.volumes !== undefined) spec.volumes = shape.volumes;
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

/** How often `flag` is given in an argv, in any form Envoy or a shell would read. */
function occurrences(argv: readonly string[], flag: string): number {
  const tokens = argv.flatMap((element) => element.trim().split(/\s+/));
  return tokens.filter((token) => token === flag || token.startsWith(`${flag}=`)).length;
}

/**
 * What injection must do to Envoy and the sidecar: hooks on the right paths, the state volume once, and
 * Envoy's command untouched with its args only appended to, each drain flag at most once (Envoy refuses a
 * repeated flag and would not start).
 */
function assertInjectedShape(original: V1Pod, injected: V1Pod): boolean {
  const status = JSON.parse(injected.metadata?.annotations?.['shutdown-manager.io/status'] ?? '{}') as { envoyContainer: string; native: boolean };
  const index = injected.spec?.containers.findIndex((c) => c.name === status.envoyContainer) ?? -1;
  const before = original.spec?.containers[index] as V1Container;
  const after = injected.spec?.containers[index] as V1Container;
  assert.equal(after.lifecycle?.preStop?.httpGet?.path, '/shutdown');
  assert.deepEqual(after.command, before.command);
  assert.deepEqual((after.args ?? []).slice(0, (before.args ?? []).length), before.args ?? []);
  const argvBefore = [...(before.command ?? []), ...(before.args ?? [])];
  const argv = [...(after.command ?? []), ...(after.args ?? [])];
  const flags = ['--drain-time-s', '--drain-strategy'];
  const added = flags.some((flag) => occurrences(argv, flag) > occurrences(argvBefore, flag));
  if (added) {
    for (const flag of flags) {
      assert.equal(occurrences(argvBefore, flag), 0, `${flag} added to args that had one: ${argv.join(' ')}`);
      assert.equal(occurrences(argv, flag), 1, argv.join(' '));
    }
  } else assert.deepEqual(after.args, before.args);

  const sidecar = [...(injected.spec?.containers ?? []), ...(injected.spec?.initContainers ?? [])].find((c) => c.name === 'shutdown-manager');
  assert.equal(sidecar?.lifecycle?.preStop?.httpGet?.path, status.native ? undefined : '/wait');

  // Exactly the named app containers wait for the drain (with the pod's token); the others keep their hooks.
  const waiting = new Set((original.metadata?.annotations?.['shutdown-manager.io/wait-containers'] ?? '').split(',').filter((n) => n !== ''));
  assert.deepEqual([...((status as { waitContainers?: string[] }).waitContainers ?? [])].sort(), [...waiting].sort());
  for (const [i, container] of (injected.spec?.containers ?? []).entries()) {
    if (container.name === 'shutdown-manager' || i === index) continue;
    if (waiting.has(container.name)) assert.deepEqual(container.lifecycle?.preStop, { ...after.lifecycle?.preStop, httpGet: { ...after.lifecycle?.preStop?.httpGet, path: '/wait' } });
    else assert.deepEqual(container.lifecycle, original.spec?.containers[i]?.lifecycle);
  }
  assert.equal(injected.spec?.volumes?.filter((v) => v.name === 'shutdown-manager-state').length, 1);
  return added;
}

describe('the pure injector on generated pods', () => {
  test('patch applies, sidecar once, input untouched, re-injection is a no-op', () => {
    let injected = 0;
    let flagsAdded = 0;
    let waited = 0;
    fc.assert(
      fc.property(pod, (original) => {
        const frozen = deepFreeze(structuredClone(original));
        const outcome = injectPod(frozen, config, 'token-1'); // a write to the input would throw on the frozen pod
        assert.deepEqual(frozen, original);
        if (outcome.action === 'deny') {
          assert.match(outcome.message, /serve-port|check delay|pod volume: "shutdown-manager-state"/);
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
        if (assertInjectedShape(original, patched)) flagsAdded += 1;
        if (original.metadata?.annotations?.['shutdown-manager.io/wait-containers'] !== undefined) waited += 1;
        const asked = original.metadata?.annotations?.['shutdown-manager.io/termination-grace-period'];
        if (asked === undefined) {
          assert.ok((patched.spec?.terminationGracePeriodSeconds ?? 0) >= (original.spec?.terminationGracePeriodSeconds ?? 30), 'the grace period never shrinks');
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
    assert.ok(flagsAdded > 20, `Envoy's drain flags were added to only ${flagsAdded} pods: the generator is too narrow`);
    assert.ok(waited > 20, `only ${waited} injected pods had wait-containers: the generator is too narrow`);
  });
});

/** Webhook settings that change what is added: no token (no env, hooks without headers), native sidecars, Envoy's args left alone. */
const configs = [
  config,
  parseWebhookConfig(['--protect-shutdown=false'], {}).injection,
  parseWebhookConfig(['--native-sidecar=true', '--envoy-drain-flags=false'], {}).injection,
  parseWebhookConfig(['--native-sidecar=true', '--protect-shutdown=false', '--sidecar-image=example.com/sm:1'], {}).injection,
];

/** Plain JSON objects, and a second one that shares some of the first's subtrees, as the copy-on-write injector's result does. */
const jsonObject = fc
  .dictionary(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 })
  .map((value) => JSON.parse(JSON.stringify(value)) as Record<string, unknown>);
const derived = jsonObject.chain((base) =>
  fc.tuple(fc.constant(base), fc.subarray(Object.keys(base)), jsonObject).map(([original, kept, extra]) => {
    const result: Record<string, unknown> = { ...extra };
    for (const key of kept) result[key] = original[key];
    return [original, result] as const;
  }),
);

describe('the patch', () => {
  test("is compare's, operation for operation and byte for byte, on generated pods and settings", () => {
    fc.assert(
      fc.property(pod, fc.constantFrom(...configs), fc.string({ minLength: 1, maxLength: 32 }), (original, settings, token) => {
        const outcome = injectPod(original, settings, token);
        if (outcome.action !== 'inject') return;
        const operations = podPatch(original, outcome.pod);
        const expected = jsonPatch.compare(original, outcome.pod);
        assert.deepEqual(operations, expected);
        assert.equal(JSON.stringify(operations), JSON.stringify(expected));
        const patched = jsonPatch.applyPatch(structuredClone(original), structuredClone(operations), true, false).newDocument;
        assert.deepEqual(patched, jsonPatch.applyPatch(structuredClone(original), expected, true, false).newDocument);
        assert.deepEqual(patched, JSON.parse(JSON.stringify(outcome.pod)));
      }),
      { numRuns: 400 },
    );
  });

  test("is compare's on any two JSON objects, shared subtrees or not", () => {
    fc.assert(
      fc.property(fc.oneof(fc.tuple(jsonObject, jsonObject), derived), ([before, after]) => {
        const operations = podPatch(before, after);
        assert.deepEqual(operations, jsonPatch.compare(before, after));
        assert.deepEqual(jsonPatch.applyPatch(structuredClone(before), structuredClone(operations), true, false).newDocument, after);
      }),
      { numRuns: 500 },
    );
  });

  test('pods injected with the same plan share the sidecar template, never its token', () => {
    const envoyPod: V1Pod = {
      metadata: { name: 'envoy-0', labels: { app: 'envoy' } },
      spec: { containers: [{ name: 'envoy', image: 'envoyproxy/envoy:v1.31.2', args: ['-c', '/config/envoy.yaml'] }] },
    };
    const sidecarOf = (outcome: ReturnType<typeof injectPod>): V1Container => {
      assert.equal(outcome.action, 'inject');
      const found = outcome.action === 'inject' ? outcome.pod.spec?.containers.find((c) => c.name === 'shutdown-manager') : undefined;
      assert.ok(found !== undefined, 'the sidecar was found');
      return found;
    };
    const first = sidecarOf(injectPod(envoyPod, config, 'token-a'));
    const firstJson = JSON.stringify(first);
    const second = sidecarOf(injectPod(envoyPod, config, 'token-b'));
    const heap = { name: 'NODE_OPTIONS', value: '--max-semi-space-size=1' };
    assert.deepEqual(first.env, [heap, { name: 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN', value: 'token-a' }]);
    assert.deepEqual(second.env, [heap, { name: 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN', value: 'token-b' }]);
    assert.deepEqual(second.lifecycle?.preStop?.httpGet?.httpHeaders, [{ name: 'Authorization', value: 'Bearer token-b' }]);
    assert.equal(JSON.stringify(first), firstJson, 'the second pod changed the first one');
    assert.equal(second.args, first.args, 'the args are built once per plan');
    // Shared between pods, so frozen: a write anywhere throws instead of reaching every later pod.
    assert.throws(() => (second.args as string[]).push('--oops'), TypeError);
    assert.throws(() => {
      (second.securityContext as { runAsUser: number }).runAsUser = 0;
    }, TypeError);
    const unprotected = sidecarOf(injectPod(envoyPod, configs[1] as typeof config, 'ignored'));
    assert.deepEqual(unprotected.env, [heap]);
    assert.deepEqual(unprotected.lifecycle?.preStop, { httpGet: { path: '/wait', port: 8090, scheme: 'HTTP' } });
    assert.deepEqual(Object.keys(first), Object.keys(second));
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
