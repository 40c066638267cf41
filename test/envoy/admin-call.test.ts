/**
 * Every way an admin call can go wrong, through real sockets (test/support/fault-admin.ts): each settles by
 * its own timer at the latest, with the failure kind that says what happened, its socket destroyed and the
 * caller's abort listener removed.
 */
import assert from 'node:assert/strict';
import dns from 'node:dns';
import { getEventListeners } from 'node:events';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { ADMIN_BODY_LIMITS, EnvoyAdminClient } from '../../src/envoy/admin-client.js';
import { AdminRefusedError, AdminResponseError, AdminStatusError, AdminTimeoutError, AdminTransportError, type AdminFailureKind, type EnvoyAdminError } from '../../src/envoy/admin-errors.js';
import { FaultAdmin, type BehaviourSpec } from '../support/fault-admin.js';
import { waitUntil } from '../support/wait.js';

const TIMEOUT_MS = 300;
/**
 * How late past its timeout a call may settle: timers fire late by the event loop's lag, which a loaded CI
 * machine (or the CPU burner these tests are also run under) stretches to tens of milliseconds.
 */
const LATE_MS = 200;

async function setUp(t: TestContext, timeoutMs = TIMEOUT_MS) {
  const admin = await FaultAdmin.start({ listeners: { ingress: 2 } });
  t.after(() => admin.close());
  const client = new EnvoyAdminClient({ address: '127.0.0.1', port: admin.port, timeoutMs });
  t.after(() => client.close());
  return { admin, client };
}

interface Outcome {
  readonly error: EnvoyAdminError;
  readonly elapsedMs: number;
}

/** Runs `call` with a long-lived caller signal; it must fail. Checks the signal's listener is gone afterwards. */
async function failure(call: (signal: AbortSignal) => Promise<unknown>): Promise<Outcome> {
  const caller = new AbortController();
  const started = performance.now();
  const error = await call(caller.signal).then(
    (value) => assert.fail(`expected a failure, got ${JSON.stringify(value)}`),
    (rejection: unknown) => rejection as EnvoyAdminError,
  );
  const elapsedMs = performance.now() - started;
  assert.equal(getEventListeners(caller.signal, 'abort').length, 0, 'the abort listener is removed');
  return { error, elapsedMs };
}

function assertKind(outcome: Outcome, kind: AdminFailureKind, type: new (...args: never[]) => EnvoyAdminError, message: RegExp): void {
  assert.ok(outcome.error instanceof type, `${outcome.error.name}: ${outcome.error.message}`);
  assert.equal(outcome.error.kind, kind);
  assert.match(outcome.error.message, message);
}

/** The fault server sees every connection of ours closed: nothing is left open on either side. */
async function assertNoConnectionLeft(admin: FaultAdmin): Promise<void> {
  await waitUntil(() => admin.process.adminConnectionsActive === 0, 2_000, 'every admin connection closed');
}

