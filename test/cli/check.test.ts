/**
 * `envoy-shutdown-manager check` as a user runs it: the built entry point in a child process, a kubeconfig file,
 * the real @kubernetes/client-node over TLS to the fake API server. Needs `npm run build` first.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { CheckReport, Finding } from '../../src/check/report.js';
import { addNamespace, addPod, installWebhook, servingCertificate, startCheckCluster, type CheckCluster, type WebhookOptions } from '../support/check-cluster.js';
import { join } from 'node:path';
import { loadYamlFile } from '../support/manifests.js';
import { REPO_ROOT, runBuiltEntry, type Finished } from '../support/process.js';

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
    assert.doesNotMatch(run.stdout, /\x1b\[/, 'no escape codes when stdout is not a TTY');
  });

  test('--output json: the same findings, in a stable shape', async () => {
    const { run, report } = await checkJson(target);
    assert.equal(run.code, 0);
    assert.deepEqual(Object.keys(report).sort(), ['counts', 'failed', 'findings', 'version']);
    assert.equal(report.version, 1);
    assert.equal(report.failed, false);
    assert.deepEqual(Object.keys(report.counts).sort(), ['failure', 'info', 'ok', 'warning']);
    for (const finding of report.findings) {
      assert.match(finding.check, /^(webhook|pods)\.[a-z-]+$/);
      assert.ok(['ok', 'info', 'warning', 'failure'].includes(finding.status));
      assert.equal(typeof finding.message, 'string');
      assert.equal(finding.section, finding.check.split('.')[0]);
    }
    for (const name of ['configuration', 'endpoints', 'replicas', 'disruption-budget', 'ca-bundle', 'certificate-names', 'certificate-expiry']) {
      assert.equal(statusOf(report, `webhook.${name}`), 'ok', name);
    }
    assert.match(only(report, 'webhook.failure-policy')[0]?.message ?? '', /failurePolicy Ignore: Envoy pods created while the webhook cannot be called start without the sidecar/);
    assert.match(only(report, 'webhook.timeout')[0]?.message ?? '', /timeoutSeconds 5: a pod creation waits up to 5 s/);
  });

  test('pods are listed per opted-in namespace with the selector and a limit; nothing is written', async () => {
    const requests = target.fake.requests;
    assert.ok(requests.every((request) => request.method === 'GET'), 'read-only');
    const podLists = requests.filter((request) => request.path.endsWith('/pods'));
    assert.ok(podLists.length > 0);
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

  test('a caBundle of another CA, a certificate without the Service name, one expiring in 10 days', async () => {
    const other = await servingCertificate();
    const certificate = await servingCertificate({ dnsNames: ['somewhere.else.svc'], validityDays: 10 });
    const { run, report } = await checkJson(await healthy({ certificate, caBundle: other.caCertPem }));
    assert.equal(run.code, 1);
    assert.equal(statusOf(report, 'webhook.ca-bundle'), 'failure');
    assert.equal(statusOf(report, 'webhook.certificate-names'), 'failure');
    assert.match(only(report, 'webhook.certificate-names')[0]?.message ?? '', /does not name envoy-shutdown-manager\.envoy-shutdown-manager\.svc/);
    assert.equal(statusOf(report, 'webhook.certificate-expiry'), 'warning');
    assert.match(only(report, 'webhook.certificate-expiry')[0]?.message ?? '', /expires in (9|10) days/);
  });

  test('an expired certificate is a failure', async () => {
    const certificate = await servingCertificate({ validityDays: 30, now: new Date(Date.now() - 60 * 86_400_000) });
    const { report } = await checkJson(await healthy({ certificate }));
    assert.equal(statusOf(report, 'webhook.certificate-expiry'), 'failure');
    assert.match(only(report, 'webhook.certificate-expiry')[0]?.message ?? '', /expired on/);
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
    assert.equal(statusOf(report, 'pods.namespaces'), 'warning');
    assert.match(only(report, 'pods.namespaces')[0]?.fix ?? '', /kubectl label namespace .* shutdown-manager\.io\/inject=enabled/);
  });
});

describe('manifests/check', () => {
  test('the ClusterRole grants exactly the reads check makes: every request allowed, every rule used', async () => {
    const target = await cluster(async ({ fake }) => {
      await installWebhook(fake);
      addNamespace(fake, 'edge');
      addPod(fake, 'edge', 'old-1', { owner: 'Deployment/old', injected: false });
    });
    await check(target, '--all-namespaces');
    const [role] = (await loadYamlFile(join(REPO_ROOT, 'manifests/check/clusterrole.yaml'))) as { rules: Rule[] }[];
    const rules = role?.rules ?? [];
    const used = new Set<Rule>();
    for (const request of target.fake.requests) {
      const read = rbacOf(request.path);
      const rule = rules.find((candidate) => grants(candidate, read));
      assert.ok(rule, `${request.method} ${request.path} is granted`);
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

/** The RBAC request of a GET: a name makes it a get, none a list. */
function rbacOf(path: string): { group: string; resource: string; verb: string; name?: string } {
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
    assert.ok(!queries[0]?.includes('continue='));
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
      [['--output', 'yaml'], /flag --output: "yaml" is not valid/],
      [['--pod-selector', 'app in ('], /--pod-selector app in \(/],
      [['--frobnicate'], /known flags only/],
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
