/** The sidecar's requests and limits over HTTPS: webhook flags for the defaults, annotations per pod, bad values denied. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import jsonPatch from 'fast-json-patch';
import { loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

let webhook: RunningWebhook;
let noCpuLimit: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook();
  noCpuLimit = await startTestWebhook(['--sidecar-cpu-limit=', '--sidecar-memory-request=96Mi', '--sidecar-memory-limit=1Gi']);
});
after(() => Promise.all([webhook.close(), noCpuLimit.close()]));

async function answer(target: RunningWebhook, annotations: Record<string, string>): Promise<{ response: Json; resources?: Json }> {
  const review = await loadReview('deployment-envoy-pod.json');
  review.request.object.metadata.annotations = annotations;
  const result = await postReview(target, review);
  assert.equal(result.status, 200, result.text);
  const { response } = result.json();
  if (response.patch === undefined) return { response };
  const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
  const pod = jsonPatch.applyPatch(structuredClone(review.request.object), operations, true, false).newDocument;
  return { response, resources: pod.spec.containers.find((c: Json) => c.name === 'shutdown-manager').resources };
}

describe('sidecar resources', () => {
  test('the defaults', async () => {
    assert.deepEqual((await answer(webhook, {})).resources, { requests: { cpu: '10m', memory: '64Mi' }, limits: { cpu: '200m', memory: '128Mi' } });
  });

  test('webhook flags set the defaults; an empty limit flag leaves the limit out', async () => {
    assert.deepEqual((await answer(noCpuLimit, {})).resources, { requests: { cpu: '10m', memory: '96Mi' }, limits: { memory: '1Gi' } });
  });

  test('annotations override them, as written; an empty limit annotation removes that limit', async () => {
    const { resources } = await answer(webhook, {
      'shutdown-manager.io/sidecar-cpu-request': '0.1',
      'shutdown-manager.io/sidecar-cpu-limit': '',
      'shutdown-manager.io/sidecar-memory-request': '100M',
      'shutdown-manager.io/sidecar-memory-limit': '0.25Gi',
    });
    assert.deepEqual(resources, { requests: { cpu: '0.1', memory: '100M' }, limits: { memory: '0.25Gi' } });
    const none = await answer(webhook, { 'shutdown-manager.io/sidecar-cpu-limit': '', 'shutdown-manager.io/sidecar-memory-limit': '' });
    assert.deepEqual(none.resources, { requests: { cpu: '10m', memory: '64Mi' } }, 'no limits map at all');
  });

  test('a request above the limit the webhook flag set is denied, naming the annotation', async () => {
    const { response } = await answer(noCpuLimit, { 'shutdown-manager.io/sidecar-memory-request': '2Gi' });
    assert.equal(response.allowed, false);
    assert.equal(response.status.code, 400);
    assert.equal(
      response.status.message,
      'envoy-shutdown-manager: annotation shutdown-manager.io/sidecar-memory-request: "2Gi" is not valid; expected a memory request no higher than the limit 1Gi (default sidecar-memory-limit)',
    );
    // No CPU limit: any CPU request goes.
    assert.equal((await answer(noCpuLimit, { 'shutdown-manager.io/sidecar-cpu-request': '8' })).response.allowed, true);
  });

  test('bad quantities are denied, each named with what is wrong', async () => {
    const { response } = await answer(webhook, {
      'shutdown-manager.io/sidecar-cpu-request': '10 m',
      'shutdown-manager.io/sidecar-memory-limit': '64Mb',
    });
    assert.equal(response.allowed, false);
    assert.match(response.status.message, /annotation shutdown-manager\.io\/sidecar-cpu-request: "10 m" is not valid; expected a Kubernetes CPU quantity such as 10m, 250m, 0\.5 or 2, but it is not a number with an optional suffix/);
    assert.match(response.status.message, /annotation shutdown-manager\.io\/sidecar-memory-limit: "64Mb" is not valid; expected a Kubernetes memory quantity .*, or empty for no limit, but it is not a number/);
  });

  test('they are known annotations: no "unknown annotation" warning', async () => {
    const { response } = await answer(webhook, { 'shutdown-manager.io/sidecar-cpu-limit': '300m' });
    assert.equal(response.allowed, true);
    assert.equal(response.warnings, undefined);
  });
});
