/**
 * `inject` without --manual (issue 29, item 5), as users run it: the built entry point. It writes the webhook's
 * opt-in and no /shutdown token, says per resource what became of it, names the namespaces the webhook needs
 * labelled, refuses a token seed, and `uninject` gives back the input.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { runBuiltEntry, type Finished } from '../support/process.js';
import { admitReview, loadReview, startTestWebhook } from '../support/webhook.js';

type Json = any; // parsed manifests, navigated freely by the assertions

const FIXTURES = fileURLToPath(new URL('../fixtures/manifests/', import.meta.url));
const MIXED = readFileSync(`${FIXTURES}mixed.yaml`, 'utf8');
const OPT_IN = 'shutdown-manager.io/inject';

function run(args: readonly string[], input: string, env: Record<string, string> = {}): Promise<Finished> {
  return runBuiltEntry([...args], { input, env, timeoutMs: 15_000 });
}

/** The summary lines of stderr (the notes left out). */
function summary(stderr: string): string[] {
  return stderr.split('\n').filter((line) => line !== '' && !line.startsWith('note: '));
}

function documents(stream: string): Json[] {
  return parseAllDocuments(stream).map((document) => document.toJS() as Json);
}

/** A Deployment of Envoy in `namespace`, or in none. */
function envoyDeployment(name: string, namespace?: string, annotations = ''): string {
  return [
    'apiVersion: apps/v1',
    'kind: Deployment',
    'metadata:',
    `  name: ${name}`,
    ...(namespace === undefined ? [] : [`  namespace: ${namespace}`]),
    'spec:',
    '  selector: {matchLabels: {app: envoy}}',
    '  template:',
    '    metadata:',
    '      labels: {app: envoy}',
    ...(annotations === '' ? [] : ['      annotations:', `        ${annotations}`]),
    '    spec:',
    '      containers:',
    '      - name: envoy',
    '        image: envoyproxy/envoy:v1.31.2',
    '        args: ["-c", "/etc/envoy/envoy.yaml"]',
    '',
  ].join('\n');
}

describe('inject, by default: the opt-in, no token', () => {
  test('the selected template gets the annotation and nothing else; every other document is byte for byte', async () => {
    const result = await run(['inject', '-'], MIXED);
    assert.equal(result.code, 0, result.stderr);
    const before = MIXED.split(/^---\n/m);
    const after = result.stdout.split(/^---\n/m);
    assert.equal(after.length, before.length);
    for (const index of [0, 2, 3, 4, 5]) assert.equal(after[index], before[index], `document ${index + 1} changed`);
    assert.equal(after[1], before[1]!.replace('        shutdown-manager.io/check-delay: 15s\n', `        shutdown-manager.io/check-delay: 15s\n        ${OPT_IN}: enabled\n`));
    assert.doesNotMatch(result.stdout, /shutdown-manager\.io\/status|SHUTDOWN_MANAGER_SHUTDOWN_TOKEN|Authorization|Bearer/);
  });

  test('the summary says what became of each resource, and the random-token note is gone', async () => {
    const result = await run(['inject', '-'], MIXED);
    assert.deepEqual(summary(result.stderr), [
      'namespace "edge" skipped (not a workload)',
      'deployment "edge/envoy" annotated (the webhook injects it)',
      'configmap "edge/envoy-config" skipped (not a workload)',
      'service "edge/envoy" skipped (not a workload)',
      'cronjob "edge/envoy-canary" skipped (runs to completion; see the note above)',
      'daemonset "edge/node-exporter" skipped (does not match --pod-selector app=envoy)',
    ]);
    assert.doesNotMatch(result.stderr, /tokens are random/);
    // The Namespace in the input is labelled: no note asks for it.
    assert.doesNotMatch(result.stderr, /kubectl label namespace/);
  });

  test('run again on its output, nothing changes and the summary says so', async () => {
    const first = await run(['inject', '-'], MIXED);
    const again = await run(['inject', '--require-injection', '-'], first.stdout);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, first.stdout);
    assert.match(again.stderr, /^deployment "edge\/envoy" unchanged \(already left to the webhook\)$/m);
  });

  test('a namespace the input does not show labelled is named with the command that labels it', async () => {
    const input = `${envoyDeployment('a', 'edge')}---\n${envoyDeployment('b', 'gateways')}---\n${envoyDeployment('c')}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: gateways\n  labels: {${OPT_IN}: disabled}\n`;
    const result = await run(['inject', '-'], input);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /^note: the webhook injects only in namespaces labelled shutdown-manager\.io\/inject=enabled: unless edge is, kubectl label namespace edge shutdown-manager\.io\/inject=enabled/m);
    assert.match(result.stderr, /^note: namespace gateways is labelled shutdown-manager\.io\/inject with another value than enabled: the webhook injects none of its pods$/m);
    assert.match(result.stderr, /^note: 1 pod template\(s\) name no namespace/m);
    assert.equal(documents(result.stdout).filter((object) => object.spec?.template?.metadata?.annotations?.[OPT_IN] === 'enabled').length, 3);
  });

  test('what the webhook would deny is refused here, naming the resource; an opted-out template is left alone', async () => {
    const bad = await run(['inject', '-'], envoyDeployment('a', 'edge', 'shutdown-manager.io/check-delay: soon'));
    assert.equal(bad.code, 1);
    assert.equal(bad.stdout, '');
    assert.match(bad.stderr, /^envoy-shutdown-manager inject: stdin: document 1: Deployment edge\/a: .*check-delay/);
    const out = await run(['inject', '-'], envoyDeployment('a', 'edge', `${OPT_IN}: disabled`));
    assert.equal(out.code, 0, out.stderr);
    assert.equal(out.stdout, envoyDeployment('a', 'edge', `${OPT_IN}: disabled`));
    assert.match(out.stderr, /^deployment "edge\/a" skipped \(opted out: shutdown-manager\.io\/inject\)$/m);
  });

  test('a template injected with --manual loses that injection and its token, and gets the opt-in', async () => {
    const manual = await run(['inject', '--manual', '-'], MIXED);
    assert.equal(manual.code, 0, manual.stderr);
    assert.match(manual.stdout, /SHUTDOWN_MANAGER_SHUTDOWN_TOKEN/);
    const converted = await run(['inject', '-'], manual.stdout);
    assert.equal(converted.code, 0, converted.stderr);
    assert.match(converted.stderr, /^deployment "edge\/envoy" annotated \(offline injection and its token removed; the webhook injects it\)$/m);
    const plain = await run(['inject', '-'], MIXED);
    assert.deepEqual(documents(converted.stdout), documents(plain.stdout), 'the same as the opt-in of the original');
  });

  test('a token seed is for --manual: a usage error without it, naming both', async () => {
    for (const [args, env] of [[['--token-seed=s'], {}], [[], { SHUTDOWN_MANAGER_TOKEN_SEED: 's' }]] as const) {
      const result = await run(['inject', ...args, '-'], MIXED, env);
      assert.equal(result.code, 2, result.stderr);
      assert.equal(result.stdout, '');
      assert.equal(result.stderr, 'envoy-shutdown-manager inject: --token-seed (or SHUTDOWN_MANAGER_TOKEN_SEED) is for --manual: without it no token is written, the webhook draws one for every pod\n');
    }
    const manual = await run(['inject', '--manual', '--token-seed=s', '-'], MIXED);
    assert.equal(manual.code, 0, manual.stderr);
  });

  test('--require-injection fails when no template is left to the webhook', async () => {
    const result = await run(['inject', '--require-injection', '--pod-selector=app=nope', '-'], MIXED);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /nothing injected: no pod template \(of 3\) matches --pod-selector app=nope \(--require-injection\)/);
  });
});