describe('EnvoyAdminClient against faults: one hard timeout, the right kind', () => {
  test('101 Switching Protocols and a held socket: invalid-answer at once, not a hang', async (t) => {
    const { admin, client } = await setUp(t, 2_000);
    admin.script('/ready', 'upgrade');
    const outcome = await failure((signal) => client.serverState(signal));
    assertKind(outcome, 'invalid-answer', AdminResponseError, /^Envoy admin GET \/ready: answered HTTP 101 \(a protocol upgrade\), which Envoy's admin API never does/);
    assert.ok(outcome.elapsedMs < 1_000, `${outcome.elapsedMs} ms`);
    assert.equal(client.lastAnswer?.status, 101);
    await assertNoConnectionLeft(admin);
  });

  test('an endless body: timeout once the timer fires, though headers came, naming how far it got', async (t) => {
    const { admin, client } = await setUp(t);
    admin.script('/stats', 'endless');
    const outcome = await failure((signal) => client.countOpenConnections(signal));
    assertKind(outcome, 'timeout', AdminTimeoutError, /no complete answer within 300 ms from http:\/\/127\.0\.0\.1:\d+ \(after HTTP 200 and \d+ bytes of its body\): Envoy may be overloaded; it may have acted on the call$/);
    assert.ok(outcome.elapsedMs >= TIMEOUT_MS - 5 && outcome.elapsedMs < TIMEOUT_MS + LATE_MS, `${outcome.elapsedMs} ms`);
    await assertNoConnectionLeft(admin);
  });

  test('silence after accepting: timeout, "connected, no answer yet"', async (t) => {
    const { admin, client } = await setUp(t);
    admin.script('/server_info', 'silent');
    const outcome = await failure((signal) => client.serverInfo(signal));
    assertKind(outcome, 'timeout', AdminTimeoutError, /within 300 ms .*\(connected, no answer yet\)/);
    assert.ok(outcome.elapsedMs < TIMEOUT_MS + LATE_MS, `${outcome.elapsedMs} ms`);
    assert.equal(client.lastAnswer, undefined, 'no status line, no answer');
    await assertNoConnectionLeft(admin);
  });

  test('an answer just over the timeout is a timeout, and Envoy did act on it', async (t) => {
    const { admin, client } = await setUp(t);
    admin.script('/healthcheck/fail', `delay:${TIMEOUT_MS + 50}`);
    const outcome = await failure((signal) => client.failHealthChecks(signal));
    assertKind(outcome, 'timeout', AdminTimeoutError, /^Envoy admin POST \/healthcheck\/fail: no complete answer within 300 ms/);
    assert.equal(admin.calls[0]?.effect, 'applied', 'the call took effect though it timed out: hence "it may have acted on the call"');
    // Just under the timeout is an answer.
    admin.script('/healthcheck/ok', `delay:${TIMEOUT_MS - 150}`);
    await client.passHealthChecks();
    await assertNoConnectionLeft(admin);
  });

  test('a reset mid-body is a transport failure naming what had arrived', async (t) => {
    const { admin, client } = await setUp(t, 2_000);
    admin.script('/stats', 'reset');
    const outcome = await failure((signal) => client.countOpenConnections(signal));
    assertKind(outcome, 'transport', AdminTransportError, /was reset \(after HTTP 200 and \d+ bytes of its body\): Envoy may have exited or restarted$/);
    assert.ok(outcome.elapsedMs < 1_000, `${outcome.elapsedMs} ms`);
    await assertNoConnectionLeft(admin);
  });

  test('1e6-deep JSON is an invalid answer, refused before JSON.parse, quickly', async (t) => {
    const { admin, client } = await setUp(t, 5_000);
    // /server_info's 1 MiB limit refuses a 1e6-deep body (2 MB) by its size: 1e5 levels fit, and meet the depth check.
    const cases: Array<[BehaviourSpec, (signal: AbortSignal) => Promise<unknown>]> = [
      ['deep-json', (signal) => client.countOpenConnections(signal)],
      [{ kind: 'deep-json', depth: 100_000 }, (signal) => client.serverInfo(signal)],
    ];
    for (const [behaviour, call] of cases) {
      admin.script('*', behaviour);
      const outcome = await failure(call);
      assertKind(outcome, 'invalid-answer', AdminResponseError, /nested deeper than 32 levels/);
      assert.ok(outcome.elapsedMs < 1_000, `${outcome.elapsedMs} ms`);
    }
    admin.script('/server_info', 'deep-json');
    assertKind(await failure((signal) => client.serverInfo(signal)), 'invalid-answer', AdminResponseError, /the answer declares 2000010 bytes, over the 1048576-byte limit/);
    assert.equal(client.hasAnswered, false);
  });

  test('a body beyond the limit is an invalid answer, read no further, whether its length is declared or not', async (t) => {
    const { admin, client } = await setUp(t, 5_000);
    const cases: Array<[BehaviourSpec, string]> = [
      ['huge', 'went past'],
      [{ kind: 'huge', declareLength: true }, `declares ${16 * 1024 * 1024} bytes, over`],
    ];
    for (const [behaviour, how] of cases) {
      admin.script('/stats', behaviour);
      const outcome = await failure((signal) => client.countOpenConnections(signal));
      assertKind(outcome, 'invalid-answer', AdminResponseError, new RegExp(`the answer ${how} the ${ADMIN_BODY_LIMITS.stats}-byte limit for this call: not an answer Envoy gives$`));
      assert.ok(outcome.elapsedMs < 2_000, `${outcome.elapsedMs} ms`);
    }
    admin.script('/ready', { kind: 'huge', bytes: ADMIN_BODY_LIMITS.small + 1 });
    assertKind(await failure((signal) => client.serverState(signal)), 'invalid-answer', AdminResponseError, /went past the 65536-byte limit/);
    await assertNoConnectionLeft(admin);
  });

  test('a 500 is an invalid answer naming the status and the body', async (t) => {
    const { admin, client } = await setUp(t);
    admin.script('/healthcheck/fail', 'status:500');
    const outcome = await failure((signal) => client.failHealthChecks(signal));
    assertKind(outcome, 'invalid-answer', AdminStatusError, /^Envoy admin POST \/healthcheck\/fail: answered HTTP 500: "fault-admin: scripted HTTP 500\\n"$/);
    assert.deepEqual([client.lastAnswer?.status, client.lastAnswer?.excerpt], [500, 'fault-admin: scripted HTTP 500']);
    assert.equal(admin.calls[0]?.effect, 'withheld');
  });

  test('a stopped Envoy refuses: refused, at once', async (t) => {
    const { admin, client } = await setUp(t);
    await admin.stop();
    const outcome = await failure((signal) => client.failHealthChecks(signal));
    assertKind(outcome, 'refused', AdminRefusedError, /connection refused at http:\/\/127\.0\.0\.1:\d+ \(Envoy not running\?\)/);
    assert.ok(outcome.elapsedMs < TIMEOUT_MS, `${outcome.elapsedMs} ms`);
  });

  test('an interim 1xx other than 100, or something that is not HTTP, is an invalid answer', async (t) => {
    for (const reply of ['HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n', 'SSH-2.0-OpenSSH_9.6\r\n']) {
      const server = net.createServer((socket) => socket.once('data', () => socket.write(reply)));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
      const client = new EnvoyAdminClient({ address: '127.0.0.1', port: (server.address() as net.AddressInfo).port, timeoutMs: 2_000 });
      t.after(() => client.close());
      const outcome = await failure((signal) => client.serverState(signal));
      assertKind(outcome, 'invalid-answer', AdminResponseError, /answered (an interim HTTP 103|something that is not HTTP\/1\.1 \(HPE_)/);
      assert.ok(outcome.elapsedMs < 1_000, `${outcome.elapsedMs} ms`);
    }
  });

  test('a name that does not resolve is a transport failure pointing at --admin-address', async (t) => {
    // `.invalid` never resolves (RFC 6761); skip where the resolver cannot say so quickly (no DNS server reachable).
    const host = 'envoy-admin.invalid';
    const resolved = await new Promise<string | undefined>((resolve) => {
      const timer = setTimeout(() => resolve('slow'), 2_000);
      dns.lookup(host, (error) => {
        clearTimeout(timer);
        resolve(error?.code);
      });
    });
    if (resolved !== 'ENOTFOUND') return t.skip(`the resolver answered ${String(resolved)} for ${host}`);
    const client = new EnvoyAdminClient({ address: host, port: 9901, timeoutMs: 5_000 });
    t.after(() => client.close());
    assertKind(await failure((signal) => client.serverState(signal)), 'transport', AdminTransportError, /cannot resolve "envoy-admin\.invalid" \(ENOTFOUND\): check --admin-address/);
  });

  test("the caller's abort ends a held call at once, as a transport failure; close() ends the others", async (t) => {
    const { admin, client } = await setUp(t, 10_000);
    admin.script('*', 'silent', 'silent');
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    const started = performance.now();
    await assert.rejects(client.serverState(controller.signal), (error: unknown) => error instanceof AdminTransportError && /cancelled by the caller/.test(error.message));
    assert.ok(performance.now() - started < 1_000, `the abort ended the call at once: ${performance.now() - started} ms`);
    assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
    await assert.rejects(client.serverState(controller.signal), /cancelled by the caller before it started/);

    const held = client.countOpenConnections();
    await waitUntil(() => admin.calls.length === 2, 2_000, 'the second call held');
    client.close();
    await assert.rejects(held, (error: unknown) => error instanceof AdminTransportError && /the admin client was closed/.test(error.message));
    await assertNoConnectionLeft(admin);
  });
});
