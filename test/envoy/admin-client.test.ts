import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { AdminRefusedError, AdminResponseError, AdminStatusError, AdminTimeoutError, AdminTransportError, EnvoyAdminError } from '../../src/envoy/admin-errors.js';
import { EnvoyAdminClient, type EnvoyAdminOptions } from '../../src/envoy/admin-client.js';
import { CONNECTION_STATS_FILTER } from '../../src/envoy/stats.js';
import { closeAll, openHttpConnection, openTcpConnections } from '../support/connections.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { freePorts } from '../support/ports.js';
import { waitUntil } from '../support/wait.js';

async function setUp(t: TestContext, options: EnvoyEmulatorOptions = {}, timeoutMs = 1_000, clientOptions: Partial<EnvoyAdminOptions> = {}) {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  const client = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs, ...clientOptions });
  t.after(() => client.close());
  return { emulator, client };
}

describe('EnvoyAdminClient', () => {
  test('fails health checks and drains every listener with POST, in that order', async (t) => {
    const { emulator, client } = await setUp(t);
    await client.failHealthChecks();
    await client.drainListeners();
    assert.deepEqual(
      emulator.adminRequests.map((request) => `${request.method} ${request.path}?${request.query} ${request.status}`),
      ['POST /healthcheck/fail? 200', 'POST /drain_listeners?graceful&skip_exit 200'],
    );
    assert.equal(emulator.isHealthCheckFailed, true);
    assert.equal(emulator.drainScope, 'all');
  });

  test('inboundOnly adds inboundonly to the drain', async (t) => {
    const { emulator, client } = await setUp(t, {}, 1_000, { inboundOnly: true });
    await client.drainListeners();
    assert.equal(emulator.adminRequests.at(-1)?.query, 'graceful&skip_exit&inboundonly');
    assert.equal(emulator.drainScope, 'inbound-only');
  });

  test('hasAnswered: false until a valid answer, whichever call brings it', async (t) => {
    const { emulator, client } = await setUp(t);
    assert.equal(client.hasAnswered, false);
    assert.equal(client.address, `127.0.0.1:${emulator.ports.admin}`);
    assert.equal(await client.serverState(), 'LIVE');
    assert.equal(client.hasAnswered, true);

    const second = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
    t.after(() => second.close());
    await second.countOpenConnections();
    assert.equal(second.hasAnswered, true, 'a stats answer counts');
  });

  test('serverState: a 503 naming a state is Envoy answering; garbage and refusals are not', async (t) => {
    const { emulator, client } = await setUp(t);
    await client.failHealthChecks();
    const fresh = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
    t.after(() => fresh.close());
    assert.equal(await fresh.serverState(), 'DRAINING', '/ready answers 503 DRAINING');
    assert.equal(fresh.hasAnswered, true);

    for (const fault of [{ kind: 'garbage' }, { kind: 'empty' }, { kind: 'status', status: 500 }, { kind: 'down' }] as const) {
      await emulator.setFault(fault);
      const other = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
      t.after(() => other.close());
      await assert.rejects(other.serverState(), EnvoyAdminError, fault.kind);
      // A 200 whose body is not Envoy's "OK" (garbage, empty) is no proof either.
      await other.failHealthChecks().catch(() => undefined);
      assert.equal(other.hasAnswered, false, fault.kind);
    }
  });

  test('counts HTTP and TCP proxy connections, not its own admin connection', async (t) => {
    const { emulator, client } = await setUp(t);
    const held = [await openHttpConnection(emulator.ports.http), ...(await openTcpConnections(emulator.ports.tcp, 3))];
    t.after(() => closeAll(held));
    await waitUntil(() => emulator.openConnections.tcp === 3, 2_000, 'connections counted');
    const count = await client.countOpenConnections();
    assert.equal(count.total, 4);
    assert.deepEqual(count.byListener, { [emulator.listenerNames.http]: 1, [emulator.listenerNames.tcp]: 3 });
    const request = emulator.adminRequests.at(-1);
    assert.equal(request?.path, '/stats');
    assert.match(request?.query ?? '', /format=json/);
    // Every listener, used or not: `usedonly` would hide a listener that never had a connection.
    assert.doesNotMatch(request?.query ?? '', /usedonly/);
    assert.equal(new URLSearchParams(request?.query).get('filter'), CONNECTION_STATS_FILTER);
    assert.ok((count.adminConnectionsTotal ?? 0) >= 1, 'the admin connection counter, which counts this very call');
  });

  test('counts only the named listeners when asked', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const client = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000, listeners: [emulator.listenerNames.http] });
    t.after(() => client.close());
    const held = [await openHttpConnection(emulator.ports.http), ...(await openTcpConnections(emulator.ports.tcp, 2))];
    t.after(() => closeAll(held));
    await waitUntil(() => emulator.openConnections.tcp === 2, 2_000, 'connections counted');
    assert.equal((await client.countOpenConnections()).total, 1);
  });

  test('a listener name Envoy does not have is reported missing, next to the names it has', async (t) => {
    const [httpPort, tcpPort] = (await freePorts(2)) as [number, number];
    const [http, tcp] = [`0.0.0.0_${httpPort}`, `0.0.0.0_${tcpPort}`];
    // A typo of the HTTP listener's name (its port's last digit dropped), and the TCP listener's right name.
    const typo = http.slice(0, -1);
    const { emulator, client } = await setUp(t, { httpPort, tcpPort }, 1_000, { listeners: [typo, tcp] });
    assert.deepEqual(emulator.listenerNames, { http, tcp });
    const held = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(held));
    await waitUntil(() => emulator.openConnections.tcp === 2, 2_000, 'connections counted');
    const count = await client.countOpenConnections();
    assert.deepEqual(count.missingListeners, [typo]);
    assert.deepEqual(count.availableListeners, [http, tcp].sort(), 'every data listener, not admin');
    assert.deepEqual([count.total, count.byListener], [2, { [tcp]: 2 }]);
    // The admin listener's counter counts this very call's connection, and grows with each of ours.
    assert.equal(count.adminConnectionsTotal, 1);
    assert.equal((await client.countOpenConnections()).adminConnectionsTotal, 2);
  });

  test('a closed admin port is an AdminRefusedError', async (t) => {
    const { emulator, client } = await setUp(t);
    await emulator.setFault({ kind: 'down' });
    await assert.rejects(client.failHealthChecks(), (error: unknown) => {
      assert.ok(error instanceof AdminRefusedError, 'an AdminRefusedError');
      assert.match(error.message, /POST \/healthcheck\/fail: connection refused at http:\/\/127\.0\.0\.1:\d+/);
      return true;
    });
  });

  test('a slow admin is an AdminTimeoutError after the timeout, not later', async (t) => {
    const { client } = await setUp(t, { fault: { kind: 'slow', delayMs: 2_000 } }, 100);
    const started = Date.now();
    await assert.rejects(client.countOpenConnections(), AdminTimeoutError);
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 90 && elapsed < 1_000, `took ${elapsed} ms`);
  });

  test('a 500 is an AdminStatusError carrying the status and body', async (t) => {
    const { client } = await setUp(t, { fault: { kind: 'status', status: 500 } });
    await assert.rejects(client.countOpenConnections(), (error: unknown) => {
      assert.ok(error instanceof AdminStatusError, 'an AdminStatusError');
      assert.equal(error.status, 500);
      assert.match(error.message, /HTTP 500: "emulated admin failure/);
      return true;
    });
  });

  test('a 200 with an empty body is an AdminResponseError, never 0 connections', async (t) => {
    const { client } = await setUp(t, { fault: { kind: 'empty' } });
    await assert.rejects(client.countOpenConnections(), (error: unknown) => {
      assert.ok(error instanceof AdminResponseError, 'an AdminResponseError');
      assert.match(error.message, /not understood \(an empty answer where JSON was asked for\)/);
      return true;
    });
    assert.equal(client.hasAnswered, false);
  });

  test('a plain-text stats answer is an AdminResponseError: JSON was asked for', async (t) => {
    // A proxy or an old Envoy ignoring format=json: text output must not be read as counts.
    const server = http.createServer((_, response) => response.end('listener.0.0.0.0_8080.downstream_cx_active: 0\n'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const client = new EnvoyAdminClient({ address: '127.0.0.1', port: (server.address() as AddressInfo).port, timeoutMs: 1_000 });
    t.after(() => client.close());
    await assert.rejects(client.countOpenConnections(), AdminResponseError);
  });

  test('garbage instead of stats is an AdminResponseError', async (t) => {
    const { client } = await setUp(t, { fault: { kind: 'garbage' } });
    await assert.rejects(client.countOpenConnections(), (error: unknown) => {
      assert.ok(error instanceof AdminResponseError, 'an AdminResponseError');
      assert.match(error.message, /not understood/);
      return true;
    });
  });

  test("a 200 to a mutation that is not Envoy's OK is an AdminResponseError: a data listener's catch-all on a wrong port", async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    // --admin-port set to a data listener's port: its direct_response route answers 200 "ok" to anything.
    const client = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.http, timeoutMs: 1_000 });
    t.after(() => client.close());
    for (const mutation of [() => client.failHealthChecks(), () => client.drainListeners()]) {
      await assert.rejects(mutation(), (error: unknown) => {
        assert.ok(error instanceof AdminResponseError, 'an AdminResponseError');
        assert.match(error.message, /POST \/(healthcheck\/fail|drain_listeners\?graceful&skip_exit): answered 200 with "ok\\n", not Envoy's "OK"/);
        return true;
      });
    }
    assert.equal(client.hasAnswered, false);
    assert.deepEqual([emulator.isHealthCheckFailed, emulator.drainScope], [false, 'none']);

    await emulator.setFault({ kind: 'garbage' });
    const admin = new EnvoyAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
    t.after(() => admin.close());
    await assert.rejects(admin.failHealthChecks(), AdminResponseError);
  });

  test('a GET on a mutation would be refused: the client never sends one', async (t) => {
    const { emulator, client } = await setUp(t);
    await client.failHealthChecks();
    await client.drainListeners();
    assert.ok(emulator.adminRequests.every((request) => request.status === 200), 'every admin call was answered 200: no GET on a mutation');
  });

  test("a caller's abort cancels the call as a transport error, distinct from a timeout", async (t) => {
    const { client } = await setUp(t, { fault: { kind: 'slow', delayMs: 2_000 } }, 5_000);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    await assert.rejects(client.countOpenConnections(controller.signal), (error: unknown) => {
      assert.ok(error instanceof AdminTransportError && !(error instanceof AdminTimeoutError), 'a transport error, not a timeout');
      assert.ok(error instanceof EnvoyAdminError, 'an EnvoyAdminError');
      return true;
    });
  });

});
