/** What the webhook answers to requests that are not well-formed AdmissionReviews, and its own probes. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { httpsRequest, loadReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook(['--body-limit=65536']);
});
after(() => webhook.close());

function post(body: string | Buffer, contentType = 'application/json') {
  return httpsRequest(`${webhook.server.url}/mutate`, { ca: webhook.ca, body, contentType });
}

describe('malformed requests', () => {
  const cases: Array<[string, string, RegExp]> = [
    ['not JSON', '{"apiVersion": ', /not valid JSON/i],
    ['a JSON array', '[]', /AdmissionReview body must be a JSON object/],
    ['an empty object', '{}', /AdmissionReview apiVersion must be one of admission.k8s.io\/v1, admission.k8s.io\/v1beta1 \(got undefined\)/],
    [
      'the wrong kind',
      '{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{}}',
      /AdmissionReview kind must be "AdmissionReview" \(got "Pod"\)/,
    ],
    [
      'no request',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
      /AdmissionReview request must be an object/,
    ],
    [
      'no uid',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE","kind":{"kind":"Pod"}}}',
      /AdmissionReview request.uid must be a non-empty string/,
    ],
  ];
  for (const [name, body, message] of cases) {
    test(`${name} gets 400 with a clear message`, async () => {
      const result = await post(body);
      assert.equal(result.status, 400, result.text);
      assert.match(result.json().message, message);
    });
  }

  // With a uid to answer to, the API server gets an AdmissionReview it understands and shows the message.
  const answeredInKind: Array<[string, string, RegExp]> = [
    [
      'a Pod CREATE without the pod',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE","kind":{"group":"","version":"v1","kind":"Pod"}}}',
      /AdmissionReview request.object must be the Pod being created/,
    ],
    [
      'containers that are not a list',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE","kind":{"kind":"Pod"},"object":{"metadata":{"labels":{"app":"envoy"}},"spec":{"containers":{"name":"envoy"}}}}}',
      /request.object.spec.containers must be a list of containers/,
    ],
    [
      'labels that are not strings',
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE","kind":{"kind":"Pod"},"object":{"metadata":{"labels":{"app":1}},"spec":{"containers":[]}}}}',
      /request.object.metadata.labels must be a map of strings/,
    ],
  ];
  for (const [name, body, message] of answeredInKind) {
    test(`${name} is denied in kind with status 400 and a clear message`, async () => {
      const result = await post(body);
      assert.equal(result.status, 200, result.text);
      const { response } = result.json();
      assert.equal(response.uid, '1');
      assert.equal(response.allowed, false);
      assert.equal(response.status.code, 400);
      assert.match(response.status.message, message);
    });
  }

  test('a wrong content type gets 415', async () => {
    const body = JSON.stringify(await loadReview('deployment-envoy-pod.json'));
    const result = await post(body, 'text/plain');
    assert.equal(result.status, 415, result.text);
    assert.match(result.json().message, /Unsupported Media Type/i);
  });

  test('a body over the limit gets 413 and the server keeps serving', async () => {
    const result = await post(Buffer.alloc(70_000, 0x20));
    assert.equal(result.status, 413, result.text);
    const health = await httpsRequest(`${webhook.server.url}/healthz`, { ca: webhook.ca, method: 'GET' });
    assert.equal(health.status, 200);
  });

  test('a non-pod kind is allowed untouched, uid echoed', async () => {
    const result = await post(
      '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-42","operation":"CREATE","kind":{"group":"apps","version":"v1","kind":"Deployment"},"object":{}}}',
    );
    assert.equal(result.status, 200);
    assert.deepEqual(result.json().response, { uid: 'u-42', allowed: true });
  });
});

describe('probes and routes', () => {
  for (const path of ['/healthz', '/readyz']) {
    test(`GET ${path} answers 200`, async () => {
      const result = await httpsRequest(`${webhook.server.url}${path}`, { ca: webhook.ca, method: 'GET' });
      assert.equal(result.status, 200);
      assert.equal(result.text, 'ok\n');
    });
  }

  test('GET /mutate is not a route', async () => {
    const result = await httpsRequest(`${webhook.server.url}/mutate`, { ca: webhook.ca, method: 'GET' });
    assert.equal(result.status, 404);
  });

  test('a client that does not trust the CA is refused', async () => {
    const other = (await import('../support/webhook.js')).localCertificates;
    const stranger = await other();
    await assert.rejects(
      httpsRequest(`${webhook.server.url}/healthz`, { ca: stranger.caCertPem, method: 'GET' }),
      /self.signed|unable to verify|certificate/i,
    );
  });
});
