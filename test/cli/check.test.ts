/**
 * `envoy-shutdown-manager check` as a user runs it: the built entry point in a child process, a kubeconfig file,
 * the real @kubernetes/client-node over TLS to the fake API server. Needs `npm run build` first.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { readFile, writeFile } from 'node:fs/promises';
import { heldByTrafficQuery, lagQuantileQuery, lagQuery, SIDE_QUERIES, statsMissingQuery, unobservedQuery, type WorkloadDrain } from '../../src/check/drains.js';
import type { CheckReport, Finding } from '../../src/check/report.js';
import {
  addNamespace,
  addPod,
  addReplicaSet,
  installWebhook,
  kubeconfigYaml,
  servingCertificate,
  startCheckCluster,
  type CheckCluster,
  type WebhookOptions,
} from '../support/check-cluster.js';
import { FakePrometheus, serviceProxyFront, type PrometheusFault, type PrometheusSample, type ServiceProxyFront } from '../support/fake-prometheus.js';
import { join } from 'node:path';
import { loadYamlFile } from '../support/manifests.js';
import { REPO_ROOT, runBuiltEntry, type Finished } from '../support/process.js';
import pino from 'pino';
import { serviceDnsNames } from '../../src/certs/generate.js';
import { SelfManagedCertificates } from '../../src/certs/self-managed.js';
import { KubeCertificateStore } from '../../src/kube/client.js';
import type { FakeKubeApi } from '../support/fake-kube-api.js';

/** Every cluster a test starts, closed at the end whatever happened. */
const clusters: CheckCluster[] = [];
after(async () => {
  await Promise.all(clusters.map((cluster) => cluster.close()));
});

async function cluster(setup: (cluster: CheckCluster) => void | Promise<void>): Promise<CheckCluster> {
  const started = await startCheckCluster();
  clusters.push(started);
  await setup(started);
  return started;
}

function check(target: CheckCluster, ...args: string[]): Promise<Finished> {
  return runBuiltEntry(['check', '--kubeconfig', target.kubeconfig, ...args], { timeoutMs: 20_000 });
}

async function checkJson(target: CheckCluster, ...args: string[]): Promise<{ run: Finished; report: CheckReport }> {
  const run = await check(target, '--output', 'json', ...args);
  assert.equal(run.stderr, '', 'nothing on stderr');
  return { run, report: JSON.parse(run.stdout) as CheckReport };
}

function only(report: CheckReport, name: string): Finding[] {
  return report.findings.filter((finding) => finding.check === name);
}

function statusOf(report: CheckReport, name: string): string | undefined {
  const found = only(report, name);
  assert.ok(found.length <= 1, `${name} appears once: ${JSON.stringify(found)}`);
  return found[0]?.status;
}

/** The webhook healthy, namespace edge opted in with three protected pods of Deployment envoy. */
async function healthy(options: WebhookOptions = {}): Promise<CheckCluster> {
  return cluster(async ({ fake }) => {
    await installWebhook(fake, options);
    addNamespace(fake, 'edge');
    for (const name of ['envoy-7d9f-a', 'envoy-7d9f-b', 'envoy-7d9f-c']) addPod(fake, 'edge', name, { owner: 'Deployment/envoy' });
  });
}

describe('check on a healthy cluster', () => {
  let target: CheckCluster;
  before(async () => {
    target = await healthy();
  });

  test('every check ok: exit 0, a grouped report for people, no colour off a terminal', async () => {
    const run = await check(target);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^The webhook\n/);
    assert.match(run.stdout, /\nEnvoy pods\n/);
    assert.match(run.stdout, /ok {3}MutatingWebhookConfiguration shutdown-manager\.io calls Service envoy-shutdown-manager\/envoy-shutdown-manager\/mutate/);
    assert.match(run.stdout, /namespace edge: 3 of 3 Envoy pods protected/);
    assert.match(run.stdout, /No check failed: 0 failed, 0 warnings/);
    // eslint-disable-next-line no-control-regex -- the escape codes of a coloured terminal
    assert.doesNotMatch(run.stdout, /\x1b\[/, 'no escape codes when stdout is not a TTY');
  });

  test('--output json: the same findings, in a stable shape', async () => {
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 0);
    assert.deepEqual(Object.keys(report).sort(), ['counts', 'drains', 'failed', 'findings', 'version']);
    assert.equal(report.version, 1);
    assert.equal(report.failed, false);
    assert.deepEqual(Object.keys(report.counts).sort(), ['failure', 'info', 'ok', 'warning']);
    for (const finding of report.findings) {
      assert.match(finding.check, /^(webhook|pods|drains)\.[a-z-]+$/);
      assert.ok(['ok', 'info', 'warning', 'failure'].includes(finding.status), `a known status: ${finding.status}`);
      assert.equal(typeof finding.message, 'string');
      assert.equal(finding.section, finding.check.split('.')[0]);
    }
    for (const name of ['configuration', 'endpoints', 'replicas', 'disruption-budget', 'ca-bundle-expiry', 'certificate', 'certificate-names', 'certificate-expiry', 'selector']) {
      assert.equal(statusOf(report, `webhook.${name}`), 'ok', name);
    }
    // Only the Secret could show it, and check reads none: said so, not reported ok.
    assert.equal(statusOf(report, 'webhook.ca-bundle'), 'info');
    assert.match(only(report, 'webhook.ca-bundle')[0]?.message ?? '', /not observed: whether one of them verifies the serving certificate/);
    assert.match(only(report, 'webhook.failure-policy')[0]?.message ?? '', /failurePolicy Ignore: Envoy pods created while the webhook cannot be called start without the sidecar/);
    assert.match(only(report, 'webhook.timeout')[0]?.message ?? '', /timeoutSeconds 5: a pod creation waits up to 5 s/);
  });

  test('pods are listed per opted-in namespace with the selector and a limit; nothing is written', async () => {
    const requests = target.fake.requests;
    assert.ok(requests.every((request) => request.method === 'GET'), 'read-only');
    const podLists = requests.filter((request) => request.path.endsWith('/pods'));
    assert.ok(podLists.length > 0, 'pods were listed');
    for (const request of podLists) {
      assert.match(request.path, /^\/api\/v1\/namespaces\/edge\/pods$/);
      assert.match(request.query, /labelSelector=app%3Denvoy/);
      assert.match(request.query, /limit=500/);
    }
  });
});

