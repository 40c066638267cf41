/**
 * The drain server's connection policy (ConnectionLimits): connections that send nothing are closed, the
 * number open is bounded, and at the bound a new connection is still served by closing the oldest one
 * without a request in progress. Through the built process under a 1,024 open-file limit, and in-process
 * with short limits. Run `npm run build` first (npm test does).
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, test, type TestContext } from 'node:test';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { systemClock } from '../../src/clock.js';
import { openJournal } from '../../src/sidecar/journal.js';
import { DrainSupervisor } from '../../src/sidecar/supervisor.js';
import { startDrainServer, type DrainServer } from '../../src/sidecar/server.js';
import type { ConnectionLimits } from '../../src/sidecar/server/connection-limits.js';
import { closeAll, httpRequest, openTcpConnection, openTcpConnections, requestOn, type HeldConnection, type SimpleResponse } from '../support/connections.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { MemoryLog } from '../support/memory-log.js';
import { spawnSidecar } from '../support/sidecar-process.js';
import { waitUntil, within } from '../support/wait.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

/** Connections opened at once: enough to be a flood, few enough not to overflow the listen backlog. */
const BATCH = 100;

/** Client connections that never send a byte, with which of them the server has closed. */
class SilentConnections {
  readonly all: HeldConnection[] = [];
  private readonly closed = new Set<HeldConnection>();

  async open(port: number, count: number): Promise<void> {
    for (let opened = 0; opened < count; opened += BATCH) {
      const batch = await openTcpConnections(port, Math.min(BATCH, count - opened));
      for (const connection of batch) void connection.closed.then(() => this.closed.add(connection));
      this.all.push(...batch);
    }
  }

  get openCount(): number {
    return this.all.length - this.closed.size;
  }

  isClosed(connection: HeldConnection): boolean {
    return this.closed.has(connection);
  }

  close(): Promise<void> {
    return closeAll(this.all);
  }
}

/** Milliseconds an async call takes. */
async function timed<T>(call: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const started = performance.now();
  const result = await call();
  return { result, ms: performance.now() - started };
}

/** Generous: a probe's default timeout. The measured figures are printed; a loaded 2-core machine stays far below. */
const PROBE_TIMEOUT_MS = 1_000;

describe('sidecar process: a port flooded with silent connections', () => {
  const FILE_LIMIT = 1_024;
  const TOKEN = 'flood-test-token';
  const auth = { authorization: `Bearer ${TOKEN}` };

  test("under a 1,024 open-file limit and 1,100 silent connections, /healthz stays fast and the kubelet's /shutdown drains", async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const sidecar = await spawnSidecar(
      [`--admin-port=${emulator.ports.admin}`, '--check-delay=0s', '--check-interval=50ms', '--drain-timeout=30s', `--shutdown-token=${TOKEN}`],
      { fileLimit: FILE_LIMIT },
    );
    t.after(() => sidecar.kill());
    const limits = await sidecar.waitForLog((line) => line['event'] === 'connection_limits');
    const max = Number(limits['max_connections']);
    assert.ok(max >= 8 && max <= FILE_LIMIT - 64, `the limit leaves descriptors for the rest of the process: ${max}`);

    const silent = new SilentConnections();
    t.after(() => silent.close());
    await silent.open(sidecar.port, 1_100);
    // The server closed the oldest to stay within its limit; the newest are all still open.
    await waitUntil(() => silent.openCount <= max, 10_000, `at most ${max} silent connections open (${silent.openCount})`);
    assert.ok(silent.all.slice(-BATCH).every((connection) => !silent.isClosed(connection)), 'the newest silent connections were kept');
    assert.ok(silent.isClosed(silent.all[0]!), 'the oldest silent connection was closed');

    const probes = await measureHealthz(sidecar.url('/healthz'), 5);
    t.diagnostic(`/healthz under 1,100 silent connections: ${probes.map((ms) => ms.toFixed(1)).join(', ')} ms`);
    assert.ok(Math.max(...probes) < PROBE_TIMEOUT_MS, `/healthz took ${Math.max(...probes).toFixed(0)} ms`);

    // The kubelet's preStop, while a client of Envoy still holds the drain.
    const envoyClient = await openTcpConnection(emulator.ports.tcp);
    t.after(() => envoyClient.close());
    const shutdownSentAt = performance.now();
    const shutdown = httpRequest(sidecar.url('/shutdown'), { headers: auth, timeoutMs: 30_000 });
    await sidecar.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 1, 10_000);
    // More silent connections while the answer is held: the held /shutdown is never the one closed.
    await silent.open(sidecar.port, 600);
    const duringDrain = await measureHealthz(sidecar.url('/healthz'), 3);
    t.diagnostic(`/healthz during the drain, 600 more silent connections: ${duringDrain.map((ms) => ms.toFixed(1)).join(', ')} ms`);
    assert.ok(Math.max(...duringDrain) < PROBE_TIMEOUT_MS, `the probes stayed fast during the drain: ${Math.max(...duringDrain)} ms`);

    await envoyClient.close();
    const releasedAt = performance.now();
    const answer = await shutdown;
    const afterRelease = performance.now() - releasedAt;
    t.diagnostic(`/shutdown answered ${afterRelease.toFixed(0)} ms after Envoy's last connection closed, ${(performance.now() - shutdownSentAt).toFixed(0)} ms after it was sent`);
    assert.equal(answer.status, 200, answer.body);
    assert.match(answer.body, /^drained: 0 open connections/);
    assert.ok(afterRelease < 5_000, `drained ${afterRelease.toFixed(0)} ms after the last connection closed`);

    const closedLog = await sidecar.waitForLog((line) => line['event'] === 'connections_closed');
    assert.ok(Number(closedLog['shed']) > 0, JSON.stringify(closedLog));
    assert.equal(closedLog['level'], 'warn');

    // Those left are closed by the request-head timeout (5 s by default), not kept for a minute or more.
    const waitingSince = performance.now();
    await waitUntil(() => silent.openCount === 0, 15_000, `every silent connection closed (${silent.openCount} open)`);
    t.diagnostic(`the last silent connections were closed ${(performance.now() - waitingSince).toFixed(0)} ms after the drain`);
    assert.equal(sidecar.child.exitCode, null, 'the sidecar is still running');
    assert.ok(!sidecar.logs.some((line) => line['level'] === 'error'), 'nothing logged as an error');
  });
});

