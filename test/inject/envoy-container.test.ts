/**
 * Which container of a pod is Envoy, and which of its probes the kubelet keeps sending while it terminates
 * (src/inject/envoy-container.ts), as pure functions. The injector (src/inject/injector.ts) admits a pod
 * unchanged, with the reason as a warning, when no container is found; an annotation naming no container is
 * a bad value (a ConfigError, a denial).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Container, V1Probe } from '@kubernetes/client-node';
import { ConfigError } from '../../src/config/errors.js';
import { envoyProbes, findEnvoyContainer } from '../../src/inject/envoy-container.js';

const ANNOTATION = 'shutdown-manager.io/envoy-container';
const app: V1Container = { name: 'app', image: 'registry.local/app:1' };
const proxy: V1Container = { name: 'proxy', image: 'envoyproxy/envoy:v1.31.2' };

describe('findEnvoyContainer', () => {
  test('the container the annotation names wins over one called envoy and over an Envoy image', () => {
    const containers = [proxy, { name: 'envoy', image: 'envoyproxy/envoy:v1.31.2' }, app];
    assert.deepEqual(findEnvoyContainer(containers, { [ANNOTATION]: 'app' }), { found: true, index: 2 });
  });

  test('an annotation naming no container is a ConfigError listing the names the pod has', () => {
    assert.throws(
      () => findEnvoyContainer([app, proxy], { [ANNOTATION]: 'envoy' }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError, 'a ConfigError');
        assert.deepEqual([error.source, error.value, error.setting], [`annotation ${ANNOTATION}`, 'envoy', 'envoy-container']);
        assert.match(error.message, /the name of one of the pod's containers: "app", "proxy"$/);
        return true;
      },
    );
    assert.throws(() => findEnvoyContainer([], { [ANNOTATION]: 'envoy' }), /containers: \(none\)$/);
  });

  test('without the annotation, the container called envoy, whatever its image', () => {
    assert.deepEqual(findEnvoyContainer([proxy, { name: 'envoy', image: 'registry.local/edge:3' }], undefined), { found: true, index: 1 });
    assert.deepEqual(findEnvoyContainer([proxy, { name: 'envoy' }], {}), { found: true, index: 1 }, 'other annotations change nothing');
  });

  test('else the only container whose image mentions envoy, in any case, the sidecar aside', () => {
    assert.deepEqual(findEnvoyContainer([app, proxy], undefined), { found: true, index: 1 });
    assert.deepEqual(findEnvoyContainer([{ name: 'edge', image: 'registry.local/Envoy-Custom:2' }, app], undefined), { found: true, index: 0 });
    const sidecar: V1Container = { name: 'shutdown-manager', image: 'ghcr.io/envoy-shutdown-manager/envoy-shutdown-manager:0.1.0' };
    assert.deepEqual(findEnvoyContainer([sidecar, proxy], undefined), { found: true, index: 1 }, "the sidecar's image says envoy too");
  });

  test('none or several: not found, with a reason that gives the annotation', () => {
    assert.deepEqual(findEnvoyContainer([app, { name: 'no-image' }], undefined), {
      found: false,
      reason: `no Envoy container found; set annotation ${ANNOTATION}`,
    });
    assert.deepEqual(findEnvoyContainer([proxy, { ...proxy, name: 'proxy-2' }], undefined), {
      found: false,
      reason: `2 containers run an envoy image; set annotation ${ANNOTATION}`,
    });
    assert.deepEqual(findEnvoyContainer([], undefined).found, false, 'an empty pod has none');
  });
});

describe('envoyProbes', () => {
  const envoy = (probes: { livenessProbe?: V1Probe; readinessProbe?: V1Probe; startupProbe?: V1Probe }): V1Container => ({
    name: 'envoy',
    ports: [
      { name: 'http', containerPort: 8080 },
      { name: 'admin', containerPort: 9901 },
    ],
    ...probes,
  });

  test('liveness and readiness ports with their periods (default 10 s), sorted; a startup probe ends before termination', () => {
    const probes = envoyProbes(
      envoy({
        readinessProbe: { httpGet: { path: '/ready', port: 'admin' }, periodSeconds: 3 },
        livenessProbe: { tcpSocket: { port: 8080 } },
        startupProbe: { httpGet: { path: '/ready', port: 8443 } },
      }),
    );
    assert.deepEqual(probes, [
      { port: 8080, periodMs: 10_000 },
      { port: 9901, periodMs: 3_000 },
    ]);
  });

  test('a gRPC probe counts; the same port probed twice is listed twice, by period', () => {
    const probes = envoyProbes(envoy({ livenessProbe: { grpc: { port: 8080 }, periodSeconds: 20 }, readinessProbe: { httpGet: { port: 'http' }, periodSeconds: 5 } }));
    assert.deepEqual(probes, [
      { port: 8080, periodMs: 5_000 },
      { port: 8080, periodMs: 20_000 },
    ]);
  });

  test('left out: a port name the container does not declare, a port out of range; a bad period is the default', () => {
    const probes = envoyProbes(
      envoy({
        livenessProbe: { httpGet: { port: 'metrics' }, periodSeconds: 0 },
        readinessProbe: { tcpSocket: { port: 70_000 }, periodSeconds: 1.5 },
      }),
    );
    assert.deepEqual(probes, []);
    const defaulted = envoyProbes(envoy({ readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 0 } }));
    assert.deepEqual(defaulted, [{ port: 8080, periodMs: 10_000 }], 'control: the same probe on a real port is kept, at 10 s');
  });

  test('a container without probes has none', () => {
    assert.deepEqual(envoyProbes({ name: 'envoy' }), []);
  });
});