describe('uninject undoes both', () => {
  test('the opt-in: the input back byte for byte, and the summary says what was removed', async () => {
    const input = `${envoyDeployment('a', 'edge')}---\n${MIXED}`;
    const injected = await run(['inject', '-'], input);
    const removed = await run(['uninject', '-'], injected.stdout);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, input);
    assert.match(removed.stderr, /^deployment "edge\/a" uninjected \(annotation shutdown-manager\.io\/inject removed\)$/m);
    assert.match(removed.stderr, /^deployment "edge\/envoy" uninjected \(annotation shutdown-manager\.io\/inject removed\)$/m);
  });

  test('--manual: the input back byte for byte, with the opt-in annotation a user wrote kept', async () => {
    const input = envoyDeployment('a', 'edge', `${OPT_IN}: enabled`);
    const injected = await run(['inject', '--manual', '-'], input);
    assert.match(injected.stderr, /^deployment "edge\/a" injected$/m);
    const removed = await run(['uninject', '-'], injected.stdout);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, input);
    assert.match(removed.stderr, /^deployment "edge\/a" uninjected$/m);
  });
});

describe('what inject writes, the webhook injects', () => {
  test('a pod from the annotated template, over HTTPS: the sidecar, with a token drawn by the webhook', { timeout: 30_000 }, async (t: TestContext) => {
    const webhook = await startTestWebhook();
    t.after(() => webhook.close());
    const review = await loadReview('deployment-envoy-pod.json');
    const annotated = await run(['inject', '-'], JSON.stringify(review.request.object));
    assert.equal(annotated.code, 0, annotated.stderr);
    const pod: Json = JSON.parse(annotated.stdout);
    assert.equal(pod.metadata.annotations[OPT_IN], 'enabled');
    assert.ok(!pod.spec.containers.some((container: Json) => container.name === 'shutdown-manager'), 'no sidecar written');

    const { response, pod: admitted } = await admitReview(webhook, { ...review, request: { ...review.request, object: pod } });
    assert.equal(response.allowed, true);
    assert.doesNotMatch(JSON.stringify(response.warnings ?? []), /unknown annotation/);
    const sidecar = admitted.spec.containers.find((container: Json) => container.name === 'shutdown-manager');
    assert.ok(sidecar, 'the webhook injected the sidecar');
    const token: string = sidecar.env.find((variable: Json) => variable.name === 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN').value;
    assert.ok(token.length >= 32, 'a token of its own');
  });
});