describe('check on the webhook', () => {
  test('no MutatingWebhookConfiguration: failure, exit 1, the install command as the fix', async () => {
    const target = await healthy({ configuration: false });
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1);
    assert.equal(report.failed, true);
    const [finding] = only(report, 'webhook.configuration');
    assert.equal(finding?.status, 'failure');
    assert.match(finding?.fix ?? '', /kubectl apply -k manifests/);
  });

  test('no ready endpoints, one replica, no PodDisruptionBudget', async () => {
    const target = await healthy({ readyEndpoints: 0, readyReplicas: 1, disruptionBudget: false });
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1);
    assert.equal(statusOf(report, 'webhook.endpoints'), 'failure');
    assert.equal(statusOf(report, 'webhook.replicas'), 'warning');
    assert.match(only(report, 'webhook.replicas')[0]?.fix ?? '', /--replicas=2/);
    assert.equal(statusOf(report, 'webhook.disruption-budget'), 'warning');
  });

  test('no ready replica at all is a failure', async () => {
    const { report } = await checkJson(await healthy({ readyReplicas: 0 }));
    assert.equal(statusOf(report, 'webhook.replicas'), 'failure');
  });

  test("a Certificate without the Service name, expiring in 10 days: read from cert-manager's Certificate, not from a Secret", async () => {
    const certificate = await servingCertificate({ dnsNames: ['somewhere.else.svc'], validityDays: 10 });
    const target = await healthy({ certificate });
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1);
    assert.equal(statusOf(report, 'webhook.certificate-names'), 'failure');
    assert.match(only(report, 'webhook.certificate-names')[0]?.message ?? '', /^Certificate envoy-shutdown-manager\/envoy-shutdown-manager-tls does not name envoy-shutdown-manager\.envoy-shutdown-manager\.svc \(it names somewhere\.else\.svc\)/);
    assert.equal(statusOf(report, 'webhook.certificate-expiry'), 'warning');
    assert.match(only(report, 'webhook.certificate-expiry')[0]?.message ?? '', /expires in (9|10) days .* \(status\.notAfter of Certificate envoy-shutdown-manager\/envoy-shutdown-manager-tls\)$/);
    const paths = target.fake.requests.map((request) => request.path);
    assert.ok(paths.includes('/apis/cert-manager.io/v1/namespaces/envoy-shutdown-manager/certificates/envoy-shutdown-manager-tls'), paths.join('\n'));
    assert.deepEqual(paths.filter((path) => path.includes('/secrets')), [], 'no Secret is read');
  });

  test('an expired certificate is a failure, and so is its expired CA in the caBundle', async () => {
    const certificate = await servingCertificate({ validityDays: 30, now: new Date(Date.now() - 60 * 86_400_000) });
    const { run, report } = await checkJson(await healthy({ certificate }));
    assert.equal(run.code, 1);
    assert.equal(statusOf(report, 'webhook.certificate-expiry'), 'failure');
    assert.match(only(report, 'webhook.certificate-expiry')[0]?.message ?? '', /expired on/);
    assert.equal(statusOf(report, 'webhook.ca-bundle-expiry'), 'failure');
    assert.match(only(report, 'webhook.ca-bundle-expiry')[0]?.message ?? '', /^the CA in the caBundle expired on \d{4}-\d\d-\d\d: every call fails TLS$/);
  });

  test("the certificate's expiry and its CA's: a warning within 30 days, with the date and how to renew; the text report shows it", async () => {
    const certificate = await servingCertificate({ validityDays: 12 });
    const target = await healthy({ certificate });
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 0, 'warnings do not fail check');
    const when = new Date(Date.parse(new X509Certificate(certificate.certPem).validTo)).toISOString().slice(0, 10);
    for (const name of ['webhook.certificate-expiry', 'webhook.ca-bundle-expiry']) {
      const [finding] = only(report, name);
      assert.equal(finding?.status, 'warning', name);
      assert.match(finding?.message ?? '', new RegExp(`expires in (11|12) days \\(${when}\\) and has not been renewed`), name);
      assert.match(finding?.fix ?? '', /describe certificate envoy-shutdown-manager-tls/, name);
    }
    const text = await check(target);
    assert.match(text.stdout, /the certificate expires in (11|12) days/);
  });

  test("a Certificate cert-manager has not issued, or one writing another Secret than the webhook's: a failure each", async () => {
    const failing = await checkJson(await healthy({ certManager: { ready: { status: 'False', reason: 'Pending', message: 'Issuing certificate as Secret does not exist' } } }));
    assert.equal(failing.run.code, 1);
    assert.equal(statusOf(failing.report, 'webhook.certificate'), 'failure');
    assert.match(only(failing.report, 'webhook.certificate')[0]?.message ?? '', /is not Ready \(Pending: Issuing certificate as Secret does not exist\)/);
    const elsewhere = await checkJson(await healthy({ certManager: { secretName: 'something-else' } }));
    assert.equal(statusOf(elsewhere.report, 'webhook.certificate'), 'failure');
    assert.match(only(elsewhere.report, 'webhook.certificate')[0]?.message ?? '', /writes Secret something-else, but the webhook serves from Secret envoy-shutdown-manager\/envoy-shutdown-manager-tls/);
  });

  test('no cert-manager Certificate (certificates by hand, or self-managed): names and expiry not observed, exit 0, still no Secret read', async () => {
    const target = await healthy({ certManager: false });
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 0);
    for (const name of ['webhook.ca-bundle', 'webhook.certificate-names', 'webhook.certificate-expiry']) {
      assert.equal(statusOf(report, name), 'info', name);
      assert.match(only(report, name)[0]?.message ?? '', /not observed: /, name);
    }
    assert.equal(statusOf(report, 'webhook.certificate'), undefined, 'no Certificate, no finding about one');
    // Where to watch it instead: a metric and an alert that exist.
    const message = only(report, 'webhook.certificate-expiry')[0]?.message ?? '';
    const [, metric, alert] = /exports the served certificate's expiry as (\w+), and (\w+) fires/.exec(message) ?? [];
    const rules = await readFile(join(REPO_ROOT, 'manifests/monitoring/prometheusrule.yaml'), 'utf8');
    assert.ok(metric !== undefined && rules.includes(metric), `${String(metric)} is what the alerts read`);
    assert.ok(alert !== undefined && rules.includes(`alert: ${alert}`), `${String(alert)} is an alert of manifests/monitoring`);
    assert.deepEqual(target.fake.requests.filter((request) => /secrets|certificates/.test(request.path)).map((request) => request.path), []);

    // manifests/base keeps the inject-ca-from annotation without cert-manager: the Certificate it names is absent (404).
    const annotated = await healthy();
    assert.ok(annotated.fake.removeObject('cert-manager.io/v1', 'Certificate', 'envoy-shutdown-manager', 'envoy-shutdown-manager-tls'), 'the fake cluster had the Certificate to remove');
    const absent = await checkJson(annotated);
    assert.equal(absent.run.code, 0);
    assert.equal(statusOf(absent.report, 'webhook.certificate-expiry'), 'info');
    assert.match(only(absent.report, 'webhook.certificate-names')[0]?.message ?? '', /^not observed: /);
  });

  test("the objectSelector against the webhook's selector: a mismatch is a failure naming both; the same pods written otherwise is ok", async () => {
    const drifted = await checkJson(await healthy({ objectSelector: { matchLabels: { 'app.kubernetes.io/name': 'envoy' } } }));
    assert.equal(drifted.run.code, 1);
    const [finding] = only(drifted.report, 'webhook.selector');
    assert.equal(finding?.status, 'failure');
    assert.match(finding?.message ?? '', /the objectSelector \{"matchLabels":\{"app\.kubernetes\.io\/name":"envoy"\}\} and the webhook's selector app=envoy \(SHUTDOWN_MANAGER_POD_SELECTOR or --pod-selector of its Deployment\) select different pods/);
    assert.match(finding?.fix ?? '', /SHUTDOWN_MANAGER_POD_SELECTOR/);

    // The Deployment changed alone, the objectSelector left behind.
    const flagOnly = await checkJson(await healthy({ podSelector: 'app=edge-proxy' }));
    assert.equal(statusOf(flagOnly.report, 'webhook.selector'), 'failure');
    // No objectSelector at all: the API server sends every pod, the webhook injects app=envoy only.
    const none = await checkJson(await healthy({ objectSelector: null }));
    assert.equal(statusOf(none.report, 'webhook.selector'), 'failure');
    assert.match(only(none.report, 'webhook.selector')[0]?.message ?? '', /the objectSelector \{\} and/);

    // matchLabels against app=envoy, and no flag at all (the webhook's default app=envoy): the same pods.
    const same = await checkJson(await healthy({ objectSelector: { matchLabels: { app: 'envoy' } }, podSelector: null }));
    assert.equal(statusOf(same.report, 'webhook.selector'), 'ok');
    assert.match(only(same.report, 'webhook.selector')[0]?.message ?? '', /select the same pods/);
  });
});