/** `count` sequential /healthz calls, each on a new connection as the kubelet's probes are; their durations. */
async function measureHealthz(url: string, count: number): Promise<number[]> {
  const durations: number[] = [];
  for (let i = 0; i < count; i++) {
    const { result, ms } = await timed(() => httpRequest(url, { timeoutMs: 5_000 }));
    assert.equal(result.status, 200);
    durations.push(ms);
  }
  return durations;
}

interface InProcess {
  readonly emulator: EnvoyEmulator;
  readonly server: DrainServer;
  readonly log: MemoryLog;
  url(path: string): string;
  /** A /shutdown held while `envoyClient` is open, and whether it has settled. */
  heldShutdown(): { response: Promise<SimpleResponse>; settled: () => boolean };
  /** An open client connection of Envoy: the drain waits for it. */
  readonly envoyClient: HeldConnection;
}

/** A real drain against the emulator, served with `limits`; one Envoy client connection open so that /shutdown is held. */
async function serve(t: TestContext, limits: Partial<ConnectionLimits>): Promise<InProcess> {
  const emulator = await EnvoyEmulator.start();
  t.after(() => emulator.close());
  const envoy = new WitnessedAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 1_000 });
  const log = new MemoryLog();
  const drain = new DrainSupervisor(
    envoy,
    {
      drain: { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 20, 'min-open-connections': 0, 'drain-timeout': 20_000, 'admin-refusals': 3 },
      recoverEnvoy: false,
      watchIntervalMs: 20,
      readTimeoutMs: 1_000,
    },
    openJournal(''),
    log,
    systemClock,
  );
  const server = await startDrainServer({ drain, waitWindowMs: 100, host: '127.0.0.1', port: 0, log, connectionLimits: limits });
  t.after(async () => {
    drain.stop();
    await server.close();
    envoy.close();
  });
  const envoyClient = await openTcpConnection(emulator.ports.tcp);
  t.after(() => envoyClient.close());
  const url = (path: string): string => `http://127.0.0.1:${server.port}${path}`;
  const heldShutdown = (): { response: Promise<SimpleResponse>; settled: () => boolean } => {
    let settled = false;
    const response = httpRequest(url('/shutdown'), { timeoutMs: 20_000 });
    response.then(
      () => (settled = true),
      () => (settled = true),
    );
    return { response, settled: () => settled };
  };
  return { emulator, server, log, url, heldShutdown, envoyClient };
}

/** Resolves once the drain has polled Envoy: the /shutdown request is then certainly received and held. */
async function drainPolling(emulator: EnvoyEmulator): Promise<void> {
  await emulator.waitForAdminRequest((request) => request.path === '/stats');
}

