/**
 * What the status annotation records of the hooks injection replaces: a LifecycleHandler's own fields, as the API
 * server decodes a pod before admission, so that uninjection restores them exactly and a review that was never
 * decoded cannot make the record deeper than a handler (a 5,000-deep hook once overflowed the annotation's
 * JSON.stringify: a 500 from the webhook, found by test/webhook/hostile.property.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1LifecycleHandler, V1Pod } from '@kubernetes/client-node';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { injectPod } from '../../src/inject/injector.js';
import { recordedHandler } from '../../src/inject/status.js';
import { uninjectPod } from '../../src/inject/uninjector.js';

const HANDLERS: readonly V1LifecycleHandler[] = [
  { exec: { command: ['/bin/sh', '-c', 'sleep 5'] } },
  { httpGet: { path: '/drain', port: 9901, host: '127.0.0.1', scheme: 'HTTP', httpHeaders: [{ name: 'X-A', value: 'b' }] } },
  { httpGet: { port: 'admin' } },
  { tcpSocket: { port: 9901, host: 'localhost' } },
  { sleep: { seconds: 15 } },
];

function envoyPod(preStop: unknown): V1Pod {
  return {
    metadata: { name: 'envoy', labels: { app: 'envoy' } },
    spec: { containers: [{ name: 'envoy', image: 'envoyproxy/envoy:v1.36.2', lifecycle: { preStop: preStop as V1LifecycleHandler } }] },
  };
}

function deeplyNested(depth: number): unknown {
  return JSON.parse(`${'{"a":'.repeat(depth)}null${'}'.repeat(depth)}`) as unknown;
}

describe('the hooks the status records', () => {
  test('every kind of handler is recorded whole and restored exactly by uninject', () => {
    const config = parseWebhookConfig([], {}).injection;
    for (const handler of HANDLERS) {
      assert.deepEqual(recordedHandler(handler), handler);
      const injected = injectPod(envoyPod(handler), config, 'token-0123456789abcdef0123456789abcdef');
      assert.equal(injected.action, 'inject');
      if (injected.action !== 'inject') continue;
      const undone = uninjectPod(injected.pod);
      assert.equal(undone.action, 'uninject');
      if (undone.action === 'uninject') assert.deepEqual(undone.pod.spec?.containers[0]?.lifecycle?.preStop, handler);
    }
  });

  test('what the API server would have dropped is left out: unknown fields, wrong types', () => {
    assert.deepEqual(recordedHandler({ exec: { command: ['a', 1] }, sleep: { seconds: 3 }, extra: { a: 1 } }), { sleep: { seconds: 3 } });
    assert.deepEqual(recordedHandler({ httpGet: { port: 80, path: 7, httpHeaders: [{ name: 'a' }, { name: 'b', value: 'c' }] } }), {
      httpGet: { port: 80, httpHeaders: [{ name: 'b', value: 'c' }] },
    });
    assert.deepEqual(recordedHandler('not a handler'), {});
  });

  test('a hook nested 20,000 levels deep is injected, with a status of ordinary size', () => {
    const config = parseWebhookConfig([], {}).injection;
    for (const depth of [5_000, 20_000]) {
      const injected = injectPod(envoyPod(deeplyNested(depth)), config, 'token-0123456789abcdef0123456789abcdef');
      assert.equal(injected.action, 'inject');
      if (injected.action !== 'inject') continue;
      const status = injected.pod.metadata?.annotations?.['shutdown-manager.io/status'] ?? '';
      assert.ok(status.length < 2_000, `status of ${status.length} characters`);
      assert.deepEqual((JSON.parse(status) as { replaced: { envoyPreStop: unknown } }).replaced.envoyPreStop, {});
    }
  });
});
