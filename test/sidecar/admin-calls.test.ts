/**
 * countedAdmin (src/sidecar/admin-calls.ts): every admin call the sidecar makes counted by how it ended, for
 * shutdown_manager_envoy_admin_up and shutdown_manager_envoy_admin_failures_total; a call the sidecar cancelled
 * itself says nothing about Envoy and is not counted.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import {
  AdminRefusedError,
  AdminResponseError,
  AdminStatusError,
  AdminTimeoutError,
  AdminTransportError,
  noFailures,
  type AdminFailureKind,
} from '../../src/envoy/admin-errors.js';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { countedAdmin } from '../../src/sidecar/admin-calls.js';
import { waitUntil } from '../support/wait.js';

/** Every call countedAdmin passes on, each counted. */
const CALLS = ['serverState', 'serverInfo', 'failHealthChecks', 'drainListeners', 'countOpenConnections', 'passHealthChecks', 'quit'] as const;
type CallName = (typeof CALLS)[number];

/** A stand-in for the client: each call answers with `answer(name, signal)`, and is recorded. */
function fakeClient() {
  const calls: { readonly name: CallName; readonly signal: AbortSignal | undefined }[] = [];
  const fake = {
    calls,
    answer: (name: CallName, _signal: AbortSignal | undefined): Promise<unknown> => Promise.resolve(`${name} answered`),
    address: '127.0.0.1:19000',
    hasAnswered: false,
    lastAnswer: undefined as { status: number } | undefined,
    connectionMarker: () => 7,
    connectedSince: (marker: number) => marker * 2,
  };
  const client: Record<string, unknown> = fake;
  for (const name of CALLS) {
    client[name] = (signal: AbortSignal | undefined) => {
      calls.push({ name, signal });
      return fake.answer(name, signal);
    };
  }
  return { fake, client: client as unknown as WitnessedAdminClient };
}

function call(envoy: ReturnType<typeof countedAdmin>['envoy'], name: CallName, signal?: AbortSignal): Promise<unknown> {
  return (envoy[name] as (signal?: AbortSignal) => Promise<unknown>)(signal);
}

function failures(counts: Partial<Record<AdminFailureKind, number>>): Record<AdminFailureKind, number> {
  return { ...noFailures(), ...counts };
}