describe('check on a self-managed webhook (--self-signed-certs), from the certificate it publishes', () => {
  const SERVING_ANNOTATION = 'shutdown-manager.io/serving-certificate';
  const SERVICE_HOST = 'envoy-shutdown-manager.envoy-shutdown-manager.svc';

  /** What a replica of manifests/self-signed does at start, against the fake: its Secret, the caBundle, the annotation. */
  async function publish(fake: FakeKubeApi, options: { dnsNames?: readonly string[]; validityDays?: number } = {}): Promise<void> {
    const store = new KubeCertificateStore(fake.kubeConfig(), {
      namespace: 'envoy-shutdown-manager',
      secretName: 'envoy-shutdown-manager-self-signed',
      webhookConfigurationName: 'shutdown-manager.io',
    });
    const manager = new SelfManagedCertificates({
      store,
      dnsNames: options.dnsNames ?? serviceDnsNames('envoy-shutdown-manager', 'envoy-shutdown-manager'),
      commonName: SERVICE_HOST,
      logger: pino({ level: 'silent' }),
      ...(options.validityDays === undefined ? {} : { validityDays: options.validityDays }),
    });
    await manager.obtain();
    await manager.stop();
  }

  async function selfManagedCluster(options: { dnsNames?: readonly string[]; validityDays?: number; publish?: boolean } = {}): Promise<CheckCluster> {
    const target = await healthy({ selfManaged: true, certManager: false });
    if (options.publish !== false) await publish(target.fake, options);
    target.fake.requests.length = 0; // the webhook's own requests (it reads its Secret); what follows is check's
    return target;
  }

  const configurationOf = (fake: FakeKubeApi): Record<string, any> => fake.webhookConfigurations.get('shutdown-manager.io') as Record<string, any>;
  const noSecretRead = (target: CheckCluster): void =>
    assert.deepEqual(target.fake.requests.filter((request) => request.path.includes('/secrets')).map((request) => request.path), [], 'no Secret is read');

  test('published: the caBundle verifies it, it names the Service, it expires in a year: ok, and said to be the webhook’s word', async () => {
    const target = await selfManagedCluster();
    assert.ok(configurationOf(target.fake).metadata.annotations[SERVING_ANNOTATION], 'the webhook published its certificate');
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 0);
    for (const name of ['webhook.ca-bundle', 'webhook.certificate-names', 'webhook.certificate-expiry', 'webhook.ca-bundle-expiry']) {
      assert.equal(statusOf(report, name), 'ok', `${name}: ${only(report, name)[0]?.message ?? ''}`);
    }
    assert.match(only(report, 'webhook.ca-bundle')[0]?.message ?? '', /^the caBundle \(1 CA certificate\) verifies the certificate the webhook says it serves \(annotation shutdown-manager\.io\/serving-certificate, which the webhook writes itself: not a TLS handshake\)$/);
    assert.match(only(report, 'webhook.certificate-names')[0]?.message ?? '', /names envoy-shutdown-manager\.envoy-shutdown-manager\.svc/);
    assert.match(only(report, 'webhook.certificate-expiry')[0]?.message ?? '', /expires in 36[45] days/);
    noSecretRead(target);
  });

  test('a caBundle that does not verify the published certificate is a failure, exit 1', async () => {
    const target = await selfManagedCluster();
    const other = await servingCertificate();
    configurationOf(target.fake).webhooks[0].clientConfig.caBundle = Buffer.from(other.caCertPem).toString('base64');
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1);
    const [finding] = only(report, 'webhook.ca-bundle');
    assert.equal(finding?.status, 'failure');
    assert.match(finding?.message ?? '', /^none of the caBundle's 1 CA certificate verifies the certificate the webhook says it serves/);
    assert.match(finding?.fix ?? '', /delete secret envoy-shutdown-manager-self-signed && kubectl -n envoy-shutdown-manager rollout restart deployment envoy-shutdown-manager/);
    noSecretRead(target);
  });

  test('a published certificate without the Service name is a failure', async () => {
    const { run, report } = await checkJson(await selfManagedCluster({ dnsNames: ['somewhere.else.svc'] }));
    assert.equal(run.code, 1);
    assert.equal(statusOf(report, 'webhook.ca-bundle'), 'ok');
    const [finding] = only(report, 'webhook.certificate-names');
    assert.equal(finding?.status, 'failure');
    assert.match(finding?.message ?? '', /does not name envoy-shutdown-manager\.envoy-shutdown-manager\.svc \(it names DNS:somewhere\.else\.svc; annotation shutdown-manager\.io\/serving-certificate\)/);
    assert.match(finding?.fix ?? '', /--service-name and --namespace/);
  });

  test('a published certificate expiring within 30 days is a warning, with how to renew', async () => {
    const { run, report } = await checkJson(await selfManagedCluster({ validityDays: 20 }));
    assert.equal(run.code, 0, 'warnings do not fail check');
    const [finding] = only(report, 'webhook.certificate-expiry');
    assert.equal(finding?.status, 'warning');
    assert.match(finding?.message ?? '', /^the certificate the webhook says it serves expires in (19|20) days \(\d{4}-\d\d-\d\d\) and has not been renewed/);
    assert.match(finding?.fix ?? '', /delete secret envoy-shutdown-manager-self-signed/);
  });

  test('nothing published (an older webhook): not observed, as before, naming the annotation it lacks', async () => {
    const { run, report } = await checkJson(await selfManagedCluster({ publish: false }));
    assert.equal(run.code, 0);
    for (const name of ['webhook.ca-bundle', 'webhook.certificate-names', 'webhook.certificate-expiry']) {
      assert.equal(statusOf(report, name), 'info', name);
      assert.match(only(report, name)[0]?.message ?? '', /not observed: /, name);
    }
    assert.match(only(report, 'webhook.certificate-names')[0]?.message ?? '', /has not published it as annotation shutdown-manager\.io\/serving-certificate/);
  });

  test('an annotation left on a configuration whose webhook is not self-managed is not taken for its word', async () => {
    const published = await selfManagedCluster();
    const annotation = configurationOf(published.fake).metadata.annotations[SERVING_ANNOTATION] as string;
    const target = await healthy({ certManager: false });
    configurationOf(target.fake).metadata.annotations = { [SERVING_ANNOTATION]: annotation };
    const { report } = await checkJson(target);
    for (const name of ['webhook.ca-bundle', 'webhook.certificate-names', 'webhook.certificate-expiry']) {
      assert.match(only(report, name)[0]?.message ?? '', /not observed: /, name);
    }
  });
});

