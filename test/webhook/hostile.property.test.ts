/**
 * 2,000 generated hostile AdmissionReviews sent over HTTPS (8 keep-alive connections at once) to a real webhook:
 * no answer is a 5xx, an answer in kind echoes the uid whenever the body let it be read, a wrong type in a field
 * the webhook reads is rejected naming that field, and every patch applies to the pod that was sent.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { sampleOf } from '../support/prometheus.js';
import { classify, hostileCases, hostileClient, loadBases, problemsWith, type AnswerClass, type HostileClient } from './hostile-reviews.js';
import { httpsRequest, startTestWebhook, type RunningWebhook } from '../support/webhook.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const BODY_LIMIT = 65_536;
const CONNECTIONS = 8;
const RUNS = 250; // of CONNECTIONS reviews each

let webhook: RunningWebhook;
let client: HostileClient;
before(async () => {
  webhook = await startTestWebhook([`--body-limit=${BODY_LIMIT}`]);
  client = hostileClient(webhook.server.url, webhook.ca, CONNECTIONS);
});
after(async () => {
  client.close();
  await webhook.close();
});

test(`${RUNS * CONNECTIONS} hostile reviews: no 5xx, uid echoed, wrong types named, patches apply`, async () => {
  const seen = new Map<AnswerClass, number>();
  await fc.assert(
    fc.asyncProperty(fc.array(hostileCases(loadBases(), BODY_LIMIT), { minLength: CONNECTIONS, maxLength: CONNECTIONS }), async (batch) => {
      const answers = await Promise.all(batch.map((hostile) => client.send(hostile)));
      batch.forEach((hostile, index) => {
        const answer = answers[index] as { status: number; text: string };
        assert.deepEqual(problemsWith(hostile, answer, BODY_LIMIT), [], hostile.steps.join(' | ').slice(0, 500));
        const kind = classify(answer);
        seen.set(kind, (seen.get(kind) ?? 0) + 1);
      });
    }),
    { numRuns: RUNS },
  );

  // The generator must reach every kind of answer, or the property says little.
  const count = (kind: AnswerClass): number => seen.get(kind) ?? 0;
  const summary = JSON.stringify(Object.fromEntries(seen));
  assert.ok(count('patched') >= 100, `too few injections: ${summary}`);
  assert.ok(count('invalid (in kind)') >= 300, `too few rejections in kind: ${summary}`);
  assert.ok(count('denied') >= 20 && count('allowed') >= 100, `too few decisions: ${summary}`);
  assert.ok(count('HTTP 400') >= 100 && count('HTTP 413') >= 20 && count('HTTP 415') >= 5, `too few HTTP errors: ${summary}`);

  // The webhook counted each rejection as invalid, and none as its own error.
  const metrics = (await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' })).text;
  const rejected = [...seen].filter(([kind]) => kind.startsWith('HTTP ') || kind === 'invalid (in kind)').reduce((sum, [, n]) => sum + n, 0);
  assert.equal(sampleOf(metrics, 'shutdown_manager_webhook_reviews_total{result="invalid"}'), rejected);
  assert.equal(sampleOf(metrics, 'shutdown_manager_webhook_reviews_total{result="error"}'), undefined);
});
