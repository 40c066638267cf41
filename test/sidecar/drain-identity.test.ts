/**
 * Which Envoy process a read came from (src/envoy/process/identity.ts), on the paths a review of the drain found wrong:
 * a connection Envoy closes at accept, a proxy in front of the admin API, two reads in flight at once, steps taken
 * before the process was identified, a /shutdown once stopping. Real sockets where the admin client is involved.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/clock.js';
import { AdminTimeoutError } from '../../src/envoy/admin-errors.js';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { Drain } from '../../src/sidecar/drain.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { openJournal } from '../../src/sidecar/journal.js';
import { DrainSupervisor } from '../../src/sidecar/supervisor.js';
import { MemoryLog } from '../support/memory-log.js';
import { ScriptedEnvoy } from '../support/scripted-envoy.js';

const SETTINGS: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 40, 'min-open-connections': 0, 'drain-timeout': 1_200, 'admin-refusals': 3 };

/**
 * An admin API on a real socket that answers stats with `counter()` as listener.admin.downstream_cx_total and 50
 * open connections, and OK to POSTs; `onConnection` sees each accepted socket first.
 */
async function adminServer(t: TestContext, counter: () => number, onConnection: (socket: Socket) => boolean = () => true): Promise<WitnessedAdminClient> {
  const server = http.createServer((request, response) => {
    response.setHeader('connection', 'close');
    if (request.url?.startsWith('/stats')) {
      response.end(JSON.stringify({ stats: [{ name: 'listener.admin.downstream_cx_total', value: counter() }, { name: 'listener.ingress.downstream_cx_active', value: 50 }] }));
    } else {
      response.end('OK\n');
    }
  });
  server.on('connection', (socket: Socket) => {
    if (!onConnection(socket)) socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = new WitnessedAdminClient({ address: '127.0.0.1', port: (server.address() as AddressInfo).port, timeoutMs: 300 });
  t.after(() => {
    client.close();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return client;
}

describe('the admin counter tells processes apart, and only when it can', () => {
  test('a connection Envoy closes at accept (over its global connection limit, uncounted) is not taken for another process', async (t) => {
    let total = 0;
    let rejectNext = 0;
    const client = await adminServer(
      t,
      () => total,
      () => {
        if (rejectNext > 0) {
          rejectNext -= 1; // TcpListenerImpl closes it before downstream_cx_total counts it
          return false;
        }
        total += 1;
        return true;
      },
    );
    const drain = new Drain(client, SETTINGS, new MemoryLog(), systemClock);
    const outcome = drain.start();
    setTimeout(() => (rejectNext = 1), 150);
    const result = await outcome;
    assert.deepEqual([result.reason, result.openConnections], ['deadline', 50], 'one Envoy process throughout, with 50 connections open');
  });

  test('a proxy in front of the admin API (a counter that does not follow our connections): never "replaced", never ended by a count; the watch warns', async (t) => {
    let upstream = 7; // the proxy's own pooled connections upstream: they barely grow
    const client = await adminServer(t, () => upstream);
    const drain = new Drain(client, { ...SETTINGS, 'min-open-connections': 100 }, new MemoryLog(), systemClock);
    const result = await drain.start();
    assert.equal(result.reason, 'deadline', 'a count at or below 100 from a process that cannot be identified does not end the drain');

    const log = new MemoryLog();
    const supervisor = new DrainSupervisor(client, { drain: SETTINGS, recoverEnvoy: false, watchIntervalMs: 20, readTimeoutMs: 300 }, openJournal(''), log, systemClock);
    const watching = supervisor.watch();
    for (let i = 0; i < 100 && log.events('admin_marks_unproven').length === 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    upstream += 1;
    supervisor.stop();
    await watching;
    assert.equal(log.events('admin_marks_unproven').length, 1);
    assert.equal(supervisor.snapshot().rearms, 0);
  });
});

/** One Envoy process that never restarts, whose stats answers come 15 ms late (its mark read when the answer is written). */
const oneEnvoy = (): ScriptedEnvoy => new ScriptedEnvoy({ delayMs: { count: 15 } });

describe('the supervisor compares each read with the one before it', () => {
  test('repeated /shutdowns after a drain, overlapping the watch reads of the same process, re-arm nothing', async () => {
    const envoy = oneEnvoy();
    const supervisor = new DrainSupervisor(envoy, { drain: SETTINGS, recoverEnvoy: false, watchIntervalMs: 20, readTimeoutMs: 500 }, openJournal(''), new MemoryLog(), systemClock);
    const first = await supervisor.shutdown();
    const watching = supervisor.watch();
    for (let i = 0; i < 20; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 7 + (i % 5)));
      assert.equal(await supervisor.shutdown(), first);
    }
    assert.equal(supervisor.snapshot().rearms, 0);
    supervisor.stop();
    await watching;
  });

  test('a /shutdown once the sidecar is stopping starts no drain: nothing is sent to Envoy', async () => {
    const envoy = oneEnvoy();
    const supervisor = new DrainSupervisor(envoy, { drain: SETTINGS, recoverEnvoy: false, watchIntervalMs: 20, readTimeoutMs: 500 }, openJournal(''), new MemoryLog(), systemClock);
    supervisor.stop();
    const outcome = await supervisor.shutdown();
    assert.equal(outcome.state, 'interrupted');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(envoy.mutations(), []);
  });
});

describe('the drain counts only the process whose health checks it failed', () => {
  test('steps taken before the first read that answered are sent again to the process that answered', async () => {
    const envoy = new ScriptedEnvoy({ mark: 5_000 });
    envoy.answers.count = [new AdminTimeoutError('GET /stats', 'no complete answer within 300 ms'), 0];
    // Replaced right after taking the steps: the first /drain_listeners is the first process's last call.
    envoy.answers.drain = [
      () => {
        envoy.replace();
        return 'ok';
      },
      'ok',
    ];
    const log = new MemoryLog();
    const outcome = await new Drain(envoy, { ...SETTINGS, 'check-delay': 30 }, log, systemClock).start();
    const failedOn = envoy.calls.filter((call) => call.name === 'fail').map((call) => call.process);
    assert.deepEqual(failedOn, [1, 2], 'the process pinned got its own /healthcheck/fail');
    assert.equal(outcome.reason, 'connections-closed');
    assert.equal(log.events('drain_steps_resent').length, 1);
  });
});
