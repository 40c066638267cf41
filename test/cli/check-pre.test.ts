/**
 * `envoy-shutdown-manager check --pre` as a user runs it before install: the built entry point in a child process,
 * a kubeconfig file, the fake API server answering /version, SelfSubjectAccessReviews and discovery. Needs
 * `npm run build` first.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { BASE_RESOURCES, CERT_MANAGER_RESOURCES } from '../../src/check/pre.js';
import type { CheckReport, Finding } from '../../src/check/report.js';
import { startCheckCluster, type CheckCluster } from '../support/check-cluster.js';
import type { AccessAttributes } from '../support/fake-kube-api.js';
import { MANIFESTS_DIR, resolveKustomization } from '../support/manifests.js';
import { runBuiltEntry, type Finished } from '../support/process.js';

const clusters: CheckCluster[] = [];
after(async () => {
  await Promise.all(clusters.map((cluster) => cluster.close()));
});

/** An empty cluster (nothing installed), set up by `setup`. */
async function cluster(setup: (cluster: CheckCluster) => void = () => undefined): Promise<CheckCluster> {
  const started = await startCheckCluster();
  clusters.push(started);
  setup(started);
  return started;
}

function check(target: CheckCluster, ...args: string[]): Promise<Finished> {
  return runBuiltEntry(['check', '--kubeconfig', target.kubeconfig, ...args], { timeoutMs: 20_000 });
}

async function pre(target: CheckCluster, ...args: string[]): Promise<{ run: Finished; report: CheckReport; finding: (name: string) => Finding | undefined }> {
  const run = await check(target, '--pre', '--output', 'json', ...args);
  assert.equal(run.stderr, '', 'nothing on stderr');
  const report = JSON.parse(run.stdout) as CheckReport;
  return { run, report, finding: (name) => report.findings.find((finding) => finding.check === name) };
}

/** The access reviews the fake answered, as "verb resource.group [namespace]". */
function reviewsAsked(target: CheckCluster): string[] {
  return target.fake.requests
    .filter((request) => request.method === 'POST' && request.path.endsWith('/selfsubjectaccessreviews'))
    .map((request) => {
      const { verb, group, resource, namespace } = (request.body as { spec: { resourceAttributes: AccessAttributes } }).spec.resourceAttributes;
      return `${verb} ${resource}${group === '' ? '' : `.${group}`}${namespace === undefined ? '' : ` ${namespace}`}`;
    })
    .sort();
}

