/** The pure core of `check`: API objects in, verdicts and findings out, no cluster. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { certificateFindings } from '../../src/check/certificate.js';
import type { V1Deployment, V1Pod } from '../../src/check/cluster.js';
import { expectationsOf, servingSecretName } from '../../src/check/expectations.js';
import { judgePod } from '../../src/check/pod-state.js';
import { renderText } from '../../src/check/render.js';
import { makeReport } from '../../src/check/report.js';
import { workloadOf } from '../../src/check/pods.js';
import { formatLabelSelector } from '../../src/config/label-selector.js';
import { DEFAULT_SIDECAR_IMAGE, PROJECT_VERSION } from '../../src/config/webhook.js';
import { servingCertificate, SERVICE_HOST } from '../support/check-cluster.js';

function deployment(args: string[], env: Record<string, string> = {}): V1Deployment {
  return {
    metadata: { name: 'envoy-shutdown-manager' },
    spec: {
      selector: {},
      template: {
        spec: {
          containers: [{ name: 'webhook', args, env: Object.entries(env).map(([name, value]) => ({ name, value })) }],
          volumes: [{ name: 'tls', secret: { secretName: 'mounted-tls' } }],
        },
      },
    },
  };
}

describe('what check expects, from the webhook Deployment', () => {
  test('the Secret: the mounted one, or with --self-signed-certs the managed one (--tls-secret-name)', () => {
    assert.equal(servingSecretName(deployment([])), 'mounted-tls');
    assert.equal(servingSecretName(deployment(['--self-signed-certs=true'])), 'envoy-shutdown-manager-self-signed');
    assert.equal(servingSecretName(deployment(['--self-signed-certs', '--tls-secret-name', 'mine'])), 'mine');
    assert.equal(servingSecretName(undefined), 'envoy-shutdown-manager-tls');
  });

  test('the selector: --pod-selector, else the Deployment\'s, else app=envoy', () => {
    const withEnv = deployment([], { SHUTDOWN_MANAGER_POD_SELECTOR: 'app.kubernetes.io/component=proxy' });
    assert.equal(formatLabelSelector(expectationsOf(withEnv, 'tier=edge').podSelector), 'tier=edge');
    assert.equal(formatLabelSelector(expectationsOf(withEnv, undefined).podSelector), 'app.kubernetes.io/component=proxy');
    assert.equal(formatLabelSelector(expectationsOf(undefined, undefined).podSelector), 'app=envoy');
    assert.equal(expectationsOf(undefined, undefined).sidecarImage, DEFAULT_SIDECAR_IMAGE);
  });
});

describe('a pod judged', () => {
  const expected = expectationsOf(undefined, undefined);
  const status = JSON.stringify({ version: PROJECT_VERSION });

  test('a native sidecar (an init container) counts as the sidecar', () => {
    const pod: V1Pod = {
      metadata: { annotations: { 'shutdown-manager.io/status': status } },
      spec: { containers: [{ name: 'envoy' }], initContainers: [{ name: 'shutdown-manager', image: DEFAULT_SIDECAR_IMAGE, restartPolicy: 'Always' }] },
      status: { phase: 'Running' },
    };
    assert.deepEqual(judgePod(pod, expected), { kind: 'injected', problems: [] });
  });

  test('the sidecar image is compared as a reference: a pinned webhook accepts the same digest however spelt, and reports a tag-only or another digest as skew', () => {
    const digest = `sha256:${'ab'.repeat(32)}`;
    const repository = DEFAULT_SIDECAR_IMAGE.slice(0, DEFAULT_SIDECAR_IMAGE.lastIndexOf(':'));
    const pinned = expectationsOf(deployment([], { SHUTDOWN_MANAGER_SIDECAR_IMAGE: `${DEFAULT_SIDECAR_IMAGE}@${digest}` }), undefined);
    const podWith = (image: string): V1Pod => ({
      metadata: { annotations: { 'shutdown-manager.io/status': status } },
      spec: { containers: [{ name: 'envoy' }, { name: 'shutdown-manager', image }] },
    });
    const skewOf = (image: string): string[] => {
      const state = judgePod(podWith(image), pinned);
      assert.equal(state?.kind, 'injected');
      return state.kind === 'injected' ? state.problems.map((problem) => `${problem.check}: ${problem.detail}`) : [];
    };
    assert.deepEqual(skewOf(`${DEFAULT_SIDECAR_IMAGE}@${digest}`), []);
    assert.deepEqual(skewOf(`${repository}@${digest}`), [], 'the same digest without the tag');
    assert.deepEqual(skewOf(DEFAULT_SIDECAR_IMAGE), [
      `pods.version-skew: with a sidecar of image ${DEFAULT_SIDECAR_IMAGE} (the webhook injects ${DEFAULT_SIDECAR_IMAGE}@${digest})`,
    ]);
    assert.equal(skewOf(`${DEFAULT_SIDECAR_IMAGE}@sha256:${'cd'.repeat(32)}`).length, 1, 'the tag pushed again: another digest');
  });

  test('a finished pod is not judged; an opted-out pod is information', () => {
    assert.equal(judgePod({ spec: { containers: [] }, status: { phase: 'Succeeded' } }, expected), undefined);
    const optedOut: V1Pod = { metadata: { annotations: { 'shutdown-manager.io/inject': 'false' } }, spec: { containers: [{ name: 'envoy' }] } };
    assert.deepEqual(judgePod(optedOut, expected), { kind: 'opted-out' });
  });

  test('a pod of a ReplicaSet whose owner was not read is reported by its ReplicaSet', () => {
    const pod: V1Pod = { metadata: { name: 'p', namespace: 'edge', ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u', controller: true }] } };
    assert.deepEqual(workloadOf(pod, new Map()), { kind: 'ReplicaSet', name: 'rs', namespace: 'edge' });
  });
});

describe('the certificate', () => {
  test('ok, then a warning 30 days before expiry, then a failure once expired', async () => {
    const bundle = await servingCertificate({ validityDays: 90 });
    const at = (days: number): string | undefined =>
      certificateFindings({
        certificatePem: bundle.certPem,
        caBundlePem: bundle.caCertPem,
        secretRef: 'Secret x/y',
        serviceHost: SERVICE_HOST,
        now: new Date(Date.now() + days * 86_400_000),
        renewal: 'renew',
      }).find((finding) => finding.check === 'webhook.certificate-expiry')?.status;
    assert.deepEqual([at(0), at(70), at(91)], ['ok', 'warning', 'failure']);
  });
});

describe('the report for people', () => {
  test('colour only when asked (a terminal without NO_COLOR), the same words either way', () => {
    const report = makeReport([{ check: 'pods.missing-sidecar', section: 'pods', status: 'failure', message: 'Deployment edge/envoy: 1 of 1 pod without the sidecar', fix: 'kubectl -n edge rollout restart deployment/envoy' }]);
    const plain = renderText(report, false);
    const coloured = renderText(report, true);
    assert.doesNotMatch(plain, /\x1b\[/);
    assert.match(coloured, /\x1b\[1;31mFAIL\x1b\[0m/);
    assert.equal(coloured.replace(/\x1b\[[\d;]*m/g, ''), plain);
  });
});
