import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ADMIN_FAILURE_KINDS, AdminRefusedError, AdminResponseError, AdminStatusError, AdminTimeoutError, AdminTransportError, failureKindOf, noFailures } from '../../src/envoy/admin-errors.js';

describe('admin errors', () => {
  test('each error has the kind the drain reports it by, and names the call in its message', () => {
    const cases = [
      [new AdminRefusedError('GET /ready', 'connection refused'), 'refused'],
      [new AdminTimeoutError('GET /ready', 'no answer'), 'timeout'],
      [new AdminStatusError('GET /ready', 500, 'oops'), 'invalid-answer'],
      [new AdminResponseError('GET /ready', 'not JSON'), 'invalid-answer'],
      [new AdminTransportError('GET /ready', 'reset'), 'transport'],
    ] as const;
    for (const [error, kind] of cases) {
      assert.equal(failureKindOf(error), kind, `${error.name} is a ${kind} failure`);
      assert.match(error.message, /^Envoy admin GET \/ready: /, `${error.name} names the call first`);
    }
    assert.deepEqual(new Set(cases.map(([, kind]) => kind)), new Set(ADMIN_FAILURE_KINDS), 'every kind has an error');
  });

  test('anything that is not an admin error failed in transport', () => {
    assert.equal(failureKindOf(new Error('boom')), 'transport', 'a plain Error');
    assert.equal(failureKindOf('a string'), 'transport', 'a thrown string');
  });

  test('a status error carries the status, and the body cut to 200 characters in its message', () => {
    const error = new AdminStatusError('POST /healthcheck/fail', 503, 'x'.repeat(1_000));
    assert.equal(error.status, 503, 'the status');
    assert.equal(error.body.length, 1_000, 'the whole body for the caller');
    assert.ok(error.message.length < 300, `the message stays short, got ${error.message.length} characters`);
  });

  test('noFailures counts 0 of every kind, a fresh record each time', () => {
    const first = noFailures();
    assert.deepEqual(Object.keys(first).sort(), [...ADMIN_FAILURE_KINDS].sort(), 'one count per kind');
    first.refused += 1;
    assert.equal(noFailures().refused, 0, 'a new record is not the one counted into');
  });
});