describe('check --pre', () => {
  test('a cluster that can take the install: exit 0; only /version and access reviews read, get/create/patch on each kind of manifests/base', async () => {
    const target = await cluster();
    const { run, report, finding } = await pre(target);
    assert.equal(run.code, 0);
    assert.deepEqual(report.findings.map(({ check: name, section, status }) => [name, section, status]), [
      ['pre.kubernetes-version', 'pre', 'ok'],
      ['pre.permissions', 'pre', 'ok'],
    ]);
    assert.match(finding('pre.kubernetes-version')?.message ?? '', /^Kubernetes v1\.31\.2: 1\.26 or later/);
    const paths = new Set(target.fake.requests.map((request) => `${request.method} ${request.path}`));
    assert.deepEqual([...paths].sort(), ['GET /version', 'POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews'], 'no read that needs RBAC');
    const asked = reviewsAsked(target);
    assert.equal(asked.length, BASE_RESOURCES.length * 3);
    for (const expected of ['create deployments.apps envoy-shutdown-manager', 'patch mutatingwebhookconfigurations.admissionregistration.k8s.io', 'get namespaces', 'create serviceaccounts envoy-shutdown-manager']) {
      assert.ok(asked.includes(expected), `${expected} in ${asked.join(', ')}`);
    }
  });

  test('the text report says whether the cluster is ready to install', async () => {
    const target = await cluster((started) => (started.fake.denies = ({ verb, resource }) => verb === 'create' && resource === 'namespaces'));
    const run = await check(target, '--pre');
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^Before install\n/);
    assert.match(run.stdout, /FAIL kubectl apply of the install would be refused: you may not create namespaces {2}\[pre\.permissions\]\n {9}fix: .*kubectl auth can-i create namespaces\n/);
    assert.match(run.stdout, /\nNot ready to install: 1 failed/);
  });

  test('a permission missing: a failure naming each verb, resource and namespace refused, exit 1', async () => {
    const target = await cluster((started) => {
      started.fake.denies = ({ verb, resource }) => (verb === 'patch' && resource === 'deployments') || resource === 'mutatingwebhookconfigurations';
    });
    const { run, finding } = await pre(target);
    assert.equal(run.code, 1);
    const permissions = finding('pre.permissions');
    assert.equal(permissions?.status, 'failure');
    assert.match(permissions?.message ?? '', /you may not patch deployments\.apps in namespace envoy-shutdown-manager, /);
    assert.match(permissions?.message ?? '', /get mutatingwebhookconfigurations\.admissionregistration\.k8s\.io, create mutatingwebhookconfigurations/);
    assert.match(permissions?.fix ?? '', /kubectl auth can-i patch deployments\.apps -n envoy-shutdown-manager$/);
  });

  test("the API server's version: below 1.26 a failure with the way out; a provider's 1.28+ is read as 1.28", async () => {
    const old = await cluster((started) => (started.fake.serverVersion = { major: '1', minor: '25', gitVersion: 'v1.25.16', platform: 'linux/amd64' }));
    const first = await pre(old);
    assert.equal(first.run.code, 1);
    assert.equal(first.finding('pre.kubernetes-version')?.status, 'failure');
    assert.match(first.finding('pre.kubernetes-version')?.message ?? '', /Kubernetes v1\.25\.16 is older than 1\.26: its kubelets drop the preStop hooks' headers/);
    assert.match(first.finding('pre.kubernetes-version')?.fix ?? '', /--protect-shutdown=false/);
    const managed = await cluster((started) => (started.fake.serverVersion = { major: '1', minor: '28+', gitVersion: 'v1.28.15-gke.1', platform: 'linux/amd64' }));
    const second = await pre(managed);
    assert.equal(second.run.code, 0);
    assert.equal(second.finding('pre.kubernetes-version')?.status, 'ok');
  });

  test('--cert-manager: cert-manager absent is a failure naming its CRDs and the install without it; present is ok; its kinds are asked about too', async () => {
    const without = await cluster();
    const absent = await pre(without, '--cert-manager');
    assert.equal(absent.run.code, 1);
    assert.equal(absent.finding('pre.cert-manager')?.status, 'failure');
    assert.match(absent.finding('pre.cert-manager')?.message ?? '', /certificates\.cert-manager\.io and issuers\.cert-manager\.io/);
    assert.match(absent.finding('pre.cert-manager')?.fix ?? '', /kubectl apply -k manifests\/self-signed/);
    assert.equal(reviewsAsked(without).length, (BASE_RESOURCES.length + CERT_MANAGER_RESOURCES.length) * 3);
    assert.ok(reviewsAsked(without).includes('create certificates.cert-manager.io envoy-shutdown-manager'), 'asks whether it may create cert-manager Certificates');

    const partial = await cluster((started) => started.fake.serveApiGroup('cert-manager.io/v1', ['certificates']));
    assert.match((await pre(partial, '--cert-manager')).finding('pre.cert-manager')?.message ?? '', /served without issuers\.cert-manager\.io/);

    const installed = await cluster((started) => started.fake.serveApiGroup('cert-manager.io/v1', ['certificates', 'certificaterequests', 'issuers', 'clusterissuers']));
    const present = await pre(installed, '--cert-manager');
    assert.equal(present.run.code, 0);
    assert.equal(present.finding('pre.cert-manager')?.status, 'ok');
    assert.ok(installed.fake.calls().includes('GET /apis/cert-manager.io/v1'), 'read through discovery, which every user may read');
  });

  test('usage errors: exit 2 naming the flag, nothing read', async () => {
    const target = await cluster();
    const cases: [string[], RegExp][] = [
      [['--cert-manager'], /^envoy-shutdown-manager check: --cert-manager goes with --pre/],
      [['--pre', '-n', 'edge'], /^envoy-shutdown-manager check: --pre checks the cluster before install: --namespace is about the installed webhook\n$/],
      [['--pre', '-A', '--prometheus-url', 'http://localhost:9090'], /--all-namespaces, --prometheus-url are about the installed webhook/],
      [['--pre=maybe'], /flag --pre: "maybe" is not valid/],
      [['--pree'], /unknown flag --pree; did you mean --pre\?/],
    ];
    for (const [args, message] of cases) {
      const run = await check(target, ...args);
      assert.equal(run.code, 2, args.join(' '));
      assert.match(run.stderr, message, args.join(' '));
    }
    assert.deepEqual(target.fake.requests, []);
  });

  test("the kinds asked about are exactly those of the install's manifests", async () => {
    const kindsOf = async (dir: string): Promise<string[]> => [...new Set((await resolveKustomization(dir)).map((doc) => String(doc.value.kind)))].sort();
    assert.deepEqual(BASE_RESOURCES.map((resource) => resource.kind).sort(), await kindsOf(join(MANIFESTS_DIR, 'base')));
    assert.deepEqual([...BASE_RESOURCES, ...CERT_MANAGER_RESOURCES].map((resource) => resource.kind).sort(), await kindsOf(MANIFESTS_DIR));
  });
});