describe('drain server: connections without a request', () => {
  test('a connection that sends no complete request head in time is closed; a held /shutdown answer is not', async (t) => {
    const requestWithinMs = 200;
    const { emulator, server, log, heldShutdown, envoyClient } = await serve(t, { requestWithinMs, maxConnections: 50 });
    const shutdown = heldShutdown();
    await drainPolling(emulator);

    const openedAt = performance.now();
    const silent = await openTcpConnections(server.port, 3);
    const partial = await openTcpConnection(server.port);
    t.after(() => closeAll([...silent, partial]));
    partial.socket.write('GET /healthz HTTP/1.1\r\nHost: test\r\n'); // the head's closing blank line never comes
    await within(Promise.all([...silent, partial].map((connection) => connection.closed)), 5_000, 'the silent connections to be closed');
    const closedAfter = performance.now() - openedAt;
    t.diagnostic(`silent connections closed ${closedAfter.toFixed(0)} ms after opening (limit ${requestWithinMs} ms)`);
    assert.ok(closedAfter >= requestWithinMs - 1, `closed after ${closedAfter.toFixed(0)} ms, before the limit`);

    // A keep-alive connection is held to the same limit after its answer.
    const keepAlive = await openTcpConnection(server.port);
    t.after(() => keepAlive.close());
    // Timed from the request's sending, before the server's answer (its idle timer starts then): a busy client sees
    // the answer late, and would find the close earlier than the limit after it.
    const askedAt = performance.now();
    assert.equal((await requestOn(keepAlive.socket, '/healthz')).status, 200);
    await within(keepAlive.closed, 5_000, 'the idle keep-alive connection to be closed');
    const idleFor = performance.now() - askedAt;
    assert.ok(idleFor >= requestWithinMs - 1, `closed ${idleFor.toFixed(0)} ms after the request, before the limit of ${requestWithinMs} ms`);

    // The /shutdown answer has now been held several times the limit: it is still waiting for the drain.
    await waitUntil(() => performance.now() - openedAt >= 3 * requestWithinMs, 5_000, 'three limits elapsed');
    assert.equal(shutdown.settled(), false, 'the held /shutdown was answered or cut');
    await envoyClient.close();
    const answer = await shutdown.response;
    assert.equal(answer.status, 200, answer.body);

    const reports = log.events('connections_closed');
    assert.ok(reports.length >= 1, 'the slow connection was reported');
    assert.equal(reports[0]!['timed_out'], 1, 'the first close is reported at once');
    assert.equal(server.counters.connectionsClosed.timedOut, 5, 'three silent, one partial head, one idle keep-alive');
  });

  test('at the limit, a new connection is served by closing the oldest waiting one; busy ones are kept', async (t) => {
    const { emulator, server, log, url, heldShutdown, envoyClient } = await serve(t, { requestWithinMs: 60_000, maxConnections: 4 });
    const shutdown = heldShutdown();
    await drainPolling(emulator);

    // One connection busy (the held /shutdown), three silent: the limit of 4 is reached.
    const silent: HeldConnection[] = [];
    t.after(() => closeAll(silent));
    for (let i = 0; i < 3; i++) silent.push(await openTcpConnection(server.port));
    const [first, second, third] = silent as [HeldConnection, HeldConnection, HeldConnection];
    await waitUntil(() => server.connections.waiting === 3 && server.connections.busy === 1, 5_000, 'the server to see them');

    assert.equal((await httpRequest(url('/healthz'))).status, 200, 'a new connection at the limit is served');
    await within(first.closed, 5_000, 'the oldest silent connection to be closed');
    // Once that /healthz connection is gone (Connection: close), one more silent brings back the limit.
    await waitUntil(() => server.connections.waiting === 2, 5_000, 'the /healthz connection to close');
    silent.push(await openTcpConnection(server.port));
    await waitUntil(() => server.connections.waiting === 3, 5_000, 'the server to see it');
    assert.equal((await httpRequest(url('/drain'))).status, 200);
    await within(second.closed, 5_000, 'the next oldest silent connection to be closed');
    assert.deepEqual(server.connections, { waiting: 2, busy: 1 }, 'the third and the fourth silent connections, and the held /shutdown');
    assert.equal(third.socket.destroyed, false);
    assert.equal(shutdown.settled(), false);

    await envoyClient.close();
    assert.equal((await shutdown.response).status, 200, 'the busy connection was never closed to make room');
    const firstReport = log.events('connections_closed')[0];
    assert.deepEqual([firstReport?.['shed'], firstReport?.['max_connections']], [1, 4], 'the first close is reported at once');
    assert.equal(server.counters.connectionsClosed.shed, 2);
  });

  test('when every connection has a request in progress, a new one is closed and the limit holds', async (t) => {
    const { emulator, server, log, url, heldShutdown, envoyClient } = await serve(t, { requestWithinMs: 60_000, maxConnections: 2 });
    const calls = [heldShutdown(), heldShutdown()];
    await drainPolling(emulator);
    await waitUntil(() => server.connections.busy === 2, 5_000, 'both /shutdown requests received');

    await assert.rejects(httpRequest(url('/healthz')), /socket hang up|ECONNRESET/);
    assert.deepEqual(log.events('connections_closed').map((report) => report['refused']), [1]);
    assert.equal(server.counters.connectionsClosed.refused, 1);
    assert.deepEqual(server.connections, { waiting: 0, busy: 2 });
    assert.ok(calls.every((call) => !call.settled()), 'no held call has settled');

    await envoyClient.close();
    assert.deepEqual((await Promise.all(calls.map((call) => call.response))).map((answer) => answer.status), [200, 200]);
    assert.equal((await httpRequest(url('/healthz'))).status, 200, 'served again once the answers are written');
  });
});
