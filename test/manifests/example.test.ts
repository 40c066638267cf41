/** manifests/example: an Envoy the sidecar can drain, and annotations the webhook accepts. */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { ANNOTATION_PREFIX, ANNOTATIONS } from '../../src/config/annotation-names.js';
import { resolvePodDrainPlan } from '../../src/config/annotations.js';
import { boolean } from '../../src/config/values.js';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { injectPod } from '../../src/inject/injector.js';
import type { V1Pod } from '@kubernetes/client-node';
import {
  MANIFESTS_DIR,
  findOne,
  get,
  getArray,
  getObject,
  getString,
  isObject,
  resolveContainerPort,
  resolveKustomization,
  selects,
  type JsonObject,
} from '../support/manifests.js';

const EXAMPLE_DIR = join(MANIFESTS_DIR, 'example');
const docs = await resolveKustomization(EXAMPLE_DIR);
const deployment = findOne(docs, 'Deployment');
const template = getObject(deployment, ['spec', 'template']);
const envoy = (getArray(template, ['spec', 'containers']) as JsonObject[]).find((c) => c.name === 'envoy');
const defaults = parseWebhookConfig([], {}).injection.defaults;

function podAnnotations(): Record<string, string> {
  return (getObject(template, ['metadata']).annotations ?? {}) as Record<string, string>;
}

/** The ConfigMap the Envoy container reads its --config-path from, parsed. */
function bootstrap(): JsonObject {
  assert.ok(envoy, 'the example has an Envoy container');
  const args = getArray(envoy, ['args']) as string[];
  const configPath = args[args.indexOf('--config-path') + 1];
  assert.ok(configPath, 'envoy is started with --config-path');
  const mount = (getArray(envoy, ['volumeMounts']) as JsonObject[]).find((m) => configPath.startsWith(`${String(m.mountPath)}/`));
  assert.ok(mount, `${configPath} is on a mounted volume`);
  const volume = (getArray(template, ['spec', 'volumes']) as JsonObject[]).find((v) => v.name === mount.name);
  const configMap = findOne(docs, 'ConfigMap', getString(volume, ['configMap', 'name']));
  const key = configPath.slice(String(mount.mountPath).length + 1);
  const parsed: unknown = parse(getString(configMap, ['data', key]));
  assert.ok(isObject(parsed), 'the bootstrap is a YAML mapping');
  return parsed;
}

