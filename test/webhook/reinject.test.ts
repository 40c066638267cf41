/**
 * Pods created from a template injected before (by `inject`, or by an older webhook), over HTTPS: an identical
 * injection is admitted unchanged; another version or other settings are replaced, with a warning, and the
 * pod keeps its /shutdown token. The wait containers' own hooks survive a re-injection.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { admitReview, loadReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

let webhook: RunningWebhook;
let other: RunningWebhook;
before(async () => {
  [webhook, other] = await Promise.all([startTestWebhook(), startTestWebhook(['--drain-delay=5s'])]);
});
after(() => Promise.all([webhook.close(), other.close()]));

/** The pod as the webhook injected it, sent again as a new pod (what a template injected offline becomes). */
async function injectedReview(annotations: Record<string, string> = {}): Promise<Json> {
  const review = await loadReview('deployment-envoy-pod.json');
  const pod = review.request.object;
  pod.metadata.annotations = annotations;
  pod.spec.containers.unshift({ name: 'app', image: 'registry.example.com/app:1', lifecycle: { preStop: { exec: { command: ['sleep', '3'] } } } });
  const first = await admitReview(webhook, review);
  return { ...review, request: { ...review.request, uid: 'second', object: first.pod } };
}

function container(pod: Json, name: string): Json {
  return pod.spec.containers.find((c: Json) => c.name === name);
}

function status(pod: Json): Json {
  return JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']);
}

describe('a pod whose template was injected before', () => {
  test('an identical injection is admitted without a patch or a warning', async () => {
    const review = await injectedReview();
    const { response } = await admitReview(webhook, review);
    assert.equal(response.allowed, true);
    assert.equal(response.patch, undefined);
    assert.equal(response.warnings, undefined);
  });

  test('other settings replace it, with a warning, and the pod keeps its token', async () => {
    const review = await injectedReview();
    const before = review.request.object;
    const { response, pod } = await admitReview(other, review);
    assert.deepEqual(response.warnings, ['shutdown-manager: re-injected: replaced an injection of other settings']);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--drain-delay=5s'), "the new drain delay is in the sidecar's args");
    assert.equal(pod.spec.containers.filter((c: Json) => c.name === 'shutdown-manager').length, 1);
    assert.deepEqual(container(pod, 'envoy').lifecycle, container(before, 'envoy').lifecycle, 'the same token in the hook');
    assert.deepEqual(container(pod, 'envoy').args, container(before, 'envoy').args, 'drain flags once');
  });

  test('another version is replaced, naming it', async () => {
    const review = await injectedReview();
    const pod = review.request.object;
    pod.metadata.annotations['shutdown-manager.io/status'] = JSON.stringify({ ...status(pod), version: '0.0.9' });
    const admitted = await admitReview(webhook, review);
    assert.deepEqual(admitted.response.warnings, ['shutdown-manager: re-injected: replaced an injection of version 0.0.9']);
    assert.equal(status(admitted.pod).version, '0.1.0');
  });

  test("a wait container's own hook is kept through re-injection, and recorded for uninject", async () => {
    const review = await injectedReview({ 'shutdown-manager.io/wait-containers': 'app' });
    const { pod } = await admitReview(other, review);
    assert.equal(container(pod, 'app').lifecycle.preStop.httpGet.path, '/wait');
    assert.deepEqual(status(pod).replaced.waitPreStops, { app: { exec: { command: ['sleep', '3'] } } });
  });

  test('an old status without the originals is replaced as far as it goes, with a warning naming what stays', async () => {
    const review = await injectedReview();
    const pod = review.request.object;
    const { replaced: _replaced, ...old } = status(pod);
    pod.metadata.annotations['shutdown-manager.io/status'] = JSON.stringify(old);
    const { response } = await admitReview(webhook, review);
    assert.equal(response.warnings[0], 'shutdown-manager: re-injected: replaced an injection of other settings');
    assert.match(response.warnings[1], /^shutdown-manager: status of version 0\.1\.0 does not record the originals; not restored: "envoy" preStop hook/);
  });
});

describe('annotation shutdown-manager.io/inject takes the namespace label\'s words too', () => {
  for (const [value, injected] of [['enabled', true], ['true', true], ['disabled', false], ['false', false], ['Disabled', false]] as const) {
    test(`"${value}" ${injected ? 'injects' : 'opts the pod out'}`, async () => {
      const review = await loadReview('deployment-envoy-pod.json');
      review.request.object.metadata.annotations = { 'shutdown-manager.io/inject': value };
      const { response, pod } = await admitReview(webhook, review);
      assert.equal(response.allowed, true, JSON.stringify(response.status));
      assert.equal(container(pod, 'shutdown-manager') !== undefined, injected);
    });
  }
});

describe('annotation termination-grace-period below the pod\'s own grace period', () => {
  test('is taken as asked, with a warning saying it lowers it', async () => {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.object.metadata.annotations = { 'shutdown-manager.io/termination-grace-period': '120' };
    review.request.object.spec.terminationGracePeriodSeconds = 600;
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 120);
    assert.deepEqual(response.warnings, ['shutdown-manager: annotation shutdown-manager.io/termination-grace-period lowers the grace period from 600s to 120s']);
  });

  test('raising it is not warned about', async () => {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.object.metadata.annotations = { 'shutdown-manager.io/termination-grace-period': '120' };
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 120);
    assert.equal(response.warnings, undefined);
  });
});

describe('annotation quiet-period reaching the drain deadline', () => {
  test('is taken as asked (the deadline still ends every drain), with a warning that every drain lasts to it', async () => {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.object.metadata.annotations = { 'shutdown-manager.io/termination-grace-period': '10', 'shutdown-manager.io/check-delay': '2s' };
    review.request.object.spec.terminationGracePeriodSeconds = 10;
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(response.allowed, true);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--quiet-period=10s'), 'the quiet period is taken as asked');
    assert.deepEqual(response.warnings, ['shutdown-manager: quiet-period 10s reaches the drain deadline 9s: every drain lasts to it']);
  });

  test('none below it, nor when the rule is off', async () => {
    for (const quiet of ['5s', '0s']) {
      const review = await loadReview('deployment-envoy-pod.json');
      review.request.object.metadata.annotations = { 'shutdown-manager.io/termination-grace-period': '10', 'shutdown-manager.io/check-delay': '2s', 'shutdown-manager.io/quiet-period': quiet };
      review.request.object.spec.terminationGracePeriodSeconds = 10;
      const { response } = await admitReview(webhook, review);
      assert.equal(response.warnings, undefined, quiet);
    }
  });
});
