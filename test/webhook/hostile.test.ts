/**
 * Pods of the wrong shape, as the fuzzer of issue 11 found them (each was an HTTP 500): denied in kind with
 * status 400 naming the field, counted as invalid, never as an error; and nothing is coerced into shape.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sampleOf } from '../support/prometheus.js';
import { httpsRequest, loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook();
});
after(() => webhook.close());

async function envoyReview(change: (pod: Json) => void): Promise<Json> {
  const body = await loadReview('deployment-envoy-pod.json');
  change(body.request.object);
  return body;
}

async function metric(result: string): Promise<number> {
  const text = (await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' })).text;
  return sampleOf(text, `shutdown_manager_webhook_reviews_total{result="${result}"}`) ?? 0;
}

describe('pod fields of the wrong type', () => {
  const cases: Array<[string, (pod: Json) => void, string]> = [
    ['"ports":{}', (pod) => (pod.spec.containers[0].ports = {}), 'request.object.spec.containers[0].ports must be a list of ports (got {})'],
    ['"ports":[null]', (pod) => (pod.spec.containers[0].ports = [null]), 'request.object.spec.containers[0].ports[0] must be a port (an object with an integer containerPort) (got null)'],
    ['"image":5', (pod) => (pod.spec.containers[0].image = 5), 'request.object.spec.containers[0].image must be a string (got 5)'],
    // Fastify's validator would coerce these by default; the pod must reach the injector as it was sent.
    ['"containerPort":"8090"', (pod) => (pod.spec.containers[0].ports = [{ containerPort: '8090' }]), 'request.object.spec.containers[0].ports[0].containerPort must be a whole number (int32) (got "8090")'],
    ['"args":"--log-level"', (pod) => (pod.spec.containers[0].args = '--log-level'), 'request.object.spec.containers[0].args must be a list of strings (got "--log-level")'],
    ['"terminationGracePeriodSeconds":-1', (pod) => (pod.spec.terminationGracePeriodSeconds = -1), 'request.object.spec.terminationGracePeriodSeconds must be a whole number of seconds, 0 or more (got -1)'],
    ['"annotations":{"a":null}', (pod) => (pod.metadata.annotations = { a: null }), 'request.object.metadata.annotations must be a map of strings (got {"a":null})'],
    ['"lifecycle":{"preStop":"sleep"}', (pod) => (pod.spec.containers[0].lifecycle = { preStop: 'sleep' }), 'request.object.spec.containers[0].lifecycle.preStop must be an object (got "sleep")'],
    ['"initContainers":[{"name":"init","env":{}}]', (pod) => (pod.spec.initContainers = [{ name: 'init', env: {} }]), 'request.object.spec.initContainers[0].env must be a list of objects (got {})'],
    ['"image":[[[…]]] 20,000 deep', (pod) => (pod.spec.containers[0].image = 'DEEP'), 'request.object.spec.containers[0].image must be a string (got [[[…]]])'],
  ];
  for (const [name, change, message] of cases) {
    test(`${name} is denied in kind, naming the field`, async () => {
      const before = { invalid: await metric('invalid'), error: await metric('error') };
      const review = await envoyReview(change);
      const text = JSON.stringify(review).replace('"DEEP"', `${'['.repeat(20_000)}${']'.repeat(20_000)}`);
      const result = await httpsRequest(`${webhook.server.url}/mutate`, { ca: webhook.ca, body: text, contentType: 'application/json' });
      assert.equal(result.status, 200, result.text);
      const { response } = result.json();
      assert.equal(response.uid, review.request.uid);
      assert.equal(response.allowed, false);
      assert.equal(response.patch, undefined);
      assert.deepEqual(response.status, { code: 400, reason: 'BadRequest', message: `envoy-shutdown-manager: AdmissionReview ${message}` });
      assert.equal(await metric('invalid'), before.invalid + 1);
      assert.equal(await metric('error'), before.error);
    });
  }

  test('unknown fields of any shape are allowed, and the pod is still injected', async () => {
    const review = await envoyReview((pod) => {
      pod.spec.containers[0].x = { y: [null, {}] };
      pod.spec.containers[0].ports[0].appProtocol = 'h2c';
      pod.spec.affinity = 'DEEP';
      pod.metadata.constructor = 'not a prototype';
      pod.metadata.labels.toString = 'just a label';
    });
    const text = JSON.stringify(review).replace('"DEEP"', `${'['.repeat(20_000)}${']'.repeat(20_000)}`);
    const result = await httpsRequest(`${webhook.server.url}/mutate`, { ca: webhook.ca, body: text, contentType: 'application/json' });
    assert.equal(result.status, 200, result.text);
    assert.equal(result.json().response.allowed, true);
    assert.equal(result.json().response.patchType, 'JSONPatch');
  });

  test('the object of a review that is not a Pod CREATE is not checked', async () => {
    const review = await loadReview('update-operation.json');
    review.request.object.spec.containers = 'not a list';
    const result = await postReview(webhook, review);
    assert.equal(result.status, 200, result.text);
    assert.deepEqual(result.json().response, { uid: review.request.uid, allowed: true });
  });

  test('a review whose envelope is wrong but whose uid can be read is answered in kind', async () => {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.operation = 1;
    const result = await postReview(webhook, review);
    assert.equal(result.status, 200, result.text);
    const { response } = result.json();
    assert.equal(response.uid, review.request.uid);
    assert.equal(response.allowed, false);
    assert.match(response.status.message, /AdmissionReview request.operation must be a string such as "CREATE" \(got 1\)/);
  });
});

test(
  'an annotation under our prefix named like an Object.prototype member is not a 5xx',
  async () => {
    for (const suffix of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const review = await envoyReview((pod) => (pod.metadata.annotations = { [`shutdown-manager.io/${suffix}`]: '1' }));
      const result = await postReview(webhook, review);
      assert.equal(result.status, 200, `${suffix}: ${result.text}`);
      assert.deepEqual(result.json().response.warnings, [`shutdown-manager: unknown annotation shutdown-manager.io/${suffix} ignored`]);
    }
  },
);
