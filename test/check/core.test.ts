/** The pure core of `check`: API objects in, verdicts and findings out, no cluster. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { certificateFindings, type CertificateInput, type CertManagerCertificate } from '../../src/check/certificate.js';
import type { V1Deployment, V1Pod } from '../../src/check/cluster.js';
import { expectationsOf, servingSecretName } from '../../src/check/expectations.js';
import { judgePod } from '../../src/check/pod-state.js';
import { renderText } from '../../src/check/render.js';
import { makeReport } from '../../src/check/report.js';
import { workloadOf } from '../../src/check/pods.js';
import { formatLabelSelector } from '../../src/config/label-selector.js';
import { DEFAULT_SIDECAR_IMAGE, PROJECT_VERSION } from '../../src/version.js';
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
  const certificate = (overrides: Partial<CertManagerCertificate> = {}): CertManagerCertificate => ({
    ref: 'x/serving',
    secretName: 'y',
    dnsNames: [SERVICE_HOST],
    notAfter: new Date(Date.now() + 90 * 86_400_000).toISOString(),
    ready: { status: 'True' },
    ...overrides,
  });
  const input = (caBundlePem: string | undefined, of: CertManagerCertificate | undefined, now = new Date()): CertificateInput => ({
    caBundlePem,
    servingSecretRef: 'Secret x/y',
    servingSecretName: 'y',
    certificate: of,
    selfManaged: false,
    publishedPem: undefined,
    serviceHost: SERVICE_HOST,
    now,
    renewal: 'renew',
  });
  const statusOf = (findings: readonly { check: string; status: string }[], check: string): string | undefined => findings.find((f) => f.check === check)?.status;

  test("the Certificate's notAfter: ok, then a warning 30 days before, then a failure once past", async () => {
    const bundle = await servingCertificate({ validityDays: 3650 });
    const at = (days: number): string | undefined =>
      statusOf(certificateFindings(input(bundle.caCertPem, certificate(), new Date(Date.now() + days * 86_400_000))), 'webhook.certificate-expiry');
    assert.deepEqual([at(0), at(70), at(91)], ['ok', 'warning', 'failure']);
  });

  test('the caBundle alone: its fit to the serving certificate is never reported ok, whatever the Certificate says', async () => {
    const bundle = await servingCertificate();
    for (const of of [certificate(), undefined]) {
      const [caBundle] = certificateFindings(input(bundle.caCertPem, of));
      assert.equal(caBundle?.check, 'webhook.ca-bundle');
      assert.equal(caBundle?.status, 'info');
      assert.match(caBundle?.message ?? '', /^the caBundle holds 1 CA certificate; not observed: whether one of them verifies the serving certificate, which is in Secret x\/y and check reads no Secret/);
    }
    assert.equal(statusOf(certificateFindings(input(undefined, certificate())), 'webhook.ca-bundle'), 'failure');
    assert.equal(statusOf(certificateFindings(input('not a certificate', certificate())), 'webhook.ca-bundle'), 'failure');
    assert.equal(statusOf(certificateFindings(input('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----', certificate())), 'webhook.ca-bundle'), 'failure');
  });

  test('the CA expiry is the last of the caBundle to expire: a CA being rotated out does not warn', async () => {
    const old = await servingCertificate({ validityDays: 10 });
    const fresh = await servingCertificate({ validityDays: 365 });
    const findings = certificateFindings(input(old.caCertPem + fresh.caCertPem, certificate()));
    assert.equal(statusOf(findings, 'webhook.ca-bundle-expiry'), 'ok');
    assert.match(findings.find((f) => f.check === 'webhook.ca-bundle-expiry')?.message ?? '', /^the last of the caBundle's 2 CAs to expire expires in 36[45] days/);
    assert.equal(statusOf(certificateFindings(input(old.caCertPem, certificate())), 'webhook.ca-bundle-expiry'), 'warning');
  });

  test("names: the Certificate's dnsNames, matched as Go's TLS matches them (exact, or a wildcard for one label)", async () => {
    const bundle = await servingCertificate();
    const names = (dnsNames: string[]): string | undefined => statusOf(certificateFindings(input(bundle.caCertPem, certificate({ dnsNames }))), 'webhook.certificate-names');
    assert.equal(names([SERVICE_HOST]), 'ok');
    assert.equal(names([SERVICE_HOST.toUpperCase()]), 'ok');
    assert.equal(names([`*.${SERVICE_HOST.split('.').slice(1).join('.')}`]), 'ok');
    assert.equal(names([`*.${SERVICE_HOST.split('.').slice(2).join('.')}`]), 'failure', 'a wildcard covers one label only');
    assert.equal(names([`${SERVICE_HOST}.cluster.local`]), 'failure');
    assert.equal(names([]), 'failure');
  });

  test('Ready and secretName: not Ready, or a Certificate writing another Secret than the one served, is a failure', async () => {
    const bundle = await servingCertificate();
    const ready = (of: CertManagerCertificate): { status: string; message: string } => {
      const found = certificateFindings(input(bundle.caCertPem, of)).find((f) => f.check === 'webhook.certificate');
      return { status: found?.status ?? '', message: found?.message ?? '' };
    };
    assert.equal(ready(certificate()).status, 'ok');
    const failing = ready(certificate({ ready: { status: 'False', reason: 'Failed', message: 'the issuer is not ready' } }));
    assert.equal(failing.status, 'failure');
    assert.match(failing.message, /is not Ready \(Failed: the issuer is not ready\)/);
    assert.equal(ready(certificate({ ready: undefined })).status, 'failure');
    assert.match(ready(certificate({ secretName: 'other' })).message, /writes Secret other, but the webhook serves from Secret x\/y/);
  });

  test('without a Certificate object, names and expiry are not observed: info, never ok', async () => {
    const bundle = await servingCertificate();
    const findings = certificateFindings(input(bundle.caCertPem, undefined));
    assert.deepEqual(findings.map((f) => [f.check, f.status]), [
      ['webhook.ca-bundle', 'info'],
      ['webhook.ca-bundle-expiry', 'ok'],
      ['webhook.certificate-names', 'info'],
      ['webhook.certificate-expiry', 'info'],
    ]);
    for (const f of findings.slice(2)) assert.match(f.message, /^not observed: /);
  });
});

describe('the report for people', () => {
  test('colour only when asked (a terminal without NO_COLOR), the same words either way', () => {
    const report = makeReport([{ check: 'pods.missing-sidecar', section: 'pods', status: 'failure', message: 'Deployment edge/envoy: 1 of 1 pod without the sidecar', fix: 'kubectl -n edge rollout restart deployment/envoy' }]);
    const plain = renderText(report, false);
    const coloured = renderText(report, true);
    /* eslint-disable no-control-regex -- the escape codes of a coloured terminal */
    assert.doesNotMatch(plain, /\x1b\[/);
    assert.match(coloured, /\x1b\[1;31mFAIL\x1b\[0m/);
    assert.equal(coloured.replace(/\x1b\[[\d;]*m/g, ''), plain);
    /* eslint-enable no-control-regex */
  });
});