describe('check on the Envoy pods', () => {
  let target: CheckCluster;
  before(async () => {
    target = await cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      addPod(fake, 'edge', 'old-1', { owner: 'Deployment/old', injected: false });
      addPod(fake, 'edge', 'old-2', { owner: 'Deployment/old', injected: false });
      addPod(fake, 'edge', 'ds-1', { owner: 'DaemonSet/envoy', injected: false });
      addPod(fake, 'edge', 'skewed', { owner: 'StatefulSet/skewed', image: 'ghcr.io/envoy-shutdown-manager/envoy-shutdown-manager:0.0.9', version: '0.0.9' });
      addPod(fake, 'edge', 'edited', { owner: 'Deployment/edited', graceSeconds: 10, drainTimeoutMs: 54_000 });
      addPod(fake, 'edge', 'crashy', { owner: 'Deployment/crashy', restarts: 3, sidecarReady: false });
      addPod(fake, 'edge', 'out', { injected: false, annotations: { 'shutdown-manager.io/inject': 'false' } });
      addPod(fake, 'edge', 'contour', { owner: 'DaemonSet/contour-envoy', injected: false, contour: true });
      addPod(fake, 'edge', 'fine', { owner: 'Deployment/fine' });
      addNamespace(fake, 'elsewhere', false);
      addPod(fake, 'elsewhere', 'loner', { injected: false });
    });
  });

  test('pods without the sidecar: failures grouped by Deployment (through its ReplicaSet) and DaemonSet, with rollout restart', async () => {
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1);
    const missing = only(report, 'pods.missing-sidecar');
    assert.deepEqual(
      missing.map(({ status, message, fix, pods }) => ({ status, message, fix, pods })),
      [
        {
          status: 'failure',
          message: 'Deployment edge/old: 2 of 2 pods without the sidecar',
          fix: 'kubectl -n edge rollout restart deployment/old',
          pods: ['edge/old-1', 'edge/old-2'],
        },
        { status: 'failure', message: 'DaemonSet edge/envoy: 1 of 1 pod without the sidecar', fix: 'kubectl -n edge rollout restart daemonset/envoy', pods: ['edge/ds-1'] },
      ],
    );
    assert.ok(target.fake.calls().includes('GET /apis/apps/v1/namespaces/edge/replicasets/old-7d9f'), 'the ReplicaSet was followed to its Deployment');
  });

  test('version skew is a warning; a grace period shorter than the drain is a failure; an unhealthy sidecar is a warning', async () => {
    const { report } = await checkJson(target);
    const [skew] = only(report, 'pods.version-skew');
    assert.equal(skew?.status, 'warning');
    assert.match(skew?.message ?? '', /StatefulSet edge\/skewed: 1 of 1 pod with a sidecar of injector version 0\.0\.9 \(the webhook is 0\.1\.0\) and image \S+:0\.0\.9/);
    assert.equal(skew?.fix, 'kubectl -n edge rollout restart statefulset/skewed');
    const [grace] = only(report, 'pods.grace-period');
    assert.equal(grace?.status, 'failure');
    assert.match(grace?.message ?? '', /Deployment edge\/edited: 1 of 1 pod with terminationGracePeriodSeconds 10, shorter than the sidecar's --drain-timeout 54s/);
    assert.match(grace?.fix ?? '', /kubectl -n edge patch deployment edited -p '\{"spec":\{"template":\{"spec":\{"terminationGracePeriodSeconds":60\}\}\}\}'/);
    const [health] = only(report, 'pods.sidecar-health');
    assert.equal(health?.status, 'warning');
    assert.match(health?.message ?? '', /with the sidecar not Ready and restarted 3 times, last ended OOMKilled \(exit code 137\)/);
    assert.match(health?.fix ?? '', /logs crashy -c shutdown-manager --previous/);
  });

  test('opted out by annotation, or carrying their own shutdown-manager: information', async () => {
    const { report } = await checkJson(target);
    assert.equal(statusOf(report, 'pods.opted-out'), 'info');
    assert.deepEqual(only(report, 'pods.opted-out')[0]?.pods, ['edge/out']);
    assert.equal(statusOf(report, 'pods.own-shutdown-manager'), 'info');
    assert.deepEqual(only(report, 'pods.own-shutdown-manager')[0]?.pods, ['edge/contour']);
    assert.match(only(report, 'pods.protected')[0]?.message ?? '', /namespace edge: 1 of 9 Envoy pods protected/);
    assert.deepEqual(only(report, 'pods.not-opted-in'), [], 'other namespaces only with --all-namespaces');
  });

  test('--all-namespaces adds matching pods of namespaces that did not opt in, as information', async () => {
    const { report } = await checkJson(target, '--all-namespaces');
    const [other] = only(report, 'pods.not-opted-in');
    assert.equal(other?.status, 'info');
    assert.match(other?.message ?? '', /namespace elsewhere: 1 pod matches app=envoy, but the namespace did not opt in/);
    assert.equal(other?.fix, 'kubectl label namespace elsewhere shutdown-manager.io/inject=enabled, then restart its Envoy workloads');
  });

  test('the text report shows the fixes; NO_COLOR is honoured', async () => {
    const run = await runBuiltEntry(['check', '--kubeconfig', target.kubeconfig], { env: { NO_COLOR: '1' } });
    assert.equal(run.code, 1);
    assert.match(run.stdout, /FAIL Deployment edge\/old: 2 of 2 pods without the sidecar {2}\[pods\.missing-sidecar\]\n {9}pods: edge\/old-1, edge\/old-2\n {9}fix: kubectl -n edge rollout restart deployment\/old/);
    assert.match(run.stdout, /Not every Envoy pod is protected: 3 failed/);
  });

  test('no namespace opted in: a warning naming the label', async () => {
    const bare = await cluster(async ({ fake }) => installWebhook(fake));
    const { run, report } = await checkJson(bare);
    assert.equal(run.code, 0);
    assert.deepEqual(report.findings.filter((finding) => finding.section === 'drains'), [], 'no workload, no Prometheus flag: nothing about drains');
    assert.equal(statusOf(report, 'pods.namespaces'), 'warning');
    assert.match(only(report, 'pods.namespaces')[0]?.fix ?? '', /kubectl label namespace .* shutdown-manager\.io\/inject=enabled/);
  });
});

describe('manifests/check', () => {
  test('the ClusterRoles grant exactly the reads check makes, Prometheus through the service proxy included: every request allowed, every rule used', async () => {
    const target = await cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      addPod(fake, 'edge', 'old-1', { owner: 'Deployment/old', injected: false });
      addPod(fake, 'edge', 'envoy-1', { owner: 'Deployment/envoy' });
    });
    const prometheus = await FakePrometheus.start();
    const front = await serviceProxyFront(target.fake, prometheus, { namespace: 'monitoring', name: 'prometheus-operated', port: '9090' });
    try {
      const kubeconfig = `${target.kubeconfig}-front`;
      await writeFile(kubeconfig, kubeconfigYaml(front.url, front.caPem, target.fake.token));
      const run = await runBuiltEntry(['check', '--kubeconfig', kubeconfig, '--all-namespaces', '--prometheus', 'monitoring/prometheus-operated:9090'], { timeoutMs: 20_000 });
      assert.equal(run.code, 1, run.stderr);
    } finally {
      await front.close();
      await prometheus.close();
    }
    const roles = [
      ...((await loadYamlFile(join(REPO_ROOT, 'manifests/check/clusterrole.yaml'))) as { rules: Rule[] }[]),
      ...((await loadYamlFile(join(REPO_ROOT, 'manifests/check/prometheus-proxy.yaml'))) as { rules: Rule[] }[]),
    ];
    const rules = roles.flatMap((role) => role.rules);
    const used = new Set<Rule>();
    assert.equal(front.proxied.length, 1 + Object.keys(SIDE_QUERIES).length, "the lag and what the drains' sidecars reported of their sight");
    for (const path of [...target.fake.requests.map((request) => request.path), ...front.proxied.map((proxied) => proxied.split('?')[0] as string)]) {
      const read = rbacOf(path);
      const rule = rules.find((candidate) => grants(candidate, read));
      assert.ok(rule, `GET ${path} is granted`);
      used.add(rule);
    }
    assert.deepEqual(rules.filter((rule) => !used.has(rule)).map((rule) => rule.resources), [], 'every rule is used');
    assert.ok(rules.every((rule) => rule.verbs.every((verb) => verb === 'get' || verb === 'list')), 'read-only');
  });
});

