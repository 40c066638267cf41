/**
 * What the admin client tells about the answers it got: `lastAnswer` (any HTTP answer, for diagnostics)
 * apart from `hasAnswered` (a valid Envoy answer), and implausible stat values read through it.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/clock.js';
import { AdminRefusedError, AdminResponseError, AdminStatusError } from '../../src/envoy/admin-errors.js';
import { EnvoyAdminClient, type AdminAnswer } from '../../src/envoy/admin-client.js';
import { ImplausibleStatError } from '../../src/envoy/stats.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { freePort } from '../support/ports.js';

async function setUp(t: TestContext, options: EnvoyEmulatorOptions = {}) {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  const client = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
  t.after(() => client.close());
  return { emulator, client };
}

describe('EnvoyAdminClient: lastAnswer', () => {
  test('an admin API answering 500 to everything has answered, though never validly', async (t) => {
    const { emulator, client } = await setUp(t, { fault: { kind: 'status', status: 500 } });
    // Read through a function: an assertion on the property would narrow it for the rest of the test.
    const lastAnswer = (): AdminAnswer | undefined => client.lastAnswer;
    assert.equal(lastAnswer(), undefined, 'nothing before the first call');
    // `at` is on the client's clock, monotonic: the system clock's here.
    const before = systemClock.now();
    await assert.rejects(client.serverState(), AdminStatusError);
    await assert.rejects(client.failHealthChecks(), AdminStatusError);
    assert.equal(client.hasAnswered, false, 'no valid Envoy answer');
    const answer = lastAnswer();
    assert.ok(answer !== undefined, 'the admin API answered');
    assert.deepEqual(
      { endpoint: answer.endpoint, status: answer.status, excerpt: answer.excerpt },
      { endpoint: 'POST /healthcheck/fail', status: 500, excerpt: 'emulated admin failure (HTTP 500)' },
      'the latest answer, its body trimmed',
    );
    assert.ok(answer.at >= before && answer.at <= systemClock.now(), 'the answer is time-stamped within the call');

    // Envoy gone afterwards: the last answer stays, and its time tells how old it is.
    await emulator.setFault({ kind: 'down' });
    await assert.rejects(client.serverState(), AdminRefusedError);
    assert.equal(lastAnswer(), answer);
  });

  test('a 200 that is not Envoy is an answer too, as is a valid one; a long body is cut to an excerpt', async (t) => {
    const { emulator, client } = await setUp(t, { fault: { kind: 'garbage' } });
    await assert.rejects(client.countOpenConnections(), AdminResponseError);
    assert.equal(client.lastAnswer?.status, 200);
    assert.match(client.lastAnswer.excerpt, /^<!DOCTYPE html>.*<\/html>$/);
    assert.equal(client.hasAnswered, false);

    await emulator.setFault({ kind: 'none' });
    await client.countOpenConnections();
    const stats = client.lastAnswer;
    assert.ok(stats !== undefined, 'the stats answered');
    assert.match(stats.endpoint, /^GET \/stats\?format=json/);
    assert.ok(stats.excerpt.startsWith('{ "stats": [ { "name"') && stats.excerpt.endsWith('…') && stats.excerpt.length === 121, stats.excerpt);
    assert.equal(await client.serverState(), 'LIVE');
    assert.deepEqual([client.lastAnswer?.endpoint, client.lastAnswer?.status, client.lastAnswer?.excerpt], ['GET /ready', 200, 'LIVE']);
    assert.equal(client.hasAnswered, true);
  });

  test('a closed port never answered', async (t) => {
    const client = new EnvoyAdminClient({ address: '127.0.0.1', port: await freePort(), timeoutMs: 1_000 });
    t.after(() => client.close());
    await assert.rejects(client.serverState(), AdminRefusedError);
    assert.equal(client.lastAnswer, undefined);
    assert.equal(client.hasAnswered, false);
  });
});

describe('EnvoyAdminClient: implausible connection gauges', () => {
  test('a gauge of 1e308 is an AdminResponseError naming the stat and value, never "Infinity connections"', async (t) => {
    const stat = 'listener.0.0.0.0_9999.downstream_cx_active';
    const { client } = await setUp(t, { extraGauges: { [stat]: 1e308 } });
    const error = await client.countOpenConnections().then(
      (count) => assert.fail(`counted ${count.total} connections`),
      (rejection: unknown) => rejection,
    );
    assert.ok(error instanceof AdminResponseError, String(error));
    assert.ok(error.cause instanceof ImplausibleStatError, 'caused by an ImplausibleStatError');
    assert.equal(error.cause.stat, stat);
    assert.match(error.message, /^Envoy admin GET \/stats\?.*: Envoy admin \/stats reports listener\.0\.0\.0\.0_9999\.downstream_cx_active = 1e\+308, which is no count of open connections/);
    assert.equal(client.hasAnswered, false, 'an unreadable count is no valid answer');
    assert.equal(client.lastAnswer?.status, 200);
  });

  test('a negative gauge is rejected the same way, not counted as 0', async (t) => {
    const { client } = await setUp(t, { extraGauges: { 'listener.0.0.0.0_9999.downstream_cx_active': -3 } });
    await assert.rejects(client.countOpenConnections(), (error: unknown) => {
      assert.ok(error instanceof AdminResponseError, 'an AdminResponseError');
      assert.match(error.message, /downstream_cx_active = -3, which is no count of open connections \(negative/);
      return true;
    });
  });
});
