/** GET /metrics counts what the webhook did, by outcome and reason, in Prometheus text format. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sampleOf } from '../support/prometheus.js';
import { httpsRequest, loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook();
});
after(() => webhook.close());

test('injections, skips by reason, denials by setting, invalid requests and a latency histogram', async () => {
  for (const fixture of ['deployment-envoy-pod.json', 'deployment-envoy-pod.json', 'non-envoy-pod.json', 'ambiguous-envoy-pod.json', 'bad-annotations.json', 'update-operation.json']) {
    assert.equal((await postReview(webhook, await loadReview(fixture))).status, 200);
  }
  assert.equal((await postReview(webhook, { apiVersion: 'v1' })).status, 400);
  const wrongType = await httpsRequest(`${webhook.server.url}/mutate`, { ca: webhook.ca, body: 'x', contentType: 'text/plain' });
  assert.equal(wrongType.status, 415);

  const result = await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' });
  assert.equal(result.status, 200);
  assert.match(String(result.headers['content-type']), /^text\/plain; version=0\.0\.4/);
  const text = result.text;
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_injections_total'), 2);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_reviews_total{result="injected"}'), 2);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_reviews_total{result="skipped"}'), 2);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_reviews_total{result="denied"}'), 1);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_reviews_total{result="ignored"}'), 1);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_reviews_total{result="invalid"}'), 2);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_skips_total{reason="not-selected"}'), 1);
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_skips_total{reason="no-envoy-container"}'), 1);
  for (const setting of ['check-interval', 'check-delay', 'min-open-connections', 'termination-grace-period', 'envoy-admin-port', 'serve-port']) {
    assert.equal(sampleOf(text, `shutdown_manager_webhook_denials_total{reason="${setting}"}`), 1, setting);
  }
  assert.equal(sampleOf(text, 'shutdown_manager_webhook_review_duration_seconds_count'), 6, 'the reviews answered, not the rejected requests');
  assert.ok((sampleOf(text, 'process_resident_memory_bytes') ?? 0) > 0, 'the process metrics are exported');
});