interface Rule {
  readonly apiGroups: string[];
  readonly resources: string[];
  readonly verbs: string[];
  readonly resourceNames?: string[];
}

/** The RBAC request of a GET: a name makes it a get, none a list; a service proxy is a get of services/proxy. */
function rbacOf(path: string): { group: string; resource: string; verb: string; name?: string } {
  const proxy = /^\/api\/v1\/namespaces\/[^/]+\/services\/([^/]+)\/proxy\//.exec(path);
  if (proxy !== null) return { group: '', resource: 'services/proxy', verb: 'get', name: proxy[1] as string };
  const [, prefix = '', resource = '', name] = /^\/(api\/v1|apis\/[^/]+\/[^/]+)(?:\/namespaces\/[^/]+)?\/([a-z]+)(?:\/([^/]+))?$/.exec(path) ?? [];
  const group = prefix === 'api/v1' ? '' : (prefix.split('/')[1] ?? '');
  return { group, resource, verb: name === undefined ? 'list' : 'get', ...(name === undefined ? {} : { name }) };
}

function grants(rule: Rule, read: ReturnType<typeof rbacOf>): boolean {
  return (
    rule.apiGroups.includes(read.group) &&
    rule.resources.includes(read.resource) &&
    rule.verbs.includes(read.verb) &&
    (rule.resourceNames === undefined || (read.name !== undefined && rule.resourceNames.includes(read.name)))
  );
}

describe('check at scale', () => {
  test('pods are paginated: limit on every request, continue until the last page', async () => {
    const target = await cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      for (let i = 0; i < 5; i += 1) addPod(fake, 'edge', `envoy-${i}`, { owner: 'DaemonSet/envoy' });
    });
    const { run, report } = await checkJson(target, '--page-size', '2');
    assert.equal(run.code, 0);
    assert.match(only(report, 'pods.protected')[0]?.message ?? '', /5 of 5 Envoy pods protected/);
    const queries = target.fake.requests.filter((request) => request.path === '/api/v1/namespaces/edge/pods').map((request) => request.query);
    assert.equal(queries.length, 3);
    assert.ok(queries.every((query) => query.includes('limit=2')), queries.join('\n'));
    assert.ok(!queries[0]?.includes('continue='), 'the first page asks for no continue token');
    assert.ok(queries.slice(1).every((query) => query.includes('continue=')), queries.join('\n'));
  });
});