describe('countedAdmin', () => {
  test('before any call ended: up is null and no failure is counted', () => {
    const { client } = fakeClient();
    assert.deepEqual(countedAdmin(client).counts(), { up: null, failures: failures({}) }, 'nothing known yet');
  });

  test('every call goes to the client with its signal, its answer passed back unchanged, and sets up', async () => {
    const { fake, client } = fakeClient();
    const { envoy, counts } = countedAdmin(client);
    const signal = new AbortController().signal;
    for (const name of CALLS) {
      assert.equal(await call(envoy, name, signal), `${name} answered`, `${name}: the client's answer`);
    }
    assert.deepEqual(
      fake.calls.map(({ name }) => name),
      CALLS,
      'each call reached the client once',
    );
    assert.ok(
      fake.calls.every((made) => made.signal === signal),
      "each call carried the caller's signal",
    );
    assert.deepEqual(counts(), { up: true, failures: failures({}) }, 'up, and no failure');
  });

  test('each failed call is counted by its kind, passed on unchanged, and sets up to false until the next answer', async () => {
    const { fake, client } = fakeClient();
    const { envoy, counts } = countedAdmin(client);
    const errors: readonly (readonly [CallName, Error])[] = [
      ['serverState', new AdminRefusedError('GET /ready', 'connection refused')],
      ['serverInfo', new AdminTimeoutError('GET /server_info', 'no answer within 1000 ms')],
      ['failHealthChecks', new AdminStatusError('POST /healthcheck/fail', 503, 'unavailable')],
      ['drainListeners', new AdminResponseError('POST /drain_listeners', 'not as Envoy answers')],
      ['countOpenConnections', new AdminTransportError('GET /stats', 'socket hang up')],
      ['passHealthChecks', new Error('not an admin error')],
      ['quit', new AdminRefusedError('POST /quitquitquit', 'connection refused')],
    ];
    for (const [name, error] of errors) {
      fake.answer = () => Promise.reject(error);
      await assert.rejects(call(envoy, name), (thrown) => thrown === error, `${name}: the client's own error`);
      assert.equal(counts().up, false, `${name} failed: down`);
    }
    assert.deepEqual(
      counts().failures,
      failures({ refused: 2, timeout: 1, 'invalid-answer': 2, transport: 2 }),
      'a status and a bad body are invalid answers; an error of no admin kind failed in transport',
    );
    fake.answer = () => Promise.resolve('LIVE');
    await call(envoy, 'serverState');
    assert.deepEqual(
      counts(),
      { up: true, failures: failures({ refused: 2, timeout: 1, 'invalid-answer': 2, transport: 2 }) },
      'an answer sets up again; failures are counters, never going down',
    );
  });

  test("a call the caller aborted is not counted, nor does it change up; one whose signal was not aborted is", async () => {
    const { fake, client } = fakeClient();
    const { envoy, counts } = countedAdmin(client);
    await call(envoy, 'serverState');
    const stopping = new AbortController();
    fake.answer = (_name, signal) =>
      new Promise((_resolve, reject) => signal?.addEventListener('abort', () => reject(new AdminTransportError('GET /stats', 'aborted')), { once: true }));
    const cancelled = call(envoy, 'countOpenConnections', stopping.signal);
    stopping.abort();
    await assert.rejects(cancelled, AdminTransportError, "the caller still gets the call's error");
    assert.deepEqual(counts(), { up: true, failures: failures({}) }, 'the cancelled call left the counts as they were');

    fake.answer = () => Promise.reject(new AdminTimeoutError('GET /stats', 'no answer'));
    await assert.rejects(call(envoy, 'countOpenConnections', new AbortController().signal), AdminTimeoutError, 'the timeout passed on');
    await assert.rejects(call(envoy, 'countOpenConnections'), AdminTimeoutError, 'the timeout passed on, with no signal at all');
    assert.deepEqual(counts(), { up: false, failures: failures({ timeout: 2 }) }, 'both failures counted');
  });

  test("counts() is a copy: changing it changes nothing; the client's properties are read through, live", async () => {
    const { fake, client } = fakeClient();
    const { envoy, counts } = countedAdmin(client);
    const taken = counts();
    (taken.failures as Record<AdminFailureKind, number>).refused = 99;
    assert.equal(counts().failures.refused, 0, 'the counter is untouched');
    assert.equal(envoy.address, '127.0.0.1:19000', "the client's address");
    assert.equal(envoy.hasAnswered, false, 'not answered yet');
    fake.hasAnswered = true;
    fake.lastAnswer = { status: 200 };
    assert.equal(envoy.hasAnswered, true, "the client's hasAnswered, read at each access");
    assert.deepEqual(envoy.lastAnswer, { status: 200 }, "the client's last answer, read at each access");
    assert.equal(envoy.connectionMarker(), 7, "the client's marker");
    assert.equal(envoy.connectedSince(3), 6, "the client's count since a marker");
    assert.equal(fake.calls.length, 0, 'none of these is an admin call');
  });

  test('against a real admin API: answers, a 500, a closed port and an aborted slow call', { timeout: 20_000 }, async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const client = new WitnessedAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 10_000 });
    t.after(() => client.close());
    const { envoy, counts } = countedAdmin(client);

    assert.equal(await envoy.serverState(new AbortController().signal), 'LIVE', "the emulator's state");
    assert.deepEqual(counts(), { up: true, failures: failures({}) }, 'a valid answer');

    await emulator.setFault({ kind: 'status', status: 500 });
    await assert.rejects(envoy.serverInfo(), AdminStatusError, 'a 500 fails the call');
    assert.deepEqual(counts(), { up: false, failures: failures({ 'invalid-answer': 1 }) }, 'a 500 is an invalid answer');

    await emulator.setFault({ kind: 'slow', delayMs: 60_000 });
    const requests = (): number => emulator.statValues().find((stat) => stat.name === 'http.admin.downstream_rq_total')?.value ?? 0;
    const before = requests();
    const stopping = new AbortController();
    const slow = envoy.countOpenConnections(stopping.signal);
    await waitUntil(() => requests() > before, 5_000, 'the read to reach the admin API');
    stopping.abort();
    await assert.rejects(slow, 'the aborted call fails');
    assert.deepEqual(counts(), { up: false, failures: failures({ 'invalid-answer': 1 }) }, 'the aborted call is not counted');

    await emulator.setFault({ kind: 'down' });
    await assert.rejects(envoy.failHealthChecks(new AbortController().signal), AdminRefusedError, 'nothing listens');
    assert.deepEqual(counts(), { up: false, failures: failures({ 'invalid-answer': 1, refused: 1 }) }, 'a closed port is refused');
  });
});
