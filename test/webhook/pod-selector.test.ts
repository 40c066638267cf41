/**
 * --pod-selector as users meet it: the running webhook over HTTPS selects exactly the pods the selector
 * matches (and counts the others not-selected), a bad selector stops the built webhook with exit code 2 and a
 * message naming the flag, and the offline inject takes the same flag.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parse } from 'yaml';
import { sampleOf } from '../support/prometheus.js';
import { runBuiltEntry } from '../support/process.js';
import { httpsRequest, loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

async function podWith(labels: Record<string, string> | undefined): Promise<Json> {
  const review = await loadReview('deployment-envoy-pod.json');
  if (labels === undefined) delete review.request.object.metadata.labels;
  else review.request.object.metadata.labels = labels;
  return review;
}

async function injected(webhook: RunningWebhook, labels: Record<string, string> | undefined): Promise<boolean> {
  const result = await postReview(webhook, await podWith(labels));
  assert.equal(result.status, 200, result.text);
  const { response } = result.json();
  assert.equal(response.allowed, true);
  if (response.patch === undefined) {
    assert.equal(response.warnings, undefined, 'a pod that is not selected gets no warning');
    return false;
  }
  return true;
}

async function notSelectedCount(webhook: RunningWebhook): Promise<number> {
  const text = (await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' })).text;
  return sampleOf(text, 'shutdown_manager_webhook_skips_total{reason="not-selected"}') ?? 0;
}

describe('the webhook with a set-based --pod-selector, over HTTPS', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook(['--pod-selector', 'tier in (edge,gateway), app.kubernetes.io/name=envoy, track!=canary, !legacy']);
  });
  after(() => webhook.close());

  const cases: Array<[string, Record<string, string> | undefined, boolean]> = [
    ['all requirements hold (track absent: != holds)', { tier: 'edge', 'app.kubernetes.io/name': 'envoy' }, true],
    ['tier is the other value of the set', { tier: 'gateway', 'app.kubernetes.io/name': 'envoy', track: 'stable' }, true],
    ['tier outside the set', { tier: 'internal', 'app.kubernetes.io/name': 'envoy' }, false],
    ['tier missing', { 'app.kubernetes.io/name': 'envoy' }, false],
    ['track is canary', { tier: 'edge', 'app.kubernetes.io/name': 'envoy', track: 'canary' }, false],
    ['labelled legacy, even empty', { tier: 'edge', 'app.kubernetes.io/name': 'envoy', legacy: '' }, false],
    ['labelled app: envoy only (the default selector would have)', { app: 'envoy' }, false],
    ['no labels at all', undefined, false],
  ];
  for (const [what, labels, expected] of cases) {
    test(`${what}: ${expected ? 'injected' : 'admitted unchanged, counted not-selected'}`, async () => {
      const before = await notSelectedCount(webhook);
      assert.equal(await injected(webhook, labels), expected);
      assert.equal(await notSelectedCount(webhook), before + (expected ? 0 : 1));
    });
  }
});

describe('the default selector, app=envoy', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  test('selects app: envoy and nothing else', async () => {
    assert.equal(await injected(webhook, { app: 'envoy', 'pod-template-hash': 'x' }), true);
    assert.equal(await injected(webhook, { app: 'envoy-gateway' }), false);
    assert.equal(await injected(webhook, { 'app.kubernetes.io/name': 'envoy' }), false);
  });
});

describe('a bad selector stops the webhook at start, exit code 2, naming the flag, the value and what is wrong', () => {
  const run = (args: string[], env: Record<string, string> = {}) => runBuiltEntry(args, { env });

  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['--pod-selector=tier in edge'], {}, /flag --pod-selector: "tier in edge" is not valid; expected a Kubernetes label selector: .*, but "in" must be followed by values in parentheses, such as tier in \(a,b\); it has "edge" at character 9 instead/],
    [[], { SHUTDOWN_MANAGER_POD_SELECTOR: 'app=envoy,' }, /environment variable SHUTDOWN_MANAGER_POD_SELECTOR: "app=envoy," is not valid; expected a Kubernetes label selector: .*, but it ends where a label key or "!" after "," belongs/],
    [['--pod-selector='], {}, /flag --pod-selector: "" is not valid; .*, but it is empty, which would select every pod/],
    [['--pod-selector=replicas>1'], {}, /but the operator ">" at character 9 cannot be written in a webhook's objectSelector/],
    [['--pod-selector=app=Envoy Proxy'], {}, /but it has "Proxy" at character 11 where "," or the end belongs/],
    [['--sidecar-memory-limit=128MB'], {}, /flag --sidecar-memory-limit: "128MB" is not valid; expected a Kubernetes memory quantity such as 64Mi, 128Mi, 1Gi or 500M, greater than zero, or empty for no limit, but it is not a number with an optional suffix/],
  ];
  for (const [args, env, message] of cases) {
    test([...args, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)].join(' '), async () => {
      const result = await run(args, env);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
      assert.doesNotMatch(result.stderr, /\n\s+at /, 'a message, not a stack trace');
    });
  }

  test('--help shows the flag with its default', async () => {
    const result = await run(['--help']);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /--pod-selector\n.*\n\s+env SHUTDOWN_MANAGER_POD_SELECTOR, default app=envoy/);
    assert.match(result.stdout, /--sidecar-cpu-limit\n.*\n\s+env SHUTDOWN_MANAGER_SIDECAR_CPU_LIMIT, default 200m/);
  });
});

describe('inject --pod-selector', () => {
  const manifests = [
    'apiVersion: apps/v1',
    'kind: Deployment',
    'metadata: {name: gateway, namespace: edge}',
    'spec:',
    '  template:',
    '    metadata:',
    '      labels: {app.kubernetes.io/name: envoy, app.kubernetes.io/component: proxy}',
    '    spec:',
    '      containers: [{name: envoy, image: envoyproxy/envoy:v1.35.3, args: [-c, /etc/envoy/envoy.yaml]}]',
    '---',
    'apiVersion: apps/v1',
    'kind: Deployment',
    'metadata: {name: classic, namespace: edge}',
    'spec:',
    '  template:',
    '    metadata:',
    '      labels: {app: envoy}',
    '    spec:',
    '      containers: [{name: envoy, image: envoyproxy/envoy:v1.35.3, args: [-c, /etc/envoy/envoy.yaml]}]',
    '',
  ].join('\n');
  const inject = (args: string[]) =>
    runBuiltEntry(['inject', '--manual', '-f', '-', ...args], { input: manifests, timeoutMs: 15_000, env: { SHUTDOWN_MANAGER_TOKEN_SEED: 'seed' } });
  const containerNames = (stdout: string, index: number): string[] =>
    (parse(stdout.split(/^---\n/m)[index] ?? '') as Json).spec.template.spec.containers.map((c: Json) => c.name);

  test('selects the templates as the webhook would select their pods', async () => {
    const byDefault = await inject([]);
    assert.equal(byDefault.code, 0, byDefault.stderr);
    assert.deepEqual([containerNames(byDefault.stdout, 0), containerNames(byDefault.stdout, 1)], [['envoy'], ['envoy', 'shutdown-manager']]);

    const chosen = await inject(['--pod-selector=app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy']);
    assert.equal(chosen.code, 0, chosen.stderr);
    assert.deepEqual([containerNames(chosen.stdout, 0), containerNames(chosen.stdout, 1)], [['envoy', 'shutdown-manager'], ['envoy']]);
  });

  test('a bad selector exits 2, naming the flag, and writes nothing', async () => {
    const result = await inject(['--pod-selector=app.kubernetes.io/name in envoy']);
    assert.equal(result.code, 2);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /flag --pod-selector: "app.kubernetes.io\/name in envoy" is not valid; .*, but "in" must be followed by values in parentheses/);
  });
});