describe('check when it cannot tell', () => {
  test('a missing permission: exit 2, one line naming the verb and the resource', async () => {
    const target = await healthy();
    target.fake.fail({
      path: /\/pods$/,
      status: 403,
      reason: 'Forbidden',
      message: 'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "edge"',
    });
    const run = await check(target);
    assert.equal(run.code, 2);
    assert.equal(run.stdout, '');
    assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
    assert.match(run.stderr, /^envoy-shutdown-manager check: permission denied: cannot list pods in namespace edge \(RBAC verb "list" on resource "pods"/);
    assert.match(run.stderr, /User "alice" cannot list resource "pods"/);
    assert.match(run.stderr, /manifests\/check/);
  });

  test('an API server that cannot be reached: exit 2, one line naming it', async () => {
    const target = await healthy();
    const run = await check(target, '--context', 'elsewhere', '--request-timeout', '5s');
    assert.equal(run.code, 2);
    assert.match(run.stderr, /^envoy-shutdown-manager check: cannot reach the API server https:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/);
    assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
  });

  test('KUBECONFIG is read when --kubeconfig is not given', async () => {
    const target = await healthy();
    const run = await runBuiltEntry(['check'], { env: { KUBECONFIG: target.kubeconfig } });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /namespace edge: 3 of 3 Envoy pods protected/);
  });

  test('usage errors: exit 2', async () => {
    const target = await healthy();
    const cases: [string[], RegExp][] = [
      [['--context', 'nope'], /--context nope: no such context in the kubeconfig \(it has: fake, elsewhere\)/],
      [['--output', 'xml'], /flag --output: "xml" is not valid/],
      [['--pod-selector', 'app in ('], /--pod-selector app in \(/],
      [['--frobnicate'], /^envoy-shutdown-manager check: unknown flag --frobnicate \(see --help\)\n$/],
      [['--all-namespace'], /unknown flag --all-namespace; did you mean --all-namespaces\?/],
    ];
    for (const [args, message] of cases) {
      const run = await check(target, ...args);
      assert.equal(run.code, 2, args.join(' '));
      assert.match(run.stderr, message, args.join(' '));
    }
    const missing = await runBuiltEntry(['check', '--kubeconfig', '/nonexistent/kubeconfig']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /cannot load the kubeconfig \/nonexistent\/kubeconfig/);
  });
});

describe("check and the load balancer's lag (Prometheus)", () => {
  const prometheusServers: FakePrometheus[] = [];
  const fronts: ServiceProxyFront[] = [];
  after(async () => {
    await Promise.all([...prometheusServers.map((server) => server.close()), ...fronts.map((front) => front.close())]);
  });

  async function prometheus(samples: PrometheusSample[] = [], window = '7d'): Promise<FakePrometheus> {
    const server = await FakePrometheus.start();
    prometheusServers.push(server);
    server.expectedQuery = lagQuery(window);
    server.samples = samples;
    for (const sideQuery of Object.values(SIDE_QUERIES)) server.answers.set(sideQuery(window), []);
    return server;
  }

  /**
   * edge: Deployment envoy (2 pods, 5m grace, drain-timeout 4m50s, check-delay 1m; its older ReplicaSets are
   * envoy-6f8b (still in the API) and envoy-5c8bd (gone)), DaemonSet ingress (2m grace, check-delay 30s, the
   * quiet-period rule off), StatefulSet calm (quiet-period on, lag past its check-delay), DaemonSet idle (no drain
   * seen), Deployment legacy without the sidecar (not a row).
   */
  async function drainCluster(): Promise<CheckCluster> {
    return cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      for (const name of ['envoy-7d9f-a', 'envoy-7d9f-b']) {
        addPod(fake, 'edge', name, { owner: 'Deployment/envoy', graceSeconds: 300, drainTimeoutMs: 290_000, sidecarArgs: ['--check-delay=1m0s'] });
      }
      addReplicaSet(fake, 'edge', 'envoy-6f8b', 'envoy');
      addPod(fake, 'edge', 'ingress-a', { owner: 'DaemonSet/ingress', graceSeconds: 120, drainTimeoutMs: 110_000, sidecarArgs: ['--check-delay=30s', '--quiet-period=0s'] });
      addPod(fake, 'edge', 'calm-0', { owner: 'StatefulSet/calm', graceSeconds: 300, drainTimeoutMs: 290_000, sidecarArgs: ['--check-delay=10s'] });
      addPod(fake, 'edge', 'idle-a', { owner: 'DaemonSet/idle', graceSeconds: 120, drainTimeoutMs: 110_000 });
      addPod(fake, 'edge', 'legacy-1', { owner: 'Deployment/legacy', injected: false });
    });
  }

  const SAMPLES: PrometheusSample[] = [
    { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-7d9f' }, value: 4.2 },
    { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-6f8b' }, value: 9.75 },
    { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-5c8bd' }, value: 12.5 },
    { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'ingress' }, value: 95 },
    { metric: { namespace: 'edge', controller_kind: 'StatefulSet', controller_name: 'calm' }, value: 40 },
    // A workload that no longer runs, and a namespace check does not look at: not rows.
    { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'retired' }, value: 300 },
    { metric: { namespace: 'elsewhere', controller_kind: 'DaemonSet', controller_name: 'other' }, value: 300 },
  ];

  function row(report: CheckReport, name: string): WorkloadDrain | undefined {
    return report.drains.workloads.find((candidate) => candidate.name === name);
  }

  test('without a Prometheus flag: each workload with its grace period, deadline and check-delay, the lag unknown and how to read it', async () => {
    const target = await drainCluster();
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 1, 'Deployment legacy has no sidecar');
    assert.deepEqual(report.drains.lag, { status: 'unknown' });
    assert.deepEqual(
      report.drains.workloads.map((entry) => [`${entry.kind}/${entry.name}`, entry.pods, entry.gracePeriodSeconds, entry.deadlineSeconds, entry.checkDelaySeconds, entry.quietPeriod, entry.loadBalancerLagSeconds]),
      [
        ['Deployment/envoy', 2, 300, 290, 60, true, null],
        ['DaemonSet/ingress', 1, 120, 110, 30, false, null],
        ['StatefulSet/calm', 1, 300, 290, 10, true, null],
        ['DaemonSet/idle', 1, 120, 110, 60, true, null],
      ],
    );
    const [source] = only(report, 'drains.prometheus');
    assert.equal(source?.status, 'info');
    assert.match(source?.message ?? '', /the load balancer's lag of 4 workloads is unknown: .*no --prometheus-url or --prometheus was given/);
    assert.match(source?.fix ?? '', /--prometheus-url=http:\/\/localhost:9090 .* or --prometheus=monitoring\/prometheus-operated:9090/);
    const text = await check(target);
    assert.match(text.stdout, /\nDrains and the load balancer's lag\n {2}WORKLOAD +PODS +GRACE +DEADLINE +CHECK-DELAY +QUIET-PERIOD +LB LAG\n {2}Deployment edge\/envoy +2 +5m +4m50s +1m +on +unknown\n/);
  });

  test('--prometheus-url: the query sent, ReplicaSets followed to their Deployment (old ones too), warnings near the deadline and past the check-delay with the rule off', async () => {
    const target = await drainCluster();
    const server = await prometheus(SAMPLES);
    const { run, report } = await checkJson(target, '--prometheus-url', `${server.url}/`);
    assert.equal(run.code, 1, 'still the missing sidecar');
    assert.deepEqual(server.queries.map(({ path, query }) => ({ path, query })), [
      { path: '/api/v1/query', query: lagQuery('7d') },
      { path: '/api/v1/query', query: statsMissingQuery('7d') },
      { path: '/api/v1/query', query: unobservedQuery('7d') },
      { path: '/api/v1/query', query: heldByTrafficQuery('7d') },
      { path: '/api/v1/query', query: lagQuantileQuery('7d') },
    ]);
    assert.deepEqual(report.drains.lag, { status: 'read', source: server.url, window: '7d', query: lagQuery('7d') });
    assert.equal(row(report, 'envoy')?.loadBalancerLagSeconds, 12.5, 'the largest of its ReplicaSets, the deleted one found by its name');
    assert.equal(row(report, 'ingress')?.loadBalancerLagSeconds, 95);
    assert.equal(row(report, 'calm')?.loadBalancerLagSeconds, 40);
    assert.equal(row(report, 'idle')?.loadBalancerLagSeconds, null);
    assert.deepEqual(report.drains.workloads.map((entry) => entry.name), ['envoy', 'ingress', 'calm', 'idle']);
    assert.ok(target.fake.calls().includes('GET /apis/apps/v1/namespaces/edge/replicasets/envoy-6f8b'), 'the older ReplicaSet was read');

    assert.equal(statusOf(report, 'drains.prometheus'), 'ok');
    assert.match(only(report, 'drains.prometheus')[0]?.message ?? '', /read from http:\/\/127\.0\.0\.1:\d+ over 7d: drains seen for 3 of 4 workloads/);
    const near = only(report, 'drains.lag-near-deadline');
    assert.deepEqual(near.map((finding) => [finding.status, finding.message.split(':')[0]]), [['warning', 'DaemonSet edge/ingress']]);
    assert.match(near[0]?.message ?? '', /new client traffic still came 1m35s after the health checks failed, past 80 % of the drain's deadline of 1m50s \(largest over 7d\)/);
    assert.match(near[0]?.fix ?? '', /shutdown-manager\.io\/termination-grace-period: "129"/);
    const beyond = only(report, 'drains.lag-beyond-check-delay');
    assert.deepEqual(beyond.map((finding) => finding.message.split(':')[0]), ['DaemonSet edge/ingress'], 'calm waits: its quiet-period rule is on');
    assert.match(beyond[0]?.message ?? '', /well past the check-delay of 30s, and the sidecar runs with --quiet-period=0s: a drain may end before they stop, and their requests are lost/);
    assert.equal(beyond[0]?.status, 'warning');
    assert.deepEqual(only(report, 'drains.unattributed-lag'), []);

    const text = await check(target, '--prometheus-url', server.url);
    assert.match(text.stdout, /\nDrains and the load balancer's lag \(the largest over 7d, from http:\/\/127\.0\.0\.1:\d+\)\n/);
    assert.match(text.stdout, /\n {2}DaemonSet edge\/ingress +1 +2m +1m50s +30s +off +1m35s\n/);
    assert.match(text.stdout, /\n {2}DaemonSet edge\/idle +1 +2m +1m50s +1m +on +no drain seen\n/);
    assert.match(text.stdout, /\n {2}warn DaemonSet edge\/ingress: new client traffic still came 1m35s .* {2}\[drains\.lag-near-deadline\]\n {9}fix: /);
  });

  test('--lag-window sets the range; series without the controller labels are information; no sample at all says so', async () => {
    const target = await healthy();
    const server = await prometheus([{ metric: { namespace: 'edge', pod: 'envoy-7d9f-a' }, value: 3 }], '2d');
    const { run, report } = await checkJson(target, '--prometheus-url', server.url, '--lag-window', '2d');
    assert.equal(run.code, 0);
    assert.equal(server.queries[0]?.query, lagQuery('2d'));
    const [unattributed] = only(report, 'drains.unattributed-lag');
    assert.equal(unattributed?.status, 'info');
    assert.match(unattributed?.message ?? '', /1 series of shutdown_manager_load_balancer_lag_seconds \(namespace edge\) carry no controller_kind and controller_name labels/);
    assert.equal(server.queries[0]?.authorization, undefined);
    // Credentials in the URL: sent as Basic authentication, never shown.
    const withUser = await checkJson(target, '--prometheus-url', server.url.replace('http://', 'http://reader:xy%3Azzy@'), '--lag-window', '2d');
    assert.equal(server.queries[Object.keys(SIDE_QUERIES).length + 1]?.authorization, `Basic ${Buffer.from('reader:xy:zzy').toString('base64')}`, "the second run's first query");
    assert.equal(withUser.report.drains.lag.source, server.url);
    assert.doesNotMatch(JSON.stringify(withUser.report), /xy:?zzy|reader/);
    server.samples = [];
    const empty = await checkJson(target, '--prometheus-url', server.url, '--lag-window', '2d');
    assert.equal(empty.run.code, 0);
    assert.equal(statusOf(empty.report, 'drains.prometheus'), 'info');
    assert.match(only(empty.report, 'drains.prometheus')[0]?.message ?? '', /no drain seen \(no shutdown_manager_load_balancer_lag_seconds sample in 2d\)/);
  });

  test("the stats the drain needs that a workload's Envoy lacked: a warning naming them and what they cost; a failed query leaves the lag shown", async () => {
    const target = await drainCluster();
    const server = await prometheus(SAMPLES);
    server.answers.set(statsMissingQuery('7d'), [
      { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-7d9f', stat: 'listener.admin.downstream_cx_total' }, value: 1 },
      { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-7d9f', stat: 'listener.<listener>.downstream_cx_total' }, value: 1 },
      { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'ingress' }, value: 1 },
    ]);
    const { report } = await checkJson(target, '--prometheus-url', server.url);
    const missing = only(report, 'drains.envoy-stats-missing');
    assert.deepEqual(missing.map((entry) => [entry.status, entry.message.split(':')[0]]), [['warning', 'Deployment edge/envoy']], 'a sample without its stat label says nothing');
    assert.match(missing[0]?.message ?? '', /listener\.<listener>\.downstream_cx_total: the load balancer letting go cannot be observed.*; listener\.admin\.downstream_cx_total: a drain cannot tell the drained process from a replacement/);
    assert.match(missing[0]?.fix ?? '', /stats_config\.stats_matcher/);

    // Control: the query failing (a Prometheus that cannot answer it) says nothing of stats, and the lag is still read.
    server.answers.delete(statsMissingQuery('7d'));
    const failed = await checkJson(target, '--prometheus-url', server.url);
    assert.deepEqual(only(failed.report, 'drains.envoy-stats-missing'), []);
    assert.equal(row(failed.report, 'ingress')?.loadBalancerLagSeconds, 95);
  });

  test('drains that could not see the load balancer, and drains held by a poller: warnings naming the workload, the reason and the fix; the near-deadline warning of a polled workload asks for no longer grace period', async () => {
    const target = await drainCluster();
    const server = await prometheus([...SAMPLES, { metric: { namespace: 'edge', controller_kind: 'StatefulSet', controller_name: 'calm' }, value: 280 }]);
    server.answers.set(unobservedQuery('7d'), [
      { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-7d9f', reason: 'new-connections-missing' }, value: 2 },
      { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-6f8b', reason: 'arrival-counters-missing' }, value: 1 },
    ]);
    server.answers.set(heldByTrafficQuery('7d'), [{ metric: { namespace: 'edge', controller_kind: 'StatefulSet', controller_name: 'calm' }, value: 1 }]);
    const { report } = await checkJson(target, '--prometheus-url', server.url);
    const unobserved = only(report, 'drains.unobserved');
    assert.deepEqual(unobserved.map((entry) => [entry.status, entry.message.split(':')[0]]), [['warning', 'Deployment edge/envoy']], 'both ReplicaSets are one Deployment');
    assert.match(unobserved[0]?.message ?? '', /1 listener, neither listener\.<listener>\.downstream_cx_total .*; 2 listeners, no listener\.<listener>\.downstream_cx_total: requests are seen/);
    assert.match(unobserved[0]?.message ?? '', /Their lag is not reported/);
    const held = only(report, 'drains.held-by-traffic');
    assert.deepEqual(held.map((entry) => [entry.status, entry.message.split(':')[0]]), [['warning', 'StatefulSet edge/calm']]);
    assert.match(held[0]?.fix ?? '', /health-check filter's path .*shutdown-manager\.io\/pollers: PORT\/PERIOD on the pod template of StatefulSet edge\/calm/);
    const near = only(report, 'drains.lag-near-deadline');
    const calm = near.find((entry) => entry.message.startsWith('StatefulSet edge/calm'));
    assert.match(calm?.message ?? '', /a poller, which never stops .*a longer grace period cannot help/);
    assert.doesNotMatch(calm?.fix ?? '', /termination-grace-period/);
    // Control: a workload no poller held is still asked for a longer grace period, with the poller named as possible.
    const ingress = near.find((entry) => entry.message.startsWith('DaemonSet edge/ingress'));
    assert.match(ingress?.fix ?? '', /termination-grace-period: "\d+".*for a poller, point the load balancer's checks/);
  });

  test("a check-delay from the 99th percentile of the drains' settled lags: the bucket's upper bound plus a check-interval; longer than needed under the observed rule costs every drain, shorter with the rule off loses requests", async () => {
    const target = await drainCluster();
    const server = await prometheus(SAMPLES);
    server.answers.set(lagQuantileQuery('7d'), [
      { metric: { namespace: 'edge', controller_kind: 'ReplicaSet', controller_name: 'envoy-7d9f' }, value: 3.7 },
      { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'ingress' }, value: 40 },
      { metric: { namespace: 'edge', controller_kind: 'StatefulSet', controller_name: 'calm' }, value: 25 },
    ]);
    const { report } = await checkJson(target, '--prometheus-url', server.url);
    const [envoy, ingress, calm, ...rest] = only(report, 'drains.check-delay');
    // calm: check-delay 10 s under the observed rule, 99 % of lags within 30 s: what the rule costs over check-delay.
    assert.equal(calm?.status, 'info');
    assert.match(calm?.message ?? '', /check-delay is 10s, below 35s .*the observed rule holds a drain until a quiet period after the last client, about 40s after the failure for 99 % of them, 30s beyond check-delay$/);
    assert.equal(rest.length, 0, 'only the workloads whose drains settled a lag');
    assert.equal(envoy?.status, 'info');
    assert.match(envoy?.message ?? '', /^Deployment edge\/envoy: 99 % of its drains saw the load balancer let go within 5s .*check-delay is 1m: every drain waits at least check-delay, 50s longer than it needs; the observed rule holds a drain until a quiet period after the last client, about 15s after the failure for 99 % of them, 0s beyond check-delay$/);
    assert.match(envoy?.fix ?? '', /shutdown-manager\.io\/check-delay: "10s"/, 'the 5 s bucket and a check-interval of 5 s');
    assert.equal(ingress?.status, 'warning');
    assert.match(ingress?.message ?? '', /^DaemonSet edge\/ingress: 99 % of its drains saw the load balancer let go within 45s .*check-delay is 30s, below 50s .*--quiet-period=0s the drains that outlast it lose requests/);
    assert.match(ingress?.fix ?? '', /check-delay: "50s"/);
  });

  test('a lag no drain can measure (1e308 s, a negative one) is left out, and check ends at once (issue 35: it looped for good)', async () => {
    const target = await drainCluster();
    const server = await prometheus([
      { metric: { namespace: 'edge', controller_kind: 'StatefulSet', controller_name: 'calm' }, value: 1e308 },
      { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'ingress' }, value: -3 },
      { metric: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'idle' }, value: 12 },
    ]);
    const started = Date.now();
    const { report } = await checkJson(target, '--prometheus-url', server.url);
    assert.ok(Date.now() - started < 15_000, 'no endless loop');
    assert.deepEqual([row(report, 'calm')?.loadBalancerLagSeconds, row(report, 'ingress')?.loadBalancerLagSeconds, row(report, 'idle')?.loadBalancerLagSeconds], [null, null, 12]);
  });

  test('--prometheus: through the API server\'s service proxy, with the kubeconfig\'s token; a refusal names the RBAC it needs', async () => {
    const target = await drainCluster();
    const server = await prometheus(SAMPLES);
    const front = await serviceProxyFront(target.fake, server, { namespace: 'monitoring', name: 'prometheus-operated', port: '9090' });
    fronts.push(front);
    const kubeconfig = `${target.kubeconfig}-front`;
    await writeFile(kubeconfig, kubeconfigYaml(front.url, front.caPem, target.fake.token));
    const viaProxy = (...args: string[]): Promise<Finished> => runBuiltEntry(['check', '--kubeconfig', kubeconfig, '--output', 'json', ...args], { timeoutMs: 20_000 });

    const run = await viaProxy('--prometheus', 'monitoring/prometheus-operated:9090');
    assert.equal(run.code, 1, run.stderr);
    const report = JSON.parse(run.stdout) as CheckReport;
    assert.equal(row(report, 'ingress')?.loadBalancerLagSeconds, 95);
    assert.match(report.drains.lag.source ?? '', /^Service monitoring\/prometheus-operated:9090 \(through the API server https:\/\/127\.0\.0\.1:\d+\)$/);
    assert.deepEqual(
      front.proxied,
      [lagQuery('7d'), ...Object.values(SIDE_QUERIES).map((query) => query('7d'))].map((query) => `/api/v1/namespaces/monitoring/services/prometheus-operated:9090/proxy/api/v1/query?${new URLSearchParams({ query }).toString()}`),
    );

    front.refuse = { code: 403, message: 'services "prometheus-operated:9090" is forbidden: User "alice" cannot get resource "services/proxy" in API group "" in the namespace "monitoring"' };
    const refused = await viaProxy('--prometheus', 'monitoring/prometheus-operated:9090');
    const [finding] = only(JSON.parse(refused.stdout) as CheckReport, 'drains.prometheus');
    assert.equal(finding?.status, 'warning');
    assert.match(finding?.message ?? '', /the API server answered 403 to the service proxy for Prometheus's Service monitoring\/prometheus-operated:9090 .*cannot get resource "services\/proxy".*\(the proxy needs RBAC verb "get" on resource "services\/proxy" in its namespace: manifests\/check\)/);
    assert.match(refused.stderr, /^envoy-shutdown-manager check: cannot read the load balancer's lag from Prometheus: the API server answered 403/);

    front.refuse = undefined;
    const noService = await viaProxy('--prometheus', 'monitoring/prometheus:9090');
    assert.match(only(JSON.parse(noService.stdout) as CheckReport, 'drains.prometheus')[0]?.message ?? '', /answered 503 to the service proxy .*no endpoints available for service "prometheus"/);
  });

  test('Prometheus unreachable, an error answer, an answer that is not JSON, a stall: a finding naming it, one line on stderr, exit 2 (1 when a check failed too)', async () => {
    const target = await healthy();
    const server = await prometheus();
    // Port 1: nothing listens there (as the unreachable API server above).
    const closed = { url: 'http://127.0.0.1:1' };
    const cases: { readonly name: string; readonly fault?: PrometheusFault; readonly url?: string; readonly args?: string[]; readonly message: RegExp }[] = [
      { name: 'unreachable', url: closed.url, message: /^cannot reach Prometheus at http:\/\/127\.0\.0\.1:1: connect ECONNREFUSED 127\.0\.0\.1:1$/ },
      {
        name: 'error answer',
        fault: { status: 422, contentType: 'application/json', body: JSON.stringify({ status: 'error', errorType: 'execution', error: 'query processing would load too many samples into memory' }) },
        message: /^Prometheus at http:\/\/127\.0\.0\.1:\d+ answered 422, the query failed \(execution: query processing would load too many samples into memory\)$/,
      },
      {
        name: 'not JSON',
        fault: { status: 200, contentType: 'text/html', body: '<html><body>Grafana login</body></html>' },
        message: /^Prometheus at http:\/\/127\.0\.0\.1:\d+ answered 200 with text\/html that is not JSON: "<html><body>Grafana login<\/body><\/html>" \(is it Prometheus's address\?\)$/,
      },
      {
        name: 'JSON of something else',
        fault: { status: 200, contentType: 'application/json', body: '{"status":"success","data":{"resultType":"matrix","result":[]}}' },
        message: /answered a matrix where the query makes a vector$/,
      },
      { name: 'stall', fault: 'stall', args: ['--request-timeout', '1s'], message: /^no answer from Prometheus at http:\/\/127\.0\.0\.1:\d+ within 1000 ms \(--request-timeout\)$/ },
      {
        // Issue 35: 16 MiB of nested brackets took 7.6 s and 920 MiB to parse; refused before parsing now.
        name: 'nested brackets',
        fault: { status: 200, contentType: 'application/json', body: `{"status":"success","data":${'['.repeat(100_000)}${']'.repeat(100_000)}}` },
        message: /^Prometheus at http:\/\/127\.0\.0\.1:\d+ answered 200 with JSON nested deeper than 8 levels: not a query result/,
      },
      {
        name: 'too large',
        fault: { status: 200, contentType: 'application/json', body: `{"status":"success","data":{"resultType":"vector","result":[]},"pad":"${'x'.repeat(5 * 1024 * 1024)}"}` },
        message: /sent an answer larger than 4 MiB: not Prometheus's answer to this query$/,
      },
    ];
    for (const { name, fault, url, args = [], message } of cases) {
      server.fault = fault;
      const run = await check(target, '--output', 'json', '--prometheus-url', url ?? server.url, ...args);
      assert.equal(run.code, 2, name);
      const report = JSON.parse(run.stdout) as CheckReport;
      assert.equal(report.drains.lag.status, 'failed', name);
      const [finding] = only(report, 'drains.prometheus');
      assert.equal(finding?.status, 'warning', name);
      const reason = (finding?.message ?? '').replace("cannot read the load balancer's lag from Prometheus: ", '');
      assert.match(reason, message, name);
      assert.equal(run.stderr, `envoy-shutdown-manager check: cannot read the load balancer's lag from Prometheus: ${reason}\n`, name);
      assert.doesNotMatch(run.stderr, /\n {4}at /, `${name}: no stack trace`);
    }
    server.fault = undefined;
    const failing = await cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      addPod(fake, 'edge', 'old-1', { owner: 'Deployment/old', injected: false });
    });
    const both = await check(failing, '--prometheus-url', closed.url);
    assert.equal(both.code, 1, 'a failed check decides');
    assert.match(both.stderr, /cannot reach Prometheus/);
  });

  test('usage errors: both sources, a URL or Service of the wrong form, a bad window: exit 2, nothing read', async () => {
    const target = await healthy();
    const cases: [string[], RegExp][] = [
      [['--prometheus-url', 'http://localhost:9090', '--prometheus', 'monitoring/prometheus:9090'], /--prometheus-url and --prometheus both name Prometheus: give one/],
      [['--prometheus-url', 'localhost:9090'], /flag --prometheus-url: "localhost:9090" is not valid.*an http:\/\/ or https:\/\/ URL/],
      [['--prometheus-url', 'http://localhost:9090/?x=1'], /flag --prometheus-url/],
      [['--prometheus', 'prometheus:9090'], /flag --prometheus: "prometheus:9090" is not valid.*<namespace>\/<service>:<port>/],
      [['--prometheus', 'monitoring/prometheus'], /flag --prometheus/],
      [['--lag-window', '7 days'], /flag --lag-window: "7 days" is not valid.*a Prometheus duration such as 7d/],
      [['--lag-window', '0d'], /flag --lag-window/],
    ];
    for (const [args, message] of cases) {
      const before = target.fake.requests.length;
      const run = await check(target, ...args);
      assert.equal(run.code, 2, args.join(' '));
      assert.match(run.stderr, message, args.join(' '));
      assert.equal(run.stdout, '', args.join(' '));
      assert.equal(target.fake.requests.length, before, `${args.join(' ')}: nothing read`);
    }
  });
});