describe('example Envoy', () => {
  it('is a container named envoy running the Envoy image, in the example namespace', () => {
    assert.ok(envoy, 'a container named envoy');
    assert.match(getString(envoy, ['image']), /^envoyproxy\/envoy:v1\.\d+/);
    const namespace = getString(deployment, ['metadata', 'namespace']);
    for (const { value, file } of docs) {
      if (value.kind !== 'Namespace') assert.equal(get(value, ['metadata', 'namespace']), namespace, file);
    }
    assert.equal(getString(template, ['metadata', 'labels', 'app']), 'envoy');
    assert.equal(getString(deployment, ['spec', 'selector', 'matchLabels', 'app']), 'envoy');
  });

  it('serves admin on 127.0.0.1 at the port the drain plan uses', () => {
    const { plan, unknownAnnotations } = resolvePodDrainPlan(podAnnotations(), defaults, undefined);
    assert.deepEqual(unknownAnnotations, []);
    const address = getObject(bootstrap(), ['admin', 'address', 'socket_address']);
    assert.equal(address.address, '127.0.0.1');
    assert.equal(address.port_value, plan['admin-port']);
  });

  it('listens on the container port the Service targets, with readiness answered by that listener', () => {
    assert.ok(envoy, 'the example has an Envoy container');
    const listeners = getArray(bootstrap(), ['static_resources', 'listeners']) as JsonObject[];
    const listenerPorts = listeners.map((l) => get(l, ['address', 'socket_address', 'port_value']));
    const service = findOne(docs, 'Service');
    for (const port of getArray(service, ['spec', 'ports']) as JsonObject[]) {
      assert.ok(listenerPorts.includes(resolveContainerPort(envoy, port.targetPort)), 'the Service reaches a listener');
    }
    const probe = getObject(envoy, ['readinessProbe', 'httpGet']);
    const probePort = resolveContainerPort(envoy, probe.port);
    assert.ok(listenerPorts.includes(probePort), 'readiness goes to a listener: admin is on loopback only');
    // The listener must answer the probe path itself, so that readiness fails once a drain starts.
    const text = JSON.stringify(listeners);
    assert.ok(text.includes('envoy.filters.http.health_check'), 'the listener has a health_check filter');
    assert.ok(text.includes(JSON.stringify({ exact: probe.path })), `the health_check filter matches ${String(probe.path)}`);
  });

  it("leaves the sidecar's port free", () => {
    assert.ok(envoy, 'the example has an Envoy container');
    const { plan } = resolvePodDrainPlan(podAnnotations(), defaults, undefined);
    const ports = (getArray(envoy, ['ports']) as JsonObject[]).map((p) => p.containerPort);
    assert.ok(!ports.includes(plan['serve-port']), `port ${plan['serve-port']} is the shutdown-manager's`);
  });

  it('sets annotations the webhook accepts, all under its prefix and none reserved for the webhook', () => {
    const annotations = podAnnotations();
    const ours = Object.keys(annotations).filter((key) => key.startsWith(ANNOTATION_PREFIX));
    assert.ok(ours.length > 0, 'the example shows at least one override');
    assert.ok(!ours.includes(ANNOTATIONS.status), `${ANNOTATIONS.status} is written by the webhook`);
    const { plan } = resolvePodDrainPlan(annotations, defaults, undefined);
    assert.equal(plan['check-delay'], 15_000);
    assert.equal(plan['termination-grace-period'], 120);
  });

  it('documents, in comments, only annotations that exist and values the webhook accepts', async () => {
    const text = await readFile(join(EXAMPLE_DIR, 'deployment.yaml'), 'utf8');
    const documented = Object.fromEntries(
      [...text.matchAll(/^\s*#\s*(shutdown-manager\.io\/[a-z-]+):\s*"([^"]*)"/gm)].map(([, key, value]) => [key, value]),
    ) as Record<string, string>;
    assert.ok(Object.keys(documented).length >= 6, 'the drain overrides are documented');
    // Numbers and durations are checked by the drain plan; the switches are plain booleans.
    const { unknownAnnotations } = resolvePodDrainPlan(documented, defaults, undefined);
    assert.deepEqual(unknownAnnotations, []);
    for (const key of [ANNOTATIONS.inject, ANNOTATIONS.nativeSidecar]) {
      const value = documented[key];
      assert.ok(value !== undefined, `${key} is documented`);
      assert.notEqual(boolean.parse(value), undefined, `${key}: ${value}`);
    }
  });
});

describe('example NetworkPolicy of the sidecar port', () => {
  const policy = findOne(docs, 'NetworkPolicy');
  const rules = getArray(policy, ['spec', 'ingress']) as JsonObject[];

  /** The example's pod as the webhook injects it: every container, the sidecar included. */
  function injectedContainers(extraAnnotations: Record<string, string> = {}): JsonObject[] {
    const metadata = getObject(template, ['metadata']);
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { ...metadata, annotations: { ...podAnnotations(), ...extraAnnotations }, name: 'envoy-1', namespace: get(deployment, ['metadata', 'namespace']) },
      spec: structuredClone(getObject(template, ['spec'])),
    } as unknown as V1Pod;
    const outcome = injectPod(pod, parseWebhookConfig([], {}).injection, 'token');
    assert.equal(outcome.action, 'inject', JSON.stringify(outcome));
    const spec = (outcome as { pod: V1Pod }).pod.spec as unknown as JsonObject;
    return [...((spec.containers ?? []) as JsonObject[]), ...((spec.initContainers ?? []) as JsonObject[])];
  }

  /** A policy port as the number it opens on the injected pod: a number, or the name of a port of one of its containers. */
  function portNumber(containers: readonly JsonObject[], port: unknown): number {
    if (typeof port === 'number') return port;
    const owner = containers.find((c) => ((c.ports ?? []) as JsonObject[]).some((p) => p.name === port));
    assert.ok(owner, `no container of the injected pod has a port named ${String(port)}`);
    return resolveContainerPort(owner, port);
  }

  function sidecarPort(containers: readonly JsonObject[]): number {
    const sidecar = containers.find((c) => c.name === SIDECAR_CONTAINER_NAME);
    assert.ok(sidecar, 'the example is injected');
    const ports = getArray(sidecar, ['ports']) as JsonObject[];
    assert.equal(ports.length, 1);
    return (ports[0] as JsonObject).containerPort as number;
  }

  it("selects the example's Envoy pods, in their namespace, for ingress only", () => {
    assert.equal(get(policy, ['metadata', 'namespace']), get(deployment, ['metadata', 'namespace']));
    assert.equal(selects(getObject(policy, ['spec', 'podSelector']), getObject(template, ['metadata', 'labels']) as Record<string, string>), true);
    assert.deepEqual(getArray(policy, ['spec', 'policyTypes']), ['Ingress']);
  });

  it('names ports in every rule: none opens every port of the pod', () => {
    assert.ok(rules.length > 0, 'the policy has rules');
    for (const rule of rules) {
      const ports = getArray(rule, ['ports']) as JsonObject[];
      assert.ok(ports.length > 0, JSON.stringify(rule));
      for (const port of ports) assert.equal(port.endPort, undefined, 'single ports: a range could take in the sidecar port');
    }
  });

  for (const [variant, annotations] of [
    ['a regular sidecar container', {}],
    ['a native sidecar (an init container)', { [ANNOTATIONS.nativeSidecar]: 'true' }],
  ] as const) {
    it(`lets no pod reach the injected sidecar's port but Prometheus, from a namespace named by the API server's label: ${variant}`, () => {
      const containers = injectedContainers(annotations);
      const serve = sidecarPort(containers);
      const opening = rules.filter((rule) => (getArray(rule, ['ports']) as JsonObject[]).some((p) => portNumber(containers, p.port) === serve));
      assert.equal(opening.length, 1, `one rule opens port ${serve}`);
      const peers = getArray(opening[0], ['from']) as JsonObject[];
      assert.ok(peers.length > 0, 'a `from`: without one the port is open to every pod');
      for (const peer of peers) {
        assert.equal(peer.ipBlock, undefined);
        assert.equal(typeof getString(peer, ['namespaceSelector', 'matchLabels', 'kubernetes.io/metadata.name']), 'string');
        assert.ok(Object.keys(getObject(peer, ['podSelector', 'matchLabels'])).length > 0, 'pods of that namespace, by label');
      }
    });

    it(`leaves every port of Envoy open to all: ${variant}`, () => {
      const containers = injectedContainers(annotations);
      const open = new Set(rules.filter((rule) => rule.from === undefined).flatMap((rule) => (getArray(rule, ['ports']) as JsonObject[]).map((p) => portNumber(containers, p.port))));
      const envoyPorts = (getArray(containers.find((c) => c.name === 'envoy') as JsonObject, ['ports']) as JsonObject[]).map((p) => p.containerPort);
      assert.ok(envoyPorts.length > 0, 'Envoy has ports');
      for (const port of envoyPorts) assert.ok(open.has(port as number), `Envoy's port ${String(port)} is open`);
      assert.ok(!open.has(sidecarPort(containers)), 'the sidecar port is not among them');
    });
  }
});
