/**
 * The drain settings keep one shape from the injector to the sidecar: the flags the injector writes into the
 * pod are read back by the sidecar as the very values the injector resolved, in an order that does not change
 * between releases (pod specs are compared by people and by GitOps diffs). And the settings of a pod without
 * annotations of ours, resolved once per configuration, are those the full resolution gives.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATION_PREFIX } from '../../src/config/annotation-names.js';
import { resolvePodDrainPlan } from '../../src/config/annotations.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { injectPod } from '../../src/inject/injector.js';
import { SIDECAR_PATHS } from '../../src/config/endpoints.js';
import { buildSidecarContainer, sidecarArgs } from '../../src/inject/sidecar.js';

const config = parseWebhookConfig([], {}).injection;
const review = JSON.parse(readFileSync(new URL('../fixtures/admission/deployment-envoy-pod.json', import.meta.url), 'utf8')) as {
  request: { object: V1Pod };
};

describe('sidecarArgs', () => {
  test('puts --listeners, when restricted, where it always stood: just before --drain-timeout', () => {
    // The order of the default flags is pinned by test/webhook/mutate.test.ts.
    const unrestricted = sidecarArgs(config.defaults);
    assert.ok(!unrestricted.some((arg) => arg.startsWith('--listeners')), 'no --listeners when every listener counts');
    const { plan } = resolvePodDrainPlan({ [`${ANNOTATION_PREFIX}listeners`]: 'ingress_http,ingress_https' }, config.defaults, undefined);
    const deadlineAt = unrestricted.findIndex((arg) => arg.startsWith('--drain-timeout='));
    assert.ok(deadlineAt > 0, 'finds --drain-timeout among the default args');
    assert.deepEqual(sidecarArgs(plan), [
      ...unrestricted.slice(0, deadlineAt),
      '--listeners=ingress_http,ingress_https',
      ...unrestricted.slice(deadlineAt),
    ]);
  });

  test('the sidecar reads back exactly the values the injector resolved', () => {
    const annotations = {
      [`${ANNOTATION_PREFIX}check-interval`]: '250ms',
      [`${ANNOTATION_PREFIX}check-delay`]: '1m30s',
      [`${ANNOTATION_PREFIX}drain-delay`]: '5s',
      [`${ANNOTATION_PREFIX}min-open-connections`]: '3',
      [`${ANNOTATION_PREFIX}envoy-admin-port`]: '19000',
      [`${ANNOTATION_PREFIX}listeners`]: 'a, b',
      [`${ANNOTATION_PREFIX}recover-envoy`]: 'false',
    };
    const { plan } = resolvePodDrainPlan(annotations, config.defaults, 600);
    const [mode, ...flags] = sidecarArgs(plan);
    assert.equal(mode, 'mode=sidecar');
    const { 'termination-grace-period': _notTheSidecars, ...passed } = plan;
    const read = parseSidecarConfig(flags, {});
    for (const [name, value] of Object.entries(passed)) assert.deepEqual(read[name as keyof typeof read], value, name);
  });
});

describe('settings of a pod without annotations of ours', () => {
  for (const gracePeriod of [undefined, 30, 600]) {
    test(`are those of the full resolution (grace period ${gracePeriod ?? 'unset'})`, () => {
      const pod = structuredClone(review.request.object);
      pod.spec = { ...pod.spec, containers: pod.spec?.containers ?? [], terminationGracePeriodSeconds: gracePeriod };
      // An annotation of ours that restates a default takes the uncached path to the same settings.
      const annotated = structuredClone(pod);
      annotated.metadata = { ...annotated.metadata, annotations: { ...annotated.metadata?.annotations, [`${ANNOTATION_PREFIX}check-delay`]: '1m' } };
      for (let round = 0; round < 2; round += 1) {
        const cached = injectPod(pod, config, 'token');
        const resolved = injectPod(annotated, config, 'token');
        assert.ok(cached.action === 'inject' && resolved.action === 'inject', 'both plans inject');
        assert.deepEqual(cached.plan, resolved.plan);
        assert.deepEqual(cached.pod.spec, resolved.pod.spec);
        assert.ok(Object.isFrozen(cached.plan), 'shared between pods, so frozen');
      }
    });
  }
});

describe("the sidecar's probes", () => {
  const { plan } = resolvePodDrainPlan({ [`${ANNOTATION_PREFIX}serve-port`]: '9095' }, config.defaults, undefined);
  const build = (native: boolean) => buildSidecarContainer(plan, config, { native, token: 'token', resources: config.sidecarResources });

  test('readiness asks /ready on the serve port, regular and native alike', () => {
    for (const native of [false, true]) {
      const { readinessProbe } = build(native);
      assert.deepEqual(readinessProbe?.httpGet, { path: SIDECAR_PATHS.ready, port: 9095, scheme: 'HTTP' }, `native: ${native}`);
    }
    assert.deepEqual(build(true).readinessProbe, build(false).readinessProbe);
  });

  test('a starved sidecar is restarted by its liveness probe before its readiness takes the pod out of service', () => {
    const { livenessProbe, readinessProbe } = build(false);
    assert.ok(livenessProbe !== undefined && readinessProbe !== undefined, 'the sidecar has both probes');
    const seconds = (value: number | undefined, fallback: number): number => value ?? fallback;
    // A probe that times out is followed by the next at once when the timeout exceeds the period (the
    // kubelet's ticker keeps one tick), else after the period.
    const failureEvery = (probe: typeof livenessProbe) => Math.max(seconds(probe.periodSeconds, 10), seconds(probe.timeoutSeconds, 1));
    const restartedAfter = seconds(livenessProbe.initialDelaySeconds, 0) + seconds(livenessProbe.failureThreshold, 3) * failureEvery(livenessProbe);
    const unreadyAfter = seconds(readinessProbe.initialDelaySeconds, 0) + seconds(readinessProbe.failureThreshold, 3) * failureEvery(readinessProbe);
    assert.ok(unreadyAfter > restartedAfter, `unready after ${unreadyAfter} s of silence, restarted after ${restartedAfter} s`);
    for (const probe of [livenessProbe, readinessProbe]) {
      assert.ok(seconds(probe.timeoutSeconds, 1) >= 5, 'a sidecar throttled at its CPU limit misses a 1 s timeout');
    }
    assert.ok(seconds(readinessProbe.periodSeconds, 10) <= 2, 'Ready within about two seconds of Envoy answering');
  });
});

describe('declared pollers (annotation shutdown-manager.io/pollers) reach the sidecar as --pollers', () => {
  const argsOf = (annotations: Record<string, string>): string[] => {
    const pod = structuredClone(review.request.object);
    pod.metadata = { ...pod.metadata, annotations: { ...pod.metadata?.annotations, ...annotations } };
    const result = injectPod(pod, config, 'token');
    assert.equal(result.action, 'inject');
    const sidecar = (result.action === 'inject' ? result.pod.spec?.containers ?? [] : []).find((container) => container.name === 'shutdown-manager');
    return sidecar?.args ?? [];
  };

  test('sorted, each with its period (a port alone: every 10s); none without the annotation, so pods keep the spec they had', () => {
    assert.ok(argsOf({ 'shutdown-manager.io/pollers': '8080/15s, 5432' }).includes('--pollers=5432/10s,8080/15s'), 'sorted, a port alone every 10 s');
    assert.equal(argsOf({}).filter((arg) => arg.startsWith('--pollers')).length, 0);
  });

  test('a bad value is refused, naming the annotation and the form', () => {
    const pod = structuredClone(review.request.object);
    pod.metadata = { ...pod.metadata, annotations: { ...pod.metadata?.annotations, 'shutdown-manager.io/pollers': '8080/fast' } };
    const result = injectPod(pod, config, 'token');
    assert.notEqual(result.action, 'inject');
    assert.match(JSON.stringify(result), /shutdown-manager\.io\/pollers.*PORT\/PERIOD/);
  });
});

describe("the kubelet's probes of Envoy, with their periods, are told from clients (--probe-ports)", () => {
  const withProbes = (envoy: Record<string, unknown>): V1Pod => {
    const pod = structuredClone(review.request.object);
    const containers = pod.spec?.containers ?? [];
    const index = containers.findIndex((container) => container.name === 'envoy');
    containers[index] = { ...containers[index], name: 'envoy', ...envoy };
    return pod;
  };
  const probePortsOf = (pod: V1Pod): string | undefined => {
    const result = injectPod(pod, config, 'token');
    assert.equal(result.action, 'inject');
    const sidecar = (result.action === 'inject' ? result.pod.spec?.containers ?? [] : []).find((container) => container.name === 'shutdown-manager');
    return sidecar?.args?.find((arg) => arg.startsWith('--probe-ports='));
  };

  test("Contour's readiness probe on its health listener (8002, by name, every 3 s) and a tcpSocket liveness probe (the default 10 s): each with its period, sorted; the startup probe, done before any drain, left out", () => {
    const pod = withProbes({
      ports: [{ name: 'http', containerPort: 8080 }, { name: 'health', containerPort: 8002 }],
      readinessProbe: { httpGet: { path: '/ready', port: 'health' }, periodSeconds: 3 },
      livenessProbe: { tcpSocket: { port: 8443 } },
      startupProbe: { httpGet: { path: '/ready', port: 8002 } },
    });
    assert.equal(probePortsOf(pod), '--probe-ports=8002/3s,8443/10s');
  });

  test('a readiness and a liveness probe on one traffic port are two probes, each counted', () => {
    const pod = withProbes({
      readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 5 },
      livenessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 20 },
    });
    assert.equal(probePortsOf(pod), '--probe-ports=8080/5s,8080/20s');
  });

  test("none for probes of Envoy's admin port (never counted), for a port name the container does not declare, or without probes", () => {
    assert.equal(probePortsOf(withProbes({ readinessProbe: { httpGet: { path: '/ready', port: 9001 } } })), undefined);
    assert.equal(probePortsOf(withProbes({ readinessProbe: { httpGet: { path: '/ready', port: 'missing' } } })), undefined);
    assert.equal(probePortsOf(withProbes({ readinessProbe: undefined, livenessProbe: undefined })), undefined);
  });
});
