/**
 * What every caller of the generated Kubernetes client needs around a request (src/kube/requests.ts): its
 * AbortSignal, given through a middleware, and the Status message of an error answer. The middleware is tried on
 * the real client against the fake API server (test/support/fake-kube-api.ts).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ApiException, CoreV1Api } from '@kubernetes/client-node';
import { statusOf, withSignal } from '../../src/kube/requests.js';
import { FakeKubeApi } from '../support/fake-kube-api.js';
import { waitUntil, within } from '../support/wait.js';

describe('statusOf', () => {
  test("reads a Status object's message and reason, as an object or as its JSON text", () => {
    const status = { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'pods is forbidden: User "jane" cannot list resource "pods"', reason: 'Forbidden', code: 403 };
    const expected = { message: status.message, reason: 'Forbidden' };
    assert.deepEqual(statusOf(status), expected, 'the parsed Status');
    assert.deepEqual(statusOf(JSON.stringify(status)), expected, 'the Status as the client hands its body over, a string');
  });

  test('leaves out what is not a string, and anything else of the Status', () => {
    assert.deepEqual(statusOf({ message: 42, reason: 'NotFound', details: { name: 'x' } }), { reason: 'NotFound' }, 'a message of another type is none');
    assert.deepEqual(statusOf({ message: 'only this' }), { message: 'only this' }, 'no reason, none claimed');
    assert.deepEqual(statusOf('{"kind":"Status"}'), {}, 'neither');
  });

  test('a body that is not JSON is the message itself, trimmed and cut at 300 characters; an empty one says nothing', () => {
    assert.deepEqual(statusOf('  upstream connect error or disconnect/reset before headers\n'), { message: 'upstream connect error or disconnect/reset before headers' }, 'a proxy\'s plain-text answer, trimmed');
    const page = `<html>${'x'.repeat(400)}</html>`;
    assert.deepEqual(statusOf(page), { message: page.slice(0, 300) }, 'a long page, cut');
    assert.deepEqual(statusOf('   \n'), {}, 'whitespace is no message');
    assert.deepEqual(statusOf(''), {}, 'an empty body is no message');
  });

  test('anything that is no object, parsed or not, says nothing', () => {
    for (const body of [undefined, null, 42, true, 'null', '42', '"a JSON string"', '[]', []]) {
      assert.deepEqual(statusOf(body), {}, `nothing from ${JSON.stringify(body)}`);
    }
  });
});

/** The options every caller passes the generated client: its signal, through withSignal. */
function withOptions(signal: AbortSignal) {
  return { middleware: [withSignal(signal)], middlewareMergeStrategy: 'append' as const };
}

describe('on the real client, against the fake API server', () => {
  let api: FakeKubeApi;
  let core: CoreV1Api;
  before(async () => {
    api = await FakeKubeApi.start();
    api.addObject({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'edge', labels: { team: 'edge' } } });
    core = api.kubeConfig().makeApiClient(CoreV1Api);
  });
  after(() => api.close());

  test('withSignal gives the request its signal: aborting it ends a request the API server holds; an answer passes through', async () => {
    const namespace = await core.readNamespace({ name: 'edge' }, withOptions(new AbortController().signal));
    assert.deepEqual(namespace.metadata?.labels, { team: 'edge' }, 'the answer, through the middleware unchanged');

    api.fail({ method: 'GET', path: /\/namespaces\/edge$/, status: 'stall', times: 1 });
    const stopping = new AbortController();
    const sent = api.requests.length;
    const held = core.readNamespace({ name: 'edge' }, withOptions(stopping.signal));
    await waitUntil(() => api.requests.length > sent, 5_000, 'the request to reach the API server');
    stopping.abort();
    await assert.rejects(within(held, 5_000, 'the aborted request to end'), (error: Error) => error.name === 'AbortError', 'the held request ends, aborted');
  });

  test("statusOf reads an error answer's Status from what the client throws", async () => {
    const message = 'namespaces "edge" is forbidden: User "jane" cannot get resource "namespaces"';
    api.fail({ method: 'GET', path: /\/namespaces\/edge$/, status: 403, reason: 'Forbidden', message, times: 1 });
    const error = await core.readNamespace({ name: 'edge' }, withOptions(new AbortController().signal)).then(
      () => assert.fail('the fault answers 403'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof ApiException, `the client throws an ApiException, got ${String(error)}`);
    assert.equal(error.code, 403, 'the status code');
    assert.deepEqual(statusOf(error.body), { message, reason: 'Forbidden' }, "the API server's own words");
  });
});
